"""One service's memory, buffer by buffer, once its placement is decided.

Inputs are decisions (which device holds each layer, where each expert layer
goes); outputs are the runtime's buffers with weights, KV cache, compute
and overhead, each with its basis.  Weights and KV are exact (profile and
the runtime's cache rules); compute buffers have no closed form in either
runtime (DESIGN §5), so they are estimated unless the spec carries a value
measured from a start-up log (``measured:``, written by ``calibrate``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Mapping

from layoutgen.core.kvcache import KVSettings, device_bytes, layer_caches, n_ctx
from layoutgen.core.override import Rule, apply
from layoutgen.core.placement import (
    HOST,
    Weights,
    expert_layer,
    loaded,
    place_weights,
    tensor_slots,
)
from layoutgen.core.rules import Replayed, remembering
from layoutgen.core.runtime import Runtime, flag_value
from layoutgen.core.setting import Basis, Setting, expert_bytes, output_device
from layoutgen.models.profile import HParams, Profile
from layoutgen.models.quants import by_name
from layoutgen.runtimes.llama_cpp.compute import mla_q_head
from layoutgen.solve.overhead import per_gpu
from layoutgen.solve.plan import Part
from layoutgen.spec.roles import ResolvedService, flash_attn
from layoutgen.spec.schema import Spec


def shares(spec: Spec, rs: ResolvedService, gpus: tuple[str, ...]) -> tuple[float, ...]:
    """Each GPU's share (-ts): the service's tensor_split, else the GPU's usable MiB."""
    split = rs.service.tensor_split
    by_id = {g.id: g for g in spec.host.gpus}
    return tuple(split[g] if split else (by_id[g].vram - by_id[g].reserve) // 2**20 for g in gpus)


def mmapped(args: tuple[str, ...], mlock: bool) -> bool:
    """Whether host weights stay memory-mapped: not with --mlock, --no-mmap, recent
    llama.cpp's -lm/--load-mode none|mlock|dio (which replaced both), or
    ik_llama.cpp's -rtr (run-time repacking turns mmap off: common.cpp)."""
    mode = flag_value(args, "-lm", "--load-mode")
    repacks = "-rtr" in args or "--run-time-repack" in args
    off = "--no-mmap" in args or repacks or mode in ("none", "mlock", "dio")
    return not mlock and not off


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
        flash_attn=flash_attn(rs, rt),
        mla=(
            int(mla)
            if mla is not None and mla.isdigit()
            # asked only of an MLA model: the only one whose plan it changes
            else rt.mla_default()
            if profile.hparams.kv_lora_rank
            else None
        ),
        swa_full="--swa-full" in args,
        kv_unified=rt.kv_unified(any(a in ("-kvu", "--kv-unified") for a in args)),
        mla_split=_mla_split(profile),
    )
    # the worst-case graph is reserved for min(n_ctx, n_ubatch) tokens
    # (llama_context::sched_reserve; a 512-token embedding model with -ub 2048); with no
    # context to size, the model checks say so where it is written
    with contextlib.suppress(ValueError):
        kv = dataclasses.replace(kv, ubatch=min(kv.ubatch, n_ctx(profile.hparams, kv)))
    measured = {
        buf: {k: v for k, v in m.model_dump().items() if v is not None}
        for buf, m in rs.service.measured.items()
    }
    gpus, devices, cuda = device_order(spec, rs.gpus)
    buffer_of = dict(zip(gpus, devices, strict=True))
    rules = tuple(
        (o.pattern, HOST if o.device == HOST else buffer_of.get(o.device, o.device))
        for o in rs.service.tensor_overrides
    )
    return Setting(
        name=rs.name,
        rt=rt,
        profile=profile,
        gpus=gpus,
        devices=devices,
        cuda=cuda,
        kv=kv,
        mmap=mmapped(args, rs.mlock),
        measured=measured,
        overhead={
            buffer_of[g.id]: per_gpu(spec.host, g) for g in spec.host.gpus if g.id in buffer_of
        },
        args=tuple(args),
        isa=spec.host.cpu.isa,
        gpu_layers=rs.service.gpu_layers,
        mla_q_head=mla_q_head(profile.hparams, profile.tensors()),
        user_rules=rules,
        user_pins=user_pins(profile, rt, rules),
        row_shares=shares(spec, rs, gpus) if rs.service.split_mode == "row" else None,
    )


