"""Unknown build = every build (DESIGN §5, "versions").

A runtime without ``version:`` runs whatever build its image or binary holds,
and runtimes change where tensors land and how large buffers are from one
build to the next (:mod:`layoutgen.core.rules`).  Planning such a service
with the newest rules alone is how a layout validates and then OOMs on an older
build, so the plan holds under every **epoch**: a span of builds that answer
every rule the plan asked alike.

- The epochs come from the rules the solver asked (:data:`rules.ASKED`), not
  from every rule the runtime has: a build on either side of a rule nobody
  asked plans identically.  Each epoch is solved once, at its first build;
  when a solve asks a rule not asked before, its epoch is split and the new
  part solved too, until no solve asks anything new.
- The expert placement is one for all epochs (one argv renders it): the
  newest build's fill, taken again with less room on a device where an older
  epoch needs more, until every epoch fits.  ``--n-cpu-moe`` and the layer
  split are the runtime's to decide, so they may differ by epoch; the plan
  says so and shows each placement.
- Each buffer is booked at its largest over the epochs; a device that does
  not fit under some epoch refuses the layout, naming the builds.
- Where builds would be given different flags (``-fa`` bare or ``-fa on``,
  ``-fit off`` unknown to old builds), there is no one argv to render: an
  error naming the builds and each one's flags.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from layoutgen.core.rules import ASKED, FOR_MEMORY, Rule
from layoutgen.errors import Problem, Severity
from layoutgen.models.tensors import runs
from layoutgen.solve.plan import Part, Plan, ServicePlan
from layoutgen.solve.solver import (
    DoesNotFit,
    Memo,
    Pinned,
    _devices,
    _fit,
    _mib,
    argvs_at,
    solve_at,
    speeds_of,
)
from layoutgen.spec.schema import ExpertsAuto

if TYPE_CHECKING:
    from layoutgen.core.runtime import Runtime
    from layoutgen.models.profile import Profile
    from layoutgen.solve.scenarios import Scenarios
    from layoutgen.spec.roles import ResolvedService
    from layoutgen.spec.schema import Spec
    from layoutgen.speed.heat import HeatProfile

#: rounds of filling with less room before an unknown build's layout is refused
ROUNDS = 4


@dataclass(frozen=True, order=True)
class Epoch:
    """Builds ``first`` to ``last`` (None: unbounded), which answer alike."""

    first: int | None
    last: int | None

    @property
    def build(self) -> int | None:
        """The build it is solved at (None: the newest rules)."""
        if self.last is None:
            return None
        return self.first if self.first is not None else self.last

    def label(self, rt: Runtime) -> str:
        b = "b" if rt.FLAVOUR == "mainline" else ""
        if self.first is None and self.last is None:
            return "every build"
        if self.first is None:
            return f"builds up to {b}{self.last}"
        if self.last is None:
            return f"builds from {b}{self.first}"
        if self.first == self.last:
            return f"build {b}{self.first}"
        return f"builds {b}{self.first}-{b}{self.last}"


def unknown_builds(
    spec: Spec, services: Sequence[ResolvedService], profiles: Mapping[str, Profile]
) -> tuple[str, ...]:
    """Runtime ids without ``version:`` whose services place tensors (a budgeted
    runtime's releases are its own: layoutgen.runtimes.vllm)."""
    ids = {rs.service.runtime for rs in services if rs.service.model in profiles}
    out = []
    for rid in sorted(ids):
        runtime = spec.runtimes[rid]
        rt = runtime.rules()
        if runtime.version is None and rt.MEMORY == "tensors" and rt.dated_rules():
            out.append(rid)
    return tuple(out)


def epochs(
    rt: Runtime,
    asked: set[Rule] = ASKED,
    floor: int | None = None,
    ceiling: int | None = None,
) -> list[Epoch]:
    """The spans of builds that answer every rule asked so far alike, oldest first
    (ASKED=FOR_MEMORY: alike in what they place and allocate), from FLOOR (the first
    build that loads the models and reads the flags: older ones run none of this) to
    CEILING (the last that reads the flags as written) where known."""
    own = set(rt.dated_rules())
    low, high = floor or 0, ceiling
    flips = sorted(
        {
            r.since_build
            for r in asked
            if r in own and r.since_build > low and (high is None or r.since_build <= high)
        }
    )
    if not flips:
        return [Epoch(floor, ceiling)]
    out = [Epoch(floor, flips[0] - 1)]
    out += [Epoch(a, b - 1) for a, b in itertools.pairwise(flips)]
    out.append(Epoch(flips[-1], ceiling))
    return out


def floor_of(
    spec: Spec, services: Sequence[ResolvedService], profiles: Mapping[str, Profile], rid: str
) -> int | None:
    """The first build of runtime RID that could run its services (span_of)."""
    return span_of(spec, services, profiles, rid)[0]


def span_of(
    spec: Spec, services: Sequence[ResolvedService], profiles: Mapping[str, Profile], rid: str
) -> tuple[int | None, int | None]:
    """The builds of runtime RID that could run its services, (first, last): one that
    loads each model, and whose parser takes each service's flags as written (a build
    that refuses them runs nothing: a bare -fa is an ik build before 3928).  Every
    service of RID runs the one build, so the highest floor and the lowest ceiling any
    of them knows bound it.  None: not known (or no build reads the flags: validate
    says so)."""
    from layoutgen.spec.flags import build_range

    rt = spec.runtimes[rid].rules()
    floors: list[int | None] = []
    ceilings: list[int | None] = []
    for rs in services:
        if rs.service.runtime != rid or rs.service.model not in profiles:
            continue
        floors.append(rt.loads_since(profiles[rs.service.model]))
        found = build_range(rt.KIND, rs.service.args)
        if found is not None:
            floors.append(found[0])
            ceilings.append(found[1])
    low = [f for f in floors if f is not None]
    high = [c for c in ceilings if c is not None]
    floor, ceiling = (max(low) if low else None), (min(high) if high else None)
    if floor is not None and ceiling is not None and ceiling < floor:
        raise DoesNotFit(
            [
                Problem(
                    ("runtimes", rid),
                    f"runtimes.{rid}: no build runs these services: they need build "
                    f"{floor} or newer (the first that loads their models and reads "
                    f"their flags), and their flags as written are read only up to "
                    f"build {ceiling} (a bare -fa: ik before 3928); write the flags in "
                    "the form of the build you run, and that build as 'version:'",
                )
            ]
        )
    return floor, ceiling


def _at(spec: Spec, rid: str, build: int) -> Spec:
    """SPEC with runtime RID pinned to BUILD."""
    runtime = spec.runtimes[rid].model_copy(update={"version": str(build)})
    return spec.model_copy(update={"runtimes": {**spec.runtimes, rid: runtime}})


@dataclass(frozen=True)
class Outcome:
    """One runtime's plans over its epochs."""

    rid: str
    rt: Runtime
    plans: dict[Epoch, Plan]
    #: the first build that loads the models (None: not known)
    floor: int | None = None


def _explore(
    spec: Spec,
    services: Sequence[ResolvedService],
    profiles: Mapping[str, Profile],
    name: str,
    heats: Mapping[str, HeatProfile] | None,
    rid: str,
    pinned: Mapping[str, Pinned],
    newest: Plan,
) -> Outcome:
    """RID's plan in each epoch: one solve per span of builds that plan the same
    memory, and within it, where builds spell flags differently, the argvs alone."""
    rt = spec.runtimes[rid].rules()
    floor, ceiling = span_of(spec, services, profiles, rid)
    memo: Memo = {}
    solved: dict[int | None, Plan] = {None: newest}
    spelled: dict[tuple[Epoch, Epoch], Plan] = {}
    while True:
        memory = epochs(rt, FOR_MEMORY, floor, ceiling)
        every = epochs(rt, floor=floor, ceiling=ceiling)
        for m in memory:
            if m.build not in solved:
                assert m.build is not None
                solved[m.build] = solve_at(
                    _at(spec, rid, m.build),
                    services,
                    profiles,
                    name,
                    heats,
                    pinned=pinned,
                    fit=False,
                    memo=memo,
                    speeds=False,
                )
        for e in every:
            m = next(m for m in memory if _within(e, m))
            if (e, m) in spelled:
                continue
            plan = solved[m.build]
            if e.build != m.build:
                assert e.build is not None
                plan = argvs_at(_at(spec, rid, e.build), services, profiles, plan)
            spelled[e, m] = plan
        if (
            epochs(rt, FOR_MEMORY, floor, ceiling) == memory
            and epochs(rt, floor=floor, ceiling=ceiling) == every
        ):
            break
    plans = [(e, spelled[e, next(m for m in memory if _within(e, m))]) for e in every]
    return Outcome(rid, rt, _coarsest(plans), floor)


def _coarsest(plans: Sequence[tuple[Epoch, Plan]]) -> dict[Epoch, Plan]:
    """Adjacent epochs that plan alike, as one: the epochs a spec shows do not depend
    on which rules other specs asked earlier in the process (rules.ASKED only grows),
    so the same spec gives the same plan JSON and warnings whatever ran before it."""
    runs: list[tuple[Epoch, Plan]] = []
    for e, plan in plans:
        if runs and _alike(runs[-1][1], plan):
            first = runs[-1][0]
            runs[-1] = (Epoch(first.first, e.last), runs[-1][1])
        else:
            runs.append((e, plan))
    return dict(runs)


def _alike(a: Plan, b: Plan) -> bool:
    """Whether two epochs' plans are the same to a reader (the rules they name aside)."""
    return a.devices == b.devices and a.services == b.services and a.warnings == b.warnings


def _within(e: Epoch, m: Epoch) -> bool:
    """Whether epoch E lies inside epoch M."""
    low = m.first is None or (e.first is not None and e.first >= m.first)
    high = m.last is None or (e.last is not None and e.last <= m.last)
    return low and high


def _pinned(services: Sequence[ResolvedService], plan: Plan) -> dict[str, Pinned]:
    """Where the newest build's fill put each ``experts: auto`` service's experts."""
    out: dict[str, Pinned] = {}
    for rs in services:
        if not isinstance(rs.experts, ExpertsAuto):
            continue
        try:
            sp = plan.service(rs.name)
        except StopIteration:
            continue
        if sp.budget is not None:
            continue
        layers = {n: dev for dev, ns in sp.expert_layers.items() if dev != "host" for n in ns}
        tensors = {t: dev for dev, ts in sp.expert_tensors.items() if dev != "host" for t in ts}
        out[rs.name] = (layers, tensors)
    return out


def _has(plan: Plan, name: str) -> bool:
    return any(s.name == name for s in plan.services)


def every_build(
    spec: Spec,
    services: Sequence[ResolvedService],
    profiles: Mapping[str, Profile],
    name: str,
    heats: Mapping[str, HeatProfile] | None,
    unknown: Sequence[str],
    *,
    one_argv: bool = True,
) -> Plan:
    """The plan that holds for every build of each runtime in UNKNOWN."""
    from layoutgen.solve.scenarios import scenarios

    worlds = scenarios(spec)  # solve_at has refused a spec it cannot split
    on = {rid: {rs.name for rs in services if rs.service.runtime == rid} for rid in unknown}
    room_less: dict[str, int] = {}
    for _ in range(ROUNDS):
        newest = solve_at(spec, services, profiles, name, heats, room_less=room_less, speeds=False)
        pinned = _pinned(services, newest)
        outcomes = [
            _explore(spec, services, profiles, name, heats, rid, pinned, newest) for rid in unknown
        ]
        placed = _merged_on(newest, outcomes, on)
        problems = _fit(spec, placed, worlds, newest.order)
        if not any(p.severity is Severity.ERROR for p in problems):
            break
        short = {d.id: -d.free for d in _devices(spec, placed, worlds) if d.free < 0}
        movable = {dev for lay, _ in pinned.values() for dev in lay.values()}
        movable |= {dev for _, ts in pinned.values() for dev in ts.values()}
        if not set(short) & movable:
            raise DoesNotFit(_deciding(problems, outcomes, placed, worlds, spec))
        for dev in set(short) & movable:
            room_less[dev] = room_less.get(dev, 0) + short[dev]
    else:
        raise DoesNotFit(_deciding(problems, outcomes, placed, worlds, spec))
    if one_argv:
        clashes = [p for out in outcomes for p in _argv_clashes(out, on[out.rid])]
        if clashes:
            raise DoesNotFit(clashes)
    notes = [p for out in outcomes for p in _notes(spec, out, newest, on[out.rid], worlds)]
    devices = _devices(spec, placed, worlds)
    runtimes = dict(newest.runtimes)
    for out in outcomes:
        runtimes[out.rid] = {
            **runtimes.get(out.rid, {}),
            "rules": "every build",
            "epochs": [
                {
                    "builds": e.label(out.rt),
                    "devices": {d.id: d.used for d in plan.devices if d.used},
                }
                for e, plan in sorted(out.plans.items(), key=_oldest_first)
            ],
        }
    held = dataclasses.replace(
        newest, devices=devices, services=tuple(placed[n] for n in sorted(placed))
    )
    # speeds once, on the placement that holds for every build (each epoch's were
    # the same experts in the same places: memory is what the epochs differ in)
    held, lanes = speeds_of(spec, services, profiles, held, heats)
    said = [*lanes, *notes]
    return dataclasses.replace(
        held,
        warnings=(*newest.warnings, *(p.message for p in said)),
        warning_paths=(*newest.warning_paths, *(p.path for p in said)),
        runtimes=runtimes,
    )


def _merged_on(
    newest: Plan, outcomes: Sequence[Outcome], on: Mapping[str, set[str]]
) -> dict[str, ServicePlan]:
    """Each service of an unknown build booked, device by device, as the epoch that
    needs the most there (its buffers on that device, whatever their names: an older
    build's pinned host buffer may be a newer one's mapped file); others as planned."""
    placed = {sp.name: sp for sp in newest.services}
    for out in outcomes:
        for n in sorted(on[out.rid] & set(placed)):
            plans = [plan.service(n) for plan in out.plans.values()]
            buffers: dict[str, Part] = {}
            device_of: dict[str, str] = {}
            for dev in sorted({d for sp in plans for d in sp.device_of.values()}):
                worst = max(plans, key=lambda sp: _use_on(sp, dev))
                for buf, part in worst.buffers.items():
                    if worst.device_of[buf] == dev:
                        buffers[buf] = part
                        device_of[buf] = dev
            placed[n] = dataclasses.replace(placed[n], buffers=buffers, device_of=device_of)
    return placed


def _use_on(sp: ServicePlan, dev: str) -> int:
    return sum(p.total for b, p in sp.buffers.items() if sp.device_of[b] == dev)


def _oldest_first(item: tuple[Epoch, Plan]) -> tuple[int, int]:
    e = item[0]
    return (-1 if e.first is None else e.first, 1 << 40 if e.last is None else e.last)


def _device_use(plan: Plan) -> dict[str, int]:
    return {d.id: d.used for d in plan.devices}


def _deciding(
    problems: Sequence[Problem],
    outcomes: Sequence[Outcome],
    placed: Mapping[str, ServicePlan],
    worlds: Scenarios,
    spec: Spec,
) -> list[Problem]:
    """The refusal, with the builds under which each short device does not fit."""
    limit = {d.id: d.capacity - d.reserve for d in _devices(spec, placed, worlds)}
    short = {d.id for d in _devices(spec, placed, worlds) if d.free < 0}
    said = []
    for out in outcomes:
        ordered = sorted(out.plans.items(), key=_oldest_first)
        for dev in sorted(short):
            over = [e for e, plan in ordered if _device_use(plan).get(dev, 0) > limit[dev]]
            if not over:
                continue
            spans = _spans(over, [e for e, _ in ordered], out.rt)
            fits = len(over) < len(ordered)
            said.append(
                f"{dev}: runtimes.{out.rid} names no build, and under {spans} it does not fit"
                + ("; if yours is another, write it as 'version:'" if fits else "")
            )
    if not said:
        return list(problems)
    return [
        dataclasses.replace(p, message=f"{p.message} ({'; '.join(said)})")
        if p.severity is Severity.ERROR
        else p
        for p in problems
    ]


def _spans(some: Sequence[Epoch], every: Sequence[Epoch], rt: Runtime) -> str:
    """SOME of the epochs EVERY (oldest first), as runs of adjacent epochs."""
    runs_of: list[list[Epoch]] = []
    for e in every:
        if e not in some:
            runs_of.append([])
        elif runs_of and runs_of[-1]:
            runs_of[-1].append(e)
        else:
            runs_of.append([e])
    return " and ".join(_span(r, rt) for r in runs_of if r)


def _argv_clashes(out: Outcome, names: set[str]) -> list[Problem]:
    """Services whose builds would need different flags: no one argv renders them."""
    problems = []
    for n in sorted(names):
        groups: dict[tuple[str, ...], list[Epoch]] = {}
        for e, plan in sorted(out.plans.items(), key=_oldest_first):
            if _has(plan, n):
                groups.setdefault(plan.service(n).argv, []).append(e)
        if len(groups) < 2:
            continue
        phrases = {argv: _phrases(argv) for argv in groups}
        common = set.intersection(*(set(p) for p in phrases.values()))
        choices = []
        for argv, es in groups.items():
            own = [f"'{p}'" for p in phrases[argv] if p not in common]
            choices.append(f"{_span(es, out.rt)}: {', '.join(own) or 'none of these'}")
        problems.append(
            Problem(
                ("runtimes", out.rid),
                f"runtimes.{out.rid}: no 'version:', and builds read services.{n}'s flags "
                f"differently ({'; '.join(choices)}); write the build your image or binary "
                "runs as 'version:' (its --version prints it)",
            )
        )
    return problems


def _span(es: Sequence[Epoch], rt: Runtime) -> str:
    first, last = es[0].first, es[-1].last
    return Epoch(first, last).label(rt)


def _phrases(argv: Sequence[str]) -> list[str]:
    """ARGV as flags with their values ('-fa on', '--reasoning-budget 0')."""
    out: list[str] = []
    for word in argv:
        if (word.startswith("-") and not word[1:2].isdigit()) or not out:
            out.append(word)
        else:
            out[-1] += " " + word
    return out


def _notes(
    spec: Spec, out: Outcome, newest: Plan, names: set[str], worlds: Scenarios
) -> list[Problem]:
    """What the plan says of an unknown build: the epochs, which decide, what a
    'version:' frees, and placements that differ by build."""
    ordered = sorted(out.plans.items(), key=_oldest_first)
    span = _span([e for e, _ in ordered], out.rt) if len(ordered) > 1 else "every build"
    # the newest build the flags allow (a bare -fa ends ik's builds at 3927)
    newest_use = _device_use(ordered[-1][1])
    costs = []
    for dev in sorted(newest_use):
        worst_e, worst = max(ordered, key=lambda kv: _device_use(kv[1]).get(dev, 0))
        extra = _device_use(worst).get(dev, 0) - newest_use.get(dev, 0)
        if extra > 0:
            costs.append(f"{worst_e.label(out.rt)} decide {dev} (+{_mib(extra)})")
    notes = []
    if costs:  # else every build needs what the newest does: nothing to say
        notes.append(
            Problem(
                ("runtimes", out.rid),
                f"runtimes.{out.rid}: no 'version:': planned for {span}"
                + (
                    " (those that load its models and read its flags as written)"
                    if out.floor is not None or ordered[-1][0].last is not None
                    else ""
                )
                + f", {len(ordered)} epochs of its rules; {'; '.join(costs)}; 'version:' "
                "would free that for a newer build",
                Severity.WARNING,
            )
        )
    for n in sorted(names):
        placements: dict[tuple[object, ...], list[Epoch]] = {}
        for e, plan in ordered:
            if _has(plan, n):
                sp = plan.service(n)
                key = (_ranges(sp.expert_layers), _split(sp))
                placements.setdefault(key, []).append(e)
        if len(placements) < 2:
            continue
        shown = "; ".join(
            f"{_span(es, out.rt)}: experts {key[0]}, layers {key[1]}"
            for key, es in placements.items()
        )
        notes.append(
            Problem(
                ("services", n),
                f"services.{n}: builds place it differently ({shown}); the plan books each "
                "device at its largest; write 'version:' for one placement",
                Severity.WARNING,
            )
        )
    return notes


def _ranges(by_device: Mapping[str, Sequence[int]]) -> str:
    parts = [f"{dev} {_compact(ns)}" for dev, ns in sorted(by_device.items()) if ns]
    return ", ".join(parts) if parts else "none"


def _split(sp: ServicePlan) -> str:
    by: dict[str, list[int]] = {}
    for layer, buf in sorted(sp.layer_buffer.items()):
        by.setdefault(buf, []).append(layer)
    return ", ".join(f"{buf} {_compact(ns)}" for buf, ns in sorted(by.items())) or "none"


def _compact(ns: Sequence[int]) -> str:
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs(ns))
