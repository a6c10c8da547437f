"""What each service's units say, as data: the podman options, quadlet keys and systemd keys.

Rendering is split in two: this module decides *what* goes into the files
(pure data, every argument already quoted for its format), the templates
only lay it out.  Conventions (DESIGN §7): ports published on 127.0.0.1
unless ``expose``; GPUs by CDI name; the model's directory (a Hugging
Face cache model: its repository folder, so the snapshot's links into
``blobs/`` resolve; solve/mounts.py) mounted read-only with a shared label
(``:ro,z``, so several containers can use it); no new privileges and every
capability dropped but those the spec grants; unlimited memlock when the
service pins host memory; a health check on ``/health``; services sharing a
GPU start one after another in the solver's order, each after the previous
is healthy; ``Restart=on-failure`` with a start limit; a start timeout that
covers the model's load.
"""

from __future__ import annotations

from dataclasses import dataclass

from layoutgen.core.runtime import Runtime
from layoutgen.errors import LayoutgenError
from layoutgen.render import numa, quoting, sandbox
from layoutgen.solve.argv import (
    API_KEY_PATH,
    adapter_mounts,
    draft_mounts,
    rpc_devices,
)
from layoutgen.solve.mounts import MountError, model_volume, unique
from layoutgen.solve.plan import Plan, ServicePlan
from layoutgen.spec.checks import LOOPBACK, RUNTIME_LORA_ENV, conflicting
from layoutgen.spec.roles import ResolvedService
from layoutgen.spec.schema import Rpc, Service, Spec

#: podman version that introduced each quadlet [Container] key we write (podlet's
#: per-version tables and podman's release notes; HealthCmd/PodmanArgs taken as 4.5,
#: the safe side; every key checked against podman 5.4.2's quadlet by the tests).
QUADLET_SINCE: dict[str, tuple[int, int]] = {
    "Image": (4, 4),
    "ContainerName": (4, 4),
    "Exec": (4, 4),
    "AddDevice": (4, 4),
    "PublishPort": (4, 4),
    "Volume": (4, 4),
    "Environment": (4, 4),
    "NoNewPrivileges": (4, 4),
    "DropCapability": (4, 4),
    "AddCapability": (4, 4),
    "EnvironmentFile": (4, 4),
    "Secret": (4, 5),
    "HealthCmd": (4, 5),
    "HealthInterval": (4, 5),
    "HealthStartPeriod": (4, 5),
    "PodmanArgs": (4, 5),
    "Ulimit": (4, 7),
    "ShmSize": (5, 0),
    "Notify=healthy": (5, 0),
}
#: podman flags for keys a target version lacks (written through PodmanArgs=).
PODMAN_FLAG = {
    "Secret": "--secret",
    "Ulimit": "--ulimit",
    "HealthCmd": "--health-cmd",
    "HealthInterval": "--health-interval",
    "HealthStartPeriod": "--health-start-period",
    "ShmSize": "--shm-size",
}


class RenderError(LayoutgenError):
    """A spec that cannot be rendered for its target (e.g. a quadlet key too new)."""


@dataclass(frozen=True)
class Unit:
    """One service's rendered content, every value quoted for its target format."""

    name: str
    description: str
    image: str | None
    podman_options: tuple[str, ...]  # for `podman run`, shell-quoted, one per line
    command: tuple[str, ...]  # the container command (or native argv), shell-quoted
    quadlet: dict[str, list[tuple[str, str]]]  # section -> key/value lines
    service: dict[str, list[tuple[str, str]]]  # plain systemd unit
    # the script's lines before `exec` (numactl's check) and words before `podman run`
    # (numactl and its policy), shell-quoted; empty without services.NAME.numa
    script_checks: tuple[str, ...] = ()
    script_wrapper: tuple[str, ...] = ()


def _version(text: str) -> tuple[int, int]:
    major, minor = text.split(".")[:2]
    return int(major), int(minor)


