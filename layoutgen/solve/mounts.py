"""Where a model's files are mounted in a container, and the path the server is given.

A plain model (``/srv/models/x/x.gguf``, or a checkpoint directory) is mounted
by its directory at ``/models/<model id>`` (DESIGN §7).

A model inside a Hugging Face cache is different: huggingface_hub keeps each
repository as ``…/models--<org>--<name>/`` holding ``blobs/<sha>`` (the
content), ``refs/<branch>`` (a commit hash) and ``snapshots/<rev>/…``, whose
files are relative symbolic links into ``../../blobs/`` (one ``../`` more per
sub-directory).  Mounting the snapshot's directory leaves every link
pointing outside the mount, and the server cannot open the model.  So the
whole repository folder is mounted, keeping its layout, at
``/hub/models--<org>--<name>`` and the server is given the snapshot path
below it: every link resolves inside the mount, for the first shard of a
split GGUF, its siblings and a vLLM checkpoint's files alike.  The mount
depends on the repository alone, so every service (and draft) using that
repository spells it the same way.

The path is recognised lexically (``…/models--X/snapshots/<rev>/…``): the
spec's model need not exist on the machine that renders.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath

from layoutgen.errors import LayoutgenError

MODELS_DIR = PurePosixPath("/models")
#: where Hugging Face cache repositories appear in a container (outside /models,
#: whose entries are model ids: no id can collide with a repository folder)
HUB_DIR = PurePosixPath("/hub")
#: huggingface_hub's folder prefix for a model repository (``models--org--name``)
REPO_PREFIX = "models--"


class MountError(LayoutgenError):
    """Two mounts of one container that would land on the same path."""


@dataclass(frozen=True)
class HfCachePath:
    """A path inside a Hugging Face cache repository: the repository folder on the
    host, and the rest below it (``snapshots/<rev>/…``)."""

    repo: PurePosixPath
    below: PurePosixPath


def hf_cache(path: str) -> HfCachePath | None:
    """The cache repository ``path`` lies in, when it names something in one of its
    snapshots (``…/models--X/snapshots/<rev>`` or below); else None."""
    parts = PurePosixPath(path).parts
    # the innermost repository folder: a cache may itself sit under a folder so named
    for i in range(len(parts) - 3, 0, -1):
        name = parts[i]
        if (
            name.startswith(REPO_PREFIX)
            and len(name) > len(REPO_PREFIX)
            and parts[i + 1] == "snapshots"
        ):
            return HfCachePath(PurePosixPath(*parts[: i + 1]), PurePosixPath(*parts[i + 1 :]))
    return None


def model_volume(path: str, model_id: str) -> tuple[str, str]:
    """``(podman volume, path inside the container)`` for a model file or directory:
    its Hugging Face cache repository whole, else its own directory."""
    hf = hf_cache(path)
    if hf is not None:
        inside = HUB_DIR / hf.repo.name
        return f"{hf.repo}:{inside}:ro,z", str(inside / hf.below)
    host = PurePosixPath(path)
    inside = MODELS_DIR / model_id
    return f"{host.parent}:{inside}:ro,z", str(inside / host.name)


def container_path(path: str, model_id: str) -> str:
    """Where the server finds the model (file or directory) in a container."""
    return model_volume(path, model_id)[1]


def unique(volumes: list[str]) -> list[str]:
    """The volumes once each, in order (a model and its draft from one cache repository
    share a mount); two different host paths on one container path are an error
    (podman refuses duplicate mount destinations)."""
    out: list[str] = []
    seen: dict[str, str] = {}
    for volume in volumes:
        host, inside, _options = volume.split(":", 2)
        if inside in seen:
            if seen[inside] != host:
                raise MountError(
                    f"{seen[inside]} and {host} would both be mounted at {inside} in one "
                    "container: two Hugging Face caches hold a repository of the same name; "
                    "keep the model and its draft in one cache"
                )
            continue
        seen[inside] = host
        out.append(volume)
    return out
