"""``layoutgen doctor``: a spec and its plan, compared with the live host.

Two halves, as everywhere in layoutgen: :func:`gather` here does the I/O (the
NVML report is read by the caller; /proc, model files, rendered and installed
units, podman, systemctl) and returns a :class:`LiveHost`;
:func:`layoutgen.live.findings.diagnose` is pure, ``(Validated, LiveHost) ->
findings``, each located at the spec line it concerns through the validator's
own ``Document.diagnostic``.

What doctor can and cannot tell:

- A service counts as *running* when its port is listening, unless systemd
  knows its unit and says it is not active; then whatever listens is something
  else.  Whose socket it is, doctor does not find out (that needs every
  process's file descriptors, often other users').  Rootful podman with
  netavark forwards ports without a listening socket: such a service looks
  stopped, and its VRAM counts as foreign.
- GPU processes cannot be matched to services by pid (a container's pid is
  not known to the spec), so a process counts as "possibly this layout's"
  when its name is the server's (``llama-server``, the native binary's name,
  ``python``/``vllm`` for vLLM, ``ggml-rpc-server``) and a service of that
  runtime is running on that GPU; every other process is foreign.
- A foreign process within the GPU's ``reserve`` is what the reserve is for
  (README: "display, other users") and draws no finding; beyond it, the plan
  fits while ``used + foreign <= total`` (the foreign use replaces the reserve).
- Measured VRAM of running services may differ from the plan by
  ``max(DRIFT_PERCENT %, DRIFT_FLOOR)`` before doctor says so: compute
  buffers are estimates and the per-process overhead a flat guess (seed 001
  measured 1.2-2.2 GiB against the 1 GiB default), so closer than half a GiB
  is noise, and 5 % of a 90 GiB card is the size of one expert layer.
- The build of each runtime a service uses is read on the host
  (:mod:`layoutgen.live.hostbuilds`: an image's own version label, its tag, else
  the program's ``--version`` run without a GPU, network or pull, bounded), and
  compared with ``version:``.  doctor runs what the spec names to ask it: the
  native ``binary:`` itself, or the image's entrypoint in a throwaway container.
  A tag is trusted as written (a retagged image reports the tag's build).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from layoutgen.errors import Diagnostic
from layoutgen.live import hostbuilds, hostfacts, ports
from layoutgen.live.nvml import NvmlReport
from layoutgen.render.units import rpc_unit_name
from layoutgen.render.validate import Validated
from layoutgen.spec.schema import Gpu as SpecGpu
from layoutgen.spec.schema import Spec

MiB = 1 << 20
GiB = 1 << 30
DRIFT_PERCENT = 5
DRIFT_FLOOR = 512 * MiB
#: a suggested reserve is the foreign use rounded up to this
RESERVE_STEP = 256 * MiB
#: rendered units larger than this are not units; installed ones are not read past it
MAX_UNIT = 1 << 20
SYSTEMCTL_TIMEOUT_S = 10.0
ACTIVE = ("active", "activating", "reloading")
RPC_SERVER = "ggml-rpc-server"
FORMATS = ("text", "json", "github")


@dataclass(frozen=True)
class FileState:
    size: int | None  # bytes; None when missing or unreadable
    reason: str = ""  # why size is None


@dataclass(frozen=True)
class InstalledUnit:
    name: str  # "grandpa.container"
    path: str  # where it is installed
    data: bytes


@dataclass(frozen=True)
class LiveHost:
    """Everything doctor compares with the spec, as read at one moment."""

    nvml: NvmlReport
    mem_available: int | None  # bytes, /proc/meminfo MemAvailable; None: unknown
    memlock: int | None  # bytes, hard RLIMIT_MEMLOCK; None: unlimited or unknown
    sockets: ports.Sockets
    podman: str | None  # "5.4.2"; None: not found
    podman_reason: str = ""  # why podman is None
    #: host path of each model file and profile shard -> its state
    model_files: Mapping[str, FileState] = field(default_factory=dict)
    rendered_dir: str = ""  # out/<host>
    #: "quadlet/grandpa.container" -> bytes, this spec's units under rendered_dir
    rendered: Mapping[str, bytes] = field(default_factory=dict)
    installed: tuple[InstalledUnit, ...] = ()
    #: "grandpa.service" -> systemd's ActiveState, for units systemd has loaded
    unit_states: Mapping[str, str] = field(default_factory=dict)
    #: host.cpu.isa as /proc/cpuinfo's flags give it (layoutgen probe's reading), and
    #: why; None: not read
    cpu_isa: str | None = None
    cpu_isa_how: str = ""
    #: runtime id -> the build its image or binary runs here (hostbuilds); a runtime
    #: missing was not looked at
    builds: Mapping[str, hostbuilds.HostBuild] = field(default_factory=dict)
    #: this host's name and where it was read; None: not read (no check)
    hostname: str | None = None
    hostname_how: str = ""
    #: physical cores and hardware threads as probe counts them, and how; None: unknown
    cpu_cores: int | None = None
    cpu_cores_how: str = ""
    cpu_threads: int | None = None
    cpu_threads_how: str = ""
    #: sockets (distinct physical ids) and NUMA nodes (/sys/devices/system/node);
    #: None: unknown
    cpu_sockets: int | None = None
    cpu_numa_nodes: int | None = None
    #: whether doctor runs as root (then the services are rootful: root raises its own
    #: limits, as the units ask); None: not known
    rootful: bool | None = None


@dataclass(frozen=True, order=True)
class Finding:
    diagnostic: Diagnostic
    check: str  # gpu, foreign-process, vram-drift, ram, memlock, port, model-file, ...

    def as_json(self) -> dict[str, object]:
        d = self.diagnostic
        return {
            "file": d.file,
            "line": d.line,
            "col": d.col,
            "severity": d.severity.value,
            "check": self.check,
            "message": d.message,
        }


# ------------------------------------------------------------------ gather


def default_install_dirs() -> tuple[Path, ...]:
    """Where README's Deploying section installs units, rootless and rootful."""
    home = Path.home()
    return (
        home / ".config/containers/systemd",
        Path("/etc/containers/systemd"),
        home / ".config/systemd/user",
        Path("/etc/systemd/system"),
    )


