"""The plan: what the solver decided, as plain frozen data, and its JSON form.

A plan says, per device, what each service puts there (weights, KV cache,
compute buffers, per-process overhead) and how much is left; per service,
which expert layers sit on which device and the runtime buffers it will
allocate, named as the runtime's own log names them inside the container
(``CUDA0``, ``CUDA_Host``, ``CPU_Mapped``), so a plan can be checked line by
line against a start-up log.  Every figure carries its basis: ``exact`` (from
the profile), ``estimated`` (a formula) or ``measured`` (from a log).

The JSON (``layoutgen plan --json``, DESIGN §8) is versioned by ``schema``;
sizes are integers in bytes; keys are sorted so equal plans are equal bytes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from layoutgen.core.setting import Basis

SCHEMA = 1
PARTS = ("weights", "created", "kv", "compute", "overhead")


@dataclass(frozen=True)
class Part:
    """One service's use of one runtime buffer."""

    weights: int = 0  # the runtime's logged model buffer
    created: int = 0  # tensors the runtime computes at start-up, beside the model buffer
    kv: int = 0
    compute: int = 0
    overhead: int = 0
    basis: dict[str, Basis] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return self.weights + self.created + self.kv + self.compute + self.overhead


@dataclass(frozen=True)
class StartCheck:
    """vLLM's start-up check on one GPU at its turn in the start order: the memory
    free then (capacity - reserve - the services started before it there - its own
    CUDA context) must be at least ``ceil(total x --gpu-memory-utilization)``."""

    gpu: str
    free: int
    requested: int
    before: tuple[str, ...]  #: services started before it on this GPU

    @property
    def ok(self) -> bool:
        return self.free >= self.requested


@dataclass(frozen=True)
class BudgetPlan:
    """A budgeted runtime's (vLLM's) terms, per GPU, each with its basis."""

    max_model_len: int
    max_num_seqs: int
    tensor_parallel_size: int
    #: (term, bytes, basis): weights, lora (with adapters), activation, non_torch, nccl
    #: (outside the budget, where vLLM allocates it before its snapshot), cudagraph, kv
    terms: tuple[tuple[str, int, Basis], ...]
    cudagraph_in_budget: bool
    budget: int
    utilization: str  #: --gpu-memory-utilization as rendered
    rounded_up: bool
    kv_cache_memory_bytes: int | None  #: --kv-cache-memory-bytes, where the release has it
    kv_bytes_per_token: int
    block_size: int
    kv_tokens: int
    max_concurrency: float
    start: tuple[StartCheck, ...] = ()
    #: requests of max_model_len the KV cache holds (``parallel``; max_num_seqs is the
    #: scheduler's limit, which may be larger)
    parallel: int = 0

    def term(self, name: str) -> int:
        return next(b for n, b, _ in self.terms if n == name)

    def term_or_zero(self, name: str) -> int:
        """A term a plan lists only where it has one (``lora``, ``nccl``), else 0."""
        return next((b for n, b, _ in self.terms if n == name), 0)


@dataclass(frozen=True)
class Marginal:
    """Decode t/s a service gains (``gain_tps`` > 0) when routed-expert tensors move from
    host RAM to ``gpu``, or loses (< 0) when ``gpu`` gives them back to host RAM."""

    gpu: str
    gain_tps: float
    bytes: int
    tensors: tuple[str, ...]


