"""Decode and prefill speed from where each byte of a model lives.

Decode (one token, batch 1) is a sum over the memories the token passes through, in
layer order; the devices do not overlap (llama.cpp and ik_llama.cpp run a token's graph
splits one after another):

    t = sum_d [ max(read_d, flops_d / peak_flops_d) + layers_d x c_d ]
        + hops * hop_latency + token_overhead

read_d   = bytes_d / bw_eff_d; on host RAM joined with its kernels' compute time,
           (read^2.5 + compute^2.5)^(1/2.5), compute = sum over quant types of the weights a
           token multiplies / the rate its threads multiply them at
           (``Memory.compute``, from layoutgen.speed.cpu_compute; none for a type
           without a published figure)

bytes_d  = dense (non-routed) weights on d, read fully
         + sum over routed-expert tensors on d: bytes * n_expert_used / n_expert * heat[layer]
         + KV bytes per context token on d * context depth
bw_eff_d = eta_d x bw_d, and for host RAM at most threads x ``thread_bandwidth`` (off
           by default: the fit leaves it at its bound)
layers_d = the layers d computes a part of; c_d the cost of each besides its bytes: a
           GPU's kernel launches (``gpu_layer``), host RAM's threads' wake-ups and
           barriers (``cpu_layer_thread`` x threads); none for a workload replayed as
           one CUDA graph (vLLM: ``Workload.graphed``)
hops     = device changes along the layer order (activations over PCIe; ~12 KB each,
           so latency, not bandwidth, is the cost: seed 001 estimates 19 us in total)
eta      = the memory's efficiency: host RAM's (``Machine.efficiency``) and the GPUs'
           (``Machine.gpu_efficiency``; None: the host's), each fitted by ``fit``;
           bandwidths are datasheet peaks from hardware.py or the spec, or a host RAM
           figure the user measured (plan_speed gives each its own prior).

The shared constants (the efficiencies' priors, ``gpu_layer``, ``cpu_layer_thread``)
are fitted together on tests/speed_data (layoutgen.speed.lomo, priors); ``python -m
layoutgen.speed.lomo`` shows how each machine is predicted from the others.

Prefill is compute-bound: per ubatch of B tokens each device needs
2 x params_touched x B FLOPs at ``compute_efficiency`` (a GPU's:
``gpu_compute_efficiency``) x peak, or, for host-resident
routed experts with B >= 32 and a GPU present, the weights streamed over PCIe to the GPU
(llama.cpp's op offload copies the whole tensor), whichever the runtime does.
A routed tensor touched by B tokens reads the expected share of distinct experts,
1 - (1 - k/n)^B.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal, NamedTuple

from layoutgen.speed.heat import UNIFORM, HeatProfile, ramp

HOST = "host"


@dataclass(frozen=True)
class Memory:
    """A device's memory: peak bandwidth (bytes/s) and peak compute (FLOP/s)."""

    name: str
    bandwidth: float
    flops: float
    pcie: float = 0.0  # GPUs: host link bytes/s
    #: host RAM: the threads decoding (0: not known, no per-thread limit)
    threads: int = 0
    #: host RAM: (quant type, weights/s its threads multiply) for the types with a
    #: published CPU kernel throughput (layoutgen.speed.cpu_compute.rates); a chunk
    #: of another type is priced at its bytes alone
    compute: tuple[tuple[str, float], ...] = ()
    #: host RAM: the decoding threads that meet at each op's barrier, SMT siblings and
    #: threads beyond the cores included (``threads`` counts the cores they compute on);
    #: 0: as ``threads``
    arrivals: int = 0
    #: host RAM: the CPU sockets its decoding threads span (layoutgen.speed.numa):
    #: their barriers cross the link between them (``Constants.cross_socket``)
    sockets: int = 1


