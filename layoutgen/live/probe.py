"""``layoutgen probe``: this machine's ``host:`` block, each value commented with its source.

Why comments on every line: a probed value is a claim about one machine at one
moment, and the person pasting it into a spec has to judge it.  Measured
values (cores, RAM, VRAM) are written exactly as read; values layoutgen cannot
measure (``ram_reserve``, a GPU's ``reserve``) are stated defaults marked
"suggestion".  A value that could not be read is written as 0 with an
UNKNOWN comment, so ``validate`` refuses the block until someone writes it.

The text is pure: facts in, YAML out, no clock, sorted wherever the sources
are unordered, so probing the same machine twice gives the same bytes.
"""

from __future__ import annotations

import json
import re

from layoutgen.errors import printable
from layoutgen.inputs import literals
from layoutgen.live.hostfacts import CdiFacts, HostFacts, MemFacts
from layoutgen.live.nvml import Gpu, NvmlReport
from layoutgen.spec.sizes import format_size

KiB, MiB, GiB = 1024, 1024**2, 1024**3
#: ram_reserve suggestion: max(RESERVE_MIN, RESERVE_SHARE of MemTotal), whole GiB.
RESERVE_MIN = 8 * GiB
RESERVE_PERCENT = 5
#: a GPU's reserve suggestion is rounded up to this
RESERVE_STEP = 256 * MiB
CDI_HELP = "sudo nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml"
_COMMENT_MAX = 300


def probe_text(facts: HostFacts, report: NvmlReport) -> str:
    """The ``host:`` block for ``facts`` and ``report``, ready to paste into a spec."""
    lines = [
        "host:  # read by layoutgen probe; review the values marked suggestion",
        *_name(facts),
        *_cpu(facts),
        *_memory(facts),
        *_podman(facts),
        *_runtimes(facts),
        "  # gpu_overhead: not written, each GPU's class default per server process (by its name)",
        *_gpus(report, facts.cdi),
    ]
    return "\n".join(lines) + "\n"


def _c(text: str) -> str:
    """Text from the machine made safe for one comment line."""
    one = printable(text)
    return one if len(one) <= _COMMENT_MAX else one[: _COMMENT_MAX - 3] + "..."


