"""The hand-written seed profiles reproduce the numbers the seed logs report.

Each expected value quotes its seed; tolerances are stated with the reason.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from layoutgen.models.profile import Profile, load_profile

MODELS = Path(__file__).resolve().parent.parent / "layouts" / "models"
MiB, GiB = 2**20, 2**30


def _load(name: str) -> Profile:
    return load_profile(MODELS / name)


def _bytes(profile: Profile, pred: object) -> int:
    assert callable(pred)
    return sum(t.nbytes for t in profile.tensors() if pred(t))


@pytest.mark.parametrize("name", sorted(p.name for p in MODELS.glob("*.yaml")))
def test_every_profile_loads_and_starts_with_the_schema_comment(name: str) -> None:
    text = (MODELS / name).read_text()
    assert text.startswith("# yaml-language-server: $schema=../schema/profile.schema.json\n")
    assert _load(name).source.strip()


def test_glm51_matches_seed_001() -> None:
    p = _load("glm-5.1-iq3_ks.yaml")
    tensors = list(p.tensors())
    # tensor-tables/GLM-5.1.md: "GLM-5.1: 1809 tensors, blk indices 0..78"
    assert len(tensors) == 1809
    # seed 001: "model size = 320.216 GiB" (printed to 3 decimals: +-0.0005 GiB)
    assert p.total_bytes / GiB == pytest.approx(320.216, abs=0.0005)
    # seed 001: "gate_exps = 1225 MiB, down_exps = 1638 MiB, up_exps = 1225 MiB" (exact)
    for layer in (3, 40, 77):
        by = {t.name.split(".")[2]: t.nbytes for t in tensors if t.layer == layer}
        assert (by["ffn_gate_exps"], by["ffn_down_exps"], by["ffn_up_exps"]) == (
            1225 * MiB,
            1638 * MiB,
            1225 * MiB,
        )
    # seed 001, all experts on the host: "CUDA_Host buffer size = 307110.47 MiB" =
    # blk.3-77 experts (blk.78 nextn is not loaded) + token_embd; printed to 0.01 MiB
    host = _bytes(
        p, lambda t: ("_exps" in t.name and t.layer != 78) or t.name == "token_embd.weight"
    )
    assert host / MiB == pytest.approx(307110.47, abs=0.005)
    # seed 003: "CPU pinned host holds 56 layers = 228,928 MiB of experts"
    assert 56 * _bytes(p, lambda t: "_exps" in t.name and t.layer == 3) == 228928 * MiB
    # seed 001 logs CUDA0 14498.95 MiB for everything else ik loads: every non-expert
    # tensor of blk.0-77 (DSA indexer included), blk.78's attn_k_b/attn_v_b, output.
    # Those types are fitted (see the profile's source:); 0.02 % short, to the MiB.
    gpu = _bytes(
        p,
        lambda t: (
            "_exps" not in t.name
            and t.name != "token_embd.weight"
            and (t.layer != 78 or t.name.endswith(("attn_k_b.weight", "attn_v_b.weight")))
        ),
    )
    assert gpu / MiB == pytest.approx(14498.95, abs=3)


def test_glm51_hparams_match_seed_001() -> None:
    hp = _load("glm-5.1-iq3_ks.yaml").hparams
    # seed 001: n_layer 79, n_expert 256, n_expert_used 8, n_layer_dense_lead 3; layer 78 nextn
    assert (hp.n_layer, hp.n_expert, hp.n_expert_used, hp.leading_dense, hp.nextn_layers) == (
        79,
        256,
        8,
        3,
        1,
    )
    # DESIGN §5: MLA KV = 576 = kv_lora_rank + rope_dim per layer and token
    assert (hp.kv_lora_rank or 0) + (hp.rope_dim or 0) == 576


def test_coder_next_q4_0_matches_seed_001() -> None:
    p = _load("qwen3-coder-next-q4_0.yaml")
    # seed 001 final layout: "weights 45GB" per Q4_0 worker; the text rounds to whole GB
    assert p.total_bytes / 1e9 == pytest.approx(45, abs=0.5)
    hp = p.hparams
    # seed 001: "48 layers: 36 DeltaNet (no KV cache) + 12 Gated Attention (KV heads=2)"
    assert hp.n_layer == 48 and len(hp.recurrent_layers or ()) == 36 and hp.n_head_kv == 2


def test_coder_next_iq4_kss_matches_seed_001() -> None:
    p = _load("qwen3-coder-next-iq4_kss.yaml")
    # seed 001 quant table: IQ4_KSS weights "39 GiB" (whole GiB: +-0.5)
    assert p.total_bytes / GiB == pytest.approx(39, abs=0.5)
    q4 = _load("qwen3-coder-next-q4_0.yaml")
    assert sorted(t.name for t in p.tensors()) == sorted(t.name for t in q4.tensors())


def test_qwen35_matches_seed_003() -> None:
    p = _load("qwen3.5-397b-a17b-q4_k_m.yaml")
    # tensor-tables/Qwen3.5-397B-A17B.md: "1098 tensors, blk indices 0..59"
    assert len(list(p.tensors())) == 1098
    # seed 003: "--n-cpu-moe 15 ... blk.0-blk.14 experts landing on CUDA_Host ... The
    # measured CUDA_Host is 56,710 MiB, which matches 15 x 3,712 MiB"; + token_embd
    per_layer = _bytes(p, lambda t: "_exps" in t.name and t.layer == 0)
    assert per_layer == 3712 * MiB
    host = _bytes(
        p, lambda t: ("_exps" in t.name and (t.layer or 0) < 15) or t.name == "token_embd.weight"
    )
    assert round(host / MiB) == 56710 + 1  # 56710.63 MiB; the seed prints it truncated
    # seed 003: "Q4_K_M mixed (4.93 bpw)" over the 396.475 B parameters of the bf16 total in
    # tensor-tables (792950303744 B / 2); "Model size 228 GiB" is rounded in a table (+-1).
    bpw = p.total_bytes * 8 / (792950303744 / 2)
    assert bpw == pytest.approx(4.93, abs=0.005)
    assert p.total_bytes / GiB == pytest.approx(228, abs=1.0)


def test_gemma4_matches_seed_004() -> None:
    p = _load("gemma-4-26b-a4b-q5_k_m.yaml")
    hp = p.hparams
    # seed 004: "Gemma 4 uses sliding window attention on 25 of its 30 layers"
    assert hp.n_layer == 30 and len(hp.swa_layers or ()) == 25
    # seed 004: "Model loaded at 18.15 GiB"; types are assumed (see source:), so 3 %
    assert p.total_bytes / GiB == pytest.approx(18.15, rel=0.03)
    # seed 004: "Total KV at 32,768 context in q4 precision: 461 megabytes" with a
    # 5,120-cell ring on the sliding layers; q4_0 is 18 bytes per 32 values
    assert isinstance(hp.n_head_kv, tuple)
    kv = 0.0
    for layer in range(hp.n_layer):
        swa = layer in (hp.swa_layers or ())
        cells = 5120 if swa else 32768
        k = hp.key_length_swa if swa else hp.key_length
        v = hp.value_length_swa if swa else hp.value_length
        kv += cells * hp.n_head_kv[layer] * ((k or 0) + (v or 0)) * 18 / 32
    assert kv / MiB == pytest.approx(461, abs=0.5)
