"""-ot rules: compact, exact, and read the way the runtime reads them."""

from __future__ import annotations

import re
import shutil
import warnings
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_tensor_placement import SPEC

from layoutgen.core.override import Rule, apply, expert_rule, expert_rules, number_alternation
from layoutgen.errors import InvalidInput
from layoutgen.inputs.patterns import PatternError, compile_pattern, refusal
from layoutgen.render.validate import validate_file

from specs import PROFILE


@settings(max_examples=300, deadline=None)
@given(st.sets(st.integers(min_value=0, max_value=1100), min_size=1, max_size=40))
def test_alternation_matches_exactly_the_layers(layers: set[int]) -> None:
    rx = re.compile(rf"(?:{number_alternation(layers)})")
    matched = {n for n in range(0, 1300) if rx.fullmatch(str(n))}
    assert matched == layers


def test_alternation_folds_runs() -> None:
    # Seed 001's head 12 (blk.3-14) and final-layout head side (3-10, 20, 30).
    assert number_alternation(range(3, 15)) == "[3-9]|1[0-4]"
    assert number_alternation([3, 4, 5, 6, 7, 8, 9, 10, 20, 30]) == "[3-9]|10|20|30"
    assert number_alternation([68, 69, 70, 71, 72, 73, 74, 75, 76, 77]) == "6[8-9]|7[0-7]"


NAMES = [
    *(f"blk.{i}.ffn_{k}_exps.weight" for i in range(0, 79) for k in ("up", "gate", "down")),
    *(f"blk.{i}.ffn_{k}_shexp.weight" for i in range(3, 79) for k in ("up", "gate", "down")),
    *(f"blk.{i}.ffn_{k}.weight" for i in range(0, 3) for k in ("up", "gate", "down")),
    "blk.13.attn_kv_a_mqa.weight",
    "token_embd.weight",
    "output.weight",
]


def test_rules_select_only_the_routed_experts_of_their_layers() -> None:
    rules = expert_rules({"CUDA0": range(3, 15), "CUDA1": range(68, 78)})
    got = apply(rules, NAMES)
    for name, target in got.items():
        m = re.match(r"blk\.(\d+)\.ffn_(up|gate|down)_exps\.weight$", name)
        if m and 3 <= int(m.group(1)) <= 14:
            assert target == "CUDA0", name
        elif m and 68 <= int(m.group(1)) <= 77:
            assert target == "CUDA1", name
        else:
            assert target is None, name  # dense, shared experts, nextn blk.78, the rest


def test_first_match_wins_in_argument_order() -> None:
    names = ["blk.5.ffn_up_exps.weight"]
    assert apply([Rule("exps", "CPU"), expert_rule([5], "CUDA0")], names) == {names[0]: "CPU"}
    assert apply([expert_rule([5], "CUDA0"), Rule("exps", "CPU")], names) == {names[0]: "CUDA0"}


def test_rule_argument_form() -> None:
    rule = expert_rule([3, 4, 5, 10, 11, 12], "CUDA0")
    assert rule.arg() == r"^blk\.([3-5]|1[0-2])\.ffn_(up|gate|down|gate_up)_exps\.weight$=CUDA0"


# -- the pattern language (layoutgen.inputs.patterns): bounded, and read as llama.cpp reads it


def test_patterns_users_write_match_as_the_runtime_searches() -> None:
    """Every accepted pattern finds the same tensors as a regex search does (llama.cpp's
    std::regex_search; Python's re.search agrees on these ASCII names)."""
    patterns = [
        r"blk\.(3|4|1[0-2])\.ffn_(up|gate|down)_exps",
        r"blk\.1[2-9]\.ffn_.*",
        r"^blk\.(1[0-9]|2[0-3])\.",
        r"exps\.weight$|^token",
        r"blk\.\d{2}\.attn",
        r"[^.]+_shexp",
        r"(?:\.[a-z]){2}",
        r"^output\.weight$",
        r"ffn_(down|up)_exps",
        r"blk\.7[0-9]?\.",
        r"n_(up|gate)_?e",
        r"a?",
        r"x{0,3}kv_a",
        r"[\w]+\.\D",
    ]
    for text in patterns:
        rx, ours = re.compile(text), compile_pattern(text)
        for name in NAMES:
            assert ours.search(name) == bool(rx.search(name)), (text, name)


ATOMS = ["a", "b", ".", r"\.", "[ab]", "[^a]", r"\d", "^", "$", "(a|b)", "(?:ab)", "(b|ab)"]


@st.composite
def _patterns(draw: st.DrawFn) -> str:
    parts = draw(st.lists(st.sampled_from(ATOMS), min_size=1, max_size=5))
    out = ""
    for part in parts:
        out += part + draw(st.sampled_from(["", "", "*", "+", "?", "{2}", "{1,2}", "*?"]))
    return out if draw(st.booleans()) else f"({out})" + draw(st.sampled_from(["", "*", "|b"]))


