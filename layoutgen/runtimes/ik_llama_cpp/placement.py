"""Where ik_llama.cpp puts weights: its layer split by size, its start-up tensors.

Read from ik_llama.cpp's source (``src/llama-load-tensors.cpp``,
``src/llama.cpp``; the mirror of 2026-08-15, build 4840) and checked
against seed 001's logs; where a rule changed, the runtime module
(:mod:`layoutgen.runtimes.ik_llama_cpp`) chooses by version.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence

from layoutgen.core.placement import expert_layer, layer_sizes, loaded, nextn_layers
from layoutgen.core.runtime import Runtime
from layoutgen.models.profile import Profile
from layoutgen.models.quants import tensor_nbytes


def _ik() -> Runtime:
    from layoutgen.runtimes.ik_llama_cpp import IkLlamaCpp

    return IkLlamaCpp()


def split_sizes(
    profile: Profile, kv_per_layer: Mapping[int, int], ubatch: int
) -> tuple[dict[int, int], int]:
    """The layer sizes ik_llama.cpp's multi-GPU split works with (``get_layer_sizes``).

    Each layer: all its loaded tensors, experts included whatever ``-ot`` says
    (nextn layers count 0), plus its KV cache.  The output layer: its tensors
    plus the logits (n_vocab x ubatch x 4 B) less the largest per-layer
    compute estimate (the routed experts' activations: sum of their ne1 x
    ubatch x n_expert_used x 4 B, plus n_embd x ubatch x 8 B).
    """
    hp = profile.hparams
    nextn, (sizes, output) = nextn_layers(profile), _layer_sizes(profile)
    sizes = {n: (0 if n in nextn else b) + kv_per_layer.get(n, 0) for n, b in sizes.items()}
    logits = (hp.vocab or 0) * ubatch * 4
    return sizes, output + logits - expert_activations(profile, ubatch)


@functools.lru_cache(maxsize=64)
def _layer_sizes(profile: Profile) -> tuple[dict[int, int], int]:
    """ik's layer sizes of PROFILE's loaded tensors (the same for every build): a
    94-layer model's ~1,100 tensors summed once, not once per build and service."""
    return layer_sizes(loaded(profile, _ik()))


@functools.lru_cache(maxsize=64)
def _expert_rows(profile: Profile) -> int:
    """The largest sum of routed-expert ne1 in one layer (activations scale with it)."""
    per_layer: dict[int, int] = {}
    for t in loaded(profile, _ik()):
        layer = expert_layer(t.name)
        if layer is not None and len(t.shape) > 1:
            per_layer[layer] = per_layer.get(layer, 0) + t.shape[1]
    return max(per_layer.values(), default=0)


def expert_activations(profile: Profile, ubatch: int) -> int:
    """ik_llama.cpp's per-layer compute estimate for a MoE layer (``get_layer_sizes``).

    The routed experts' activations, sum of ne1 x ubatch x n_expert_used x 4 B,
    plus n_embd x ubatch x 8 B; 0 for a model without routed experts.
    """
    rows = _expert_rows(profile)
    if not rows:
        return 0
    hp = profile.hparams
    return rows * ubatch * (hp.n_expert_used or 0) * 4 + (hp.n_embd or 0) * ubatch * 8


@functools.lru_cache(maxsize=64)
def _expert_tensors(profile: Profile, merge_up_gate: bool) -> dict[int, int]:
    """The largest routed-expert weight of each layer as the runtime multiplies it.

    With ik_llama.cpp's ``-muge`` the up and gate experts are one fused tensor.
    """
    largest: dict[int, int] = {}
    fused: dict[int, int] = {}
    for t in loaded(profile, _ik()):
        layer = expert_layer(t.name)
        if layer is None:
            continue
        if merge_up_gate and t.name.endswith(("ffn_up_exps.weight", "ffn_gate_exps.weight")):
            fused[layer] = fused.get(layer, 0) + t.nbytes
        largest[layer] = max(largest.get(layer, 0), t.nbytes)
    return {layer: max(size, fused.get(layer, 0)) for layer, size in largest.items()}


