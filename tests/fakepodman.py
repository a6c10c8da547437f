"""A ``podman`` script for tests: answers as podman 5 does, from files, and logs its argv.

Real podman cannot run here (no container store, no GPUs, no network), but what
layoutgen asks of it is small: ``--version``, ``image inspect`` (a JSON list of one
record per image, ``Config.Labels`` and ``Config.Entrypoint`` inside), ``images
--format json`` (a JSON list, ``Names`` per image), ``run`` (the container's output)
and ``rm``.  Each call's argv goes to ``log`` one word per line, a blank line after,
so a test can check what was asked (no ``--device``, ``--network=none``, ``--`` before
the image).
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: the labels an image built FROM nvidia/cuda:*-ubuntu24.04 inherits (the Ubuntu base's
#: own, as ``podman image inspect ubuntu:24.04`` shows them)
UBUNTU_LABELS = {
    "maintainer": "NVIDIA CORPORATION <cudatools@nvidia.com>",
    "org.opencontainers.image.ref.name": "ubuntu",
    "org.opencontainers.image.version": "24.04",
}


def inspect_record(name: str, entrypoint: list[str], labels: dict[str, str]) -> dict[str, Any]:
    """One ``podman image inspect`` record, with the fields podman 5 prints."""
    digest = "sha256:" + "7c" * 32
    return {
        "Id": "3f" * 32,
        "Digest": digest,
        "RepoTags": [name],
        "RepoDigests": [f"{name.rsplit(':', 1)[0]}@{digest}"],
        "Parent": "",
        "Comment": "",
        "Created": "2025-08-14T03:11:52.123456789Z",
        "Config": {
            "Env": [
                "PATH=/usr/local/nvidia/bin:/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:"
                "/usr/sbin:/usr/bin:/sbin:/bin",
                "NVIDIA_VISIBLE_DEVICES=all",
                "NVIDIA_DRIVER_CAPABILITIES=compute,utility",
                "CUDA_VERSION=12.8.1",
            ],
            "Entrypoint": entrypoint,
            "WorkingDir": "/app",
            "Labels": labels,
        },
        "Version": "",
        "Author": "",
        "Architecture": "amd64",
        "Os": "linux",
        "Size": 2_345_678_901,
        "VirtualSize": 2_345_678_901,
        "GraphDriver": {"Name": "overlay", "Data": {"UpperDir": "/var/lib/containers/x/diff"}},
        "RootFS": {"Type": "layers", "Layers": ["sha256:" + "a1" * 32]},
        "Labels": labels,
        "Annotations": {},
        "ManifestType": "application/vnd.oci.image.manifest.v1+json",
        "User": "",
        "History": [{"created": "2025-08-14T03:11:50Z", "created_by": "ENTRYPOINT"}],
        "NamesHistory": [name],
    }


def images_entry(names: list[str]) -> dict[str, Any]:
    """One entry of ``podman images --format json``."""
    return {
        "Id": "9b" * 32,
        "ParentId": "",
        "RepoTags": None,
        "RepoDigests": [],
        "Size": 1_234_567_890,
        "SharedSize": 0,
        "VirtualSize": 1_234_567_890,
        "Labels": UBUNTU_LABELS,
        "Containers": 0,
        "Names": names,
        "Digest": "sha256:" + "5e" * 32,
        "History": names,
        "Created": 1723605112,
        "CreatedAt": "2025-08-14T03:11:52Z",
    }


@dataclass
class FakePodman:
    """``bin/podman`` under ``root``; ``images`` maps an image name to its inspect
    record; ``run_stderr`` is what ``podman run`` prints (the container's stderr), or
    ``run_sleeps`` seconds of silence."""

    root: Path
    images: dict[str, dict[str, Any]] = field(default_factory=dict)
    listed: list[dict[str, Any]] = field(default_factory=list)
    run_stdout: str = ""
    run_stderr: str = ""
    run_sleeps: int = 0

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    @property
    def log(self) -> Path:
        return self.root / "podman.log"

    def write(self) -> Path:
        self.bin.mkdir(parents=True, exist_ok=True)
        data = self.root / "podman-data"
        data.mkdir(exist_ok=True)
        for i, (name, record) in enumerate(sorted(self.images.items())):
            (data / f"inspect-{i}.json").write_text(json.dumps([record], indent=4))
            (data / f"inspect-{i}.name").write_text(name)
        (data / "images.json").write_text(json.dumps(self.listed, indent=4))
        (data / "run.out").write_text(self.run_stdout)
        (data / "run.err").write_text(self.run_stderr)
        d, log = shlex.quote(str(data)), shlex.quote(str(self.log))
        script = f"""#!/bin/sh
for a in "$@"; do printf '%s\\n' "$a"; done >> {log}
echo >> {log}
case "$1" in
--version) echo "podman version 5.4.2" ;;
images) cat {d}/images.json ;;
image)
    last=""; for a in "$@"; do last="$a"; done
    for f in {d}/inspect-*.name; do
        [ -e "$f" ] || break
        if [ "$(cat "$f")" = "$last" ]; then cat "${{f%.name}}.json"; exit 0; fi
    done
    echo "[]"
    echo "Error: $last: image not known" >&2
    exit 125 ;;
run)
    if [ {self.run_sleeps} -gt 0 ]; then sleep {self.run_sleeps}; fi
    cat {d}/run.out
    cat {d}/run.err >&2 ;;
rm) ;;
*) echo "Error: unknown command" >&2; exit 125 ;;
esac
"""
        podman = self.bin / "podman"
        podman.write_text(script)
        podman.chmod(0o755)
        return self.bin

    def calls(self) -> list[list[str]]:
        if not self.log.exists():
            return []
        blocks = self.log.read_text().split("\n\n")
        return [b.split("\n") for b in blocks if b]
