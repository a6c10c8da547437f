"""Mainline llama.cpp's compute buffers, derived from how it builds and allocates the graph.

``llama_context::sched_reserve`` builds the worst-case prompt graph (ubatch
tokens, one output per token: ``n_outputs = min(ubatch, n_outputs_max)``)
and ``ggml_backend_sched`` splits it by backend: graph inputs (tokens,
positions, the KQ mask, the embeddings inputs) live on the CPU backend,
each layer's ops run where its weights are, and every tensor a split reads
from another backend is copied into that split's backend ("split inputs",
allocated at the split's start).  ``ggml-alloc`` then lays out one buffer
per backend (``ggml_dyn_tallocr``: best fit among the free blocks below the
top, else the top grows); its high-water mark is what the log prints, so
a tensor freed below a larger one leaves a hole that counts.  The terms
below, per buffer:

* **inputs** - on the CPU: the KQ mask (``n_kv x ubatch``, f16 with flash
  attention, f32 without; ``n_kv`` is the cells per stream; a second one
  for sliding-window layers), the embeddings inputs and the two
  ``get_rows`` results (4 x n_embd x ubatch x 4 B), and the index inputs
  (:func:`small_inputs`: tokens, the mixed batch's tokens and slots,
  positions, KV write indices, output ids).  On the device holding layer 0:
  copies of the three embeddings tensors (``inp_mixed_embd``, its token
  rows, ``embd``), the mask and the indices; on each later device: the
  residual stream (n_embd x ubatch x 4 B), the mask and the indices.  The
  mask copy stays alive for the whole split, so the memory freed by the
  embeddings copies below it is a hole the larger tensors do not fit into;
  they are counted as held.
* **pipeline copies** - with more than one device, every layer on a
  device, ``-sm layer`` and no tensor overrides (``-ot``, ``--cpu-moe``),
  llama.cpp enables pipeline parallelism: ``n_copies = 4``
  (GGML_SCHED_MAX_COPIES), and every graph input and every split input is
  allocated 4 times and never freed (ggml_backend_sched_split_graph).
* **held streams** - n_embd x ubatch f32 tensors alive below a layer's own
  tensors (:func:`_held`): its residual and its normed input, and on layer
  0's device the mixed batch's ``ggml_dup`` of ``inp_mixed_embd``, which is
  never freed; without pipeline copies the freed input copies make room
  for some of them.
* **working set** - the largest set of a layer's own intermediates alive at
  once: Q/K/V (attention; MLA stacks its query tensors, :func:`_mla_absorbed`;
  without flash attention the f32 ``KQ`` matrix, n_kv x ubatch x n_head,
  joins them), gate + up + swiglu (dense FFN), or the router's logits and
  the routed experts' activations (:func:`_routed`: gate, up, swiglu, the
  down projection's n_expert_used x n_embd output) or the shared expert's.
  The output device holds the logits (n_vocab x ubatch x 4 B) beside the
  final norm.
* **expert splits** - experts on another backend than their layer (host
  or another device) make per-layer splits: that backend receives the
  normed input and the router's choice and computes the experts; the down
  projection's output comes back as a copy, and the ops after it run on
  the layer's device (or, after a device's last layer, the next one's).

CPU-backed rpc servers (the oracle) and CUDA differ in one known way: a
CUDA backend offloads host-weight matrix multiplications of >= 32 tokens
to the first CUDA device (``op_offload``, ``ggml_backend_cuda_device_offload_op``),
so with experts on the host that device's compute buffer also receives
host expert weights as split inputs, one tensor per split
(``ggml_backend_sched_split_graph`` starts a new split at every node whose
weight lives elsewhere, "so that the memory of the previously offloaded
weights can be reused"), and runs the experts' matmuls, whose activations
then sit there instead of on the host.  The plan keeps room for the two
largest tensors of a host expert layer (:func:`_staged`): a freed copy's
hole takes the next tensor only if it fits, and on an H100 Qwen3-235B with
``--n-cpu-moe 2`` at ``-ub 4096`` the buffer grew by 1.33 times its largest
expert tensor (tests/oracle/gpu).  CUDA's flash attention and cuBLAS temporaries come from
its own pool, outside this buffer (the per-GPU overhead covers them).

The widths are what llama.cpp 11434's allocator holds at its high-water
mark (built with GGML_ALLOCATOR_DEBUG, which lists the live tensors at each
new maximum), checked against ``llama-fit-params --fit-print`` over an rpc
device (it reserves the graph CUDA reserves, without op offload; on one
device it printed every size the H100 logged) for production shapes and
variants (heads, ranks, vocabularies, ubatch, context, slots, KV types,
flash attention on and off, CPU only), against the CPU oracle's runs
(tests/test_oracle.py) and against a real H100's logs (tests/oracle/gpu,
tests/test_compute_gpu.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from layoutgen.core.kvcache import KVSettings, cells
from layoutgen.models.profile import HParams
from layoutgen.models.tensors import Tensor

#: llama.cpp enables op offload for batches of at least this many tokens (ggml-cuda)
OFFLOAD_MIN_BATCH = 32
F32 = 4
#: ggml-alloc rounds every tensor up to the buffer's alignment (32-128 B; CUDA 128);
#: a few dozen tensors stack at a high-water mark, so this much slack per buffer
ALIGN_SLACK = 32 * 256
#: positions per token: 1, or GGML_MROPE_SECTIONS (4) for M-RoPE models
#: (``llama_hparams::n_pos_per_embd``); the profile does not say which, so 4
POS_PER_TOKEN = 4


@dataclass(frozen=True)
class Graph:
    """What the estimate needs about one service's graph and its placement."""

    hparams: HParams
    kv: KVSettings
    devices: tuple[str, ...]  # device buffers, in llama.cpp's order
    layers: Mapping[int, str]  # layer -> device buffer
    experts: Mapping[int, str]  # expert layer -> device buffer; absent: on the host
    expert_layer_bytes: Mapping[int, int]  # routed expert weights per expert layer
    #: each expert layer's routed-expert tensors' bytes, largest first
    expert_tensor_bytes: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    cuda: frozenset[str] = frozenset()
    #: MLA: per-head width of the query projection, qk_nope + rope (llama.cpp's
    #: ``n_embd_head_k_mla``; :func:`mla_q_head` reads it from the profile); 0 when
    #: unknown, then bounded from the KV LoRA rank (:func:`_mla`)
    mla_q_head: int = 0
    #: the model computes logits (False: an encoder such as BERT pools embeddings)
    lm_head: bool = True

    @property
    def logits_width(self) -> int:
        """Columns of the logits: the vocabulary, or none without a language-model head."""
        return (self.hparams.vocab or 0) if self.lm_head else 0

    @property
    def overrides(self) -> bool:
        """Whether any expert layer sits elsewhere than its layer (rendered as -ot/--cpu-moe)."""
        return any(self.experts.get(il) != self.layers.get(il) for il in self.expert_layer_bytes)

    @property
    def copies(self) -> int:
        """n_copies of the scheduler: 4 with pipeline parallelism, else 1."""
        copies = self.kv.rt.sched_copies
        # llama_context: pipeline parallelism needs every layer and the output offloaded
        partial = len(self.layers) < self.hparams.n_layer
        return copies if len(self.devices) > 1 and not self.overrides and not partial else 1


