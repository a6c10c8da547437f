"""The committed JSON Schema stays current, and every layout file points at it."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from ruamel.yaml import YAML

from conftest import ROOT, run_cli

SCHEMA_DIR = ROOT / "layouts" / "schema"
SPEC_SCHEMA = SCHEMA_DIR / "spec.schema.json"
SPECS = sorted(p for p in (ROOT / "layouts").glob("*.yaml")) + sorted(
    (ROOT / "layouts" / "invalid").glob("*.yaml")
)
PREFIX = "# yaml-language-server: $schema="


def test_committed_schema_is_current(update_golden: bool) -> None:
    printed = run_cli(["schema"]).stdout
    if update_golden:
        SPEC_SCHEMA.write_text(printed)
    assert SPEC_SCHEMA.read_text() == printed, "run: make schema (or pytest --update-golden)"


def test_there_are_example_layouts() -> None:
    assert len(SPECS) >= 8


@pytest.mark.parametrize("spec", SPECS, ids=[p.stem for p in SPECS])
def test_layout_names_its_schema_and_the_schema_accepts_it(spec: Path) -> None:
    first = spec.read_text().splitlines()[0]
    assert first.startswith(PREFIX), f"{spec} must start with {PREFIX}…"
    target = (spec.parent / first.removeprefix(PREFIX)).resolve()
    assert target == SPEC_SCHEMA
    # What an editor would do with it: the schema accepts the example.
    schema = json.loads(SPEC_SCHEMA.read_text())
    jsonschema.validate(YAML(typ="safe").load(spec.read_text()), schema)


def test_schema_refuses_what_validate_refuses() -> None:
    schema = json.loads(SPEC_SCHEMA.read_text())
    validator = jsonschema.Draft202012Validator(schema)
    bad = {
        "host": {"name": "x", "cpu": {"cores": 1, "threads": 1}, "ram": "8G", "ram_reserve": 0},
        "bogus": 1,
    }
    messages = sorted(e.message for e in validator.iter_errors(bad))
    assert any("'bogus' was unexpected" in m for m in messages)
    assert any("'8G'" in m for m in messages)
