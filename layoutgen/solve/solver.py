"""The solver: fixed services first, then expert layers fill what is left (DESIGN §6).

Order matters and is deterministic: services whose footprint is fixed (every
mode but ``experts: auto``) are placed first, by priority then name; then
each ``experts: auto`` service starts with all its experts in host RAM and
takes GPU room layer by layer, hottest first by its heat policy, each layer
preferring the GPU that holds its attention.  Services that ``conflict``
never run together, so they are budgeted per scenario (each maximal set of
services that can run at once).  The result is a :class:`Plan`, or
:class:`DoesNotFit` with located problems naming device, need, capacity and
shortfall.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from layoutgen.core.placement import expert_kind, expert_name
from layoutgen.core.rules import Rule, flags_only, tracing
from layoutgen.core.setting import Setting, expert_bytes
from layoutgen.errors import LayoutgenError, Problem, Severity
from layoutgen.models.profile import Profile
from layoutgen.solve.argv import server_argv, vllm_argv
from layoutgen.solve.footprint import (
    add_parts,
    buffers,
    draft_buffers,
    draft_setting,
    expert_tensors,
    layer_split,
    moved_tensors,
    setting,
    shares,
)
from layoutgen.solve.plan import PARTS, DevicePlan, Part, Plan, ServicePlan
from layoutgen.solve.scenarios import Scenarios, TooManyScenarios, scenarios
from layoutgen.spec.roles import ResolvedService
from layoutgen.spec.schema import ExpertsAuto, ExpertsExplicit, ExpertsGpu, ExpertsNCpuMoe, Spec
from layoutgen.spec.sizes import format_size

if TYPE_CHECKING:
    from layoutgen.speed.heat import HeatProfile


class DoesNotFit(LayoutgenError):
    """The layout needs more memory than a device has: refused, never rendered."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("\n".join(p.message for p in problems))


def heat_order(layers: Sequence[int], policy: str) -> list[int]:
    """Expert layers, hottest first.

    ``head-tail`` (seed 001: head layers are hottest, then tail, then spread
    the middle) alternates head and tail and takes one middle layer after
    every two of each, so 20 layers come out 8 head, 8 tail, 4 middle, the
    split seed 001 planned by hand.  ``speed`` starts from head-tail and is then
    ordered by the model's heat (:func:`_fill`).
    """
    ordered = sorted(layers)
    if policy == "head":
        return ordered
    if policy == "tail":
        return ordered[::-1]
    spread = _bisect(ordered)
    if policy == "even":
        return spread
    out: list[int] = []
    taken: set[int] = set()
    head, tail = iter(ordered), iter(ordered[::-1])
    middle = iter(spread)
    pattern = ("head", "tail", "head", "tail", "middle")
    while len(out) < len(ordered):
        for kind in pattern:
            source = head if kind == "head" else tail if kind == "tail" else middle
            for layer in source:
                if layer not in taken:
                    taken.add(layer)
                    out.append(layer)
                    break
    return out


def _bisect(ordered: list[int]) -> list[int]:
    """Evenly spread order: the middle, then the middles of each half, and so on."""
    out: list[int] = []
    spans = [(0, len(ordered) - 1)]
    while spans:
        nxt: list[tuple[int, int]] = []
        for lo, hi in spans:
            if lo > hi:
                continue
            mid = (lo + hi) // 2
            out.append(ordered[mid])
            nxt += [(lo, mid - 1), (mid + 1, hi)]
        spans = nxt
    return out


def solve(
    spec: Spec,
    services: Sequence[ResolvedService],
    profiles: Mapping[str, Profile],
    name: str,
    heats: Mapping[str, HeatProfile] | None = None,
    *,
    one_argv: bool = True,
) -> Plan:
    """The plan; HEATS: each model's expert heat (``models.<id>.heat``) where given.

    A runtime without ``version:`` is planned for every build
    (:mod:`layoutgen.solve.builds`); ONE_ARGV: refuse it where builds would be given
    different flags (False: the memory plan alone, as the truth table asks)."""
    from layoutgen.solve.builds import every_build, unknown_builds

    unknown = unknown_builds(spec, services, profiles)
    if not unknown:
        return solve_at(spec, services, profiles, name, heats)
    return every_build(spec, services, profiles, name, heats, unknown, one_argv=one_argv)


#: expert layer -> GPU id, single expert tensor -> GPU id: a placement held fixed
Pinned = tuple[Mapping[int, str], Mapping[str, str]]


