"""The summary a reviewer reads first: what changed in a layout, once, every byte.

Order: the spec's own changes (key paths, and the settings they resolve to), the
tensors that moved (whole layers named as layers), what set them moving where the
service itself did not change (cascades), each device's change as the sum of its
terms with a check that they add up to the byte, then warnings new and gone, each
once.  A spec change the plan and the files do not show says so, and why.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from layoutgen.core.placement import expert_layer
from layoutgen.models.tensors import format_layers
from layoutgen.render.ledger import Ledger, Move, check, ledger
from layoutgen.render.specdiff import Change, moves_bytes, no_effect_reason, spec_changes
from layoutgen.render.validate import Validated
from layoutgen.solve.plan import Plan

Add = Callable[..., None]
#: kinds that describe, not change: they do not make ``diff`` exit 2
NOTES = frozenset({"no_effect", "check", "cascade", "note"})


def mib(n: int) -> str:
    return f"{n / 2**20:,.0f} MiB"


def signed(n: int) -> str:
    sign = "+" if n >= 0 else "-"
    if abs(n) < 2**10:
        return f"{sign}{abs(n)} bytes"
    if abs(n) < 2**20:
        return f"{sign}{abs(n) / 2**10:,.0f} KiB"  # not "-0 MiB"
    return f"{sign}{abs(n) / 2**20:,.0f} MiB"


def summarise(a: Validated, b: Validated, *, same_files: bool) -> list[dict[str, Any]]:
    """Each change {"kind", "text", ...} in reviewing order; ``same_files``: every
    rendered file is the same (the spec's name aside)."""
    out: list[dict[str, Any]] = []
    seen: set[str] = set()

    def add(kind: str, text: str, **extra: Any) -> None:
        if text in seen:
            return  # each line once (a warning validate and the plan both give)
        seen.add(text)
        out.append({"kind": kind, "text": text, **extra})

    a_names, b_names = set(a.spec.services), set(b.spec.services)
    for n in sorted(b_names - a_names):
        add("service_added", f"service added: {n}", service=n)
    for n in sorted(a_names - b_names):
        add("service_removed", f"service removed: {n}", service=n)
    covered: set[tuple[str, ...]] = set()
    for n in sorted(a_names & b_names):
        covered |= _settings(n, a, b, add)
    covered |= _resized(a.plan, b.plan, add)
    changes = spec_changes(a.doc.plain(), b.doc.plain())
    for c in changes:
        if not any(c.path[: len(p)] == p for p in covered) and not _in_service_set(
            c, a_names ^ b_names
        ):
            add("spec", f"spec: {c.text()}", path=c.dotted(), old=c.old, new=c.new)
    if a.plan.order != b.plan.order:
        add(
            "start_order",
            f"start order: {', '.join(a.plan.order)} -> {', '.join(b.plan.order)}",
            old=list(a.plan.order),
            new=list(b.plan.order),
        )
    ld = ledger(a, b)
    for m in ld.moves:
        _move(m, add)
    _cascades(ld, changes, a, b, add)
    _speeds(a.plan, b.plan, add)
    _devices(ld, a.plan, b.plan, add)
    _warnings(a, b, add)
    if same_files:
        # the plan and every file are the same: what the spec says changed did nothing
        out = [c for c in out if c["kind"] in NOTES or c["kind"].startswith("warning")]
        for c in changes:
            add(
                "no_effect",
                f"no effect: {c.text()}: {no_effect_reason(c, b)}",
                path=c.dotted(),
            )
    return out


def _in_service_set(c: Change, names: set[str]) -> bool:
    """A key of a service added or removed: the 'service added' line says it."""
    return len(c.path) >= 2 and c.path[0] == "services" and c.path[1] in names


def _settings(n: str, a: Validated, b: Validated, add: Add) -> set[tuple[str, ...]]:
    """The resolved settings that changed (role defaults included); the spec paths they
    stand for, so the spec line is not printed as well."""
    sa, sb = a.spec.services[n], b.spec.services[n]
    ra = next(r for r in a.services if r.name == n)
    rb = next(r for r in b.services if r.name == n)
    said: set[tuple[str, ...]] = set()
    for key, va, vb in (
        ("model", sa.model, sb.model),
        ("ctx", sa.ctx, sb.ctx),
        ("parallel", ra.parallel, rb.parallel),
        ("cache_type_k", ra.cache_type_k, rb.cache_type_k),
        ("cache_type_v", ra.cache_type_v, rb.cache_type_v),
        ("gpus", list(ra.gpus), list(rb.gpus)),
        ("port", sa.port, sb.port),
        ("threads", ra.threads, rb.threads),
        ("capabilities", list(sa.capabilities), list(sb.capabilities)),
        ("api_key", _key(sa.api_key), _key(sb.api_key)),
        ("args", list(sa.args), list(sb.args)),
    ):
        if va != vb:
            said_as = (
                f"{n}: {key} {_tokens(va, vb)}"
                if isinstance(va, list) and isinstance(vb, list) and va and vb
                else f"{n}: {key} {_show(va)} -> {_show(vb)}"
            )
            add(
                "setting",
                said_as,
                service=n,
                key=key,
                old=va,
                new=vb,
            )
            said.add(("services", n, key))
    bind_a = "0.0.0.0" if sa.expose else "127.0.0.1"
    bind_b = "0.0.0.0" if sb.expose else "127.0.0.1"
    if bind_a != bind_b:
        note = " (leaves 127.0.0.1: reachable from the network)" if sb.expose else ""
        add("bind", f"{n}: bind {bind_a} -> {bind_b}{note}", service=n, old=bind_a, new=bind_b)
        said.add(("services", n, "expose"))
    return said


def _tokens(a: list[Any], b: list[Any]) -> str:
    """Two lists as what was added, removed or replaced (``args``: flags and values)."""
    import difflib

    sa, sb = [str(x) for x in a], [str(x) for x in b]
    parts = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=sa, b=sb, autojunk=False).get_opcodes():
        if op == "replace":
            parts.append(f"{' '.join(sa[i1:i2])} replaced by {' '.join(sb[j1:j2])}")
        elif op == "delete":
            parts.append(f"removed {' '.join(sa[i1:i2])}")
        elif op == "insert":
            after = f" after {sa[i1 - 1]}" if i1 else " first"
            parts.append(f"added {' '.join(sb[j1:j2])}{after}")
    return "; ".join(parts)