def draft_setting(spec: Spec, rs: ResolvedService, target: Setting, profile: Profile) -> Setting:
    """The draft model's setting, as llama.cpp 11434 builds it from the target's.

    ``common_base_params_to_speculative`` (common/speculative.cpp:2527-2582)
    copies the target's parameters and takes the draft's devices (``-devd``),
    ``n_gpu_layers`` (``-ngld``), tensor overrides (none here) and cache types;
    ``common_speculative_init_result`` (2593-2651) then gives the draft's
    context ``cparams.n_ctx = llama_n_ctx(ctx_tgt)``: the target's context,
    slots, batch and ubatch.  The draft shares the target's process, so it adds
    no per-GPU overhead.
    """
    draft = rs.service.draft
    assert draft is not None
    wanted = set(draft.gpus if draft.gpus is not None else rs.gpus)
    keep = [i for i, g in enumerate(target.gpus) if g in wanted]
    devices = tuple(target.devices[i] for i in keep)
    ctx = target.kv.ctx or target.profile.hparams.n_ctx_train or 0
    kv = dataclasses.replace(
        target.kv,
        ctx=ctx,
        cache_type_k=draft.cache_type_k or "f16",  # common.h params_spec default: F16
        cache_type_v=draft.cache_type_v or "f16",
        mla=None,
        mla_split=_mla_split(profile),
    )
    return dataclasses.replace(
        target,
        profile=profile,
        gpus=tuple(target.gpus[i] for i in keep),
        devices=devices,
        cuda=target.cuda & frozenset(devices),
        kv=kv,
        measured={},
        overhead={},
        gpu_layers=None,
        mla_q_head=mla_q_head(profile.hparams, profile.tensors()),
        user_rules=(),
        user_pins={},
    )


def draft_buffers(d: Setting, shares: tuple[float, ...]) -> dict[str, Part]:
    """The draft model's buffers: every layer and its experts on the draft's GPUs,
    split as the target's layers are (the draft inherits ``-sm`` and ``-ts``: llama.cpp
    reads the first shares for its devices), its KV from the target's context and
    slots, its compute the runtime's estimate for that model: an upper bound, as the
    draft's context keeps one output per sequence (``n_outputs_max = n_parallel``)
    where the estimate budgets a ubatch's."""
    layers = layer_split(d, shares[: len(d.devices)])
    experts = {n: layers[n] for n in expert_bytes(d.profile, d.rt) if n in layers}
    out: dict[str, Part] = {}
    for name, part in buffers(d, layers, experts).items():
        basis = dict(part.basis)
        if part.compute and basis.get("compute") == "estimated":
            basis["compute"] = "upper-bound"
        out[name] = dataclasses.replace(part, basis=basis)
    return out


#: when parts of different bases add up, the sum is as good as the weakest
_WEAKEST: tuple[Basis, ...] = ("upper-bound", "estimated", "measured", "exact")


def add_parts(a: Mapping[str, Part], b: Mapping[str, Part]) -> dict[str, Part]:
    """Two sets of buffers added per buffer name (a service and its draft model: the
    runtime logs each model's buffers, the device holds both)."""
    out = dict(a)
    for name, part in b.items():
        mine = out.get(name)
        if mine is None:
            out[name] = part
            continue
        basis: dict[str, Basis] = {}
        for key in sorted(set(mine.basis) | set(part.basis)):
            found = [x.basis[key] for x in (mine, part) if key in x.basis]
            basis[key] = next(w for w in _WEAKEST if w in found)
        out[name] = Part(
            weights=mine.weights + part.weights,
            created=mine.created + part.created,
            kv=mine.kv + part.kv,
            compute=mine.compute + part.compute,
            overhead=mine.overhead + part.overhead,
            basis=basis,
        )
    return dict(sorted(out.items()))


def user_pins(
    profile: Profile, runtime: Runtime, rules: tuple[tuple[str, str], ...]
) -> dict[str, str]:
    """Tensor -> target for every loaded tensor a rule matches, the first rule winning
    (how llama.cpp and ik_llama.cpp read ``-ot``)."""
    if not rules:
        return {}
    found = apply([Rule(p, t) for p, t in rules], (t.name for t in loaded(profile, runtime)))
    return {name: target for name, target in found.items() if target is not None}


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
    return dict(_kv_layer_bytes(s.profile.hparams, s.kv, s.profile.arch, cuda))


