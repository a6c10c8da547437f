"""Small but architecturally real GGUF models that llama.cpp loads and runs.

Each builder writes a complete file with ``gguf.GGUFWriter``: hyperparameters
under the keys llama.cpp reads for the architecture, a byte-fallback SPM
vocabulary, and every tensor llama.cpp's loader asks for, with the shapes
it checks (from ``src/models/<arch>.cpp`` of the llama.cpp the tests build).
Weights are small random numbers (f32 norms, f16 attention, q8_0 experts),
so the model computes finite logits; what matters to the oracle is that the
runtime loads, places and allocates it as it would a real model.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import ExpertGatingFuncType, GGMLQuantizationType, GGUFWriter
from gguf.quants import quantize

F32 = GGMLQuantizationType.F32
F16 = GGMLQuantizationType.F16
Q8_0 = GGMLQuantizationType.Q8_0


@dataclass(frozen=True)
class Dims:
    n_layer: int = 8
    n_embd: int = 512
    n_head: int = 8
    n_head_kv: int = 2
    head_dim: int = 64
    n_ff: int = 1024
    n_expert: int = 16
    n_expert_used: int = 2
    expert_ff: int = 256
    ctx_train: int = 4096


def _vocab(writer: GGUFWriter) -> int:
    """A byte-fallback SPM vocabulary: <unk> <s> </s>, 256 byte tokens, a few pieces."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    pieces = ["\u2581", "\u2581a", "\u2581the", "e", "t", "a", "o", "n", "i", "s"]
    tokens += pieces
    tokens += [f"\u2581w{i}" for i in range(512 - len(tokens))]  # pad to a round 512
    scores = [0.0] * 3 + [0.0] * 256 + [-float(i) for i in range(len(tokens) - 259)]
    types = [2, 3, 3] + [6] * 256 + [1] * (len(tokens) - 259)
    writer.add_tokenizer_model("llama")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_add_bos_token(True)
    return len(tokens)


class _Tensors:
    """Adds tensors in ggml shape order (ne0 first), with deterministic values."""

    def __init__(
        self, writer: GGUFWriter, seed: int, matrices: GGMLQuantizationType | None = None
    ) -> None:
        self.writer = writer
        self.rng = np.random.default_rng(seed)
        #: one type for every matrix (norms stay f32), e.g. q4_0 to see CPU_REPACK
        self.matrices = matrices

    def add(self, name: str, shape: tuple[int, ...], qtype: GGMLQuantizationType) -> None:
        if self.matrices is not None and len(shape) > 1:
            qtype = self.matrices
        numpy_shape = tuple(reversed(shape))
        if name.endswith("norm.weight"):
            data = np.ones(numpy_shape, dtype=np.float32)
        else:
            data = (self.rng.standard_normal(numpy_shape) * 0.02).astype(np.float32)
        if qtype == F32:
            self.writer.add_tensor(name, data)
        elif qtype == F16:
            self.writer.add_tensor(name, data.astype(np.float16))
        else:
            self.writer.add_tensor(name, quantize(data, qtype), raw_dtype=qtype)


def _common(writer: GGUFWriter, arch: str, d: Dims) -> None:
    writer.add_context_length(d.ctx_train)
    writer.add_embedding_length(d.n_embd)
    writer.add_block_count(d.n_layer)
    writer.add_feed_forward_length(d.n_ff)
    writer.add_head_count(d.n_head)
    writer.add_head_count_kv(d.n_head_kv)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_rope_freq_base(10000.0)
    writer.add_file_type(1)


def _finish(writer: GGUFWriter) -> None:
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _embeddings(t: _Tensors, d: Dims, vocab: int) -> None:
    t.add("token_embd.weight", (d.n_embd, vocab), F16)
    t.add("output_norm.weight", (d.n_embd,), F32)
    t.add("output.weight", (d.n_embd, vocab), Q8_0)


def _gqa_attention(t: _Tensors, d: Dims, i: int, *, qk_norm: bool) -> None:
    t.add(f"blk.{i}.attn_norm.weight", (d.n_embd,), F32)
    t.add(f"blk.{i}.attn_q.weight", (d.n_embd, d.n_head * d.head_dim), F16)
    t.add(f"blk.{i}.attn_k.weight", (d.n_embd, d.n_head_kv * d.head_dim), F16)
    t.add(f"blk.{i}.attn_v.weight", (d.n_embd, d.n_head_kv * d.head_dim), F16)
    t.add(f"blk.{i}.attn_output.weight", (d.n_head * d.head_dim, d.n_embd), F16)
    if qk_norm:
        t.add(f"blk.{i}.attn_q_norm.weight", (d.head_dim,), F32)
        t.add(f"blk.{i}.attn_k_norm.weight", (d.head_dim,), F32)


def _dense_ffn(t: _Tensors, d: Dims, i: int) -> None:
    t.add(f"blk.{i}.ffn_norm.weight", (d.n_embd,), F32)
    t.add(f"blk.{i}.ffn_gate.weight", (d.n_embd, d.n_ff), Q8_0)
    t.add(f"blk.{i}.ffn_up.weight", (d.n_embd, d.n_ff), Q8_0)
    t.add(f"blk.{i}.ffn_down.weight", (d.n_ff, d.n_embd), Q8_0)


def _experts(t: _Tensors, d: Dims, i: int) -> None:
    t.add(f"blk.{i}.ffn_norm.weight", (d.n_embd,), F32)
    t.add(f"blk.{i}.ffn_gate_inp.weight", (d.n_embd, d.n_expert), F32)
    t.add(f"blk.{i}.ffn_gate_exps.weight", (d.n_embd, d.expert_ff, d.n_expert), Q8_0)
    t.add(f"blk.{i}.ffn_up_exps.weight", (d.n_embd, d.expert_ff, d.n_expert), Q8_0)
    t.add(f"blk.{i}.ffn_down_exps.weight", (d.expert_ff, d.n_embd, d.n_expert), Q8_0)


