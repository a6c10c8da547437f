"""Which services may run at the same time, without listing every combination.

Services that ``conflict`` never run together, so a device is budgeted for
the worst set of services that can run at once (a *scenario*: a maximal set
with no conflict inside).  Listing the scenarios is exponential: ``k``
independent conflicting pairs make ``2**k`` of them.  But the conflict graph
falls apart into connected groups that choose independently, so the worst
scenario for a device is the services without conflicts plus, per group, the
group's worst maximal set: each group is enumerated on its own (a pair has
two sets), and the product is never built.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass

from layoutgen.errors import LayoutgenError, Problem
from layoutgen.spec.checks import conflicting
from layoutgen.spec.schema import Spec

#: Most maximal sets one connected group of conflicting services may have; each
#: group is enumerated, so a group past this is refused (a located error).
MAX_GROUP_SETS = 64


class TooManyScenarios(LayoutgenError):
    def __init__(self, problem: Problem) -> None:
        self.problems = [problem]
        super().__init__(problem.message)


@dataclass(frozen=True)
class Scenarios:
    """The services that always run, and per group of conflicting services its
    maximal sets (sorted, so every choice below is deterministic)."""

    always: frozenset[str]
    groups: tuple[tuple[frozenset[str], ...], ...]

    def worst(self, use: Mapping[str, int], *, given: str | None = None) -> frozenset[str]:
        """The scenario with the largest total ``use`` (service -> bytes on one
        device); with ``given``, the largest among those that include it."""
        chosen = set(self.always)
        for sets in self.groups:
            members = frozenset().union(*sets)
            options = [s for s in sets if given not in members or given in s]
            # max() keeps the first of equal totals: the sets are sorted, so ties are stable
            chosen |= max(options, key=lambda s: sum(use.get(n, 0) for n in s))
        return frozenset(chosen)

    def all(self) -> list[frozenset[str]]:
        """Every scenario (the product of the groups' sets): for tests and small specs."""
        out = [self.always.union(*pick) for pick in itertools.product(*self.groups)]
        return sorted(out, key=lambda f: sorted(f))


def scenarios(spec: Spec) -> Scenarios:
    clash = conflicting(spec)
    names = sorted(spec.services)
    always = frozenset(n for n in names if not clash[n])
    seen: set[str] = set()
    groups: list[tuple[frozenset[str], ...]] = []
    for start in names:
        if start in seen or not clash[start]:
            continue
        group: set[str] = set()
        todo = [start]
        while todo:
            n = todo.pop()
            if n not in group:
                group.add(n)
                todo.extend(sorted(clash[n] - group))
        seen |= group
        groups.append(_maximal_sets(sorted(group), clash))
    return Scenarios(always, tuple(groups))


def _maximal_sets(names: list[str], clash: Mapping[str, set[str]]) -> tuple[frozenset[str], ...]:
    """Maximal sets of ``names`` with no conflict inside (one connected group)."""
    found: list[frozenset[str]] = []
    budget = [MAX_GROUP_SETS * 64]  # candidate sets looked at before giving up

    def grow(chosen: frozenset[str], rest: list[str]) -> None:
        if not rest:
            budget[0] -= 1
            if not any(chosen < f for f in found):
                found[:] = [f for f in found if not f < chosen] + [chosen]
            if len(found) > MAX_GROUP_SETS or budget[0] < 0:
                first = names[0]
                raise TooManyScenarios(
                    Problem(
                        ("services", first, "conflicts"),
                        f"services.{first}.conflicts: the conflicts among {', '.join(names[:4])}"
                        f"{' ...' if len(names) > 4 else ''} make more than {MAX_GROUP_SETS} "
                        "alternative sets of them, each budgeted on its own; declare fewer "
                        "conflicts between them, or split the spec",
                    )
                )
            return
        head, tail = rest[0], rest[1:]
        if not (clash[head] & chosen):
            grow(chosen | {head}, tail)
        grow(chosen, tail)

    grow(frozenset(), names)
    return tuple(sorted(found, key=lambda f: sorted(f)))