def solve_at(
    spec: Spec,
    services: Sequence[ResolvedService],
    profiles: Mapping[str, Profile],
    name: str,
    heats: Mapping[str, HeatProfile] | None = None,
    *,
    pinned: Mapping[str, Pinned] | None = None,
    room_less: Mapping[str, int] | None = None,
    fit: bool = True,
    memo: Memo | None = None,
    speeds: bool = True,
) -> Plan:
    """The plan under each runtime's one set of rules (its ``version:``, else the
    newest).  PINNED: ``experts: auto`` services whose placement is given, not filled;
    ROOM_LESS: bytes per GPU that filling leaves free beyond its reserve; FIT=False:
    the plan of a layout that does not fit, for its figures, instead of DoesNotFit;
    MEMO: service plans of other builds, reused where they answer alike (solve.builds);
    SPEEDS=False: no decode speeds (an unknown build's epochs are booked for memory:
    speed is figured once, on the plan that holds for them all)."""
    heats = heats or {}
    pinned = pinned or {}
    room_less = room_less or {}
    by_name = {rs.name: rs for rs in services if rs.service.model in profiles}
    # services of a budgeted runtime (vLLM) are planned whole: solve/budgeted.py
    budgeted = {
        n
        for n, rs in by_name.items()
        if spec.runtimes[rs.service.runtime].rules().MEMORY == "budget"
    }
    settings = {
        n: setting(spec, rs, profiles[rs.service.model])
        for n, rs in by_name.items()
        if n not in budgeted
    }
    capacity = {g.id: g.vram for g in spec.host.gpus}
    reserve = {g.id: g.reserve + room_less.get(g.id, 0) for g in spec.host.gpus}
    # Layers split by the service's tensor_split, else each GPU's usable MiB; the argv
    # pins the same shares (-ts).
    shares_of: dict[str, tuple[float, ...]] = {
        n: s.row_shares or shares(spec, by_name[n], s.gpus) for n, s in settings.items()
    }
    order = sorted(
        by_name,
        key=lambda n: (
            isinstance(by_name[n].experts, ExpertsAuto) and n not in budgeted,
            -by_name[n].service.priority,
            n,
        ),
    )
    try:
        worlds = scenarios(spec)
    except TooManyScenarios as exc:
        raise DoesNotFit(exc.problems) from None
    placed: dict[str, ServicePlan] = {}
    splits = {n: layer_split(settings[n], shares_of[n]) for n in order if n in settings}
    drafts = _drafts(spec, by_name, settings, profiles, shares_of)
    # Every service's fixed part first -- for auto services, all experts on the
    # host -- so that filling one auto service never starves another's base.
    for n in order:
        if n not in settings:
            continue
        if n in pinned:  # an auto service held where an earlier solve put its experts
            layers_at, tensors_at = pinned[n]
            experts = {layer: settings[n].buffer_of(g) for layer, g in layers_at.items()}
            tensors = {t: settings[n].buffer_of(g) for t, g in tensors_at.items()}
        else:
            experts, tensors = _fixed_experts(by_name[n], settings[n], splits[n])
        if memo is None:
            placed[n] = _service_plan(settings[n], splits[n], experts, tensors, drafts.get(n))
        else:
            placed[n] = _remembered(memo, settings[n], splits[n], experts, tensors, drafts.get(n))
    # then budgeted services whole, beside those (their KV must hold one request)
    if budgeted:  # vLLM's rules, imported only for specs that have such a service
        from layoutgen.solve.budgeted import interconnect_notes, release_notes, start_checks
        from layoutgen.solve.budgeted import service_plan as budgeted_plan
    for n in order:
        if n in budgeted:
            found = budgeted_plan(
                spec,
                by_name[n],
                profiles[by_name[n].service.model],
                _used_beside(n, placed, worlds),
            )
            if isinstance(found, Problem):
                raise DoesNotFit([found])
            placed[n] = found
    for n in order:
        rs = by_name[n]
        if isinstance(rs.experts, ExpertsAuto) and n not in budgeted and n not in pinned:
            experts, tensors = _fill(
                rs,
                settings[n],
                splits[n],
                placed,
                worlds,
                capacity,
                reserve,
                drafts.get(n),
                heats.get(rs.service.model),
            )
            placed[n] = _service_plan(settings[n], splits[n], experts, tensors, drafts.get(n))
    for n in order:
        if n not in budgeted and by_name[n].service.lora is not None:
            found_bytes = adapter_bytes(by_name[n])
            if isinstance(found_bytes, Problem):
                raise DoesNotFit([found_bytes])
            placed[n] = _with_adapters(placed[n], found_bytes)
    problems = _fit(spec, placed, worlds, order)
    if fit and any(p.severity is Severity.ERROR for p in problems):
        raise DoesNotFit(problems)
    problems = [p for p in problems if p.severity is not Severity.ERROR]
    if budgeted:
        checked, refused = start_checks(spec, placed, order)
        if refused:
            raise DoesNotFit(refused)
        placed.update(checked)
        problems += interconnect_notes(spec, [by_name[n] for n in order if n in budgeted])
        problems += release_notes(spec, [by_name[n] for n in order if n in budgeted])
    placed.update(_argvs(spec, by_name, placed, order, budgeted, shares_of))
    devices = _devices(spec, placed, worlds)
    if speeds:
        problems += _speeds(spec, by_name, profiles, placed, heats)
    warnings = tuple(p.message for p in problems)
    services_sorted = tuple(placed[n] for n in sorted(placed))
    used = sorted({by_name[n].service.runtime for n in placed})
    assumed = {rid: spec.runtimes[rid].rules().assumed() for rid in used}
    paths = tuple(p.path for p in problems)
    return Plan(
        name, spec.host.name, devices, services_sorted, warnings, tuple(order), assumed, paths
    )


