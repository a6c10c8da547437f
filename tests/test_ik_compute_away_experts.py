"""Experts overridden (-ot) to a GPU that does not hold their layers: the scheduler runs
each MoE op where its weights are, so that GPU's compute buffer holds those layers'
expert activations beside its own layers' (compute.estimate, ``away``).  Checked on ik
discussion 491's held-out log: Qwen3-235B on four GPUs at ub 4096, blk 30-45's experts
on CUDA2 while their layers are on CUDA1 (split by count): CUDA2 logs 836 MiB."""

from __future__ import annotations

from pathlib import Path

from ruamel.yaml import YAML

from tests.truth import table
from tests.truth.holdout_report import HOLDOUT

D491 = HOLDOUT / "ik-qwen3moe-d491-ph0rk0z-4gpu-ot-amb64.yaml"
TO_CUDA2 = r"blk\.(30|31|32|33|34|35|36|37|38|39|40|41|42|43|44|45|)\.ffn_.*_exps.=CUDA2"


def _compute(path: Path, tmp: Path) -> dict[str, tuple[int, int]]:
    outcome = table.evaluate(path, tmp)
    assert outcome.reason is None, outcome.reason
    return {r.buffer: (r.logged, r.planned or 0) for r in outcome.rows if r.field == "compute"}


def _without_cuda2_rule(tmp: Path) -> Path:
    """The record with blk 30-45's experts left to the last rule (CPU)."""
    yaml = YAML(typ="safe", pure=True)
    record = yaml.load(D491.read_text())
    overrides = record["settings"]["overrides"]
    assert TO_CUDA2 in overrides
    record["settings"]["overrides"] = [o for o in overrides if o != TO_CUDA2]
    path = tmp / D491.name
    with path.open("w") as f:
        yaml.dump(record, f)
    return path


def test_a_gpu_runs_the_experts_it_holds_for_other_layers(tmp_path: Path) -> None:
    logged, planned = _compute(D491, tmp_path)["CUDA2"]
    assert planned >= logged


def test_without_them_it_needs_only_its_own_layers(tmp_path: Path) -> None:
    with_them = _compute(D491, tmp_path)["CUDA2"][1]
    without = _compute(_without_cuda2_rule(tmp_path), tmp_path)["CUDA2"][1]
    assert without < with_them