def timeout_start(plan: ServicePlan) -> int:
    """Seconds to allow for a load: 2 min, plus 2 s per GiB of weights.

    Seed 001 pinned 300 GB of host memory in ~50 s; reading 320 GiB from disk
    at ~0.5-1 GB/s takes several minutes, which this covers.
    """
    gib = sum(p.weights + p.created for p in plan.buffers.values()) / 2**30
    # vLLM compiles the model (torch.compile) and captures CUDA graphs before /health
    # answers: minutes on a cold cache
    compile_and_capture = 300 if plan.budget is not None else 0
    return 120 + int(2 * gib) + compile_and_capture


def _pinned(spec: Spec, rs: ResolvedService, sp: ServicePlan) -> bool:
    return rs.mlock or any(
        name == "CUDA_Host" and part.weights for name, part in sp.buffers.items()
    )


def build(spec: Spec, plan: Plan, services: tuple[ResolvedService, ...]) -> list[Unit]:
    by_name = {rs.name: rs for rs in services}
    clash = conflicting(spec)
    after = _start_after(spec, plan, by_name, clash)
    rpc_here = {g.id for g in spec.host.gpus if g.rpc is not None and _serves(spec, g.rpc)}
    rank = {name: i for i, name in enumerate(plan.order)}
    units = []
    # a scheduled service runs in its windows only: units placed after it order
    # themselves after it (After=) but never pull it in (no Wants=)
    scheduled = {n for n, svc in spec.services.items() if svc.schedule is not None}
    for sp in plan.services:
        rs = by_name[sp.name]
        wants = [f"{n}.service" for n in after[sp.name] if n not in scheduled]
        ordered = [f"{n}.service" for n in after[sp.name] if n in scheduled]
        wants += [f"{rpc_unit_name(g)}.service" for g in sorted(rpc_here & set(rs.gpus))]
        others = sorted(clash[sp.name], key=lambda n: (rank.get(n, len(rank)), n))
        # Conflicts= both ways; After= one way only (the later in the solver's
        # order), which is enough for systemd to stop the one before starting
        # the other, so their VRAM is never claimed twice, without a cycle.
        earlier = [n for n in others if (rank.get(n, 0), n) < (rank.get(sp.name, 0), sp.name)]
        deps = _Deps(
            wants,
            [f"{n}.service" for n in others],
            [f"{n}.service" for n in earlier] + ordered,
            at_boot(spec, sp.name, clash),
        )
        units.append(_unit(spec, rs, sp, deps))
    return units


@dataclass(frozen=True)
class _Deps:
    """A unit's relations: wanted and ordered after; conflicting; ordered after only."""

    wants: list[str]
    conflicts: list[str]
    after_only: list[str]
    at_boot: bool = True


def at_boot(spec: Spec, name: str, clash: dict[str, set[str]]) -> bool:
    """Whether the service starts at boot (``[Install] WantedBy``): always, unless one
    of the services it conflicts with is marked ``default: true`` and it is not:
    alternatives start one at boot, the others by ``systemctl start NAME``."""
    if spec.services[name].schedule is not None:
        return False  # its timers start it (render/schedule.py)
    if spec.services[name].default:
        return True
    return not any(spec.services[o].default for o in clash[name])


def runtime_env(svc: Service) -> list[str]:
    """Environment layoutgen adds: vLLM's runtime LoRA endpoints for a daily load
    (``vllm/envs.py`` of 0.11.0: ``VLLM_ALLOW_RUNTIME_LORA_UPDATING`` is read as
    "1" or "true", case-insensitive; ``api_server.py:1212`` adds the routes only then)."""
    lora = svc.lora
    if lora is not None and any(
        a.update is not None and a.update.apply == "load" for a in lora.adapters
    ):
        return [f"{RUNTIME_LORA_ENV}=True"]
    return []


def rpc_unit_name(gpu_id: str) -> str:
    return f"rpc-{gpu_id}"


def _serves(spec: Spec, rpc: Rpc) -> bool:
    return rpc.served_by is None or rpc.served_by == spec.host.name


