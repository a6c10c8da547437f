"""NVIDIA GPUs as NVML reports them, through the ``pynvml`` module of nvidia-ml-py.

``read()`` is the one entry point.  It imports pynvml when called (so other
commands never load it), initialises NVML, reads every device and shuts NVML
down again.  Its answers are plain dataclasses so that ``probe`` and
``doctor`` never see a ctypes object.

No driver (the library cannot be loaded, or NVML reports no driver) is not an
error: ``read()`` returns an ``NvmlReport`` with ``available=False`` and the
reason.  An NVML call failing half-way raises ``NvmlError`` naming the call
and the device, which the CLI prints as a located one-line message.

Memory comes from ``nvmlDeviceGetMemoryInfo``, the v1 structure, and not from
``_v2``.  v1 exists in every driver; its ``used`` includes the memory the
driver reserves for itself, so ``total == used + free`` holds.  ``_v2``
(drivers R510 and later) reports that reservation in a separate ``reserved``
field and leaves it out of ``used``, so its three figures no longer add up;
``total`` and ``free`` are the same in both, and ``free`` is what a layout
can still allocate.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from layoutgen.errors import LayoutgenError

#: NVML_VALUE_NOT_AVAILABLE as an unsigned long long; pynvml maps it to None,
#: older versions of it did not.
_NOT_AVAILABLE = 2**64 - 1


class NvmlError(LayoutgenError):
    """An NVML call failed after NVML had started (the message names the call)."""


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    name: str  # the process's command name (/proc/PID/comm), "" when unknown
    used: int | None  # bytes; None when NVML cannot say (NVML_VALUE_NOT_AVAILABLE)
    kind: str  # "compute" or "graphics"


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    uuid: str  # "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
    pci_bus_id: str  # "00000000:01:00.0"
    total: int  # bytes, nvmlDeviceGetMemoryInfo().total, exactly
    used: int  # bytes
    free: int  # bytes
    compute_capability: tuple[int, int]
    processes: tuple[GpuProcess, ...]


@dataclass(frozen=True)
class NvmlReport:
    available: bool
    reason: str  # why not available; "" when available
    driver_version: str  # "" when not available
    cuda_version: str  # "12.8" from nvmlSystemGetCudaDriverVersion_v2; "" when not available
    gpus: tuple[Gpu, ...]


def read(proc_root: str | Path = "/proc") -> NvmlReport:
    """Every GPU NVML sees, in NVML index order.

    ``proc_root`` is where process names are read (``<proc_root>/<pid>/comm``);
    tests point it at a fake tree.
    """
    try:
        import pynvml
    except ImportError:
        return _unavailable("the pynvml module (package nvidia-ml-py) is not installed")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return _unavailable(_init_failure(pynvml, exc))
    try:
        return _Reader(pynvml, Path(proc_root)).report()
    finally:
        # A failing shutdown must not hide the report or the error being raised.
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()


def _unavailable(reason: str) -> NvmlReport:
    return NvmlReport(available=False, reason=reason, driver_version="", cuda_version="", gpus=())


def _init_failure(pynvml: Any, exc: Any) -> str:
    """Why nvmlInit failed, as a sentence a user can act on."""
    code = getattr(exc, "value", None)
    if code == pynvml.NVML_ERROR_LIBRARY_NOT_FOUND:
        return (
            "the NVML library libnvidia-ml.so.1 cannot be loaded "
            "(no NVIDIA driver is installed, or it is not visible in this container)"
        )
    if code == pynvml.NVML_ERROR_DRIVER_NOT_LOADED:
        return "the NVIDIA kernel driver is not loaded"
    if code == pynvml.NVML_ERROR_NO_PERMISSION:
        return "NVML was refused access to the GPUs (no permission to open /dev/nvidia*)"
    if code == pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH:
        return (
            "the NVML library and the loaded NVIDIA kernel driver are different versions "
            "(reboot or reload the driver after an upgrade)"
        )
    if code == pynvml.NVML_ERROR_FUNCTION_NOT_FOUND:
        return "libnvidia-ml.so.1 lacks nvmlInitWithFlags (the NVIDIA driver is too old)"
    return f"NVML could not start: {exc} (NVML error {code})"


def _text(value: object) -> str:
    """A string NVML returned: ``str`` from recent pynvml, ``bytes`` from older ones."""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


def _cuda_version(value: int) -> str:
    """NVML's CUDA driver version, 12080, as "12.8"."""
    if value <= 0:
        return ""
    return f"{value // 1000}.{value % 1000 // 10}"