def exact_size(n: int, units: tuple[tuple[str, int], ...] | None = None) -> str:
    """``n`` bytes in the largest unit that divides it exactly, else the byte count."""
    for unit, factor in units or (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n and n % factor == 0:
            return f"{n // factor}{unit}"
    return str(n)


def vram_size(n: int) -> str:
    """NVML total as nvidia-smi shows it: whole MiB, else the exact byte count."""
    return exact_size(n, (("MiB", MiB),))


def _ceil_gib(n: int) -> int:
    return -(-n // GiB)


# ---------------------------------------------------------------- host name

_NOT_NAME = re.compile(r"[^a-z0-9-]+")


def spec_name(raw: str) -> str:
    """A host name as the spec takes it: the first label, lowercase, [a-z0-9-], 63 at most."""
    label = raw.strip().split(".", 1)[0].lower()
    name = _NOT_NAME.sub("-", label).strip("-")[:63].strip("-")
    return name or "host"


def _name(facts: HostFacts) -> list[str]:
    h = facts.hostname
    if h.name is None:
        return [f"  name: host  # UNKNOWN: {_c(h.reason)}; write this host's name"]
    name = spec_name(h.name)
    note = "" if name == h.name else " (made a spec name: first label, lowercase, [a-z0-9-])"
    return [f"  name: {name}  # {h.source}: {_c(h.name)}{note}"]


# ---------------------------------------------------------------- CPU


def _cpu(facts: HostFacts) -> list[str]:
    cpu = facts.cpu
    model = f", {_c(cpu.model)}" if cpu.model else ""
    sockets = f", {cpu.sockets} socket{'s' if cpu.sockets != 1 else ''}" if cpu.sockets else ""
    out = ["  cpu:"]
    if cpu.cores is None:
        out.append(f"    cores: 0  # UNKNOWN: {_c(cpu.cores_how)}; write the physical cores")
    else:
        out.append(
            f"    cores: {cpu.cores}  # {cpu.cores} cores by {_c(cpu.cores_how)}{sockets}{model}"
        )
    if cpu.threads is None:
        out.append(f"    threads: 0  # UNKNOWN: {_c(cpu.threads_how)}; write the logical CPUs")
    else:
        out.append(f"    threads: {cpu.threads}  # logical CPUs online, {_c(cpu.threads_how)}")
    if cpu.isa is None:
        out.append(f"    # isa: not written (default x86-64-v3): {_c(cpu.isa_how)}")
    else:
        out.append(f"    isa: {cpu.isa}  # /proc/cpuinfo: {_c(cpu.isa_how)}")
    if cpu.sockets is not None and cpu.sockets > 1:
        out.append(f"    sockets: {cpu.sockets}  # /proc/cpuinfo: distinct physical ids")
    if cpu.numa_nodes is not None:
        plural = "s" if cpu.numa_nodes != 1 else ""
        how = f"{cpu.numa_nodes} node{plural} (/sys/devices/system/node/node*)"
        if cpu.numa_nodes != (cpu.sockets or 1):
            out.append(f"    numa_nodes: {cpu.numa_nodes}  # {how}")
        else:
            out.append(f"    # NUMA: {how}: one a socket, the default")
    return out


# ---------------------------------------------------------------- memory


def suggested_ram_reserve(mem: MemFacts) -> tuple[int, str]:
    """(bytes, how): max(8 GiB, 5 % of MemTotal) in whole GiB, plus the hugepage pool."""
    total = mem.total or 0
    base = _ceil_gib(max(RESERVE_MIN, total * RESERVE_PERCENT // 100)) * GiB
    how = f"max(8GiB, {RESERVE_PERCENT} % of MemTotal) rounded up to whole GiB"
    pool = (mem.hugepages or 0) * (mem.hugepage_size or 0)
    if pool:
        how += f", plus the {format_size(pool)} hugepage pool (not ordinary memory)"
    reserve = base + _ceil_gib(pool) * GiB
    if total and reserve >= total:  # a small machine: keep the block valid, say so
        return total // 2 // MiB * MiB, how + ", capped at half of MemTotal (a small host)"
    return reserve, how


def _memory(facts: HostFacts) -> list[str]:
    mem = facts.memory
    out: list[str] = []
    if mem.total is None:
        out.append(f"  ram: 0  # UNKNOWN: {_c(mem.reason)}; write the installed RAM")
    else:
        out.append(
            f"  ram: {exact_size(mem.total)}  # /proc/meminfo MemTotal {mem.total // KiB} kB "
            f"({format_size(mem.total)}): what the kernel manages, a little under installed"
        )
    now = [
        f"{key} {format_size(value)}"
        for key, value in (("MemAvailable", mem.available), ("Mlocked", mem.mlocked))
        if value is not None
    ]
    if now:
        out.append(f"  # /proc/meminfo now: {', '.join(now)}")
    if mem.hugepages is not None:
        size = format_size(mem.hugepage_size) if mem.hugepage_size else "unknown size"
        out.append(f"  # /proc/meminfo: HugePages_Total {mem.hugepages} of {size}")
    out.append(f"  # {_memlock(facts)}")
    reserve, how = suggested_ram_reserve(mem)
    out.append(f"  ram_reserve: {exact_size(reserve)}  # suggestion, review: {how}")
    return out


def _memlock(facts: HostFacts) -> str:
    lock = facts.memlock
    if lock.reason:
        return f"memlock limit: unknown ({_c(lock.reason)})"

    def shown(v: int | None) -> str:
        return "unlimited" if v is None else format_size(v)

    return (
        f"memlock limit: soft {shown(lock.soft)}, hard {shown(lock.hard)} (RLIMIT_MEMLOCK of "
        "this user's probe process; containers run by a systemd unit get the unit's "
        "LimitMEMLOCK instead)"
    )


# ---------------------------------------------------------------- podman


def _podman(facts: HostFacts) -> list[str]:
    p = facts.podman
    if p.version is None:
        return [
            f'  # podman: not written ({_c(p.reason)}); add podman: "MAJOR.MINOR" once it is '
            "installed (quadlet units of container services need it)"
        ]
    major_minor = ".".join(p.version.split(".")[:2])
    return [f'  podman: "{major_minor}"  # podman --version: {_c(p.output)}']


# ---------------------------------------------------------------- runtimes


def _runtimes(facts: HostFacts) -> list[str]:
    """Server programs and images found here, each with its build: what to write as a
    runtime's ``version:`` (runtimes sit beside host:, so these stay comments)."""
    out = [f"  # runtimes: {_c(p)}" for p in facts.runtime_problems]
    if not facts.runtimes:
        return [
            *out,
            "  # runtimes: no llama-server or vllm on PATH, no llama.cpp, ik_llama.cpp or "
            "vllm image in podman",
        ]
    out.append(
        "  # runtimes found here, with the build each runs (write it as "
        "runtimes.<id>.version of the runtime that uses it):"
    )
    for r in sorted(facts.runtimes, key=lambda r: r.what):
        if r.version is None:
            out.append(f"  #   {_c(r.what)} ({r.kind}): build unknown, {_c(r.how)}")
        else:
            out.append(f'  #   {_c(r.what)} ({r.kind}): version: "{r.version}"  # {_c(r.how)}')
    return out


# ---------------------------------------------------------------- GPUs


def _gpus(report: NvmlReport, cdi: CdiFacts) -> list[str]:
    if not report.available:
        return [f"  gpus: []  # NVML was not available ({_c(report.reason)}): no GPUs listed"]
    if not report.gpus:
        return [f"  gpus: []  # NVML (driver {_c(report.driver_version)}) found no GPUs"]
    out = [
        f"  # NVML: driver {_c(report.driver_version)}, CUDA {_c(report.cuda_version)}",
        *_cdi_lines(cdi),
        "  gpus:",
    ]
    for gpu in sorted(report.gpus, key=lambda g: g.index):
        out += _gpu(gpu, cdi)
    return out


def _cdi_lines(cdi: CdiFacts) -> list[str]:
    out = [f"  # CDI spec problem: {_c(p)}" for p in cdi.problems]
    if cdi.names:
        out.append(f"  # CDI devices ({', '.join(cdi.files)}): {', '.join(cdi.names)}")
    else:
        out.append(f"  # CDI devices: none in /etc/cdi or /var/run/cdi; create them: {CDI_HELP}")
    return out


def _gpu(gpu: Gpu, cdi: CdiFacts) -> list[str]:
    major, minor = gpu.compute_capability
    uuid_ok = literals.GPU_UUID.fullmatch(gpu.uuid) is not None
    out = [f"    - id: gpu{gpu.index}  # named after the NVML index"]
    out.append(f"      index: {gpu.index}  # NVML index, PCI {_c(gpu.pci_bus_id)}")
    where = f"PCI {_c(gpu.pci_bus_id)}, compute capability {major}.{minor}"
    if uuid_ok:
        out.append(f"      uuid: {gpu.uuid}  # NVML uuid, {where}")
    else:
        out.append(f"      # uuid: not written, not GPU-<hex>: {_c(gpu.uuid)}; {where}")
    try:
        literals.text(gpu.name, limit=256)
        out.append(f"      name: {json.dumps(gpu.name)}  # NVML nvmlDeviceGetName")
    except ValueError:
        out.append(f"      # name: not written, not plain text: {_c(gpu.name)}")
    out.append(
        f"      vram: {vram_size(gpu.total)}  # NVML nvmlDeviceGetMemoryInfo total, exactly "
        f"({gpu.total} bytes)"
    )
    out += _reserve(gpu)
    want = f"nvidia.com/gpu={gpu.uuid if uuid_ok else gpu.index}"
    if want not in cdi.names:
        out.append(
            f"      # WARNING: no CDI device {want}: podman cannot pass this GPU to a "
            f"container; create it: {CDI_HELP}"
        )
    return out


def _reserve(gpu: Gpu) -> list[str]:
    """The reserve suggestion: what this card holds now that no service of a spec
    will: memory NVML counts as used but no process holds (the driver's own, on
    every card: a few hundred MiB), plus what graphics processes (a desktop) hold;
    rounded up to 256 MiB."""
    procs = sorted(gpu.processes, key=lambda p: (p.kind, p.pid))
    graphics = [p for p in procs if p.kind == "graphics"]
    out: list[str] = []
    for p in procs:
        used = "unknown" if p.used is None else format_size(p.used)
        out.append(f"      # {p.kind} process now: pid {p.pid} {_c(p.name) or '?'}, {used}")
    unowned = max(0, gpu.used - sum(p.used or 0 for p in procs))
    desktop = sum(p.used or 0 for p in graphics)
    reserve = -(-(unowned + desktop) // RESERVE_STEP) * RESERVE_STEP
    how = f"NVML used {format_size(gpu.used)} now, {format_size(unowned)} of it by no process"
    if graphics:
        how += f", {format_size(desktop)} by {len(graphics)} graphics process(es)"
        if any(p.used is None for p in graphics):
            reserve, how = max(reserve, GiB), how + " (some usage unknown: at least 1GiB)"
    how += f"; rounded up to {format_size(RESERVE_STEP)}"
    if reserve >= gpu.total:  # keep the block valid on a card smaller than that
        reserve, how = gpu.total // 2 // MiB * MiB, how + ", capped at half the VRAM"
    out.append(f"      reserve: {exact_size(reserve)}  # suggestion, review: {how}")
    return out