def gather(
    v: Validated,
    nvml: NvmlReport,
    *,
    out: Path,
    root: Path = Path("/"),
    install_dirs: Sequence[Path] | None = None,
    read_memory: Callable[[Path], hostfacts.MemFacts] = hostfacts.read_memory,
    read_memlock: Callable[[], hostfacts.Memlock] = hostfacts.read_memlock,
    read_podman: Callable[[], hostfacts.PodmanFacts] = hostfacts.read_podman,
    unit_states: Callable[[Sequence[str]], Mapping[str, str]] | None = None,
    read_build: Callable[
        [str, str | None, str | None], hostbuilds.HostBuild
    ] = hostbuilds.runtime_build,
    euid: Callable[[], int] = os.geteuid,
) -> LiveHost:
    """Read what :func:`diagnose` compares; ``root`` prefixes /proc and model paths."""
    spec = v.spec
    podman = read_podman()
    names = unit_names(spec)
    rendered = _rendered(out / spec.host.name, names)
    dirs = default_install_dirs() if install_dirs is None else install_dirs
    states = (unit_states or systemctl_states)([f"{n}.service" for n in names])
    cpu = hostfacts.read_cpu(root)
    name = hostfacts.read_hostname(root)
    if root != Path("/") and name.source != "/proc/sys/kernel/hostname":
        name = hostfacts.HostName(None, "", "not under the root given")  # not this host's
    used = sorted({svc.runtime for svc in spec.services.values()})
    builds = {
        rid: read_build(
            spec.runtimes[rid].kind, spec.runtimes[rid].image, spec.runtimes[rid].binary
        )
        for rid in used
        if rid in spec.runtimes
    }
    return LiveHost(
        nvml=nvml,
        mem_available=read_memory(root).available,
        memlock=read_memlock().hard,
        sockets=ports.read(root),
        podman=podman.version,
        podman_reason=podman.reason,
        model_files={p: _stat(root, p) for p in model_paths(v)},
        rendered_dir=str(out / spec.host.name),
        rendered=rendered,
        installed=_installed(dirs, [PurePosixPath(r).name for r in rendered]),
        unit_states=states,
        cpu_isa=cpu.isa,
        cpu_isa_how=cpu.isa_how,
        builds=builds,
        hostname=name.name,
        hostname_how=name.source,
        cpu_cores=cpu.cores,
        cpu_cores_how=cpu.cores_how,
        cpu_threads=cpu.threads,
        cpu_threads_how=cpu.threads_how,
        cpu_sockets=cpu.sockets,
        cpu_numa_nodes=cpu.numa_nodes,
        rootful=euid() == 0,
    )


def rpc_here(spec: Spec) -> list[SpecGpu]:
    return [
        g for g in spec.host.gpus if g.rpc is not None and g.rpc.served_by in (None, spec.host.name)
    ]


def unit_names(spec: Spec) -> list[str]:
    """This spec's unit names on this host: its services and the rpc servers it runs."""
    return sorted([*spec.services, *(rpc_unit_name(g.id) for g in rpc_here(spec))])


def model_paths(v: Validated) -> list[str]:
    """Each model's path, and every shard its profile lists (beside the first)."""
    out: set[str] = set()
    for mid, model in v.spec.models.items():
        out.add(model.path)
        profile = v.profiles.get(mid)
        for f in profile.files if profile is not None else ():
            out.add(str(PurePosixPath(model.path).parent / f.name))
    return sorted(out)


