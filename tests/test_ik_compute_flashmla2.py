"""MLA-2 with flash attention before ik_llama.cpp PR #260 (rule flash-mla-2-by-step,
build 3590): a GPU build cast the layer's cache to f32 and decompressed every head at
once, whatever -amb said (compute.py ``_f32_decompressed``).  Checked on the held-out
logs of PR #259's branch (one A6000, 32768 cells, q8_0, -amb 2048: 8,470 MiB) and
PR #239's (16 RTX 3090, 2048 cells, f16: 810 MiB a GPU)."""

from __future__ import annotations

from pathlib import Path

import pytest
from ruamel.yaml import YAML

from tests.truth import table
from tests.truth.holdout_report import HOLDOUT

PR259 = HOLDOUT / "ik-deepseek2-pr259-ubergarm-a6000-mla2-amb2048.yaml"
PR239 = HOLDOUT / "ik-deepseek2-pr239-davidsyoung-16x3090-mla2-fa-ppl.yaml"
MiB = 1 << 20


def _compute(path: Path, tmp: Path, version: str | None = None) -> dict[str, tuple[int, int]]:
    """Buffer -> (logged, planned) compute of PATH's record, at VERSION when given."""
    if version is not None:
        yaml = YAML(typ="safe", pure=True)
        record = yaml.load(path.read_text())
        record["version"] = version
        path = tmp / path.name
        with path.open("w") as f:
            yaml.dump(record, f)
    outcome = table.evaluate(path, tmp)
    assert outcome.reason is None, outcome.reason
    return {r.buffer: (r.logged, r.planned or 0) for r in outcome.rows if r.field == "compute"}


def test_before_pr_260_the_whole_cache_is_decompressed_in_f32(tmp_path: Path) -> None:
    logged, planned = _compute(PR259, tmp_path)["CUDA0"]
    assert logged == 8470 * MiB
    # f32 cache 72 + kv_f32 4096 + repeated rope 1024 + K f32 3072 (+ q 48, inputs)
    assert planned == pytest.approx(logged, rel=0.02)


def test_from_pr_260_amb_bounds_the_step(tmp_path: Path) -> None:
    before = _compute(PR259, tmp_path, "3589")["CUDA0"][1]
    after = _compute(PR259, tmp_path, "3590")["CUDA0"][1]
    # 3590: -amb 2048 halves the heads to 64 a step, all steps' K and V kept (before
    # build 4156): well under the f32 path's 8.3 GiB
    assert after < 0.7 * before


def test_sixteen_gpus_each_hold_their_layers_f32_decompression(tmp_path: Path) -> None:
    found = _compute(PR239, tmp_path)
    gpus = [b for b in found if b.startswith("CUDA") and b != "CUDA_Host"]
    assert len(gpus) == 16
    for buf in gpus:
        logged, planned = found[buf]
        assert -0.15 <= planned / logged - 1 <= 0.05, buf