def mla_q_head(hp: HParams, tensors: Iterable[Tensor]) -> int:
    """An MLA model's qk_nope + rope, for :attr:`Graph.mla_q_head`: the query
    projection's output width (``attn_q_b``, or ``attn_q`` without a query LoRA) is
    n_head x n_embd_head_k_mla (src/models/deepseek2.cpp:107-109); 0 if not MLA."""
    n_head = _at(hp, hp.n_head, 0)
    if not (hp.kv_lora_rank and n_head):
        return 0
    for t in tensors:
        if t.name.endswith((".attn_q_b.weight", ".attn_q.weight")) and len(t.shape) > 1:
            return t.shape[1] // n_head
    return 0


def _at(hp: HParams, value: int | tuple[int, ...] | None, il: int) -> int:
    if isinstance(value, tuple):
        return value[il] if il < len(value) else 0
    return value or 0


def _swa(hp: HParams) -> bool:
    return bool(hp.swa_layers and hp.sliding_window)


def _mla(hp: HParams, kv: KVSettings) -> bool:
    """MLA attention: llama.cpp runs it only on GGUFs converted for it (split
    ``attn_k_b``/``attn_v_b``, :attr:`KVSettings.mla_split`); an older conversion
    (``attn_kv_b``) runs as ordinary attention over decompressed K and V."""
    return bool(hp.kv_lora_rank) and kv.mla_split