@dataclass(frozen=True)
class SpeedPlan:
    """A service's predicted decode speed (layoutgen.solve.plan_speed): one request,
    at ``depth`` context tokens (0, llama-bench tg128's, unless plan --depth asks
    another), and what it asks of host RAM."""

    decode_tps: float
    depth: int
    host_bytes_per_token: float
    host_demand: float  #: bytes/s read from host RAM at decode_tps
    efficiency: float
    efficiency_basis: Literal["given", "prior"]
    seconds: float  #: one token
    host_seconds: float  #: the host RAM part of it
    #: per GPU of a service with routed experts in host RAM: the next GiB of VRAM (the
    #: hottest host expert tensors that fit in it; none fits: the smallest one)
    marginal: tuple[Marginal, ...] = ()
    #: per GPU holding routed experts: its coldest expert tensors (>= 1 GiB) given back
    give_back: tuple[Marginal, ...] = ()
    #: prompt tokens per second at ``ubatch`` (the model's prefill; not checked
    #: against measurements)
    prefill_tps: float | None = None
    ubatch: int = 0
    #: per GPU this service could take experts on: what each other service's settings
    #: one step smaller would free there and give this one
    trades: tuple[Trade, ...] = ()
    #: host RAM's bandwidth as given: "peak" (x efficiency), "measured" (the user's
    #: figure, x its own efficiency), "none" (a token reads nothing there)
    host_figure: str = "peak"
    #: the GPUs' efficiency (None: no GPU) and whether it was written
    gpu_efficiency: float | None = None
    gpu_efficiency_basis: Literal["given", "prior"] = "prior"
    #: the speed at depth 0 where ``depth`` is another (plan --depth)
    decode_tps_depth0: float | None = None
    #: what changes the speed that the model does not see, as the spec shows it
    caveats: tuple[str, ...] = ()
    #: on a host of several NUMA nodes: where the service's pages and threads sit and
    #: the host RAM bandwidth that leaves it (layoutgen.speed.numa)
    numa: str | None = None
    #: the same figured at another depth (layoutgen.solve.plan_speed.at_depth)
    at_depth: Callable[[int], SpeedPlan] | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Trade:
    """Another service's setting one step smaller (``setting``: cache types, ctx,
    quant; ``old`` -> ``new``) frees about ``bytes`` on ``gpu``; this service gains
    ``gain_tps`` from the hottest host expert tensors that fit there (0: none fits)."""

    service: str
    gpu: str
    setting: str
    old: str
    new: str
    bytes: int
    gain_tps: float


@dataclass(frozen=True)
class ServicePlan:
    name: str
    #: runtime buffer name -> its use; GPU buffers are in-container names.
    buffers: dict[str, Part]
    #: runtime buffer name -> host device id ("gpu0", ..., or "host").
    device_of: dict[str, str]
    #: device id -> expert layers there ("host" included).
    expert_layers: dict[str, tuple[int, ...]]
    #: layer -> runtime buffer name of its attention/KV (the layer split).
    layer_buffer: dict[int, str]
    argv: tuple[str, ...] = ()
    #: device id -> single expert tensors there, apart from their layer's other experts
    expert_tensors: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: the spec's tensor_overrides as (pattern, buffer or "host"), rendered first
    tensor_overrides: tuple[tuple[str, str], ...] = ()
    #: tensor -> buffer for every tensor not where its layer puts it (-ot, --cpu-moe)
    moved: dict[str, str] = field(default_factory=dict)
    #: a budgeted runtime's (vLLM's) budget; None for runtimes that place tensors
    budget: BudgetPlan | None = None
    #: predicted decode speed; a str: why it is not modelled; None: host bandwidth unknown
    speed: SpeedPlan | str | None = None
    #: the draft model's share of ``buffers`` (``draft:``), by buffer name
    draft: dict[str, Part] = field(default_factory=dict)


@dataclass(frozen=True)
class DevicePlan:
    id: str  # a GPU id, or "host" for RAM
    capacity: int
    reserve: int
    used: int

    @property
    def free(self) -> int:
        return self.capacity - self.reserve - self.used


