"""The reader's bounds, in process: each limit holds exactly at its edge, and what stays allowed.

The hostile corpus (test_hostile_yaml.py) shows every attack refused; these
tests pin where each limit sits (one value under passes, one over is refused),
that legitimate anchors, merge keys and tags still load, and the number
bounds of sizes and profiles.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from layoutgen.errors import InvalidInput
from layoutgen.inputs.source import parse
from layoutgen.inputs.yamlbounds import MAX_ALIAS_NODES, MAX_DEPTH, MAX_INT, MAX_NODES
from layoutgen.models.profile import load_profile
from layoutgen.render.validate import validate_document
from layoutgen.spec.sizes import SizeError, format_size, parse_size

from specs import VALID, write


def _error(text: str) -> str:
    with pytest.raises(InvalidInput) as info:
        parse(text, "t.yaml")
    (diag,) = info.value.diagnostics
    return diag.gcc()


# -- sizes --------------------------------------------------------------------------


def test_sizes_stop_at_one_pebibyte() -> None:
    assert parse_size("1024TiB") == parse_size(2**50) == 2**50
    too_large = "is more than 1 PiB (1024 TiB), larger than any memory or model file"
    for value in ("1025TiB", 2**50 + 1, "1125899906842625", "9" * 400 + "GiB"):
        with pytest.raises(SizeError, match=r"more than 1 PiB"):
            parse_size(value)
    with pytest.raises(SizeError) as info:
        parse_size("9" * 400 + "GiB")
    assert str(info.value) == f"size '{'9' * 37}...' {too_large}; write the real size"
    with pytest.raises(SizeError) as info:
        parse_size(10**5000)  # str() of this int would raise: the message counts digits
    assert str(info.value) == f"size a number of 5001 digits {too_large}; write the real size"


def test_sizes_with_long_fractions_are_read() -> None:
    assert parse_size("1." + "0" * 5000 + "GiB") == 2**30
    assert parse_size("0" * 1000 + "1GiB") == 2**30


def test_format_size_never_overflows() -> None:
    assert format_size(2**50) == "1024.00 TiB"
    assert format_size(10**400) == "2^1328 B or more"
    assert format_size(-(10**5000)) == "-2^16609 B or more"


# -- each limit at its edge -------------------------------------------------------


def test_nesting_limit() -> None:
    # The top-level mapping is level 1: 63 brackets inside it make 64 levels.
    deepest = "a: " + "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1) + "\n"
    assert parse(deepest, "t.yaml").plain() is not None
    assert _error(deepest.replace("[", "[[", 1).replace("]", "]]", 1)) == (
        f"t.yaml:1:{3 + MAX_DEPTH}: error: nested more than {MAX_DEPTH} levels deep; a spec or "
        "profile needs fewer than 10: write this value flat"
    )


def test_alias_copy_limit() -> None:
    def aliases(n: int) -> str:
        return "a: &s x\nb: [" + ", ".join(["*s"] * n) + "]\n"

    assert len(parse(aliases(MAX_ALIAS_NODES), "t.yaml").plain()["b"]) == MAX_ALIAS_NODES
    col = len("b: [") + len("*s, ") * MAX_ALIAS_NODES + 1
    assert _error(aliases(MAX_ALIAS_NODES + 1)) == (
        f"t.yaml:2:{col}: error: aliases here copy more than {MAX_ALIAS_NODES} values in all "
        "(an alias bomb?); write the shared values out, or share fewer"
    )


def test_value_count_limit() -> None:
    # The mapping, its key and the list are three values.
    assert parse("a: [" + "1," * (MAX_NODES - 3) + "]\n", "t.yaml").plain()["a"][-1] == 1
    assert "more than 100000 values in one file" in _error("a: [" + "1," * (MAX_NODES - 2) + "]\n")


def test_integers_stop_at_64_bits() -> None:
    assert parse(f"a: {MAX_INT}\nb: -{MAX_INT}\nc: 0x7fffffffffffffff\n", "t.yaml").plain() == {
        "a": MAX_INT,
        "b": -MAX_INT,
        "c": MAX_INT,
    }
    for big in (str(MAX_INT + 1), f"-{MAX_INT + 2}", "0x8000000000000000", "1" + "_0" * 20):
        assert "is beyond 64 bits" in _error(f"a: {big}\n"), big
    assert parse("a: '9999999999999999999999'\n", "t.yaml").plain() == {
        "a": "9999999999999999999999"
    }


# -- what stays allowed ------------------------------------------------------------


def test_tags_that_restate_a_type_are_read() -> None:
    text = "a: !!str 8\nb: !!int '8'\nc: !!float 1\nd: !!bool true\ne: !!null ~\n"
    text += "f: !!seq [1]\ng: !!map {h: 1}\ni: !<tag:yaml.org,2002:int> 3\n"
    assert parse(text, "t.yaml").plain() == {
        "a": "8",
        "b": 8,
        "c": 1.0,
        "d": True,
        "e": None,
        "f": [1],
        "g": {"h": 1},
        "i": 3,
    }


def test_dates_that_exist_still_reach_the_schema() -> None:
    import datetime

    assert parse("a: 2026-01-31\n", "t.yaml").plain() == {"a": datetime.date(2026, 1, 31)}


def test_shared_settings_through_anchors_and_merge_keys(tmp_path: Path) -> None:
    """Sharing a service's settings is fine; a problem in them is shown where it is written."""
    text = VALID.replace("  grandpa:\n", "  grandpa: &base\n", 1)
    text = text.replace(
        "  worker0:\n    model: coder\n    runtime: ik\n    role: worker\n",
        "  worker0:\n    <<: *base\n    role: worker\n",
    )
    path = write(tmp_path, text)
    v = validate_document(parse(text, "spec.yaml", path))
    assert v.spec.services["worker0"].model == "coder"
    assert v.spec.services["worker0"].port == 8001  # its own key wins over the merged one
    bad = text.replace("    threads: 15\n", "    threads: 0\n", 1)
    with pytest.raises(InvalidInput) as info:
        validate_document(parse(bad, "spec.yaml", path))
    row = bad[: bad.index("threads: 0")].count("\n") + 1
    assert [d.gcc() for d in info.value.diagnostics] == [
        f"spec.yaml:{row}:14: error: services.grandpa.threads: must be at least 1, got 0",
        f"spec.yaml:{row}:14: error: services.worker0.threads: must be at least 1, got 0",
    ]