def _key(key: Any) -> str:
    if key is None:
        return "none"
    return ", ".join(f"{k} {v}" for k, v in key.model_dump().items() if v is not None)


def _show(value: Any) -> str:
    if value is None:
        return "unset"
    return "[" + ", ".join(str(v) for v in value) + "]" if isinstance(value, list) else str(value)


def _resized(a: Plan, b: Plan, add: Add) -> set[tuple[str, ...]]:
    """GPUs added, removed or resized (only what changed: no 'reserve 512 -> 512')."""
    before = {d.id: d for d in a.devices}
    after = {d.id: d for d in b.devices}
    for gone in sorted(set(before) - set(after)):
        d = before[gone]
        add(
            "device_removed",
            f"{gone}: removed (was {mib(d.capacity)}, {mib(d.used)} used)",
            device=gone,
            capacity=d.capacity,
        )
    for new in sorted(set(after) - set(before)):
        d = after[new]
        add(
            "device_added",
            f"{new}: added ({mib(d.capacity)}, reserve {mib(d.reserve)}, {mib(d.used)} used)",
            device=new,
            capacity=d.capacity,
        )
    for d in b.devices:
        old = before.get(d.id)
        if old is None or (old.capacity, old.reserve) == (d.capacity, d.reserve):
            continue
        parts = [
            f"{what} {mib(x)} -> {mib(y)}"
            for what, x, y in (
                ("capacity", old.capacity, d.capacity),
                ("reserve", old.reserve, d.reserve),
            )
            if x != y
        ]
        add(
            "device_resized",
            f"{d.id}: {', '.join(parts)}",
            device=d.id,
            capacity=[old.capacity, d.capacity],
            reserve=[old.reserve, d.reserve],
        )
    # a GPU's size is written under host.gpus (by index) and host.ram / ram_reserve
    return (
        {("host", "gpus"), ("host", "ram"), ("host", "ram_reserve")}
        if _sizes_moved(a, b)
        else set()
    )


