"""-ot rules: compact, exact, and read the way the runtime reads them."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from layoutgen.solve.override import Rule, apply, expert_rule, expert_rules, number_alternation


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
