"""``layoutgen probe`` end to end: the real pynvml against the fake libnvidia-ml.

Issue 16's acceptance: the printed host block validates as a spec's host block
unchanged, and on the fake NVML its numbers equal the fake's exactly.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

from layoutgen.spec.source import parse
from layoutgen.spec.validate import validate_document
from tests.fakenvml import FakeNvml
from tests.test_nvml import H100_TOTAL, RTX4090_TOTAL, TWO_GPUS

from specs import PROFILE

pytest_plugins = ["tests.fakenvml.conftest_plugin"]

LAYOUTGEN = str(Path(sys.executable).with_name("layoutgen"))

REST = f"""\
models:
  coder: {{path: /models/coder.gguf, profile: {PROFILE}}}
runtimes:
  ik: {{kind: ik_llama.cpp, image: "registry.home.arpa/ik_llama.cpp:4840", version: "4840"}}
services:
  worker:
    model: coder
    runtime: ik
    role: worker
    gpus: [gpu0]
    port: 8001
    ctx: 32768
"""


def _path_with_podman(tmp: Path) -> str:
    """PATH with a podman that answers --version as podman 5.4.2 does."""
    bindir = tmp / "bin"
    bindir.mkdir()
    podman = bindir / "podman"
    podman.write_text("#!/bin/sh\necho 'podman version 5.4.2'\n")
    podman.chmod(podman.stat().st_mode | stat.S_IXUSR)
    return f"{bindir}{os.pathsep}{os.environ['PATH']}"


def test_probe_prints_a_host_block_that_validates_unchanged(
    fake_nvml: FakeNvml, tmp_path: Path
) -> None:
    env = fake_nvml.env(TWO_GPUS)
    env["PATH"] = _path_with_podman(tmp_path)
    out = tmp_path / "host.yaml"
    done = fake_nvml.run([LAYOUTGEN, "probe", "-o", str(out)], TWO_GPUS, env=env)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    block = out.read_text()
    assert block.startswith("host:")

    text = block + REST
    validated = validate_document(parse(text, "probed.yaml", tmp_path / "probed.yaml"))
    gpus = validated.spec.host.gpus
    assert [(g.id, g.index, g.vram, g.uuid) for g in gpus] == [
        ("gpu0", 0, H100_TOTAL, TWO_GPUS["gpus"][0]["uuid"]),
        ("gpu1", 1, RTX4090_TOTAL, TWO_GPUS["gpus"][1]["uuid"]),
    ]
    assert validated.spec.host.podman == "5.4"
    capacity = {d.id: d.capacity for d in validated.plan.devices}
    assert (capacity["gpu0"], capacity["gpu1"]) == (H100_TOTAL, RTX4090_TOTAL)


def test_probe_on_a_host_without_a_driver_is_a_cpu_only_block(fake_nvml: FakeNvml) -> None:
    done = subprocess.run(
        [LAYOUTGEN, "probe"], env=fake_nvml.absent_env(), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert "  gpus: []  # NVML was not available" in done.stdout
    assert done.stderr.startswith("probe: no NVIDIA GPU read (") and "CPU-only" in done.stderr


def test_an_nvml_call_failing_midway_is_one_line_and_exit_1(fake_nvml: FakeNvml) -> None:
    spec = dict(TWO_GPUS, fail={"function": "nvmlDeviceGetMemoryInfo", "index": 1, "code": 999})
    done = fake_nvml.run([LAYOUTGEN, "probe"], spec)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == "error: NVML nvmlDeviceGetMemoryInfo failed for GPU 1: Unknown Error\n"