def _sizes_moved(a: Plan, b: Plan) -> bool:
    return {(d.id, d.capacity, d.reserve) for d in a.devices} != {
        (d.id, d.capacity, d.reserve) for d in b.devices
    }


def _where(dev: str) -> str:
    return "(not loaded)" if dev == "-" else dev


def describe(m: Move) -> str:
    """The tensors of a move: layers whose routed experts all moved as layers (experts
    of blk.8, 72-73), layers whose other tensors all moved as the layer split's part
    (blk.41's other tensors), the rest by name."""
    whole = set(m.expert_layers)
    split = set(m.split_layers)
    single = []
    for t in m.tensors:
        parts = t.split(".")
        layer = int(parts[1]) if t.startswith("blk.") and parts[1].isdigit() else None
        expert = expert_layer(t) is not None
        if layer is None or layer not in (whole if expert else split):
            single.append(t)
    bits = []
    both = sorted(whole & split)
    if both:
        bits.append(f"all of blk.{format_layers(both, sep='-', join=', ')}")
    if whole - split:
        bits.append(f"experts of blk.{format_layers(sorted(whole - split), sep='-', join=', ')}")
    if split - whole:
        bits.append(
            f"blk.{format_layers(sorted(split - whole), sep='-', join=', ')}'s other tensors"
            " (the layer split)"
        )
    if len(single) > 8:
        single = [*single[:8], f"{len(single) - 8} more"]
    bits += [t.removesuffix(".weight") for t in single]
    return "; ".join(bits)


def _move(m: Move, add: Add) -> None:
    size = mib(m.in_bytes if m.old == "-" else m.out_bytes)
    if m.old != "-" and m.new != "-" and m.in_bytes != m.out_bytes:
        size = f"{mib(m.out_bytes)} -> {mib(m.in_bytes)}"
    route = f"{_where(m.old)} -> {_where(m.new)}" if m.old != m.new else f"{m.old} (resized)"
    n = len(m.tensors)
    add(
        "moved",
        f"{m.service}: {route}, {n} tensor{'s' if n != 1 else ''}, {size}: {describe(m)}",
        service=m.service,
        old=m.old,
        new=m.new,
        tensors=list(m.tensors),
        layers=sorted({x for t in m.tensors if (x := expert_layer(t)) is not None}),
        bytes_out=m.out_bytes,
        bytes_in=m.in_bytes,
    )


def _cascades(ld: Ledger, changes: list[Change], a: Validated, b: Validated, add: Add) -> None:
    """Services whose tensors moved though nothing of their own changed: name why."""
    movers = sorted({m.service for m in ld.moves})
    for s in movers:
        own = [c for c in changes if c.path[:2] == ("services", s)]
        if own or s not in a.spec.services or s not in b.spec.services:
            continue
        causes = [c.cause(a, b) for c in changes if moves_bytes(c)] or [
            c.cause(a, b) for c in changes
        ]
        cause = "; ".join(dict.fromkeys(causes)) or "a profile or a runtime rule changed"
        mine = [m for m in ld.moves if m.service == s]
        what = ", ".join(
            f"{len(m.tensors)} {_where(m.old)} -> {_where(m.new)}" for m in mine if m.old != m.new
        )
        add(
            "cascade",
            f"cascade: {cause}, so {s}'s tensors moved ({what})",
            service=s,
        )