def rpc_units(spec: Spec) -> list[tuple[str, Unit]]:
    """(serving host, unit) for every rpc device: a native ``ggml-rpc-server``.

    It binds the endpoint's address (127.0.0.1 unless the spec says otherwise;
    validate warns otherwise: the protocol has no authentication) and exports
    exactly the one device the spec names (``-d``), so its buffer is
    ``RPC0[HOST:PORT]`` on the client.  Clients on the same host start after it.
    """
    out: list[tuple[str, Unit]] = []
    for gpu in spec.host.gpus:
        rpc = gpu.rpc
        if rpc is None:
            continue
        address, _, port = rpc.endpoint.rpartition(":")
        argv = [rpc.binary, "-H", address.strip("[]"), "-p", port, "-d", rpc.device]
        description = (
            f"layoutgen: ggml-rpc-server for {gpu.id} ({rpc.device} on {rpc.endpoint}; "
            "never expose it to an open network)"
        )
        loopback = address in LOOPBACK
        service: dict[str, list[tuple[str, str]]] = {
            "Unit": [
                ("Description", description),
                ("After", "network-online.target"),
                ("Wants", "network-online.target"),
                ("StartLimitIntervalSec", "15min"),
                ("StartLimitBurst", "3"),
            ],
            "Service": [
                ("Type", "exec"),
                ("ExecStart", quoting.systemd_line(argv)),
                ("Environment", "CUDA_DEVICE_ORDER=PCI_BUS_ID"),
                *sandbox.hardening(
                    gpu=rpc.device != "CPU", capabilities=(), open_network=not loopback
                ),
                ("ExecStartPost", quoting.systemd_line(tcp_wait(address.strip("[]"), port))),
                ("Restart", "on-failure"),
                ("RestartSec", "10s"),
                ("TimeoutStartSec", "60s"),
            ],
            "Install": [("WantedBy", "multi-user.target")],
        }
        unit = Unit(
            name=rpc_unit_name(gpu.id),
            description=description,
            image=None,
            podman_options=(),
            command=tuple(_arg_lines(argv)),
            quadlet={},
            service=_checked(service),
        )
        out.append((rpc.served_by or spec.host.name, unit))
    return out


def _start_after(
    spec: Spec, plan: Plan, by_name: dict[str, ResolvedService], clash: dict[str, set[str]]
) -> dict[str, list[str]]:
    """Each service's predecessors: the previous one on each shared GPU, plus ``after``.

    A service never waits for one it conflicts with (they never run together):
    on a shared GPU it follows the latest earlier service it can run beside.
    """
    out: dict[str, list[str]] = {n: list(by_name[n].service.after) for n in by_name}
    on_gpu: dict[str, list[str]] = {}
    for name in plan.order:
        for gpu in sorted(by_name[name].gpus):
            earlier = [p for p in on_gpu.get(gpu, []) if p not in clash[name]]
            if earlier and earlier[-1] not in out[name]:
                out[name].append(earlier[-1])
            on_gpu.setdefault(gpu, []).append(name)
    return {n: sorted(v) for n, v in out.items()}