@dataclass(frozen=True)
class Machine:
    name: str
    memories: tuple[Memory, ...]
    #: host RAM: effective bandwidth = efficiency x the bandwidth given (a peak, or a
    #: measured figure, which has its own prior: plan_speed)
    efficiency: float = 1.0
    #: GPU memory's own efficiency; None: the host's (one constant for every memory,
    #: as the per-machine fits of tests/speed_data were made)
    gpu_efficiency: float | None = None

    def eta(self, device: str) -> float:
        """The efficiency of DEVICE's memory."""
        if device == HOST or self.gpu_efficiency is None:
            return self.efficiency
        return self.gpu_efficiency

    def with_memory(self, mem: Memory) -> Machine:
        """This machine with MEM in place of its memory of the same name."""
        return replace(
            self, memories=tuple(mem if x.name == mem.name else x for x in self.memories)
        )

    def memory(self, name: str) -> Memory:
        for m in self.memories:
            if m.name == name:
                return m
        raise KeyError(f"machine {self.name!r} has no memory {name!r}")

    @property
    def gpus(self) -> tuple[Memory, ...]:
        return tuple(m for m in self.memories if m.name != HOST)


class Chunk(NamedTuple):
    """Weights one layer keeps on one device; routed chunks are one expert tensor.
    (A named tuple: a plan's workload makes hundreds a service, each solve.)"""

    device: str
    layer: int
    nbytes: float
    params: float
    routed: bool = False
    name: str = ""
    #: its quantization type, as ``Memory.compute`` names it ("" not known)
    quant: str = ""


@dataclass(frozen=True)
class Workload:
    """A service's plan as the speed model sees it."""

    chunks: tuple[Chunk, ...]
    n_expert: int
    n_expert_used: int
    kv_per_token: tuple[tuple[str, float], ...] = ()  # (device, bytes per context token)
    heat: HeatProfile = UNIFORM
    #: the runtime replays a whole decode step as one CUDA graph (vLLM): no per-layer
    #: launches or thread barriers (Constants.gpu_layer, cpu_layer_thread)
    graphed: bool = False

    def with_heat(self, heat: HeatProfile) -> Workload:
        return replace(self, heat=heat)

    @property
    def moe_layers(self) -> list[int]:
        return sorted({c.layer for c in self.chunks if c.routed})


@dataclass(frozen=True)
class Constants:
    """Mechanism constants shared by every machine (estimates, not fitted)."""

    hop_latency: float = 10e-6  # one CUDA copy + stream sync of a few KB (seconds)
    token_overhead: float = 0.5e-3  # sampling, graph reuse/launch per token (seconds)
    op_offload_min_batch: int = 32  # llama.cpp ggml_backend_sched: offload at >= 32 tokens
    #: prefill FLOPs as a share of peak, host RAM's CPU and a GPU's tensor units: fitted,
    #: each machine weighing the same, on the public prompt runs of
    #: tests/speed_data/prefill (layoutgen.speed.prefill_table): CPU-only runs 0.55
    #: (folds 0.55-0.56), full-GPU runs 0.63 (folds 0.61-0.67); an order of magnitude
    #: on a CPU, whose GEMM rate follows the type and runtime, not the FP32 peak
    compute_efficiency: float = 0.55
    gpu_compute_efficiency: float = 0.63
    #: host RAM bytes/s one decoding thread pulls at most (its outstanding misses over
    #: DRAM latency, less its share of the dequantising work): fitted on
    #: tests/speed_data (layoutgen.speed.lomo); 0 turns the limit off
    thread_bandwidth: float = 0.0
    #: per token and layer a GPU computes a part of: kernel launches and their gaps
    #: (seconds); fitted on tests/speed_data (layoutgen.speed.priors), rounded
    gpu_layer: float = 87e-6
    #: per token, layer host RAM computes a part of, and decoding thread: the wake-ups
    #: and barriers of the layer's ops, each thread's arrival an atomic on one cache
    #: line, so linear in threads (seconds); fitted on tests/speed_data (priors), rounded
    cpu_layer_thread: float = 6.3e-6
    #: how many times a thread's barrier arrival costs when the threads span sockets:
    #: the cache line they meet on crosses the link (xGMI, UPI) at several times a
    #: socket's latency; fitted on the multi-socket records of tests/speed_data
    #: (layoutgen.speed.lomo), rounded
    cross_socket: float = 2.7


