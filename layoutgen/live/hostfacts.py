"""What this machine says about itself, for ``layoutgen probe``: name, CPU, RAM, CDI, podman.

Every reader takes ``root`` (``/`` on a real host) so tests point it at a fake
tree, and returns a small frozen dataclass.  A source that cannot be read is
a fact too: the value is None and ``reason`` says why (probe prints it as a
comment), because a half-readable host should still give a host block to
review, never a traceback.  Paths in reasons are written as on the host
(``/proc/meminfo``), not under ``root``, so output does not depend on where a
test tree lives.
"""

from __future__ import annotations

import re
import resource
import socket
import stat
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from layoutgen.live import hostbuilds

#: The most of any one file read: /proc/cpuinfo of a 512-thread host is ~1 MiB.
MAX_READ = 4 << 20
#: CDI spec files are tens of KiB; anything far larger is not one.
MAX_CDI = 1 << 20
CDI_DIRS = ("etc/cdi", "var/run/cdi")
PODMAN_TIMEOUT_S = 10.0

#: x86-64 psABI micro-architecture levels (x86-64-ABI, "Micro-architecture
#: levels"), as Linux names the flags in /proc/cpuinfo: LZCNT is "abm",
#: OSXSAVE shows as "xsave" (the kernel lists xsave only when it enabled it).
X86_64_V3 = ("avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave")
X86_64_V4 = ("avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl")
#: what ggml-cpu's AMX buffer needs (amx.cpp: __AMX_INT8__ and __AVX512VNNI__, and the
#: kernel's permission for tile data)
AMX = ("amx_tile", "amx_int8", "avx512_vnni")


@dataclass(frozen=True)
class HostName:
    name: str | None
    source: str  # "/proc/sys/kernel/hostname" or "socket.gethostname()"
    reason: str  # why not read; "" when read


@dataclass(frozen=True)
class CpuFacts:
    model: str | None  # "AMD EPYC 9124 16-Core Processor"; None when cpuinfo names none
    cores: int | None
    cores_how: str  # "SOURCE (method)" cores were counted by, or why not
    threads: int | None
    threads_how: str
    sockets: int | None  # distinct "physical id"s
    numa_nodes: int | None  # /sys/devices/system/node/node*; None when absent
    isa: str | None  # a spec CpuIsa; None when cpuinfo is unreadable
    isa_how: str
    reason: str  # why /proc/cpuinfo was not read; "" when read


@dataclass(frozen=True)
class MemFacts:
    total: int | None  # bytes: MemTotal
    available: int | None  # MemAvailable
    mlocked: int | None
    hugepages: int | None  # HugePages_Total (pages)
    hugepage_size: int | None  # bytes: Hugepagesize
    reason: str


@dataclass(frozen=True)
class Memlock:
    """RLIMIT_MEMLOCK of this process (the user running probe); None = unlimited."""

    soft: int | None
    hard: int | None
    reason: str


@dataclass(frozen=True)
class CdiFacts:
    names: tuple[str, ...]  # "nvidia.com/gpu=0", sorted
    files: tuple[str, ...]  # spec files read, as host paths
    problems: tuple[str, ...]  # one line per file that is not a CDI spec


@dataclass(frozen=True)
class PodmanFacts:
    version: str | None  # "5.4.2"
    output: str  # first line of `podman --version`
    reason: str


@dataclass(frozen=True)
class HostFacts:
    hostname: HostName
    cpu: CpuFacts
    memory: MemFacts
    memlock: Memlock
    cdi: CdiFacts
    podman: PodmanFacts
    #: server binaries on PATH and runtime images podman has, with their builds
    runtimes: tuple[hostbuilds.HostBuild, ...] = ()
    #: what could not be looked at for them (podman images failing)
    runtime_problems: tuple[str, ...] = ()


def read_host(root: Path = Path("/")) -> HostFacts:
    found, problems = hostbuilds.found_on_host()
    return HostFacts(
        read_hostname(root),
        read_cpu(root),
        read_memory(root),
        read_memlock(),
        read_cdi(root),
        read_podman(),
        tuple(found),
        tuple(problems),
    )


def _shown(root: Path, path: Path) -> str:
    return "/" + path.relative_to(root).as_posix()


def read_text(root: Path, rel: str, limit: int = MAX_READ) -> tuple[str | None, str]:
    """(text, "") or (None, why): only regular files (a FIFO would block the read)."""
    path = root / rel
    shown = _shown(root, path)
    try:
        if not stat.S_ISREG(path.stat().st_mode):
            return None, f"{shown} is not a regular file"
        with path.open("rb") as f:
            raw = f.read(limit + 1)
    except FileNotFoundError:
        return None, f"{shown} does not exist"
    except OSError as exc:
        return None, f"cannot read {shown}: {exc.strerror or exc}"
    if len(raw) > limit:
        return None, f"{shown} is larger than {limit} bytes"
    return raw.decode("utf-8", errors="replace"), ""