def test_keys_that_are_numbers_or_quoted_are_located() -> None:
    doc = parse("1: a\n'b': c\n\"2\": d\n", "t.yaml")
    assert doc.locate((1,)) == (1, 4)
    assert doc.locate(("b",), at_key=True) == (2, 1)
    assert doc.locate(("2",)) == (3, 6)


def test_crlf_and_cr_line_ends_count_like_lf() -> None:
    assert _error("a: 1\r\nb: [\r\n") == _error("a: 1\nb: [\n")
    assert _error("a: 1\rb: [\r") == _error("a: 1\nb: [\n")


def test_special_files_are_refused_without_reading_them() -> None:
    from layoutgen.inputs.source import load

    with pytest.raises(InvalidInput) as info:
        load(Path("/dev/zero"))
    assert info.value.diagnostics[0].gcc() == (
        "/dev/zero: error: not a regular file (a pipe, device or socket); give a YAML file"
    )


# -- profiles ------------------------------------------------------------------------

_PROFILE = """\
schema: 1
name: p
arch: {arch}
source: a test
hparams:
{hparams}tensors:
{tensors}"""


def _profile_errors(tmp_path: Path, arch: str, hparams: str, tensors: str) -> list[str]:
    path = tmp_path / "p.yaml"
    path.write_text(_PROFILE.format(arch=arch, hparams=hparams, tensors=tensors))
    try:
        load_profile(path, "p.yaml")
    except InvalidInput as exc:
        return [d.gcc() for d in exc.diagnostics]
    return []


KV = '  - {name: "blk.{0..1}.attn_k.weight", type: "f32", shape: [4], bytes: 16}\n'
MLA = '  - {name: "blk.{0..1}.attn_kv_a_mqa.weight", type: "f32", shape: [4], bytes: 16}\n'
FFN = '  - {name: "blk.{0..1}.ffn_up.weight", type: "f32", shape: [4], bytes: 16}\n'


def test_profiles_need_what_the_kv_cache_is_computed_from(tmp_path: Path) -> None:
    # K head size derived from n_embd / n_head: enough.
    assert _profile_errors(tmp_path, "llama", "  n_layer: 2\n  n_embd: 64\n  n_head: 8\n", KV) == []
    # No K/V projections (a test model with only FFN weights): nothing to compute.
    assert _profile_errors(tmp_path, "llama", "  n_layer: 2\n", FFN) == []
    no_heads = "  n_layer: 2\n  n_embd: 64\n  n_head: [0, 0]\n"
    assert _profile_errors(tmp_path, "llama", no_heads, KV) == [
        "p.yaml:8:11: error: hparams: missing 'n_head': the attention heads "
        "(llama.attention.head_count), which the memory model needs; write it from the GGUF"
    ]
    mla = "  n_layer: 2\n  n_head: 8\n  kv_lora_rank: 512\n"
    assert _profile_errors(tmp_path, "deepseek2", mla, MLA) == [
        "p.yaml:5:1: error: hparams: missing 'rope_dim': the rope part of MLA's cached K "
        "(deepseek2.rope.dimension_count), which the memory model needs; write it from the GGUF"
    ]


def test_recurrent_state_sizes_by_architecture(tmp_path: Path) -> None:
    mamba = "  n_layer: 2\n  recurrent_layers: '0..1'\n  ssm_conv_kernel: 4\n"
    mamba += "  ssm_state_size: 16\n  ssm_inner_size: 128\n"
    assert _profile_errors(tmp_path, "mamba", mamba, FFN) == []  # Mamba-1: no groups
    assert _profile_errors(tmp_path, "qwen3next", mamba, FFN) == [
        "p.yaml:5:1: error: hparams: missing 'ssm_group_count', 'ssm_time_step_rank': the "
        "recurrent state sizes (qwen3next.ssm.*), which the memory model needs; write them from "
        "the GGUF"
    ]


def test_profile_numbers_are_bounded_before_they_are_used(tmp_path: Path) -> None:
    assert _profile_errors(tmp_path, "llama", "  n_layer: 2\n  n_head: [8, 70000]\n", FFN) == [
        "p.yaml:7:11: error: hparams.n_head: 70000 is more than any model has (at most 65536); "
        "write the value from the GGUF"
    ]
    assert _profile_errors(tmp_path, "llama", "  n_layer: 4096\n  n_head: 65537\n", FFN) == [
        "p.yaml:7:11: error: hparams.n_head: 65537 is more than any model has (at most 65536); "
        "write the value from the GGUF"
    ]
