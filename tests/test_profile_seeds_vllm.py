"""The hand-written safetensors profiles hold the figures their seeds give.

Seed 004: the AutoRound INT4 quant "preserves the MTP projection weights at 280MB";
the NVFP4 one keeps attention in BF16 ("NVFP4 only quantizes MLP layers, attention
stays BF16", of Gemma's, which the tower's NVFP4 Qwen shares as an assumption); and
"Each model needs ~14-15GB" per card at tensor parallel 2.  Seed 000: "Dense ~30B".
"""

from __future__ import annotations

from layoutgen.models.profile import load_profile

from conftest import ROOT

MODELS = ROOT / "layouts" / "models"


def test_the_int4_quant_keeps_its_280_mb_mtp_head() -> None:
    profile = load_profile(MODELS / "qwen3.6-27b-int4-autoround.yaml")
    mtp = sum(t.nbytes for t in profile.tensors() if t.name.startswith("mtp."))
    assert abs(mtp - 280e6) / 280e6 < 0.10  # "at 280MB"
    assert profile.hparams.nextn_layers == 1 and profile.format == "safetensors"


def test_the_nvfp4_checkpoint_keeps_full_attention_in_bf16() -> None:
    profile = load_profile(MODELS / "qwen3.6-27b-nvfp4.yaml")
    attention = [
        t for t in profile.tensors() if ".self_attn." in t.name and t.name.endswith("proj.weight")
    ]
    assert attention and {t.type for t in attention} == {"bf16"}


def test_each_tower_model_is_the_seeds_14_to_15_gb_a_card_at_most() -> None:
    """The weights alone, split over two cards: under the 14-15 GB the seed books."""
    for name in ("qwen3.6-27b-int4-autoround.yaml", "qwen3.6-27b-nvfp4.yaml"):
        per_card = load_profile(MODELS / name).total_bytes / 2
        assert per_card < 15 * 2**30, name


def test_the_seed_000_gpu_lane_is_a_dense_30b_class_model() -> None:
    profile = load_profile(MODELS / "qwen3-32b-fp8.yaml")
    params = sum(
        t.nbytes for t in profile.tensors() if t.type == "f8_e4m3"
    )  # one byte a parameter in FP8
    assert 25e9 < params < 35e9 and not profile.hparams.n_expert
