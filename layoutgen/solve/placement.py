"""Where each weight tensor lands, by the runtime's own rules.

The plan is only as good as its agreement with what llama.cpp and
ik_llama.cpp actually allocate, so this module reproduces their rules rather
than inventing a tidier model (sources: llama.cpp ``llama_model::load_tensors``
and ik_llama.cpp ``llm_load_tensors`` / ``create_tensors_helper``, read for
DESIGN §5; checked against seed 001's logs):

- token embeddings stay in host memory, whatever ``-ngl`` says;
- a layer's non-expert tensors, its KV cache and compute live on the device
  the layer is assigned to; the output layer goes to the last device;
- routed-expert tensors go where their ``-ot`` rule sends them;
- nextn/MTP layers are not loaded (no MTP), but ik_llama.cpp creates the
  nextn layer's ``attn_k_b`` and ``attn_v_b``; GLM-DSA's lightning-indexer
  tensors of the other layers are loaded onto the layer's device by both
  runtimes; ik_llama.cpp does not compute with them but allocates them all
  the same (``create_glm_dsa_tensors``: flags 0 outside the nextn layer);
- host weights: with a GPU present, ik_llama.cpp puts *every* host tensor
  into one pinned ``CUDA_Host`` buffer as soon as any tensor is overridden to
  the CPU (it turns mmap off); mainline maps them (``CPU_Mapped``) unless
  mmap is off.  Without a GPU the buffer is ``CPU`` (ik) or ``CPU_Mapped``.

Pure functions over a profile; every byte figure here is exact (it comes
from the profile), so its basis is "exact".
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from layoutgen.models.profile import Profile
from layoutgen.models.quants import tensor_nbytes
from layoutgen.models.tensors import Tensor

Runtime = str  # "llama.cpp" | "ik_llama.cpp"

_EXPERT = re.compile(r"^blk\.(?P<layer>\d+)\.ffn_(?:up|gate|down|gate_up)_exps\.weight$")
_IK_KEEP_IN_NEXTN = re.compile(r"\.attn_[kv]_b\.weight$")


def expert_layer(name: str) -> int | None:
    """The layer of a routed-expert tensor (what ``--cpu-moe`` moves), else None."""
    m = _EXPERT.match(name)
    return int(m.group("layer")) if m else None


def nextn_layers(profile: Profile) -> frozenset[int]:
    hp = profile.hparams
    count = hp.nextn_layers or 0
    return frozenset(range(hp.n_layer - count, hp.n_layer))


@functools.lru_cache(maxsize=64)
def loaded(profile: Profile, runtime: Runtime) -> tuple[Tensor, ...]:
    """The tensors the runtime loads (nextn layers are skipped; see the module notes).

    Cached: the solver asks for the same profile's tensors many times, and
    unfolding ~1800 tensors each time dominated solve time.
    """
    nextn = nextn_layers(profile)
    ik_dsa = runtime == "ik_llama.cpp" and profile.arch == "glm-dsa"
    out: list[Tensor] = []
    for tensor in profile.tensors():
        layer = tensor.layer
        if layer in nextn and not (ik_dsa and _IK_KEEP_IN_NEXTN.search(tensor.name)):
            continue
        out.append(tensor)
    return tuple(out)


def layer_sizes(tensors: Iterable[Tensor]) -> tuple[dict[int, int], int]:
    """Bytes per layer (all its tensors, experts included) and of the output layer.

    This is the size ik_llama.cpp's split uses: it ignores ``-ot`` overrides.
    """
    layers: dict[int, int] = {}
    output = 0
    for t in tensors:
        if t.layer is not None:
            layers[t.layer] = layers.get(t.layer, 0) + t.nbytes
        elif t.name != "token_embd.weight":
            output += t.nbytes
    return layers, output


def ik_split_sizes(
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
    nextn = nextn_layers(profile)
    sizes, output = layer_sizes(loaded(profile, "ik_llama.cpp"))
    sizes = {n: (0 if n in nextn else b) + kv_per_layer.get(n, 0) for n, b in sizes.items()}
    logits = (hp.vocab or 0) * ubatch * 4
    return sizes, output + logits - expert_activations(profile, "ik_llama.cpp", ubatch)


@functools.lru_cache(maxsize=64)
def _expert_rows(profile: Profile, runtime: Runtime) -> int:
    """The largest sum of routed-expert ne1 in one layer (activations scale with it)."""
    per_layer: dict[int, int] = {}
    for t in loaded(profile, runtime):
        layer = expert_layer(t.name)
        if layer is not None and len(t.shape) > 1:
            per_layer[layer] = per_layer.get(layer, 0) + t.shape[1]
    return max(per_layer.values(), default=0)


def expert_activations(profile: Profile, runtime: Runtime, ubatch: int) -> int:
    """ik_llama.cpp's per-layer compute estimate for a MoE layer (``get_layer_sizes``).

    The routed experts' activations, sum of ne1 x ubatch x n_expert_used x 4 B,
    plus n_embd x ubatch x 8 B; 0 for a model without routed experts.
    """
    rows = _expert_rows(profile, runtime)
    if not rows:
        return 0
    hp = profile.hparams
    return rows * ubatch * (hp.n_expert_used or 0) * 4 + (hp.n_embd or 0) * ubatch * 8


@functools.lru_cache(maxsize=64)
def _expert_tensors(profile: Profile, runtime: Runtime, merge_up_gate: bool) -> dict[int, int]:
    """The largest routed-expert weight of each layer as the runtime multiplies it.

    With ik_llama.cpp's ``-muge`` the up and gate experts are one fused tensor.
    """
    largest: dict[int, int] = {}
    fused: dict[int, int] = {}
    for t in loaded(profile, runtime):
        layer = expert_layer(t.name)
        if layer is None:
            continue
        if merge_up_gate and t.name.endswith(("ffn_up_exps.weight", "ffn_gate_exps.weight")):
            fused[layer] = fused.get(layer, 0) + t.nbytes
        largest[layer] = max(largest.get(layer, 0), t.nbytes)
    return {layer: max(size, fused.get(layer, 0)) for layer, size in largest.items()}


def ik_offload_copy(
    profile: Profile,
    runtime: Runtime,
    ubatch: int,
    expert_device: Mapping[int, str],
    *,
    merge_up_gate: bool,
) -> int:
    """Bytes of host expert weights ik_llama.cpp copies into the first GPU's compute buffer.

    With a large enough batch, ggml's scheduler runs a MoE matmul whose experts
    live in host memory on the first GPU, copying the weight in
    (``ggml_backend_cuda_offload_op``: ubatch x n_expert_used >= 32 x n_expert,
    32 = GGML_CUDA_MIN_BATCH_OFFLOAD); the copies share the compute buffer one
    at a time, so the largest host expert tensor counts.  Seed 001: CUDA0 logs
    5418.03 MiB at -ub 8192 with -muge whether or not CUDA0 holds the logits,
    = the fused up+gate of one layer (2450 MiB) + activations (2944 MiB) + 24.
    """
    hp = profile.hparams
    if not hp.n_expert or ubatch * (hp.n_expert_used or 0) < 32 * hp.n_expert:
        return 0
    sizes = _expert_tensors(profile, runtime, merge_up_gate)
    return max((b for layer, b in sizes.items() if layer not in expert_device), default=0)


def split_by_size(
    sizes: Mapping[int, int], output: int, devices: Sequence[str], shares: Sequence[float]
) -> dict[int, str]:
    """ik_llama.cpp's greedy layer split: fill each device up to its share of the total.

    A device takes layers in order while its running total stays within its
    share; it takes one more if that overshoots by less than stopping short
    would undershoot.  Remaining layers go to the last device (so does the
    output).  Sizes come from :func:`ik_split_sizes`.
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