@remembering(256)
def _kv_layer_bytes(
    hp: HParams, kv: KVSettings, arch: str, cuda: bool
) -> tuple[tuple[int, int], ...]:
    """(layer, KV bytes as allocated on a CUDA or a host buffer), in layer order.

    Cached: the KV cache depends on the service, not on where its experts go, and
    the solver asks for each candidate layout's buffers.
    """
    out: dict[int, int] = {}
    for cache in layer_caches(hp, kv, arch=arch):
        out[cache.layer] = out.get(cache.layer, 0) + device_bytes(cache, cuda=cuda)
    return tuple(out.items())


def offloaded(s: Setting) -> list[int]:
    """The layers on GPUs: with ``gpu_layers`` N (``-ngl N``) the last ones, as the
    runtime counts N (:meth:`Runtime.gpu_layers`), else all."""
    n_layer = s.profile.hparams.n_layer
    if s.gpu_layers is None:
        return list(range(n_layer))
    return list(range(s.rt.gpu_layers(n_layer, s.gpu_layers)[0], n_layer))


def layer_split(s: Setting, shares: tuple[float, ...]) -> dict[int, str]:
    """Which device holds each layer (attention, KV, compute); {} on a CPU-only service.
    Layers not in the result run on the CPU (a partial ``-ngl``)."""
    devices = s.devices
    if not devices:
        return {}
    layers = offloaded(s)
    if len(devices) == 1 or s.row_shares is not None:
        # -sm row: every layer's KV and compute on the main GPU, the first
        return dict.fromkeys(layers, devices[0])
    return s.rt.layer_split(s, kv_per_layer(s, cuda=True), shares, layers)


def expert_tensors(s: Setting) -> dict[int, tuple[tuple[str, int], ...]]:
    """The routed-expert tensors the solver places, per expert layer, largest first:
    every loaded one no ``tensor_overrides`` rule has already claimed."""
    every = _expert_tensors(s.profile, s.rt)
    if not s.user_pins:
        return dict(every)
    out = {layer: tuple(t for t in ts if t[0] not in s.user_pins) for layer, ts in every.items()}
    return {layer: ts for layer, ts in out.items() if ts}


@remembering(64)
def _expert_tensors(profile: Profile, runtime: Runtime) -> dict[int, tuple[tuple[str, int], ...]]:
    out: dict[int, list[tuple[str, int]]] = {}
    for name, nbytes, layer, _ in tensor_slots(profile, runtime):
        if layer is not None:
            out.setdefault(layer, []).append((name, nbytes))
    return {
        layer: tuple(sorted(ts, key=lambda t: (-t[1], t[0]))) for layer, ts in sorted(out.items())
    }


#: each placement of weights, by build: an unknown build's epochs place the same
#: tensors in the same buffers where only compute rules differ (solve.builds)
_WEIGHTS: Replayed[Weights] = Replayed(maxsize=256)