#: service name -> (its plan's inputs as any build, the rules its plan asked with this
#: build's answers, the plan): a service's plans over the epochs of an unknown build
Memo = dict[str, list[tuple[tuple[object, ...], tuple[tuple[Rule, bool], ...], ServicePlan]]]


def _remembered(
    memo: Memo,
    s: Setting,
    layers: Mapping[int, str],
    experts: Mapping[int, str],
    tensors: Mapping[str, str],
    draft: Mapping[str, Part] | None,
) -> ServicePlan:
    """The service's plan, reused from another build whose answers to every rule that
    plan asked are this build's (a CPU-only service asks no layer-split rule, so the
    builds on either side of one plan it alike); traced whole (rules.remembering)."""
    version = s.rt.version
    inputs = (_any_build(s), dict(layers), dict(experts), dict(tensors), dict(draft or {}))
    for known, answers, sp in memo.get(s.name, []):
        if known == inputs and all(r.applies(version) == a for r, a in answers):
            return sp
    with tracing() as asked:
        sp = _service_plan(s, layers, experts, tensors, draft)
    answers = tuple((r, r.applies(version)) for r in sorted(asked, key=lambda r: r.name))
    memo.setdefault(s.name, []).append((inputs, answers, sp))
    return sp


def _any_build(s: Setting) -> Setting:
    """S with its runtime (and its KV settings' runtime) at no version."""
    rt = dataclasses.replace(s.rt, version=None)
    return dataclasses.replace(s, rt=rt, kv=dataclasses.replace(s.kv, rt=rt))


def _argvs(
    spec: Spec,
    by_name: Mapping[str, ResolvedService],
    placed: Mapping[str, ServicePlan],
    order: Sequence[str],
    budgeted: set[str],
    shares_of: Mapping[str, tuple[float, ...]],
) -> dict[str, ServicePlan]:
    """Each placed service with the argv that renders it (rules asked here are about
    spelling: layoutgen.solve.builds re-renders them alone between memory epochs)."""
    out = {}
    with flags_only():
        for n in order:
            if n in budgeted:
                argv = vllm_argv(spec, by_name[n], placed[n])
            else:
                argv = server_argv(spec, by_name[n], placed[n], shares_of[n])
            out[n] = dataclasses.replace(placed[n], argv=argv)
    return out


def argvs_at(
    spec: Spec,
    services: Sequence[ResolvedService],
    profiles: Mapping[str, Profile],
    plan: Plan,
) -> Plan:
    """PLAN with every argv rendered for SPEC (its builds' spellings): what a build
    that plans the same memory but spells flags otherwise is given."""
    by_name = {rs.name: rs for rs in services if rs.service.model in profiles}
    placed = {sp.name: sp for sp in plan.services}
    budgeted = {n for n in placed if placed[n].budget is not None}
    shares_of = {}
    for n in placed:
        if n not in budgeted:
            s = setting(spec, by_name[n], profiles[by_name[n].service.model])
            shares_of[n] = s.row_shares or shares(spec, by_name[n], s.gpus)
    placed.update(_argvs(spec, by_name, placed, plan.order, budgeted, shares_of))
    return dataclasses.replace(plan, services=tuple(placed[n] for n in sorted(placed)))