DEFAULT = Constants()


@dataclass(frozen=True)
class Breakdown:
    device_seconds: dict[str, float]
    device_bytes: dict[str, float]
    hops: int
    hop_seconds: float
    overhead: float

    @property
    def seconds(self) -> float:
        return sum(self.device_seconds.values()) + self.hop_seconds + self.overhead

    @property
    def tps(self) -> float:
        return 1.0 / self.seconds


def token_bytes(w: Workload, c: Chunk) -> tuple[float, float]:
    """(bytes, params) chunk C contributes to one decoded token."""
    if not c.routed:
        return c.nbytes, c.params
    share = w.n_expert_used / w.n_expert * w.heat.of(c.layer)
    return c.nbytes * share, c.params * share


def typed_weights(w: Workload) -> Mapping[str, Mapping[str, float]]:
    """Device -> quant type -> weights a token multiplies there, for W's typed chunks."""
    return _prepared(w).weights


def hops(w: Workload) -> int:
    """Device changes along the layer order (dense part, then its routed experts)."""
    return _prepared(w).hops


@dataclass(frozen=True)
class _Prepared:
    """A workload's per-device totals and its layer path, figured once: moving a few
    chunks (the marginal and trade questions) then costs only what they touch."""

    nbytes: Mapping[str, float]
    flops: Mapping[str, float]
    #: (layer, routed) groups in layer order, and each one's devices, sorted
    index: Mapping[tuple[int, bool], int]
    groups: tuple[tuple[Chunk, ...], ...]
    devices: tuple[tuple[str, ...], ...]
    hops: int
    #: device -> the layers it computes a part of: each a round of kernel launches
    #: (a GPU) or a graph split's start and join of the threads (host RAM's), whether
    #: the layer is whole there or only its routed experts
    layers: Mapping[str, float] = field(default_factory=dict)
    #: device -> quant type -> weights a token multiplies there (chunks with a type)
    weights: Mapping[str, Mapping[str, float]] = field(default_factory=dict)


_PREPARED: dict[int, tuple[Workload, _Prepared]] = {}


def _path_hops(devices: Sequence[tuple[str, ...]], at: Iterable[int]) -> int:
    """The hops inside the groups AT and across the boundaries into them and out."""
    total = 0
    for i in sorted(set(at)):
        total += len(devices[i]) - 1
    for j in sorted({j for i in at for j in (i, i + 1)}):
        if 0 < j < len(devices) and devices[j - 1][-1] != devices[j][0]:
            total += 1
    return total


def _prepared(w: Workload) -> _Prepared:
    hit = _PREPARED.get(id(w))
    if hit is not None and hit[0] is w:
        return hit[1]
    nbytes: dict[str, float] = {}
    flops: dict[str, float] = {}
    grouped: dict[tuple[int, bool], list[Chunk]] = {}
    on: dict[tuple[int, bool], set[str]] = {}
    share, heat = w.n_expert_used / w.n_expert, w.heat.of
    factor: dict[int, float] = {}  # a routed layer's share x heat, figured once
    by_type: dict[tuple[str, str], float] = {}  # (device, quant) -> weights a token
    # token_bytes, inlined: this loop is the workload's one pass (hundreds of chunks a
    # service, each solve: the fields unpacked once, a layer's heat looked up once)
    for c in w.chunks:
        dev, layer, nb, params, routed, _, quant = c
        if routed:
            f = factor.get(layer)
            if f is None:
                f = factor[layer] = share * heat(layer)
        else:
            f = 1.0
        nbytes[dev] = nbytes.get(dev, 0.0) + nb * f
        if quant:
            typed_key = (dev, quant)
            by_type[typed_key] = by_type.get(typed_key, 0.0) + params * f
        else:
            flops[dev] = flops.get(dev, 0.0) + 2.0 * params * f
        key = (layer, routed)
        group = grouped.get(key)
        if group is None:
            grouped[key] = [c]
            on[key] = {dev}
        else:
            group.append(c)
            on[key].add(dev)
    typed: dict[str, dict[str, float]] = {}
    for (dev, quant), n in by_type.items():
        flops[dev] = flops.get(dev, 0.0) + 2.0 * n
        typed.setdefault(dev, {})[quant] = n
    keys = sorted(grouped)
    groups = tuple(tuple(grouped[k]) for k in keys)
    devices = tuple(tuple(sorted(on[k])) for k in keys)
    n = _path_hops(devices, range(len(devices)))
    per_device: dict[str, set[int]] = {}
    for (layer, _), devs in on.items():
        for d in devs:
            per_device.setdefault(d, set()).add(layer)
    layers = {} if w.graphed else {d: float(len(v)) for d, v in per_device.items()}
    prepared = _Prepared(
        nbytes, flops, {k: i for i, k in enumerate(keys)}, groups, devices, n, layers, typed
    )
    if len(_PREPARED) > 256:
        _PREPARED.clear()
    _PREPARED[id(w)] = (w, prepared)  # the workload is held, so its id stays its own
    return prepared


