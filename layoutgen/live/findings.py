"""The pure half of ``layoutgen doctor``: ``(Validated, LiveHost) -> findings``.

Each check compares one kind of fact that :func:`layoutgen.live.doctor.gather`
read with the spec and its plan, and yields problems located by spec path;
:func:`diagnose` turns them into diagnostics at the spec line they concern,
through the validator's own ``Document.diagnostic``.  The rules each check
follows (what counts as running, foreign, drift) are in the doctor module's
notes.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath

from layoutgen.errors import Problem, Severity, SpecPath
from layoutgen.live.doctor import (
    ACTIVE,
    DRIFT_FLOOR,
    DRIFT_PERCENT,
    FORMATS,
    RESERVE_STEP,
    RPC_SERVER,
    Finding,
    GiB,
    LiveHost,
    MiB,
    rpc_here,
)
from layoutgen.live.nvml import Gpu, GpuProcess, NvmlReport
from layoutgen.render.units import _pinned, rpc_unit_name
from layoutgen.render.validate import Validated
from layoutgen.solve.plan import DevicePlan, ServicePlan
from layoutgen.spec.roles import ResolvedService
from layoutgen.spec.schema import Gpu as SpecGpu
from layoutgen.spec.schema import Spec


@dataclass(frozen=True)
class _Found:
    check: str
    problem: Problem


def _error(check: str, path: SpecPath, message: str) -> _Found:
    return _Found(check, Problem(path, message, Severity.ERROR))


def _warning(check: str, path: SpecPath, message: str) -> _Found:
    return _Found(check, Problem(path, message, Severity.WARNING))


def diagnose(v: Validated, live: LiveHost, *, only_gpus: bool = False) -> list[Finding]:
    """Every difference between the spec's plan and the live host, located, sorted.

    ``only_gpus``: just the GPUs (``render --probe``), for which ``live`` needs
    only its NVML report.
    """
    found: list[_Found] = []
    for check in (check_gpus,) if only_gpus else _CHECKS:
        found.extend(check(v, live))
    data = v.doc.plain()
    out = {
        Finding(
            v.doc.diagnostic(dataclasses.replace(f.problem, at_key=_nested(data, f.problem.path))),
            f.check,
        )
        for f in found
    }
    return sorted(out)


def _nested(data: object, path: SpecPath) -> bool:
    """Whether ``path`` names a mapping or list: pointed at by its key (``grandpa:``),
    not by its first line."""
    for part in path:
        try:
            data = data[part]  # type: ignore[index]
        except (KeyError, IndexError, TypeError):
            return False
    return isinstance(data, dict | list)


def format_findings(findings: Sequence[Finding], fmt: str) -> str:
    """text (gcc-style lines), json (a list of objects) or github (annotations)."""
    if fmt == "json":
        return json.dumps([f.as_json() for f in findings], indent=2) + "\n"
    if fmt == "github":
        lines = [f.diagnostic.github() for f in findings]
    elif fmt == "text":
        lines = [f.diagnostic.gcc() for f in findings]
    else:
        raise ValueError(f"unknown format {fmt!r}: use one of {', '.join(FORMATS)}")
    return "".join(line + "\n" for line in lines)


def exit_code(findings: Sequence[Finding]) -> int:
    """0 healthy, 1 any finding (warnings included: doctor is asked for differences)."""
    return 1 if findings else 0


# ------------------------------------------------------------ shared facts


def running(v: Validated, live: LiveHost) -> set[str]:
    """Services whose port listens and whose unit systemd does not call inactive."""
    out = set()
    for name, svc in v.spec.services.items():
        state = live.unit_states.get(f"{name}.service")
        if live.sockets.on(svc.port) and (state is None or state in ACTIVE):
            out.add(name)
    return out


def server_names(v: Validated, rs: ResolvedService) -> tuple[str, ...]:
    """Names (/proc/PID/comm, at most 15 characters) the service's server process has."""
    runtime = v.spec.runtimes[rs.service.runtime]
    if runtime.kind == "vllm":
        return ("python", "vllm", "VLLM")  # prefixes: python3.12, VLLM::EngineCore
    if runtime.binary is not None:
        return (PurePosixPath(runtime.binary).name[:15], "llama-server")
    return ("llama-server",)


