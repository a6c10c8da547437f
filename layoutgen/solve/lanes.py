"""The words of the lanes warning (issue 36): which services overlap, when, and the
advice that fits the schedules they already have.

A batch service that already keeps night hours is not told to take a schedule: when
the overlap is an interactive service that has none (so it runs all day), the
interactive service is the one to give hours to.
"""

from __future__ import annotations

from layoutgen.spec.schema import Spec
from layoutgen.speed import contention

Windows = tuple[tuple[int, int], ...]


def _hhmm(minute: int) -> str:
    return f"{minute // 60:02d}:{minute % 60:02d}"


def windows_text(windows: Windows) -> str:
    """Minute ranges as HH:MM-HH:MM, a pair split at midnight joined again."""
    joined = list(windows)
    first = next((w for w in joined if w[0] == 0), None)
    last = next((w for w in joined if w[1] == contention.MINUTES_A_DAY), None)
    if first is not None and last is not None and first != last:
        joined.remove(first)
        joined.remove(last)
        joined.append((last[0], first[1]))
    return ", ".join(f"{_hhmm(s)}-{_hhmm(e % contention.MINUTES_A_DAY)}" for s, e in sorted(joined))


def overlap(a: Windows | None, b: Windows | None) -> Windows:
    """The minutes of the day both run (None: all day)."""
    day: Windows = ((0, contention.MINUTES_A_DAY),)
    out = []
    for s1, e1 in a if a is not None else day:
        for s2, e2 in b if b is not None else day:
            s, e = max(s1, s2), min(e1, e2)
            if s < e:
                out.append((s, e))
    return tuple(sorted(out))


def _when(spec: Spec, a: str, b: str, wa: Windows | None, wb: Windows | None) -> str:
    if wa is None and wb is None:
        return "neither has a schedule"
    said = [
        f"{n} has no schedule" if w is None else f"{n} runs {spec.services[n].schedule}"
        for n, w in ((a, wa), (b, wb))
    ]
    return ", ".join(said)


def message(spec: Spec, pair: contention.Shared, lanes: dict[str, contention.Lane]) -> str:
    """The warning for two services that decode together beyond host RAM's bandwidth."""
    a, b = pair.lanes
    wa, wb = lanes[a].windows, lanes[b].windows
    both = overlap(wa, wb)
    when = "all day" if wa is None and wb is None else windows_text(both)
    gb = 1e9
    speeds = ", ".join(
        f"{n} {pair.tps_alone[n]:.1f} -> {pair.tps_together[n]:.1f} tok/s" for n in pair.lanes
    )
    head = (
        f"{a} and {b} decode at the same time and ask host RAM for {pair.demand / gb:.0f} "
        f"GB/s together, more than its {pair.bandwidth / gb:.0f} GB/s: {speeds}; they "
        f"overlap {when} ({_when(spec, a, b, wa, wb)})"
    )
    return f"{head}; {_advice(spec, a, b, wa, wb, when)}"


def _advice(spec: Spec, a: str, b: str, wa: Windows | None, wb: Windows | None, when: str) -> str:
    batch = [n for n in (a, b) if spec.services[n].role == "batch"]
    if len(batch) != 1:
        return f"give {a} and {b} schedules that do not overlap, or move one off host RAM"
    lane = batch[0]
    other = b if lane == a else a
    mine, theirs = (wa, wb) if lane == a else (wb, wa)
    if mine is None:
        advice = "give the batch lane a schedule outside the interactive hours"
        if theirs is None:
            advice += f", and {other} its hours"
        return advice
    if theirs is None:
        return (
            f"{lane} already keeps {spec.services[lane].schedule}: the overlap is {other}, "
            f"which has no schedule and so runs all day; give {other} its hours (schedule:) "
            f"outside {spec.services[lane].schedule}"
        )
    return f"move {lane}'s schedule out of {other}'s {spec.services[other].schedule}"