def _drafts(
    spec: Spec,
    by_name: Mapping[str, ResolvedService],
    settings: Mapping[str, Setting],
    profiles: Mapping[str, Profile],
    shares_of: Mapping[str, tuple[float, ...]],
) -> dict[str, dict[str, Part]]:
    """Each llama.cpp service's draft model's buffers (``draft:``), by buffer name."""
    out: dict[str, dict[str, Part]] = {}
    for n, s in settings.items():
        draft = by_name[n].service.draft
        if draft is not None and draft.model in profiles:
            d = draft_setting(spec, by_name[n], s, profiles[draft.model])
            out[n] = draft_buffers(d, shares_of[n])
    return out


def speeds_of(
    spec: Spec,
    services: Sequence[ResolvedService],
    profiles: Mapping[str, Profile],
    plan: Plan,
    heats: Mapping[str, HeatProfile] | None = None,
) -> tuple[Plan, list[Problem]]:
    """PLAN with each service's decode speed attached, and the lanes warnings."""
    by_name = {rs.name: rs for rs in services if rs.service.model in profiles}
    placed = {sp.name: sp for sp in plan.services}
    problems = _speeds(spec, by_name, profiles, placed, heats or {})
    with_speed = tuple(placed[sp.name] for sp in plan.services)
    return dataclasses.replace(plan, services=with_speed), problems


def _speeds(
    spec: Spec,
    by_name: Mapping[str, ResolvedService],
    profiles: Mapping[str, Profile],
    placed: dict[str, ServicePlan],
    heats: Mapping[str, HeatProfile],
) -> list[Problem]:
    """Each service's predicted decode speed (attached to its plan), and a warning for
    each pair of services that together ask host RAM for more than it gives."""
    if (
        spec.host.memory_bandwidth is None
        and spec.host.memory_bandwidth_measured is None
        and spec.host.cpu.model is None
        and not spec.host.gpus
    ):
        return []  # nothing to predict with: the speed model is not even imported
    from layoutgen.solve.plan_speed import lanes_warnings, service_speed
    from layoutgen.spec.checks import conflicting

    speeds = {}
    before = dict(placed)  # the plans the trades are figured on (each service's own)
    for n, sp in before.items():
        mid = by_name[n].service.model
        others = [
            (by_name[o], before[o], profiles[by_name[o].service.model])
            for o in sorted(before)
            if o != n
        ]
        draft = by_name[n].service.draft
        found = service_speed(
            spec,
            by_name[n],
            sp,
            profiles[mid],
            heats.get(mid),
            others,
            draft_profile=profiles.get(draft.model) if draft is not None else None,
        )
        if found is not None:
            placed[n] = dataclasses.replace(sp, speed=found)
            if not isinstance(found, str):
                speeds[n] = found
    return lanes_warnings(spec, speeds, conflicting(spec)) if speeds else []


def adapter_bytes(rs: ResolvedService) -> int | Problem:
    """A llama.cpp service's LoRA adapters: their GGUF tensor data (``size:``, else the
    file's bytes after its header), all of them together."""
    from pathlib import Path

    from layoutgen.models.gguf_header import GGUFError, read_header

    lora = rs.service.lora
    total = 0
    for i, a in enumerate(() if lora is None else lora.adapters):
        if a.size is not None:
            total += a.size
            continue
        try:
            header = read_header(Path(a.path))
        except (OSError, GGUFError) as exc:
            return Problem(
                ("services", rs.name, "lora", "adapters", i, "path"),
                f"services.{rs.name}.lora.adapters[{i}].path: cannot read the adapter's GGUF "
                f"header ({exc}); write its size under 'size:' (its tensor bytes: the file's "
                "size is a safe upper bound) where the file is not on this machine",
            )
        total += header.file_size - header.data_offset
    return total


def _with_adapters(sp: ServicePlan, nbytes: int) -> ServicePlan:
    """llama.cpp loads each adapter tensor into the buffer type of its base tensor
    (llama-adapter.cpp ``llama_adapter_lora_init_impl``: ``buft =
    ggml_backend_buffer_get_type(model_tensor->buffer)``), so an adapter spreads over
    the devices its model's layers are on.  Which tensor goes where is not known
    without the adapter's tensor list, so every such buffer is charged the whole
    adapter: an upper bound."""
    where = set(sp.layer_buffer.values()) or {b for b, d in sp.device_of.items() if d == "host"}
    buffers = dict(sp.buffers)
    for buf in sorted(where):
        part = buffers.get(buf)
        if part is None:
            continue
        basis = {**part.basis, "created": "upper-bound"}
        buffers[buf] = dataclasses.replace(part, created=part.created + nbytes, basis=basis)
    return dataclasses.replace(sp, buffers=buffers)


