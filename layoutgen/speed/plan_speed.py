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

The machine comes from the spec: host RAM's peak from ``host.memory_bandwidth``, else
``host.cpu.model``'s platform (channels x MT/s x 8); each GPU's from its ``bandwidth``,
else the GPU table by ``name`` (hardware.gpu_by_name).  Without a host bandwidth, or a
GPU the service uses without one, nothing is estimated: no guess.  ``host.efficiency``
is the machine's one fitted constant; without it, :data:`PRIOR_EFFICIENCY`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Literal

from layoutgen.errors import Problem, Severity
from layoutgen.models.profile import Profile
from layoutgen.runtimes.base import Runtime
from layoutgen.solve.placement import expert_kind, loaded
from layoutgen.solve.plan import Marginal, ServicePlan, SpeedPlan
from layoutgen.spec.roles import ResolvedService
from layoutgen.spec.schema import Spec
from layoutgen.speed import contention, hardware, heat
from layoutgen.speed.model import (
    HOST,
    Chunk,
    Machine,
    Memory,
    Move,
    Workload,
    decode,
    give_back,
    next_gib,
)

#: The efficiency a machine gets without ``host.efficiency``: the median, rounded, of
#: the six machines fitted in tests/speed_data (0.23-0.60; tests/test_plan_speed.py
#: recomputes it). A prior: calibrate on the machine for a figure of its own.
PRIOR_EFFICIENCY = 0.37


def host_bandwidth(spec: Spec) -> float | None:
    """Host RAM's peak bytes/s: ``memory_bandwidth``, else the CPU model's platform."""
    if spec.host.memory_bandwidth is not None:
        return float(spec.host.memory_bandwidth)
    if spec.host.cpu.model is not None:
        return hardware.cpu(spec.host.cpu.model).memory_bandwidth
    return None


def efficiency(spec: Spec) -> tuple[float, Literal["given", "prior"]]:
    if spec.host.efficiency is not None:
        return spec.host.efficiency, "given"
    return PRIOR_EFFICIENCY, "prior"


def machine(spec: Spec, rs: ResolvedService) -> Machine | str:
    """The service's memories, or why its speed is not estimated."""
    bw = host_bandwidth(spec)
    if bw is None:
        return "no host bandwidth (host.memory_bandwidth or host.cpu.model)"
    threads = rs.threads or spec.host.cpu.cores
    cpu_flops = (
        hardware.cpu(spec.host.cpu.model).flops(threads)
        if spec.host.cpu.model is not None
        else math.inf  # no compute floor without the CPU's figures
    )
    mems = [Memory(HOST, bw, cpu_flops)]
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
    return Machine(spec.host.name, tuple(mems), efficiency(spec)[0])


def workload(sp: ServicePlan, profile: Profile, rt: Runtime, ctx: int) -> Workload:
    """Where each byte a token reads lives (module docstring); CTX: the total context
    the KV buffers hold (over every slot)."""
    dev_of = dict(sp.device_of)
    single = {t: d for d, ts in sp.expert_tensors.items() for t in ts}
    expert_dev = {layer: d for d, layers in sp.expert_layers.items() for layer in layers}
    tensors = loaded(profile, rt)
    layers = sorted({t.layer for t in tensors if t.layer is not None})
    on_gpu = [x for x in layers if x in sp.layer_buffer]
    last = dev_of.get(sp.layer_buffer[on_gpu[-1]], HOST) if on_gpu else HOST
    chunks: list[Chunk] = []
    for t in tensors:
        if t.name == "token_embd.weight":
            continue
        found = expert_kind(t.name)
        if t.name in sp.moved:
            dev = dev_of.get(sp.moved[t.name], HOST)
        elif found is not None and t.name in single:
            dev = single[t.name]
        elif found is not None and found[0] in expert_dev:
            dev = expert_dev[found[0]]
        elif t.layer is not None:  # a layer the split does not name stays on the CPU
            dev = dev_of.get(sp.layer_buffer.get(t.layer, ""), HOST)
        else:
            dev = last
        params = float(math.prod(t.shape))
        layer = t.layer if t.layer is not None else (layers[-1] + 1 if layers else 0)
        kind = f"ffn_{found[1]}_exps" if found is not None else ""
        chunks.append(Chunk(dev, layer, float(t.nbytes), params, found is not None, kind))
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
    return w.with_heat(heat.prior(profile.arch, routed)) if routed else w


def service_speed(
    spec: Spec, rs: ResolvedService, sp: ServicePlan, profile: Profile
) -> SpeedPlan | str | None:
    """The service's decode speed at depth = ctx per slot / 2; a reason (str) where it
    is not modelled; None where the host's bandwidth is not known (nothing to say)."""
    if host_bandwidth(spec) is None:
        return None
    if sp.budget is not None:
        return "not modelled (vLLM)"
    m = machine(spec, rs)
    if isinstance(m, str):
        return f"not modelled: {m}"
    rt = spec.runtimes[rs.service.runtime].rules()
    ctx = rs.service.ctx or (profile.hparams.n_ctx_train or 0)
    depth = ctx // max(rs.parallel, 1) // 2
    w = workload(sp, profile, rt, ctx)
    b = decode(m, w, depth)
    marginal: list[Marginal] = []
    back: list[Marginal] = []
    if any(c.routed and c.device == HOST for c in w.chunks):
        for gpu in m.gpus:
            for found, out in (
                (next_gib(m, w, depth, gpu.name), marginal),
                (give_back(m, w, depth, gpu.name), back),
            ):
                if found is not None:
                    out.append(_marginal(found))
    host_bytes = b.device_bytes.get(HOST, 0.0)
    eta, basis = efficiency(spec)
    return SpeedPlan(
        decode_tps=b.tps,
        depth=depth,
        host_bytes_per_token=host_bytes,
        host_demand=host_bytes * b.tps,
        efficiency=eta,
        efficiency_basis=basis,
        seconds=b.seconds,
        host_seconds=b.device_seconds.get(HOST, 0.0),
        marginal=tuple(marginal),
        give_back=tuple(back),
    )


def _marginal(x: Move) -> Marginal:
    """The plan's form: GGUF tensor names (blk.N.ffn_K_exps.weight), integer bytes."""
    return Marginal(x.gpu, x.gain_tps, round(x.nbytes), tuple(f"{t}.weight" for t in x.tensors))


def lanes_warnings(
    spec: Spec, speeds: Mapping[str, SpeedPlan], clash: Mapping[str, set[str]]
) -> list[Problem]:
    """A warning, at the later service in the spec, for each pair of services that run
    at the same time (schedules overlap; no schedule: all day; services that conflict
    never run together) and together ask host RAM for more than its effective
    bandwidth (efficiency x peak)."""
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
            pair = contention.together((lanes[a], lanes[b]), bw)
            if pair.over:
                out.append(
                    Problem(
                        ("services", b),
                        f"services.{b}: {contention.warning(pair)}",
                        Severity.WARNING,
                    )
                )
    return out


def _lane(spec: Spec, name: str, s: SpeedPlan) -> contention.Lane:
    text = spec.services[name].schedule
    windows = contention.parse_windows(text) if text is not None else None
    return contention.Lane(name, s.seconds, s.host_seconds, s.host_bytes_per_token, windows)
