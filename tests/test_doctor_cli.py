"""``layoutgen doctor`` end to end: the real pynvml against the fake libnvidia-ml.

Issue 16's acceptance: a planted fault is found with the right exit code and a
message naming the process, the GPU and the MiB.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.fakenvml import FakeNvml
from tests.test_nvml import H100_TOTAL

from specs import PROFILE

pytest_plugins = ["tests.fakenvml.conftest_plugin"]

LAYOUTGEN = str(Path(sys.executable).with_name("layoutgen"))
UUID = "GPU-5b4b8f2e-6d0c-4f8a-9b1e-0a1b2c3d4e5f"
GIB = 1024**3

SPEC = f"""\
host:
  name: lab
  cpu: {{cores: 16, threads: 32}}
  ram: 256GiB
  ram_reserve: 16GiB
  podman: "5.4"
  gpus:
    - {{id: gpu0, index: 0, vram: 81559MiB, reserve: 1GiB, uuid: {UUID}}}
models:
  coder: {{path: /models/coder.gguf, profile: {PROFILE}}}
runtimes:
  ik: {{kind: ik_llama.cpp, image: "registry.home.arpa/ik_llama.cpp:4327", version: "4327"}}
services:
  worker:
    model: coder
    runtime: ik
    role: worker
    gpus: [gpu0]
    port: 8001
    ctx: 131072
"""


def _nvml(pid: int) -> dict[str, Any]:
    used = 6 * GIB
    return {
        "driver_version": "570.86.15",
        "cuda_version": 12080,
        "gpus": [
            {
                "name": "NVIDIA H100 80GB HBM3",
                "uuid": UUID,
                "pci_bus_id": "00000000:01:00.0",
                "total": H100_TOTAL,
                "used": used,
                "free": H100_TOTAL - used,
                "cc": [9, 0],
                "processes": [{"pid": pid, "used": used, "kind": "compute"}],
            }
        ],
    }


def test_a_foreign_process_holding_6_gib_is_named_with_its_gpu_and_mib(
    fake_nvml: FakeNvml, tmp_path: Path
) -> None:
    spec = tmp_path / "lab.yaml"
    spec.write_text(SPEC)
    sleeper = subprocess.Popen(["sleep", "60"])  # a real pid with a real /proc/PID/comm
    try:
        done = fake_nvml.run(
            [LAYOUTGEN, "doctor", str(spec), "--format", "json", "-o", str(tmp_path / "out")],
            _nvml(sleeper.pid),
        )
    finally:
        sleeper.kill()
        sleeper.wait()
    assert done.returncode == 1, done.stderr
    findings = json.loads(done.stdout)
    foreign = [f for f in findings if f["check"] == "foreign-process"]
    assert len(foreign) == 1, findings
    message = foreign[0]["message"]
    assert f"process {sleeper.pid} (sleep)" in message and "6,144 MiB" in message, message
    assert "gpu0" in message
    assert (foreign[0]["file"], foreign[0]["line"]) == (str(spec), 8)  # the gpu0 entry
    assert not [f for f in findings if f["check"] == "gpu"], findings  # the card is there
    assert done.stderr.endswith(f"{spec}: {len(findings)} findings\n")


def test_without_a_driver_the_gpus_are_a_finding_not_a_traceback(
    fake_nvml: FakeNvml, tmp_path: Path
) -> None:
    spec = tmp_path / "lab.yaml"
    spec.write_text(SPEC)
    done = subprocess.run(
        [LAYOUTGEN, "doctor", str(spec), "-o", str(tmp_path / "out")],
        env=fake_nvml.absent_env(),
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1
    assert f"{spec}:7:3: error: host.gpus: NVML is not available" in done.stdout
    assert "Traceback" not in done.stderr


def test_an_invalid_spec_is_reported_and_exit_1(tmp_path: Path) -> None:
    spec = tmp_path / "lab.yaml"
    spec.write_text(SPEC.replace("port: 8001", "port: 99999"))
    done = subprocess.run([LAYOUTGEN, "doctor", str(spec)], capture_output=True, text=True)
    assert (done.returncode, done.stdout) == (1, "")
    assert f"{spec}:" in done.stderr and "port" in done.stderr


def test_an_unknown_format_is_a_usage_error() -> None:
    done = subprocess.run(
        [LAYOUTGEN, "doctor", "x.yaml", "--format", "xml"], capture_output=True, text=True
    )
    assert done.returncode == 2 and "'xml' is not one of 'text', 'json', 'github'" in done.stderr


def test_render_probe_renders_only_for_a_host_with_the_specs_gpus(
    fake_nvml: FakeNvml, tmp_path: Path
) -> None:
    """Issue 16 item 5: on the target host, a spec written for another card is refused."""
    spec = tmp_path / "lab.yaml"
    spec.write_text(SPEC)
    out = tmp_path / "out"
    here = _nvml(4242)
    done = fake_nvml.run([LAYOUTGEN, "render", "--probe", "-o", str(out), str(spec)], here)
    assert done.returncode == 0, done.stderr
    assert (out / "lab" / "quadlet" / "worker.container").is_file()

    elsewhere = dict(here, gpus=[dict(here["gpus"][0], uuid=UUID.replace("5b4b", "0000"))])
    other = tmp_path / "other"
    done = fake_nvml.run([LAYOUTGEN, "render", "--probe", "-o", str(other), str(spec)], elsewhere)
    assert done.returncode == 1
    assert f"{spec}:8:65: error: host.gpus[0].uuid: gpu0: no GPU with UUID" in done.stderr
    assert f"no GPU with UUID {UUID} on this host" in done.stderr
    assert not other.exists()


def test_nvml_failing_midway_is_one_line_and_exit_1(fake_nvml: FakeNvml, tmp_path: Path) -> None:
    spec = tmp_path / "lab.yaml"
    spec.write_text(SPEC)
    broken = dict(_nvml(4242), fail={"function": "nvmlDeviceGetUUID", "index": 0, "code": 999})
    done = fake_nvml.run([LAYOUTGEN, "doctor", str(spec), "-o", str(tmp_path / "out")], broken)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == "error: NVML nvmlDeviceGetUUID failed for GPU 0: Unknown Error\n"
