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


# -- sizes checked as the solver uses them (issue 31) --------------------------------

MODELS = ROOT / "layouts" / "models"


def _mutated(tmp_path: Path, profile: str, *edits: tuple[str, str]) -> Path:
    text = (MODELS / profile).read_text(encoding="utf-8")
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new)
    path = tmp_path / profile
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("profile", "edit", "message"),
    [
        (
            "glm-5.1-iq3_ks.yaml",
            ("  kv_lora_rank: 512\n", "  kv_lora_rank: 4097\n"),
            "42:17: error: hparams.kv_lora_rank: 4097 does not match "
            "blk.0.attn_kv_a_mqa.weight (kv_lora_rank + rope_dim) (dimension 1 is 576); "
            "write the value from the GGUF",
        ),
        (
            "qwen3-coder-next-q4_0.yaml",
            ("  key_length: 256\n", "  key_length: 1\n"),
            "24:15: error: hparams.key_length: 1 does not match blk.11.attn_k.weight "
            "(n_head_kv x key_length) (dimension 1 is 512); write the value from the GGUF",
        ),
        (
            "qwen3-coder-next-q4_0.yaml",
            ("  value_length: 256\n", "  value_length: 0\n"),
            "25:17: error: hparams.value_length: 0 is no size; write the value from the GGUF, "
            "or leave the key out if the model has none",
        ),
        (
            "qwen3-coder-next-q4_0.yaml",
            ("  n_head_kv: 2\n", "  n_head_kv: 0\n"),
            "23:14: error: hparams.n_head_kv: 0 heads, yet the profile lists K/V tensors; "
            "write the value from the GGUF",
        ),
        (
            "qwen3-coder-next-q4_0.yaml",
            ("  n_expert_used: 10\n", "  n_expert_used: 600\n"),
            "28:18: error: hparams.n_expert_used: 600 experts used of 512; "
            "write the values from the GGUF",
        ),
    ],
)
def test_a_profile_is_valid_only_with_sizes_the_solver_can_use(
    tmp_path: Path, profile: str, edit: tuple[str, str], message: str
) -> None:
    """These profiles said "valid" alone and ended in a traceback (or a zero-byte KV
    cache) once a spec used them."""
    path = _mutated(tmp_path, profile, edit)
    with pytest.raises(InvalidInput) as info:
        load_profile(path, profile)
    assert [d.gcc() for d in info.value.diagnostics] == [f"{profile}:{message}"]


def test_every_committed_profile_passes_the_size_checks() -> None:
    for path in sorted(MODELS.glob("*.yaml")):
        load_profile(path, path.name)


def test_a_cache_type_the_rows_do_not_fit_is_a_located_error(tmp_path: Path) -> None:
    """A consistent MLA rank of 4097 (+ rope 64) gives K rows of 4161 elements, no whole
    number of q8_0 blocks: validate says so at the cache type instead of a traceback."""
    from layoutgen.render.validate import validate_file

    _mutated(
        tmp_path,
        "glm-5.1-iq3_ks.yaml",
        ("  kv_lora_rank: 512\n", "  kv_lora_rank: 4097\n"),
        (
            'attn_kv_a_norm.weight", type: "f32", shape: [512], bytes: 2048}',
            'attn_kv_a_norm.weight", type: "f32", shape: [4097], bytes: 16388}',
        ),
        ("shape: [6144, 576], bytes: 2903040}", "shape: [6144, 4161], bytes: 20971440}"),
        ("shape: [6144, 576], bytes: 3760128}", "shape: [6144, 4161], bytes: 27163008}"),
    )
    spec = (ROOT / "layouts" / "glm51-1-ot-exps-cpu-2gpu.yaml").read_text(encoding="utf-8")
    path = tmp_path / "spec.yaml"
    path.write_text(spec.replace("models/glm-5.1-iq3_ks.yaml", "glm-5.1-iq3_ks.yaml"))
    with pytest.raises(InvalidInput) as info:
        validate_file(path)
    (diag,) = [d for d in info.value.diagnostics if d.severity == "error"]
    assert diag.message == (
        "services.grandpa.cache_type_k: q8_0 stores rows in blocks of 32 elements, and "
        "model 'glm-5.1-iq3_ks''s mla cache has rows of 4161 (layer 0); write "
        "cache_type_k: f16, or check the profile's head sizes"
    )
    assert spec.splitlines()[diag.line - 1].lstrip().startswith("cache_type_k:")


@pytest.mark.parametrize("value", ["0", "1", "4097"])
def test_no_hyperparameter_value_ends_in_a_traceback(tmp_path: Path, value: str) -> None:
    """Each numeric hyperparameter of the two profiles seed 001's layout uses, set to
    ``value``: validate says valid, or gives located errors; nothing else escapes."""
    import re
    import shutil

    from layoutgen.render.validate import validate_file

    spec = tmp_path / "familiar-final.yaml"
    shutil.copy(ROOT / "layouts" / "familiar-final.yaml", spec)
    shutil.copytree(MODELS, tmp_path / "models")
    for profile in ("glm-5.1-iq3_ks.yaml", "qwen3-coder-next-q4_0.yaml"):
        text = (MODELS / profile).read_text(encoding="utf-8")
        for key in re.findall(r"(?m)^  ([a-z_]+): \d+$", text):
            changed = re.sub(rf"(?m)^  {key}: \d+$", f"  {key}: {value}", text)
            (tmp_path / "models" / profile).write_text(changed, encoding="utf-8")
            try:
                validate_file(spec)
            except InvalidInput as exc:
                assert all(d.line >= 1 for d in exc.diagnostics), (key, exc.diagnostics)
        (tmp_path / "models" / profile).write_text(text, encoding="utf-8")
