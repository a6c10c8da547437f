"""A planned service's decode speed, and lanes that ask host RAM for too much together.

The solver's plan says where every tensor of a llama.cpp/ik_llama.cpp service lives
(``ServicePlan``: the layer split, expert layers and single expert tensors per device,
every tensor moved by ``-ot``); the profile says each tensor's bytes.  From those this
module builds the :class:`~layoutgen.speed.model.Workload` the speed model reads:

- every loaded tensor of a layer on the device of its buffer (``moved`` first, then the
  expert placement for routed experts, then the layer split); the output layer on the
  last layer's device; ``token_embd`` is left out (one row a token);
- routed experts (``ffn_*_exps``) as routed chunks, read ``k/n x heat`` per token, with
  the architecture's heat prior (heat.prior: uniform but for glm-dsa);
- KV bytes per context token per device: each buffer's KV over the service's context.

A service with routed experts in host RAM also gets, per GPU, the decode t/s of the next
GiB of VRAM there (model.next_gib: the hottest host expert tensors that fit, or the
smallest one when none does) and of a GiB given back (model.give_back: the GPU's coldest
expert tensors to host RAM), each at the same depth.

The machine comes from the spec: host RAM's bandwidth from ``host.memory_bandwidth``
(a peak), ``host.memory_bandwidth_measured`` (a figure the user measured), else
``host.cpu.model``'s platform (channels x MT/s x 8, a peak); each GPU's from its
``bandwidth``, else the GPU table by ``name`` (hardware.gpu_by_name).  Each kind of
memory has its own efficiency: host RAM's (``host.efficiency``, else the prior for the
kind of figure given: :data:`PRIOR_EFFICIENCY` over a peak,
:data:`PRIOR_MEASURED_EFFICIENCY` over a measured figure) and the GPUs'
(``host.gpu_efficiency``, else :data:`PRIOR_GPU_EFFICIENCY`).  A service that keeps
nothing in host RAM (every layer and its KV on GPUs) is estimated without a host
bandwidth; one that reads host RAM without it, or a GPU without a bandwidth, is not:
no guess.

Depth: the speed is for one request at ``depth`` context tokens, by default 0 (what
llama-bench's tg128 reports, to within its 128 tokens); ``layoutgen plan --depth N``
asks for another (:func:`at_depth`), and the plan then gives both.

vLLM: a token reads one tensor-parallel rank's share (:func:`budget_workload`); with
MTP speculation a step adds its drafts' reads and yields :func:`tokens_per_step` tokens
at :data:`SPECULATIVE_ACCEPTANCE` (said under the speed).

llama.cpp with a draft model (``draft:``): a step is the target's verification of its
N + 1 tokens, priced as one target token at the depth (an upper bound: it costs a little
more), and N steps of the draft model where the plan put it (:func:`draft_workload`);
it yields :func:`tokens_per_step` tokens at the draft's acceptance, given as llama-server
logs it (:func:`conditional_acceptance`) or :data:`DRAFT_ACCEPTANCE` (said under the
speed).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from layoutgen.core.placement import expert_kind, loaded, tied_output
from layoutgen.core.runtime import Runtime, flag_value
from layoutgen.errors import Problem, Severity
from layoutgen.models.profile import Profile
from layoutgen.models.quants import by_name, known
from layoutgen.models.tensors import Tensor
from layoutgen.solve.footprint import mmapped
from layoutgen.solve.plan import Marginal, Plan, ServicePlan, SpeedPlan, Trade
from layoutgen.spec.roles import ResolvedService
from layoutgen.spec.schema import Spec
from layoutgen.speed import contention, cpu_compute, hardware, heat, numa
from layoutgen.speed.model import (
    HOST,
    Chunk,
    Machine,
    Memory,
    Move,
    Workload,
    decode,
    give_back,
    marginal_gb,
    next_gib,
    prefill_tps,
    typed_weights,
)

#: The efficiencies a machine gets before it is calibrated: fitted together, rounded,
#: on the machines of tests/speed_data (layoutgen.speed.priors, lomo.fit: each machine
#: weighs the same; tests/test_plan_speed.py recomputes them). Priors: calibrate on the
#: machine for figures of its own.  Fitted with the per-layer terms of model.Constants
#: (a GPU's launches, host threads' barriers), which take what many threads cost
#: (a 128-core Xeon) out of the efficiency; leave-one-machine-out figures:
#: python -m layoutgen.speed.lomo.
#: Host RAM over a peak (channels x MT/s x 8 or memory_bandwidth).
PRIOR_EFFICIENCY = 0.61
#: Host RAM over a measured figure (memory_bandwidth_measured: mlc, STREAM): 1, by
#: mechanism (a measured read bandwidth is what decode reads at), not fitted; fitted
#: with the others it came to 1.01.
PRIOR_MEASURED_EFFICIENCY = 1.0
#: GPU memory over its datasheet peak.
PRIOR_GPU_EFFICIENCY = 0.82

Basis = Literal["given", "prior"]
HostFigure = Literal["peak", "measured", "none"]


def host_bandwidth(spec: Spec) -> float | None:
    """Host RAM's bytes/s as given: ``memory_bandwidth`` (a peak),
    ``memory_bandwidth_measured``, else the CPU model's platform (a peak)."""
    if spec.host.memory_bandwidth is not None:
        return float(spec.host.memory_bandwidth)
    if spec.host.memory_bandwidth_measured is not None:
        return float(spec.host.memory_bandwidth_measured)
    if spec.host.cpu.model is not None:
        return hardware.cpu(spec.host.cpu.model, spec.host.cpu.sockets).memory_bandwidth
    return None