@settings(max_examples=400, deadline=None)
@given(_patterns(), st.lists(st.text("ab.1", max_size=8), min_size=1, max_size=8))
def test_the_automaton_finds_what_a_regex_search_finds(text: str, names: list[str]) -> None:
    try:
        ours = compile_pattern(text)
    except PatternError:
        return  # refused: validate says where and why
    rx = re.compile(text)
    for name in names:
        assert ours.search(name) == bool(rx.search(name)), (text, name)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        # the shapes that hung validate (issue 31): refused before anything is matched
        ("(.*)*X", "nested quantifiers: '*' at offset 2 inside '*' at offset 4"),
        ("([a-z_.0-9]+)+X", "nested quantifiers: '+' at offset 11 inside '+'"),
        ("(.|.)*X", "alternatives under '*' at offset 5 can begin with the same character"),
        ("((((.*)*)*)*)Z", "nested quantifiers"),
        ("(a|ab)+", "can begin with the same character"),
        ("(a|)*", "repeats something that can match nothing"),
        # what llama.cpp's ECMAScript does not read as Python does
        ("(?P<x>blk)", "is a named group"),
        ("(?i)blk", "an inline flag"),
        ("(?<=blk)x", "a look-behind"),
        (r"\bblk", "a word boundary"),
        (r"(a)\1", "a back-reference"),
        ("blk{,3}", "write '{0,3}'"),
        ("blk{3", r"escape"),
        ("a*+", "possessive"),
        ("[[:digit:]]", "POSIX class"),
        ("a^b", "'^' only at the start"),
        ("a$b", "'$' only at the end"),
        (r"\Z", "means different things"),
        ("(" * 40 + "a" + ")" * 40, "groups nested more than 32 deep"),
        ("(a{1000}){1000}", "more than 2000 characters"),
        ("a{5,2}", "counts down"),
        ("blk\u00e9", "is not ASCII: llama.cpp matches a name's bytes"),
        (r"\u00e9", "is not ASCII"),
        ("[^.]b^c", "(at offset 5: '^c')"),
    ],
)
def test_patterns_outside_the_language_are_refused_saying_what_to_write(
    text: str, fragment: str
) -> None:
    why = refusal(text)
    assert why is not None and fragment in why, why


def test_layoutgen_s_own_rules_are_in_the_language() -> None:
    rules = expert_rules({"CUDA0": range(3, 15), "CUDA1": [68, 70, 1000]}, {"CUDA0": NAMES[:2]})
    assert all(refusal(rule.pattern) is None for rule in rules)


def test_a_long_pattern_is_read_once_per_name() -> None:
    """A pattern that sends a backtracking matcher through C(60, 30) splits is read in
    one pass (the automaton's states are the live positions, not the paths)."""
    text = ".*a" * 30 + "X"
    assert refusal(text) is None
    assert not compile_pattern(text).search("a" * 60)
    assert compile_pattern(text).search("a" * 30 + "X")


def test_validate_refuses_a_hostile_pattern_at_its_place(tmp_path: Path) -> None:
    """The spec line of issue 31 ends in a located error instead of a hang."""
    shutil.copy(PROFILE, tmp_path / PROFILE.name)
    text = SPEC.replace("RUNTIME", "llama").replace(str(PROFILE), PROFILE.name)
    path = tmp_path / "spec.yaml"
    path.write_text(text + "    tensor_overrides: [{pattern: '(.*)*X', device: host}]\n")
    with pytest.raises(InvalidInput) as caught:
        validate_file(path)
    (diag,) = caught.value.diagnostics
    assert (diag.line, diag.col) == (23, 34)  # the pattern's own place
    assert diag.message.startswith(
        "services.w.tensor_overrides[0].pattern: '(.*)*X': nested quantifiers"
    )


@pytest.mark.parametrize(
    ("pattern", "fragment"),
    [
        ("[[:alpha:]]", "('[:' is a POSIX class)"),  # Python's re warns of a nested set
        ("(" * 500 + "a" + ")" * 500, "nests groups too deep"),  # Python's parser recursed
    ],
)
def test_patterns_python_chokes_on_are_located_errors(
    tmp_path: Path, pattern: str, fragment: str
) -> None:
    """No warning printed with a source line, no RecursionError: one located error."""
    shutil.copy(PROFILE, tmp_path / PROFILE.name)
    text = SPEC.replace("RUNTIME", "llama").replace(str(PROFILE), PROFILE.name)
    path = tmp_path / "spec.yaml"
    path.write_text(text + f"    tensor_overrides: [{{pattern: '{pattern}', device: host}}]\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(InvalidInput) as caught:
            validate_file(path)
    (diag,) = caught.value.diagnostics
    assert (diag.line, diag.col) == (23, 34) and fragment in diag.message, diag