@dataclass(frozen=True)
class Plan:
    spec: str
    host: str
    devices: tuple[DevicePlan, ...]
    services: tuple[ServicePlan, ...]
    warnings: tuple[str, ...] = ()
    #: the order services were placed in (fixed first, then auto by priority):
    #: services sharing a GPU start in this order, each after the previous is up.
    order: tuple[str, ...] = ()
    #: runtime id -> the rules the plan assumed for it (Runtime.assumed)
    runtimes: Mapping[str, Mapping[str, object]] = field(default_factory=dict)
    #: where each warning is located in the spec, aligned with ``warnings``
    warning_paths: tuple[tuple[str | int, ...], ...] = ()

    def device(self, device_id: str) -> DevicePlan:
        return next(d for d in self.devices if d.id == device_id)

    def service(self, name: str) -> ServicePlan:
        return next(s for s in self.services if s.name == name)


def to_json(plan: Plan, warnings: Sequence[str] | None = None) -> str:
    """The plan JSON of DESIGN §8: stable keys, integer bytes, trailing newline.

    ``warnings``: every warning the command printed for the spec (validate's
    and the plan's, as their messages), in the order printed; without it, the
    plan's own."""
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "spec": plan.spec,
        "host": plan.host,
        "devices": {
            d.id: {"capacity": d.capacity, "reserve": d.reserve, "used": d.used, "free": d.free}
            for d in plan.devices
        },
        "services": {
            s.name: {
                "expert_layers": {dev: list(layers) for dev, layers in s.expert_layers.items()},
                "expert_tensors": {dev: list(ts) for dev, ts in s.expert_tensors.items()},
                "moved": dict(s.moved),
                "layers": _layers_by_buffer(s.layer_buffer),
                "buffers": {
                    name: {
                        "device": s.device_of[name],
                        "weights": part.weights,
                        "created": part.created,
                        "kv": part.kv,
                        "compute": part.compute,
                        "overhead": part.overhead,
                        "basis": dict(part.basis),
                    }
                    for name, part in s.buffers.items()
                },
                "argv": list(s.argv),
                **({"vllm": _budget_json(s.budget)} if s.budget is not None else {}),
                **({"speed": _speed_json(s.speed)} if isinstance(s.speed, SpeedPlan) else {}),
                **(
                    {
                        "draft": {
                            name: {"weights": p.weights, "kv": p.kv, "compute": p.compute}
                            for name, p in s.draft.items()
                        }
                    }
                    if s.draft
                    else {}
                ),
            }
            for s in plan.services
        },
        "runtimes": {rid: dict(r) for rid, r in plan.runtimes.items()},
        "warnings": list(plan.warnings if warnings is None else warnings),
    }
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def _speed_json(s: SpeedPlan) -> dict[str, Any]:
    return {
        "decode_tps": round(s.decode_tps, 2),
        "depth": s.depth,
        "host_bytes_per_token": round(s.host_bytes_per_token),
        "host_demand": round(s.host_demand),
        "efficiency": s.efficiency,
        "efficiency_basis": s.efficiency_basis,
        "host_figure": s.host_figure,
        **(
            {"gpu_efficiency": s.gpu_efficiency, "gpu_efficiency_basis": s.gpu_efficiency_basis}
            if s.gpu_efficiency is not None
            else {}
        ),
        **(
            {"decode_tps_depth0": round(s.decode_tps_depth0, 2)}
            if s.decode_tps_depth0 is not None
            else {}
        ),
        **({"caveats": list(s.caveats)} if s.caveats else {}),
        **({"numa": s.numa} if s.numa else {}),
        **(
            {
                "marginal": [_marginal_json(x) for x in s.marginal],
                "give_back": [_marginal_json(x) for x in s.give_back],
            }
            if s.marginal
            else {}
        ),
        **(
            {"prefill_tps": round(s.prefill_tps, 1), "ubatch": s.ubatch}
            if s.prefill_tps is not None
            else {}
        ),
        **(
            {
                "trades": [
                    {
                        "service": t.service,
                        "gpu": t.gpu,
                        "setting": t.setting,
                        "from": t.old,
                        "to": t.new,
                        "bytes": t.bytes,
                        "gain_tps": round(t.gain_tps, 3),
                    }
                    for t in s.trades
                ]
            }
            if s.trades
            else {}
        ),
    }


