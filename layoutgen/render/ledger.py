"""Where every byte of a layout change goes: a ledger per device (issue 36).

Two plans of a layout are compared tensor by tensor (each loaded weight tensor's
device, before and after, from the plan's decisions and the runtime's placement
rules) and buffer part by buffer part (KV cache, compute, created tensors,
overhead).  Every device's change in use is the sum of its **terms**: the tensors
that came and went, each service's other parts, services added and removed, and,
where a weight figure is not the sum of its tensors (a measured buffer, ``-sm row``
splits, a tied output's copy, a vLLM checkpoint share), that difference, named.
:func:`ledger` returns the terms; :func:`check` says whether they add up, to the
byte, which the summary prints and the tests hold it to.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from layoutgen.render.validate import Validated
from layoutgen.solve.plan import PARTS, Plan, ServicePlan

#: (device, bytes) of one tensor in one plan
Place = tuple[str, int]


@dataclass(frozen=True)
class Move:
    """Tensors of one service that went from ``old`` to ``new`` (a device id; ``-``:
    the tensor is not in that plan)."""

    service: str
    old: str
    new: str
    tensors: tuple[str, ...]
    out_bytes: int  #: what they took on ``old``
    in_bytes: int  #: what they take on ``new``
    #: layers all of whose routed-expert tensors are in this move
    expert_layers: tuple[int, ...] = ()
    #: layers all of whose other tensors (attention, norms, shared experts) are in it
    split_layers: tuple[int, ...] = ()


@dataclass(frozen=True)
class Term:
    """One reason a device's use changed: ``what`` (e.g. ``grandpa kv``) and bytes."""

    device: str
    service: str
    what: str  #: tensors, weights-other, created, kv, compute, overhead, service
    bytes: int
    note: str = ""


def tensor_places(v: Validated, sp: ServicePlan) -> dict[str, Place] | None:
    """Each loaded weight tensor's device and bytes in this plan, or None for a service
    whose runtime budgets instead of placing tensors (vLLM).

    The plan keeps the solver's decisions (layer split, expert layers, single expert
    tensors); the runtime's placement rules turn them into a buffer per tensor, as
    :func:`layoutgen.solve.footprint.buffers` does."""
    from layoutgen.core.placement import HOST, loaded, place_weights, tied_output
    from layoutgen.core.setting import expert_bytes, output_device
    from layoutgen.solve.footprint import setting

    if sp.budget is not None:
        return None
    rs = next((r for r in v.services if r.name == sp.name), None)
    if rs is None or rs.service.model not in v.profiles:
        return None
    profile = v.profiles[rs.service.model]
    s = setting(v.spec, rs, profile)
    if s.rt.MEMORY != "tensors":
        return None
    experts = {
        n: s.buffer_of(dev) for dev, ns in sp.expert_layers.items() if dev != "host" for n in ns
    }
    single = {
        t: (HOST if dev == "host" else s.buffer_of(dev))
        for dev, ts in sp.expert_tensors.items()
        for t in ts
    }
    pins = {**single, **s.user_pins}
    host_overrides = any(p == HOST for p in pins.values()) or any(
        layer not in experts for layer in expert_bytes(profile, s.rt)
    )
    host = s.rt.host_buffer(gpus=s.local_gpus, host_overrides=host_overrides, mmap=s.mmap)
    expert_host = s.rt.expert_host_buffer(gpus=s.local_gpus, mmap=s.mmap)
    repacked = None if s.local_gpus else s.rt.repacked(profile, s.isa, s.args)
    w = place_weights(
        profile,
        s.rt,
        sp.layer_buffer,
        experts,
        host,
        output_device(s),
        expert_host,
        repacked,
        pins or None,
        mapped=s.mmap,
    )
    size = {t.name: t.nbytes for t in loaded(profile, s.rt)}
    out: dict[str, Place] = {}
    for name, buf in w.tensor_buffer.items():
        nbytes = size[name]
        if repacked and name in repacked and repacked[name][0] == buf:
            nbytes = repacked[name][1]
        out[name] = (s.device_of(buf), nbytes)
    output = output_device(s)
    if tied_output(profile) and (
        (output is not None and output != host) or (output is None and not s.mmap)
    ):
        # the runtime's copy of token_embd where the output layer is (place_weights)
        out[TIED_COPY] = (s.device_of(output or host), size["token_embd.weight"])
    return out


#: the output a tied model's runtime copies from token_embd, as a tensor of its own
TIED_COPY = "output (token_embd's copy)"


def by_device(sp: ServicePlan, key: str) -> dict[str, int]:
    """One part (weights, kv, ...) of a service, summed per device."""
    out: dict[str, int] = {}
    for buf, part in sp.buffers.items():
        dev = sp.device_of[buf]
        out[dev] = out.get(dev, 0) + getattr(part, key)
    return out