def _unit(spec: Spec, rs: ResolvedService, sp: ServicePlan, deps: _Deps) -> Unit:
    svc = rs.service
    runtime = spec.runtimes[svc.runtime]
    rt = runtime.rules()
    # the image's entrypoint supplies the argv's first words (llama-server; vllm serve)
    args = sp.argv[rt.ENTRYPOINT_WORDS :]
    env = [f"{k}={v}" for k, v in sorted(svc.env.items())] + runtime_env(svc)
    by_id = {g.id: g for g in spec.host.gpus}
    pinned = _pinned(spec, rs, sp)
    health = f"curl -fsS http://127.0.0.1:{svc.port}/health"
    timeout = timeout_start(sp)
    description = f"layoutgen: {rs.name} ({svc.role}, model {svc.model})"
    publish = f"{'0.0.0.0' if svc.expose else '127.0.0.1'}:{svc.port}:{svc.port}"
    volumes = _volumes(spec, rs)
    # CDI names: the UUID when the spec gives one (it follows the card when indices
    # change), else the NVML index; in index order, which CUDA_DEVICE_ORDER keeps
    local = sorted(
        (by_id[g] for g in rs.gpus if by_id[g].index is not None),  # rpc: no index
        key=lambda g: g.index or 0,
    )
    devices = [f"nvidia.com/gpu={g.uuid or g.index}" for g in local]
    caps = list(svc.capabilities)

    # --replace: a container left behind by a crash (same name) is removed first, as
    # quadlet's own generated command does; otherwise the unit cannot start again
    options = ["--rm", "--replace", "--name", rs.name]
    for dev in devices:
        options += ["--device", dev]
    options += ["--env", "CUDA_DEVICE_ORDER=PCI_BUS_ID"]
    for pair in env:
        options += ["--env", pair]
    options += ["--publish", publish]
    for mount in volumes:
        options += ["--volume", mount]
    if rt.SHM_SIZE is not None:
        options += ["--shm-size", rt.SHM_SIZE]
    options += [flag for key, value in _api_key(svc, rt) for flag in (PODMAN_OPTION[key], value)]
    options += ["--security-opt", "no-new-privileges", "--cap-drop", "all"]
    for cap in caps:
        options += ["--cap-add", cap]
    if pinned:
        options += ["--ulimit", "memlock=-1:-1"]
    options += [
        "--health-cmd",
        health,
        "--health-interval",
        "10s",
        "--health-start-period",
        f"{timeout}s",
    ]

    command = list(args) if runtime.image else [runtime.binary or "", *sp.argv[1:]]
    unit_section = [("Description", description)]
    unit_section += [("After", " ".join(["network-online.target", *deps.wants]))]
    unit_section += [("Wants", " ".join(["network-online.target", *deps.wants]))]
    if deps.conflicts:
        unit_section += [("Conflicts", " ".join(deps.conflicts))]
    if deps.after_only:
        unit_section += [("After", " ".join(deps.after_only))]
    unit_section += [("StartLimitIntervalSec", "15min"), ("StartLimitBurst", "3")]
    placement = numa.unit_keys(spec, svc)
    service_common = [
        ("Restart", "on-failure"),
        ("RestartSec", "10s"),
        ("TimeoutStartSec", f"{timeout}s"),
    ]

    quadlet: dict[str, list[tuple[str, str]]] = {"Unit": unit_section}
    if runtime.image is not None and "quadlet" in spec.host.targets:
        quadlet["Container"] = _container(
            spec, rs, runtime.image, devices, publish, volumes, caps, pinned, health, timeout, args
        )
        quadlet["Service"] = (
            placement + service_common + _readiness(spec, svc.port, quadlet["Container"])
        )
        if deps.at_boot:
            quadlet["Install"] = [("WantedBy", "default.target")]

    service: dict[str, list[tuple[str, str]]] = {"Unit": unit_section}
    if runtime.image is not None:
        podman = ["/usr/bin/podman", "run", *options, runtime.image, *args]
        service["Service"] = [
            ("Type", "exec"),
            ("ExecStart", quoting.systemd_line(podman)),
            ("ExecStop", quoting.systemd_line(["/usr/bin/podman", "stop", "-t", "30", rs.name])),
            *placement,
            *_wait(svc.port),
            *service_common,
        ]
    else:
        native = [runtime.binary or "", *sp.argv[1:]]
        peers = [rpc.endpoint.rpartition(":")[0] for rpc in rpc_devices(spec, rs)]
        addresses = [sandbox.peer_address(p) for p in peers if p not in LOOPBACK]
        service["Service"] = [
            ("Type", "exec"),
            ("ExecStart", quoting.systemd_line(native)),
            *sandbox.hardening(
                gpu=bool(rs.gpus),
                capabilities=svc.capabilities,
                open_network=svc.expose or None in addresses,
                peers=tuple(a for a in addresses if a is not None),
                user_manager=spec.host.deploy.scope == "user",
            ),
            *[("Environment", pair) for pair in env],
            *[(k, v) for k, v in _api_key(svc, rt) if k == "EnvironmentFile"],
            *([("LimitMEMLOCK", "infinity")] if pinned else []),
            *placement,
            *_wait(svc.port),
            *service_common,
        ]
    if deps.at_boot:
        # a user's manager has no multi-user.target (issue 34: rootless units)
        boot = "default.target" if spec.host.deploy.scope == "user" else "multi-user.target"
        service["Install"] = [("WantedBy", boot)]
    return Unit(
        name=rs.name,
        description=description,
        image=runtime.image,
        podman_options=tuple(_arg_lines(options)),
        command=tuple(_arg_lines(command)),
        quadlet=_checked(quadlet),
        service=_checked(service),
        script_checks=tuple(numa.numactl_check(rs.name, spec, svc)),
        script_wrapper=tuple(quoting.shell(w) for w in numa.numactl(spec, svc)),
    )