def host_figure(spec: Spec) -> HostFigure:
    """What kind of figure :func:`host_bandwidth` is."""
    if spec.host.memory_bandwidth_measured is not None:
        return "measured"
    return "none" if host_bandwidth(spec) is None else "peak"


def efficiency(spec: Spec) -> tuple[float, Basis]:
    """Host RAM's efficiency over the figure given, and whether it was written."""
    if spec.host.efficiency is not None:
        return spec.host.efficiency, "given"
    if host_figure(spec) == "measured":
        return PRIOR_MEASURED_EFFICIENCY, "prior"
    return PRIOR_EFFICIENCY, "prior"


def _cpu(spec: Spec) -> hardware.CpuFacts | None:
    """The host's CPUs from the table (every socket's cores and channels), if named."""
    c = spec.host.cpu
    return hardware.cpu(c.model, c.sockets) if c.model is not None else None


def gpu_efficiency(spec: Spec) -> tuple[float, Basis]:
    if spec.host.gpu_efficiency is not None:
        return spec.host.gpu_efficiency, "given"
    return PRIOR_GPU_EFFICIENCY, "prior"


def machine(spec: Spec, rs: ResolvedService) -> Machine | str:
    """The service's memories, or why its speed is not estimated. Without a host
    bandwidth host RAM's is NaN: a workload that reads host RAM must not be estimated
    on it (:func:`service_speed` says so first)."""
    bw = host_bandwidth(spec)
    threads = rs.threads or spec.host.cpu.cores
    cpu = _cpu(spec)
    cpu_flops = (
        cpu.flops(threads) if cpu is not None else math.inf  # no floor without the CPU's
    )
    cores = cpu.cores if cpu is not None else spec.host.cpu.cores
    mems = [
        Memory(
            HOST,
            bw if bw is not None else math.nan,
            cpu_flops,
            threads=min(threads, cores),
            arrivals=threads,
        )
    ]
    by_id = {g.id: g for g in spec.host.gpus}
    for gid in rs.gpus:
        g = by_id[gid]
        if g.rpc is not None:
            return f"GPU {gid} is an rpc device (network hops are not modelled)"
        facts = hardware.gpu_by_name(g.name) if g.name is not None else None
        if g.bandwidth is not None:
            gbw = float(g.bandwidth)
        elif facts is not None:
            gbw = facts.bandwidth
        else:
            return f"no bandwidth for GPU {gid} (give its bandwidth, or a name from the table)"
        flops = facts.fp16_flops if facts is not None else math.inf
        mems.append(Memory(gid, gbw, flops, facts.pcie if facts is not None else 0.0))
    return Machine(spec.host.name, tuple(mems), efficiency(spec)[0], gpu_efficiency(spec)[0])


def reads_host(w: Workload) -> bool:
    """Whether a token reads host RAM: weights or KV there."""
    return any(c.device == HOST and c.nbytes > 0 for c in w.chunks) or any(
        d == HOST and b > 0 for d, b in w.kv_per_token
    )


