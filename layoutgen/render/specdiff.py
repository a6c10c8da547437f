"""A spec's changes by key path (``services.grandpa.experts.max_layers: 20 -> 10``),
what each means for the others (a cascade's cause), and why one had no effect."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from layoutgen.render.validate import Validated

Path = tuple[str | int, ...]


@dataclass(frozen=True)
class Change:
    path: Path
    old: Any  #: None: absent
    new: Any

    def dotted(self) -> str:
        out = ""
        for p in self.path:
            out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
        return out

    def text(self) -> str:
        if self.old is None:
            return f"{self.dotted()} added: {_short(self.new)}"
        if self.new is None:
            return f"{self.dotted()} removed (was {_short(self.old)})"
        return f"{self.dotted()} {_short(self.old)} -> {_short(self.new)}"

    def cause(self, a: Validated, b: Validated) -> str:
        """The change as the cause of what other services did."""
        if (
            self.path[:2] == ("host", "gpus")
            and len(self.path) >= 4
            and isinstance(self.path[2], int)
        ):
            i = self.path[2]
            gpus_a, gpus_b = a.spec.host.gpus, b.spec.host.gpus
            if i < len(gpus_a) and i < len(gpus_b) and gpus_a[i].id == gpus_b[i].id:
                gid = gpus_b[i].id
                da = next((d for d in a.plan.devices if d.id == gid), None)
                db = next((d for d in b.plan.devices if d.id == gid), None)
                if da is None or db is None:
                    return self.text()
                room_a, room_b = da.capacity - da.reserve, db.capacity - db.reserve
                if room_a != room_b:
                    word = "smaller" if room_b < room_a else "larger"
                    return (
                        f"{gid} is {word} ({room_a / 2**20:,.0f} -> {room_b / 2**20:,.0f} "
                        "MiB usable)"
                    )
        if len(self.path) >= 3 and self.path[0] == "services":
            return f"{self.path[1]}'s {'.'.join(map(str, self.path[2:]))} {_cause_values(self)}"
        return self.text()


def _cause_values(c: Change) -> str:
    return f"{_short(c.old)} -> {_short(c.new)}"


#: service keys that never change where bytes go: not a cascade's cause
NO_BYTES = frozenset(
    {"port", "expose", "api_key", "capabilities", "schedule", "threads", "threads_batch"}
)


def moves_bytes(c: Change) -> bool:
    """Whether a change can move bytes (a port cannot)."""
    return not (len(c.path) >= 3 and c.path[0] == "services" and c.path[2] in NO_BYTES)


def _short(v: Any) -> str:
    if v is None:
        return "unset"
    if isinstance(v, bool):
        return "true" if v else "false"
    text = str(v) if not isinstance(v, dict | list) else _inline(v)
    return text if len(text) <= 80 else text[:77] + "..."


def _inline(v: Any) -> str:
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {_inline(x)}" for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ", ".join(_inline(x) for x in v) + "]"
    return _short(v)


def spec_changes(a: Any, b: Any, path: Path = ()) -> list[Change]:
    """Leaf changes between two specs' data (comments and key order do not count);
    lists of equal length compare item by item, others as one value."""
    if isinstance(a, dict) and isinstance(b, dict):
        out: list[Change] = []
        for k in [*a, *(k for k in b if k not in a)]:
            if k not in b:
                out.append(Change((*path, k), a[k], None))
            elif k not in a:
                out.append(Change((*path, k), None, b[k]))
            else:
                out += spec_changes(a[k], b[k], (*path, k))
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [
            c
            for i, (x, y) in enumerate(zip(a, b, strict=True))
            for c in spec_changes(x, y, (*path, i))
        ]
    return [] if a == b else [Change(path, a, b)]


def no_effect_reason(c: Change, v: Validated) -> str:
    """Why a change left the plan and every file as they were."""
    p = c.path
    if len(p) == 4 and p[0] == "services" and p[2] == "experts" and p[3] == "max_layers":
        name = str(p[1])
        try:
            sp = v.plan.service(name)
        except StopIteration:
            sp = None
        if sp is not None and isinstance(c.new, int):
            fit = sum(len(ls) for dev, ls in sp.expert_layers.items() if dev != "host")
            if c.new > fit:
                return f"max_layers {c.new} > the {fit} that fit"
            return f"the {fit} expert layers on GPUs are within max_layers {c.new}"
    if len(p) == 3 and p[0] == "services" and (c.old is None or c.new is None):
        why = _role_default(str(p[1]), str(p[2]), c.new if c.old is None else c.old, v)
        if why is not None:
            return why
    return "the plan and every rendered file are the same with it"


def _role_default(name: str, key: str, value: Any, v: Validated) -> str | None:
    """ "the role's default" where VALUE, written or removed, is what the service's role
    gives KEY anyway (roles.explain says where each setting comes from)."""
    from layoutgen.spec.roles import BASE, DEFAULTED, ROLES

    service = v.spec.services.get(name)
    if service is None or key not in DEFAULTED:
        return None
    default = ROLES.get(service.role, {}).get(key) or BASE.get(key)
    if default is None or default.value != value:
        return None
    return f"{_short(value)} is what role {service.role} gives {key} anyway ({default.why})"
