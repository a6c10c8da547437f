"""Spec diagnostics as data: one YAML file per rule, its exact output beside it.

tests/cases/invalid/<rule>.yaml must fail validation (exit 1) and print
exactly <rule>.out; tests/cases/warn/<rule>.yaml validates with warnings
(exit 0).  The first line of each case says which rule it exercises.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import run_cli

CASES = Path(__file__).parent / "cases"
INVALID = sorted((CASES / "invalid").glob("*.yaml"))
WARN = sorted((CASES / "warn").glob("*.yaml"))


def _check(case: Path, expected_code: int, update: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(case.parent)
    result = run_cli(["validate", case.name])
    golden = case.with_suffix(".out")
    if update:
        golden.write_text(result.stdout)
    assert result.code == expected_code, result.stdout + result.stderr
    assert result.stdout == golden.read_text()
    # Every line names a file (the case, or a profile it refers to) and a
    # position inside that file.
    for line in result.stdout.splitlines():
        name, row, col, _ = line.split(":", 3)
        lines = (case.parent / name).read_text().splitlines()
        assert 1 <= int(row) <= max(len(lines), 1)
        assert 1 <= int(col) <= len(lines[int(row) - 1]) + 1


def test_there_are_at_least_30_distinct_rules() -> None:
    assert len(INVALID) >= 30
    descriptions = [p.read_text().splitlines()[0] for p in INVALID]
    assert all(d.startswith("# ") for d in descriptions)
    assert len(set(descriptions)) == len(descriptions)


@pytest.mark.parametrize("case", INVALID, ids=[p.stem for p in INVALID])
def test_invalid(case: Path, update_golden: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    _check(case, 1, update_golden, monkeypatch)


@pytest.mark.parametrize("case", WARN, ids=[p.stem for p in WARN])
def test_warns(case: Path, update_golden: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    _check(case, 0, update_golden, monkeypatch)
    assert ": warning: " in (case.with_suffix(".out")).read_text()
