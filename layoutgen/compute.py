"""Mainline llama.cpp's compute buffers, derived from how it builds and allocates the graph.

``llama_context::sched_reserve`` builds the worst-case prompt graph (ubatch
tokens, one output per token: ``n_outputs = min(ubatch, n_outputs_max)``)
and ``ggml_backend_sched`` splits it by backend: graph inputs (tokens,
positions, the KQ mask, the embeddings inputs) live on the CPU backend,
each layer's ops run where its weights are, and every tensor a split reads
from another backend is copied into that split's backend ("split inputs",
allocated at the split's start).  ``ggml-alloc`` then lays out one buffer
per backend; its size is what the log prints.  The terms below, per buffer:

* **inputs** - on the CPU: the KQ mask (``n_kv x ubatch``, f16 with flash
  attention, f32 without; ``n_kv`` is the cells per stream), the
  embeddings inputs and the two ``get_rows`` results (4 x n_embd x ubatch
  x 4 B) and small index tensors.  On the device holding layer 0: copies
  of the three embeddings tensors and the mask; on each later device:
  the residual stream (n_embd x ubatch x 4 B) and the mask.  The mask
  copy stays alive for the whole split, so the memory freed by the
  embeddings copies below it is a hole the larger FFN tensors do not
  fit into; they are counted as held.
* **pipeline copies** - with more than one device, every layer on a
  device, ``-sm layer`` and no tensor overrides (``-ot``, ``--cpu-moe``),
  llama.cpp enables pipeline parallelism: ``n_copies = 4``
  (GGML_SCHED_MAX_COPIES), and every graph input and every split input is
  allocated 4 times and never freed (ggml_backend_sched_split_graph).
* **working set** - the largest set of intermediates alive at once in one
  layer on that backend: residual + normed input + Q/K/V (attention), or
  residual + normed input + gate + up (dense FFN), or the routed experts'
  gate + up for n_expert_used x ubatch rows (MoE, beside the router
  logits and the shared expert); MLA builds the absorbed query per head
  (kv_lora_rank + rope) twice (parts and concatenation).  The output
  device also holds the logits (n_vocab x ubatch x 4 B) beside the final
  norm.
* **expert splits** - experts on another backend than their layer (host
  or another device) make per-layer splits: that backend receives the
  normed input and the router's choice and computes the experts; the
  result comes back as one n_embd x ubatch copy.

CPU-backed rpc servers (the oracle) and CUDA differ in one known way: a
CUDA backend offloads host-weight matrix multiplications of >= 32 tokens
to the first CUDA device (``op_offload``, ``ggml_backend_cuda_device_offload_op``),
so with experts on the host that device's compute buffer also receives one
layer's routed expert weights as split inputs; the CUDA estimate adds the
largest host expert layer (conservative).  CUDA's flash attention and
cuBLAS temporaries come from its own pool, outside this buffer (the
per-GPU overhead covers them).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from layoutgen.kvcache import KVSettings, cells
from layoutgen.profile import HParams

#: GGML_SCHED_MAX_COPIES: input copies per tensor with pipeline parallelism
SCHED_COPIES = 4
#: llama.cpp enables op offload for batches of at least this many tokens (ggml-cuda)
OFFLOAD_MIN_BATCH = 32
F32 = 4


@dataclass(frozen=True)
class Graph:
    """What the estimate needs about one service's graph and its placement."""

    hparams: HParams
    kv: KVSettings
    devices: tuple[str, ...]  # device buffers, in llama.cpp's order
    layers: Mapping[int, str]  # layer -> device buffer
    experts: Mapping[int, str]  # expert layer -> device buffer; absent: on the host
    expert_layer_bytes: Mapping[int, int]  # routed expert weights per expert layer
    cuda: frozenset[str] = frozenset()

    @property
    def overrides(self) -> bool:
        """Whether any expert layer sits elsewhere than its layer (rendered as -ot/--cpu-moe)."""
        return any(self.experts.get(il) != self.layers.get(il) for il in self.expert_layer_bytes)

    @property
    def copies(self) -> int:
        """n_copies of the scheduler: 4 with pipeline parallelism, else 1."""
        return SCHED_COPIES if len(self.devices) > 1 and not self.overrides else 1


def _at(hp: HParams, value: int | tuple[int, ...] | None, il: int) -> int:
    if isinstance(value, tuple):
        return value[il] if il < len(value) else 0
    return value or 0


def mask_bytes(g: Graph) -> int:
    """The KQ mask: n_kv (cells per stream) x ubatch, f16 under flash attention."""
    return cells(g.hparams, g.kv, swa=False) * g.kv.ubatch * (2 if g.kv.flash_attn else F32)


