"""A model profile from what a start-up log prints: hyperparameters, and a type per tensor.

Public logs come without their GGUF, so the truth table builds each model's
tensor inventory from the hyperparameters the log prints (``print_info`` /
``llm_load_print_meta``), with llama.cpp's tensor names and shapes for the
architecture.  What a log does not say is which type each tensor has: the
matrices get the one ggml type closest to the log's bits per weight and the
norms f32, so KV caches and compute buffers (which depend on shapes, not
types) are planned from the model as it is, and weights only approximately;
the table therefore compares weights only where a record names the types.

An architecture without a table here is reported as not expressible.  The
tables follow the runtimes' tensor loaders (``llm_build_*``/``create_*_tensors``
in llama.cpp's src/llama-model.cpp and ik_llama.cpp's src/llama-load-tensors.cpp):
tensor names and shapes only, each architecture's optional tensors as the
records' GGUFs hold them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from layoutgen.models.profile import HParams, Profile
from layoutgen.models.quants import by_name, tensor_nbytes
from layoutgen.models.tensors import Folded, Tensor, fold

#: ggml types a matrix may get, by bits per weight (both runtimes know them)
_BY_BPW = (
    (2.625, "q2_k"),
    (3.4375, "q3_k"),
    (4.5, "q4_k"),
    (5.5, "q5_k"),
    (6.5625, "q6_k"),
    (8.5, "q8_0"),
    (16.0, "bf16"),
)
_BPW = re.compile(r"(?:model|file) size\s*=\s*[0-9.]+\s*[GM]iB\s*\((?P<bpw>[0-9.]+) BPW\)")
DENSE = {"llama", "qwen2", "qwen3", "glm4", "phi3", "gemma2", "gemma3", "mistral3"}
MOE = {"qwen3moe", "deepseek2", "glm4moe"}
#: architectures with tables of their own below: gptneox (Pythia: fused QKV,
#: biases, LayerNorm, a plain GELU FFN), bert (embeddings model: token types and
#: learned positions, no output head), bitnet-25 (llama's tensors and two sub-norms),
#: deci (Nemotron: heads and FFN width per layer, some layers without either)
OWN = {"gptneox", "bert", "bitnet-25", "deci"}
ARCHS = DENSE | MOE | OWN
#: per-layer lists print_info prints for deci (``n_head = [128, 0, ...]``)
_PER_LAYER = ("n_head", "n_head_kv", "n_ff")


class NotExpressible(Exception):
    """What keeps a record out of the table, in words for its reason column."""


def matrix_type(logged: str) -> str:
    """The type closest to the log's ``model size = ... (N BPW)``; q8_0 if not printed."""
    m = _BPW.search(logged)
    if not m:
        return "q8_0"
    bpw = float(m["bpw"])
    return min(_BY_BPW, key=lambda t: abs(t[0] - bpw))[1]


def hparams(arch: str, hp: Mapping[str, Any]) -> HParams:
    """The profile's hyperparameters from a log's print_info values."""

    def get(key: str) -> int | None:
        value = hp.get(key)
        return int(value) if isinstance(value, (int, float)) and value else None

    def per_layer(key: str) -> int | tuple[int, ...] | None:
        """A value print_info prints per layer (deci) as a tuple, else as ``get``."""
        value = hp.get(key)
        if isinstance(value, (list, tuple)) and value:
            values = tuple(int(v) for v in value)
            return values[0] if len(set(values)) == 1 else values
        return get(key)

    n_layer = get("n_layer")
    if n_layer is None:
        raise NotExpressible("the log prints no n_layer")
    mla = bool(get("kv_lora_rank"))
    n_swa, pattern = get("n_swa"), get("n_swa_pattern")
    swa_layers = None
    if n_swa and arch in ("gemma2", "gemma3"):
        pattern = pattern or (2 if arch == "gemma2" else 6)
        swa_layers = tuple(il for il in range(n_layer) if (il + 1) % pattern)
    n_head = per_layer("n_head")
    n_head_kv = per_layer("n_head_kv") or n_head
    key, value = get("n_embd_head_k"), get("n_embd_head_v")
    if mla:
        # mainline MLA GGUFs print n_embd_head_k 576 (one KV "head" of rank + rope) and
        # the per-head sizes as *_mla; older (ik) conversions print 192/128
        key = get("n_embd_head_k_mla") or key
        value = get("n_embd_head_v_mla") or value
    return HParams(
        n_layer=n_layer,
        n_embd=get("n_embd"),
        n_head=n_head,
        n_head_kv=n_head_kv,
        key_length=key,
        value_length=value,
        q_lora_rank=get("q_lora_rank"),
        kv_lora_rank=get("kv_lora_rank"),
        rope_dim=get("n_rot") if mla else None,
        n_ff=per_layer("n_ff"),
        n_expert=get("n_expert"),
        n_expert_used=get("n_expert_used"),
        n_expert_shared=get("n_expert_shared"),
        expert_ff=get("n_ff_exp") or (get("n_ff") if arch == "qwen3moe" else None),
        leading_dense=get("n_layer_dense_lead"),
        sliding_window=n_swa if swa_layers else None,
        swa_layers=swa_layers,
        vocab=get("n_vocab"),
        n_ctx_train=get("n_ctx_train"),
        nextn_layers=get("nextn_predict_layers"),
    )


