"""Lanes that decode at the same time share host RAM's bandwidth (issue 18 item 4).

Seed 000 runs an interactive lane and a batch lane on one EPYC: each is fast
alone, and both slow down when they decode together, because the expert
weights both read from host RAM come through the same memory controllers.

The model is a fluid one.  Alone, a lane's token takes ``seconds`` of which
``host_seconds`` are spent reading ``host_bytes`` from host RAM (the host
term of :func:`layoutgen.speed.model.decode`); it asks host RAM for
``host_bytes x tps`` bytes a second.  Lanes that run together get what they
ask as long as the sum fits the host's effective bandwidth.  Beyond it, the
host part of every token stretches by one common factor ``s`` (the memory
serves all readers alike) until the demands add up to the bandwidth:
``sum(host_bytes_i / (seconds_i - host_seconds_i + s x host_seconds_i)) =
bandwidth``.  GPU-side time does not stretch.

Lanes run together when their schedules overlap: a lane without a schedule
runs all day; a scheduled one (``"22:00-06:00"``, windows may cross
midnight) only inside its windows.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

MINUTES_A_DAY = 24 * 60
_WINDOW = re.compile(
    r"(?P<h1>[01]\d|2[0-3]):(?P<m1>[0-5]\d)-(?P<h2>[01]\d|2[0-3]|24):(?P<m2>[0-5]\d)"
)


class WindowError(ValueError):
    """A schedule window that is not HH:MM-HH:MM."""


@dataclass(frozen=True)
class Lane:
    name: str
    seconds: float  # one token alone (model.decode(...).seconds)
    host_seconds: float  # the host RAM part of it
    host_bytes: float  # bytes read from host RAM per token
    windows: tuple[tuple[int, int], ...] | None = None  # minutes of the day; None: always

    @property
    def tps(self) -> float:
        return 1.0 / self.seconds

    @property
    def demand(self) -> float:
        """Host RAM bytes a second when it decodes alone at full speed."""
        return self.host_bytes / self.seconds


@dataclass(frozen=True)
class Shared:
    """Lanes decoding together: each one's speed alone and together."""

    lanes: tuple[str, ...]
    demand: float  # bytes/s the lanes ask for together, at their speeds alone
    bandwidth: float  # the host's effective bandwidth
    stretch: float  # the host part's factor, 1.0 when the demand fits
    tps_alone: dict[str, float]
    tps_together: dict[str, float]

    @property
    def over(self) -> bool:
        return self.demand > self.bandwidth


def parse_windows(text: str) -> tuple[tuple[int, int], ...]:
    """``"22:00-06:00, 12:00-13:00"`` -> minute ranges; one crossing midnight is split."""
    out: list[tuple[int, int]] = []
    for part in (p.strip() for p in text.split(",")):
        m = _WINDOW.fullmatch(part)
        if m is None:
            raise WindowError(f"{part!r} is not a window; write HH:MM-HH:MM, e.g. 22:00-06:00")
        start = int(m["h1"]) * 60 + int(m["m1"])
        end = int(m["h2"]) * 60 + int(m["m2"])
        if end > MINUTES_A_DAY or start == end:
            raise WindowError(f"{part!r} is empty or ends after 24:00")
        out += [(start, end)] if start < end else [(start, MINUTES_A_DAY), (0, end)]
    return tuple(sorted(out))


def overlap(a: Lane, b: Lane) -> bool:
    """Whether the two lanes' schedules share a minute of the day."""
    if a.windows is None or b.windows is None:
        return True
    return any(s1 < e2 and s2 < e1 for s1, e1 in a.windows for s2, e2 in b.windows)


def together(lanes: Sequence[Lane], bandwidth: float) -> Shared:
    """Every lane decoding at once: the common stretch of the host part, by bisection
    (the lanes' total demand falls as the stretch grows)."""
    names = tuple(lane.name for lane in lanes)
    demand = sum(lane.demand for lane in lanes)

    def asked(s: float) -> float:
        return sum(
            lane.host_bytes / (lane.seconds - lane.host_seconds + s * lane.host_seconds)
            for lane in lanes
        )

    stretch = 1.0
    if demand > bandwidth and any(lane.host_seconds > 0 for lane in lanes):
        lo, hi = 1.0, 2.0
        while asked(hi) > bandwidth:
            hi *= 2
        for _ in range(100):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if asked(mid) > bandwidth else (lo, mid)
            if hi - lo <= 1e-12 * hi:
                break  # as close as a double can say
        stretch = hi
    alone = {lane.name: lane.tps for lane in lanes}
    shared = {
        lane.name: 1.0 / (lane.seconds - lane.host_seconds + stretch * lane.host_seconds)
        for lane in lanes
    }
    return Shared(names, demand, bandwidth, stretch, alone, shared)


def check(lanes: Sequence[Lane], bandwidth: float) -> list[Shared]:
    """Each pair of lanes whose schedules overlap and whose demands together exceed
    the host's bandwidth (a warning each, with both lanes' speeds alone and together)."""
    found = []
    for i, a in enumerate(lanes):
        for b in lanes[i + 1 :]:
            if overlap(a, b):
                pair = together((a, b), bandwidth)
                if pair.over:
                    found.append(pair)
    return found


def warning(s: Shared) -> str:
    """One line for the plan."""
    gb = 1e9
    speeds = ", ".join(
        f"{n} {s.tps_alone[n]:.1f} -> {s.tps_together[n]:.1f} tok/s" for n in s.lanes
    )
    return (
        f"{' and '.join(s.lanes)} decode at the same time and ask host RAM for "
        f"{s.demand / gb:.0f} GB/s together, more than its {s.bandwidth / gb:.0f} GB/s: "
        f"{speeds}; give the batch lane a schedule outside the interactive hours"
    )
