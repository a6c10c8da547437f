"""``layoutgen status [SPEC]``: one row per service of the running generation.

Columns: unit state (systemd), health (``/health`` answers 200), port and the
address it is bound to (``/proc/net/tcp``; a quadlet service's port, forwarded
by podman's network, may show no socket here: ``-``), VRAM used (NVML, the
unit's processes) against the plan's budget, and the generation.  With SPEC,
the rows are that spec's services, and a line says whether the running
generation was rendered from it as it is now.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from layoutgen.deploy.apply import Switcher, healthy
from layoutgen.deploy.generations import Generation, ServiceRecord, Store, state_dir
from layoutgen.deploy.systemd import Manager
from layoutgen.errors import LayoutgenError


@dataclass(frozen=True)
class Row:
    service: str
    unit: str
    state: str
    health: str  # ok, failing, -
    port: int
    bind: str  # the address the socket is bound to; "-" when none seen
    vram_used: dict[str, int]  # GPU index -> bytes
    vram_planned: dict[str, int]
    generation: int | None

    def as_json(self) -> dict[str, Any]:
        return {
            "service": self.service,
            "unit": self.unit,
            "state": self.state,
            "health": self.health,
            "port": self.port,
            "bind": self.bind,
            "vram_used": self.vram_used,
            "vram_planned": self.vram_planned,
            "generation": self.generation,
        }


def rows(gen: Generation | None, records: list[ServiceRecord], scope: str) -> list[Row]:
    from layoutgen.live import ports

    manager = Manager(scope)
    holders = Switcher(manager, lambda _line: None).gpu_holders() or {}
    sockets = ports.read()
    out: list[Row] = []
    for rec in records:
        state = manager.state(rec.unit)
        used: dict[str, int] = {}
        if state.active in ("active", "activating", "deactivating"):
            for pid in manager.pids(rec.unit):
                for gpu, b in holders.get(pid, []):
                    used[str(gpu)] = used.get(str(gpu), 0) + b
        listeners = sockets.on(rec.port)
        bind = ",".join(sorted({s.address for s in listeners})) or "-"
        ok = state.active == "active" and healthy(rec.health, timeout=1.0)
        out.append(
            Row(
                service=rec.name,
                unit=rec.unit,
                state=state.text if state.load != "not-found" else "not installed",
                health="ok" if ok else ("failing" if state.active == "active" else "-"),
                port=rec.port,
                bind=bind,
                vram_used=used,
                vram_planned=dict(rec.planned),
                generation=gen.number if gen is not None else None,
            )
        )
    return out


def status(spec: Path | None, scope: str | None) -> tuple[list[Row], list[str], int]:
    """(rows, notes, exit code): 0 every service the generation starts is active and
    healthy, 1 otherwise (or nothing applied)."""
    notes: list[str] = []
    records: list[ServiceRecord]
    if spec is not None:
        from layoutgen.deploy.prepare import prepare, validated

        lines: list[str] = []
        v = validated(spec, lines.append, probe=False)
        scope = v.spec.host.deploy.scope
        prepared = prepare(v, spec)
        records = list(prepared.services)
        store = Store(state_dir(scope))
        gen = store.current()
        if gen is None:
            notes.append("no generation applied on this host (layoutgen apply SPEC)")
        elif _differs(gen, prepared.files):
            notes.append(
                f"generation {gen.number} (from {gen.spec}) differs from {spec} as it is "
                "now: layoutgen apply it"
            )
    else:
        scope = scope or "system"
        store = Store(state_dir(scope))
        gen = store.current()
        if gen is None:
            raise LayoutgenError(
                f"no generation applied in {store.root} (layoutgen apply SPEC; for rootless "
                "units: layoutgen status --user)"
            )
        records = list(gen.services)
    found = rows(gen, records, scope)
    wanted = {r.name for r in records if r.at_boot}
    bad = [r for r in found if r.service in wanted and r.health != "ok"]
    return found, notes, 1 if bad or gen is None else 0


def _differs(gen: Generation, files: dict[str, str] | Any) -> bool:
    for rel, text in files.items():
        try:
            if (gen.files / rel).read_text(encoding="utf-8") != text:
                return True
        except OSError:
            return True
    return False


def _mib(n: int) -> str:
    return f"{n >> 20}"


def text(found: list[Row]) -> str:
    head = ("SERVICE", "UNIT STATE", "HEALTH", "PORT", "BIND", "VRAM MiB (used/planned)", "GEN")
    lines = [head]
    for r in found:
        gpus = sorted(set(r.vram_used) | set(r.vram_planned))
        vram = " ".join(
            f"gpu{g}:{_mib(r.vram_used.get(g, 0))}/{_mib(r.vram_planned.get(g, 0))}" for g in gpus
        )
        lines.append(
            (
                r.service,
                r.state,
                r.health,
                str(r.port),
                r.bind,
                vram or "-",
                "-" if r.generation is None else str(r.generation),
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    return "".join(
        "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip() + "\n"
        for line in lines
    )


def as_json(found: list[Row], notes: list[str]) -> str:
    return (
        json.dumps(
            {"schema": 1, "services": [r.as_json() for r in found], "notes": notes},
            indent=1,
            sort_keys=True,
        )
        + "\n"
    )