def moves(a: Mapping[str, Place] | None, b: Mapping[str, Place] | None, service: str) -> list[Move]:
    """The tensors whose device changed, grouped by (old, new); a tensor only one plan
    loads is ``-`` on the other side; one that stays but changes size is a move from
    its device to itself (its bytes differ)."""
    a, b = a or {}, b or {}
    groups: dict[tuple[str, str], list[tuple[str, int, int]]] = {}
    for name in sorted(set(a) | set(b), key=_tensor_order):
        old, new = a.get(name), b.get(name)
        if old == new:
            continue
        src = old[0] if old else "-"
        dst = new[0] if new else "-"
        groups.setdefault((src, dst), []).append((name, old[1] if old else 0, new[1] if new else 0))
    every: dict[tuple[int, bool], set[str]] = {}
    for name in set(a) | set(b):
        if (key := _layer_kind(name)) is not None:
            every.setdefault(key, set()).add(name)
    out = []
    for (src, dst), items in sorted(groups.items()):
        names = tuple(n for n, _, _ in items)
        mine: dict[tuple[int, bool], set[str]] = {}
        for n in names:
            if (key := _layer_kind(n)) is not None:
                mine.setdefault(key, set()).add(n)
        whole = sorted(k for k, v in mine.items() if v == every[k])
        out.append(
            Move(
                service,
                src,
                dst,
                names,
                sum(o for _, o, _ in items),
                sum(i for _, _, i in items),
                tuple(n for n, exp in whole if exp),
                tuple(n for n, exp in whole if not exp),
            )
        )
    return out


def _layer_kind(name: str) -> tuple[int, bool] | None:
    """(layer, whether a routed-expert tensor) of a blk.N tensor, else None."""
    from layoutgen.core.placement import expert_layer

    parts = name.split(".")
    if not (name.startswith("blk.") and len(parts) > 2 and parts[1].isdigit()):
        return None
    return int(parts[1]), expert_layer(name) is not None


def _tensor_order(name: str) -> tuple[int, str]:
    parts = name.split(".")
    return (int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else -1, name)


@dataclass(frozen=True)
class Ledger:
    moves: tuple[Move, ...]
    terms: tuple[Term, ...]
    #: device -> (used before, used after); a device only one plan has is 0 on the other
    used: dict[str, tuple[int, int]]

    def delta(self, device: str) -> int:
        a, b = self.used[device]
        return b - a

    def explained(self, device: str) -> int:
        return sum(t.bytes for t in self.terms if t.device == device)


def ledger(a: Validated, b: Validated) -> Ledger:
    """Every device's change in use, as terms that sum to it."""
    pa, pb = a.plan, b.plan
    old = {s.name: s for s in pa.services}
    new = {s.name: s for s in pb.services}
    all_moves: list[Move] = []
    terms: list[Term] = []
    for name in sorted(set(old) | set(new)):
        sa, sb = old.get(name), new.get(name)
        if sa is None or sb is None:
            sp = sb or sa
            assert sp is not None
            sign = 1 if sa is None else -1
            for dev, total in _totals(sp).items():
                if total:
                    what = "added" if sign > 0 else "removed"
                    terms.append(Term(dev, name, "service", sign * total, what))
            continue
        terms += _service_terms(a, b, sa, sb, all_moves)
    booked_a, booked_b = _booked(a), _booked(b)
    terms = _scenario_terms(terms, old, new, booked_a, booked_b)
    used = {d.id: (d.used, 0) for d in pa.devices}
    for d in pb.devices:
        used[d.id] = (used.get(d.id, (0, 0))[0], d.used)
    # what a device's use holds beyond its booked services' buffers (none today: said)
    for dev, (ua, ub) in used.items():
        planned = _planned(pb, dev, booked_b) - _planned(pa, dev, booked_a)
        if ub - ua != planned:
            terms.append(Term(dev, "", "outside", ub - ua - planned, "beyond the services"))
    return Ledger(tuple(all_moves), tuple(t for t in terms if t.bytes), used)


def _planned(p: Plan, dev: str, booked: Mapping[str, frozenset[str]]) -> int:
    return sum(
        _totals(sp).get(dev, 0) for sp in p.services if sp.name in booked.get(dev, frozenset())
    )


def _booked(v: Validated) -> dict[str, frozenset[str]]:
    """Per device, the services its use books: all of them, or where services never
    run together (``conflicts:``), the scenario whose sum the plan took (the largest)."""
    from layoutgen.solve.scenarios import scenarios

    totals = {sp.name: _totals(sp) for sp in v.plan.services}
    out: dict[str, frozenset[str]] = {}
    options: list[frozenset[str]] | None = None
    for d in v.plan.devices:
        every = frozenset(n for n, t in totals.items() if t.get(d.id))
        out[d.id] = every
        if sum(t.get(d.id, 0) for t in totals.values()) == d.used:
            continue
        if options is None:
            options = scenarios(v.spec).all()
        for s in options:
            if sum(totals.get(n, {}).get(d.id, 0) for n in s) == d.used:
                out[d.id] = frozenset(s) & every
                break
    return out


