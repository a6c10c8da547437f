"""Heat policies and conflict scenarios: the solver's ordering decisions."""

from __future__ import annotations

from ruamel.yaml import YAML

from layoutgen.solve.solver import heat_order, scenarios
from layoutgen.spec.schema import Spec

from specs import VALID

GLM_MOE = list(range(3, 78))  # GLM-5.1's MoE layers that ik_llama.cpp loads (seed 001)


def test_head_tail_20_layers_is_seed_001s_8_head_8_tail_4_middle() -> None:
    # Seed 001 "Expert Placement Plan (20 Layers)": "8 head layers, 8 tail layers,
    # and 4 middle layers".
    first = heat_order(GLM_MOE, "head-tail")[:20]
    head = [n for n in first if n <= 10]
    tail = [n for n in first if n >= 70]
    middle = [n for n in first if 10 < n < 70]
    assert head == [3, 4, 5, 6, 7, 8, 9, 10]
    assert sorted(tail) == list(range(70, 78))
    assert len(middle) == 4
    # The middle ones are spread out, not bunched.
    gaps = [b - a for a, b in zip(sorted(middle), sorted(middle)[1:], strict=False)]
    assert min(gaps) >= 10


def test_policies_are_permutations() -> None:
    for policy in ("head-tail", "head", "tail", "even"):
        order = heat_order(GLM_MOE, policy)
        assert sorted(order) == GLM_MOE, policy
    assert heat_order(GLM_MOE, "head")[:3] == [3, 4, 5]
    assert heat_order(GLM_MOE, "tail")[:3] == [77, 76, 75]
    assert heat_order(GLM_MOE, "even")[0] == 40  # the middle first


def _spec(conflicts: dict[str, list[str]]) -> Spec:
    data = YAML(typ="safe").load(VALID)
    base = data["services"]["worker0"]
    data["services"] = {}
    for i, name in enumerate(["a", "b", "c", "d"]):
        data["services"][name] = dict(base, port=9000 + i, conflicts=conflicts.get(name, []))
    return Spec.model_validate(data)


def test_scenarios_are_maximal_sets_of_services_that_run_together() -> None:
    assert scenarios(_spec({})) == [frozenset("abcd")]
    # a conflicts with b (written once, symmetric): {a, c, d} and {b, c, d}.
    assert scenarios(_spec({"a": ["b"]})) == [frozenset("acd"), frozenset("bcd")]
    # a with b, b with c: {a, c, d} and {b, d}.
    assert scenarios(_spec({"a": ["b"], "c": ["b"]})) == [frozenset("acd"), frozenset("bd")]


def test_too_many_scenarios_are_refused_before_they_are_enumerated() -> None:
    """k independent conflicting pairs make 2**k scenarios: 7 pairs (128) are refused."""
    import pytest

    from layoutgen.solve.solver import MAX_SCENARIOS, DoesNotFit

    data = YAML(typ="safe").load(VALID)
    base = data["services"]["worker0"]
    names = [f"s{i:02d}" for i in range(14)]
    data["services"] = {
        name: dict(base, port=9000 + i, conflicts=[names[i + 1]] if i % 2 == 0 else [])
        for i, name in enumerate(names)
    }
    with pytest.raises(DoesNotFit) as info:
        scenarios(Spec.model_validate(data))
    (problem,) = info.value.problems
    assert problem.path == ("services", "s00", "conflicts")
    assert f"more than {MAX_SCENARIOS} alternative sets" in problem.message
    # 6 pairs (64 scenarios) are still planned
    del data["services"]["s12"], data["services"]["s13"]
    assert len(scenarios(Spec.model_validate(data))) == 64