def buffers(
    s: Setting,
    layers: Mapping[int, str],
    experts: Mapping[int, str],
    tensors: Mapping[str, str] | None = None,
) -> dict[str, Part]:
    """Every buffer of the service: weights (exact), KV (exact), compute, overhead.

    ``experts``: expert layer -> buffer of its routed experts (absent: host);
    ``tensors``: single expert tensors placed apart from their layer's experts.
    The spec's ``tensor_overrides`` come first, as the runtime reads its rules.
    """
    devices = s.devices
    pins = {**(tensors or {}), **s.user_pins}
    host_overrides = any(v == HOST for v in pins.values()) or any(
        layer not in experts for layer in expert_bytes(s.profile, s.rt)
    )
    host = s.rt.host_buffer(gpus=s.local_gpus, host_overrides=host_overrides, mmap=s.mmap)
    output = output_device(s)
    expert_host = s.rt.expert_host_buffer(gpus=s.local_gpus, mmap=s.mmap)
    repacked = None if s.local_gpus else s.rt.repacked(s.profile, s.isa, s.args)
    weights_key = (
        s.profile,
        dataclasses.replace(s.rt, version=None),
        tuple(layers.items()),
        tuple(experts.items()),
        host,
        output,
        expert_host,
        None if repacked is None else tuple(repacked.items()),
        tuple(pins.items()),
        s.mmap,
    )
    w = _WEIGHTS.get(
        weights_key,
        s.rt.version,
        lambda: place_weights(
            s.profile,
            s.rt,
            layers,
            experts,
            host,
            output,
            expert_host,
            repacked,
            pins or None,
            mapped=s.mmap,
        ),
    )
    weights = dict(w.buffers)
    if s.row_shares is not None:
        _split_rows(s, w.tensor_buffer, weights)
    created: dict[str, int] = {}
    for layer, nbytes in s.rt.created_weights(s.profile, s.kv.mla).items():
        buf = layers.get(layer, host)
        created[buf] = created.get(buf, 0) + nbytes
    kv: dict[str, int] = {}
    hp, arch = s.profile.hparams, s.profile.arch
    for cuda in (True, False):
        for layer, nbytes in _kv_layer_bytes(hp, s.kv, arch, cuda):
            buf = layers.get(layer) or s.rt.cpu_layer_kv_buffer(gpus=s.local_gpus)
            if (buf in s.cuda) == cuda:
                kv[buf] = kv.get(buf, 0) + nbytes
    names = set(weights) | set(kv) | set(devices)
    if s.local_gpus and (host in weights or expert_host in weights):
        names.add("CUDA_Host")  # the host-side compute buffer is named CUDA_Host with a GPU
    if not s.local_gpus:
        names.add("CPU")
    elif s.rt.blas_bytes(s, layers, output):
        names.add("CPU")  # a BLAS build's BLAS backend: plain CPU, beside CUDA_Host
    views = expert_views(s, experts, w.tensor_buffer) if pins else (experts,)
    out: dict[str, Part] = {}
    for name in sorted(names):
        compute, basis = _compute(s, name, output, layers, views)
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
            overhead=s.overhead.get(name, 0) if name in devices else 0,
            basis=basis_map,
        )
    return out


def _split_rows(s: Setting, tensor_buffer: Mapping[str, str], weights: dict[str, int]) -> None:
    """-sm row: the matrices on the main GPU go to ggml-cuda's split buffer, each GPU
    holding its rows (``get_row_split``: cumulative shares, rounded down to 128 rows,
    ``get_row_rounding`` on GPUs of compute capability 7.0 and later; the last GPU
    takes the rest) and, when a row's width is not a multiple of 512
    (MATRIX_ROW_PADDING), one padding row's bytes more; norms stay on the main GPU."""
    main, rows_of = s.devices[0], _ROW_ROUNDING
    total = sum(s.row_shares or ())
    cumulative = [0.0]
    for share in s.row_shares or ():
        cumulative.append(cumulative[-1] + share / total)
    for t in s.profile.tensors():
        if tensor_buffer.get(t.name) != main or len(t.shape) != 2 or t.name == "token_embd.weight":
            continue
        ne0, nrows = t.shape
        qtype = by_name(t.type, s.rt.FLAVOUR)
        weights[main] -= t.nbytes
        for i in range(len(s.devices)):
            low = 0 if i == 0 else int(nrows * cumulative[i]) // rows_of * rows_of
            high = (
                nrows
                if i == len(s.devices) - 1
                else int(nrows * cumulative[i + 1]) // rows_of * rows_of
            )
            if high <= low:
                continue
            part = (high - low) * qtype.row_bytes(ne0)
            if ne0 % 512:
                part += qtype.row_bytes(512 - ne0 % 512)
            name = f"CUDA_Split[{i}]"
            weights[name] = weights.get(name, 0) + part


#: rows a split matrix's share is rounded to (ggml-cuda get_row_rounding, NVIDIA cc >= 7.0)
_ROW_ROUNDING = 128