def llama(
    path: Path, d: Dims = Dims(n_layer=6), matrices: GGMLQuantizationType | None = None
) -> Path:
    """A dense llama: GQA attention and a gated FFN in every layer (``matrices``: one
    type for every matrix instead of the default f16/q8_0 mix)."""
    writer = GGUFWriter(path, "llama")
    writer.add_name("oracle-llama")
    _common(writer, "llama", d)
    writer.add_rope_dimension_count(d.head_dim)
    vocab = _vocab(writer)
    t = _Tensors(writer, seed=1, matrices=matrices)
    _embeddings(t, d, vocab)
    for i in range(d.n_layer):
        _gqa_attention(t, d, i, qk_norm=False)
        _dense_ffn(t, d, i)
    _finish(writer)
    return path


def qwen3moe(path: Path, d: Dims = Dims()) -> Path:
    """A qwen3moe: GQA attention with q/k norms, 16 routed experts in every layer."""
    writer = GGUFWriter(path, "qwen3moe")
    writer.add_name("oracle-qwen3moe")
    _common(writer, "qwen3moe", d)
    writer.add_key_length(d.head_dim)
    writer.add_value_length(d.head_dim)
    writer.add_expert_count(d.n_expert)
    writer.add_expert_used_count(d.n_expert_used)
    writer.add_expert_feed_forward_length(d.expert_ff)
    vocab = _vocab(writer)
    t = _Tensors(writer, seed=2)
    _embeddings(t, d, vocab)
    for i in range(d.n_layer):
        _gqa_attention(t, d, i, qk_norm=True)
        _experts(t, d, i)
    _finish(writer)
    return path


@dataclass(frozen=True)
class Mla:
    q_lora_rank: int = 128
    kv_lora_rank: int = 128
    rope_dim: int = 32
    qk_nope: int = 64
    v_head: int = 64
    leading_dense: int = 1
    n_expert_shared: int = 1


def deepseek2(path: Path, d: Dims = Dims(n_head_kv=1), m: Mla = Mla()) -> Path:
    """A deepseek2 with MLA (split k_b/v_b, as recent conversions write it),
    one leading dense layer and a shared expert beside 16 routed ones."""
    writer = GGUFWriter(path, "deepseek2")
    writer.add_name("oracle-deepseek2")
    _common(writer, "deepseek2", d)
    # MLA in the GGUF: one KV "head" of kv_lora_rank + rope; the per-head sizes
    # after decompression go under key_length_mla/value_length_mla.
    writer.add_key_length(m.kv_lora_rank + m.rope_dim)
    writer.add_value_length(m.kv_lora_rank)
    writer.add_key_length_mla(m.qk_nope + m.rope_dim)
    writer.add_value_length_mla(m.v_head)
    writer.add_rope_dimension_count(m.rope_dim)
    writer.add_q_lora_rank(m.q_lora_rank)
    writer.add_kv_lora_rank(m.kv_lora_rank)
    writer.add_leading_dense_block_count(m.leading_dense)
    writer.add_expert_count(d.n_expert)
    writer.add_expert_used_count(d.n_expert_used)
    writer.add_expert_shared_count(m.n_expert_shared)
    writer.add_expert_feed_forward_length(d.expert_ff)
    writer.add_expert_weights_scale(1.0)
    writer.add_expert_weights_norm(True)
    writer.add_expert_gating_func(ExpertGatingFuncType.SIGMOID)
    vocab = _vocab(writer)
    t = _Tensors(writer, seed=3)
    _embeddings(t, d, vocab)
    shexp = d.expert_ff * m.n_expert_shared
    for i in range(d.n_layer):
        t.add(f"blk.{i}.attn_norm.weight", (d.n_embd,), F32)
        t.add(f"blk.{i}.attn_q_a_norm.weight", (m.q_lora_rank,), F32)
        t.add(f"blk.{i}.attn_kv_a_norm.weight", (m.kv_lora_rank,), F32)
        t.add(f"blk.{i}.attn_q_a.weight", (d.n_embd, m.q_lora_rank), F16)
        t.add(f"blk.{i}.attn_q_b.weight", (m.q_lora_rank, d.n_head * (m.qk_nope + m.rope_dim)), F16)
        t.add(f"blk.{i}.attn_kv_a_mqa.weight", (d.n_embd, m.kv_lora_rank + m.rope_dim), F16)
        t.add(f"blk.{i}.attn_k_b.weight", (m.qk_nope, m.kv_lora_rank, d.n_head), F16)
        t.add(f"blk.{i}.attn_v_b.weight", (m.kv_lora_rank, m.v_head, d.n_head), F16)
        t.add(f"blk.{i}.attn_output.weight", (d.n_head * m.v_head, d.n_embd), F16)
        if i < m.leading_dense:
            _dense_ffn(t, d, i)
            continue
        _experts(t, d, i)
        t.add(f"blk.{i}.exp_probs_b.bias", (d.n_expert,), F32)
        t.add(f"blk.{i}.ffn_gate_shexp.weight", (d.n_embd, shexp), Q8_0)
        t.add(f"blk.{i}.ffn_up_shexp.weight", (d.n_embd, shexp), Q8_0)
        t.add(f"blk.{i}.ffn_down_shexp.weight", (shexp, d.n_embd), Q8_0)
    _finish(writer)
    return path


BUILDERS = {"llama": llama, "qwen3moe": qwen3moe, "deepseek2": deepseek2}