def _speeds(a: Plan, b: Plan, add: Add) -> None:
    """Predicted decode speeds that changed (a tenth of a token a second or more)."""
    from layoutgen.solve.plan import SpeedPlan

    before = {s.name: s.speed for s in a.services if isinstance(s.speed, SpeedPlan)}
    for s in b.services:
        old = before.get(s.name)
        if isinstance(s.speed, SpeedPlan) and old is not None:
            x, y = old.decode_tps, s.speed.decode_tps
            if f"{x:.1f}" != f"{y:.1f}":
                add(
                    "speed",
                    f"{s.name}: decode {x:.1f} -> {y:.1f} tok/s at depth {s.speed.depth:,} "
                    "(speed model)",
                    service=s.name,
                    old=round(x, 2),
                    new=round(y, 2),
                )


def _devices(ld: Ledger, a: Plan, b: Plan, add: Add) -> None:
    after = {d.id: d for d in b.devices}
    before = {d.id: d for d in a.devices}
    for dev in [d.id for d in b.devices] + [d for d in before if d not in after]:
        old, new = before.get(dev), after.get(dev)
        if old is None or new is None:
            continue
        if old.used == new.used:
            # unchanged, though tensors came and went: say they balance
            gross = _gross(ld, dev)
            if gross:
                add(
                    "device",
                    f"{dev}: used {mib(new.used)} (unchanged): "
                    + ", ".join(
                        f"{s} tensors in {mib(i)}, out {mib(o)}" for s, (i, o) in gross.items()
                    ),
                    device=dev,
                    used=[old.used, new.used],
                    free=[old.free, new.free],
                    terms=[],
                )
            continue  # free follows a resize, which its own line says
        terms = [t for t in ld.terms if t.device == dev]
        said = " + ".join(
            f"{t.service + ' ' if t.service else ''}{_term(t.what)} {signed(t.bytes)}"
            + (f" ({t.note})" if t.note else "")
            for t in terms
        )
        add(
            "device",
            f"{dev}: used {mib(old.used)} -> {mib(new.used)} ({signed(new.used - old.used)}), "
            f"free {mib(old.free)} -> {mib(new.free)}" + (f" = {said}" if said else ""),
            device=dev,
            used=[old.used, new.used],
            free=[old.free, new.free],
            terms=[
                {"service": t.service, "what": t.what, "bytes": t.bytes, "note": t.note}
                for t in terms
            ],
        )
    wrong = check(ld)
    if any(old != new for old, new in ld.used.values()):
        add(
            "check",
            "check: "
            + (
                "; ".join(wrong)
                if wrong
                else "the terms above sum to every device's change, to the byte"
            ),
            ok=not wrong,
        )


def _gross(ld: Ledger, dev: str) -> dict[str, tuple[int, int]]:
    """Per service, the bytes of tensors that came to ``dev`` and that left it."""
    out: dict[str, tuple[int, int]] = {}
    for m in ld.moves:
        if m.old == m.new:
            continue
        i, o = out.get(m.service, (0, 0))
        if m.new == dev:
            i += m.in_bytes
        if m.old == dev:
            o += m.out_bytes
        if i or o:
            out[m.service] = (i, o)
    return out


def _term(what: str) -> str:
    return {
        "tensors": "tensors",
        "weights-other": "weights",
        "service": "service",
        "outside": "other",
    }.get(what, what)


def _warnings(a: Validated, b: Validated, add: Add) -> None:
    wa = _all_warnings(a)
    wb = _all_warnings(b)
    for w in sorted(wb - wa):
        add("warning_added", f"new warning: {w}")
    for w in sorted(wa - wb):
        add("warning_gone", f"warning gone: {w}")


def _all_warnings(v: Validated) -> set[str]:
    """validate's and the plan's warnings; the same message from both counts once."""
    return set(v.plan.warnings) | {d.message for d in v.warnings}
