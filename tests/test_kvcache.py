"""KV cache sizes against the seed logs and public figures (shared/data/model-facts.md).

Every expected number is independent of the code: a figure a runtime printed, or one
computed by hand in the comment beside it.  Tolerances are the log's own rounding.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from layoutgen import runtimes
from layoutgen.core.kvcache import (
    KVSettings,
    LayerCache,
    cells,
    device_bytes,
    layer_caches,
    n_ctx,
    streams,
    total_bytes,
)
from layoutgen.models.profile import HParams, Profile, load_profile
from layoutgen.runtimes.ik_llama_cpp import IkLlamaCpp
from layoutgen.runtimes.llama_cpp import LlamaCpp

IK, MAIN = IkLlamaCpp(), LlamaCpp()
MODELS = Path(__file__).resolve().parent.parent / "layouts" / "models"
MiB = 2**20


def _profile(name: str) -> Profile:
    return load_profile(MODELS / f"{name}.yaml")


def _ik(
    ctx: int, *, mla: int | None = None, flash_attn: bool = True, mtp: bool = False
) -> KVSettings:
    return KVSettings(IK, ctx, 1, 512, "q8_0", "q8_0", flash_attn, mla=mla, mtp=mtp)


def _main(ctx: int, *, flash_attn: bool = True) -> KVSettings:
    return KVSettings(MAIN, ctx, 1, 512, "q8_0", "q8_0", flash_attn)


def _mib(caches: tuple[LayerCache, ...] | list[LayerCache], *, cuda: bool | None) -> str:
    return f"{total_bytes(caches, cuda=cuda) / MiB:.2f}"  # as the runtimes print: %.2f


# --- GLM-5.1 IQ3_KS on ik_llama.cpp: seed 001 (ctx 32768, -ctk/-ctv q8_0, -mla 3, fa on) ---


def _glm(ctx: int) -> tuple[LayerCache, ...]:
    glm = _profile("glm-5.1-iq3_ks")
    return layer_caches(glm.hparams, _ik(ctx, mla=3), arch=glm.arch)


def test_glm_ik_has_78_mla_layers_and_no_nextn_cache() -> None:
    caches = _glm(32768)
    assert [c.layer for c in caches] == list(range(78))  # blk.78 (nextn) has none
    assert {c.kind for c in caches} == {"mla"}


def test_glm_ik_layer_bytes_raw_and_on_cuda() -> None:
    layer = _glm(32768)[0]
    # 576 (512 + 64) q8_0 elements = 18 blocks * 34 B = 612 B per cell, 32768 cells.
    assert layer.nbytes == 612 * 32768 == 20_054_016
    # ggml-cuda pads the 576-wide row by 448 elements (476 B), then 128-byte alignment.
    assert device_bytes(layer, cuda=True) == 20_054_528


def test_glm_ik_seed_001_kv_sizes() -> None:
    caches = _glm(32768)
    assert _mib(caches, cuda=None) == "1491.75"  # seed 001: "KV self size  = 1491.75 MiB"
    assert _mib(caches, cuda=True) == "1491.79"  # seed 001: "CUDA0 KV buffer size = 1491.79 MiB"
    assert _mib(caches[:41], cuda=True) == "784.15"  # seed 001: "CUDA0 KV buffer size = 784.15"
    assert _mib(caches[41:], cuda=True) == "707.64"  # seed 001: "CUDA1 KV buffer size = 707.64"


def test_glm_ik_seed_003_ctx_65536() -> None:
    # seed 003: "KV cache (ctx 65k, q8_0) | 2,984 MiB" (and "KV per 1k ctx ~46 MiB")
    caches = _glm(65536)
    assert round(total_bytes(caches, cuda=True) / MiB) == 2984
    assert round(total_bytes(caches) / MiB / 65.536) == 46  # per 1,000 tokens: 45.5


def test_glm_mainline_adds_the_dsa_indexer_cache() -> None:
    glm = _profile("glm-5.1-iq3_ks")
    caches = layer_caches(glm.hparams, _main(32768), arch=glm.arch)
    idx = [c for c in caches if c.kind == "indexer"]
    assert [c.layer for c in idx] == list(range(78))
    assert idx[0].nbytes == 128 // 32 * 34 * 32768  # one 128-wide q8_0 key per cell
    mla = [c for c in caches if c.kind == "mla"]
    assert total_bytes(mla) == 78 * 612 * 32768  # same c^KV as ik, K only


def test_nextn_layer_gets_a_cache_with_mtp() -> None:
    glm = _profile("glm-5.1-iq3_ks")
    caches = layer_caches(glm.hparams, _ik(32768, mtp=True))
    assert caches[-1].layer == 78 and len(caches) == 79


# --- Qwen3.5-397B-A17B: seed 003 (ik_llama.cpp, q8_0) ---


def test_qwen35_397b_seed_003_kv() -> None:
    hp = _profile("qwen3.5-397b-a17b-q4_k_m").hparams
    caches = layer_caches(hp, _ik(262144))
    kv = [c for c in caches if c.kind == "gqa"]
    assert [c.layer for c in kv] == list(range(3, 60, 4))  # 15 full-attention layers
    # seed 003: "KV cache (ctx 262k, q8_0) | — | 4,080 MiB" ("KV self size" counts K and V only)
    assert total_bytes(kv) == 4080 * MiB
    assert round(total_bytes(kv, cuda=True) / MiB) == 4080
    # seed 003: "KV per 1k ctx (q8_0) ~16 MiB" (15.6 per 1,000 tokens)
    assert round(total_bytes(kv) / MiB / 262.144) == 16
    # model-facts: "RS per seq = 45*(64*128*128 + 3*12288)*4 B = 195,379,200 B"
    rs = [c for c in caches if c.kind == "recurrent"]
    assert len(rs) == 45 and total_bytes(rs) == 195_379_200


# --- Gemma-4 26B-A4B on mainline: seed 004 ---


@pytest.mark.parametrize(
    ("parallel", "unified", "ubatch"),
    [
        (4, True, 1024),  # llama-server's automatic -np: 4 slots, unified KV; seed's -ub 1024
        (1, False, 4096),
    ],
)
def test_gemma4_seed_004_ring_buffer(parallel: int, unified: bool, ubatch: int) -> None:
    hp = _profile("gemma-4-26b-a4b-q5_k_m").hparams
    s = KVSettings(MAIN, 32768, parallel, ubatch, "q4_0", "q4_0", kv_unified=unified)
    # seed 004: "25 of its 30 layers use a fixed 5,120-token ring buffer"
    assert cells(hp, s, swa=True) == 5120
    caches = layer_caches(hp, s)
    assert sum(c.kind == "swa" for c in caches) == 25
    # seed 004: "Total KV at 32,768 context in q4 precision: 461 megabytes" (MiB: 461.25)
    assert round(total_bytes(caches, cuda=True) / MiB) == 461


@pytest.mark.parametrize(
    ("window", "ubatch", "expected"),
    [(128, 512, 768), (1024, 512, 1536)],  # model-facts: "gpt-oss 128+512 -> 768; gemma -> 1536"
)
def test_mainline_swa_cells(window: int, ubatch: int, expected: int) -> None:
    hp = HParams(n_layer=2, n_head=8, n_head_kv=8, key_length=64, sliding_window=window)
    s = KVSettings(MAIN, 131072, 1, ubatch, "f16", "f16")
    assert cells(hp, s, swa=True) == expected
    assert cells(hp, KVSettings(MAIN, 131072, 1, ubatch, "f16", "f16", swa_full=True),
                 swa=True) == 131072  # fmt: skip
    assert cells(hp, KVSettings(IK, 131072, 1, ubatch, "f16", "f16"), swa=True) == (
        131072  # model-facts: "ik_llama ... uses full n_ctx for SWA layers too"
    )


# --- Recurrent state (model-facts "Recurrent (qwen3next/qwen35/qwen35moe)") ---


@pytest.mark.parametrize("runtime", ["llama.cpp", "ik_llama.cpp"])
def test_qwen3_next_state_and_kv(runtime: str) -> None:
    hp = _profile("qwen3-coder-next-q4_0").hparams
    s = KVSettings(runtimes.get(runtime), 131072, 1, 512, "f16", "f16")
    caches = layer_caches(hp, s)
    rs = [c for c in caches if c.kind == "recurrent"]
    assert total_bytes(rs) == 79_036_416  # model-facts: "RS per seq ... = 75.375 MiB"
    kv = [c for c in caches if c.kind == "gqa"]
    assert total_bytes(kv) == 3072 * MiB  # model-facts: "131072 ctx -> 3072 MiB" (f16)


def test_qwen35_35b_state_per_sequence() -> None:
    # model-facts: Qwen3.5-35B-A3B, 40 layers (10 attention), ssm inner 4096, 32 v-heads;
    # "RS per seq = 30*(32*128*128 + 3*8192)*4 = 62.8125 MiB (log 62.81 MiB)"
    hp = HParams(
        n_layer=40, n_embd=2048, n_head=16, n_head_kv=2, key_length=256, value_length=256,
        recurrent_layers=tuple(i for i in range(40) if i % 4 != 3), ssm_conv_kernel=4,
        ssm_state_size=128, ssm_inner_size=4096, ssm_group_count=16, ssm_time_step_rank=32,
    )  # fmt: skip
    for runtime in ("llama.cpp", "ik_llama.cpp"):
        s = KVSettings(runtimes.get(runtime), 4096, 1, 512, "f16", "f16")
        rs = [c for c in layer_caches(hp, s) if c.kind == "recurrent"]
        assert f"{total_bytes(rs) / MiB:.2f}" == "62.81"
        assert total_bytes(rs) / MiB == 62.8125
        s3 = KVSettings(runtimes.get(runtime), 4096, 3, 512, "f16", "f16")
        rs3 = [c for c in layer_caches(hp, s3) if c.kind == "recurrent"]
        assert total_bytes(rs3) == 3 * total_bytes(rs)  # one state per sequence


# --- DeepSeek MLA (model-facts: "DeepSeek f16: 70,272 B/token ; q8_0: 37,332 B/token") ---

DEEPSEEK = HParams(n_layer=61, n_head=128, n_head_kv=128, key_length=192, value_length=128,
                   kv_lora_rank=512, rope_dim=64)  # fmt: skip


@pytest.mark.parametrize(("ctype", "per_token"), [("f16", 70_272), ("q8_0", 37_332)])
@pytest.mark.parametrize("runtime", ["llama.cpp", "ik_llama.cpp"])
def test_deepseek_mla_bytes_per_token(runtime: str, ctype: str, per_token: int) -> None:
    s = KVSettings(runtimes.get(runtime), 16384, 1, 512, ctype, ctype)
    assert total_bytes(layer_caches(DEEPSEEK, s)) == per_token * 16384


def test_ik_mla_levels_without_flash_attention() -> None:
    mla1 = layer_caches(DEEPSEEK, KVSettings(IK, 4096, 1, 512, "q8_0", "f16",
                                             flash_attn=False, mla=1))  # fmt: skip
    names = [(t.name, t.qtype.name, t.ne0, t.rows) for t in mla1[0].tensors]
    assert names == [("k", "q8_0", 576, 4096), ("v", "f16", 512 * 4096, 1)]  # c^KV and kv^T
    mla3 = layer_caches(DEEPSEEK, KVSettings(IK, 4096, 1, 512, "q8_0", "f16",
                                             flash_attn=False, mla=3))  # fmt: skip
    assert [(t.qtype.name, t.ne0) for t in mla3[0].tensors] == [("f16", 576)]  # type_v, K only
    mla0 = layer_caches(DEEPSEEK, _ik(4096, mla=0))
    assert mla0[0].kind == "gqa" and mla0[0].nbytes == 4096 * 128 * (192 + 128) * 34 // 32


def test_quantized_v_without_flash_attention_is_refused() -> None:
    with pytest.raises(ValueError, match="without flash attention"):
        layer_caches(DEEPSEEK, _ik(4096, flash_attn=False))
    hp = HParams(n_layer=1, n_head=8, n_head_kv=8, key_length=128)
    with pytest.raises(ValueError, match="without flash attention"):
        layer_caches(hp, _main(4096, flash_attn=False))


# --- Context padding and streams ---


@pytest.mark.parametrize(("ctx", "padded"), [(16000, 16128), (16768, 16896)])  # model-facts
def test_ik_pads_context_to_256(ctx: int, padded: int) -> None:
    assert n_ctx(HParams(n_layer=1), _ik(ctx)) == padded


def test_ik_pads_to_32_without_flash_attention() -> None:
    s = KVSettings(IK, 16000, 1, 512, "f16", "f16", flash_attn=False)
    assert n_ctx(HParams(n_layer=1), s) == 16000


def test_mainline_streams_per_sequence() -> None:
    hp = HParams(n_layer=1, n_head=16, n_head_kv=2, key_length=256, value_length=256)
    s = KVSettings(MAIN, 100_000, 3, 512, "f16", "f16")
    # n_ctx = PAD(100000, 256) = 100096; per sequence PAD(100096 / 3, 256) = 33536
    assert (cells(hp, s, swa=False), streams(s)) == (33536, 3)
    k, v = layer_caches(hp, s)[0].tensors
    assert (k.ne0, k.rows, v.rows) == (512, 33536 * 3, 33536 * 3)
    unified = KVSettings(MAIN, 100_000, 3, 512, "f16", "f16", kv_unified=True)
    assert (cells(hp, unified, swa=False), streams(unified)) == (100096, 1)


# --- Device padding and alignment ---


def test_cuda_pads_only_quantized_rows() -> None:
    hp = HParams(n_layer=1, n_head=16, n_head_kv=2, key_length=256, value_length=256)
    f16 = layer_caches(hp, KVSettings(IK, 1000, 1, 512, "f16", "f16"))[0]
    assert device_bytes(f16, cuda=True) == f16.nbytes == 2 * 1024 * 512 * 2  # 1000 -> 1024
    q8 = layer_caches(hp, _ik(1000))[0]
    # ik's K is [256, 2*1024]: 256 elements short of 512, one q8_0 row of 256 = 272 B more,
    # 557,056 + 272 rounded up to 128 = 557,440; V is 1-d (2*256*1024 elements): no padding.
    k, v = q8.tensors
    assert (k.nbytes, v.nbytes) == (557_056, 557_056)
    assert device_bytes(q8, cuda=True) == 557_440 + 557_056
    assert device_bytes(q8, cuda=False) == q8.nbytes  # host: no padding, 32-byte aligned


def test_host_alignment_is_32_bytes() -> None:
    hp = HParams(n_layer=1, ssm_conv_kernel=4, ssm_state_size=1, ssm_inner_size=1,
                 recurrent_layers=(0,))  # fmt: skip
    r, s = layer_caches(hp, _main(256))[0].tensors  # r: 3 f32 = 12 B, s: 1 f32 = 4 B
    assert (r.nbytes, s.nbytes) == (12, 4)
    assert device_bytes(layer_caches(hp, _main(256))[0], cuda=False) == 64
    assert device_bytes(layer_caches(hp, _main(256))[0], cuda=True) == 256


def test_mainline_transposed_v_uses_the_widest_layer() -> None:
    hp = _profile("gemma-4-26b-a4b-q5_k_m").hparams
    s = KVSettings(MAIN, 8192, 1, 512, "f16", "f16", flash_attn=False)
    glob = next(c for c in layer_caches(hp, s) if c.kind == "gqa")
    k, v = glob.tensors
    assert (k.ne0, v.ne0) == (2 * 512, 8 * 256)  # V padded to the SWA layers' 2048