def _marginal_json(x: Marginal) -> dict[str, Any]:
    return {
        "gpu": x.gpu,
        "gain_tps": round(x.gain_tps, 3),
        "bytes": x.bytes,
        "tensors": list(x.tensors),
    }


def _tensors(x: Marginal) -> str:
    """Up to three tensor names (no '.weight'), then how many more, and the MiB."""
    names = ", ".join(t.removesuffix(".weight") for t in x.tensors[:3])
    more = f" +{len(x.tensors) - 3} more" if len(x.tensors) > 3 else ""
    return f"{names}{more}, {_mib(x.bytes)} MiB"


def _gib(x: Marginal) -> str:
    """'a GiB', or the bytes the smallest tensor that moves takes when it is more."""
    return "a GiB" if x.bytes <= 2**30 else f"{_mib(x.bytes)} MiB"


def _marginal_text(plan: Plan, sp: ServicePlan, s: SpeedPlan) -> list[str]:
    """The next GiB of VRAM on each GPU, a GiB given back, and what a GiB of each other
    service sharing that GPU is worth to this one."""
    back = {x.gpu: x for x in s.give_back}
    lines = []
    for x in s.marginal:
        none = "" if x.bytes <= 2**30 else "no expert tensor fits in a GiB; the smallest: "
        line = f"    next GiB on {x.gpu}: {x.gain_tps:+.2f} tok/s ({none}{_tensors(x)})"
        if x.gpu in back:
            y = back[x.gpu]
            line += f"; giving back: {y.gain_tps:+.2f} tok/s ({_tensors(y)})"
        lines.append(line)
    for x in s.marginal:
        for other in plan.services:
            if other.name != sp.name and any(
                other.device_of[b] == x.gpu and p.total for b, p in other.buffers.items()
            ):
                lines.append(
                    f"    {_gib(x)} from {other.name} on {x.gpu} would give {sp.name} "
                    f"{x.gain_tps:+.2f} tok/s"
                )
    return lines


def _speed_text(plan: Plan) -> list[str]:
    """Each service's predicted decode speed, when the host's bandwidth is known."""
    rows = [(sp, sp.speed) for sp in plan.services if sp.speed is not None]
    if not rows:
        return []
    lines = [
        "decode speed, one request (speed model, DESIGN); depth 0 is llama-bench tg128's, "
        "plan --depth N for another"
    ]
    for sp, s in rows:
        name = sp.name
        if isinstance(s, str):
            lines.append(f"  {name:<20} {s}")
            continue
        from layoutgen.solve.speed_text import efficiency_words

        at0 = f" ({s.decode_tps_depth0:.1f} at depth 0)" if s.decode_tps_depth0 is not None else ""
        asks = (
            f"; asks host RAM for {s.host_demand / 1e9:,.0f} GB/s "
            f"({s.host_bytes_per_token / 1e9:,.2f} GB a token)"
            if s.host_figure != "none"
            else "; reads nothing from host RAM"
        )
        lines.append(
            f"  {name:<20} {s.decode_tps:6.1f} tok/s at depth {s.depth:,}{at0}, estimated "
            f"({efficiency_words(s)}){asks}"
        )
        if s.numa:
            lines.append(f"    NUMA: {s.numa}")
        lines += [f"    not modelled: {c}" for c in s.caveats]
        if s.prefill_tps is not None:
            lines.append(
                f"    prefill {s.prefill_tps:,.0f} tok/s at ubatch {s.ubatch:,} (speed model, "
                "an order of magnitude: 49 % median error on 71 public prompt runs)"
            )
        lines += _marginal_text(plan, sp, s)
        for t in s.trades:
            fits = (
                f"{t.gain_tps:+.2f} tok/s"
                if t.gain_tps
                else "+0 tok/s (no host expert tensor fits in it)"
            )
            lines.append(
                f"    {t.service} {t.setting} {t.old} -> {t.new} frees about "
                f"{_mib(t.bytes)} MiB on {t.gpu}: {sp.name} {fits}"
            )
    return [*lines, ""]