def read_hostname(root: Path = Path("/")) -> HostName:
    text, why = read_text(root, "proc/sys/kernel/hostname", 4096)
    if text is not None and text.strip():
        return HostName(text.strip(), "/proc/sys/kernel/hostname", "")
    try:
        return HostName(socket.gethostname(), "socket.gethostname()", "")
    except OSError as exc:  # pragma: no cover - gethostname does not fail on Linux
        return HostName(None, "", f"{why or 'empty hostname'}; gethostname: {exc}")


# ---------------------------------------------------------------- CPU


def cpuinfo_blocks(text: str) -> list[dict[str, str]]:
    """/proc/cpuinfo as one mapping per blank-line-separated block."""
    blocks: list[dict[str, str]] = []
    for chunk in re.split(r"\n\s*\n", text):
        block: dict[str, str] = {}
        for line in chunk.splitlines():
            key, colon, value = line.partition(":")
            if colon:
                block.setdefault(key.strip(), value.strip())
        if block:
            blocks.append(block)
    return blocks


def cpu_list_count(text: str) -> int | None:
    """Number of CPUs in a kernel CPU list such as ``0-31,64-95``; None if not one."""
    count = 0
    for part in text.strip().split(","):
        m = re.fullmatch(r"(\d{1,5})(?:-(\d{1,5}))?", part.strip())
        if m is None:
            return None
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        if hi < lo:
            return None
        count += hi - lo + 1
    return count


def isa_level(blocks: list[dict[str, str]]) -> tuple[str, str]:
    """(spec isa, why) from the first processor's flags or features."""
    first = next((b for b in blocks if "flags" in b or "Features" in b), {})
    if "Features" in first and "flags" not in first:
        features = set(first["Features"].split())
        if "asimd" in features:  # AArch64's name; 32-bit ARM calls it "neon"
            if "asimddp" in features:
                return "aarch64", "Features list asimd (AArch64 NEON) with asimddp (dot product)"
            return "aarch64-v8.0", (
                "Features list asimd (AArch64 NEON) WITHOUT asimddp (dot product): "
                "llama.cpp repacks nothing"
            )
        return "x86-64", "Features list no asimd: not AArch64; x86-64 is the generic level"
    flags = set(first.get("flags", "").split())
    if not flags:
        return "x86-64", "no flags line: not x86 or AArch64; x86-64 is the generic level"
    if all(f in flags for f in X86_64_V3 + X86_64_V4):
        why = "flags have every x86-64-v3 and v4 feature (" + " ".join(X86_64_V4) + ")"
        if all(f in flags for f in AMX):
            return "x86-64-v4-amx", f"{why} and {' '.join(AMX)}"
        return "x86-64-v4", why
    missing = [f for f in X86_64_V3 if f not in flags]
    if not missing:
        return "x86-64-v3", "flags have every x86-64-v3 feature (" + " ".join(X86_64_V3) + ")"
    return "x86-64", "flags lack x86-64-v3's " + " ".join(missing)


def _sys_cores(root: Path) -> tuple[int | None, str]:
    base = root / "sys/devices/system/cpu"
    for name in ("core_cpus_list", "thread_siblings_list"):
        sets: set[str] = set()
        try:
            cpus = sorted(p for p in base.iterdir() if re.fullmatch(r"cpu\d+", p.name))
        except OSError:
            return None, "no core ids in /proc/cpuinfo, /sys/devices/system/cpu unreadable"
        for cpu in cpus:
            text, _ = read_text(root, f"sys/devices/system/cpu/{cpu.name}/topology/{name}", 4096)
            if text is not None and text.strip():
                sets.add(text.strip())
        if sets:
            return len(sets), f"/sys/devices/system/cpu/cpu*/topology/{name} (distinct lists)"
    return None, "neither /proc/cpuinfo core ids nor /sys topology"


def read_cpu(root: Path = Path("/")) -> CpuFacts:
    text, why = read_text(root, "proc/cpuinfo")
    blocks = cpuinfo_blocks(text) if text is not None else []
    procs = [b for b in blocks if "processor" in b]
    model = next((b["model name"] for b in procs if b.get("model name")), None)

    pairs = {(b.get("physical id"), b.get("core id")) for b in procs}
    cores: int | None
    if procs and all(p is not None and c is not None for p, c in pairs):
        cores, cores_how = len(pairs), "/proc/cpuinfo (unique physical id, core id pairs)"
    else:
        cores, cores_how = _sys_cores(root)
    ids = {b["physical id"] for b in procs if "physical id" in b}

    online, _ = read_text(root, "sys/devices/system/cpu/online", 4096)
    threads = cpu_list_count(online) if online is not None else None
    if threads is not None:
        threads_how = f"/sys/devices/system/cpu/online: {online.strip() if online else ''}"
    elif procs:
        threads, threads_how = len(procs), "/proc/cpuinfo: processor entries"
    else:
        threads_how = "neither /sys/devices/system/cpu/online nor /proc/cpuinfo"

    try:
        nodes = [
            p
            for p in (root / "sys/devices/system/node").iterdir()
            if re.fullmatch(r"node\d+", p.name)
        ]
        numa: int | None = len(nodes) or None
    except OSError:
        numa = None

    isa, isa_how = isa_level(blocks) if text is not None else (None, why)
    sockets = len(ids) or None
    return CpuFacts(model, cores, cores_how, threads, threads_how, sockets, numa, isa, isa_how, why)