def workload(
    sp: ServicePlan,
    profile: Profile,
    rt: Runtime,
    ctx: int,
    measured: heat.HeatProfile | None = None,
) -> Workload:
    """Where each byte a token reads lives (module docstring); CTX: the total context
    the KV buffers hold (over every slot); MEASURED: the model's heat file, else the
    architecture's prior."""
    dev_of = dict(sp.device_of)
    single = {t: d for d, ts in sp.expert_tensors.items() for t in ts}
    expert_dev = {layer: d for d, layers in sp.expert_layers.items() for layer in layers}
    facts = _facts(loaded(profile, rt))
    last_layer = facts.last
    on_gpu = [x for x in sorted(sp.layer_buffer) if x <= last_layer]
    last = dev_of.get(sp.layer_buffer[on_gpu[-1]], HOST) if on_gpu else HOST

    def home(layer: int) -> str:
        if layer <= last_layer:  # a layer the split does not name stays on the CPU
            return dev_of.get(sp.layer_buffer.get(layer, ""), HOST)
        return last  # the output layer

    experts_of: dict[int, str] = {}  # a layer's routed experts' device, figured once

    def experts_at(layer: int) -> str:
        dev = experts_of.get(layer)
        if dev is None:
            dev = experts_of[layer] = expert_dev.get(layer) or home(layer)
        return dev

    moved = sp.moved
    chunks: list[Chunk] = [
        Chunk(
            dev_of.get(moved[name], HOST)
            if name in moved
            else single[name]
            if name in single
            else experts_at(layer),
            layer,
            nbytes,
            params,
            True,
            kind,
            quant,
        )
        for name, layer, nbytes, params, kind, quant in facts.routed
    ]
    # a layer's other tensors, summed per device: where it is, less what -ot moved; each
    # priced at the type that holds most of their weights (as the figures price a file's
    # mix of types by its main one)
    main = facts.main_type
    dense: dict[tuple[int, str], list[float]] = {
        (layer, home(layer)): [b, p] for layer, (b, p) in facts.dense.items()
    }
    kinds: dict[tuple[int, str], str] = {}
    for name, buf in sp.moved.items():
        found = facts.dense_tensor.get(name)
        if found is None:
            continue
        layer, b, p, q = found
        key = (layer, dev_of.get(buf, HOST))
        if key not in dense:
            kinds[key] = q
        was, now = dense[(layer, home(layer))], dense.setdefault(key, [0.0, 0.0])
        was[0], was[1], now[0], now[1] = was[0] - b, was[1] - p, now[0] + b, now[1] + p
    chunks += [
        Chunk(dev, layer, b, p, False, "", kinds.get((layer, dev)) or main.get(layer, ""))
        for (layer, dev), (b, p) in dense.items()
        if b > 0
    ]
    if tied_output(profile):
        # no output.weight: the output is a copy of token_embd beside the last layer
        # (placement.tied_output), read whole each token as any output (small models
        # tie theirs: Qwen2.5-0.5B's is a quarter of its bytes)
        embd = next(t for t in profile.tensors() if t.name == "token_embd.weight")
        chunks.append(
            Chunk(
                last,
                last_layer + 1,
                float(embd.nbytes),
                float(math.prod(embd.shape)),
                False,
                "",
                cpu_compute.priced(embd.type),
            )
        )
    kv: dict[str, float] = {}
    for buf, part in sp.buffers.items():
        if part.kv and ctx:
            d = dev_of.get(buf, HOST)
            kv[d] = kv.get(d, 0.0) + part.kv / ctx
    hp = profile.hparams
    routed = sorted({c.layer for c in chunks if c.routed})
    w = Workload(
        tuple(chunks),
        n_expert=hp.n_expert or 1,
        n_expert_used=hp.n_expert_used or 1,
        kv_per_token=tuple(sorted(kv.items())),
    )
    if not routed:
        return w
    return w.with_heat(measured if measured is not None else heat.prior(profile.arch, routed))


@dataclass(frozen=True)
class _Facts:
    """A profile's loaded tensors as the speed model reads them, figured once: the
    routed-expert tensors one by one (name, layer, bytes, parameters, kind, priced
    type); every other tensor summed per layer (the output layer as the last + 1), with
    the priced type of the most of its weights (``main_type``), and each one's (layer,
    bytes, parameters, priced type) for those an ``-ot`` rule moves.  The embeddings
    are left out (looked up, one row a token).  A tensor's priced type is its
    cpu_compute key where some published figure has it, else "" (priced at its bytes:
    norms, F32, types no source times)."""

    routed: tuple[tuple[str, int, float, float, str, str], ...]
    dense: Mapping[int, tuple[float, float]]
    dense_tensor: Mapping[str, tuple[int, float, float, str]]
    last: int
    main_type: Mapping[int, str]


#: a Hugging Face checkpoint's routed-expert tensors (Mixtral/Qwen-MoE/DeepSeek names)
_HF_EXPERT = re.compile(r"\.(?:experts|block_sparse_moe\.experts)\.")


#: a checkpoint's tensors a target decode step does not read whole: the embedding (one
#: row a token) and the multi-token-prediction head (``mtp.*``: read by draft steps only)
_NOT_READ = re.compile(r"(?:^|\.)embed_tokens\.|^mtp\.")
_MTP = re.compile(r"^mtp\.")


def budget_workload(sp: ServicePlan, profile: Profile) -> Workload:
    """A vLLM service as the speed model sees it: a token reads one rank's share of the
    weights (routed experts at k/n of theirs; not the embedding, a row a token, nor the
    MTP head, which only drafting reads) and of the KV at the depth asked, on one GPU;
    tensor-parallel ranks read theirs at the same time, so one rank is the time (their
    all-reduces are not counted: optimistic by that much)."""
    budget = sp.budget
    assert budget is not None
    tensors = tuple(profile.tensors())  # an iterator: read three times below
    total = sum(t.nbytes for t in tensors) or 1
    routed = sum(t.nbytes for t in tensors if _HF_EXPERT.search(t.name))
    unread = sum(t.nbytes for t in tensors if _NOT_READ.search(t.name))
    size = max(1, _DTYPE_BYTES.get(profile.hparams.dtype or "", 2))
    ranks = [(b, p) for b, p in sorted(sp.buffers.items()) if p.weights]
    chunks: list[Chunk] = []
    kv: tuple[tuple[str, float], ...] = ()
    if ranks:
        buf, part = ranks[0]
        dev = sp.device_of[buf]
        share = part.weights / total  # this rank's share of every tensor
        experts = routed * share
        dense = (total - routed - unread) * share
        chunks.append(Chunk(dev, 0, dense, dense / size))
        if experts:
            chunks.append(Chunk(dev, 0, experts, experts / size, True, "ffn_experts"))
        kv = ((dev, float(budget.kv_bytes_per_token)),)  # every layer, this rank's heads
    hp = profile.hparams
    return Workload(
        tuple(chunks),
        n_expert=hp.n_expert or 1,
        n_expert_used=hp.n_expert_used or 1,
        kv_per_token=kv,
        graphed=True,  # vLLM replays a decode step as one CUDA graph
    )


