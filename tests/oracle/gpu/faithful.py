"""Dimension-faithful GGUF models for the GPU oracle (issue 13 item 6).

Real widths, head counts, expert counts and vocabulary sizes of three
production models, with only a few layers:

- ``deepseek-v3``: deepseek2 with MLA (split ``k_b``/``v_b``), 7168 wide, 128
  heads, q/kv LoRA ranks 1536/512, rope 64, 256 routed experts (8 used) of
  2048 plus one shared, a leading dense layer of 18432, vocabulary 129280;
- ``qwen3-235b``: qwen3moe, 4096 wide, 64 query / 4 KV heads of 128, 128
  experts (8 used) of 1536, vocabulary 151936;
- ``llama-70b``: a dense GQA llama (Llama-3.1-70B's shape), 8192 wide, 64
  query / 8 KV heads of 128, FFN 28672, vocabulary 128256.

The tensor names and shapes are those of tests/oracle/models.py (checked on
the CPU oracle against the same llama.cpp), at these widths.  A DeepSeek-V3
MoE layer holds 11.3 G expert weights (6.3 GB at Q4_K), too many to fill with
random numbers in Python, so the files are *sparse*: the header is real, the
norm weights are ones and every other tensor is zeros, left as a hole in the
file.  Writing a 20 GB model takes well under a second and a few KiB of disk;
llama.cpp loads, places and allocates it exactly as a real one (the runtime's
buffers depend on shapes and types, not values), and an all-zero network
computes finite (uniform) logits.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import (
    GGML_QUANT_SIZES,
    ExpertGatingFuncType,
    GGMLQuantizationType,
    GGUFWriter,
)

F32 = GGMLQuantizationType.F32
F16 = GGMLQuantizationType.F16
Q8_0 = GGMLQuantizationType.Q8_0
Q4_K = GGMLQuantizationType.Q4_K


@dataclass(frozen=True)
class Shape:
    arch: str
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ff: int
    vocab: int
    ctx_train: int
    rope_base: float = 10000.0
    n_expert: int = 0
    n_expert_used: int = 0
    expert_ff: int = 0
    # MLA (deepseek2)
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    rope_dim: int = 0
    qk_nope: int = 0
    v_head: int = 0
    leading_dense: int = 0
    n_expert_shared: int = 0
    #: type of the routed experts (the bulk of a MoE model)
    experts_type: GGMLQuantizationType = Q4_K
    #: type of attention, dense FFN, shared experts, embeddings and output
    dense_type: GGMLQuantizationType = Q8_0


#: DeepSeek-V3 (config.json of deepseek-ai/DeepSeek-V3): 61 layers, 3 dense;
#: here 4 layers, 1 dense + 3 MoE (3 x 6.3 GB of Q4_K experts)
DEEPSEEK_V3 = Shape(
    arch="deepseek2",
    n_layer=4,
    n_embd=7168,
    n_head=128,
    n_head_kv=1,  # MLA in the GGUF: one KV "head" of kv_lora_rank + rope
    head_dim=0,
    n_ff=18432,
    vocab=129280,
    ctx_train=163840,
    n_expert=256,
    n_expert_used=8,
    expert_ff=2048,
    q_lora_rank=1536,
    kv_lora_rank=512,
    rope_dim=64,
    qk_nope=128,
    v_head=128,
    leading_dense=1,
    n_expert_shared=1,
)

#: Qwen3-235B-A22B (94 layers); here 4
QWEN3_235B = Shape(
    arch="qwen3moe",
    n_layer=4,
    n_embd=4096,
    n_head=64,
    n_head_kv=4,
    head_dim=128,
    n_ff=12288,
    vocab=151936,
    ctx_train=40960,
    rope_base=1000000.0,
    n_expert=128,
    n_expert_used=8,
    expert_ff=1536,
)

#: Llama-3.1-70B (80 layers); here 4
LLAMA_70B = Shape(
    arch="llama",
    n_layer=4,
    n_embd=8192,
    n_head=64,
    n_head_kv=8,
    head_dim=128,
    n_ff=28672,
    vocab=128256,
    ctx_train=131072,
    rope_base=500000.0,
)

SHAPES = {"deepseek-v3": DEEPSEEK_V3, "qwen3-235b": QWEN3_235B, "llama-70b": LLAMA_70B}


def _vocab(writer: GGUFWriter, n: int) -> None:
    """A byte-fallback SPM vocabulary of ``n`` tokens: <unk> <s> </s>, 256 bytes, pieces."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    tokens += ["\u2581", "\u2581a", "\u2581the", "e", "t", "a", "o", "n", "i", "s"]
    tokens += [f"\u2581w{i}" for i in range(n - len(tokens))]
    writer.add_tokenizer_model("llama")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_scores([0.0] * 259 + [-float(i) for i in range(n - 259)])
    writer.add_token_types([2, 3, 3] + [6] * 256 + [1] * (n - 259))
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_add_bos_token(True)