# ---------------------------------------------------------------- memory


def read_memory(root: Path = Path("/")) -> MemFacts:
    text, why = read_text(root, "proc/meminfo")
    values: dict[str, int] = {}
    for line in (text or "").splitlines():
        m = re.fullmatch(r"([A-Za-z0-9_()]+):\s*(\d{1,20})(\s*kB)?\s*", line)
        if m:
            values[m.group(1)] = int(m.group(2)) * (1024 if m.group(3) else 1)
    if text is not None and "MemTotal" not in values:
        why = "/proc/meminfo has no MemTotal line"
    return MemFacts(
        values.get("MemTotal"),
        values.get("MemAvailable"),
        values.get("Mlocked"),
        values.get("HugePages_Total"),
        values.get("Hugepagesize"),
        why,
    )


def read_memlock(getrlimit: Callable[[int], tuple[int, int]] | None = None) -> Memlock:
    try:
        soft, hard = (getrlimit or resource.getrlimit)(resource.RLIMIT_MEMLOCK)
    except (OSError, ValueError) as exc:
        return Memlock(None, None, f"getrlimit(RLIMIT_MEMLOCK) failed: {exc}")
    inf = resource.RLIM_INFINITY
    return Memlock(None if soft == inf else soft, None if hard == inf else hard, "")


# ---------------------------------------------------------------- CDI

_CDI_KIND = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*")
_CDI_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]*")


def cdi_names(data: Any) -> tuple[list[str], str]:
    """(qualified device names, problem) of one loaded CDI spec (cdiVersion, kind, devices)."""
    if not isinstance(data, dict):
        return [], "not a CDI spec (a mapping with kind and devices)"
    kind = data.get("kind")
    if not isinstance(kind, str) or not _CDI_KIND.fullmatch(kind):
        return [], "no valid 'kind' (VENDOR/CLASS, e.g. nvidia.com/gpu)"
    devices = data.get("devices")
    if not isinstance(devices, list):
        return [], "no 'devices' list"
    names: list[str] = []
    for i, dev in enumerate(devices):
        name = dev.get("name") if isinstance(dev, dict) else None
        if not isinstance(name, str) or not _CDI_NAME.fullmatch(name):
            return names, f"devices[{i}] has no valid 'name'"
        names.append(f"{kind}={name}")
    return names, ""


def read_cdi(root: Path = Path("/")) -> CdiFacts:
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    names: set[str] = set()
    files: list[str] = []
    problems: list[str] = []
    for d in CDI_DIRS:
        try:
            entries = sorted(
                p for p in (root / d).iterdir() if p.suffix in (".yaml", ".yml", ".json")
            )
        except OSError:
            continue  # no such directory: no specs there
        for path in entries:
            shown = _shown(root, path)
            text, why = read_text(root, path.relative_to(root).as_posix(), MAX_CDI)
            if text is None:
                problems.append(why)
                continue
            try:
                data = YAML(typ="safe", pure=True).load(text)
            except (YAMLError, ValueError, RecursionError) as exc:
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                problems.append(f"{shown}: not YAML or JSON: {first}")
                continue
            found, problem = cdi_names(data)
            files.append(shown)
            names.update(found)
            if problem:
                problems.append(f"{shown}: {problem}")
    return CdiFacts(tuple(sorted(names)), tuple(files), tuple(problems))


# ---------------------------------------------------------------- podman


def read_podman(timeout: float = PODMAN_TIMEOUT_S) -> PodmanFacts:
    try:
        done = subprocess.run(
            ["podman", "--version"],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except FileNotFoundError:
        return PodmanFacts(None, "", "podman is not on PATH")
    except subprocess.TimeoutExpired:
        return PodmanFacts(None, "", f"podman --version did not answer in {timeout:g} s")
    except OSError as exc:
        return PodmanFacts(None, "", f"podman --version could not run: {exc.strerror or exc}")
    lines = done.stdout.strip().splitlines()
    first = lines[0].strip() if lines else ""
    if done.returncode != 0:
        return PodmanFacts(None, first, f"podman --version exited with status {done.returncode}")
    m = re.search(r"\bversion (\d{1,4}\.\d{1,4}(?:\.\d{1,4})?)", first)
    if m is None:
        return PodmanFacts(None, first, "podman --version printed no version number")
    return PodmanFacts(m.group(1), first, "")