def mask_bytes(g: Graph, *, input_: bool = False) -> int:
    """The KQ mask: n_kv (cells per stream) x ubatch, f16 under flash attention;
    models with sliding-window layers have a second one over the window's cells.
    ``input_``: the graph input in host memory beside GPUs, which builds before 9415
    made f32 and cast to f16 on the GPU (b5192-b5274 logs: CUDA_Host = the f32 mask
    and one embeddings row block)."""
    f16 = g.kv.flash_attn and not (input_ and not g.kv.rt.follows("f16-mask-input"))
    per_cell = g.kv.ubatch * (2 if f16 else F32)
    n = cells(g.hparams, g.kv, swa=False)
    if _swa(g.hparams):
        n += cells(g.hparams, g.kv, swa=True)
    return n * per_cell


def _v_widths(hp: HParams) -> tuple[int, int]:
    """n_embd_v_gqa_max of the full-attention layers' cache and of the sliding-window
    layers' one (llama_kv_cache_iswa keeps two): the widest n_head_kv x V head."""
    e = hp.n_embd or 0
    swa = set(hp.swa_layers or ()) if _swa(hp) else set()
    full = ring = 0
    for il in range(hp.n_layer):
        n_head = _at(hp, hp.n_head, il)
        n_kv = _at(hp, hp.n_head_kv, il) or n_head
        dv = hp.value_length or (e // n_head if n_head else 0)
        if il in swa:
            ring = max(ring, n_kv * (hp.value_length_swa or dv))
        else:
            full = max(full, n_kv * dv)
    return full, ring


def small_inputs(g: Graph, *, host: bool) -> int:
    """The index inputs of one ubatch (src/llama-graph.cpp build_inp_embd, build_inp_pos,
    build_inp_out_ids; src/llama-kv-cache.cpp build_input_k_idxs/v_idxs).

    Per token: ``inp_mixed_slots`` (i64), positions (i32 x n_pos_per_embd), the KV
    cache's write indices ``k_idxs`` (i64) and ``v_idxs`` (i64; without flash
    attention the V cache is transposed and ``v_idxs`` holds one index per V
    element, n_embd_v_gqa_max of them; MLA has no V cache), ``out_ids`` (i32);
    sliding-window models a second pair of indices.  The CPU also holds
    ``inp_tokens`` and ``inp_mixed_tokens`` (i32 each), read by the embeddings'
    get_rows there.
    """
    hp, ub = g.hparams, g.kv.ubatch
    caches = _v_widths(hp) if _swa(hp) else _v_widths(hp)[:1]
    kv_idxs = 0
    for width in caches:
        v_idxs = 0 if _mla(hp, g.kv) else 8 * (1 if g.kv.flash_attn else max(1, width))
        kv_idxs += 8 + v_idxs
    per_token = 8 + 4 * POS_PER_TOKEN + kv_idxs + 4 + (8 if host else 0)
    return ub * per_token


def rotation_bytes(g: Graph) -> int:
    """Hadamard rotations of a quantized KV cache, inputs of every attention layer
    (src/llama-kv-cache.cpp:321-351, build_input_k_rot/v_rot :1467-1489): a quantized
    K cache gets an f32 n_rot_k x n_rot_k matrix (n_rot_k: the largest power of two
    >= 64 dividing the K head, bounded here by the head), a quantized V cache a
    64 x 64 one; not per token."""
    hp = g.hparams
    out = 0
    if _quantized(g.kv.cache_type_k):
        n_head = _at(hp, hp.n_head, 0)
        dk = hp.key_length or ((hp.n_embd or 0) // n_head if n_head else 0)
        dk = max(dk, hp.key_length_swa or 0)
        if dk % 64 == 0:
            out += dk * dk * F32
    if _quantized(g.kv.cache_type_v) and not _mla(hp, g.kv):
        dv = hp.value_length or hp.key_length or 0
        if dv % 64 == 0 or not dv:
            out += 64 * 64 * F32
    return out * (2 if _swa(hp) else 1)  # llama_kv_cache_iswa: two caches, two sets


def _quantized(cache_type: str) -> bool:
    return cache_type.lower() not in ("f32", "f16", "bf16")


def _moe(hp: HParams) -> bool:
    return bool(hp.n_expert and hp.n_expert_used and hp.expert_ff)


def _mla_absorbed(g: Graph, il: int) -> int:
    """MLA with the absorption optimisation (src/models/deepseek2.cpp:497-593), per token.

    The query is built as ``q = wq_b x q_a`` (n_head x (qk_nope + rope), :508),
    ``q_nope_absorbed = wk_b x q_nope`` (n_head x kv_lora_rank, :561),
    ``q_pe = rope(q)`` (n_head x rope, :552) and ``Qcur = concat(absorbed, q_pe)``
    (n_head x (kv_lora_rank + rope), :570), in that order; ``q`` is freed once
    ``q_pe`` is written, and the hole it leaves is too small for ``Qcur`` (qk_nope
    < kv_lora_rank), so the top of the buffer holds all four at once, above the
    query LoRA output ``q_a`` (q_lora_rank; freed after ``q``, but allocated
    first).  Seen in llama.cpp's allocator (GGML_ALLOCATOR_DEBUG) at DeepSeek-V3's
    widths: node_2 (:func:`_held`), q-0 (freed), q_nope_absorbed-0, q_pe-0, Qcur-0
    at the high-water mark.
    """
    hp = g.hparams
    n_head = _at(hp, hp.n_head, il)
    kv_lora, rope = hp.kv_lora_rank or 0, hp.rope_dim or 0
    # qk_nope is 128 (DeepSeek V2/V3, Kimi K2) or 192 (GLM-4.7-Flash) where
    # kv_lora_rank is 512: unknown, take half the rank (over, never under, for those)
    q_head = g.mla_q_head or (kv_lora // 2 + rope)
    return (hp.q_lora_rank or 0) + n_head * (q_head + kv_lora + rope + kv_lora + rope)


def _attention(g: Graph, il: int) -> int:
    """Width (floats per token) of the attention's own tensors, beside the held
    residual streams (:func:`_held`)."""
    hp = g.hparams
    e = hp.n_embd or 0
    n_head = _at(hp, hp.n_head, il)
    n_kv = _at(hp, hp.n_head_kv, il) or n_head
    if _mla(hp, g.kv):
        width = _mla_absorbed(g, il)
        q = 0
    else:
        dk = hp.key_length or (e // n_head if n_head else 0)
        dv = hp.value_length or dk
        q = n_head * dk
        width = q + n_kv * (dk + dv)
    if not g.kv.flash_attn:
        # kq = mul_mat(k, q): n_kv x ubatch x n_head f32, softmax in place
        # (src/llama-graph.cpp:2763); it is written while the query (and, with a
        # Q norm, the query before its norm, freed below it) is still alive
        kq = n_head * cells(hp, g.kv, swa=False)
        width = max(width, 2 * q) + kq
        if _mla(hp, g.kv):
            # seen at DeepSeek-V3's widths with 32 heads: on layer 1 the previous
            # layer's residual and a normed input sit below Qcur, not in holes
            width += 2 * e
    return width


def _flat(g: Graph) -> int:
    """Terms that do not grow with the ubatch: MLA without flash attention transposes
    the cached latent of every stream (``ggml_cont(ggml_transpose(v))``,
    src/llama-graph.cpp:2803): n_kv x n_stream x kv_lora_rank, of the cache's type."""
    hp, kv = g.hparams, g.kv
    if _mla(hp, g.kv) and not kv.flash_attn:
        streams = 1 if kv.kv_unified else max(1, kv.parallel)
        size = 4 if kv.cache_type_k.lower() == "f32" else 2
        return cells(hp, kv, swa=False) * streams * (hp.kv_lora_rank or 0) * size
    return 0


def _routed(hp: HParams, *, swiglu_fits: bool) -> int:
    """Width of the routed experts' activations for one token (build_moe_ffn,
    src/llama-graph.cpp:2044-2400): gate and up (n_expert_used x expert_ff each),
    then their swiglu (:2297, not in place: above them, unless ``swiglu_fits`` in
    memory freed below); then the down projection's output, n_expert_used x n_embd
    (:2355; weighted in place, :2372): into the memory gate and up leave when it
    fits there, else above the three, where the sum over the chosen experts
    (n_embd, :2397) follows it.  Seen in llama.cpp's allocator: DeepSeek-V3's
    widths at 32 heads and a small vocabulary peak at gate, up, swiglu, down and
    the sum; a Mixtral shape at gate, up and swiglu."""
    used, ff, e = hp.n_expert_used or 0, hp.expert_ff or 0, hp.n_embd or 0
    gate_up = (2 if swiglu_fits else 3) * used * ff
    if used * e <= 2 * used * ff:
        return gate_up
    return 3 * used * ff + used * e + e


def _ffn(g: Graph, il: int, *, experts_here: bool) -> int:
    """Width of the FFN's own tensors on the layer's device, beside the held residual
    streams (:func:`_held`).

    Dense: gate and up, then their swiglu (not in place, src/llama-graph.cpp:1902),
    above them unless it fits below (:func:`_swiglu_fits`; both seen in llama.cpp's
    allocator at the oracle's widths).  MoE: the router's
    logits and the routed experts' (:func:`_routed`) or the shared expert's
    activations; with the routed experts on another backend, their down
    projection's output comes back as a copy (n_expert_used x n_embd, the
    weighting and the sum over the experts running here) instead.
    """
    hp = g.hparams
    e = hp.n_embd or 0
    dense = il < (hp.leading_dense or 0) or not _moe(hp)
    if dense:
        n_ff = _at(hp, hp.n_ff, il)
        return (2 if _swiglu_fits(g, n_ff) else 3) * n_ff
    shared = 2 * (hp.expert_shared_ff or hp.expert_ff or 0) * (hp.n_expert_shared or 0)
    if experts_here:
        used_ff = (hp.n_expert_used or 0) * (hp.expert_ff or 0)
        routed = _routed(hp, swiglu_fits=_swiglu_fits(g, used_ff))
    else:
        routed = (hp.n_expert_used or 0) * e + e
    return (hp.n_expert or 0) + max(routed, shared)


def _swiglu_fits(g: Graph, width: int) -> bool:
    """Whether a swiglu of ``width`` fits where the normed input and the freed input
    copy below it were (2 x n_embd), which pipeline copies pin."""
    return g.copies == 1 and width <= 2 * (g.hparams.n_embd or 0)


def _remote_experts(hp: HParams) -> int:
    """Width on a backend that only computes a layer's routed experts: the copies of
    the normed input and of the router's choice and weights (n_expert_used each,
    the choice a view of the n_expert argsort), and the experts' activations."""
    e = hp.n_embd or 0
    return e + (hp.n_expert or 0) + (hp.n_expert_used or 0) + _routed(hp, swiglu_fits=False)


def _held(g: Graph, *, first: bool, freed: int = 0, fragmented: bool = False) -> int:
    """Residual streams (multiples of n_embd per token) held below a layer's working
    set.  Every layer keeps its residual and its normed input alive; the device of
    layer 0 also keeps the mixed batch's ``ggml_dup`` of ``inp_mixed_embd``, which
    is never freed (its ``set_rows`` view has no consumer, src/llama-graph.cpp:2488;
    ``node_2`` in the allocator's trace).

    What is freed below the working set can take residual and norm back: on layer
    0's device without pipeline copies, two of its three embeddings copies (exact
    on the H100 for all three shapes); on a later device, ``freed`` n_embd-wide
    copies (the down projection's output of the previous device's last layer,
    :func:`device`), not its own residual copy, whose hole the router's small
    tensors split.  With pipeline copies (inputs that are also outputs, never
    freed) nothing below is free, and the previous layer's freed tensors leave
    one more n_embd-wide hole; so do a later device's own routed experts when
    their down projection stacks (``fragmented``, :func:`_routed`).  Seen in
    llama.cpp's allocator at the oracle's and other small widths."""
    if first:
        return 1 + (3 if g.copies > 1 else 0)
    held = 2 - min(2, freed) + freed
    return held + (1 if g.copies > 1 or fragmented else 0)


def _down_stacks(hp: HParams) -> bool:
    """Whether the routed experts' down projection outgrows gate and up (:func:`_routed`)."""
    used, ff, e = hp.n_expert_used or 0, hp.expert_ff or 0, hp.n_embd or 0
    return _moe(hp) and used * e > 2 * used * ff


def device(g: Graph, buf: str, output: bool) -> int:
    """One device's compute buffer."""
    hp, ub = g.hparams, g.kv.ubatch
    e = hp.n_embd or 0
    mine = sorted(il for il, d in g.layers.items() if d == buf)
    inputs = 0
    width = 0
    flat = 0
    held = 0
    logits = 0  # the logits beside the final norm (in place of the last residual)
    if mine:
        first = 0 in mine  # layer 0 here: the embeddings come in (a partial -ngl: the CPU)
        inputs = (
            (3 if first else 1) * e * ub * F32
            + mask_bytes(g)
            + small_inputs(g, host=False)
            + rotation_bytes(g)
        )
        before = min(mine) - 1
        boundary = 0
        if not first and g.experts.get(before, buf) != g.layers.get(before, buf):
            # the layer before ours computed its experts elsewhere: the ops after its
            # experts (weighting, sum, residual add) have no weights and run here,
            # so their input, the down projection's output, is copied in too, at the
            # start of that split (below our layers' tensors, freed by the time
            # they run: held again by :func:`_held`'s count)
            boundary = hp.n_expert_used or 0
        flat = _flat(g)
        own_experts = any(g.experts.get(il) == buf for il in mine if il in g.expert_layer_bytes)
        fragmented = own_experts and _down_stacks(hp)
        held = _held(g, first=first, freed=boundary, fragmented=fragmented)
        for il in mine:
            here = il not in g.expert_layer_bytes or g.experts.get(il) == buf
            width = max(width, _attention(g, il), _ffn(g, il, experts_here=here))
        if output:
            logits = e + g.logits_width + held * e
        width += held * e
    elif output:
        width = 2 * e + g.logits_width
    hosted = [il for il in g.expert_layer_bytes if g.experts.get(il) == buf != g.layers.get(il)]
    if hosted:
        width = max(width, _remote_experts(hp))
        inputs += small_inputs(g, host=False)
    below = g.copies * inputs + flat + ALIGN_SLACK
    staged = staged_here(g, buf)
    layers = below + width * ub * F32 + staged
    if not logits:
        return layers
    # What the logits, which come last, sit on.  A later device without pipeline copies
    # has freed its inputs (the copied residual, the mask) once its last layer read them,
    # and holds nothing of layer 0's device: the logits stand alone beside the final norm
    # (Qwen3-235B on 2x3090 at b5269 and b5271: the output GPU logged 304.75 MiB, logits
    # + n_embd).  Elsewhere the inputs and held residuals stay below them.
    if 0 not in mine and g.copies == 1 and not staged:
        out = ALIGN_SLACK + (e + g.logits_width) * ub * F32
    else:
        out = below + logits * ub * F32
    # Logits no larger than the staged expert tensor fit the hole it left (ggml-alloc
    # takes the best-fitting free block): the two never stack.  Qwen3-235B with host
    # experts at -ub 512 on b5192-b5274 logged 1,024 and 774 MiB, one staged tensor and
    # the layers' working set; its 297 MiB logits do not add.  Larger logits go above
    # (an H100 at -ub 4096: 3,334 MiB, logits and staged tensor both)
    if staged < logits * ub * F32:
        out += staged
    return max(layers, out)


def runs_here(g: Graph, buf: str, *, output: bool) -> bool:
    """Whether the graph puts any node on ``buf``: a layer, the output, or routed
    experts of another device's layer."""
    return (
        output
        or any(d == buf for d in g.layers.values())
        or any(g.experts.get(il) == buf for il in g.expert_layer_bytes)
    )


def partial_slack(g: Graph) -> int:
    """What a GPU may hold beyond :func:`device` beside layers on the CPU (a partial
    -ngl): the CPU's residual stream and normed input copied in, and a second copy of
    the mask (the first offloaded device of the CPU oracle's runs logged a mask more
    than its layers need).  An upper bound from those runs, not a derivation."""
    return mask_bytes(g) + 2 * (g.hparams.n_embd or 0) * g.kv.ubatch * F32


def offloads_to(g: Graph, buf: str) -> bool:
    """Whether big-batch matmuls of host weights run on ``buf`` (the first CUDA
    device, from OFFLOAD_MIN_BATCH tokens: ggml_backend_cuda_device_offload_op)."""
    return buf in g.cuda and buf == _offload_device(g) and g.kv.ubatch >= OFFLOAD_MIN_BATCH


def staged_here(g: Graph, buf: str) -> int:
    """Host expert weights staged through ``buf`` (the offload device), else 0."""
    if buf in g.cuda and buf == _offload_device(g) and g.kv.ubatch >= OFFLOAD_MIN_BATCH:
        return _staged(g)
    return 0


def _staged(g: Graph) -> int:
    """Host expert weights staged through the offload device's compute buffer.

    One tensor per split, freed when its matmul is done; the next tensor takes
    the hole if it fits.  When a layer's expert tensors are all one size each
    takes the previous one's hole, less what the matmul's output (one slab of
    the experts' activations) took of it: one tensor and one slab (an H100
    logged 80 MiB above one tensor for Qwen3-235B ``--n-cpu-moe 2`` at
    ``-ub 4096``, its slab 192 MiB; Qwen3-235B Q8_0 on b5192-b5274 logged
    1,024 MiB, one 816 MiB tensor and the activations, in tests/truth).  A
    larger down projection does not fit the hole of up or gate and stacks
    above: the two largest tensors of a host layer bound it.  Without
    per-tensor sizes: the whole layer.
    """
    hp = g.hparams
    slab = (hp.expert_ff or 0) * (hp.n_expert_used or 0) * g.kv.ubatch * F32
    out = 0
    for il, nbytes in g.expert_layer_bytes.items():
        if il in g.experts:
            continue
        sizes = g.expert_tensor_bytes.get(il)
        if not sizes:
            out = max(out, nbytes)
        elif len(set(sizes)) == 1:
            out = max(out, sizes[0] + slab)
        else:
            out = max(out, sum(sizes[:2]))
    return out


def _offload_device(g: Graph) -> str | None:
    return next((d for d in g.devices if d in g.cuda), None)


def host(g: Graph) -> int:
    """The CPU backend's compute buffer (CPU, or CUDA_Host beside local GPUs)."""
    hp, ub = g.hparams, g.kv.ubatch
    e = hp.n_embd or 0
    embd = e * ub * F32
    small = small_inputs(g, host=True) + rotation_bytes(g)
    if not g.devices:
        # CPU only: everything runs here, nothing is copied.  The four embeddings
        # tensors (inp_embd, never read, and inp_mixed_embd; the two get_rows
        # results, freed into holes residual and norm reuse) are allocated first,
        # then layer 0's device's held ``ggml_dup`` (:func:`_held`)
        layers = max(
            max((_attention(g, il) for il in range(hp.n_layer)), default=0),
            max((_ffn(g, il, experts_here=True) for il in range(hp.n_layer)), default=0),
        )
        logits = e + g.logits_width
        if not g.kv.rt.follows("mixed-batch-embeddings"):
            # one get_rows result, no mixed batch and no held dup of it: by the logits
            # every input is freed, and they stand alone beside the final norm (pythia
            # at b4343: 102.25 MiB at -ub 512 and 25.56 at -ub 128, each logits + n_embd)
            inputs = embd + mask_bytes(g) + small + _flat(g)
            return max(inputs + layers * ub * F32, logits * ub * F32) + ALIGN_SLACK
        width = max(layers, logits)
        width += _held(g, first=True) * e
        return 4 * embd + mask_bytes(g) + small + width * ub * F32 + _flat(g) + ALIGN_SLACK
    # graph inputs (mask, indices, two embeddings inputs), n_copies times, and the two
    # get_rows results; without pipeline copies the embeddings are freed once copied
    # to the first device, and the host experts' tensors reuse that memory
    held = g.copies * (mask_bytes(g, input_=True) + small)
    # before the mixed batch's inputs (build 11401): one get_rows result per copy
    mixed = g.kv.rt.follows("mixed-batch-embeddings")
    work = (g.copies * 2 + 2) * embd if mixed else g.copies * embd
    hosted = any(il not in g.experts for il in g.expert_layer_bytes)
    if hosted and not (g.cuda and ub >= OFFLOAD_MIN_BATCH):
        # the experts' tensors reuse the embeddings' memory when each (n_expert_used
        # x expert_ff) fits an n_embd-wide hole; else they stack above the mask, with
        # inp_embd (never read) and the freed inp_mixed_embd below it
        below = 0 if (hp.n_expert_used or 0) * (hp.expert_ff or 0) <= e else 2 * embd
        work = max(work, below + _remote_experts(hp) * ub * F32)
    cpu_layers = [il for il in range(hp.n_layer) if il not in g.layers]
    if cpu_layers:
        # a partial -ngl: the first layers run here, on the embeddings (not copied
        # away: layer 0 is here), with their residual streams held as on a CPU-only run
        width = max(
            max(_attention(g, il) for il in cpu_layers),
            max(_ffn(g, il, experts_here=il not in g.experts) for il in cpu_layers),
        )
        # layer 0's held dup, and the residual and normed input every layer keeps
        work = max(work, 4 * embd + (width + (_held(g, first=True) + 2) * e) * ub * F32)
    return held + work + ALIGN_SLACK
