"""One service's memory, buffer by buffer, once its placement is decided.

Inputs are decisions (which device holds each layer, where each expert layer
goes); outputs are the runtime's buffers with weights, KV cache, compute
and overhead, each with its basis.  Weights and KV are exact (profile and
the runtime's cache rules); compute buffers have no closed form in either
runtime (DESIGN §5), so they are estimated unless the spec carries a value
measured from a start-up log (``measured:``, written by ``calibrate``).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass

from layoutgen.models.profile import Profile
from layoutgen.render.argv import flash_attn
from layoutgen.runtimes.base import Runtime, flag_value
from layoutgen.runtimes.llama_cpp.compute import mla_q_head
from layoutgen.solve.kvcache import KVSettings, device_bytes, layer_caches
from layoutgen.solve.placement import expert_layer, loaded, place_weights
from layoutgen.solve.plan import Basis, Part
from layoutgen.spec.roles import ResolvedService
from layoutgen.spec.schema import Spec


@dataclass(frozen=True)
class Setting:
    """What the solver needs to know about one service, resolved once."""

    name: str
    rt: Runtime  # the runtime at the spec's version: everything it decides
    profile: Profile
    #: host GPU ids in the runtime's device order: rpc devices first (llama.cpp puts
    #: them at the front of its list), in spec order, then local GPUs by NVML index
    gpus: tuple[str, ...]
    #: each GPU's buffer name, aligned with ``gpus``: RPC0[HOST:PORT], ..., CUDA0, ...
    devices: tuple[str, ...]
    #: buffers whose allocations follow ggml-cuda's rules (row padding, alignment)
    cuda: frozenset[str]
    kv: KVSettings
    mmap: bool
    measured: Mapping[str, Mapping[str, int]]  # buffer -> {"compute": bytes, ...}
    overhead: int  # per GPU
    #: an MLA model's qk_nope + rope (compute.mla_q_head), read from its tensors once
    mla_q_head: int = 0
    #: the passthrough args, for flags only one runtime reads (its module parses them)
    args: tuple[str, ...] = ()
    #: the host CPU's instruction set level (host.cpu.isa)
    isa: str = "x86-64-v3"
    #: -ngl N: layers on GPUs counted from the end, the output layer as one (None: all)
    gpu_layers: int | None = None

    @property
    def local_gpus(self) -> bool:
        """Whether the process drives a GPU itself (then host buffers are CUDA_Host)."""
        return any(name.startswith("CUDA") for name in self.devices)

    def device_of(self, buffer: str) -> str:
        if buffer in self.devices:
            return self.gpus[self.devices.index(buffer)]
        return "host"

    def buffer_of(self, gpu: str) -> str:
        return self.devices[self.gpus.index(gpu)]


def _mmap(args: tuple[str, ...], mlock: bool) -> bool:
    """Whether host weights stay memory-mapped: not with --mlock, --no-mmap, or
    recent llama.cpp's -lm/--load-mode none|mlock|dio (which replaced both)."""
    mode = flag_value(args, "-lm", "--load-mode")
    return not mlock and "--no-mmap" not in args and mode not in ("none", "mlock", "dio")


def setting(spec: Spec, rs: ResolvedService, profile: Profile) -> Setting:
    rt = spec.runtimes[rs.service.runtime].rules()
    args = rs.service.args
    mla = flag_value(args, "-mla", "--mla-use")
    kv = KVSettings(
        rt=rt,
        ctx=rs.service.ctx,
        parallel=rs.parallel,
        ubatch=rs.ubatch,
        cache_type_k=rs.cache_type_k,
        cache_type_v=rs.cache_type_v,
        flash_attn=flash_attn(rs),
        mla=int(mla) if mla is not None and mla.isdigit() else None,
        swa_full="--swa-full" in args,
        kv_unified=rt.kv_unified(any(a in ("-kvu", "--kv-unified") for a in args)),
        mla_split=_mla_split(profile),
    )
    measured = {
        buf: {k: v for k, v in m.model_dump().items() if v is not None}
        for buf, m in rs.service.measured.items()
    }
    gpus, devices, cuda = device_order(spec, rs.gpus)
    return Setting(
        name=rs.name,
        rt=rt,
        profile=profile,
        gpus=gpus,
        devices=devices,
        cuda=cuda,
        kv=kv,
        mmap=_mmap(args, rs.mlock),
        measured=measured,
        overhead=spec.host.gpu_overhead,
        args=tuple(args),
        isa=spec.host.cpu.isa,
        gpu_layers=rs.service.gpu_layers,
        mla_q_head=mla_q_head(profile.hparams, profile.tensors()),
    )


@functools.lru_cache(maxsize=64)
def _mla_split(profile: Profile) -> bool:
    """Whether an MLA model's GGUF splits attn_k_b/attn_v_b (no attn_kv_b); True if not MLA."""
    if not profile.hparams.kv_lora_rank:
        return True
    return not any(t.name.endswith(".attn_kv_b.weight") for t in profile.tensors())


def device_order(
    spec: Spec, ids: tuple[str, ...]
) -> tuple[tuple[str, ...], tuple[str, ...], frozenset[str]]:
    """GPU ids in the runtime's order, their buffer names, and which follow CUDA's rules.

    llama.cpp lists rpc devices first, in ``--rpc`` order, then local GPUs;
    inside a container local GPUs are CUDA0, CUDA1, ... in NVML index order
    (CUDA_DEVICE_ORDER=PCI_BUS_ID).  An rpc buffer is named
    ``RPC<device index on that server>[HOST:PORT]``; each rpc entry exports
    one device (``-d``), so the index is 0.
    """
    gpus = [g for g in spec.host.gpus if g.id in ids]
    remote = [g for g in gpus if g.rpc is not None]
    local = sorted((g for g in gpus if g.rpc is None), key=lambda g: g.index or 0)
    names = [f"RPC0[{g.rpc.endpoint}]" for g in remote if g.rpc is not None]
    names += [f"CUDA{i}" for i in range(len(local))]
    cuda = {n for n in names if n.startswith("CUDA")}
    cuda |= {
        f"RPC0[{g.rpc.endpoint}]"
        for g in remote
        if g.rpc is not None and g.rpc.device.startswith("CUDA")
    }
    return tuple(g.id for g in remote + local), tuple(names), frozenset(cuda)