#: speculative decoding: the chance the target accepts a drafted token (each in turn,
#: given the ones before it were), where the spec gives none. Fitted on seed 004's two
#: vLLM services, MTP with 3 tokens on two RTX 5060 Ti at tensor parallel 2 (Genesis,
#: INT4, ~83 tok/s; AEON, NVFP4, 68.86): 0.78 puts both within 1 % (2.86 tokens a step),
#: with the GPU prior and the draft steps' reads below; one seed, two checkpoints.
SPECULATIVE_ACCEPTANCE = 0.78


def tokens_per_step(acceptance: float, n: int) -> float:
    """Tokens a speculative step yields on average: the target's own, plus each of the
    N drafted tokens while every one before it was accepted: sum of a^i, i = 0..N."""
    return sum(acceptance**i for i in range(n + 1))


def mtp_draft_workload(sp: ServicePlan, profile: Profile) -> Workload | None:
    """What one MTP draft step reads on one rank: the MTP head and the LM head (vLLM's
    MTP proposer computes its logits with the target's lm_head), at the rank's share;
    None where the checkpoint has no ``mtp.*`` tensors."""
    tensors = tuple(profile.tensors())
    mtp = sum(t.nbytes for t in tensors if _MTP.search(t.name))
    ranks = [(b, p) for b, p in sorted(sp.buffers.items()) if p.weights]
    if not mtp or not ranks:
        return None
    head = sum(t.nbytes for t in tensors if t.name.startswith("lm_head."))
    total = sum(t.nbytes for t in tensors) or 1
    buf, part = ranks[0]
    nbytes = (mtp + head) * part.weights / total
    size = max(1, _DTYPE_BYTES.get(profile.hparams.dtype or "", 2))
    chunk = Chunk(sp.device_of[buf], 0, nbytes, nbytes / size)
    return Workload((chunk,), 1, 1, graphed=True)


#: llama.cpp draft model (``draft:``): the chance the target accepts each drafted token,
#: given the ones before it were, where the spec gives no ``draft.acceptance``: the
#: median over the public llama.cpp draft-model runs of tests/test_draft_speed.py that
#: drafted their full length every step (llama.cpp issue 5877: 0.89, PR 10455: 0.86,
#: an LFM2 pair: 0.56), each one's logged accepted/generated at its length turned into
#: this chance (:func:`conditional_acceptance`); greedy runs, so high for sampled chat.
#: Not vLLM's MTP figure (SPECULATIVE_ACCEPTANCE).
DRAFT_ACCEPTANCE = 0.86

#: drafted tokens a step where ``draft.max_tokens`` is not given: llama.cpp 11434's
#: ``--spec-draft-n-max`` default (common/common.h:329 ``n_max = 3``); with its default
#: ``p_min = 0`` (common.h:333) a step drafts that many (common/speculative.cpp:421-441)
DRAFT_MAX_TOKENS = 3


def conditional_acceptance(rate: float, n: int) -> float:
    """The chance a (each drafted token accepted, given the ones before it were) that
    llama-server logs as RATE, its ``draft acceptance`` (accepted / generated drafts),
    when every step drafts N: a step accepts a + a^2 + ... + a^N drafts on average, so
    RATE = that / N and ``tokens_per_step(a, N) = 1 + N x RATE``; found by bisection."""
    want = 1.0 + n * rate
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if tokens_per_step(mid, n) < want:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def logged_rate(acceptance: float, n: int) -> float:
    """What llama-server would log as its ``draft acceptance`` (accepted / generated)
    for the per-token chance ACCEPTANCE at N drafts a step: the inverse of
    :func:`conditional_acceptance`."""
    return (tokens_per_step(acceptance, n) - 1.0) / n


def draft_workload(sp: ServicePlan, profile: Profile, rt: Runtime, ctx: int) -> Workload | None:
    """What one step of a llama.cpp draft model reads: its weights and KV where the plan
    puts them (``ServicePlan.draft``, every layer on the draft's GPUs: ``-ngld 999``),
    its layers in order over those buffers as their weights fill them (the draft splits
    as the target, by ``-ts``); CTX: the context its KV holds (the target's). None where
    the plan has no draft."""
    bufs = sorted(
        (b for b, p in sp.draft.items() if p.weights and sp.device_of.get(b, HOST) != HOST),
        key=lambda b: (len(b), b),
    )  # its GPUs' buffers (token_embd stays in host RAM, looked up a row a token)
    if not bufs:
        return None
    facts = _facts(loaded(profile, rt))
    per_layer = [facts.dense.get(layer, (0.0, 0.0))[0] for layer in range(facts.last + 2)]
    for _, layer, nbytes, *_ in facts.routed:
        per_layer[layer] += nbytes
    total = sum(per_layer) or 1.0
    bounds, run = [], 0.0
    planned = sum(sp.draft[b].weights for b in bufs)
    for b in bufs:  # each buffer's end, as a share of the draft's bytes
        run += sp.draft[b].weights / planned
        bounds.append(run)
    layer_buffer: dict[int, str] = {}
    seen = 0.0
    for layer in range(facts.last + 1):  # the output layer follows the last (workload)
        mid = (seen + per_layer[layer] / 2) / total
        seen += per_layer[layer]
        layer_buffer[layer] = bufs[min(i for i, end in enumerate([*bounds, 2.0]) if mid <= end)]
    draft_sp = ServicePlan(
        name=sp.name,
        buffers=dict(sp.draft),
        device_of=sp.device_of,
        expert_layers={},
        layer_buffer=layer_buffer,
    )
    return workload(draft_sp, profile, rt, ctx)


