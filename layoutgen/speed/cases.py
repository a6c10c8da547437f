"""Benchmark records (tests/speed_data/*.yaml) -> machines, workloads, measurements.

A record names its hardware by table entry (hardware.py) with optional overrides, its
model by the hyperparameters that fix per-layer bytes, and its placement coarsely
(all on host, all on GPUs, experts of some MoE layers on the host or on named GPUs).
tests/speed_data/README.md documents the format.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from layoutgen.speed import cpu_compute, hardware, numa
from layoutgen.speed.model import HOST, Chunk, Machine, Measurement, Memory, Workload

MIB = 1024**2
GIB = 1024**3


def layer_set(spec: Any, universe: list[int]) -> set[int]:
    """'all', 'none', '3-14', [3, '68-77'] -> layer numbers (within UNIVERSE for all)."""
    if spec in (None, "none"):
        return set()
    if spec == "all":
        return set(universe)
    items = spec if isinstance(spec, list) else [spec]
    out: set[int] = set()
    for it in items:
        if isinstance(it, int):
            out.add(it)
        else:
            lo, _, hi = str(it).partition("-")
            out.update(range(int(lo), int(hi or lo) + 1))
    return out


@dataclass(frozen=True)
class Shape:
    """Per-layer bytes of a model, as the speed model needs them."""

    arch: str
    layers: list[int]  # layers with attention, in order
    moe_layers: list[int]
    n_expert: int
    n_expert_used: int
    dense_bytes: float  # per layer
    dense_params: float
    experts: list[tuple[str, float, float]]  # per MoE layer: (tensor, bytes, params)
    kv_per_token: float  # all layers, bytes per context token


def shape(d: dict[str, Any]) -> Shape:
    n_layer = int(d["n_layer"])
    layers = list(range(n_layer))
    lead = int(d.get("leading_dense", 0))
    step = int(d.get("moe_step", 1))  # Llama 4: every 2nd layer is MoE (interleave_moe_layer_step)
    moe = [x for x in layers if x >= lead and (x - lead + 1) % step == 0]
    if "expert_tensors_mib" in d:  # explicit per-layer figures (seed 001)
        exp_params = 3 * d["n_embd"] * d["expert_ff"] * d["n_expert"]
        total = sum(d["expert_tensors_mib"].values()) * MIB
        experts = [
            (f"ffn_{n}_exps", mib * MIB, exp_params * mib * MIB / total)
            for n, mib in d["expert_tensors_mib"].items()
        ]
        dense = float(d["dense_mib"]) * MIB
        dense_params = float(d["params"]) - exp_params * len(moe)
        moe = list(range(d["moe_first"], d["moe_first"] + len(moe)))
        layers = list(range(d["moe_first"] - lead, moe[-1] + 1))
    else:  # from hyperparameters: experts at expert_bpw, the rest shares what is left
        size = float(d["size_gib"]) * GIB
        params = float(d["params"])
        bpw = size * 8 / params
        exp_params = 3 * d["n_embd"] * d["expert_ff"] * d["n_expert"]
        exp_bytes = exp_params * float(d.get("expert_bpw", bpw)) / 8
        rest_params = params - exp_params * len(moe)
        rest_bytes = size - exp_bytes * len(moe)
        embd = d["vocab"] * d["n_embd"]  # token_embd: one row read per token
        dense = rest_bytes * (rest_params - embd) / rest_params
        experts = [(f"ffn_{n}_exps", exp_bytes / 3, exp_params / 3) for n in ("gate", "up", "down")]
        dense_params = rest_params - embd
    return Shape(
        arch=str(d["arch"]),
        layers=layers,
        moe_layers=moe,
        n_expert=int(d["n_expert"]),
        n_expert_used=int(d["n_expert_used"]),
        dense_bytes=dense / len(layers),
        dense_params=dense_params / len(layers),
        experts=experts,
        kv_per_token=float(d["kv_bytes_per_token"]),
    )


def host_basis(d: dict[str, Any]) -> str:
    """How a record's host RAM bandwidth is given: "measured" (``ram: {measured: B}``,
    the owner's mlc/STREAM figure), "peak" (channels x MT/s, or ``bandwidth:``), or
    "none" (a GPU-only record)."""
    if d.get("cpu") is None:
        return "none"
    return "measured" if "measured" in (d.get("ram") or {}) else "peak"


def machine(d: dict[str, Any], threads: int | None = None) -> Machine:
    """D's memories; THREADS: a result's own thread count (else the record's, else the
    CPU's cores)."""
    ram = d.get("ram") or {}
    if d.get("cpu") is None:  # a GPU-only record: the host holds no weights
        mems = [Memory(HOST, 1e9, 1e9)]
    else:
        cpu = hardware.cpu(d["cpu"], int(d.get("sockets", 1)))
        bw = (
            float(ram["measured"])
            if "measured" in ram
            else float(ram["bandwidth"])
            if "bandwidth" in ram
            else hardware.ddr_bandwidth(
                int(ram.get("channels", cpu.channels)), int(ram.get("mts", cpu.mts))
            )
        )
        n = threads or int(d.get("threads", cpu.cores))
        mems = [Memory(HOST, bw, cpu.flops(n), threads=min(n, cpu.cores), arrivals=n)]
    for i, name in enumerate(d.get("gpus", [])):
        g = hardware.gpu(name)
        mems.append(Memory(f"CUDA{i}", g.bandwidth, g.fp16_flops, g.pcie))
    return Machine(str(d["machine"]), tuple(mems))


def workload(s: Shape, p: dict[str, Any], gpus: int) -> Workload:
    """Chunks for placement P: dense layers split over GPUS evenly (or at split_at)."""
    if p.get("cpu_only") or gpus == 0:
        dense_dev = dict.fromkeys(s.layers, HOST)
    elif "ngl" in p:  # llama.cpp -ngl N < the layer count: the last N layers on CUDA0
        first = len(s.layers) - int(p["ngl"])
        dense_dev = {x: "CUDA0" if i >= first else HOST for i, x in enumerate(s.layers)}
    else:
        cuts = (p.get("split_at") or [])[: gpus - 1] or [
            s.layers[0] + round(i * len(s.layers) / gpus) for i in range(1, gpus)
        ]
        dense_dev = {x: f"CUDA{sum(x >= c for c in cuts)}" for x in s.layers}
    exp_dev = {x: dense_dev[x] for x in s.moe_layers}
    for x in layer_set(p.get("experts_host"), s.moe_layers):
        exp_dev[x] = HOST
    if "n_cpu_moe" in p:  # llama.cpp: blk.0..N-1 (counted from blk.0, dense leads included)
        for x in s.moe_layers:
            if x < int(p["n_cpu_moe"]):
                exp_dev[x] = HOST
    for dev, spec in (p.get("experts_gpu") or {}).items():
        for x in layer_set(spec, s.moe_layers):
            exp_dev[x] = dev
    chunks = [Chunk(dense_dev[x], x, s.dense_bytes, s.dense_params) for x in s.layers]
    for x in s.moe_layers:
        for name, b, prm in s.experts:
            chunks.append(Chunk(exp_dev[x], x, b, prm, routed=True, name=name))
    per_layer = s.kv_per_token / len(s.layers)
    kv: dict[str, float] = {}
    for x in s.layers:
        kv[dense_dev[x]] = kv.get(dense_dev[x], 0.0) + per_layer
    return Workload(tuple(chunks), s.n_expert, s.n_expert_used, tuple(sorted(kv.items())))


def topology(hw: dict[str, Any]) -> numa.Topology | None:
    """A record's NUMA layout (``sockets``, ``numa_nodes``, ``link``, ``ram_gib``), or
    None on a host of one node."""
    sockets = int(hw.get("sockets", 1))
    nodes = int(hw.get("numa_nodes", sockets))
    if sockets == 1 and nodes == 1:
        return None
    link = hw.get("link") or hardware.cpu(hw["cpu"]).link
    ram = float(hw.get("ram_gib", math.inf)) * GIB
    return numa.Topology(sockets, nodes, float(link) if link else None, ram / nodes)


def numa_reading(d: dict[str, Any], r: dict[str, Any]) -> numa.Reading:
    """How result R of record D places pages and threads: its (or the record's)
    ``numa: {policy, nodes}`` and ``numa_flag`` (``--numa X``), and whether the weights
    stay memory-mapped (not with ``--no-mmap`` or ``-rtr`` in the command, or
    ``mmap: false``)."""
    policy = r.get("numa", d.get("numa")) or {}
    flag = r.get("numa_flag", d.get("numa_flag"))
    command = str(d.get("command", ""))
    mapped = not re.search(r"(^|\s)(--no-mmap|-rtr|--run-time-repack)(\s|$)", command)
    mmap = bool(r.get("mmap", d.get("mmap", mapped)))
    nodes = policy.get("nodes")
    return numa.reading(
        policy.get("policy"), tuple(nodes) if nodes is not None else None, flag, mmap
    )


def with_numa(m: Machine, d: dict[str, Any], r: dict[str, Any], w: Workload) -> Machine:
    """M whose host RAM reads as result R's pages and threads sit (layoutgen.speed.numa)
    on record D's NUMA layout; M itself on a host of one node."""
    hw = d["hardware"]
    if hw.get("cpu") is None:
        return m
    topo = topology(hw)
    if topo is None:
        return m
    resident = sum(c.nbytes for c in w.chunks if c.device == HOST)
    cores = hardware.cpu(hw["cpu"], topo.sockets).cores
    host, _ = numa.host_memory(m.memory(HOST), topo, resident, numa_reading(d, r), cores)
    return m.with_memory(host)


def quant_of(d: dict[str, Any], r: dict[str, Any]) -> str | None:
    """Result R's quantization type as cpu_compute keys it (its own ``quant:``, else the
    record's ``model.quant``; ``-rtr`` in the record's command, or ``rtr: true`` on the
    result, for repacked), or None where neither gives one."""
    quant = r.get("quant", (d.get("model") or {}).get("quant"))
    if not quant:
        return None
    rtr = bool(r.get("rtr", re.search(r"(^|\s)-rtr(\s|$)", str(d.get("command", "")))))
    return cpu_compute.key(str(quant), rtr)


def typed(w: Workload, quant: str | None) -> Workload:
    """W with every chunk of type QUANT (a record states one type for its weights)."""
    if not quant:
        return w
    return replace(w, chunks=tuple(c._replace(quant=quant) for c in w.chunks))


def with_compute(
    m: Machine, d: dict[str, Any], r: dict[str, Any], quant: str | None, threads: int
) -> Machine:
    """M whose host RAM prices QUANT's compute (cpu_compute.rates) for result R of record
    D: its runtime family from ``runtime:``, its build's date from ``build_date:`` (the
    result's, else the record's; none: the newest kernels)."""
    hw = d["hardware"]
    if not quant or hw.get("cpu") is None:
        return m
    cpu = hardware.cpu(hw["cpu"], int(hw.get("sockets", 1)))  # every socket's cores
    date = r.get("build_date", d.get("build_date"))
    compute = cpu_compute.rates(
        cpu, threads, str(d.get("runtime", "")), (quant,), date and str(date)
    )
    if not compute:
        return m
    return m.with_memory(replace(m.memory(HOST), compute=compute))


@dataclass(frozen=True)
class Record:
    path: Path
    id: str
    source: str
    machine: Machine
    shape: Shape
    measurements: tuple[Measurement, ...]
    host_basis: str = "peak"  # host_basis(): "peak", "measured" or "none"
    #: what the run depends on that the model does not see (a record's ``cannot_see``)
    cannot_see: str | None = None
    #: CPU sockets of the host (``hardware.sockets``): more than one, its results also
    #: read the NUMA term (layoutgen.speed.numa)
    sockets: int = 1

    @property
    def host_reads(self) -> bool:
        """Whether any result keeps weights or KV in host RAM."""
        return any(c.device == HOST for x in self.measurements for c in x.workload.chunks) or any(
            d == HOST for x in self.measurements for d, _ in x.workload.kv_per_token
        )


def load(path: Path) -> Record:
    d = YAML(typ="safe").load(path.read_text(encoding="utf-8"))
    m = machine(d["hardware"])
    host = [x for x in m.memories if x.name == HOST]
    m = with_compute(m, d, {}, quant_of(d, {}), host[0].threads if host else 0)
    s = shape(d["model"])
    out = []
    for r in d["results"]:
        place = {**d.get("placement", {}), **r.get("placement", {})}
        sr = shape({**d["model"], "size_gib": r["size_gib"]}) if "size_gib" in r else s
        w = workload(sr, place, int(place.get("gpus_used", len(m.gpus))))
        mr = machine(d["hardware"], int(r["threads"])) if "threads" in r else m
        quant = quant_of(d, r)
        w = typed(w, quant)
        mr = with_numa(mr, d, r, w)
        host = [x for x in mr.memories if x.name == HOST]
        mr = with_compute(mr, d, r, quant, host[0].threads if host else 0)
        out.append(
            Measurement(f"{d['id']}: {r['name']}", mr, w, int(r["depth"]), float(r["measured"]))
        )
    basis = host_basis(d["hardware"])
    blind = d.get("cannot_see")
    return Record(
        path,
        str(d["id"]),
        str(d["source"]),
        m,
        s,
        tuple(out),
        basis,
        blind and str(blind),
        int(d["hardware"].get("sockets", 1)),
    )


def load_dir(folder: Path) -> list[Record]:
    return [load(p) for p in sorted(folder.glob("*.yaml"))]