def decode(
    m: Machine,
    w: Workload,
    depth: int,
    k: Constants = DEFAULT,
    moved: Sequence[Chunk] = (),
    to: str = HOST,
) -> Breakdown:
    """Time of one generated token at context DEPTH (with the chunks MOVED, members of
    ``w.chunks``, on device TO instead)."""
    pre = _prepared(w)
    nbytes, flops, n = dict(pre.nbytes), dict(pre.flops), pre.hops
    layers: Mapping[str, float] = pre.layers
    typed: Mapping[str, Mapping[str, float]] = pre.weights
    if moved:
        ids = {id(c) for c in moved}
        retyped = {d: dict(q) for d, q in pre.weights.items()}
        typed = retyped
        for c in moved:
            b, p = token_bytes(w, c)
            nbytes[c.device] -= b
            flops[c.device] -= 2.0 * p
            nbytes[to] = nbytes.get(to, 0.0) + b
            flops[to] = flops.get(to, 0.0) + 2.0 * p
            if c.quant:
                src, dst = retyped[c.device], retyped.setdefault(to, {})
                src[c.quant] -= p
                dst[c.quant] = dst.get(c.quant, 0.0) + p
        touched = {pre.index[(c.layer, c.routed)] for c in moved}
        devices = list(pre.devices)
        for i in touched:
            devices[i] = tuple(sorted({to if id(c) in ids else c.device for c in pre.groups[i]}))
        n += _path_hops(devices, touched) - _path_hops(pre.devices, touched)
        layers = dict(pre.layers)
        for layer in {c.layer for c in moved} if not w.graphed else ():
            keys = [pre.index[key] for key in ((layer, False), (layer, True)) if key in pre.index]
            for d in {d for i in keys for d in pre.devices[i]}:
                layers[d] -= 1
            for d in {d for i in keys for d in devices[i]}:
                layers[d] = layers.get(d, 0.0) + 1
    for dev, per_token in w.kv_per_token:
        nbytes[dev] = nbytes.get(dev, 0.0) + per_token * depth
    seconds = {}
    for dev, b in nbytes.items():
        mem = m.memory(dev)
        f = max(flops.get(dev, 0.0), 0.0)  # moved away to the last chunk: rounding only
        reading = max(b, 0.0) / effective_bandwidth(m, mem, k)
        if mem.compute and dev in typed:
            reading = roofline(reading, compute_seconds(mem, typed[dev]))
        seconds[dev] = max(reading, f / mem.flops) + layer_overhead(mem, layers.get(dev, 0.0), k)
    return Breakdown(seconds, nbytes, n, n * k.hop_latency, k.token_overhead)


def effective_bandwidth(m: Machine, mem: Memory, k: Constants = DEFAULT) -> float:
    """The bytes/s a decode reads MEM at: its efficiency x its bandwidth, and for host
    RAM at most what its threads pull (threads x ``k.thread_bandwidth``)."""
    bw = m.eta(mem.name) * mem.bandwidth
    if mem.name == HOST and mem.threads and k.thread_bandwidth:
        return min(bw, mem.threads * k.thread_bandwidth)
    return bw