def split_by_count(
    layers: Sequence[int], devices: Sequence[str], shares: Sequence[float]
) -> dict[int, str]:
    """Mainline llama.cpp's split: layer i goes to the device whose cumulative share covers i/n.

    The output layer counts as one more layer at the end (it lands on the last device).
    """
    if not devices:
        return {}
    n = len(layers) + 1
    weight = sum(shares)
    bounds: list[float] = []
    acc = 0.0
    for share in shares:
        acc += share / weight
        bounds.append(acc)
    out: dict[int, str] = {}
    for i, layer in enumerate(sorted(layers)):
        x = i / n
        out[layer] = next((devices[d] for d, b in enumerate(bounds) if x < b), devices[-1])
    return out


def host_buffer(runtime: Runtime, *, gpus: bool, host_overrides: bool, mmap: bool) -> str:
    """The name of the buffer host-resident weights land in (see the module docstring)."""
    if not gpus:
        return "CPU_Mapped" if runtime == "llama.cpp" and mmap else "CPU"
    if runtime == "ik_llama.cpp":
        return "CUDA_Host" if (host_overrides or not mmap) else "CPU"
    return "CPU_Mapped" if mmap else "CUDA_Host"


@dataclass(frozen=True)
class Weights:
    """Every loaded tensor's buffer, and the bytes per buffer."""

    tensor_buffer: dict[str, str]
    buffers: dict[str, int]
    skipped: tuple[str, ...]


def place_weights(
    profile: Profile,
    runtime: Runtime,
    layer_device: Mapping[int, str],
    expert_device: Mapping[int, str],
    host: str,
    output_device: str | None,
) -> Weights:
    """Assign each loaded tensor to a buffer.

    ``layer_device``: layer -> device for its non-expert tensors (layers absent
    stay on the host, as with a partial ``-ngl``).  ``expert_device``: expert
    layer -> device for its routed experts; absent expert layers go to
    ``host``.  ``output_device``: where output/norm tensors go (None: host).
    """
    slots, skipped = _slots(profile, runtime)
    tensor_buffer: dict[str, str] = {}
    buffers: dict[str, int] = {}
    for name, nbytes, expert, layer in slots:
        if expert is not None:
            buf = expert_device.get(expert, host)
        elif layer is not None:
            buf = layer_device.get(layer, host)
        elif name == "token_embd.weight":
            buf = host
        else:
            buf = output_device or host
        tensor_buffer[name] = buf
        buffers[buf] = buffers.get(buf, 0) + nbytes
    return Weights(tensor_buffer, dict(sorted(buffers.items())), skipped)


@functools.lru_cache(maxsize=64)
def _slots(
    profile: Profile, runtime: Runtime
) -> tuple[tuple[tuple[str, int, int | None, int | None], ...], tuple[str, ...]]:
    """Loaded tensors as (name, bytes, expert layer, layer), and the skipped names.

    ``place_weights`` runs once per candidate layout while the solver fills
    GPUs; classifying each tensor by regex there dominated solve time.
    """
    keep = loaded(profile, runtime)
    kept = {t.name for t in keep}
    skipped = tuple(t.name for t in profile.tensors() if t.name not in kept)
    return tuple((t.name, t.nbytes, expert_layer(t.name), t.layer) for t in keep), skipped


def ik_computed_wkv_b(profile: Profile, mla: int | None) -> dict[int, int]:
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
    tensors = loaded(profile, "ik_llama.cpp")
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