def _scenario_terms(
    terms: list[Term],
    old: Mapping[str, ServicePlan],
    new: Mapping[str, ServicePlan],
    booked_a: Mapping[str, frozenset[str]],
    booked_b: Mapping[str, frozenset[str]],
) -> list[Term]:
    """Terms of services a device books in both plans; a service booked in one only is
    one term, its whole use there (it joined or left the largest scenario)."""
    out: list[Term] = []
    for t in terms:
        ina = t.service in booked_a.get(t.device, frozenset())
        inb = t.service in booked_b.get(t.device, frozenset())
        if (t.what == "service" and (inb if t.bytes > 0 else ina)) or (
            t.what != "service" and ina and inb
        ):
            out.append(t)
    names = sorted(set(old) & set(new))
    for dev in sorted(set(booked_a) | set(booked_b)):
        for n in names:
            ina = n in booked_a.get(dev, frozenset())
            inb = n in booked_b.get(dev, frozenset())
            if ina == inb:
                continue
            if inb:
                total = _totals(new[n]).get(dev, 0)
                out.append(Term(dev, n, "service", total, "now in the largest scenario"))
            else:
                total = _totals(old[n]).get(dev, 0)
                out.append(Term(dev, n, "service", -total, "no longer in the largest scenario"))
    return out


def _totals(sp: ServicePlan) -> dict[str, int]:
    out: dict[str, int] = {}
    for buf, part in sp.buffers.items():
        dev = sp.device_of[buf]
        out[dev] = out.get(dev, 0) + part.total
    return out


def _service_terms(
    a: Validated, b: Validated, sa: ServicePlan, sb: ServicePlan, all_moves: list[Move]
) -> list[Term]:
    name = sa.name
    ta, tb = tensor_places(a, sa), tensor_places(b, sb)
    found = moves(ta, tb, name) if ta is not None and tb is not None else []
    all_moves += found
    terms: list[Term] = []
    moved: dict[str, int] = {}
    for m in found:
        if m.old != "-":
            moved[m.old] = moved.get(m.old, 0) - m.out_bytes
        if m.new != "-":
            moved[m.new] = moved.get(m.new, 0) + m.in_bytes
    for dev, n in sorted(moved.items()):
        terms.append(Term(dev, name, "tensors", n))
    wa, wb = by_device(sa, "weights"), by_device(sb, "weights")
    for dev in sorted(set(wa) | set(wb)):
        rest = wb.get(dev, 0) - wa.get(dev, 0) - moved.get(dev, 0)
        if rest:
            terms.append(Term(dev, name, "weights-other", rest, _why_weights(sa, sb, dev)))
    for key in PARTS:
        if key == "weights":
            continue
        pa_, pb_ = by_device(sa, key), by_device(sb, key)
        for dev in sorted(set(pa_) | set(pb_)):
            n = pb_.get(dev, 0) - pa_.get(dev, 0)
            if n:
                terms.append(Term(dev, name, key, n, _basis(sa, sb, dev, key)))
    return terms


def _basis(sa: ServicePlan, sb: ServicePlan, dev: str, key: str) -> str:
    found = {
        p.basis.get(key, "exact")
        for sp in (sa, sb)
        for buf, p in sp.buffers.items()
        if sp.device_of[buf] == dev and getattr(p, key)
    }
    return "/".join(sorted(found - {"exact"}))


def _why_weights(sa: ServicePlan, sb: ServicePlan, dev: str) -> str:
    """Why a device's weights are not the sum of the tensors there."""
    if (sa.budget is None) != (sb.budget is None):
        return "another runtime: vLLM budgets its checkpoint's share, not tensors"
    if sb.budget is not None:
        return "vLLM's share of the checkpoint"
    why = []
    for sp in (sa, sb):
        for buf, p in sp.buffers.items():
            if sp.device_of[buf] != dev:
                continue
            if p.basis.get("weights") == "measured":
                why.append(f"{buf}'s weights are measured (calibrate), not summed")
            if buf.startswith("CUDA_Split"):
                why.append("-sm row splits each matrix by rows")
    if sa.draft or sb.draft:
        why.append("the draft model's weights")
    return "; ".join(dict.fromkeys(why)) or "the model's own weights changed"


def check(ld: Ledger) -> list[str]:
    """Each device whose terms do not sum to its change (empty: every byte is
    accounted for)."""
    return [
        f"{dev}: changed {ld.delta(dev):+,} bytes, the terms listed sum to {ld.explained(dev):+,}"
        for dev in sorted(ld.used)
        if ld.delta(dev) != ld.explained(dev)
    ]