def _target_only(sp: ServicePlan) -> ServicePlan:
    """SP less its draft model's KV: the target's tokens read their own cache only."""
    if not sp.draft:
        return sp
    buffers = dict(sp.buffers)
    for b, d in sp.draft.items():
        if b in buffers:
            buffers[b] = replace(buffers[b], kv=buffers[b].kv - d.kv)
    return replace(sp, buffers=buffers)


#: torch_dtype -> bytes per parameter (the speed model's FLOPs count parameters)
_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "float8_e4m3fn": 1}


_FACTS: dict[int, tuple[tuple[Tensor, ...], _Facts]] = {}


def _facts(tensors: tuple[Tensor, ...]) -> _Facts:
    hit = _FACTS.get(id(tensors))
    if hit is not None and hit[0] is tensors:
        return hit[1]
    layers = sorted({t.layer for t in tensors if t.layer is not None})
    last = layers[-1] if layers else -1
    routed = []
    dense: dict[int, tuple[float, float]] = {}
    dense_tensor: dict[str, tuple[int, float, float, str]] = {}
    by_type: dict[int, dict[str, float]] = {}  # a layer's weights per priced type
    priced: dict[str, str] = {}  # a tensor type -> its priced type, figured once a type
    for t in tensors:
        if t.name == "token_embd.weight":
            continue
        found = expert_kind(t.name)
        layer = t.layer if t.layer is not None else last + 1
        nbytes, params = float(t.nbytes), float(math.prod(t.shape))
        q = priced.get(t.type)
        if q is None:
            q = priced[t.type] = cpu_compute.priced(t.type)
        if found is not None:
            routed.append((t.name, layer, nbytes, params, f"ffn_{found[1]}_exps", q))
            continue
        b, p = dense.get(layer, (0.0, 0.0))
        dense[layer] = (b + nbytes, p + params)
        dense_tensor[t.name] = (layer, nbytes, params, q)
        per = by_type.setdefault(layer, {})
        per[q] = per.get(q, 0.0) + params
    main = {layer: max(per, key=lambda q: (per[q], q)) for layer, per in by_type.items()}
    facts = _Facts(tuple(routed), dense, dense_tensor, last, main)
    if len(_FACTS) > 64:
        _FACTS.clear()
    _FACTS[id(tensors)] = (tensors, facts)  # held: the id stays this tuple's
    return facts


def service_speed(
    spec: Spec,
    rs: ResolvedService,
    sp: ServicePlan,
    profile: Profile,
    measured: heat.HeatProfile | None = None,
    others: Sequence[tuple[ResolvedService, ServicePlan, Profile]] = (),
    depth: int = 0,
    draft_profile: Profile | None = None,
) -> SpeedPlan | str | None:
    """The service's decode speed for one request at DEPTH context tokens (default 0:
    llama-bench's tg128); a reason (str) where it is not modelled; None where a token
    reads host RAM and its bandwidth is not known, or no bandwidth is known at all
    (nothing to say). OTHERS: the other services' plans, for what their settings trade
    against this one's speed on the GPUs they share. DRAFT_PROFILE: a llama.cpp
    ``draft:`` model's profile, for its steps (:func:`draft_workload`)."""
    m = machine(spec, rs)
    if isinstance(m, str):
        return None if host_bandwidth(spec) is None else f"not modelled: {m}"
    rt = spec.runtimes[rs.service.runtime].rules()
    if sp.budget is not None:
        w = budget_workload(sp, profile)
    else:
        ctx = rs.service.ctx or (profile.hparams.n_ctx_train or 0)
        w = workload(_target_only(sp), profile, rt, ctx, measured)
    if host_bandwidth(spec) is None and reads_host(w):
        return None
    m, numa_line = with_numa(spec, rs, m, w)
    m = with_compute(spec, rs, m, w)
    caveats = _caveats(spec, rs, w, profile, m)
    draft: tuple[Workload, int, float | None] | None = None
    sv = rs.service.speculative if sp.budget is not None else None
    if sv is not None and sv.method == "mtp":
        dw = mtp_draft_workload(sp, profile)
        if dw is not None:
            draft = (dw, sv.num_tokens, sv.acceptance)
            a = SPECULATIVE_ACCEPTANCE if sv.acceptance is None else sv.acceptance
            per_step = tokens_per_step(a, sv.num_tokens)
            caveats += (
                (
                    f"speculative acceptance: {a} a drafted token assumed (seed 004's MTP), "
                    f"{per_step:.2f} tokens a step of {sv.num_tokens} drafts; the speed "
                    "moves with yours (speculative.acceptance)"
                )
                if sv.acceptance is None
                else (
                    f"speculative acceptance: {a} a drafted token as given, {per_step:.2f} "
                    f"tokens a step of {sv.num_tokens} drafts"
                ),
            )
    elif sv is not None:
        caveats += (f"speculative decoding ({sv.method}): the speed is without it",)
    dm = rs.service.draft if sp.budget is None else None
    if dm is not None and draft_profile is not None:
        dw = draft_workload(sp, draft_profile, rt, ctx)
        if dw is not None:
            n = dm.max_tokens or DRAFT_MAX_TOKENS
            a = (
                DRAFT_ACCEPTANCE
                if dm.acceptance is None
                else conditional_acceptance(dm.acceptance, n)
            )
            draft = (dw, n, a)
            rate = logged_rate(a, n)
            per_step = tokens_per_step(a, n)
            caveats += (
                (
                    f"draft acceptance: {a} a drafted token assumed (public llama.cpp "
                    f"draft-model runs), logged as {rate:.2f} accepted/generated, "
                    f"{per_step:.2f} tokens a step of {n} drafts; the speed moves with "
                    "yours (draft.acceptance: llama-server's 'draft acceptance' line); "
                    "an upper bound (verifying priced as one target token)"
                )
                if dm.acceptance is None
                else (
                    f"draft acceptance: {dm.acceptance} accepted/generated as given "
                    f"({a:.2f} a drafted token), {per_step:.2f} tokens a step of {n} "
                    "drafts; an upper bound (verifying priced as one target token)"
                ),
            )

    def at(d: int) -> SpeedPlan:
        found = replace(
            _speed(spec, rs, m, w, d, others, caveats, draft), at_depth=at, numa=numa_line
        )
        if d == 0:
            return found
        return replace(found, decode_tps_depth0=_speculated(m, w, 0, draft)[0])

    return at(max(depth, 0))


