"""A model inside a Hugging Face cache mounts so that every link resolves (issue 30 item 7).

huggingface_hub keeps a repository as ``models--<org>--<name>/`` holding
``blobs/<sha>`` (the files' content, named by their hash), ``refs/main`` (the
commit the branch points at) and ``snapshots/<commit>/…``, whose files are
relative symbolic links into ``blobs/`` (``../../blobs/<sha>``, one ``../``
more per sub-directory).  The tests lay such a tree out in a temporary
directory, render specs whose models lie in it, and resolve every link the
container sees: the host paths each rendered volume mounts are mapped to the
container paths, and each link is followed there, in the container's file
system, component by component.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import posixpath
import shlex
from pathlib import Path, PurePosixPath

import pytest
from test_draft import BIG, SMALL

from layoutgen.inputs.source import parse
from layoutgen.render.artifacts import render
from layoutgen.render.validate import Validated, validate_document, validate_file
from layoutgen.solve.mounts import HUB_DIR, hf_cache, model_volume

from conftest import ROOT
from realtools import quadlet_dryrun, shellcheck, systemd_argv, unit_values

REV = "a9962c23e50d9c352e09fe0d9cb131026f4e6441"


# ------------------------------------------------------------- the cache tree


def _blob(repo: Path, content: bytes, lfs: bool) -> Path:
    """A blob as huggingface_hub names it: the sha256 of an LFS file, else the git
    blob sha1 of a regular file."""
    if lfs:
        name = hashlib.sha256(content).hexdigest()
    else:
        name = hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()
    blob = repo / "blobs" / name
    blob.parent.mkdir(parents=True, exist_ok=True)
    blob.write_bytes(content)
    return blob


def hf_repo(hub: Path, repo_id: str, files: dict[str, bytes], rev: str = REV) -> Path:
    """``hub/models--ORG--NAME`` laid out as huggingface_hub's cache lays it; returns
    the snapshot directory."""
    repo = hub / ("models--" + repo_id.replace("/", "--"))
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(rev)  # the commit hash, no newline
    snapshot = repo / "snapshots" / rev
    for rel, content in files.items():
        blob = _blob(repo, content, lfs=rel.endswith((".gguf", ".safetensors")))
        pointer = snapshot / rel
        pointer.parent.mkdir(parents=True, exist_ok=True)
        # huggingface_hub's _create_symlink: relative to the pointer's directory
        pointer.symlink_to(os.path.relpath(blob, pointer.parent))
    return snapshot


def test_the_tree_is_laid_out_as_huggingface_hub_lays_it(tmp_path: Path) -> None:
    snapshot = hf_repo(tmp_path, "org/Big-GGUF", {"F16/big-00001-of-00002.gguf": b"GGUF1"})
    link = snapshot / "F16" / "big-00001-of-00002.gguf"
    assert os.readlink(link) == "../../../blobs/" + hashlib.sha256(b"GGUF1").hexdigest()
    assert link.read_bytes() == b"GGUF1"
    assert (tmp_path / "models--org--Big-GGUF" / "refs" / "main").read_text() == REV


# ------------------------------------------------------- the container's view


def volumes(text: str) -> list[tuple[str, str]]:
    """(host, container) of every ``--volume`` in a rendered podman script."""
    words = shlex.split(text.replace("\\\n", " "))
    return [
        (host, inside)
        for flag, value in itertools.pairwise(words)
        if flag == "--volume"
        for host, inside, _opts in [value.split(":", 2)]
    ]


def _host_of(path: str, mounts: list[tuple[str, str]]) -> str | None:
    """The host path a container path reads (the longest mount that holds it)."""
    best = None
    for host, inside in mounts:
        if (path == inside or path.startswith(inside + "/")) and (
            best is None or len(inside) > len(best[1])
        ):
            best = (host, inside)
    return None if best is None else best[0] + path[len(best[1]) :]


def resolve(path: str, mounts: list[tuple[str, str]], hops: int = 0) -> str:
    """``path`` resolved as the container resolves it: component by component, each
    link's target read relative to the container directory it sits in.  Fails when
    any step leaves the mounts (the file the server would open does not exist)."""
    assert hops < 40, f"{path}: too many links"
    cur = "/"
    for part in PurePosixPath(path).parts[1:]:
        cur = posixpath.join(cur, part)
        host = _host_of(cur, mounts)
        if host is None:
            continue  # a directory podman creates to hold a mount point
        assert os.path.lexists(host), f"{cur} (host {host}) does not exist in the container"
        if os.path.islink(host):
            target = os.readlink(host)
            joined = (
                target if target.startswith("/") else posixpath.join(posixpath.dirname(cur), target)
            )
            cur = resolve(posixpath.normpath(joined), mounts, hops + 1)
    assert _host_of(cur, mounts) is not None, f"{path} resolves to {cur}, outside every mount"
    return cur


def every_link_resolves(mounts: list[tuple[str, str]]) -> int:
    """Follow every link under every mounted host directory, in the container's
    view; every one must end on a regular file inside a mount.  Returns the count."""
    n = 0
    for host, inside in mounts:
        for dirpath, _dirs, files in os.walk(host):
            for name in files:
                link = Path(dirpath) / name
                if not link.is_symlink():
                    continue
                seen = inside + str(link)[len(host) :]
                final = _host_of(resolve(seen, mounts), mounts)
                assert final is not None and Path(final).is_file() and not Path(final).is_symlink()
                n += 1
    return n


def test_the_check_catches_a_snapshot_mounted_alone(tmp_path: Path) -> None:
    """What render did before: the snapshot's directory alone, links pointing out of it."""
    snapshot = hf_repo(tmp_path, "org/Big-GGUF", {"F16/big.gguf": b"GGUF"})
    mounts = [(str(snapshot / "F16"), "/models/big")]
    with pytest.raises(AssertionError, match=r"outside every mount|does not exist"):
        every_link_resolves(mounts)