def moved_tensors(
    s: Setting,
    layers: Mapping[int, str],
    experts: Mapping[int, str],
    tensors: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Tensor -> buffer for each tensor an override puts on another device than its
    layer would (its layer's device, the host for CPU layers and token_embd, the
    last device for the output); host RAM is named by the buffer overrides land in."""
    pins = {**(tensors or {}), **s.user_pins}
    output = output_device(s) or HOST
    expert_host = s.rt.expert_host_buffer(gpus=s.local_gpus, mmap=s.mmap)
    out: dict[str, str] = {}
    for layer, names in _expert_tensors(s.profile, s.rt).items():
        actual = experts.get(layer, HOST)
        if actual != layers.get(layer, HOST):
            for name, _ in names:
                out[name] = expert_host if actual == HOST else actual
    for name, pin in pins.items():
        parts = name.split(".")
        if name.startswith("blk.") and parts[1].isdigit():
            natural = layers.get(int(parts[1]), HOST)
        else:
            natural = HOST if name == "token_embd.weight" else output
        if pin != natural:
            out[name] = expert_host if pin == HOST else pin
        else:
            out.pop(name, None)
    return dict(sorted(out.items()))


def expert_views(
    s: Setting, experts: Mapping[int, str], tensor_buffer: Mapping[str, str]
) -> tuple[Mapping[int, str], ...]:
    """Where each layer's routed experts run, as the compute estimates read it (layer
    -> GPU buffer; absent: host), from where every expert tensor landed.

    A layer whose expert tensors sit on more than one device (a single tensor
    moved, or a rule that catches only ``ffn_down_exps``) runs its expert
    matmuls on both; the runtimes' graphs for that are not modelled term by
    term, so both readings are returned (the layer's experts on its GPU, and
    on the host) and the compute estimate takes the larger per buffer.
    """
    on: dict[int, set[str]] = {}
    for layer, tensors in _expert_tensors(s.profile, s.rt).items():
        for name, _ in tensors:
            buf = tensor_buffer[name]
            on.setdefault(layer, set()).add(buf if buf in s.devices else HOST)
    whole: dict[int, str] = {}
    mixed: dict[int, str] = {}
    for layer, bufs in sorted(on.items()):
        gpus = sorted(bufs - {HOST})
        if bufs == {HOST}:
            continue
        if len(bufs) == 1:
            whole[layer] = gpus[0]
        else:
            mixed[layer] = experts.get(layer, gpus[0]) if experts.get(layer) in gpus else gpus[0]
    if not mixed:
        return (whole,)
    return (whole, {**whole, **mixed})


def _compute(
    s: Setting,
    buffer: str,
    output: str | None,
    layers: Mapping[int, str],
    views: tuple[Mapping[int, str], ...],
) -> tuple[int, Basis]:
    """A measured compute buffer, else the runtime's estimate (its ``compute``): with
    layers whose experts are split over devices, the larger of both readings, an
    upper bound."""
    measured = s.measured.get(buffer, {}).get("compute")
    if measured is not None:
        return measured, "measured"
    found = [s.rt.compute(s, buffer, output, layers, view) for view in views]
    size, basis = max(found, key=lambda f: f[0])
    if size and _takes_foreign_ops(s, buffer, layers):
        hp = s.profile.hparams
        # one layer's worth of its input, normed input and router (logits, probs,
        # choice): the allocator reuses it from layer to layer
        size += (2 * (hp.n_embd or 0) + 3 * (hp.n_expert or 0)) * s.kv.ubatch * 4
        return size, "upper-bound" if basis != "measured" else basis
    return size, "upper-bound" if len(views) > 1 and basis == "estimated" else basis


def _takes_foreign_ops(s: Setting, buffer: str, layers: Mapping[int, str]) -> bool:
    """Whether a user rule puts a layer's non-expert tensor (a norm, the router, a
    shared expert) on ``buffer`` while the layer runs elsewhere: then ``buffer``'s
    backend computes that op of the layer, which the runtimes' estimates do not
    model term by term."""
    if not s.user_pins:
        return False
    host = buffer not in s.devices
    if host and s.local_gpus and s.kv.ubatch >= 32:
        # ops on host weights of a big batch run on the first GPU (op offload) or a
        # BLAS build's BLAS backend (sized op by op), not here: Qwen3-235B's CUDA_Host
        # with its norms and routers on the CPU held only the mask and the embeddings'
        # rows (72.01 MiB at b5192)
        return False
    for name, target in s.user_pins.items():
        if expert_layer(name) is not None or not name.startswith("blk."):
            continue
        layer = int(name.split(".")[1])
        on = layers.get(layer, HOST)
        if target == on:
            continue
        if (target == HOST and host and on != HOST) or target == buffer:
            return True
    return False
