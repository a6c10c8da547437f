"""vLLM decode against public vLLM timings (tests/speed_data/vllm, issue 33 item 6)."""

from __future__ import annotations

from pathlib import Path

import pytest

from layoutgen.calibrate import vllm_table
from layoutgen.render.validate import validate_file
from layoutgen.solve import plan_speed
from layoutgen.solve.plan import SpeedPlan

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "tests/speed_data/vllm"


def test_at_least_ten_public_vllm_timings_with_tensor_parallel_and_mtp() -> None:
    records = vllm_table.load_dir(FOLDER)
    results = [(rec, r) for rec in records for r in rec.results]
    assert len(results) >= 10
    assert sum(rec.tp > 1 for rec, _ in results) >= 8
    assert sum(rec.mtp_tokens > 0 for rec, _ in results) >= 8
    assert {rec.link for rec in records} == set(vllm_table.LINKS)
    for rec in records:
        assert rec.source and rec.read_bytes > 0 and rec.draft_bytes > 0


def test_the_table_prices_seed004_as_the_plan_does() -> None:
    """The table's simplified vLLM step (one rank's bytes, MTP drafts, the default
    acceptance) gives seed 004's Genesis what plan_speed gives its layout."""
    rec = vllm_table.load(FOLDER / "seed004-2x5060ti-genesis.yaml")
    table = vllm_table.predict(rec, rec.results[0], vllm_table.PLAN)
    v = validate_file(ROOT / "layouts/vllm-tower-seed004.yaml")
    s = v.plan.service("genesis").speed
    assert isinstance(s, SpeedPlan)
    assert table == pytest.approx(s.decode_tps, rel=0.01)


def test_the_bytes_alone_overpredict_the_hybrid_27b_on_rtx_3090s() -> None:
    """What the check found, kept in sight: every Qwen3.6/3.8-27B result on RTX 3090s
    comes out at least 45 % fast on bytes alone, while seed 004 (fitted) and a dense
    Llama-2-7B AWQ on a 3090 are within 10 %."""
    rows = {x.record: x for x in vllm_table.rows(vllm_table.load_dir(FOLDER), vllm_table.PLAN)}
    club = [x for k, x in rows.items() if k.startswith("club3090-")]
    assert len(club) >= 9 and all(x.error > 0.45 for x in club)
    assert abs(rows["mlc35-3090-llama2-7b-awq"].error) < 0.10
    assert abs(rows["seed004-2x5060ti"].error) < 0.05


def test_acceptance_from_a_stated_mean_acceptance_length() -> None:
    a = vllm_table.acceptance_from_length(2.94, 3)  # club-3090#698: "acceptance length = 2.94"
    assert plan_speed.tokens_per_step(a, 3) == pytest.approx(2.94, abs=1e-6)
    assert 0.78 < a < 0.80