def _volumes(spec: Spec, rs: ResolvedService) -> list[str]:
    """The container's read-only mounts: the model's, its draft's, its adapters'; once
    each (a model and its draft from one Hugging Face cache repository share one)."""
    model = model_volume(spec.models[rs.service.model].path, rs.service.model)[0]
    try:
        return unique([model, *draft_mounts(spec, rs), *adapter_mounts(spec, rs)])
    except MountError as exc:
        raise RenderError(f"services.{rs.name}: {exc}") from None


#: Keys whose values are command lines, quoted by quoting.systemd_line.
COMMAND_KEYS = {"Exec", "ExecStart", "ExecStop", "ExecStartPost", "PodmanArgs"}


def _checked(sections: dict[str, list[tuple[str, str]]]) -> dict[str, list[tuple[str, str]]]:
    """Every value that is not a command line must read back as written (quoting.unit_value)."""
    for lines in sections.values():
        for key, value in lines:
            if key not in COMMAND_KEYS:
                quoting.unit_value(value)
    return sections


#: podman run options for the quadlet keys _api_key returns.
PODMAN_OPTION = {"Secret": "--secret", "Volume": "--volume", "EnvironmentFile": "--env-file"}


def _api_key(svc: Service, rt: Runtime) -> list[tuple[str, str]]:
    """The API key reaches the server as a file or environment, never as an argument."""
    key = svc.api_key
    if key is None:
        return []
    if key.secret is not None and rt.API_KEY_ENV is not None:
        return [("Secret", f"{key.secret},type=env,target={rt.API_KEY_ENV}")]
    if key.secret is not None:
        return [("Secret", f"{key.secret},type=mount,target={API_KEY_PATH}")]
    if key.file is not None:
        return [("Volume", f"{key.file}:{API_KEY_PATH}:ro,z")]
    return [("EnvironmentFile", key.env_file or "")]


def _arg_lines(argv: list[str]) -> list[str]:
    """A flag and its value on one line (``-c 32768``, ``--name grandpa``), shell-quoted."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        if argv[i].startswith("-") and i + 1 < len(argv) and not argv[i + 1].startswith("-"):
            out.append(f"{quoting.shell(argv[i])} {quoting.shell(argv[i + 1])}")
            i += 2
        else:
            out.append(quoting.shell(argv[i]))
            i += 1
    return out


def _container(
    spec: Spec,
    rs: ResolvedService,
    image: str,
    devices: list[str],
    publish: str,
    volumes: list[str],
    caps: list[str],
    pinned: bool,
    health: str,
    timeout: int,
    args: tuple[str, ...],
) -> list[tuple[str, str]]:
    if spec.host.podman is None:
        raise RenderError(
            "host.podman is not set: write the podman version the host runs "
            '(podman --version), e.g. podman: "5.4"; it decides which quadlet keys exist '
            "(or leave quadlet out of host.targets)"
        )
    target = _version(spec.host.podman)
    keys: list[tuple[str, str]] = [("ContainerName", rs.name), ("Image", image)]
    keys += [("AddDevice", d) for d in devices]
    keys += [("Environment", "CUDA_DEVICE_ORDER=PCI_BUS_ID")]
    keys += [("Environment", f"{k}={v}") for k, v in sorted(rs.service.env.items())]
    keys += [("Environment", pair) for pair in runtime_env(rs.service)]
    keys += [("PublishPort", publish)]
    keys += [("Volume", mount) for mount in volumes]
    rt = spec.runtimes[rs.service.runtime].rules()
    if rt.SHM_SIZE is not None:
        keys.append(("ShmSize", rt.SHM_SIZE))
    keys += _api_key(rs.service, rt)
    keys += [("NoNewPrivileges", "true"), ("DropCapability", "all")]
    keys += [("AddCapability", c) for c in caps]
    if pinned:
        keys.append(("Ulimit", "memlock=-1:-1"))
    keys += [("HealthCmd", health), ("HealthInterval", "10s"), ("HealthStartPeriod", f"{timeout}s")]
    if target >= QUADLET_SINCE["Notify=healthy"]:
        keys.append(("Notify", "healthy"))
    keys.append(("Exec", quoting.systemd_line(args)))
    return _fit_version(keys, target)


def _fit_version(keys: list[tuple[str, str]], target: tuple[int, int]) -> list[tuple[str, str]]:
    """Keys the target podman knows; newer ones through PodmanArgs=, or an error."""
    out: list[tuple[str, str]] = []
    extra: list[str] = []
    too_new: list[str] = []
    for key, value in keys:
        since = QUADLET_SINCE.get(key, (0, 0))
        if target >= since:
            out.append((key, value))
        elif key in PODMAN_FLAG and target >= QUADLET_SINCE["PodmanArgs"]:
            extra += [PODMAN_FLAG[key], value]
        elif f"{key}=" not in " ".join(too_new):
            too_new.append(f"{key}= needs {since[0]}.{since[1]}")
    if too_new:
        raise RenderError(
            f"podman {target[0]}.{target[1]} (host.podman) is too old for quadlet keys this "
            f"layout needs: {', '.join(too_new)}; raise host.podman if the host has a newer "
            "podman, or leave quadlet out of host.targets (e.g. targets: [podman, systemd])"
        )
    if extra:
        out.append(("PodmanArgs", quoting.systemd_line(extra)))
    return out


def _readiness(spec: Spec, port: int, container: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Without Notify=healthy, a unit counts as started once /health answers."""
    if ("Notify", "healthy") in container:
        return []
    return _wait(port)