def is_server(process: GpuProcess, names: Sequence[str]) -> bool:
    return any(process.name == n or process.name.startswith(n) for n in names)


def on_device(sp: ServicePlan, device: str) -> int:
    """What the plan puts on one device for one service, all parts."""
    return sum(p.total for b, p in sp.buffers.items() if sp.device_of[b] == device)


def pinned_bytes(v: Validated, rs: ResolvedService, sp: ServicePlan) -> int:
    """Host memory the service locks: its pinned CUDA_Host buffer, every host buffer
    with --mlock (the renderer's rule for memlock=-1, render.units)."""
    if not _pinned(v.spec, rs, sp):
        return 0
    return sum(
        p.total
        for b, p in sp.buffers.items()
        if sp.device_of[b] == "host" and (rs.mlock or b == "CUDA_Host")
    )


def mib(n: int) -> str:
    return f"{n / MiB:,.0f} MiB"


def size_literal(n: int) -> str:
    """``n`` rounded up to RESERVE_STEP, as a spec size: 6GiB, 6400MiB."""
    n = -(-n // RESERVE_STEP) * RESERVE_STEP
    return f"{n // GiB}GiB" if n % GiB == 0 else f"{n // MiB}MiB"


def matched_gpus(spec: Spec, report: NvmlReport) -> dict[str, tuple[int, Gpu]]:
    """Spec GPU id -> (its index in host.gpus, the live GPU): by UUID, else by index."""
    out: dict[str, tuple[int, Gpu]] = {}
    if not report.available:
        return out
    by_uuid = {g.uuid: g for g in report.gpus}
    by_index = {g.index: g for g in report.gpus}
    for i, g in enumerate(spec.host.gpus):
        if g.rpc is not None:
            continue
        hit = by_uuid.get(g.uuid) if g.uuid is not None else by_index.get(g.index or 0)
        if hit is not None:
            out[g.id] = (i, hit)
    return out


def _device(v: Validated, device: str) -> DevicePlan | None:
    return next((d for d in v.plan.devices if d.id == device), None)


def _amount(n: int) -> str:
    return f"{n // 1024:,} KiB" if n < MiB else mib(n)


# ------------------------------------------------------------------ checks


def check_gpus(v: Validated, live: LiveHost) -> list[_Found]:
    """Each local spec GPU is there (by UUID, else index), with its name and memory."""
    local = [(i, g) for i, g in enumerate(v.spec.host.gpus) if g.rpc is None]
    report = live.nvml
    if not local:
        return []
    if not report.available:
        return [
            _error(
                "gpu",
                ("host", "gpus"),
                f"host.gpus: NVML is not available ({report.reason}): the {len(local)} local "
                "GPU(s) cannot be checked; run doctor where the NVIDIA driver is loaded",
            )
        ]
    seen = "; ".join(f"{g.index}: {g.name} {g.uuid}" for g in report.gpus) or "no GPU"
    matched = matched_gpus(v.spec, report)
    found: list[_Found] = []
    for i, g in local:
        where = f"host.gpus[{i}]"
        if g.id not in matched:
            if g.uuid is not None:
                found.append(
                    _error(
                        "gpu",
                        ("host", "gpus", i, "uuid"),
                        f"{where}.uuid: {g.id}: no GPU with UUID {g.uuid} on this host (NVML "
                        f"sees {seen}); put the card back, or write the UUID "
                        "'layoutgen probe' prints",
                    )
                )
            else:
                found.append(
                    _error(
                        "gpu",
                        ("host", "gpus", i, "index"),
                        f"{where}.index: {g.id}: no GPU at index {g.index} on this host (NVML "
                        f"sees {seen}); put the card back, or remove it from the spec",
                    )
                )
            continue
        gpu = matched[g.id][1]
        if gpu.index != g.index:
            found.append(
                _warning(
                    "gpu",
                    ("host", "gpus", i, "index"),
                    f"{where}.index: {g.id} moved from index {g.index} to {gpu.index}: render "
                    f"uses the UUID, so its units still find the card; write index: {gpu.index}",
                )
            )
        found += _gpu_name(live, i, g, gpu) + _gpu_memory(v, i, g, gpu)
    return found


def _gpu_name(live: LiveHost, i: int, g: SpecGpu, gpu: Gpu) -> list[_Found]:
    if g.name is None or gpu.name == g.name:
        return []
    text = (
        f"host.gpus[{i}].name: {g.id} (index {gpu.index}) is {gpu.name!r}, the spec says {g.name!r}"
    )
    if g.uuid is not None:
        return [_warning("gpu", ("host", "gpus", i, "name"), f"{text}; write name: {gpu.name!r}")]
    there = [x for x in live.nvml.gpus if x.name == g.name and x.index != gpu.index]
    if there:
        return [
            _error(
                "gpu",
                ("host", "gpus", i, "name"),
                f"{text}; a {g.name!r} is at index {there[0].index}: did the indices change? "
                f"write uuid: {there[0].uuid} so the units follow the card",
            )
        ]
    return [
        _warning(
            "gpu",
            ("host", "gpus", i, "name"),
            f"{text}; another card? check its vram and write name: {gpu.name!r}",
        )
    ]


def _gpu_memory(v: Validated, i: int, g: SpecGpu, gpu: Gpu) -> list[_Found]:
    """Compared in whole MiB, as ggml and the spec's examples write it."""
    have, said = gpu.total // MiB, g.vram // MiB
    if have == said:
        return []
    more = "more" if have > said else "less"
    text = (
        f"host.gpus[{i}].vram: {g.id}: NVML reports {have:,} MiB total, the spec says "
        f"{said:,} MiB ({abs(have - said):,} MiB {more})"
    )
    dev = _device(v, g.id)
    if have < said and dev is not None and dev.used + dev.reserve > gpu.total:
        return [
            _error(
                "gpu",
                ("host", "gpus", i, "vram"),
                f"{text}: the plan needs {mib(dev.used + dev.reserve)} with the reserve, more "
                f"than the card has; write vram: {have}MiB and plan again",
            )
        ]
    return [_warning("gpu", ("host", "gpus", i, "vram"), f"{text}; write vram: {have}MiB")]


def check_foreign(v: Validated, live: LiveHost) -> list[_Found]:
    """Processes on the layout's GPUs that are not its servers, and whether the plan fits."""
    run = running(v, live)
    by_name = {rs.name: rs for rs in v.services}
    rpc_up = any(live.sockets.on(_port(g)) for g in rpc_here(v.spec))
    found: list[_Found] = []
    for gid, (i, gpu) in sorted(matched_gpus(v.spec, live.nvml).items()):
        names = [
            n for s in sorted(run) if gid in by_name[s].gpus for n in server_names(v, by_name[s])
        ]
        foreign = sorted(
            (
                p
                for p in gpu.processes
                if not is_server(p, names) and not (rpc_up and p.name == RPC_SERVER)
            ),
            key=lambda p: p.pid,
        )
        dev = _device(v, gid)
        if not foreign or dev is None:
            continue
        held = sum(p.used or 0 for p in foreign)
        if held <= dev.reserve and all(p.used is not None for p in foreign):
            continue  # what the reserve is for
        short = dev.used + max(held, dev.reserve) - gpu.total
        them = "it" if len(foreign) == 1 else "them"
        for p in foreign:
            what = mib(p.used) if p.used is not None else "memory NVML does not report"
            text = f"{gid}: process {p.pid} ({p.name or 'unknown'}) holds {what}"
            if len(foreign) > 1:
                text += f" ({len(foreign)} processes not of this layout hold {mib(held)} there)"
            where: SpecPath = ("host", "gpus", i, "reserve")
            if held <= dev.reserve:
                found.append(
                    _warning(
                        "foreign-process",
                        where,
                        f"{text}; the reserve of {mib(dev.reserve)} covers it if it is small",
                    )
                )
            elif short > 0:
                found.append(
                    _error(
                        "foreign-process",
                        where,
                        f"{text}; the plan needs {mib(dev.used)} of {mib(gpu.total)}, "
                        f"{mib(short)} short with {them} there: stop {them}, or raise reserve "
                        f"to {size_literal(held)} and let the plan shrink by {mib(short)}",
                    )
                )
            else:
                found.append(
                    _warning(
                        "foreign-process",
                        where,
                        f"{text}, more than the reserve of {mib(dev.reserve)}; the plan "
                        f"({mib(dev.used)} of {mib(gpu.total)}) still fits beside {them} with "
                        f"{mib(-short)} to spare: raise reserve to {size_literal(held)} so "
                        "the plan counts it",
                    )
                )
    return found


def _port(g: SpecGpu) -> int:
    assert g.rpc is not None
    return int(g.rpc.endpoint.rpartition(":")[2])


def check_drift(v: Validated, live: LiveHost) -> list[_Found]:
    """Running services' VRAM per GPU, measured by NVML, against the plan."""
    run = running(v, live)
    by_name = {rs.name: rs for rs in v.services}
    order = {n: k for k, n in enumerate(v.plan.order)}
    found: list[_Found] = []
    for gid, (_, gpu) in sorted(matched_gpus(v.spec, live.nvml).items()):
        group = sorted(
            (s for s in run if on_device(v.plan.service(s), gid)),
            key=lambda s: (order.get(s, len(order)), s),
        )
        if not group:
            continue
        names = [n for s in group for n in server_names(v, by_name[s])]
        procs = sorted((p for p in gpu.processes if is_server(p, names)), key=lambda p: p.pid)
        if any(p.used is None for p in procs):
            continue  # NVML cannot say: nothing to compare
        measured = sum(p.used or 0 for p in procs)
        planned = sum(on_device(v.plan.service(s), gid) for s in group)
        if abs(measured - planned) <= max(planned * DRIFT_PERCENT // 100, DRIFT_FLOOR):
            continue
        first = group[0]
        who = f"services.{first}" if len(group) == 1 else "services " + ", ".join(group)
        if not procs:
            ports_ = ", ".join(str(v.spec.services[s].port) for s in group)
            text = (
                f"{who}: port {ports_} is listening, but no {names[0]} process is on {gid}, "
                f"where the plan puts {mib(planned)}: is another program on the port, or is "
                "the server still loading?"
            )
        else:
            sign = "+" if measured > planned else "-"
            pids = ", ".join(f"{p.pid} ({p.name})" for p in procs)
            servers = "its server" if len(procs) == 1 else "the servers"
            hold = "holds" if len(procs) == 1 else "hold"
            text = (
                f"{who}: on {gid} {servers} {pids} {hold} {mib(measured)}, the plan says "
                f"{mib(planned)} ({sign}"
                f"{mib(abs(measured - planned))}, beyond ±{DRIFT_PERCENT} % or "
                f"{mib(DRIFT_FLOOR)}): {_remedy(v, group, by_name, gid)}"
            )
        found.append(_warning("vram-drift", ("services", first, "measured"), text))
    return found


def _remedy(v: Validated, group: list[str], by_name: dict[str, ResolvedService], gid: str) -> str:
    logged = all(
        p.basis.get(k) == "measured"
        for s in group
        for b, p in v.plan.service(s).buffers.items()
        if v.plan.service(s).device_of[b] == gid
        for k in ("weights", "kv", "compute")
        if getattr(p, k)
    )
    if logged:
        return (
            "the buffers are measured already, so the difference is per-process overhead; "
            "set host.gpu_overhead to what NVML shows beyond them"
        )
    steps = []
    for s in group:
        runtime = v.spec.runtimes[by_name[s].service.runtime]
        if runtime.kind == "vllm":
            steps.append(f"{s}'s vLLM estimate is off (calibrate reads llama.cpp logs only)")
            continue
        logs = f"podman logs {s}" if runtime.image is not None else f"journalctl -u {s}.service"
        steps.append(
            f"{logs} > {s}.log 2>&1; layoutgen calibrate {s}.log {v.doc.name} --service {s}"
        )
        # one line per service, ';'-joined: a shell runs it as written
    return "measure it: " + "; ".join(steps)


def check_ram(v: Validated, live: LiveHost) -> list[_Found]:
    """Host RAM for the services not running yet, and the memlock limit for pinned ones."""
    run = running(v, live)
    found: list[_Found] = []
    stopped = [sp for sp in v.plan.services if sp.name not in run]
    dev = _device(v, "host")
    if stopped and dev is not None and live.mem_available is not None:
        held = sum(on_device(sp, "host") for sp in v.plan.services if sp.name in run)
        need = max(0, dev.used - held)
        if need > live.mem_available:
            names = ", ".join(sp.name for sp in stopped)
            less = (
                f" (the plan's {mib(dev.used)} less the {mib(held)} running services hold)"
                if held
                else ""
            )
            found.append(
                _error(
                    "ram",
                    ("host", "ram"),
                    f"host.ram: the services not running ({names}) need {mib(need)} of host "
                    f"RAM{less}; MemAvailable is "
                    f"{mib(live.mem_available)}, {mib(need - live.mem_available)} short: stop "
                    "what holds the memory, or move weights to the GPUs",
                )
            )
    if live.memlock is None:
        return found
    if live.rootful:
        # as root the services are rootful: root raises its own limit, as the units ask
        # (LimitMEMLOCK=infinity, --ulimit memlock=-1:-1); this process's limit is not theirs
        return found
    by_name = {rs.name: rs for rs in v.services}
    for sp in stopped:
        rs = by_name[sp.name]
        pins = pinned_bytes(v, rs, sp)
        if pins <= live.memlock:
            continue
        how = "--mlock" if rs.mlock else "CUDA_Host weights"
        written = rs.mlock and "mlock" in rs.service.model_fields_set
        where: SpecPath = ("services", sp.name, "mlock") if written else ("services", sp.name)
        found.append(
            _warning(
                "memlock",
                where,
                f"services.{sp.name}: pins {mib(pins)} of host memory ({how}), but this "
                f"user's memlock limit is {_amount(live.memlock)} (hard RLIMIT_MEMLOCK)"
                + (
                    " and doctor runs rootless (not as root): a rootless service"
                    if live.rootful is False
                    else ": a rootless service"
                )
                + " cannot raise it to the unlimited its unit asks for; run it rootful (as "
                "root), or set memlock unlimited for this user in /etc/security/limits.conf",
            )
        )
    return found


def check_cpu(v: Validated, live: LiveHost) -> list[_Found]:
    """host.cpu.isa against this host's flags, where the difference moves weights: a
    llama.cpp service without local GPUs repacks (CPU_REPACK) or copies (AMX) by the
    instruction set, so its host buffers are the plan's only at the spec's level."""
    from layoutgen.solve.footprint import setting

    isa = v.spec.host.cpu.isa
    if live.cpu_isa is None or live.cpu_isa == isa:
        return []
    moved: list[str] = []
    for rs in v.services:
        profile = v.profiles.get(rs.service.model)
        runtime = v.spec.runtimes.get(rs.service.runtime)
        if profile is None or runtime is None or runtime.rules().MEMORY != "tensors":
            continue
        s = setting(v.spec, rs, profile)
        if s.local_gpus:
            continue
        planned = s.rt.repacked(profile, isa, s.args)
        here = s.rt.repacked(profile, live.cpu_isa, s.args)
        if planned != here:
            a, b = (sum(n for _, n in r.values()) for r in (planned, here))
            moved.append(f"{rs.name} ({mib(a)} planned, {mib(b)} here)")
    if not moved:
        return []
    cpu = v.spec.host.cpu
    path: SpecPath = ("host", "cpu", "isa") if "isa" in cpu.model_fields_set else ("host", "cpu")
    return [
        _warning(
            "cpu",
            path,
            f"host.cpu.isa: this host is {live.cpu_isa} ({live.cpu_isa_how}), the plan "
            f"follows {isa}: llama.cpp repacks other weights here for "
            f"{', '.join(moved)}; write isa: {live.cpu_isa} (layoutgen probe reads it)",
        )
    ]


def check_host(v: Validated, live: LiveHost) -> list[_Found]:
    """The host's name, physical cores and hardware threads against the spec's: a spec
    for another machine, or thread counts planned for another CPU."""
    host = v.spec.host
    found: list[_Found] = []
    name = live.hostname
    if name is not None and name != host.name and name.split(".", 1)[0] != host.name:
        found.append(
            _warning(
                "host",
                ("host", "name"),
                f"host.name: this host is {name} ({live.hostname_how}), the spec is for "
                f"{host.name}: run doctor on {host.name}, or give this host's spec "
                f"(name: {name.split('.', 1)[0]})",
            )
        )
    threads = "the services' threads are checked against the spec's"
    numa = (
        "the plan's speed reads host RAM by the spec's NUMA layout (a BIOS NPS/SNC change moves it)"
    )
    for key, spec_n, here, how, why in (
        ("cores", host.cpu.cores, live.cpu_cores, live.cpu_cores_how, threads),
        ("threads", host.cpu.threads, live.cpu_threads, live.cpu_threads_how, threads),
        ("sockets", host.cpu.sockets, live.cpu_sockets, "distinct physical ids", numa),
        ("numa_nodes", host.cpu.nodes, live.cpu_numa_nodes, "/sys/devices/system/node", numa),
    ):
        if here is None or here == spec_n:
            continue
        found.append(
            _warning(
                "cpu",
                ("host", "cpu", key),
                f"host.cpu.{key}: the spec says {spec_n}, this host has {here} ({how}): "
                f"{why}; write {key}: {here} (layoutgen probe reads it)",
            )
        )
    return found


def check_ports(v: Validated, live: LiveHost) -> list[_Found]:
    """A service's port held by something else, or bound on all interfaces unasked."""
    if live.sockets.problems and v.spec.services:
        return [
            _warning(
                "port",
                ("services",),
                f"services: cannot read the socket tables ({'; '.join(live.sockets.problems)}): "
                "which services run, and their ports, are unknown",
            )
        ]
    found: list[_Found] = []
    for name, svc in sorted(v.spec.services.items()):
        socks = live.sockets.on(svc.port)
        if not socks:
            continue
        state = live.unit_states.get(f"{name}.service")
        shown = ", ".join(sorted({s.address for s in socks}))
        if state is not None and state not in ACTIVE:
            found.append(
                _error(
                    "port",
                    ("services", name, "port"),
                    f"services.{name}.port: port {svc.port} is in use (listening on {shown}) "
                    f"while {name}.service is {state}: something else holds it and the service "
                    f"cannot bind it; stop that (ss -ltnp 'sport = :{svc.port}' names it), or "
                    "give the service another port",
                )
            )
            continue
        wild = sorted({s.address for s in socks if s.wildcard})
        if wild and not svc.expose:
            found.append(
                _error(
                    "port",
                    ("services", name, "port"),
                    f"services.{name}.port: port {svc.port} listens on {', '.join(wild)} (all "
                    "interfaces: reachable from the network), but the service does not say "
                    "expose: true; start it from its rendered unit, which binds 127.0.0.1, or "
                    "write expose: true if it is meant to be reachable",
                )
            )
    return found


def check_models(v: Validated, live: LiveHost) -> list[_Found]:
    """Model files exist; where the profile records file sizes (``files:``, written by
    ``layoutgen inspect``), every shard has its size.  Hand-written profiles record
    none (only tensor bytes, which do not add up to a file's size: headers and
    padding), so for them only existence is checked."""
    found: list[_Found] = []
    for mid, model in sorted(v.spec.models.items()):
        state = live.model_files.get(model.path)
        where: SpecPath = ("models", mid, "path")
        if state is None:
            continue  # not looked at
        if state.size is None:
            found.append(
                _error(
                    "model-file",
                    where,
                    f"models.{mid}.path: {model.path} {state.reason}: download the model "
                    "there, or correct the path",
                )
            )
            continue
        profile = v.profiles.get(mid)
        if profile is None or not profile.files:
            continue
        folder = PurePosixPath(model.path).parent
        if PurePosixPath(model.path).name not in {f.name for f in profile.files}:
            found.append(
                _warning(
                    "model-file",
                    where,
                    f"models.{mid}.path: the profile {model.profile} lists "
                    f"{', '.join(f.name for f in profile.files)}, not "
                    f"{PurePosixPath(model.path).name}: is it the profile of another file?",
                )
            )
        for f in profile.files:
            shard = str(folder / f.name)
            got = live.model_files.get(shard)
            if got is None:
                continue
            if got.size is None:
                found.append(
                    _error(
                        "model-file",
                        where,
                        f"models.{mid}.path: {shard} {got.reason} (the profile "
                        f"{model.profile} lists {len(profile.files)} files): download the rest "
                        "of the model",
                    )
                )
            elif got.size != f.size:
                found.append(
                    _error(
                        "model-file",
                        where,
                        f"models.{mid}.path: {shard} is {got.size:,} bytes, the profile "
                        f"{model.profile} says {f.size:,}: another quantization or an "
                        "unfinished download; fetch it again, or write the profile anew with "
                        f"'layoutgen inspect {model.path} -o {model.profile}'",
                    )
                )
    return found


def check_units(v: Validated, live: LiveHost) -> list[_Found]:
    """Installed units whose bytes differ from the rendered ones in out/."""
    rendered = {PurePosixPath(rel).name: rel for rel in live.rendered}
    found: list[_Found] = []
    for unit in live.installed:
        rel = rendered.get(unit.name)
        if rel is None or unit.data == live.rendered[rel]:
            continue
        stem = PurePosixPath(unit.name).stem
        path, dotted = _unit_location(v.spec, stem)
        user = "--user " if "/.config/" in unit.path else ""
        found.append(
            _error(
                "stale-unit",
                path,
                f"{dotted}: {unit.path} differs from {live.rendered_dir}/{rel}: it was "
                f"installed before the last render; copy it again, run 'systemctl {user}"
                f"daemon-reload' and restart {stem}.service",
            )
        )
    return found


def _unit_location(spec: Spec, stem: str) -> tuple[SpecPath, str]:
    if stem in spec.services:
        return ("services", stem), f"services.{stem}"
    for i, g in enumerate(spec.host.gpus):
        if rpc_unit_name(g.id) == stem:
            return ("host", "gpus", i, "rpc"), f"host.gpus[{i}].rpc"
    return ("host", "name"), "host.name"  # pragma: no cover - gather reads only these names


def check_podman(v: Validated, live: LiveHost) -> list[_Found]:
    """podman is there when container services need it, and no older than host.podman."""
    spec = v.spec
    if not any(spec.runtimes[s.runtime].image is not None for s in spec.services.values()):
        return []
    where: SpecPath = ("host", "podman") if spec.host.podman is not None else ("host",)
    dotted = "host.podman" if spec.host.podman is not None else "host"
    if live.podman is None:
        return [
            _error(
                "podman",
                where,
                f"{dotted}: podman is not usable here ({live.podman_reason}); the container "
                "services need it",
            )
        ]
    if spec.host.podman is None or _version(live.podman) >= _version(spec.host.podman):
        return []
    short = ".".join(live.podman.split(".")[:2])
    return [
        _error(
            "podman",
            where,
            f"host.podman: this host runs podman {live.podman}, older than the spec's "
            f"{spec.host.podman}: the units may use keys it does not know; upgrade podman, or "
            f"write podman: '{short}' and render again",
        )
    ]


def check_builds(v: Validated, live: LiveHost) -> list[_Found]:
    """The build each runtime's image or binary runs here against its ``version:``.

    A different build is an error (the plan follows another build's rules: seed
    001's experts sit the other way round before build 4797); no ``version:`` with a
    build found says what to write (the plan holds for every build, which refuses
    what a known build runs); a build that cannot be read is a warning saying why."""
    found: list[_Found] = []
    for rid, host in sorted(live.builds.items()):
        runtime = v.spec.runtimes.get(rid)
        if runtime is None:
            continue
        written = runtime.version
        path: SpecPath = ("runtimes", rid, "version") if written else ("runtimes", rid)
        dotted = f"runtimes.{rid}.version" if written else f"runtimes.{rid}"
        if host.missing:
            found.append(
                _error(
                    "build",
                    ("runtimes", rid, "binary"),
                    f"runtimes.{rid}.binary: {runtime.binary} is not there: the services "
                    "that use it cannot start; install the server there, or correct the path",
                )
            )
            continue
        if host.version is None:
            if written:
                text = (
                    f"{dotted}: the build of the {host.what} could not be read here "
                    f"({host.how}): doctor cannot check version: {json.dumps(written)}"
                )
            else:
                text = (
                    f"{dotted}: no version:, and the build of the {host.what} could not be "
                    f"read here ({host.how}); the plan holds for every build: write "
                    f"version: as {_how_printed(runtime.kind)}"
                )
            found.append(_warning("build", path, text))
            continue
        shown = json.dumps(host.version)
        if not written:
            found.append(
                _warning(
                    "build",
                    path,
                    f"{dotted}: no version:, the plan holds for every build; the "
                    f"{host.what} runs {_build(runtime.kind, host.version)} ({host.how}): "
                    f"write version: {shown} to plan for that build alone",
                )
            )
            continue
        same = same_build(runtime.kind, written, host.version)
        if same is True:
            continue
        if same is None:
            found.append(
                _warning(
                    "build",
                    path,
                    f"{dotted}: version: {json.dumps(written)} is a date, the {host.what} "
                    f"runs {_build(runtime.kind, host.version)} ({host.how}); a date and a "
                    f"build number cannot be compared here: write version: {shown}",
                )
            )
            continue
        found.append(
            _error(
                "build",
                path,
                f"{dotted}: the spec says {json.dumps(written)}, but the {host.what} runs "
                f"{_build(runtime.kind, host.version)} ({host.how}): the plan follows "
                f"another build's rules; write version: {shown}, or run the build the "
                "spec names",
            )
        )
    return found


def same_build(kind: str, written: str, found: str) -> bool | None:
    """Whether two versions name one build (vLLM: one release); None when they cannot
    be compared (a commit date against a build number)."""
    from layoutgen import runtimes

    if kind == "vllm":
        from layoutgen.runtimes.vllm.memory import version_tuple

        return version_tuple(written) == version_tuple(found)
    a = runtimes.get(kind, written).version
    b = runtimes.get(kind, found).version
    if a is None or b is None:  # pragma: no cover - both are written
        return None
    if a.build is not None and b.build is not None:
        return a.build == b.build
    if a.date is not None and b.date is not None:
        return a.date == b.date
    return None


def _build(kind: str, version: str) -> str:
    return f"vLLM {version}" if kind == "vllm" else f"build {version}"


def _how_printed(kind: str) -> str:
    if kind == "vllm":
        return "the release 'vllm --version' prints (e.g. 0.10.2)"
    return "the build number 'llama-server --version' prints (e.g. 6123)"


def _version(text: str) -> tuple[int, int, int]:
    a, b, c = [*(int(p) for p in text.split(".")[:3]), 0, 0, 0][:3]
    return a, b, c


_CHECKS: tuple[Callable[[Validated, LiveHost], list[_Found]], ...] = (
    check_host,
    check_gpus,
    check_foreign,
    check_drift,
    check_ram,
    check_cpu,
    check_ports,
    check_models,
    check_units,
    check_podman,
    check_builds,
)