def _budget_json(b: BudgetPlan) -> dict[str, Any]:
    return {
        "max_model_len": b.max_model_len,
        "max_num_seqs": b.max_num_seqs,
        "parallel": b.parallel or b.max_num_seqs,
        "tensor_parallel_size": b.tensor_parallel_size,
        "per_gpu": {name: value for name, value, _ in b.terms},
        "basis": {name: basis for name, _, basis in b.terms},
        "cudagraph_in_budget": b.cudagraph_in_budget,
        "budget": b.budget,
        "gpu_memory_utilization": b.utilization,
        "utilization_rounded_up": b.rounded_up,
        "kv_cache_memory_bytes": b.kv_cache_memory_bytes,
        "kv_bytes_per_token": b.kv_bytes_per_token,
        "block_size": b.block_size,
        "kv_tokens": b.kv_tokens,
        "max_concurrency": round(b.max_concurrency, 3),
        "start_check": {
            c.gpu: {"free": c.free, "requested": c.requested, "before": list(c.before)}
            for c in b.start
        },
    }


def _budget_text(name: str, b: BudgetPlan) -> list[str]:
    """A vLLM service's budget, term by term, and its start-up check on each GPU."""
    why = {
        "weights": f"the checkpoint / {b.tensor_parallel_size}",
        "lora": "--max-loras x --max-lora-rank slots, allocated with the weights",
        "activation": "profile run's peak",
        "non_torch": "cuBLAS, workspaces"
        + (", NCCL" if b.tensor_parallel_size > 1 and not b.term_or_zero("nccl") else ""),
        "nccl": "allocated before vLLM's snapshot: outside the budget, beside the CUDA context",
        "cudagraph": "in the budget" if b.cudagraph_in_budget else "after the budget, outside it",
        "kv": f"{b.parallel or b.max_num_seqs} x {b.max_model_len:,} tokens in "
        f"{b.block_size}-token blocks"
        + (", + the null block" if b.kv_cache_memory_bytes is not None else ", what is left"),
    }
    tp = b.tensor_parallel_size
    lines = [f"{name}: vLLM budget per GPU (tensor parallel {tp}), MiB"]
    for term, value, basis in b.terms:
        cell = f"{_mib(value)}{_MARK[basis]}"
        lines.append(f"  {term:<12} {cell:>9}  {basis}: {why[term]}")
    flag = (
        f", --kv-cache-memory-bytes {b.kv_cache_memory_bytes}"
        if b.kv_cache_memory_bytes is not None
        else ""
    )
    lines.append(
        f"  {'budget':<12} {_mib(b.budget):>9}  --gpu-memory-utilization {b.utilization}{flag}"
        + (" (rounded up: rounded down it left less KV than one request)" if b.rounded_up else "")
    )
    lines.append(
        f"  KV capacity {b.kv_tokens:,} tokens ({b.kv_bytes_per_token:,} bytes a token per GPU); "
        f"max concurrency at max_model_len {b.max_model_len:,}: {b.max_concurrency:.2f}"
    )
    for c in b.start:
        before = ", ".join(c.before) or "nothing"
        lines.append(
            f"  start check {c.gpu}: free {_mib(c.free)} (after {before}) "
            f"{'>=' if c.ok else '<'} requested {_mib(c.requested)}: "
            + ("ok" if c.ok else "vLLM refuses to start")
        )
    return lines


def _layers_by_buffer(layer_buffer: dict[int, str]) -> dict[str, list[int]]:
    """Runtime buffer -> the layers (attention, KV, dense FFN) it holds."""
    out: dict[str, list[int]] = {}
    for layer, buf in sorted(layer_buffer.items()):
        out.setdefault(buf, []).append(layer)
    return out