def _wait(port: int) -> list[tuple[str, str]]:
    return [("ExecStartPost", quoting.systemd_line(health_wait(port)))]


#: The health wait: a fixed sh program; the URL reaches it as a positional
#: parameter, never as code.  It polls /health while the unit's main process lives
#: (``kill -0 $MAINPID``; systemd sets MAINPID for ExecStartPost=), so a server that
#: dies while loading fails the start at once: systemd itself waits for
#: ExecStartPost= even after the main process exited, until TimeoutStartSec=.
#: kill(2) with signal 0 asks only that the uids match, so it sees the server
#: where /proc/$MAINPID does not (ProtectProc=invisible with PrivateUsers=); the
#: wait runs in the server's own sandbox, nothing lifted (no "+" or "!" prefix).
#: Without a MAINPID (not known to systemd) it polls until TimeoutStartSec=.
HEALTH_WAIT = (
    'while [ -z "${MAINPID:-}" ] || kill -0 "$MAINPID" 2>/dev/null; do '
    '/usr/bin/curl -fsS -o /dev/null --max-time 5 "$1" && exit 0; sleep 2; done; '
    'echo "health wait: the main process $MAINPID exited before $1 answered 200" >&2; exit 1'
)


def health_wait(port: int) -> list[str]:
    """Wait until ``/health`` answers 200 (refused connections and the 503 a
    llama-server answers while it loads are retried; ``TimeoutStartSec`` bounds the
    whole wait), failing as soon as the server's main process has exited."""
    return ["/bin/sh", "-c", HEALTH_WAIT, "health-wait", f"http://127.0.0.1:{port}/health"]


#: The TCP readiness wait for ggml-rpc-server (no HTTP to ask): a fixed bash
#: program; the address and port reach it as positional parameters, never as code.
#: Like HEALTH_WAIT, it gives up once the main process has exited.
TCP_WAIT = (
    'while [ -z "${MAINPID:-}" ] || kill -0 "$MAINPID" 2>/dev/null; do '
    '(exec 3<>"/dev/tcp/$1/$2") 2>/dev/null && exit 0; sleep 1; done; '
    'echo "tcp wait: the main process $MAINPID exited before $1:$2 accepted" >&2; exit 1'
)


def tcp_wait(address: str, port: str) -> list[str]:
    return ["/bin/bash", "-c", TCP_WAIT, "tcp-wait", address, port]
