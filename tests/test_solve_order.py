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
    assert scenarios(_spec({})).all() == [frozenset("abcd")]
    # a conflicts with b (written once, symmetric): {a, c, d} and {b, c, d}.
    assert scenarios(_spec({"a": ["b"]})).all() == [frozenset("acd"), frozenset("bcd")]
    # a with b, b with c: {a, c, d} and {b, d}.
    assert scenarios(_spec({"a": ["b"], "c": ["b"]})).all() == [
        frozenset("acd"),
        frozenset("bd"),
    ]


def _pairs(k: int, hub: bool = False) -> Spec:
    """2k services in k conflicting pairs (2**k scenarios); with a hub that conflicts
    with all of them, one connected group of 2**k + 1 maximal sets."""
    data = YAML(typ="safe").load(VALID)
    base = data["services"]["worker0"]
    names = [f"s{i:02d}" for i in range(2 * k)]
    data["services"] = {
        name: dict(base, port=9000 + i, conflicts=[names[i + 1]] if i % 2 == 0 else [])
        for i, name in enumerate(names)
    }
    if hub:
        data["services"]["hub"] = dict(base, port=8999, conflicts=names)
    return Spec.model_validate(data)


def test_independent_conflicts_are_not_multiplied_out() -> None:
    """Issue 15: 12 disjoint pairs are 4,096 scenarios; each pair is a group of two
    sets, and the worst scenario per device is the worst set per group."""
    sc = scenarios(_pairs(12))
    assert len(sc.groups) == 12 and all(len(g) == 2 for g in sc.groups)
    use = {f"s{i:02d}": i for i in range(24)}  # the odd one of each pair uses more
    worst = sc.worst(use)
    assert worst == frozenset(f"s{i:02d}" for i in range(1, 24, 2))
    assert sc.worst(use, given="s00") == (worst - {"s01"}) | {"s00"}
    # the same answer as the listing of all 2**k scenarios, on a small case
    small = scenarios(_pairs(4))
    u = {f"s{i:02d}": (7 * i) % 5 for i in range(8)}
    best = max(small.all(), key=lambda w: sum(u.get(n, 0) for n in w))
    assert sum(u[n] for n in small.worst(u)) == sum(u[n] for n in best)


def test_one_group_with_too_many_sets_is_refused_at_its_first_service() -> None:
    import pytest

    from layoutgen.solve.scenarios import MAX_GROUP_SETS, TooManyScenarios

    with pytest.raises(TooManyScenarios) as info:
        scenarios(_pairs(7, hub=True))  # 2**7 + 1 sets in one group
    (problem,) = info.value.problems
    assert problem.path == ("services", "hub", "conflicts")
    assert f"more than {MAX_GROUP_SETS} alternative sets" in problem.message
    assert len(scenarios(_pairs(5, hub=True)).groups[0]) == 2**5 + 1  # 33: planned