def _fixed_experts(
    rs: ResolvedService, s: Setting, layers: Mapping[int, str]
) -> tuple[dict[int, str], dict[str, str]]:
    """Expert layer -> GPU buffer, and single expert tensor -> GPU buffer, for every
    mode but auto (absent: host)."""
    expert_layers = sorted(expert_bytes(s.profile, s.rt))
    mode = rs.experts
    if isinstance(mode, ExpertsGpu):
        return {n: layers[n] for n in expert_layers if n in layers}, {}
    if isinstance(mode, ExpertsNCpuMoe):
        host = s.rt.n_cpu_moe_host(s, layers, expert_layers, mode.n)
        return {n: layers[n] for n in expert_layers if n not in host and n in layers}, {}
    if isinstance(mode, ExpertsExplicit):
        whole = {n: s.buffer_of(g) for g, ns in mode.layers.items() for n in ns}
        single = {t: s.buffer_of(g) for g, ts in mode.tensors.items() for t in ts}
        return whole, single
    return {}, {}  # host, and the starting point of auto


def _used_beside(n: str, placed: Mapping[str, ServicePlan], worlds: Scenarios) -> dict[str, int]:
    """Per device: the most the already-placed services use beside ``n`` in any
    scenario that includes ``n``."""
    per = _per_device(placed[o] for o in placed if o != n)
    out: dict[str, int] = {}
    for dev, use in per.items():
        world = worlds.worst(use, given=n)
        out[dev] = sum(v for s, v in use.items() if s in world)
    return out


def _per_device(plans: Iterable[ServicePlan]) -> dict[str, dict[str, int]]:
    """device -> service -> bytes it uses there."""
    out: dict[str, dict[str, int]] = {}
    for sp in plans:
        for buf, part in sp.buffers.items():
            dev = sp.device_of[buf]
            out.setdefault(dev, {})
            out[dev][sp.name] = out[dev].get(sp.name, 0) + part.total
    return out


def _fill(
    rs: ResolvedService,
    s: Setting,
    layers: Mapping[int, str],
    placed: Mapping[str, ServicePlan],
    worlds: Scenarios,
    capacity: Mapping[str, int],
    reserve: Mapping[str, int],
    draft: Mapping[str, Part] | None = None,
    heat: HeatProfile | None = None,
) -> tuple[dict[int, str], dict[str, str]]:
    """Whole expert layers hottest first, then single tensors of the next hottest
    layers into what is left (as llama.cpp's ``--fit`` does), each preferring the
    GPU that holds the layer's attention.

    Policy ``speed``: hottest by the model's heat.  Under the speed model a routed
    expert tensor moved from host RAM to a GPU saves its bytes x k/n x heat over
    (1/host bandwidth - 1/GPU bandwidth) per token, the same per byte for every
    tensor of a layer, so taking layers by heat (then single tensors of the next
    ones) is the greedy optimum of predicted decode speed for the room given."""
    assert isinstance(rs.experts, ExpertsAuto)
    units = expert_tensors(s)
    sizes = {layer: sum(b for _, b in ts) for layer, ts in units.items()}
    beside = _used_beside(rs.name, placed, worlds)
    base = buffers(s, layers, {})
    room = {s.buffer_of(g): capacity[g] - reserve[g] - beside.get(g, 0) for g in s.gpus}
    for buf, part in (draft or {}).items():
        if buf in room:
            room[buf] -= part.total  # the draft model's share is fixed
    free = dict(room)
    for buf, part in base.items():
        if buf in free:
            free[buf] -= part.total
    limit = rs.experts.max_layers if rs.experts.max_layers is not None else len(sizes)
    chosen: dict[int, str] = {}
    hot = heat_order(list(sizes), rs.experts.policy)
    if rs.experts.policy == "speed":
        from layoutgen.speed.heat import prior

        h = heat if heat is not None else prior(s.profile.arch, sorted(sizes))
        hot.sort(key=lambda layer: -h.of(layer))  # stable: ties stay in head-tail order

    def where(layer: int, nbytes: int) -> str | None:
        home = layers.get(layer)
        others = sorted((b for b in free if b != home), key=lambda b: (-free[b], b))
        return next((b for b in [home, *others] if b in free and free[b] >= nbytes), None)

    for layer in hot:
        if len(chosen) >= limit:
            break
        target = where(layer, sizes[layer])
        if target is not None:
            chosen[layer] = target
            free[target] -= sizes[layer]
    single: dict[str, str] = {}
    touched: set[int] = set()
    for layer in hot:
        if layer in chosen:
            continue
        for names, nbytes in _pieces(s, units[layer]):
            if len(chosen) + len(touched - {layer}) >= limit:
                break
            target = where(layer, nbytes)
            if target is not None:
                single.update(dict.fromkeys(names, target))
                free[target] -= nbytes
                touched.add(layer)
    return chosen, _settle(s, layers, chosen, single, room)


