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

from layoutgen.inputs.source import parse
from layoutgen.render.validate import validate_document
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
    """PATH with a podman that answers --version as podman 5.4.2 does, with no images."""
    bindir = tmp / "bin"
    bindir.mkdir()
    podman = bindir / "podman"
    podman.write_text(
        "#!/bin/sh\ncase \"$1\" in images) echo '[]';; *) echo 'podman version 5.4.2';; esac\n"
    )
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


def test_probe_lists_the_runtimes_on_this_host_with_their_builds(
    fake_nvml: FakeNvml, tmp_path: Path
) -> None:
    """Issue 30 item 2: a llama-server on PATH and the runtime images podman has, each
    with the build to write as version:; the block still validates unchanged."""
    from tests.fakepodman import UBUNTU_LABELS, FakePodman, images_entry, inspect_record

    server = tmp_path / "opt" / "ik_llama.cpp" / "bin" / "llama-server"
    server.parent.mkdir(parents=True)
    server.write_text("#!/bin/sh\necho 'version: 3772 (5236c98b)' >&2\n")
    server.chmod(0o755)
    llama = "ghcr.io/ggml-org/llama.cpp:server-cuda"
    podman = FakePodman(tmp_path / "podman")
    podman.listed = [images_entry([llama]), images_entry(["docker.io/library/redis:7"])]
    podman.images = {llama: inspect_record(llama, ["/app/llama-server"], UBUNTU_LABELS)}
    podman.run_stderr = "version: 6123 (a1b2c3d)\n"
    podman.write()
    env = fake_nvml.env(TWO_GPUS)
    env["PATH"] = f"{server.parent}{os.pathsep}{podman.bin}{os.pathsep}{os.environ['PATH']}"
    done = fake_nvml.run([LAYOUTGEN, "probe"], TWO_GPUS, env=env)
    assert (done.returncode, done.stderr) == (0, "")
    lines = done.stdout.splitlines()
    start = lines.index(
        "  # runtimes found here, with the build each runs (write it as "
        "runtimes.<id>.version of the runtime that uses it):"
    )
    assert lines[start + 1 : start + 3] == [
        f"  #   binary {server} (ik_llama.cpp): version: \"3772\"  # 'llama-server --version' "
        "printed 'version: 3772 (5236c98b)'",
        f"  #   image {llama} (llama.cpp): version: \"6123\"  # 'llama-server --version' in the "
        "image printed 'version: 6123 (a1b2c3d)'",
    ]
    validated = validate_document(parse(done.stdout + REST, "probed.yaml", tmp_path / "p.yaml"))
    assert validated.spec.host.podman == "5.4"
