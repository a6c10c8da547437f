"""Tensor-override (``-ot``) rules: writing them compactly, and reading them as the runtime does.

llama.cpp and ik_llama.cpp apply ``-ot PATTERN=BUFFER`` rules by regex
*search* over each tensor name, in command-line order, first match wins.  We
write one anchored rule per target buffer, with the layer numbers folded into
digit ranges (``blk\\.(3|[5-9]|1[0-2])\\.ffn_(up|gate|down)_exps\\.weight``),
so that 66 hand-written flags become two, and a rule can never catch a dense,
shared-expert (``_shexp``) or nextn tensor by accident.  :func:`apply`
implements the runtime's semantics so tests can check rules against a plan
tensor by tensor.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from layoutgen.core.placement import expert_kind
from layoutgen.inputs.patterns import compile_pattern

EXPERT_KINDS = ("up", "gate", "down", "gate_up")


@dataclass(frozen=True)
class Rule:
    pattern: str
    target: str

    def arg(self) -> str:
        """The value of one ``-ot`` argument: ``PATTERN=TARGET``."""
        return f"{self.pattern}={self.target}"


def number_alternation(numbers: Iterable[int]) -> str:
    """A regex alternation matching exactly the given non-negative integers.

    Consecutive runs fold into digit ranges: ``[3, 4, 5, 10, 11, 12]`` →
    ``[3-5]|1[0-2]``.  Deterministic: sorted input order does not matter.
    """
    nums = sorted(set(numbers))
    if not nums or nums[0] < 0:
        raise ValueError("need at least one non-negative layer number")
    parts: list[str] = []
    start = prev = nums[0]
    for n in [*nums[1:], None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        parts.extend(_range_regex(start, prev))
        if n is not None:
            start = prev = n
    return "|".join(parts)


def _range_regex(lo: int, hi: int) -> list[str]:
    """Alternatives matching every integer in [lo, hi] and nothing else."""
    if lo == hi:
        return [str(lo)]
    slo, shi = str(lo), str(hi)
    if len(slo) < len(shi):
        # Split at the next power of ten: [lo, 9..9] and [10..0, hi].
        top = 10 ** len(slo) - 1
        return _range_regex(lo, top) + _range_regex(top + 1, hi)
    # Same number of digits: common prefix, then the first differing digit.
    i = 0
    while slo[i] == shi[i]:
        i += 1
    prefix, rest = slo[:i], len(slo) - i - 1
    dlo, dhi = int(slo[i]), int(shi[i])
    tail_lo, tail_hi = slo[i + 1 :], shi[i + 1 :]
    any_tail = "[0-9]" * rest
    out: list[str] = []
    if rest == 0:
        return [prefix + _digits(dlo, dhi)]
    # Lower edge: dlo followed by [tail_lo, 9..9].
    if tail_lo == "0" * rest:
        first = dlo
    else:
        out += [prefix + str(dlo) + alt for alt in _range_regex_fixed(tail_lo, "9" * rest)]
        first = dlo + 1
    last_full = dhi if tail_hi == "9" * rest else dhi - 1
    if first <= last_full:
        out.append(prefix + _digits(first, last_full) + any_tail)
    if last_full < dhi:
        out += [prefix + str(dhi) + alt for alt in _range_regex_fixed("0" * rest, tail_hi)]
    return out


def _range_regex_fixed(lo: str, hi: str) -> list[str]:
    """Like _range_regex for zero-padded digit strings of equal length."""
    if len(lo) == 1:
        return [_digits(int(lo), int(hi))]
    if lo[0] == hi[0]:
        return [lo[0] + alt for alt in _range_regex_fixed(lo[1:], hi[1:])]
    rest = len(lo) - 1
    out: list[str] = []
    first = int(lo[0])
    if lo[1:] != "0" * rest:
        out += [lo[0] + alt for alt in _range_regex_fixed(lo[1:], "9" * rest)]
        first += 1
    last = int(hi[0]) if hi[1:] == "9" * rest else int(hi[0]) - 1
    if first <= last:
        out.append(_digits(first, last) + "[0-9]" * rest)
    if last < int(hi[0]):
        out += [hi[0] + alt for alt in _range_regex_fixed("0" * rest, hi[1:])]
    return out


def _digits(lo: int, hi: int) -> str:
    if lo == hi:
        return str(lo)
    return f"[{lo}-{hi}]"


def expert_rule(layers: Iterable[int], target: str) -> Rule:
    """One anchored rule sending the routed-expert tensors of ``layers`` to ``target``."""
    alternation = number_alternation(layers)
    kinds = "|".join(EXPERT_KINDS)
    return Rule(rf"^blk\.({alternation})\.ffn_({kinds})_exps\.weight$", target)


def tensor_rule(layers: Iterable[int], kind: str, target: str) -> Rule:
    """One anchored rule sending one kind of routed-expert tensor of ``layers`` to ``target``."""
    return Rule(rf"^blk\.({number_alternation(layers)})\.ffn_{kind}_exps\.weight$", target)


def expert_rules(
    placement: Mapping[str, Iterable[int]], single: Mapping[str, Iterable[str]] | None = None
) -> tuple[Rule, ...]:
    """Rules for every target with at least one layer, in target-name order; then, per
    target and tensor kind, one rule for the single expert tensors ``single`` sends
    there (``blk.N.ffn_KIND_exps.weight`` names)."""
    rules = [
        expert_rule(layers, target) for target, layers in sorted(placement.items()) if list(layers)
    ]
    for target, names in sorted((single or {}).items()):
        kinds: dict[str, list[int]] = {}
        for name in names:
            found = expert_kind(name)
            if found is None:
                raise ValueError(f"{name!r} is not a routed-expert tensor")
            kinds.setdefault(found[1], []).append(found[0])
        for kind in EXPERT_KINDS:
            if kind in kinds:
                rules.append(tensor_rule(kinds[kind], kind, target))
    return tuple(rules)


def apply(rules: Sequence[Rule], names: Iterable[str]) -> dict[str, str | None]:
    """The runtime's reading: for each tensor, the first rule whose regex is found in it.

    Matched by :mod:`layoutgen.inputs.patterns` (linear in the name, never backtracking);
    a pattern outside its language raises its ``PatternError`` (validate refuses such
    patterns, located, before anything is solved)."""
    compiled = [(compile_pattern(rule.pattern), rule.target) for rule in rules]
    out: dict[str, str | None] = {}
    for name in names:
        out[name] = next((target for rx, target in compiled if rx.search(name)), None)
    return out