def _pieces(s: Setting, tensors: Sequence[tuple[str, int]]) -> list[tuple[tuple[str, ...], int]]:
    """A layer's expert tensors as the pieces that may move alone, largest first:
    each tensor, but those one op reads together (Runtime.EXPERT_GROUPS) as one."""
    groups: dict[frozenset[str], list[tuple[str, int]]] = {}
    for name, nbytes in tensors:
        found = expert_kind(name)
        assert found is not None  # expert_tensors holds routed-expert tensors only
        groups.setdefault(s.rt.expert_group(found[1]), []).append((name, nbytes))
    pieces = [(tuple(n for n, _ in ts), sum(b for _, b in ts)) for ts in groups.values()]
    return sorted(pieces, key=lambda p: (-p[1], p[0]))


def _settle(
    s: Setting,
    layers: Mapping[int, str],
    chosen: Mapping[int, str],
    single: dict[str, str],
    room: Mapping[str, int],
) -> dict[str, str]:
    """Single tensors, less the last ones placed on a GPU while the whole service's
    buffers there (compute grows when a layer's experts split) exceed its room."""
    while single:
        use = buffers(s, layers, chosen, single)
        over = {b for b in room if b in use and use[b].total > room[b]}
        last = next((t for t in reversed(list(single)) if single[t] in over), None)
        if last is None:
            break  # what is over does not hold single tensors: _fit reports it
        for name in _partners(s, last, single):
            del single[name]
    return single


def _partners(s: Setting, name: str, single: Mapping[str, str]) -> list[str]:
    """``name`` and the tensors of its layer that must move with it (EXPERT_GROUPS)."""
    found = expert_kind(name)
    assert found is not None
    layer, kind = found
    return [n for k in sorted(s.rt.expert_group(kind)) if (n := expert_name(layer, k)) in single]


def _service_plan(
    s: Setting,
    layers: Mapping[int, str],
    experts: Mapping[int, str],
    tensors: Mapping[str, str] | None = None,
    draft: Mapping[str, Part] | None = None,
) -> ServicePlan:
    bufs = buffers(s, layers, experts, tensors)
    if draft:
        bufs = add_parts(bufs, draft)
    single = dict(tensors or {})
    by_device: dict[str, list[int]] = {}
    for layer in sorted(expert_tensors(s)):
        buf = experts.get(layer)
        by_device.setdefault(s.device_of(buf) if buf else "host", []).append(layer)
    singles: dict[str, list[str]] = {}
    for name, buf in single.items():
        singles.setdefault(s.device_of(buf), []).append(name)
    return ServicePlan(
        name=s.name,
        buffers=bufs,
        device_of={b: s.device_of(b) for b in bufs},
        expert_layers={d: tuple(v) for d, v in sorted(by_device.items())},
        layer_buffer=dict(sorted(layers.items())),
        expert_tensors={d: tuple(sorted(v, key=_tensor_key)) for d, v in sorted(singles.items())},
        tensor_overrides=tuple(s.user_rules),
        moved=moved_tensors(s, layers, experts, tensors),
        draft=dict(draft or {}),
    )


def _tensor_key(name: str) -> tuple[int, str]:
    parts = name.split(".")
    return (int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else -1, name)


def _device_use(plans: Iterable[ServicePlan]) -> dict[str, list[tuple[str, str, str, int]]]:
    """device -> [(service, buffer, part, bytes)] for every non-zero part."""
    out: dict[str, list[tuple[str, str, str, int]]] = {}
    for sp in plans:
        for buf, part in sp.buffers.items():
            for key in PARTS:
                value = getattr(part, key)
                if value:
                    out.setdefault(sp.device_of[buf], []).append((sp.name, buf, key, value))
    return out