_META = re.compile(r"(?:print_info|llm_load_print_meta):\s+(?P<k>\w+)\s+=\s+(?P<v>[0-9]+)\s*$")
_META_LIST = re.compile(
    r"(?:print_info|llm_load_print_meta):\s+(?P<k>\w+)\s+=\s+\[(?P<v>[0-9, ]+)\]\s*$"
)
_GGUF_KV = re.compile(r"\.(?P<k>[a-z_.]+)\s+u32\s+=\s+(?P<v>[0-9]+)\s*$")
#: GGUF key (after the architecture prefix) -> print_info name
_GGUF_KEYS = {
    "block_count": "n_layer",
    "embedding_length": "n_embd",
    "attention.head_count": "n_head",
    "attention.head_count_kv": "n_head_kv",
    "context_length": "n_ctx_train",
    "feed_forward_length": "n_ff",
    "vocab_size": "n_vocab",
    "expert_count": "n_expert",
    "expert_used_count": "n_expert_used",
}


def logged_hparams(logged: str) -> dict[str, int | tuple[int, ...]]:
    """The hyperparameters a log prints (print_info / llm_load_print_meta, GGUF key dump);
    per-layer lists (deci's heads and FFN widths) as tuples."""
    out: dict[str, int | tuple[int, ...]] = {}
    for line in logged.splitlines():
        if m := _META.search(line):
            out.setdefault(m["k"], int(m["v"]))
        elif (m := _META_LIST.search(line)) and m["k"] in _PER_LAYER:
            out.setdefault(m["k"], tuple(int(v) for v in m["v"].split(",")))
        elif (m := _GGUF_KV.search(line)) and m["k"] in _GGUF_KEYS:
            out.setdefault(_GGUF_KEYS[m["k"]], int(m["v"]))
    return out


def profile(record: Mapping[str, Any]) -> Profile:
    """The record's model as a profile; raises NotExpressible."""
    model = record.get("model") or {}
    arch = model.get("arch")
    if arch not in ARCHS:
        raise NotExpressible(f"architecture {arch} has no tensor table in tests/truth/synth.py")
    printed = {**logged_hparams(record.get("logged") or ""), **(model.get("hparams") or {})}
    hp = hparams(arch, printed)
    for need in ("n_embd", "n_head", "vocab"):
        if not getattr(hp, need):
            raise NotExpressible(f"the log prints no {need}")
    qtype = matrix_type(record.get("logged") or "")
    split = bool(model.get("mla_kv_b_split"))
    tensors = [
        _retyped(t, model.get("types") or {}) for t in _tensors(arch, hp, qtype, split, printed)
    ]
    return Profile(
        name=str(model.get("name") or record["id"]),
        arch=arch,
        source=f"synthesized by tests/truth/synth.py from {record['id']}",
        hparams=hp,
        entries=tuple(fold(tensors)),
    )