def _mib(n: int) -> str:
    return f"{n / 2**20:,.0f}"


_MARK = {"exact": "", "estimated": "~", "upper-bound": "^", "measured": "*"}


def to_text(plan: Plan) -> str:
    """The plan as a reviewer reads it: one table per device, then expert layers."""
    from layoutgen.models.tensors import format_layers

    lines = [
        f"plan for {plan.spec} (host {plan.host}); MiB; ~ estimated, ^ upper bound, * measured",
        "",
    ]
    # rpc buffers are long (RPC0[10.0.0.2:50052]): the column fits the longest name
    width = max([11, *(len(b) for sp in plan.services for b in sp.buffers)])
    header = f"  {'service':<20} {'buffer':<{width}} {'weights':>9} {'created':>8} {'kv':>8} "
    header += f"{'compute':>9} "
    header += f"{'overhead':>9} {'total':>9}"
    for dev in plan.devices:
        title = "host RAM" if dev.id == "host" else f"GPU {dev.id}"
        lines.append(
            f"{title}: capacity {_mib(dev.capacity)}, reserve {_mib(dev.reserve)}, "
            f"used {_mib(dev.used)}, free {_mib(dev.free)}"
        )
        rows = [
            (sp, buf, part)
            for sp in plan.services
            for buf, part in sp.buffers.items()
            if sp.device_of[buf] == dev.id and part.total
        ]
        if rows:
            lines.append(header)
        for sp, buf, part in rows:
            cells = [
                f"{_mib(getattr(part, k))}{_MARK[part.basis.get(k, 'exact')]}"
                for k in ("weights", "created", "kv", "compute")
            ]
            lines.append(
                f"  {sp.name:<20} {buf:<{width}} {cells[0]:>9} {cells[1]:>8} {cells[2]:>8} "
                f"{cells[3]:>9} {_mib(part.overhead):>9} {_mib(part.total):>9}"
            )
        lines.append("")
    for sp in plan.services:
        if sp.budget is not None:
            lines += [*_budget_text(sp.name, sp.budget), ""]
        if sp.tensor_overrides:
            lines.append(f"{sp.name}: tensor_overrides (first match wins)")
            moved: dict[str, int] = {}
            for buf in sp.moved.values():
                moved[buf] = moved.get(buf, 0) + 1
            for pattern, target in sp.tensor_overrides:
                lines.append(f"  {pattern} -> {target}")
            lines.append(
                "  tensors moved: " + ", ".join(f"{n} to {b}" for b, n in sorted(moved.items()))
            )
            lines.append("")
        if not sp.expert_layers:
            continue
        lines.append(f"{sp.name}: expert layers")
        # GPUs first, in the host's order, then host RAM (whatever the GPU ids sort as)
        rank = {d.id: i for i, d in enumerate(plan.devices)}
        for dev_id, layers in sorted(
            sp.expert_layers.items(), key=lambda i: (i[0] == "host", rank.get(i[0], 0), i[0])
        ):
            where = "host RAM" if dev_id == "host" else dev_id
            lines.append(
                f"  {where:<9} {len(layers):>3}  {format_layers(layers, sep='-', join=', ')}"
            )
        for dev_id, names in sp.expert_tensors.items():
            lines.append(f"  {dev_id:<9} {len(names):>3}  single tensors: {', '.join(names)}")
        lines.append("")
    lines += _speed_text(plan)
    for rid, r in plan.runtimes.items():
        rules = (
            f"build {r['version']}'s rules"
            if r["version"] is not None
            else f"the newest rules (no 'version:'; read from {r['read_from']})"
        )
        lines.append(f"runtime {rid} ({r['kind']}): planned with {rules}")
    if plan.runtimes:
        lines.append("")
    lines += [f"warning: {w}" for w in plan.warnings]
    return "\n".join(lines).rstrip() + "\n"