#: the exponent that joins a host's reading time and its kernels' compute time,
#: t = (t_bytes^P + t_compute^P)^(1/P): the two overlap (prefetch runs while the cores
#: unpack the previous block), but not perfectly near the knee, where a plain max
#: reads too fast; chosen on the thread sweeps of tests/speed_data (ik_llama.cpp PRs
#: 13, 212, 541; layoutgen.speed.cpu_compute's docstring has the comparison)
ROOFLINE_P = 2.5


def roofline(reading: float, computing: float, p: float = ROOFLINE_P) -> float:
    """Seconds a token spends on a host whose threads read for READING seconds and
    compute for COMPUTING seconds (:data:`ROOFLINE_P`)."""
    if computing <= 0.0:
        return reading
    if reading <= 0.0:
        return computing
    return float((reading**p + computing**p) ** (1.0 / p))


def compute_seconds(mem: Memory, weights: Mapping[str, float]) -> float:
    """Seconds MEM's threads spend multiplying WEIGHTS (quant type -> weights a token)
    at ``mem.compute``'s rates; a type without a rate costs nothing here (its bytes
    price it)."""
    rates = dict(mem.compute)
    total = 0.0
    for quant, n in weights.items():
        rate = rates.get(quant)
        if rate and n > 0.0:
            total += n / rate
    return total


def layer_overhead(mem: Memory, layers: float, k: Constants = DEFAULT) -> float:
    """Seconds a token spends on MEM's LAYERS besides reading and computing: a GPU
    launches each layer's kernels (``k.gpu_layer``); host RAM's threads are woken and
    meet at barriers, each arrival an atomic on one cache line, so it costs more the
    more threads come (``k.cpu_layer_thread`` x threads, every one that arrives: two
    on a core's SMT siblings cost two), and more again where they span sockets
    (``k.cross_socket``)."""
    if mem.name == HOST:
        crossing = k.cross_socket if mem.sockets > 1 else 1.0
        return layers * (mem.arrivals or mem.threads) * k.cpu_layer_thread * crossing
    return layers * k.gpu_layer


def distinct_share(n_expert: int, used: int, tokens: int) -> float:
    """Expected share of a layer's experts that TOKENS independent tokens touch."""
    return 1.0 - (1.0 - used / n_expert) ** tokens


def prefill_tps(m: Machine, w: Workload, ubatch: int, k: Constants = DEFAULT) -> float:
    """Prompt tokens per second for ubatches of UBATCH tokens (depth 0)."""
    touched = distinct_share(w.n_expert, w.n_expert_used, ubatch)
    offload = ubatch >= k.op_offload_min_batch and bool(m.gpus)
    seconds = 0.0
    by_device: dict[str, list[Chunk]] = {}
    for c in w.chunks:
        by_device.setdefault(c.device, []).append(c)
    share, heat = w.n_expert_used / w.n_expert, w.heat.of
    for dev, chunks in by_device.items():
        mem = m.memory(dev)
        # token_bytes' parameters, inlined (a pass over every chunk)
        fl = (
            2.0
            * ubatch
            * sum(c.params * (share * heat(c.layer) if c.routed else 1.0) for c in chunks)
        )
        if dev == HOST and offload:
            gpu = m.gpus[0]
            routed = sum(c.nbytes for c in chunks if c.routed)
            dense_fl = sum(2.0 * c.params * ubatch for c in chunks if not c.routed)
            seconds += routed / gpu.pcie + (fl - dense_fl) / (k.gpu_compute_efficiency * gpu.flops)
            fl = dense_fl
        b = sum(c.nbytes * (touched if c.routed else 1.0) for c in chunks)
        if dev == HOST and offload:
            b = sum(c.nbytes for c in chunks if not c.routed)
        eff = k.compute_efficiency if dev == HOST else k.gpu_compute_efficiency
        seconds += max(b / (m.eta(dev) * mem.bandwidth), fl / (eff * mem.flops))
    seconds += hops(w) * k.hop_latency
    return ubatch / seconds