def kv_per_layer(s: Setting, *, cuda: bool) -> dict[int, int]:
    out: dict[int, int] = {}
    for cache in layer_caches(s.profile.hparams, s.kv, arch=s.profile.arch):
        out[cache.layer] = out.get(cache.layer, 0) + device_bytes(cache, cuda=cuda)
    return out


def offloaded(s: Setting) -> list[int]:
    """The layers on GPUs: with ``gpu_layers`` N (``-ngl N``) the last N - 1 layers
    (the output layer counts as one, and is on a GPU whenever N >= 1), else all."""
    n_layer = s.profile.hparams.n_layer
    if s.gpu_layers is None:
        return list(range(n_layer))
    return list(range(max(n_layer + 1 - s.gpu_layers, 0), n_layer))


def layer_split(s: Setting, shares: tuple[float, ...]) -> dict[int, str]:
    """Which device holds each layer (attention, KV, compute); {} on a CPU-only service.
    Layers not in the result run on the CPU (a partial ``-ngl``)."""
    devices = s.devices
    if not devices:
        return {}
    layers = offloaded(s)
    if len(devices) == 1:
        return dict.fromkeys(layers, devices[0])
    return s.rt.layer_split(s, kv_per_layer(s, cuda=True), shares, layers)


def expert_bytes(profile: Profile, runtime: Runtime) -> dict[int, int]:
    """Bytes of routed experts per expert layer (what one placement decision moves)."""
    return dict(_expert_bytes(profile, runtime))


@functools.lru_cache(maxsize=64)
def expert_tensor_bytes(profile: Profile, runtime: Runtime) -> dict[int, tuple[int, ...]]:
    """Each expert layer's routed-expert tensors' bytes, largest first."""
    out: dict[int, list[int]] = {}
    for t in loaded(profile, runtime):
        layer = expert_layer(t.name)
        if layer is not None:
            out.setdefault(layer, []).append(t.nbytes)
    return {layer: tuple(sorted(sizes, reverse=True)) for layer, sizes in sorted(out.items())}


@functools.lru_cache(maxsize=64)
def _expert_bytes(profile: Profile, runtime: Runtime) -> tuple[tuple[int, int], ...]:
    out: dict[int, int] = {}
    for t in loaded(profile, runtime):
        layer = expert_layer(t.name)
        if layer is not None:
            out[layer] = out.get(layer, 0) + t.nbytes
    return tuple(sorted(out.items()))


def buffers(s: Setting, layers: Mapping[int, str], experts: Mapping[int, str]) -> dict[str, Part]:
    """Every buffer of the service: weights (exact), KV (exact), compute, overhead."""
    devices = s.devices
    host_overrides = any(layer not in experts for layer in expert_bytes(s.profile, s.rt))
    host = s.rt.host_buffer(gpus=s.local_gpus, host_overrides=host_overrides, mmap=s.mmap)
    output = devices[-1] if devices else None
    expert_host = s.rt.expert_host_buffer(gpus=s.local_gpus, mmap=s.mmap)
    repacked = frozenset() if s.local_gpus else s.rt.repacked(s.profile, s.isa, s.args)
    w = place_weights(s.profile, s.rt, layers, experts, host, output, expert_host, repacked)
    weights = dict(w.buffers)
    created: dict[str, int] = {}
    for layer, nbytes in s.rt.created_weights(s.profile, s.kv.mla).items():
        buf = layers.get(layer, host)
        created[buf] = created.get(buf, 0) + nbytes
    kv: dict[str, int] = {}
    for cache in layer_caches(s.profile.hparams, s.kv, arch=s.profile.arch):
        buf = layers.get(cache.layer, "CPU")
        kv[buf] = kv.get(buf, 0) + device_bytes(cache, cuda=buf in s.cuda)
    names = set(weights) | set(kv) | set(devices)
    if s.local_gpus and (host in weights or expert_host in weights):
        names.add("CUDA_Host")  # the host-side compute buffer is named CUDA_Host with a GPU
    if not s.local_gpus:
        names.add("CPU")
    out: dict[str, Part] = {}
    for name in sorted(names):
        compute, basis = _compute(s, name, output, layers, experts)
        basis_map: dict[str, Basis] = {
            "weights": "exact",
            "created": "exact",
            "kv": "exact",
            "compute": basis,
        }
        for key in ("weights", "kv"):
            if key in s.measured.get(name, {}):
                basis_map[key] = "measured"
        out[name] = Part(
            weights=s.measured.get(name, {}).get("weights", weights.get(name, 0)),
            created=created.get(name, 0),
            kv=s.measured.get(name, {}).get("kv", kv.get(name, 0)),
            compute=compute,
            overhead=s.overhead if name in devices else 0,
            basis=basis_map,
        )
    return out


def _compute(
    s: Setting,
    buffer: str,
    output: str | None,
    layers: Mapping[int, str],
    experts: Mapping[int, str],
) -> tuple[int, Basis]:
    """A measured compute buffer, else the runtime's estimate (its ``compute``)."""
    measured = s.measured.get(buffer, {}).get("compute")
    if measured is not None:
        return measured, "measured"
    return s.rt.compute(s, buffer, output, layers, experts)
