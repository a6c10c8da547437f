"""Writes the hand-made profiles of the seed models to layouts/models/.

No GGUF of these models is at hand, so their tensor lists are rebuilt from
public shapes (shared/data/tensor-tables, model-facts.md, public GGUF dumps)
with per-tensor types chosen so that totals match the seeds' logged numbers.
The committed YAML is the artifact; rerun this after changing a recipe:

    .venv/bin/python tests/tools/seed_profiles.py
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from layoutgen.models.profile import HParams, Profile, dump_profile
from layoutgen.models.quants import tensor_nbytes
from layoutgen.models.tensors import Tensor, fold

OUT = Path(__file__).resolve().parents[2] / "layouts" / "models"
Recipe = Callable[[str], str]


class Builder:
    def __init__(self, recipe: Recipe) -> None:
        self.recipe = recipe
        self.tensors: list[Tensor] = []

    def add(self, name: str, *shape: int, type: str | None = None) -> None:
        qtype = type or ("f32" if len(shape) == 1 else self.recipe(name))
        self.tensors.append(Tensor(name, qtype, shape, tensor_nbytes(qtype, shape)))


def glm51() -> Profile:
    """GLM-5.1 IQ3_KS (ubergarm), arch glm-dsa; shapes from tensor-tables/GLM-5.1.md."""
    # Fitted, see GLM_SOURCE: attention q6_k, k_b/v_b q8_0, indexer q8_0, dense and
    # shared-expert FFN iq5_ks, output iq6_k; the unloaded nextn layer blk.78 differs.
    types = {
        "attn_kv_a_mqa": "q6_k",
        "attn_q_a": "q6_k",
        "attn_q_b": "q6_k",
        "attn_output": "q6_k",
        "attn_k_b": "q8_0",
        "attn_v_b": "q8_0",
        "ffn_down": "iq5_ks",
        "ffn_gate": "iq5_ks",
        "ffn_up": "iq5_ks",
        "ffn_down_shexp": "iq5_ks",
        "ffn_gate_shexp": "iq5_ks",
        "ffn_up_shexp": "iq5_ks",
        "ffn_gate_exps": "iq3_ks",
        "ffn_up_exps": "iq3_ks",
        "ffn_down_exps": "iq4_ks",
        "ffn_gate_inp": "f32",
        "indexer.proj": "q8_0",
        "indexer.attn_k": "q8_0",
        "indexer.attn_q_b": "q8_0",
        "output": "iq6_k",
        "token_embd": "iq4_k",
    }
    nextn = {
        "attn_kv_a_mqa": "q8_0",
        "attn_q_a": "q8_0",
        "attn_q_b": "q8_0",
        "attn_output": "q8_0",
        "ffn_gate_exps": "iq5_ks",
        "ffn_up_exps": "iq5_ks",
        "ffn_down_exps": "iq5_ks",
        "ffn_down_shexp": "iq4_ks",
        "ffn_gate_shexp": "iq4_ks",
        "ffn_up_shexp": "iq4_ks",
        "nextn.eh_proj": "iq5_k",
    }

    def recipe(name: str) -> str:
        key = name.removesuffix(".weight")
        key = key.split(".", 2)[2] if key.startswith("blk.") else key
        if name.startswith("blk.78.") and key in nextn:
            return nextn[key]
        return types[key]

    b, e = Builder(recipe), 6144
    b.add("token_embd.weight", e, 154880)
    for i in range(79):
        p = f"blk.{i}."
        b.add(p + "attn_norm.weight", e)
        b.add(p + "attn_q_a_norm.weight", 2048)
        b.add(p + "attn_kv_a_norm.weight", 512)
        b.add(p + "attn_q_a.weight", e, 2048)
        b.add(p + "attn_q_b.weight", 2048, 16384)
        b.add(p + "attn_kv_a_mqa.weight", e, 576)
        b.add(p + "attn_k_b.weight", 192, 512, 64)
        b.add(p + "attn_v_b.weight", 512, 256, 64)
        b.add(p + "attn_output.weight", 16384, e)
        b.add(p + "indexer.k_norm.weight", 128)
        b.add(p + "indexer.k_norm.bias", 128)
        b.add(p + "indexer.proj.weight", e, 32)
        b.add(p + "indexer.attn_k.weight", e, 128)
        b.add(p + "indexer.attn_q_b.weight", 2048, 4096)
        b.add(p + "ffn_norm.weight", e)
        if i < 3:
            b.add(p + "ffn_gate.weight", e, 12288)
            b.add(p + "ffn_up.weight", e, 12288)
            b.add(p + "ffn_down.weight", 12288, e)
            continue
        b.add(p + "ffn_gate_inp.weight", e, 256)
        b.add(p + "exp_probs_b.bias", 256)
        b.add(p + "ffn_gate_exps.weight", e, 2048, 256)
        b.add(p + "ffn_up_exps.weight", e, 2048, 256)
        b.add(p + "ffn_down_exps.weight", 2048, e, 256)
        b.add(p + "ffn_gate_shexp.weight", e, 2048)
        b.add(p + "ffn_up_shexp.weight", e, 2048)
        b.add(p + "ffn_down_shexp.weight", 2048, e)
        if i == 78:
            b.add(p + "nextn.eh_proj.weight", 12288, e)
            b.add(p + "nextn.enorm.weight", e)
            b.add(p + "nextn.hnorm.weight", e)
            b.add(p + "nextn.shared_head_norm.weight", e)
    b.add("output_norm.weight", e)
    b.add("output.weight", e, 154880)
    hp = HParams(
        n_layer=79,
        n_embd=e,
        n_head=64,
        n_head_kv=64,
        key_length=256,
        value_length=256,
        q_lora_rank=2048,
        kv_lora_rank=512,
        rope_dim=64,
        n_ff=12288,
        n_expert=256,
        n_expert_used=8,
        n_expert_shared=1,
        expert_ff=2048,
        expert_shared_ff=2048,
        leading_dense=3,
        nextn_layers=1,
        vocab=154880,
        n_ctx_train=202752,
    )
    return Profile(
        "GLM-5.1 IQ3_KS (ubergarm/GLM-5.1-GGUF)", "glm-dsa", GLM_SOURCE, hp, tuple(fold(b.tensors))
    )


GLM_SOURCE = """\
Hand-written (no GGUF at hand); rebuilt by tests/tools/seed_profiles.py.
Shapes and the 1809-tensor inventory (blk.0-78): shared/data/tensor-tables/GLM-5.1.md
(public Thireus/GGUF-Tool-Suite tensor map). Hyperparameters: shared/data/model-facts.md
and seed 001's llm_load_print_meta (n_layer 79, n_expert 256, n_expert_used 8,
n_layer_dense_lead 3). key/value_length: MLA head sizes 192+64 / 256 are from the table's
attn_q_b (2048 -> 64*256) and attn_v_b shapes; written as 256/256 (K = 192 nope + 64 rope).
Routed experts, from the seed: gate_exps 1225 MiB and down_exps 1638 MiB per layer are
exactly iq3_ks (gate/up) and iq4_ks (down) in ik_llama.cpp's type table
(layoutgen/models/quants.py); seed 001's CUDA_Host 307110.47 MiB with all experts on the host
equals 75 layers (blk.3-77) x 4088 MiB + token_embd as iq4_k (535265280 B) exactly, so
token_embd is iq4_k and blk.78 (nextn) is not loaded by ik_llama.cpp (ubergarm's model
card: "unused blk.78/indexer/nextn tensors").
NOT KNOWN: the types of the other (attention, indexer, shared-expert, dense, output,
nextn) tensors. They are fitted to three logged figures at once, by search over ggml/ik
types (attention q6_k, attn_k_b/attn_v_b q8_0, indexer q8_0, dense and shared-expert FFN
iq5_ks, output iq6_k): ik_llama.cpp loads every non-expert tensor of blk.0-77 (DSA
indexer included: create_glm_dsa_tensors in ik_llama.cpp src/llama-load-tensors.cpp,
ik-llama-cpp-python 0.1.5, creates them with flags 0 outside the nextn layer) plus
blk.78's attn_k_b/attn_v_b and output; with seed 001's two-GPU split (blk.0-40 on CUDA0,
41-77 and output on CUDA1, from its KV 784.15/707.64 MiB) these sum to 7376.55 and
7119.55 MiB against the logged 7378.05 and 7120.90 (-0.02 % each; one GPU: 14496.10
against 14498.95). The nextn layer blk.78, which nobody loads, then holds what is left
of the logged model size 320.216 GiB (6291.76 MiB): its attention q8_0, experts iq5_ks,
shared expert iq4_ks and eh_proj iq5_k fill it to 0.01 MiB. An earlier version assumed
the indexer unloaded (ubergarm's card calls it "unused": unused, yet allocated) and
came out 840 MiB short of CUDA0. Replace this profile with 'layoutgen inspect' output
when the GGUF is at hand.
'layoutgen inspect' output when the GGUF is at hand.
"""


def qwen3next(experts: str, down_head: str, rest: str, embd: str, out: str) -> list[Tensor]:
    """Qwen3-Coder-Next (qwen3next) tensors; shapes from model-facts.md hyperparameters."""

    def recipe(name: str) -> str:
        if name == "token_embd.weight":
            return embd
        if name == "output.weight":
            return out
        if "_exps" in name:
            layer = int(name.split(".")[1])
            return down_head if "down" in name and layer < 6 else experts
        return rest

    b, e = Builder(recipe), 2048
    b.add("token_embd.weight", e, 151936)
    for i in range(48):
        p = f"blk.{i}."
        b.add(p + "attn_norm.weight", e)
        if i % 4 == 3:  # full attention every 4th layer: q carries q and its gate
            b.add(p + "attn_q.weight", e, 16 * 256 * 2)
            b.add(p + "attn_k.weight", e, 2 * 256)
            b.add(p + "attn_v.weight", e, 2 * 256)
            b.add(p + "attn_output.weight", 16 * 256, e)
            b.add(p + "attn_q_norm.weight", 256)
            b.add(p + "attn_k_norm.weight", 256)
        else:  # gated DeltaNet: 16 q/k heads x 128, 32 v heads x 128
            b.add(p + "attn_qkv.weight", e, 2048 + 2048 + 4096)
            b.add(p + "attn_gate.weight", e, 4096)
            b.add(p + "ssm_ba.weight", e, 64)
            b.add(p + "ssm_conv1d.weight", 4, 8192, type="f32")
            b.add(p + "ssm_a", 32)
            b.add(p + "ssm_dt.bias", 32)
            b.add(p + "ssm_norm.weight", 128)
            b.add(p + "ssm_out.weight", 4096, e)
        b.add(p + "post_attention_norm.weight", e)
        b.add(p + "ffn_gate_inp.weight", e, 512, type="f32")
        b.add(p + "ffn_gate_exps.weight", e, 512, 512)
        b.add(p + "ffn_up_exps.weight", e, 512, 512)
        b.add(p + "ffn_down_exps.weight", 512, e, 512)
        b.add(p + "ffn_gate_inp_shexp.weight", e, 1, type="f32")
        b.add(p + "ffn_gate_shexp.weight", e, 512)
        b.add(p + "ffn_up_shexp.weight", e, 512)
        b.add(p + "ffn_down_shexp.weight", 512, e)
    b.add("output_norm.weight", e)
    b.add("output.weight", e, 151936)
    return b.tensors


QWEN3NEXT_HP = HParams(
    n_layer=48,
    n_embd=2048,
    n_head=16,
    n_head_kv=2,
    key_length=256,
    value_length=256,
    n_ff=5120,
    n_expert=512,
    n_expert_used=10,
    n_expert_shared=1,
    expert_ff=512,
    expert_shared_ff=512,
    recurrent_layers=tuple(i for i in range(48) if i % 4 != 3),
    ssm_conv_kernel=4,
    ssm_state_size=128,
    ssm_inner_size=4096,
    ssm_group_count=16,
    ssm_time_step_rank=32,
    vocab=151936,
    n_ctx_train=262144,
)

QWEN3NEXT_SOURCE = """\
Hand-written (no GGUF at hand); rebuilt by tests/tools/seed_profiles.py.
Hyperparameters: shared/data/model-facts.md (Qwen3-Next-80B-A3B / Qwen3-Coder-Next,
from public GGUF dumps): 48 layers, full_attention_interval 4 (attention on 3,7,...,47,
36 gated-DeltaNet layers), n_embd 2048, 16 heads, 2 KV heads, key/value 256, 512 experts x
512 (10 used), shared expert 512, ssm conv 4 / state 128 / groups 16 / dt rank 32 / inner
4096, vocab 151936, ctx 262144. Seed 001 agrees: "48 layers: 36 DeltaNet (no KV cache) + 12
Gated Attention (KV heads=2)".
Tensor names and shapes follow llama.cpp's qwen3next tensor list (gguf-py MODEL_TENSORS);
NOT VERIFIED against a real file: whether the DeltaNet input projection is stored as
attn_qkv + attn_gate + ssm_ba (used here) or as ssm_in + ssm_ba (same bytes either way).
"""


def coder_next_q4_0() -> Profile:
    tensors = qwen3next("q4_0", "q4_1", "q4_0", "q4_0", "q6_k")
    source = (
        QWEN3NEXT_SOURCE
        + """\
Types: llama.cpp's Q4_0 file type rules (q4_0 everywhere, output q6_K, ffn_down in the
first n_layer/8 = 6 layers q4_1 when quantized with an imatrix; the same rule shows in
tensor-tables/GLM-5.1.md's q4_0 column). Seed 001: "weights 45GB" for the Q4_0 worker.
"""
    )
    return Profile("Qwen3-Coder-Next Q4_0", "qwen3next", source, QWEN3NEXT_HP, tuple(fold(tensors)))


def coder_next_iq4_kss() -> Profile:
    tensors = qwen3next("iq4_kss", "iq4_kss", "q8_0", "q8_0", "q8_0")
    source = (
        QWEN3NEXT_SOURCE
        + """\
Types: routed experts iq4_kss (ik_llama.cpp), everything else q8_0 - an assumed
ubergarm-style recipe, NOT KNOWN from a file. Seed 001's quant table: IQ4_KSS "39 GiB".
"""
    )
    return Profile(
        "Qwen3-Coder-Next IQ4_KSS", "qwen3next", source, QWEN3NEXT_HP, tuple(fold(tensors))
    )


def qwen35_397b() -> Profile:
    """Qwen3.5-397B-A17B Q4_K_M (qwen35moe); shapes from tensor-tables/Qwen3.5-397B-A17B.md."""
    types = {
        "ffn_gate_exps": "q4_k",
        "ffn_up_exps": "q4_k",
        "ffn_down_exps": "q5_k",
        "token_embd": "q8_0",
        "output": "q6_k",
        "ffn_gate_inp": "f32",
        "ffn_gate_inp_shexp": "f32",
        "ssm_conv1d": "f32",
    }

    def recipe(name: str) -> str:
        key = name.removesuffix(".weight")
        key = key.split(".", 2)[2] if key.startswith("blk.") else key
        return types.get(key, QWEN35_REST)

    b, e = Builder(recipe), 4096
    b.add("token_embd.weight", e, 248320)
    for i in range(60):
        p = f"blk.{i}."
        b.add(p + "attn_norm.weight", e)
        if i % 4 == 3:
            b.add(p + "attn_q.weight", e, 16384)
            b.add(p + "attn_k.weight", e, 512)
            b.add(p + "attn_v.weight", e, 512)
            b.add(p + "attn_output.weight", 8192, e)
            b.add(p + "attn_q_norm.weight", 256)
            b.add(p + "attn_k_norm.weight", 256)
        else:
            b.add(p + "attn_qkv.weight", e, 12288)
            b.add(p + "attn_gate.weight", e, 8192)
            b.add(p + "ssm_alpha.weight", e, 64)
            b.add(p + "ssm_beta.weight", e, 64)
            b.add(p + "ssm_conv1d.weight", 4, 12288)
            b.add(p + "ssm_a", 64)
            b.add(p + "ssm_dt.bias", 64)
            b.add(p + "ssm_norm.weight", 128)
            b.add(p + "ssm_out.weight", 8192, e)
        b.add(p + "post_attention_norm.weight", e)
        b.add(p + "ffn_gate_inp.weight", e, 512)
        b.add(p + "ffn_gate_exps.weight", e, 1024, 512)
        b.add(p + "ffn_up_exps.weight", e, 1024, 512)
        b.add(p + "ffn_down_exps.weight", 1024, e, 512)
        b.add(p + "ffn_gate_inp_shexp.weight", e, 1)
        b.add(p + "ffn_gate_shexp.weight", e, 1024)
        b.add(p + "ffn_up_shexp.weight", e, 1024)
        b.add(p + "ffn_down_shexp.weight", 1024, e)
    b.add("output_norm.weight", e)
    b.add("output.weight", e, 248320)
    hp = HParams(
        n_layer=60,
        n_embd=e,
        n_head=32,
        n_head_kv=2,
        key_length=256,
        value_length=256,
        n_expert=512,
        n_expert_used=10,
        n_expert_shared=1,
        expert_ff=1024,
        expert_shared_ff=1024,
        recurrent_layers=tuple(i for i in range(60) if i % 4 != 3),
        ssm_conv_kernel=4,
        ssm_state_size=128,
        ssm_inner_size=8192,
        ssm_group_count=16,
        ssm_time_step_rank=64,
        vocab=248320,
        n_ctx_train=262144,
    )
    return Profile(
        "Qwen3.5-397B-A17B Q4_K_M", "qwen35moe", QWEN35_SOURCE, hp, tuple(fold(b.tensors))
    )


QWEN35_REST = "q8_0"
QWEN35_SOURCE = """\
Hand-written (no GGUF at hand); rebuilt by tests/tools/seed_profiles.py.
Shapes and the 1098-tensor inventory: shared/data/tensor-tables/Qwen3.5-397B-A17B.md
(public tensor map); hyperparameters: shared/data/model-facts.md (60 layers, attention on
every 4th: 3,7,...,59; 45 DeltaNet layers; 32 heads x 256 (q carries its gate), 2 KV
heads; 64 v-heads x 128 = ssm inner 8192, 16 k-heads; 512 experts x 1024, 10 used; shared
expert 1024; vocab 248320; ctx 262144 - seed 003: n_ctx_train 262,144, experts 512 / 10).
Types: seed 003 logs CUDA_Host 56,710 MiB with --n-cpu-moe 15 and says it "matches 15 x
3,712 MiB": 3712 MiB per layer is exactly gate/up q4_K + down q5_K (1152 + 1152 + 1408
MiB), and the remaining 1030.63 MiB is token_embd as q8_0 (1080688640 B), together
56710.63 MiB. Output q6_K (llama.cpp's Q4_K_M rule). NOT KNOWN: the types of attention,
DeltaNet and shared-expert tensors (q8_0 assumed, matching seed 003's "228 GiB", "4.93
bpw" within the tolerance its tests state), and whether some layers' ffn_down_exps are
q6_K (seed 003 also quotes 3,839 MiB of expert content per layer, which this profile does
not reproduce).
"""


def gemma4_26b() -> Profile:
    """Gemma-4 26B-A4B Q5_K_M (gemma4); 30 layers, every 6th global (5, 11, ..., 29)."""
    glob = {5, 11, 17, 23, 29}

    def more_bits(layer: int) -> bool:  # llama.cpp's use_more_bits(i_layer, n_layer=30)
        return layer < 30 // 8 or layer >= 7 * 30 // 8 or (layer - 30 // 8) % 3 == 2

    def recipe(name: str) -> str:
        if name == "token_embd.weight":
            return "q6_k"
        more = more_bits(int(name.split(".")[1]))
        if name.endswith(("ffn_down.weight", "ffn_down_exps.weight")):
            # rows of 2112 / 704 are not whole 256-blocks: llama.cpp falls back from
            # q6_K to q8_0 and from q5_K to q5_1
            return "q8_0" if more else "q5_1"
        if name.endswith("attn_v.weight") and more:
            return "q6_k"
        return "q5_k"

    b, e = Builder(recipe), 2816
    b.add("token_embd.weight", e, 262144)
    b.add("rope_freqs.weight", 256)
    for i in range(30):
        p, hd, nkv = f"blk.{i}.", (512 if i in glob else 256), (2 if i in glob else 8)
        b.add(p + "attn_norm.weight", e)
        b.add(p + "attn_q.weight", e, 16 * hd)
        b.add(p + "attn_k.weight", e, nkv * hd)
        if i not in glob:  # global layers share K as V (no attn_v)
            b.add(p + "attn_v.weight", e, nkv * hd)
        b.add(p + "attn_output.weight", 16 * hd, e)
        b.add(p + "attn_q_norm.weight", hd)
        b.add(p + "attn_k_norm.weight", hd)
        b.add(p + "post_attention_norm.weight", e)
        b.add(p + "layer_output_scale.weight", 1)
        b.add(p + "ffn_norm.weight", e)
        b.add(p + "ffn_gate.weight", e, 2112)
        b.add(p + "ffn_up.weight", e, 2112)
        b.add(p + "ffn_down.weight", 2112, e)
        b.add(p + "post_ffw_norm.weight", e)
        b.add(p + "ffn_gate_inp.weight", e, 128, type="f32")
        b.add(p + "ffn_gate_inp.scale", e)
        b.add(p + "pre_ffw_norm_2.weight", e)
        b.add(p + "post_ffw_norm_1.weight", e)
        b.add(p + "post_ffw_norm_2.weight", e)
        b.add(p + "ffn_gate_up_exps.weight", e, 2 * 704, 128)
        b.add(p + "ffn_down_exps.weight", 704, e, 128)
        b.add(p + "ffn_down_exps.scale", 128)
    b.add("output_norm.weight", e)
    hp = HParams(
        n_layer=30,
        n_embd=e,
        n_head=16,
        n_head_kv=tuple(2 if i in glob else 8 for i in range(30)),
        key_length=512,
        value_length=512,
        key_length_swa=256,
        value_length_swa=256,
        n_ff=2112,
        n_expert=128,
        n_expert_used=8,
        expert_ff=704,
        sliding_window=1024,
        swa_layers=tuple(i for i in range(30) if i not in glob),
        vocab=262144,
        n_ctx_train=262144,
    )
    return Profile("Gemma-4 26B-A4B Q5_K_M", "gemma4", GEMMA_SOURCE, hp, tuple(fold(b.tensors)))


GEMMA_SOURCE = """\
Hand-written (no GGUF at hand); rebuilt by tests/tools/seed_profiles.py.
Hyperparameters from public sources: 30 layers, n_embd 2816, 16 heads, 8 KV heads x 256
on sliding layers, 128 experts x 704 (8 used), dense/shared FFN 2112, sliding window 1024,
pattern 5 sliding : 1 global, key/value 512 and 256 on sliding layers, vocab and ctx 262144
(google/gemma.cpp PR 889, llama.cpp issue logs of gemma4 GGUFs: embedding 2816,
sliding_window_pattern [true x5, false, ...], key_length_swa 256, expert_feed_forward_length
704). Global layers: 2 KV heads, derived from seed 004 ("Total KV at 32,768 context in q4
precision: 461 megabytes": 25 x 5120 x 8 x 256 x 2 x 18/32 + 5 x 32768 x 2 x 512 x 2 x
18/32 B = 461.25 MiB) and K shared as V (no attn_v; transformers PR 46467).
Tensor list: ik_llama.cpp's create_gemma4_tensors (ik-llama-cpp-python 0.1.5 sdist):
658 tensors, as a public load log of gemma-4-26B-A4B-it-qat-UD-Q4_K_XL reports ("658
tensors"); output shares token_embd.
NOT KNOWN: the per-tensor types of the Q5_K_M file. Assumed: llama.cpp's Q5_K_M rules
(q5_K; token_embd q6_K; attn_v and ffn_down q6_K on use_more_bits layers 0-2, 5, 8, ...,
23, 26-29), where ffn_down(_exps) rows of 2112/704 elements are not whole 256-element
k-quant blocks, so llama.cpp's fallback gives q8_0 (for q6_K) and q5_1 (for q5_K).
Seed 004: "Model loaded at 18.15 GiB"; this profile totals 17.8 GiB (see its test).
"""


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for filename, build in BUILDERS.items():
        (OUT / filename).write_text(dump_profile(build()), encoding="utf-8")
        print(f"wrote {OUT / filename}")


BUILDERS: dict[str, Callable[[], Profile]] = {
    "glm-5.1-iq3_ks.yaml": glm51,
    "qwen3-coder-next-q4_0.yaml": coder_next_q4_0,
    "qwen3-coder-next-iq4_kss.yaml": coder_next_iq4_kss,
    "qwen3.5-397b-a17b-q4_k_m.yaml": qwen35_397b,
    "gemma-4-26b-a4b-q5_k_m.yaml": gemma4_26b,
}

if __name__ == "__main__":
    main()
