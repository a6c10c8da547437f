"""ggml type sizes: checked against public per-tensor byte tables and the sources' block sizes."""

from __future__ import annotations

import pytest

from layoutgen.models.quants import IK, UnknownType, by_id, by_name, mainline, tensor_nbytes


@pytest.mark.parametrize(
    ("qtype", "shape", "expected"),
    [  # tensor-tables/GLM-5.1.md, columns for each quant map (public Thireus tensor maps)
        ("iq3_k", (6144, 2048, 256), 1384120320),
        ("iq2_ks", (6144, 2048, 256), 881852416),  # 2 bytes of row scale per row
        ("iq2_ks", (6144, 2048), 3444736),
        ("iq4_k", (6144, 154880), 535265280),
        ("q8_0", (192, 512, 64), 6684672),
        ("q4_1", (12288, 6144), 47185920),
        ("q5_0", (192, 512, 64), 4325376),
        ("iq1_s", (6144, 2048, 256), 629145600),
        # tensor-tables/Qwen3.5-397B-A17B.md
        ("q6_k", (4096, 248320), 834355200),
        ("iq4_xs", (4096, 1024, 512), 1140850688),
        ("iq2_ks", (1024, 4096, 512), 591396864),
        ("f32", (4096, 1), 16384),
        # tensor-tables/gemma-4-31B-it.md
        ("iq5_k", (5376, 4096), 15138816),
    ],
)
def test_sizes_match_public_tensor_tables(
    qtype: str, shape: tuple[int, ...], expected: int
) -> None:
    assert tensor_nbytes(qtype, shape) == expected


def test_seed_001_expert_sizes_are_iq3_ks_and_iq4_ks() -> None:
    # seed 001: "gate_exps = 1225 MiB, down_exps = 1638 MiB"
    assert tensor_nbytes("iq3_ks", (6144, 2048, 256)) == 1225 * 2**20
    assert tensor_nbytes("iq4_ks", (2048, 6144, 256)) == 1638 * 2**20


def test_ik_and_mainline_ids() -> None:
    # ggml.h of ik_llama.cpp: GGML_TYPE_IQ3_KS = 156, IQ4_KSS = 146; mainline has neither
    assert by_id(156, "ik").name == "iq3_ks" and by_id(146, "ik").row_meta == 4
    with pytest.raises(UnknownType, match="unknown mainline ggml type id 156"):
        by_id(156, "mainline")
    # mainline MXFP4 = 39 in both; ik's q8_K block is 296 bytes, mainline's 292
    assert mainline()[39].name == IK[39].name == "mxfp4"
    assert (mainline()[15].type_size, IK[15].type_size) == (292, 296)


def test_unknown_names_and_partial_blocks_are_errors() -> None:
    with pytest.raises(UnknownType, match="unknown ggml type 'q9_9'"):
        by_name("q9_9")
    with pytest.raises(UnknownType, match="a row of 100 elements is not a whole number of q6_k"):
        tensor_nbytes("q6_K", (100, 3))


def test_mainline_table_matches_the_installed_gguf_package() -> None:
    """The written-out mainline table is gguf's, type for type."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    from layoutgen.models.quants import MAINLINE

    expected = {int(q.value): (q.name.lower(), *GGML_QUANT_SIZES[q]) for q in GGMLQuantizationType}
    got = {i: (q.name, q.block_size, q.type_size) for i, q in MAINLINE.items()}
    assert got == expected