# ------------------------------------------------------------------- the specs

SPEC = """\
host:
  name: box
  cpu: {cores: 16, threads: 32}
  ram: 256GiB
  ram_reserve: 16GiB
  podman: "5.4"
  gpus:
    - {id: gpu0, index: 0, vram: 24GiB, reserve: 1GiB}
    - {id: gpu1, index: 1, vram: 24GiB, reserve: 1GiB}
models:
  big:
    path: %(big)s
    profile: big.yaml
  small:
    path: %(small)s
    profile: small.yaml
runtimes:
  llama:
    kind: llama.cpp
    image: ghcr.io/ggml-org/llama.cpp:server-cuda-b11434
    version: b11434
services:
  coder:
    model: big
    runtime: llama
    role: worker
    port: 8001
    ctx: 8192
    gpus: [gpu0, gpu1]
    draft: {model: small, gpus: [gpu1]}
  helper:
    model: small
    runtime: llama
    role: worker
    port: 8002
    ctx: 4096
    gpus: [gpu1]
"""

SHARDS = [f"F16/big-f16-{i:05d}-of-00003.gguf" for i in (1, 2, 3)]


def _cache(hub: Path) -> Path:
    return hf_repo(
        hub,
        "org/Big-GGUF",
        {
            **{name: f"shard {name}".encode() for name in SHARDS},
            "small-f16.gguf": b"small",
            "README.md": b"# Big\n",
            ".gitattributes": b"*.gguf filter=lfs\n",
        },
    )


def _render(tmp_path: Path, big: str, small: str) -> tuple[Validated, dict[str, str]]:
    (tmp_path / "big.yaml").write_text(BIG)
    (tmp_path / "small.yaml").write_text(SMALL)
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC % {"big": big, "small": small})
    v = validate_file(spec, "spec.yaml")
    return v, render(v, "spec.yaml")