def _speed(
    spec: Spec,
    rs: ResolvedService,
    m: Machine,
    w: Workload,
    depth: int,
    others: Sequence[tuple[ResolvedService, ServicePlan, Profile]],
    caveats: tuple[str, ...],
    draft: tuple[Workload, int, float | None] | None = None,
) -> SpeedPlan:
    b = decode(m, w, depth)
    tps, seconds = _speculated(m, w, depth, draft)
    marginal: list[Marginal] = []
    back: list[Marginal] = []
    trades: list[Trade] = []
    if any(c.routed and c.device == HOST for c in w.chunks):
        for gpu in m.gpus:
            for found, out in (
                (next_gib(m, w, depth, gpu.name), marginal),
                (give_back(m, w, depth, gpu.name), back),
            ):
                if found is not None:
                    out.append(_marginal(found))
            trades += _trades(m, w, depth, gpu.name, others)
    host_bytes = b.device_bytes.get(HOST, 0.0)
    eta, basis = efficiency(spec)
    geta, gbasis = gpu_efficiency(spec)
    reads = reads_host(w)
    plan = SpeedPlan(
        decode_tps=tps,
        depth=depth,
        host_bytes_per_token=host_bytes,
        host_demand=host_bytes * tps,
        efficiency=eta,
        efficiency_basis=basis,
        seconds=seconds,
        host_seconds=b.device_seconds.get(HOST, 0.0),
        marginal=tuple(marginal),
        give_back=tuple(back),
        prefill_tps=_prefill(m, w, rs.ubatch),
        ubatch=rs.ubatch,
        trades=tuple(trades),
        host_figure=host_figure(spec) if reads else "none",
        gpu_efficiency=geta if m.gpus else None,
        gpu_efficiency_basis=gbasis,
        caveats=caveats,
    )
    return plan


def _speculated(
    m: Machine, w: Workload, depth: int, draft: tuple[Workload, int, float | None] | None
) -> tuple[float, float]:
    """(tokens a second, seconds a token) of W at DEPTH; with DRAFT (a draft step's
    workload, drafts a step) a speculative step is the target's step and the drafts',
    and yields tokens_per_step tokens."""
    b = decode(m, w, depth)
    if draft is None:
        return b.tps, b.seconds
    dw, n, given = draft
    step = b.seconds + n * decode(m, dw, depth).seconds
    tps = tokens_per_step(SPECULATIVE_ACCEPTANCE if given is None else given, n) / step
    return tps, 1.0 / tps


def topology(spec: Spec) -> numa.Topology | None:
    """The host's NUMA layout (host.cpu: sockets, numa_nodes, socket_link, else the CPU
    table's link; each node a share of host.ram), or None on a host of one node."""
    c = spec.host.cpu
    if c.sockets == 1 and c.nodes == 1:
        return None
    cpu = _cpu(spec)
    link = (
        float(c.socket_link) if c.socket_link is not None else cpu.link if cpu is not None else None
    )
    return numa.Topology(c.sockets, c.nodes, link, spec.host.ram / c.nodes)