def _small(g: Graph) -> int:
    """Positions (i32), KV write indices (2 x i64) and output ids (i32) per token."""
    return g.kv.ubatch * (4 + 16 + 4)


def _moe(hp: HParams) -> bool:
    return bool(hp.n_expert and hp.n_expert_used and hp.expert_ff)


def _expert_rows(hp: HParams) -> int:
    """Widths of the routed experts' gate+up for one token (n_expert_used x 2 x expert_ff)."""
    return (hp.n_expert_used or 0) * 2 * (hp.expert_ff or 0)


def _attention(hp: HParams, il: int) -> int:
    """Width (floats per token) of the attention working set: residual, norm, Q, K, V."""
    e = hp.n_embd or 0
    n_head = _at(hp, hp.n_head, il)
    n_kv = _at(hp, hp.n_head_kv, il) or n_head
    if hp.kv_lora_rank:  # MLA: absorbed query per head (parts + concat) beside the residual
        return 2 * e + 2 * n_head * (hp.kv_lora_rank + (hp.rope_dim or 0))
    dk = hp.key_length or (e // n_head if n_head else 0)
    dv = hp.value_length or dk
    return 2 * e + n_head * dk + n_kv * (dk + dv)


def _ffn(hp: HParams, il: int, *, experts_here: bool) -> int:
    """Width of the FFN working set on the layer's device."""
    e = hp.n_embd or 0
    dense = il < (hp.leading_dense or 0) or not _moe(hp)
    if dense:
        return 2 * e + 2 * _at(hp, hp.n_ff, il)
    shared = 2 * (hp.expert_shared_ff or hp.expert_ff or 0) * (hp.n_expert_shared or 0)
    routed = _expert_rows(hp) if experts_here else 0
    return 2 * e + (hp.n_expert or 0) + max(routed, shared)


def _remote_experts(hp: HParams) -> int:
    """Width on a backend that only computes a layer's routed experts: the normed input,
    gate and up, and the swiglu result (written before gate and up are freed)."""
    return (hp.n_embd or 0) + _expert_rows(hp) * 3 // 2


def device(g: Graph, buf: str, output: bool) -> int:
    """One device's compute buffer."""
    hp, ub = g.hparams, g.kv.ubatch
    e = hp.n_embd or 0
    mine = sorted(il for il, d in g.layers.items() if d == buf)
    inputs = 0
    width = 0
    if mine:
        first = min(g.layers) in mine
        inputs = (3 if first else 1) * e * ub * F32 + mask_bytes(g) + _small(g)
        for il in mine:
            here = il not in g.expert_layer_bytes or g.experts.get(il) == buf
            width = max(width, _attention(hp, il), _ffn(hp, il, experts_here=here))
            if not here:  # the experts' result comes back as a copy beside the FFN's tensors
                width = max(width, _ffn(hp, il, experts_here=False) + e)
    hosted = [il for il in g.expert_layer_bytes if g.experts.get(il) == buf != g.layers.get(il)]
    if hosted:
        width = max(width, _remote_experts(hp))
        inputs += _small(g)
    if output:
        width = max(width, 2 * e + (hp.vocab or 0))
    total = g.copies * inputs + width * ub * F32
    if buf in g.cuda and buf == _offload_device(g) and ub >= OFFLOAD_MIN_BATCH:
        on_host = [n for il, n in g.expert_layer_bytes.items() if il not in g.experts]
        total += max(on_host, default=0)
    return total


def _offload_device(g: Graph) -> str | None:
    return next((d for d in g.devices if d in g.cuda), None)


def host(g: Graph) -> int:
    """The CPU backend's compute buffer (CPU, or CUDA_Host beside local GPUs)."""
    hp, ub = g.hparams, g.kv.ubatch
    e = hp.n_embd or 0
    embd = e * ub * F32
    if not g.devices:  # CPU only: everything runs here, nothing is copied
        width = max(
            max((_attention(hp, il) for il in range(hp.n_layer)), default=0),
            max((_ffn(hp, il, experts_here=True) for il in range(hp.n_layer)), default=0),
            2 * e + (hp.vocab or 0),
        )
        return 2 * embd + mask_bytes(g) + _small(g) + width * ub * F32
    # graph inputs (mask, indices, two embeddings inputs), n_copies times, and the two
    # get_rows results; without pipeline copies the embeddings are freed once copied
    # to the first device, and the host experts' tensors reuse that memory
    held = g.copies * (mask_bytes(g) + _small(g))
    work = (g.copies * 2 + 2) * embd
    hosted = any(il not in g.experts for il in g.expert_layer_bytes)
    if hosted and not (g.cuda and ub >= OFFLOAD_MIN_BATCH):
        work = max(work, _remote_experts(hp) * ub * F32)
    return held + work