def _nbytes(shape: tuple[int, ...], qtype: GGMLQuantizationType) -> int:
    block, size = GGML_QUANT_SIZES[qtype]
    elements = int(np.prod(shape))
    assert shape[0] % block == 0, (shape, qtype)
    return elements // block * size


class _Sparse:
    """Tensor infos in ggml order (ne0 first); data written later, zeros as holes."""

    def __init__(self, writer: GGUFWriter) -> None:
        self.writer = writer
        self.order: list[tuple[str, int, bool]] = []  # name, nbytes, is a norm (ones)

    def add(self, name: str, shape: tuple[int, ...], qtype: GGMLQuantizationType) -> None:
        ones = name.endswith("norm.weight")
        if ones:
            qtype = F32
        nbytes = _nbytes(shape, qtype)
        # numpy order, as GGUFWriter.add_tensor passes it (it reverses on write)
        self.writer.add_tensor_info(
            name, tuple(reversed(shape)), np.dtype(np.float32), nbytes, raw_dtype=qtype
        )
        self.order.append((name, nbytes, ones))

    def finish(self) -> int:
        w = self.writer
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_ti_data_to_file()
        assert w.fout is not None and len(w.fout) == 1
        f = w.fout[0]
        align = w.data_alignment
        pos = GGUFWriter.ggml_pad(f.tell(), align)
        for _name, nbytes, ones in self.order:
            if ones:
                f.seek(pos)
                f.write(np.ones(nbytes // 4, dtype=np.float32).tobytes())
            pos += GGUFWriter.ggml_pad(nbytes, align)
        f.truncate(pos)
        w.close()
        return pos


def _common(w: GGUFWriter, s: Shape) -> None:
    w.add_context_length(s.ctx_train)
    w.add_embedding_length(s.n_embd)
    w.add_block_count(s.n_layer)
    w.add_feed_forward_length(s.n_ff)
    w.add_head_count(s.n_head)
    w.add_head_count_kv(s.n_head_kv)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(s.rope_base)
    w.add_file_type(15)  # MOSTLY_Q4_K_M: a label only


def _embeddings(t: _Sparse, s: Shape) -> None:
    t.add("token_embd.weight", (s.n_embd, s.vocab), s.dense_type)
    t.add("output_norm.weight", (s.n_embd,), F32)
    t.add("output.weight", (s.n_embd, s.vocab), s.dense_type)


def _gqa(t: _Sparse, s: Shape, i: int, *, qk_norm: bool) -> None:
    q = s.dense_type
    t.add(f"blk.{i}.attn_norm.weight", (s.n_embd,), F32)
    t.add(f"blk.{i}.attn_q.weight", (s.n_embd, s.n_head * s.head_dim), q)
    t.add(f"blk.{i}.attn_k.weight", (s.n_embd, s.n_head_kv * s.head_dim), q)
    t.add(f"blk.{i}.attn_v.weight", (s.n_embd, s.n_head_kv * s.head_dim), q)
    t.add(f"blk.{i}.attn_output.weight", (s.n_head * s.head_dim, s.n_embd), q)
    if qk_norm:
        t.add(f"blk.{i}.attn_q_norm.weight", (s.head_dim,), F32)
        t.add(f"blk.{i}.attn_k_norm.weight", (s.head_dim,), F32)


def _dense_ffn(t: _Sparse, s: Shape, i: int) -> None:
    q = s.dense_type
    t.add(f"blk.{i}.ffn_norm.weight", (s.n_embd,), F32)
    t.add(f"blk.{i}.ffn_gate.weight", (s.n_embd, s.n_ff), q)
    t.add(f"blk.{i}.ffn_up.weight", (s.n_embd, s.n_ff), q)
    t.add(f"blk.{i}.ffn_down.weight", (s.n_ff, s.n_embd), q)


def _experts(t: _Sparse, s: Shape, i: int) -> None:
    q = s.experts_type
    t.add(f"blk.{i}.ffn_norm.weight", (s.n_embd,), F32)
    t.add(f"blk.{i}.ffn_gate_inp.weight", (s.n_embd, s.n_expert), F32)
    t.add(f"blk.{i}.ffn_gate_exps.weight", (s.n_embd, s.expert_ff, s.n_expert), q)
    t.add(f"blk.{i}.ffn_up_exps.weight", (s.n_embd, s.expert_ff, s.n_expert), q)
    t.add(f"blk.{i}.ffn_down_exps.weight", (s.expert_ff, s.n_embd, s.n_expert), q)


def llama(path: Path, s: Shape = LLAMA_70B) -> Path:
    w = GGUFWriter(path, "llama")
    w.add_name("oracle-gpu-llama-70b")
    _common(w, s)
    w.add_rope_dimension_count(s.head_dim)
    _vocab(w, s.vocab)
    t = _Sparse(w)
    _embeddings(t, s)
    for i in range(s.n_layer):
        _gqa(t, s, i, qk_norm=False)
        _dense_ffn(t, s, i)
    t.finish()
    return path


def qwen3moe(path: Path, s: Shape = QWEN3_235B) -> Path:
    w = GGUFWriter(path, "qwen3moe")
    w.add_name("oracle-gpu-qwen3-235b")
    _common(w, s)
    w.add_key_length(s.head_dim)
    w.add_value_length(s.head_dim)
    w.add_expert_count(s.n_expert)
    w.add_expert_used_count(s.n_expert_used)
    w.add_expert_feed_forward_length(s.expert_ff)
    _vocab(w, s.vocab)
    t = _Sparse(w)
    _embeddings(t, s)
    for i in range(s.n_layer):
        _gqa(t, s, i, qk_norm=True)
        _experts(t, s, i)
    t.finish()
    return path


def deepseek2(path: Path, s: Shape = DEEPSEEK_V3) -> Path:
    w = GGUFWriter(path, "deepseek2")
    w.add_name("oracle-gpu-deepseek-v3")
    _common(w, s)
    w.add_key_length(s.kv_lora_rank + s.rope_dim)
    w.add_value_length(s.kv_lora_rank)
    w.add_key_length_mla(s.qk_nope + s.rope_dim)
    w.add_value_length_mla(s.v_head)
    w.add_rope_dimension_count(s.rope_dim)
    w.add_q_lora_rank(s.q_lora_rank)
    w.add_kv_lora_rank(s.kv_lora_rank)
    w.add_leading_dense_block_count(s.leading_dense)
    w.add_expert_count(s.n_expert)
    w.add_expert_used_count(s.n_expert_used)
    w.add_expert_shared_count(s.n_expert_shared)
    w.add_expert_feed_forward_length(s.expert_ff)
    w.add_expert_weights_scale(2.5)
    w.add_expert_weights_norm(True)
    w.add_expert_gating_func(ExpertGatingFuncType.SIGMOID)
    _vocab(w, s.vocab)
    t = _Sparse(w)
    _embeddings(t, s)
    q = s.dense_type
    shexp = s.expert_ff * s.n_expert_shared
    for i in range(s.n_layer):
        t.add(f"blk.{i}.attn_norm.weight", (s.n_embd,), F32)
        t.add(f"blk.{i}.attn_q_a_norm.weight", (s.q_lora_rank,), F32)
        t.add(f"blk.{i}.attn_kv_a_norm.weight", (s.kv_lora_rank,), F32)
        t.add(f"blk.{i}.attn_q_a.weight", (s.n_embd, s.q_lora_rank), q)
        t.add(f"blk.{i}.attn_q_b.weight", (s.q_lora_rank, s.n_head * (s.qk_nope + s.rope_dim)), q)
        t.add(f"blk.{i}.attn_kv_a_mqa.weight", (s.n_embd, s.kv_lora_rank + s.rope_dim), q)
        t.add(f"blk.{i}.attn_k_b.weight", (s.qk_nope, s.kv_lora_rank, s.n_head), F16)
        t.add(f"blk.{i}.attn_v_b.weight", (s.kv_lora_rank, s.v_head, s.n_head), F16)
        t.add(f"blk.{i}.attn_output.weight", (s.n_head * s.v_head, s.n_embd), q)
        if i < s.leading_dense:
            _dense_ffn(t, s, i)
            continue
        _experts(t, s, i)
        t.add(f"blk.{i}.exp_probs_b.bias", (s.n_expert,), F32)
        t.add(f"blk.{i}.ffn_gate_shexp.weight", (s.n_embd, shexp), q)
        t.add(f"blk.{i}.ffn_up_shexp.weight", (s.n_embd, shexp), q)
        t.add(f"blk.{i}.ffn_down_shexp.weight", (shexp, s.n_embd), q)
    t.finish()
    return path


BUILDERS = {"deepseek-v3": deepseek2, "qwen3-235b": qwen3moe, "llama-70b": llama}