@dataclass(frozen=True)
class Measurement:
    name: str
    machine: Machine
    workload: Workload
    depth: int
    measured_tps: float


@dataclass(frozen=True)
class Fit:
    efficiency: float
    slope: float | None = None  # heat ramp slope, when fitted
    rows: tuple[tuple[str, float, float], ...] = field(default=())  # name, predicted, measured

    @property
    def worst_error(self) -> float:
        return max(abs(p / m - 1.0) for _, p, m in self.rows)


def golden(
    f: Callable[[float], float], lo: float, hi: float, iters: int = 80, *, log: bool = False
) -> float:
    """The minimum of a unimodal F over [LO, HI] by golden-section search, ITERS
    narrowings, each evaluating F once; LOG: searched on a log scale (LO > 0), for a
    constant whose bounds span decades."""
    g = (math.sqrt(5) - 1) / 2
    to, back = (math.log, math.exp) if log else (float, float)
    a, b = to(lo), to(hi)
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = f(back(c)), f(back(d))
    for _ in range(iters):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = f(back(c))
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = f(back(d))
    return back((a + b) / 2)


Target = Literal["host", "gpu"]


def with_eta(m: Machine, eta: float, target: Target = "host") -> Machine:
    """M with ETA as its host efficiency (the GPUs' too unless they have their own),
    or, TARGET "gpu", as its GPUs' efficiency."""
    if target == "gpu":
        return replace(m, gpu_efficiency=eta)
    return replace(m, efficiency=eta)


def _predict(
    ms: Sequence[Measurement], eta: float, k: Constants, target: Target = "host"
) -> list[float]:
    return [decode(with_eta(x.machine, eta, target), x.workload, x.depth, k).tps for x in ms]


def fit(
    calibrate: Sequence[Measurement],
    *,
    fit_slope: bool = False,
    k: Constants = DEFAULT,
    target: Target = "host",
) -> Fit:
    """One machine's efficiency (and optionally a heat-ramp slope) from CALIBRATE.

    Minimises the squared log error of decode t/s. With ``fit_slope`` the workloads'
    heat becomes ``ramp(moe_layers, slope)`` and the slope is fitted too, so at most two
    constants come out; every measurement must be on the same machine. TARGET: the
    efficiency fitted, the host's (the GPUs' too where the machine gives them none of
    their own) or the GPUs'.
    """
    if len({x.machine.name for x in calibrate}) != 1:
        raise ValueError("fit: all measurements must be on one machine (one constant each)")

    def loss_eta(ms: Sequence[Measurement]) -> Callable[[float], float]:
        def loss(eta: float) -> float:
            preds = _predict(ms, eta, k, target)
            return sum(math.log(p / x.measured_tps) ** 2 for p, x in zip(preds, ms, strict=True))

        return loss

    def with_slope(slope: float) -> list[Measurement]:
        return [
            replace(x, workload=x.workload.with_heat(ramp(x.workload.moe_layers, slope)))
            for x in calibrate
        ]

    slope: float | None = None
    ms: Sequence[Measurement] = calibrate
    if fit_slope:

        def loss_slope(s: float) -> float:
            cand = with_slope(s)
            return loss_eta(cand)(golden(loss_eta(cand), 0.01, 2.0))

        slope = golden(loss_slope, -0.95, 0.95, iters=60)
        ms = with_slope(slope)
    eta = golden(loss_eta(ms), 0.01, 2.0)
    preds = _predict(ms, eta, k, target)
    rows = tuple((x.name, p, x.measured_tps) for x, p in zip(ms, preds, strict=True))
    return Fit(eta, slope, rows)


GIB = 2**30


@dataclass(frozen=True)
class Move:
    """Routed-expert tensors moved between host RAM and GPU ``gpu``, and what decode t/s
    does: ``gain_tps`` = after - before (negative when the GPU gives them back)."""

    gpu: str
    gain_tps: float
    nbytes: float
    tensors: tuple[str, ...]


def _chunk_name(c: Chunk) -> str:
    return f"blk.{c.layer}.{c.name}"