def _flag(argv: tuple[str, ...], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_a_split_gguf_and_its_draft_in_a_cache_resolve_in_the_container(tmp_path: Path) -> None:
    snapshot = _cache(tmp_path / "hub")
    repo = snapshot.parent.parent
    v, files = _render(tmp_path, str(snapshot / SHARDS[0]), str(snapshot / "small-f16.gguf"))
    script = files["box/podman/coder.sh"]
    mounts = volumes(script)
    # the repository folder, read-only with the shared label, once for model and draft
    assert mounts == [(str(repo), str(HUB_DIR / repo.name))]
    assert f"--volume {repo}:{HUB_DIR / repo.name}:ro,z" in script
    argv = v.plan.service("coder").argv
    model, draft = _flag(argv, "-m"), _flag(argv, "-md")
    assert model == f"/hub/models--org--Big-GGUF/snapshots/{REV}/{SHARDS[0]}"
    assert draft == f"/hub/models--org--Big-GGUF/snapshots/{REV}/small-f16.gguf"
    # the server opens the first shard, finds the others beside it, and the draft
    for name in (
        model,
        draft,
        *(str(PurePosixPath(model).parent / PurePosixPath(s).name) for s in SHARDS),
    ):
        opened = _host_of(resolve(name, mounts), mounts)
        assert opened is not None and Path(opened).read_bytes()
    assert every_link_resolves(mounts) == len(SHARDS) + 3


def test_services_using_one_repository_share_one_mount_spelling(tmp_path: Path) -> None:
    snapshot = _cache(tmp_path / "hub")
    _v, files = _render(tmp_path, str(snapshot / SHARDS[0]), str(snapshot / "small-f16.gguf"))
    lines = {
        unit: sorted(line for line in text.splitlines() if line.startswith("Volume="))
        for unit, text in files.items()
        if unit.endswith(".container")
    }
    assert lines["box/quadlet/coder.container"] == lines["box/quadlet/helper.container"]
    (volume,) = lines["box/quadlet/helper.container"]
    assert volume == f"Volume={snapshot.parent.parent}:/hub/models--org--Big-GGUF:ro,z"


def test_the_quadlet_generator_and_shellcheck_take_the_cache_mount(tmp_path: Path) -> None:
    snapshot = _cache(tmp_path / "hub")
    v, files = _render(tmp_path, str(snapshot / SHARDS[0]), str(snapshot / "small-f16.gguf"))
    units = tmp_path / "units"
    units.mkdir()
    for path, text in files.items():
        if path.endswith(".container"):
            (units / Path(path).name).write_text(text)
    result = quadlet_dryrun(units)
    assert result.ok, (result.rc, result.warnings)
    repo = snapshot.parent.parent
    for name in ("coder", "helper"):
        argv = systemd_argv(result.exec_start(f"{name}.service"))
        # quadlet passes the volume through as podman's -v, and the planned argv after the image
        assert argv[argv.index("-v") + 1] == f"{repo}:/hub/{repo.name}:ro,z"
        assert argv.count("-v") == 1
        image = "ghcr.io/ggml-org/llama.cpp:server-cuda-b11434"
        assert argv[argv.index(image) + 1 :] == list(v.plan.service(name).argv[1:])
        assert unit_values(result.units[f"{name}.service"], "Service", "ExecStart")
    scripts = []
    for path, text in files.items():
        if path.endswith(".sh"):
            scripts.append(tmp_path / Path(path).name)
            scripts[-1].write_text(text)
    rc, out = shellcheck(scripts)
    assert rc == 0, out


def test_a_vllm_checkpoint_in_a_cache_resolves_in_the_container(tmp_path: Path) -> None:
    """vLLM reads a snapshot directory: config.json, the tokenizer, the shards."""
    layout = ROOT / "layouts" / "vllm-tower-seed004.yaml"
    text = layout.read_text()
    paths = {}
    for old, repo_id in (
        ("/srv/models/genesis/Qwen3.6-27B-int4-AutoRound", "org/Qwen3.6-27B-int4-AutoRound"),
        ("/srv/models/aeon/Qwen3.6-27B-NVFP4", "org/Qwen3.6-27B-NVFP4"),
    ):
        snapshot = hf_repo(
            tmp_path / "hub",
            repo_id,
            {
                "config.json": b"{}",
                "tokenizer.json": b"{}",
                "model-00001-of-00002.safetensors": b"1",
                "model-00002-of-00002.safetensors": b"2",
                "model.safetensors.index.json": b"{}",
            },
        )
        assert old in text
        text = text.replace(old, str(snapshot))
        paths[repo_id] = snapshot
    v = validate_document(parse(text, "layouts/vllm-tower-seed004.yaml", layout))
    files = render(v, "layouts/vllm-tower-seed004.yaml")
    for service, repo_id in (
        ("genesis", "org/Qwen3.6-27B-int4-AutoRound"),
        ("aeon", "org/Qwen3.6-27B-NVFP4"),
    ):
        mounts = volumes(files[f"tower-vllm/podman/{service}.sh"])
        repo = paths[repo_id].parent.parent
        assert mounts == [(str(repo), f"/hub/{repo.name}")]
        model = _flag(v.plan.service(service).argv, "--model")
        assert model == f"/hub/{repo.name}/snapshots/{REV}"
        for name in ("config.json", "tokenizer.json", "model-00002-of-00002.safetensors"):
            opened = _host_of(resolve(f"{model}/{name}", mounts), mounts)
            assert opened is not None and Path(opened).is_file()
        assert every_link_resolves(mounts) == 5


# ---------------------------------------------------------- lexical recognition


@pytest.mark.parametrize(
    ("path", "repo", "inside"),
    [
        (
            "/mnt/data/models/models--ubergarm--GLM-5.1-GGUF/snapshots/"
            f"{REV}/IQ3_KS/GLM-5.1-IQ3_KS-00001-of-00008.gguf",
            "/mnt/data/models/models--ubergarm--GLM-5.1-GGUF",
            f"/hub/models--ubergarm--GLM-5.1-GGUF/snapshots/{REV}/IQ3_KS/"
            "GLM-5.1-IQ3_KS-00001-of-00008.gguf",
        ),
        (  # a vLLM checkpoint: the snapshot directory itself
            f"/home/u/.cache/huggingface/hub/models--Qwen--Qwen3-32B/snapshots/{REV}",
            "/home/u/.cache/huggingface/hub/models--Qwen--Qwen3-32B",
            f"/hub/models--Qwen--Qwen3-32B/snapshots/{REV}",
        ),
        (  # a repository without an organisation
            f"/srv/hub/models--gpt2/snapshots/{REV}/model.gguf",
            "/srv/hub/models--gpt2",
            f"/hub/models--gpt2/snapshots/{REV}/model.gguf",
        ),
    ],
)
def test_a_cache_path_is_recognised_without_the_file(path: str, repo: str, inside: str) -> None:
    assert not Path(path).exists()
    assert model_volume(path, "m") == (f"{repo}:/hub/{PurePosixPath(repo).name}:ro,z", inside)


@pytest.mark.parametrize(
    "path",
    [
        "/srv/models/big/big.gguf",
        "/srv/models--x/big.gguf",  # no snapshots/ below it
        "/srv/models--x/snapshots",  # no revision
        "/srv/models--x/blobs/0123abcd",  # a blob named directly
        "/srv/models--/snapshots/r/x.gguf",  # no repository name
    ],
)
def test_other_paths_mount_their_directory_as_before(path: str) -> None:
    assert hf_cache(path) is None
    parent, name = str(PurePosixPath(path).parent), PurePosixPath(path).name
    assert model_volume(path, "m") == (f"{parent}:/models/m:ro,z", f"/models/m/{name}")


def test_the_glm_example_mounts_its_repository_folder() -> None:
    """layouts/glm51-4-n-cpu-moe-64-1gpu.yaml names a model in a cache that is not here."""
    layout = ROOT / "layouts" / "glm51-4-n-cpu-moe-64-1gpu.yaml"
    v = validate_file(layout, "layouts/glm51-4-n-cpu-moe-64-1gpu.yaml")
    files = render(v, "layouts/glm51-4-n-cpu-moe-64-1gpu.yaml")
    repo = "/mnt/data/models/models--ubergarm--GLM-5.1-GGUF"
    assert volumes(files["compute-glm51-4/podman/grandpa.sh"]) == [
        (repo, "/hub/models--ubergarm--GLM-5.1-GGUF")
    ]
    model = _flag(v.plan.service("grandpa").argv, "-m")
    assert model == v.spec.models["glm-5.1-iq3_ks"].path.replace("/mnt/data/models/", "/hub/", 1)


def test_import_brings_the_cache_path_back(tmp_path: Path) -> None:
    """import(render(spec)): the model path read through the rendered volume is the
    spec's, for a model and its draft in one cache repository."""
    from ruamel.yaml import YAML

    from layoutgen.importer import SpecGpu, import_text

    snapshot = _cache(tmp_path / "hub")
    big, small = str(snapshot / SHARDS[0]), str(snapshot / "small-f16.gguf")
    v, files = _render(tmp_path, big, small)
    gpus = [SpecGpu(g.id, g.index, g.uuid) for g in v.spec.host.gpus]
    for service, path in (("coder", big), ("helper", small)):
        imported = import_text(files[f"box/podman/{service}.sh"], f"{service}.sh", gpus=gpus)
        (model,) = YAML(typ="safe").load(imported.yaml)["models"].values()
        assert model["path"] == path
