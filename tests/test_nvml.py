"""``layoutgen.live.nvml.read()`` running the real pynvml against a fake libnvidia-ml.

The fake (tests/fakenvml) is a C library answering from a JSON file, so these
tests cover what a Python-level mock would not: pynvml's ctypes structures,
buffer sizes, the INSUFFICIENT_SIZE protocol of the process lists, and
NVML's error codes as pynvml maps them to exceptions.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from layoutgen.live import nvml
from tests.fakenvml import FakeNvml

pytest_plugins = ["tests.fakenvml.conftest_plugin"]

ROOT = Path(__file__).resolve().parent.parent
GIB = 1024**3
H100_TOTAL = 85520809984
RTX4090_TOTAL = 25757220864

TWO_GPUS: dict[str, Any] = {
    "driver_version": "570.86.15",
    "cuda_version": 12080,
    "gpus": [
        {
            "name": "NVIDIA H100 80GB HBM3",
            "uuid": "GPU-5b4b8f2e-6d0c-4f8a-9b1e-0a1b2c3d4e5f",
            "pci_bus_id": "00000000:01:00.0",
            "total": H100_TOTAL,
            "used": 6 * GIB + 545259520,
            "free": H100_TOTAL - 6 * GIB - 545259520,
            "cc": [9, 0],
            "processes": [
                {"pid": 4242, "used": 6 * GIB, "kind": "compute"},
                {"pid": 1234, "used": 262144000, "kind": "graphics"},
                {"pid": 777, "used": None, "kind": "compute"},
                {"pid": 99, "used": 16777216, "kind": "both"},
            ],
        },
        {
            "name": "NVIDIA GeForce RTX 4090",
            "uuid": "GPU-0f0e0d0c-0b0a-0908-0706-050403020100",
            "pci_bus_id": "00000000:81:00.0",
            "total": RTX4090_TOTAL,
            "used": 453509120,
            "free": RTX4090_TOTAL - 453509120,
            "cc": [8, 9],
            "processes": [],
        },
    ],
}

EXPECTED_REPORT: dict[str, Any] = {
    "available": True,
    "reason": "",
    "driver_version": "570.86.15",
    "cuda_version": "12.8",
    "gpus": [
        {
            "index": 0,
            "name": "NVIDIA H100 80GB HBM3",
            "uuid": "GPU-5b4b8f2e-6d0c-4f8a-9b1e-0a1b2c3d4e5f",
            "pci_bus_id": "00000000:01:00.0",
            "total": 85520809984,
            "used": 6987710464,
            "free": 78533099520,
            "compute_capability": [9, 0],
            "processes": [
                {"pid": 99, "name": "", "used": 16777216, "kind": "compute"},
                {"pid": 777, "name": "python3", "used": None, "kind": "compute"},
                {"pid": 1234, "name": "Xorg", "used": 262144000, "kind": "graphics"},
                {"pid": 4242, "name": "llama-server", "used": 6442450944, "kind": "compute"},
            ],
        },
        {
            "index": 1,
            "name": "NVIDIA GeForce RTX 4090",
            "uuid": "GPU-0f0e0d0c-0b0a-0908-0706-050403020100",
            "pci_bus_id": "00000000:81:00.0",
            "total": 25757220864,
            "used": 453509120,
            "free": 25303711744,
            "compute_capability": [8, 9],
            "processes": [],
        },
    ],
}

NO_LIBRARY = (
    "the NVML library libnvidia-ml.so.1 cannot be loaded "
    "(no NVIDIA driver is installed, or it is not visible in this container)"
)


def with_(spec: dict[str, Any], **changes: Any) -> dict[str, Any]:
    return {**spec, **changes}


@pytest.fixture
def proc_root(tmp_path: Path) -> Path:
    """A /proc with the command names of three of the four processes (99 has exited)."""
    root = tmp_path / "proc"
    for pid, comm in ((4242, b"llama-server\n"), (1234, b"Xorg\n"), (777, b"python3\n")):
        (root / str(pid)).mkdir(parents=True)
        (root / str(pid) / "comm").write_bytes(comm)
    return root


def test_two_gpus_round_trip_byte_for_byte(fake_nvml: FakeNvml, proc_root: Path) -> None:
    # a subprocess finding the fake as pynvml would find a driver: CDLL("libnvidia-ml.so.1")
    assert fake_nvml.read(TWO_GPUS, proc_root=proc_root)["report"] == EXPECTED_REPORT


def test_in_process_gives_the_same_dataclasses(fake_nvml: FakeNvml, proc_root: Path) -> None:
    with fake_nvml.in_process(TWO_GPUS):
        report = nvml.read(proc_root=proc_root)
    h100, rtx = report.gpus
    assert (h100.total, rtx.total) == (85520809984, 25757220864)
    assert h100.processes[-1] == nvml.GpuProcess(4242, "llama-server", 6 * GIB, "compute")
    assert rtx.compute_capability == (8, 9)
    assert report.cuda_version == "12.8"


def test_a_process_in_both_lists_counts_once_as_compute(
    fake_nvml: FakeNvml, proc_root: Path
) -> None:
    with fake_nvml.in_process(TWO_GPUS):
        processes = nvml.read(proc_root=proc_root).gpus[0].processes
    assert [(p.pid, p.kind) for p in processes] == [
        (99, "compute"),
        (777, "compute"),
        (1234, "graphics"),
        (4242, "compute"),
    ]


def test_process_names_default_to_the_real_proc(fake_nvml: FakeNvml) -> None:
    own = os.getpid()
    spec = {
        "driver_version": "1",
        "gpus": [{"name": "g", "processes": [{"pid": own, "used": 1, "kind": "compute"}]}],
    }
    with fake_nvml.in_process(spec):
        (process,) = nvml.read().gpus[0].processes
    assert process.name == Path(f"/proc/{own}/comm").read_text().removesuffix("\n")


def test_no_gpus_is_available_and_empty(fake_nvml: FakeNvml) -> None:
    report = fake_nvml.read({"driver_version": "570.86.15", "cuda_version": 13000, "gpus": []})
    assert report["report"] == {
        "available": True,
        "reason": "",
        "driver_version": "570.86.15",
        "cuda_version": "13.0",
        "gpus": [],
    }


def test_library_absent_from_an_empty_path(fake_nvml: FakeNvml, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    env = {**os.environ, "LD_LIBRARY_PATH": str(empty)}
    # pinned: a real libnvidia-ml in the ld.so cache of this host must not be found
    assert fake_nvml.read(env=env, pin=True)["report"] == {
        "available": False,
        "reason": NO_LIBRARY,
        "driver_version": "",
        "cuda_version": "",
        "gpus": [],
    }


def test_library_hidden_even_from_a_host_with_a_driver(fake_nvml: FakeNvml) -> None:
    # not pinned: pynvml's own CDLL call fails on the blocker file
    result = fake_nvml.read(env=fake_nvml.absent_env())
    assert result["report"]["available"] is False
    assert result["report"]["reason"] == NO_LIBRARY


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        (9, "the NVIDIA kernel driver is not loaded"),
        (4, "NVML was refused access to the GPUs (no permission to open /dev/nvidia*)"),
        (
            18,
            "the NVML library and the loaded NVIDIA kernel driver are different versions "
            "(reboot or reload the driver after an upgrade)",
        ),
        (12, NO_LIBRARY),
        (999, "NVML could not start: Unknown Error (NVML error 999)"),
    ],
)
def test_init_errors_are_reasons_not_tracebacks(
    fake_nvml: FakeNvml, code: int, reason: str
) -> None:
    result = fake_nvml.read(with_(TWO_GPUS, init_error=code))
    assert result["report"] == {
        "available": False,
        "reason": reason,
        "driver_version": "",
        "cuda_version": "",
        "gpus": [],
    }


@pytest.mark.parametrize(
    "function",
    [
        "nvmlDeviceGetHandleByIndex",
        "nvmlDeviceGetName",
        "nvmlDeviceGetUUID",
        "nvmlDeviceGetPciInfo",
        "nvmlDeviceGetMemoryInfo",
        "nvmlDeviceGetCudaComputeCapability",
        "nvmlDeviceGetComputeRunningProcesses",
        "nvmlDeviceGetGraphicsRunningProcesses",
    ],
)
def test_a_call_failing_on_gpu_1_names_the_call_and_the_gpu(
    fake_nvml: FakeNvml, function: str
) -> None:
    spec = with_(TWO_GPUS, fail={"function": function, "index": 1, "code": 999})
    assert fake_nvml.read(spec) == {
        "error": f"NVML {function} failed for GPU 1: Unknown Error",
        "stderr": "",
    }


def test_the_nvml_error_text_is_nvmls(fake_nvml: FakeNvml) -> None:
    spec = with_(TWO_GPUS, fail={"function": "nvmlDeviceGetMemoryInfo", "index": 1, "code": 15})
    assert fake_nvml.read(spec)["error"] == (
        "NVML nvmlDeviceGetMemoryInfo failed for GPU 1: GPU is lost"
    )


@pytest.mark.parametrize(
    ("function", "message"),
    [
        ("nvmlSystemGetDriverVersion", "NVML nvmlSystemGetDriverVersion failed: Unknown Error"),
        ("nvmlDeviceGetCount", "NVML nvmlDeviceGetCount failed: Unknown Error"),
        (
            "nvmlSystemGetCudaDriverVersion",  # both forms fail: the _v2 error is reported
            "NVML nvmlSystemGetCudaDriverVersion_v2 failed: Unknown Error",
        ),
    ],
)
def test_a_system_call_failing(fake_nvml: FakeNvml, function: str, message: str) -> None:
    spec = with_(TWO_GPUS, fail={"function": function, "code": 999})
    assert fake_nvml.read(spec)["error"] == message


def test_cuda_version_falls_back_to_v1(fake_nvml: FakeNvml) -> None:
    spec = with_(TWO_GPUS, fail={"function": "nvmlSystemGetCudaDriverVersion_v2", "code": 12})
    assert fake_nvml.read(spec)["report"]["cuda_version"] == "12.8"


@pytest.mark.parametrize("kind", ["Compute", "Graphics"])
def test_process_lists_fall_back_to_v2_on_old_drivers(
    fake_nvml: FakeNvml, proc_root: Path, kind: str
) -> None:
    # NVML_ERROR_FUNCTION_NOT_FOUND, as pynvml reports a symbol the library lacks
    missing = {"function": f"nvmlDeviceGet{kind}RunningProcesses_v3", "code": 13}
    result = fake_nvml.read(with_(TWO_GPUS, fail=missing), proc_root=proc_root)
    assert result["report"] == EXPECTED_REPORT


def test_nvml_is_shut_down_after_a_failure(
    fake_nvml: FakeNvml, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = with_(TWO_GPUS, fail={"function": "nvmlDeviceGetUUID", "index": 1, "code": 999})
    with fake_nvml.in_process(spec) as pynvml:
        shutdowns: list[None] = []
        real_shutdown = pynvml.nvmlShutdown
        monkeypatch.setattr(pynvml, "nvmlShutdown", lambda: shutdowns.append(real_shutdown()))
        with pytest.raises(nvml.NvmlError) as caught:
            nvml.read()
        assert str(caught.value) == "NVML nvmlDeviceGetUUID failed for GPU 1: Unknown Error"
        assert shutdowns == [None]
        with pytest.raises(pynvml.NVMLError_Uninitialized):
            pynvml.nvmlDeviceGetCount()


def test_bytes_from_an_older_pynvml_are_decoded(
    fake_nvml: FakeNvml, proc_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Pci:
        def __init__(self, bus_id: bytes) -> None:
            self.busId = bus_id

    with fake_nvml.in_process(TWO_GPUS) as pynvml:
        for name in ("nvmlSystemGetDriverVersion", "nvmlDeviceGetName", "nvmlDeviceGetUUID"):
            real = getattr(pynvml, name)
            monkeypatch.setattr(pynvml, name, lambda *args, real=real: real(*args).encode())
        real_pci = pynvml.nvmlDeviceGetPciInfo
        monkeypatch.setattr(
            pynvml, "nvmlDeviceGetPciInfo", lambda h: Pci(real_pci(h).busId.encode())
        )
        assert pynvml.nvmlSystemGetDriverVersion.__name__ == "<lambda>"
        report = nvml.read(proc_root=proc_root)
    assert report.driver_version == "570.86.15"
    assert [(g.name, g.uuid, g.pci_bus_id) for g in report.gpus] == [
        (g["name"], g["uuid"], g["pci_bus_id"]) for g in EXPECTED_REPORT["gpus"]
    ]


def test_text_accepts_str_and_bytes() -> None:
    assert nvml._text("NVIDIA H100") == "NVIDIA H100"
    assert nvml._text(b"NVIDIA H100") == "NVIDIA H100"
    assert nvml._text(b"bad \xff") == "bad \ufffd"


def test_a_name_that_is_not_utf8_is_a_located_error(fake_nvml: FakeNvml) -> None:
    raw = b'{"driver_version": "1", "gpus": [{"name": "GPU \xff\xfe"}]}'
    assert fake_nvml.read(raw)["error"] == (
        "NVML nvmlDeviceGetName failed for GPU 0: the answer is not UTF-8 text"
    )


def test_a_unicode_name_round_trips(fake_nvml: FakeNvml) -> None:
    spec = {"driver_version": "1", "gpus": [{"name": "Grafikkarte \u00fc \u2603"}]}
    assert fake_nvml.read(spec)["report"]["gpus"][0]["name"] == "Grafikkarte \u00fc \u2603"


@pytest.mark.parametrize(
    ("value", "text"), [(12080, "12.8"), (13000, "13.0"), (11020, "11.2"), (0, "")]
)
def test_cuda_version_text(value: int, text: str) -> None:
    assert nvml._cuda_version(value) == text


def test_the_fake_refuses_a_broken_spec_loudly(fake_nvml: FakeNvml) -> None:
    # a typo in a test's spec must not pass for a machine without GPUs
    result = fake_nvml.read('{"gpus": [{"name": "x",}]}')
    assert result["report"]["reason"] == "NVML could not start: Unknown Error (NVML error 999)"
    assert "fakenvml:" in result["stderr"]
    assert "expected a key" in result["stderr"]


def test_any_command_can_run_against_the_fake(fake_nvml: FakeNvml) -> None:
    code = "import pynvml; pynvml.nvmlInit(); print(pynvml.nvmlDeviceGetCount())"
    done = fake_nvml.run([sys.executable, "-c", code], TWO_GPUS)
    assert (done.returncode, done.stdout, done.stderr) == (0, "2\n", "")


def imported_modules(stderr: str) -> set[str]:
    """The module names of a ``-X importtime`` report."""
    names = set()
    for line in stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip())
    return names


def test_importing_the_cli_does_not_import_pynvml() -> None:
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import layoutgen.cli"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    modules = imported_modules(done.stderr)
    assert "layoutgen.cli" in modules
    assert "pynvml" not in modules


def test_validate_does_not_import_pynvml() -> None:
    layoutgen = Path(sys.executable).with_name("layoutgen")
    done = subprocess.run(
        [str(layoutgen), "validate", "layouts/familiar-final.yaml"],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
        env={**os.environ, "PYTHONPROFILEIMPORTTIME": "1"},
    )
    assert done.returncode == 0, done.stderr
    modules = imported_modules(done.stderr)
    assert "layoutgen.cli" in modules
    assert "pynvml" not in modules