def with_numa(
    spec: Spec, rs: ResolvedService, m: Machine, w: Workload
) -> tuple[Machine, str | None]:
    """M whose host RAM reads as the service's pages and threads sit on the host's NUMA
    nodes (layoutgen.speed.numa: its ``numa:``, its ``--numa`` flag, whether its weights
    stay memory-mapped), and the plan's line saying so; M itself, and no line, on a
    host of one node or for a service that reads nothing there."""
    topo = topology(spec)
    if topo is None or not reads_host(w):
        return m, None
    args, pol = rs.service.args, rs.service.numa
    r = numa.reading(
        pol.policy if pol is not None else None,
        pol.nodes if pol is not None else None,
        flag_value(args, "--numa"),
        mmapped(args, rs.mlock),
    )
    resident = sum(c.nbytes for c in w.chunks if c.device == HOST)
    cpu = _cpu(spec)
    cores = cpu.cores if cpu is not None else spec.host.cpu.cores
    peak = m.memory(HOST).bandwidth
    host, found = numa.host_memory(m.memory(HOST), topo, resident, r, cores)
    line = (
        f"{topo.sockets} socket{'s' if topo.sockets > 1 else ''}, {topo.nodes} NUMA "
        f"node{'s' if topo.nodes > 1 else ''}; {found.why}: host RAM read at "
        f"{found.bandwidth / 1e9:,.0f} of its {peak / 1e9:,.0f} GB/s, threads on "
        f"{found.sockets} socket{'s' if found.sockets > 1 else ''}"
    )
    if found.spilled > 0:
        line += f"; {found.spilled / 2**30:,.0f} GiB do not fit those nodes and go to others"
    if topo.link is None and topo.sockets > 1 and r.pages != "local":
        line += "; the link between sockets is not known (host.cpu.socket_link): not limited"
    return m.with_memory(host), line


def _rtr(rs: ResolvedService) -> bool:
    """Whether the service repacks its host weights at load (``-rtr``)."""
    return bool(re.search(r"(^|\s)(-rtr|--run-time-repack)\b", " ".join(rs.service.args)))


def with_compute(spec: Spec, rs: ResolvedService, m: Machine, w: Workload) -> Machine:
    """M whose host RAM prices its CPU kernels' compute (layoutgen.speed.cpu_compute) for
    the types W keeps there, under the service's runtime (``-rtr``: the repacked rows),
    on ``host.cpu.model``'s instruction set and base clock and the decoding threads up to
    its cores; M itself without a CPU model, or where no type has a figure."""
    cpu = _cpu(spec)
    if cpu is None:
        return m
    quants = set(typed_weights(w).get(HOST, {}))
    if not quants:
        return m
    kind = spec.runtimes[rs.service.runtime].kind
    host = m.memory(HOST)
    rtr = _rtr(rs)
    found = cpu_compute.rates(cpu, host.threads, kind, {cpu_compute.key(q, rtr) for q in quants})
    # the repacked rows keyed back to the chunks' own types
    compute = tuple((q.removesuffix("/rtr"), r) for q, r in found)
    if not compute:
        return m
    return m.with_memory(replace(host, compute=compute))


#: the speed model's blind spots a spec can show: (what, why it matters)
_TRELLIS = re.compile(r"^iq[0-9]_kt$")


def _caveats(
    spec: Spec, rs: ResolvedService, w: Workload, profile: Profile, m: Machine | None = None
) -> tuple[str, ...]:
    """What changes this service's speed that the model does not see, as the spec shows
    it: said with the estimate, not folded into it. M: the machine the speed is figured
    on (its host's compute rates: a trellis type they price needs no caveat)."""
    out: list[str] = []
    rated = {q for q, _ in m.memory(HOST).compute} if m is not None else set()
    host_weights = sum(c.nbytes for c in w.chunks if c.device == HOST)
    if reads_host(w):
        room = spec.host.ram - spec.host.ram_reserve
        if host_weights > room:
            out.append(
                f"weights in host RAM ({host_weights / 2**30:,.0f} GiB) exceed the RAM "
                f"left ({room / 2**30:,.0f} GiB): pages come from disk, far slower than this"
            )
        trellis = {e.type for e in profile.entries if _TRELLIS.match(e.type.lower())}
        unpriced = sorted(
            {t.upper() for t in trellis if not cpu_compute.priced(t)}
            | {q for q in typed_weights(w).get(HOST, {}) if _TRELLIS.match(q.lower())} - rated
            if trellis
            else set()
        )
        if unpriced:
            out.append(
                f"trellis types ({', '.join(unpriced)}) are compute-bound on a CPU and no "
                "published figure prices them on this CPU and runtime: host layers of "
                "them decode slower than this"
            )
        if _rtr(rs):
            # priced where a published figure times the repacked rows (with_compute)
            left = sorted(q.upper() for q in set(typed_weights(w).get(HOST, {})) - rated)
            if any(c.device == HOST and c.nbytes > 0 and not c.quant for c in w.chunks):
                left.append("types no figure has")
            if left:
                out.append(
                    f"-rtr repacks host weights at load: no published figure prices the "
                    f"repacked {', '.join(left)} on this CPU and runtime; their bytes "
                    "alone price them"
                )
    return tuple(out)


def plan_at_depth(plan: Plan, depth: int) -> Plan:
    """PLAN with every service's speed figured at DEPTH (``layoutgen plan --depth``)."""
    services = tuple(
        replace(sp, speed=at_depth(sp.speed, depth)) if isinstance(sp.speed, SpeedPlan) else sp
        for sp in plan.services
    )
    return replace(plan, services=services)


def at_depth(s: SpeedPlan, depth: int) -> SpeedPlan:
    """S figured again at DEPTH context tokens (``layoutgen plan --depth``); S itself
    where it carries no way to (a plan read back from JSON)."""
    if s.depth == depth or s.at_depth is None:
        return s
    return s.at_depth(depth)