def delta_tps(
    m: Machine, w: Workload, depth: int, picked: Sequence[Chunk], to: str, k: Constants = DEFAULT
) -> float:
    """Decode t/s after - before moving the chunks PICKED (members of ``w.chunks``) to TO."""
    return decode(m, w, depth, k, picked, to).tps - decode(m, w, depth, k).tps


_HOT: dict[int, tuple[Workload, list[Chunk]]] = {}


def _host_hottest_first(w: Workload) -> list[Chunk]:
    """The routed chunks in host RAM, hottest first: per byte moved a tensor saves
    (1/bw_host - 1/bw_gpu) x k/n x heat.  Sorted once per workload (a plan asks the
    next GiB and every trade of the same workload)."""
    hit = _HOT.get(id(w))
    if hit is not None and hit[0] is w:
        return hit[1]
    host = [c for c in w.chunks if c.device == HOST and c.routed]
    host.sort(key=lambda c: (-w.heat.of(c.layer), c.nbytes, c.layer, c.name))
    if len(_HOT) > 256:
        _HOT.clear()
    _HOT[id(w)] = (w, host)
    return host


def _hottest_that_fit(w: Workload, budget: float) -> list[Chunk]:
    host = _host_hottest_first(w)
    picked: list[Chunk] = []
    left = budget
    for c in host:
        if c.nbytes <= left:
            picked.append(c)
            left -= c.nbytes
    return picked


def next_gib(
    m: Machine, w: Workload, depth: int, gpu: str, budget: float = GIB, k: Constants = DEFAULT
) -> Move | None:
    """BUDGET more bytes on GPU: the hottest host expert tensors that fit in it move there
    (:func:`marginal_gb`); where none fits (GLM-5.1's smallest is 1225 MiB), the smallest
    one (the hottest of those) moves, and ``nbytes`` says how much more that takes.
    None without routed experts in host RAM."""
    host = [c for c in w.chunks if c.device == HOST and c.routed]
    if not host:
        return None
    picked = _hottest_that_fit(w, budget) or [
        min(host, key=lambda c: (c.nbytes, -w.heat.of(c.layer), c.layer, c.name))
    ]
    gain = delta_tps(m, w, depth, picked, gpu, k)
    return Move(gpu, gain, sum(c.nbytes for c in picked), tuple(map(_chunk_name, picked)))


def give_back(
    m: Machine, w: Workload, depth: int, gpu: str, budget: float = GIB, k: Constants = DEFAULT
) -> Move | None:
    """GPU gives BUDGET bytes back: its coldest expert tensors (coldest, then smallest)
    move to host RAM until at least BUDGET is free; ``gain_tps`` is negative. None
    without routed experts on GPU."""
    on = [c for c in w.chunks if c.device == gpu and c.routed]
    on.sort(key=lambda c: (w.heat.of(c.layer), c.nbytes, -c.layer, c.name))
    picked: list[Chunk] = []
    for c in on:
        if sum(x.nbytes for x in picked) >= budget:
            break
        picked.append(c)
    if not picked:
        return None
    loss = delta_tps(m, w, depth, picked, HOST, k)
    return Move(gpu, loss, sum(c.nbytes for c in picked), tuple(map(_chunk_name, picked)))


def marginal_gb(
    m: Machine,
    w: Workload,
    depth: int,
    gpu: str,
    budget: float = 1e9,
    k: Constants = DEFAULT,
) -> tuple[float, tuple[str, ...]]:
    """Decode t/s gained by moving the hottest host expert tensors that fit BUDGET to GPU.

    Tensors are taken hottest first (heat x bytes saved per token), each only if it still
    fits; returns (t/s gained, names moved). Nothing fits (GLM-5.1's smallest expert
    tensor is 1225 MiB > 1 GB): (0.0, ()); :func:`next_gib` moves the smallest then.
    """
    picked = _hottest_that_fit(w, budget)
    if not picked:
        return 0.0, ()
    return delta_tps(m, w, depth, picked, gpu, k), tuple(map(_chunk_name, picked))