class _Reader:
    """Reads the devices of a started NVML; every failing call raises ``NvmlError``."""

    def __init__(self, pynvml: Any, proc_root: Path) -> None:
        self.nv = pynvml
        self.proc_root = proc_root

    def call(self, function: str, index: int | None, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except self.nv.NVMLError as exc:
            raise NvmlError(_failed(function, index, str(exc))) from None
        except UnicodeDecodeError:
            # pynvml decodes C strings as strict UTF-8.
            raise NvmlError(_failed(function, index, "the answer is not UTF-8 text")) from None

    def report(self) -> NvmlReport:
        nv = self.nv
        driver = _text(self.call("nvmlSystemGetDriverVersion", None, nv.nvmlSystemGetDriverVersion))
        count = int(self.call("nvmlDeviceGetCount", None, nv.nvmlDeviceGetCount))
        return NvmlReport(
            available=True,
            reason="",
            driver_version=driver,
            cuda_version=_cuda_version(self.cuda_driver_version()),
            gpus=tuple(self.gpu(index) for index in range(count)),
        )

    def cuda_driver_version(self) -> int:
        """``_v2`` asks libcuda itself; v1, the fallback, also answers without libcuda."""
        nv = self.nv
        try:
            return int(nv.nvmlSystemGetCudaDriverVersion_v2())
        except nv.NVMLError as exc:
            first = str(exc)
        try:
            return int(nv.nvmlSystemGetCudaDriverVersion())
        except nv.NVMLError:
            raise NvmlError(_failed("nvmlSystemGetCudaDriverVersion_v2", None, first)) from None

    def gpu(self, index: int) -> Gpu:
        nv = self.nv
        handle = self.call(
            "nvmlDeviceGetHandleByIndex", index, nv.nvmlDeviceGetHandleByIndex, index
        )
        name = self.call("nvmlDeviceGetName", index, nv.nvmlDeviceGetName, handle)
        uuid = self.call("nvmlDeviceGetUUID", index, nv.nvmlDeviceGetUUID, handle)
        pci = self.call("nvmlDeviceGetPciInfo", index, nv.nvmlDeviceGetPciInfo, handle)
        memory = self.call("nvmlDeviceGetMemoryInfo", index, nv.nvmlDeviceGetMemoryInfo, handle)
        major, minor = self.call(
            "nvmlDeviceGetCudaComputeCapability",
            index,
            nv.nvmlDeviceGetCudaComputeCapability,
            handle,
        )
        # One entry per pid, the first listed: a process with a CUDA and a
        # graphics context is in both lists (with the same memory) and counts
        # as compute.
        processes: dict[int, GpuProcess] = {}
        for kind in ("compute", "graphics"):
            for info in self.processes(kind, index, handle):
                pid = int(info.pid)
                if pid not in processes:
                    processes[pid] = GpuProcess(pid, self.comm(pid), _used(info), kind)
        return Gpu(
            index=index,
            name=_text(name),
            uuid=_text(uuid),
            # The structure decodes busId on access, as strict UTF-8.
            pci_bus_id=_text(self.call("nvmlDeviceGetPciInfo", index, lambda: pci.busId)),
            total=int(memory.total),
            used=int(memory.used),
            free=int(memory.free),
            compute_capability=(int(major), int(minor)),
            processes=tuple(processes[pid] for pid in sorted(processes)),
        )

    def processes(self, kind: str, index: int, handle: Any) -> list[Any]:
        """The ``_v3`` list, else ``_v2`` from a driver that predates ``_v3``."""
        function = _PROCESS_FUNCTIONS[kind]
        for suffix in ("_v3", "_v2"):
            fn = getattr(self.nv, function + suffix, None)
            if fn is None:
                continue
            try:
                return list(fn(handle))
            except self.nv.NVMLError_FunctionNotFound:
                continue
            except self.nv.NVMLError as exc:
                raise NvmlError(_failed(function, index, str(exc))) from None
        raise NvmlError(_failed(function, index, "neither its _v3 nor its _v2 form is available"))

    def comm(self, pid: int) -> str:
        try:
            raw = (self.proc_root / str(pid) / "comm").read_bytes()
        except OSError:
            return ""
        return raw.decode("utf-8", errors="replace").removesuffix("\n")


_PROCESS_FUNCTIONS = {
    "compute": "nvmlDeviceGetComputeRunningProcesses",
    "graphics": "nvmlDeviceGetGraphicsRunningProcesses",
}


def _used(info: Any) -> int | None:
    used = info.usedGpuMemory
    if used is None or used == _NOT_AVAILABLE:
        return None
    return int(used)


def _failed(function: str, index: int | None, why: str) -> str:
    where = "" if index is None else f" for GPU {index}"
    return f"NVML {function} failed{where}: {why}"