def _prefill(m: Machine, w: Workload, ubatch: int) -> float | None:
    """Prompt tokens per second, where every memory's compute peak (and each GPU's host
    link) is known: prefill is compute-bound, so without them there is no figure."""
    known_peaks = all(math.isfinite(mem.flops) for mem in m.memories)
    if not known_peaks or any(g.pcie <= 0 for g in m.gpus):
        return None
    return prefill_tps(m, w, ubatch)


#: a cache type one step smaller, for the KV trade (llama.cpp's cache types)
_SMALLER_CACHE = {"f32": "f16", "f16": "q8_0", "bf16": "q8_0", "q8_0": "q4_0"}
#: weights one quant step smaller: the next lower of these by bits per weight
_QUANT_LADDER = ("q8_0", "q6_k", "q5_k", "q4_k", "q3_k")


def _dominant_type(profile: Profile) -> str:
    """The type holding most of the model's bytes."""
    total: dict[str, int] = {}
    for t in profile.entries:
        total[t.type] = total.get(t.type, 0) + t.nbytes
    return max(sorted(total), key=lambda q: total[q])


def _bpw(qtype: str) -> float:
    q = by_name(qtype)
    return q.type_size * 8 / q.block_size


def _trades(
    m: Machine,
    w: Workload,
    depth: int,
    gpu: str,
    others: Sequence[tuple[ResolvedService, ServicePlan, Profile]],
) -> list[Trade]:
    """What each other llama.cpp service on GPU would free by one setting one step
    smaller (its KV cache type, its context halved, its weights one quant step down,
    each about: bytes scale with the type's bits per element), and the decode t/s
    this service gains from the hottest host expert tensors that fit in it."""
    out: list[Trade] = []
    for rs, sp, profile in others:
        if sp.budget is not None:
            continue  # vLLM's budget is its own: not a per-setting trade
        parts = [p for b, p in sp.buffers.items() if sp.device_of.get(b) == gpu]
        kv, weights = sum(p.kv for p in parts), sum(p.weights for p in parts)
        options: list[tuple[str, str, str, float]] = []
        k, v = rs.cache_type_k, rs.cache_type_v
        if kv and k in _SMALLER_CACHE and (v == k or v in _SMALLER_CACHE):
            nk, nv = _SMALLER_CACHE[k], _SMALLER_CACHE.get(v, v)
            saved = kv / 2 * (1 - _bpw(nk) / _bpw(k)) + kv / 2 * (1 - _bpw(nv) / _bpw(v))
            options.append(("cache types", f"{k}/{v}", f"{nk}/{nv}", saved))
        if kv and rs.service.ctx >= 2048:
            options.append(("ctx", f"{rs.service.ctx:,}", f"{rs.service.ctx // 2:,}", kv / 2))
        dominant = _dominant_type(profile)
        if weights and known(dominant):
            lower = [q for q in _QUANT_LADDER if _bpw(q) < _bpw(dominant) - 0.01]
            if lower:
                step = max(lower, key=_bpw)
                saved = weights * (1 - _bpw(step) / _bpw(dominant))
                options.append(("quant", dominant, step, saved))
        for setting, old, new, saved in options:
            gain, _ = marginal_gb(m, w, depth, gpu, saved)
            out.append(Trade(rs.name, gpu, setting, old, new, round(saved), gain))
    return out


def _marginal(x: Move) -> Marginal:
    """The plan's form: GGUF tensor names (blk.N.ffn_K_exps.weight), integer bytes."""
    return Marginal(x.gpu, x.gain_tps, round(x.nbytes), tuple(f"{t}.weight" for t in x.tensors))


def lanes_warnings(
    spec: Spec, speeds: Mapping[str, SpeedPlan], clash: Mapping[str, set[str]]
) -> list[Problem]:
    """A warning, at the later service in the spec, for each pair of services that run
    at the same time (schedules overlap; no schedule: all day; services that conflict
    never run together) and together ask host RAM for more than its effective
    bandwidth (efficiency x peak): it names both, when they overlap, and advice that
    fits the schedules they have (:mod:`layoutgen.solve.lanes`)."""
    peak = host_bandwidth(spec)
    if peak is None:
        return []
    bw = efficiency(spec)[0] * peak
    names: Sequence[str] = [n for n in spec.services if n in speeds]
    lanes = {n: _lane(spec, n, speeds[n]) for n in names}
    out: list[Problem] = []
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            if b in clash.get(a, set()) or not contention.overlap(lanes[a], lanes[b]):
                continue
            if lanes[a].demand + lanes[b].demand <= bw:
                continue  # fits together: no warning, nothing to bisect
            pair = contention.together((lanes[a], lanes[b]), bw)
            if pair.over:
                from layoutgen.solve.lanes import message

                out.append(
                    Problem(
                        ("services", b),
                        f"services.{b}: {message(spec, pair, lanes)}",
                        Severity.WARNING,
                    )
                )
    return out


def _lane(spec: Spec, name: str, s: SpeedPlan) -> contention.Lane:
    text = spec.services[name].schedule
    windows = contention.parse_windows(text) if text is not None else None
    return contention.Lane(name, s.seconds, s.host_seconds, s.host_bytes_per_token, windows)