def _limits(spec: Spec) -> dict[str, tuple[int, int]]:
    out = {g.id: (g.vram, g.reserve) for g in spec.host.gpus}
    out["host"] = (spec.host.ram, spec.host.ram_reserve)
    return out


def _fit(
    spec: Spec,
    placed: Mapping[str, ServicePlan],
    worlds: Scenarios,
    order: Sequence[str],
) -> list[Problem]:
    problems: list[Problem] = []
    seen: set[tuple[str, str]] = set()
    per = _per_device(placed[n] for n in order if n in placed)
    for dev, (cap, res) in _limits(spec).items():
        # the worst set of services that run together on this device
        world = worlds.worst(per.get(dev, {}))
        parts = _device_use(placed[n] for n in order if n in world and n in placed).get(dev, [])
        need = sum(p[3] for p in parts)
        if need <= cap - res:
            continue
        for culprit, own in _culprits(parts, cap - res, order):
            if (culprit, dev) in seen:
                continue
            seen.add((culprit, dev))
            bufs = [b for b, d in placed[culprit].device_of.items() if d == dev]
            problems.append(
                Problem(
                    ("services", culprit),
                    _shortfall(culprit, dev, bufs, need, cap, res, parts, alone=own)
                    + _margins(dev, res, parts),
                )
            )
    problems += _bound_nodes(spec, placed, order)
    # threads of the services that run at once (conflicting ones never do)
    asked = {n: spec.services[n].threads or 0 for n in spec.services}
    together = worlds.worst(asked)
    threads = sum(v for n, v in asked.items() if n in together)
    if threads > spec.host.cpu.threads:
        who = "services" if len(together) == len(asked) else f"services {_names(together)}"
        problems.append(
            Problem(
                ("host", "cpu", "threads"),
                f"host.cpu.threads: {who} ask for {threads} threads in all, running "
                f"together, more than the host's {spec.host.cpu.threads}; they will "
                "compete for cores",
                Severity.WARNING,
            )
        )
    return problems


def _bound_nodes(
    spec: Spec, placed: Mapping[str, ServicePlan], order: Sequence[str]
) -> list[Problem]:
    """A service bound to NUMA nodes (``numa: {policy: bind}``: the unit's
    ``NUMAPolicy=bind``) can take host memory only there: the kernel refuses a page
    beyond them rather than place it elsewhere, so what the service keeps in host RAM
    must fit those nodes' share of it (host.ram and ram_reserve split evenly over the
    nodes)."""
    out: list[Problem] = []
    total = spec.host.cpu.nodes
    for name in order:
        numa = spec.services[name].numa
        sp = placed.get(name)
        if sp is None or numa is None or numa.policy != "bind" or numa.nodes is None:
            continue
        need = sum(
            getattr(part, key)
            for buf, part in sp.buffers.items()
            if sp.device_of[buf] == "host"
            for key in PARTS
        )
        share = len(set(numa.nodes)) / total
        cap, res = int(spec.host.ram * share), int(spec.host.ram_reserve * share)
        if need > cap - res:
            nodes = ",".join(map(str, numa.nodes))
            out.append(
                Problem(
                    ("services", name, "numa", "nodes"),
                    f"services.{name}: does not fit NUMA node {nodes} it is bound to "
                    f"(numa.policy bind): needs {_mib(need)} of host RAM, has {_mib(cap)} "
                    f"- reserve {_mib(res)} = {_mib(cap - res)} (host.ram and ram_reserve "
                    f"over {total} nodes), short by {_mib(need - (cap - res))}; bind it to "
                    "more nodes, interleave instead, or keep less in host RAM",
                )
            )
    return out


def _names(names: Iterable[str]) -> str:
    return ", ".join(sorted(names))


def _culprits(
    parts: list[tuple[str, str, str, int]], room: int, order: Sequence[str]
) -> list[tuple[str, bool]]:
    """The services to blame for an over-committed device, and whether each is too
    big alone: every service whose own share exceeds the room; else (only together
    they do not fit) the one with the largest share."""
    share: dict[str, int] = {}
    for service, _buf, _part, value in parts:
        share[service] = share.get(service, 0) + value
    alone = [n for n in order if share.get(n, 0) > room]
    if alone:
        return [(n, True) for n in alone]
    largest = max(share, key=lambda n: (share[n], -list(order).index(n)))
    return [(largest, False)]