def offload_copy(
    profile: Profile,
    ubatch: int,
    expert_device: Mapping[int, str],
    *,
    merge_up_gate: bool,
    by_share: bool = True,
) -> int:
    """Bytes of host expert weights ik_llama.cpp copies into the first GPU's compute buffer.

    With a large enough batch, ggml's scheduler runs a MoE matmul whose experts
    live in host memory on the first GPU, copying the weight in
    (``ggml_backend_cuda_offload_op``: ubatch x n_expert_used >= 32 x n_expert
    since ik PR #520, ``by_share``; ubatch >= 32 before it; 32 =
    GGML_CUDA_MIN_BATCH_OFFLOAD); the copies share the compute buffer one
    at a time, so the largest host expert tensor counts.  Seed 001: CUDA0 logs
    5418.03 MiB at -ub 8192 with -muge whether or not CUDA0 holds the logits,
    = the fused up+gate of one layer (2450 MiB) + activations (2944 MiB) + 24.
    """
    hp = profile.hparams
    if not hp.n_expert or ubatch < 32:
        return 0
    if by_share and ubatch * (hp.n_expert_used or 0) < 32 * hp.n_expert:
        return 0
    sizes = _expert_tensors(profile, merge_up_gate)
    return max((b for layer, b in sizes.items() if layer not in expert_device), default=0)


def split_by_size(
    sizes: Mapping[int, int], output: int, devices: Sequence[str], shares: Sequence[float]
) -> dict[int, str]:
    """ik_llama.cpp's greedy layer split: fill each device up to its share of the total.

    A device takes layers in order while its running total stays within its
    share; it takes one more if that overshoots by less than stopping short
    would undershoot.  Remaining layers go to the last device (so does the
    output).  Sizes come from :func:`split_sizes`.
    """
    if not devices:
        return {}
    order = sorted(sizes)
    total = sum(sizes.values()) + output
    weight = sum(shares)
    out: dict[int, str] = {}
    i = 0
    for d, device in enumerate(devices[:-1]):
        budget = total * shares[d] / weight
        used = 0
        while i < len(order):
            size = sizes[order[i]]
            if used + size > budget and (used + size - budget) >= (budget - used):
                break
            out[order[i]] = device
            used += size
            i += 1
    for layer in order[i:]:
        out[layer] = devices[-1]
    return out


@functools.lru_cache(maxsize=64)  # per profile: asked once per candidate layout
def computed_wkv_b(profile: Profile, mla: int | None) -> Mapping[int, int]:
    """Bytes per layer of the ``attn_kv_b`` tensors ik_llama.cpp computes at start-up.

    With MLA at level 2 or 3 (its default) ik_llama.cpp needs ``wkv_b``; a GGUF
    that carries only ``attn_k_b``/``attn_v_b`` (recent conversions, GLM-5.1)
    gets one computed per layer, as q8_0 unless both halves are f16/bf16, of
    shape [kv_lora_rank, n_head x (qk_nope + v_head)], in a buffer of the same
    type as ``attn_k_b`` ("Computed blk.N.attn_kv_b.weight ... stored in buffer
    CUDA0"; ik_llama.cpp src/llama.cpp).  It is real device memory, allocated
    after the logged model buffer sizes, so it is not in them.
    """
    hp = profile.hparams
    if (mla or 3) < 2 or not hp.kv_lora_rank or not hp.rope_dim:
        return {}
    tensors = loaded(profile, _ik())
    if any(t.name.endswith(".attn_kv_b.weight") for t in tensors):
        return {}
    n_head = hp.n_head if isinstance(hp.n_head, int) else None
    if n_head is None or hp.key_length is None or hp.value_length is None:
        return {}
    halves: dict[int, set[str]] = {}
    for t in tensors:
        if t.layer is not None and t.name.endswith((".attn_k_b.weight", ".attn_v_b.weight")):
            halves.setdefault(t.layer, set()).add(t.type)
    shape = (hp.kv_lora_rank, n_head * (hp.key_length - hp.rope_dim + hp.value_length))
    out: dict[int, int] = {}
    for layer, types in sorted(halves.items()):
        qtype = types.pop() if len(types) == 1 and types <= {"f16", "bf16"} else "q8_0"
        out[layer] = tensor_nbytes(qtype, shape)
    return out
