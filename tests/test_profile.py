"""Profile files: schema and semantic errors located by line:col, and exact round trips."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from layoutgen.errors import InvalidInput
from layoutgen.models.profile import Profile, dump_profile, json_schema, load_profile
from layoutgen.models.tensors import Folded

ROOT = Path(__file__).resolve().parent.parent
HEAD = """\
schema: 1
name: tiny
arch: llama
source: made up for a test
hparams:
  n_layer: 4
"""


def _errors(tmp_path: Path, text: str) -> list[str]:
    path = tmp_path / "p.yaml"
    path.write_text(text)
    with pytest.raises(InvalidInput) as info:
        load_profile(path, "p.yaml")
    return [d.gcc() for d in info.value.diagnostics]


def test_bytes_duplicates_and_layers_are_checked(tmp_path: Path) -> None:
    text = (
        HEAD
        + """\
tensors:
  - {name: "blk.{0..3}.q", type: q6_K, shape: [256, 256], bytes: 53760}
  - {name: "blk.{3..5}.k", type: iq9_zz, shape: [256, 256], bytes: 1}
  - {name: blk.3.q, type: f32, shape: [256], bytes: 5}
"""
    )
    # q6_K: 210 bytes per 256 -> 256 rows x 210 = 53760; f32 [256] = 1024 bytes
    assert _errors(tmp_path, text) == [
        "p.yaml:9:12: error: tensors[1].name: layer 5 is beyond hparams.n_layer 4 (blk.0 .. blk.3)",
        "p.yaml:10:12: error: tensors[2].name: 'blk.3.q' is already listed by tensors[0]; "
        "list it once",
        "p.yaml:10:53: error: tensors[2].bytes: 5 does not match f32 [256], which is 1024 "
        "bytes; write 1024, or fix the type or shape",
    ]


def test_schema_errors_are_located_with_did_you_mean(tmp_path: Path) -> None:
    text = HEAD.replace("n_layer: 4", "n_layers: 4") + "tensors: []\n"
    errors = _errors(tmp_path, text)
    assert "p.yaml:6:3: error: hparams: unknown key 'n_layers'; did you mean 'n_layer'?" in errors
    assert any(e.startswith("p.yaml:7:10: error: tensors:") for e in errors)


def test_per_layer_lists_must_cover_every_layer(tmp_path: Path) -> None:
    text = HEAD + "  n_head_kv: [8, 2]\ntensors:\n  - {name: a, type: f32, shape: [1], bytes: 4}\n"
    assert _errors(tmp_path, text) == [
        "p.yaml:7:14: error: hparams.n_head_kv: 2 values for 4 layers; write one per layer, "
        "or one number"
    ]


def test_dump_loads_back_equal(tmp_path: Path) -> None:
    source = "line one\n  indented: {not yaml}\n\n# not a comment\n"
    from layoutgen.models.profile import HParams

    profile = Profile(
        'n: "x"',
        "llama",
        source,
        HParams(n_layer=3, swa_layers=(0, 1)),
        (Folded("blk.{0..2}.w", "q4_0", (32, 2), 36),),
    )
    path = tmp_path / "d.yaml"
    path.write_text(dump_profile(profile))
    assert load_profile(path) == profile
    assert dump_profile(load_profile(path)) == path.read_text()


@pytest.mark.parametrize("name", sorted(p.name for p in (ROOT / "layouts/models").glob("*.yaml")))
def test_committed_profiles_are_in_canonical_form(name: str) -> None:
    path = ROOT / "layouts/models" / name
    assert dump_profile(load_profile(path)) == path.read_text()


def test_committed_json_schema_is_current() -> None:
    committed = json.loads((ROOT / "layouts/schema/profile.schema.json").read_text())
    assert committed == json_schema()