def _shortfall(
    service: str,
    dev: str,
    bufs: list[str],
    need: int,
    cap: int,
    res: int,
    parts: list[tuple[str, str, str, int]],
    *,
    alone: bool,
) -> str:
    if dev == "host":
        where = "host RAM"
    else:
        gpu_bufs = [b for b in bufs if b != "CUDA_Host"]
        where = f"GPU {dev}" + (f" (its {gpu_bufs[0]})" if gpu_bufs else "")
    share: dict[str, int] = {}
    for s, _b, _k, v in parts:
        share[s] = share.get(s, 0) + v
    room = cap - res
    if alone:
        own = [p for p in parts if p[0] == service]
        largest = sorted(own, key=lambda p: (-p[3], p[1], p[2]))[:3]
        biggest = ", ".join(f"{k} {_mib(v)}" for _s, _b, k, v in largest)
        others = "" if len(share) == 1 else f" (and the device holds {_others(share, service)})"
        return (
            f"services.{service}: does not fit {where} even alone: needs "
            f"{_mib(share[service])}, has {_mib(cap)} - reserve {_mib(res)} = "
            f"{_mib(room)}, short by {_mib(share[service] - room)}; largest: {biggest}{others}"
        )
    ordered = sorted(share.items(), key=lambda i: -i[1])
    shown = _summing([v for _s, v in ordered], need)
    shares = ", ".join(f"{s} {v}" for (s, _v), v in zip(ordered, shown, strict=True))
    # each fits alone: they race for the device only by running at the same time
    tenants = [s for s in sorted(share) if s != service]
    named = ", ".join(tenants[:-1]) + " and " + tenants[-1] if len(tenants) > 1 else tenants[0]
    rest = "others start" if len(tenants) > 1 else "other starts"
    on = "a GPU of its own (gpus:)" if dev != "host" else "another host"
    return (
        f"services.{service}: does not fit {where} beside the services sharing it: together "
        f"they need {_mib(need)}, has {_mib(cap)} - reserve {_mib(res)} = {_mib(room)}, short "
        f"by {_mib(need - room)}; shares: {shares}. If {service} never needs to run at the "
        f"same time as {named}, make them alternatives: 'conflicts: [{', '.join(tenants)}]' "
        f"on {service}, and 'default: true' on the one that starts at boot (the {rest} "
        f"by 'systemctl start NAME'); else give one {on}, or make one smaller"
    )


def _margins(dev: str, res: int, parts: list[tuple[str, str, str, int]]) -> str:
    """The refusal's last clause: the margins inside its figures, so a user can judge
    them (issue 30: a refused layout the user knows runs must say what it assumed)."""
    if dev == "host":
        return f"; margins in these figures: ram_reserve {_mib(res)} kept free"
    per = {s: v for s, _b, k, v in parts if k == "overhead"}
    each = ", ".join(f"{s} {_mib(v)}" for s, v in sorted(per.items())) or "none"
    return (
        f"; margins in these figures: reserve {_mib(res)} kept free, per-process overhead "
        f"(CUDA context: host.gpu_overhead, else the GPU class's default) {each}, compute "
        "estimated high (measured: replaces it)"
    )


def _summing(values: list[int], total: int) -> list[str]:
    """VALUES as MiB that add up to TOTAL's MiB as printed (largest remainders round
    up), so the shares a reader adds match the need the message states."""
    if sum(values) != total or abs(total) >= 2**40:
        return [_mib(v) for v in values]
    mib = 2**20
    floors = [v // mib for v in values]
    left = round(total / mib) - sum(floors)
    order = sorted(range(len(values)), key=lambda i: (-(values[i] % mib), i))
    for i in order[: max(left, 0)]:
        floors[i] += 1
    return [f"{f:,} MiB" for f in floors]


def _others(share: Mapping[str, int], service: str) -> str:
    return ", ".join(f"{s} {_mib(v)}" for s, v in sorted(share.items()) if s != service)


def _mib(n: int) -> str:
    return f"{n / 2**20:,.0f} MiB" if abs(n) < 2**40 else format_size(n)


def _devices(
    spec: Spec, placed: Mapping[str, ServicePlan], worlds: Scenarios
) -> tuple[DevicePlan, ...]:
    used: dict[str, int] = {}
    for dev, use in _per_device(placed.values()).items():
        world = worlds.worst(use)
        used[dev] = sum(v for s, v in use.items() if s in world)
    return tuple(
        DevicePlan(dev, cap, res, used.get(dev, 0)) for dev, (cap, res) in _limits(spec).items()
    )


__all__ = ["DoesNotFit", "Part", "Pinned", "heat_order", "scenarios", "solve", "solve_at"]