def _stat(root: Path, path: str) -> FileState:
    """The file's size, following links (a Hugging Face snapshot links into blobs/)."""
    try:
        info = (root / path.lstrip("/")).stat()
    except FileNotFoundError:
        return FileState(None, "does not exist")
    except (OSError, ValueError) as exc:
        return FileState(None, f"cannot be read: {getattr(exc, 'strerror', None) or exc}")
    if not stat.S_ISREG(info.st_mode):
        return FileState(None, "is not a regular file")
    return FileState(info.st_size)


def _read_small(path: Path) -> bytes | None:
    try:
        if not path.is_file():
            return None
        with path.open("rb") as f:
            data = f.read(MAX_UNIT + 1)
    except OSError:
        return None
    return data if len(data) <= MAX_UNIT else None


def _rendered(host_dir: Path, names: Iterable[str]) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for name in names:
        for rel in (f"quadlet/{name}.container", f"systemd/{name}.service"):
            data = _read_small(host_dir / rel)
            if data is not None:
                out[rel] = data
    return out


def _installed(dirs: Sequence[Path], names: Iterable[str]) -> tuple[InstalledUnit, ...]:
    found = []
    for name in sorted(set(names)):
        for d in dirs:
            data = _read_small(d / name)
            if data is not None:
                found.append(InstalledUnit(name, str(d / name), data))
    return tuple(found)


def systemctl_states(units: Sequence[str]) -> dict[str, str]:
    """ActiveState of each unit systemd has loaded, system or user manager ("" skipped).

    A unit either manager calls active counts as active.  No systemctl, no user
    session, a timeout: that manager says nothing, and the services count as
    running whenever their port listens.
    """
    states: dict[str, str] = {}
    for scope in ([], ["--user"]):
        for unit, state in _show(scope, units).items():
            if state in ACTIVE or unit not in states:
                states[unit] = state
    return states


def _show(scope: list[str], units: Sequence[str]) -> dict[str, str]:
    if not units:
        return {}
    argv = ["systemctl", *scope, "show", "--property=LoadState,ActiveState", "--", *units]
    try:
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=SYSTEMCTL_TIMEOUT_S,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return {}
    return parse_show(done.stdout, units) if done.returncode == 0 else {}


def parse_show(text: str, units: Sequence[str]) -> dict[str, str]:
    """``systemctl show`` prints one block per unit, in order, blank-line separated."""
    blocks = [b for b in text.strip().split("\n\n")]
    if len(blocks) != len(units):
        return {}
    out: dict[str, str] = {}
    for unit, block in zip(units, blocks, strict=True):
        props = dict(line.partition("=")[::2] for line in block.splitlines())
        if props.get("LoadState") == "loaded" and props.get("ActiveState"):
            out[unit] = props["ActiveState"]
    return out


def builds_of_refused(
    path: Path,
    name: str,
    read_build: Callable[
        [str, str | None, str | None], hostbuilds.HostBuild
    ] = hostbuilds.runtime_build,
) -> list[Diagnostic]:
    """For a spec validate refused: the build each runtime without ``version:`` runs
    here, located at the runtime, so doctor still says what to write (the usual
    refusal of an unversioned spec is builds that spell a flag differently).

    Only runtimes whose kind, image or binary are what the schema accepts are asked:
    nothing the schema would refuse is run."""
    from layoutgen.errors import LayoutgenError, Problem, Severity
    from layoutgen.inputs import literals, source

    try:
        doc = source.load(path, name)
    except (LayoutgenError, OSError):
        return []
    data = doc.plain()
    runtimes = data.get("runtimes") if isinstance(data, dict) else None
    out: list[Diagnostic] = []
    for rid, rt in sorted(runtimes.items() if isinstance(runtimes, dict) else []):
        if not isinstance(rt, dict) or rt.get("version") is not None:
            continue
        kind, image, binary = rt.get("kind"), rt.get("image"), rt.get("binary")
        if kind not in hostbuilds.KINDS or isinstance(image, str) == isinstance(binary, str):
            continue
        try:
            if isinstance(image, str):
                literals.image(image)
            else:
                literals.host_path(str(binary))
        except ValueError:
            continue
        host = read_build(
            kind,
            image if isinstance(image, str) else None,
            binary if isinstance(binary, str) else None,
        )
        if host.version is None:
            continue
        message = (
            f"runtimes.{rid}: no version:; the {host.what} runs build {host.version} "
            f"({host.how}): write version: {json.dumps(host.version)}"
        )
        problem = Problem(("runtimes", rid), message, Severity.WARNING, at_key=True)
        out.append(doc.diagnostic(problem))
    return out