def _retyped(t: Tensor, types: Mapping[str, str]) -> Tensor:
    """The record's ``model.types`` (regex -> type, first match) over the one matrix type."""
    for pattern, qtype in types.items():
        if re.search(pattern, t.name):
            return Tensor(t.name, qtype, t.shape, tensor_nbytes(qtype, t.shape))
    return t


def _t(name: str, shape: tuple[int, ...], qtype: str) -> Tensor:
    """A tensor of the matrix type; vectors f32, and rows a k-quant cannot hold (not a
    multiple of 256) q8_0 or f16.  Float types and 32-blocks keep their type where
    the row fits (bert's 384-wide f16 matrices)."""
    block = by_name(qtype).block_size
    fits = block <= 32 and shape[0] % block == 0
    if len(shape) == 1 or (shape[0] % 256 and not fits):
        qtype = "f32" if len(shape) == 1 else ("q8_0" if shape[0] % 32 == 0 else "f16")
    return Tensor(name, qtype, shape, tensor_nbytes(qtype, shape))


def _tensors(
    arch: str,
    hp: HParams,
    q: str,
    split: bool = False,
    printed: Mapping[str, Any] | None = None,
) -> Iterator[Tensor]:
    """SPLIT: an MLA GGUF that holds attn_k_b and attn_v_b beside attn_kv_b (ik's early
    MLA conversions; the record's ``model.mla_kv_b_split: true``).  PRINTED: the log's
    and the record's hparams, for values a profile does not keep (bert's token types,
    deci's n_rot)."""
    printed = printed or {}
    if arch == "bert":
        yield from _bert(hp, q, printed)
        return
    e, vocab = hp.n_embd or 0, hp.vocab or 0
    yield _t("token_embd.weight", (e, vocab), q)
    yield _t("output_norm.weight", (e,), q)
    if arch == "gptneox":  # LayerNorm: a bias beside every norm
        yield _t("output_norm.bias", (e,), q)
    if arch not in ("gemma2", "gemma3"):  # gemma ties the output to the embeddings
        yield _t("output.weight", (e, vocab), q)
    if arch == "deci":
        # llama 3.1's rope scaling table, one tensor shared by every layer (the log's
        # f32 count: output_norm, rope_freqs, 64 attn_norm, 81 ffn_norm = 147)
        yield _t("rope_freqs.weight", (int(printed.get("n_rot") or 128) // 2,), q)
    for il in range(hp.n_layer):
        p = f"blk.{il}."
        if arch == "gptneox":
            yield from _gptneox_layer(hp, il, q)
            continue
        if arch == "deci" and not _at(hp.n_head_kv, il) and not _at(hp.n_head, il):
            pass  # no attention in this layer (deci's no_op blocks)
        else:
            yield _t(p + "attn_norm.weight", (e,), q)
            yield from _attention(arch, hp, il, q, split)
        if arch in ("gemma2", "gemma3", "glm4"):
            yield _t(p + "post_attention_norm.weight", (e,), q)
            yield _t(p + "post_ffw_norm.weight", (e,), q)
        if arch == "bitnet-25":
            yield _t(p + "attn_sub_norm.weight", (e,), q)
        moe = arch in MOE and il >= (hp.leading_dense or 0)
        if not moe:
            ff = _at(hp.n_ff, il)
            if not ff:
                continue  # deci: no FFN in this layer
            yield _t(p + "ffn_norm.weight", (e,), q)
            if arch == "phi3":  # gate and up fused in one ffn_up of 2 x n_ff
                yield _t(p + "ffn_up.weight", (e, 2 * ff), q)
            else:
                yield _t(p + "ffn_gate.weight", (e, ff), q)
                yield _t(p + "ffn_up.weight", (e, ff), q)
            yield _t(p + "ffn_down.weight", (ff, e), q)
            if arch == "bitnet-25":
                yield _t(p + "ffn_sub_norm.weight", (ff,), q)
            continue
        yield _t(p + "ffn_norm.weight", (e,), q)
        n, ff = hp.n_expert or 0, hp.expert_ff or 0
        yield _t(p + "ffn_gate_inp.weight", (e, n), "f32")
        yield _t(p + "ffn_gate_exps.weight", (e, ff, n), q)
        yield _t(p + "ffn_up_exps.weight", (e, ff, n), q)
        yield _t(p + "ffn_down_exps.weight", (ff, e, n), q)
        if hp.n_expert_shared:
            sh = ff * hp.n_expert_shared
            yield _t(p + "ffn_gate_shexp.weight", (e, sh), q)
            yield _t(p + "ffn_up_shexp.weight", (e, sh), q)
            yield _t(p + "ffn_down_shexp.weight", (sh, e), q)
        if arch in ("deepseek2", "glm4moe"):
            yield _t(p + "exp_probs_b.bias", (n,), "f32")


def _at(value: int | tuple[int, ...] | None, il: int) -> int:
    """A per-layer hparam (deci's tuples) at layer IL, or the one value."""
    if isinstance(value, tuple):
        return value[il] if il < len(value) else 0
    return value or 0


def _gptneox_layer(hp: HParams, il: int, q: str) -> Iterator[Tensor]:
    """Pythia's block (llama.cpp LLM_ARCH_GPTNEOX): LayerNorms with biases, one fused
    QKV projection with its bias, the output projection and a plain up/down FFN, each
    with a bias."""
    p, e = f"blk.{il}.", hp.n_embd or 0
    n_head = _at(hp.n_head, il)
    n_kv = _at(hp.n_head_kv, il) or n_head
    dk = hp.key_length or (e // n_head if n_head else 0)
    ff = _at(hp.n_ff, il)
    qkv = n_head * dk + 2 * n_kv * dk  # n_embd + 2 x n_embd_gqa
    yield _t(p + "attn_norm.weight", (e,), q)
    yield _t(p + "attn_norm.bias", (e,), q)
    yield _t(p + "attn_qkv.weight", (e, qkv), q)
    yield _t(p + "attn_qkv.bias", (qkv,), q)
    yield _t(p + "attn_output.weight", (e, e), q)
    yield _t(p + "attn_output.bias", (e,), q)
    yield _t(p + "ffn_norm.weight", (e,), q)
    yield _t(p + "ffn_norm.bias", (e,), q)
    yield _t(p + "ffn_down.weight", (ff, e), q)
    yield _t(p + "ffn_down.bias", (e,), q)
    yield _t(p + "ffn_up.weight", (e, ff), q)
    yield _t(p + "ffn_up.bias", (ff,), q)


def _bert(hp: HParams, q: str, printed: Mapping[str, Any]) -> Iterator[Tensor]:
    """BERT (llama.cpp LLM_ARCH_BERT): token, token-type and learned position
    embeddings with a LayerNorm, separate Q/K/V with biases, post-attention and
    post-FFN LayerNorms, a GELU up/down FFN with biases, and no output head (an
    embeddings model pools the last hidden state).  The converter stores position
    embeddings and token types as f32 whatever the file type (convert_hf_to_gguf.py,
    POS_EMBD and TOKEN_TYPES), and llama-quantize leaves them so."""
    e, vocab = hp.n_embd or 0, hp.vocab or 0
    n_types = int(printed.get("n_vocab_type") or 2)  # BERT's type_vocab_size
    yield _t("token_embd.weight", (e, vocab), q)
    yield Tensor("token_types.weight", "f32", (e, n_types), tensor_nbytes("f32", (e, n_types)))
    positions = hp.n_ctx_train or 0
    yield Tensor(
        "position_embd.weight", "f32", (e, positions), tensor_nbytes("f32", (e, positions))
    )
    yield _t("token_embd_norm.weight", (e,), q)
    yield _t("token_embd_norm.bias", (e,), q)
    for il in range(hp.n_layer):
        p = f"blk.{il}."
        n_head = _at(hp.n_head, il)
        n_kv = _at(hp.n_head_kv, il) or n_head
        dk = hp.key_length or (e // n_head if n_head else 0)
        ff = _at(hp.n_ff, il)
        yield _t(p + "attn_q.weight", (e, e), q)
        yield _t(p + "attn_q.bias", (e,), q)
        yield _t(p + "attn_k.weight", (e, n_kv * dk), q)
        yield _t(p + "attn_k.bias", (n_kv * dk,), q)
        yield _t(p + "attn_v.weight", (e, n_kv * dk), q)
        yield _t(p + "attn_v.bias", (n_kv * dk,), q)
        yield _t(p + "attn_output.weight", (e, e), q)
        yield _t(p + "attn_output.bias", (e,), q)
        yield _t(p + "attn_output_norm.weight", (e,), q)
        yield _t(p + "attn_output_norm.bias", (e,), q)
        yield _t(p + "ffn_up.weight", (e, ff), q)
        yield _t(p + "ffn_up.bias", (ff,), q)
        yield _t(p + "ffn_down.weight", (ff, e), q)
        yield _t(p + "ffn_down.bias", (e,), q)
        yield _t(p + "layer_output_norm.weight", (e,), q)
        yield _t(p + "layer_output_norm.bias", (e,), q)


def _attention(arch: str, hp: HParams, il: int, q: str, split: bool = False) -> Iterator[Tensor]:
    p, e = f"blk.{il}.", hp.n_embd or 0
    n_head = _at(hp.n_head, il)
    n_kv = _at(hp.n_head_kv, il) or n_head
    if hp.kv_lora_rank:
        rank, rope = hp.kv_lora_rank, hp.rope_dim or 0
        # per-head sizes; a log that prints the MLA "head" (rank + rope) or none: DeepSeek's
        qk = hp.key_length if hp.key_length and hp.key_length < rank else 192
        v = hp.value_length if hp.value_length and hp.value_length < rank else 128
        if hp.q_lora_rank:
            yield _t(p + "attn_q_a_norm.weight", (hp.q_lora_rank,), q)
            yield _t(p + "attn_q_a.weight", (e, hp.q_lora_rank), q)
            yield _t(p + "attn_q_b.weight", (hp.q_lora_rank, n_head * qk), q)
        else:
            yield _t(p + "attn_q.weight", (e, n_head * qk), q)
        yield _t(p + "attn_kv_a_norm.weight", (rank,), q)
        yield _t(p + "attn_kv_a_mqa.weight", (e, rank + rope), q)
        if n_kv == 1 or split:  # converted for MLA (since April 2025): k_b and v_b split
            yield _t(p + "attn_k_b.weight", (qk - rope, rank, n_head), q)
            yield _t(p + "attn_v_b.weight", (rank, v, n_head), q)
        if n_kv != 1:
            yield _t(p + "attn_kv_b.weight", (rank, n_head * (qk - rope + v)), q)
        yield _t(p + "attn_output.weight", (n_head * v, e), q)
        return
    dk = hp.key_length or (e // n_head if n_head else 0)
    dv = hp.value_length or dk
    if arch == "deci" and not _at(hp.n_head_kv, il):
        # deci's linear-attention block: one n_embd x n_embd projection
        yield _t(p + "attn_output.weight", (e, e), q)
        return
    if arch == "phi3":  # Q, K and V fused in one attn_qkv
        yield _t(p + "attn_qkv.weight", (e, n_head * dk + n_kv * (dk + dv)), q)
    else:
        yield _t(p + "attn_q.weight", (e, n_head * dk), q)
        yield _t(p + "attn_k.weight", (e, n_kv * dk), q)
        yield _t(p + "attn_v.weight", (e, n_kv * dv), q)
    if arch == "qwen2":  # Qwen2's Q/K/V biases
        yield _t(p + "attn_q.bias", (n_head * dk,), q)
        yield _t(p + "attn_k.bias", (n_kv * dk,), q)
        yield _t(p + "attn_v.bias", (n_kv * dv,), q)
    yield _t(p + "attn_output.weight", (n_head * dv, e), q)
    if arch in ("qwen3", "qwen3moe", "gemma3"):
        yield _t(p + "attn_q_norm.weight", (dk,), q)
        yield _t(p + "attn_k_norm.weight", (dk,), q)


__all__ = ["ARCHS", "Folded", "NotExpressible", "profile"]
