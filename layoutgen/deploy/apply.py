"""``layoutgen apply``: render a new generation and switch the host to it, as
``nixos-rebuild switch`` and ``helm upgrade`` do; ``rollback`` switches back.

The switch from generation OLD to NEW (:func:`switch`):

1. install NEW's unit files atomically (OLD's files that NEW lacks removed),
   ``daemon-reload``;
2. stop, in OLD's reverse start order, the services NEW removes or changes and
   those that conflict with one NEW starts, then wait (bounded) until NVML
   lists none of their processes on any GPU: a server's memory outlives its
   process for a moment, and the next one to start would find it taken (seed
   004: "Both claimed VRAM. Neither got enough");
3. start NEW's services in the plan's order, each once the one before is
   healthy (the unit active and its ``/health`` answering 200);
4. check the result as ``doctor`` does: each service's VRAM within its plan,
   its port bound where the spec says;
5. on any failure: stop what NEW started, reinstall OLD, start it the same way,
   and report what failed with the unit's last log lines.

Exit codes: 0 applied (or nothing to change, or ``--dry-run``); 1 the spec is
refused, the host is not the spec's, a secret is missing, or the new generation
failed and the previous one runs again; 3 the new generation failed and the
previous one could not be started again either (the host needs a hand);
2 usage.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from layoutgen.deploy import installer
from layoutgen.deploy.generations import Generation, ServiceRecord, Store, state_dir
from layoutgen.deploy.systemd import Manager
from layoutgen.errors import LayoutgenError

Say = Callable[[str], None]

#: exit codes
OK, FAILED, USAGE, BROKEN = 0, 1, 2, 3


class ApplyError(LayoutgenError):
    """What stops apply before it changes anything on the host."""


@dataclass(frozen=True)
class Bounds:
    """How long apply waits, in seconds."""

    health: float = 600.0  # one service, from start to healthy (a unit's own
    # TimeoutStartSec still applies; this bound catches a /health that never answers)
    release: float = 60.0  # a stopped service's GPU memory to be released
    poll: float = 0.5


DEFAULT_BOUNDS = Bounds()


@dataclass(frozen=True)
class Changes:
    added: tuple[str, ...]  # unit file names
    changed: tuple[str, ...]
    removed: tuple[str, ...]
    stop: tuple[str, ...]  # services, in stop order
    start: tuple[str, ...]  # services, in start order

    @property
    def empty(self) -> bool:
        return not (self.added or self.changed or self.removed or self.stop)

    def lines(self) -> list[str]:
        out = [f"  + {n}" for n in self.added]
        out += [f"  ~ {n}" for n in self.changed]
        out += [f"  - {n}" for n in self.removed]
        if self.stop:
            out.append(f"  stop (in this order): {', '.join(self.stop)}")
        if self.start:
            out.append(f"  start (in this order): {', '.join(self.start)}")
        return out


@dataclass
class Outcome:
    ok: bool
    failed: str = ""  # what failed, one line
    log: list[str] = field(default_factory=list)  # the failing unit's last log lines
    started: list[str] = field(default_factory=list)


# ------------------------------------------------------------------ planning


def changes(old: Generation | None, new: Generation, active: Callable[[str], bool]) -> Changes:
    """What switching from ``old`` to ``new`` does; ``active(unit)`` asks systemd."""
    old_files = _unit_texts(old)
    new_files = _unit_texts(new)
    added = sorted(set(new_files) - set(old_files))
    removed = sorted(set(old_files) - set(new_files))
    changed = sorted(n for n in set(new_files) & set(old_files) if new_files[n] != old_files[n])
    touched = {Path(n).stem for n in (*changed, *removed)}
    start = [n for n in new.start_order if (s := new.service(n)) is not None and s.at_boot]
    conflicting = _conflicts(new, start)
    candidates: list[str] = []
    order = list(reversed(old.start_order)) if old is not None else []
    extra = sorted({s.name for s in (old.services if old else ())} - set(order))
    for name in [*order, *extra]:
        rec = old.service(name) if old is not None else None
        if rec is None:
            continue
        gone = new.service(name) is None
        if (gone or name in touched or name in conflicting) and active(rec.unit):
            candidates.append(name)
    if old is None:
        # the first apply: what runs under these names was installed by hand (the
        # manual steps) and is restarted, as its definition is not known
        candidates = [n for n in reversed(new.start_order) if active(f"{n}.service")]
    return Changes(
        added=tuple(added),
        changed=tuple(changed),
        removed=tuple(removed),
        stop=tuple(candidates),
        start=tuple(start),
    )


def _unit_texts(gen: Generation | None) -> dict[str, str]:
    if gen is None:
        return {}
    return {
        Path(dest).name: _body((gen.files / rel).read_text(encoding="utf-8"))
        for rel, dest in gen.install.items()
    }


def _body(text: str) -> str:
    """A unit without its "generated by layoutgen from SPEC" line: the same unit
    rendered from a renamed spec does not restart its service."""
    return "\n".join(line for line in text.split("\n") if not line.startswith("# generated by"))


def _conflicts(gen: Generation, start: list[str]) -> set[str]:
    """Services that conflict with one ``gen`` starts (endpoints.json lists them)."""
    try:
        endpoints = json.loads((gen.files / "endpoints.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return set()
    out: set[str] = set()
    for name in start:
        out.update(endpoints.get("services", {}).get(name, {}).get("conflicts", []))
    return out - set(start)


# ------------------------------------------------------------------ the switch


class Switcher:
    """Moves the host between generations; every wait bounded by :class:`Bounds`."""

    def __init__(
        self,
        manager: Manager,
        say: Say,
        bounds: Bounds = DEFAULT_BOUNDS,
        read_gpus: Callable[[], object] | None = None,
    ) -> None:
        self.manager = manager
        self.say = say
        self.bounds = bounds
        self._read_gpus = read_gpus

    # -- building blocks

    def gpu_holders(self) -> dict[int, list[tuple[int, int]]] | None:
        """pid -> [(GPU index, bytes)] as NVML lists them; None without a driver."""
        from layoutgen.live import nvml

        report = nvml.read() if self._read_gpus is None else self._read_gpus()
        assert isinstance(report, nvml.NvmlReport)
        if not report.available:
            return None
        out: dict[int, list[tuple[int, int]]] = {}
        for gpu in report.gpus:
            for p in gpu.processes:
                out.setdefault(p.pid, []).append((gpu.index, p.used or 0))
        return out

    def stop(self, names: list[str], gen: Generation | None) -> Outcome:
        """Stop ``names`` in the order given, then wait for their GPU memory."""
        pids: dict[int, str] = {}
        for name in names:
            rec = gen.service(name) if gen is not None else None
            unit = rec.unit if rec is not None else f"{name}.service"
            for pid in self.manager.pids(unit):
                pids[pid] = name
            self.say(f"stopping {unit}")
            self.manager.stop(unit)
        return self.wait_released(pids)

    def wait_released(self, pids: Mapping[int, str]) -> Outcome:
        if not pids:
            return Outcome(ok=True)
        deadline = time.monotonic() + self.bounds.release
        waited = False
        while True:
            holders = self.gpu_holders()
            if holders is None:
                return Outcome(ok=True)  # no NVIDIA driver: nothing to wait for
            held = {pid: holders[pid] for pid in pids if pid in holders}
            if not held:
                if waited:
                    self.say("GPU memory released")
                return Outcome(ok=True)
            if time.monotonic() > deadline:
                pid, where = sorted(held.items())[0]
                gpu, used = where[0]
                return Outcome(
                    ok=False,
                    failed=f"{pids[pid]}: GPU memory not released {self.bounds.release:g} s "
                    f"after the stop: pid {pid} still holds {used >> 20} MiB on GPU {gpu}",
                )
            if not waited:
                names = sorted({pids[p] for p in held})
                self.say(f"waiting for the GPU memory of {', '.join(names)} to be released")
                waited = True
            time.sleep(self.bounds.poll)

    def start(self, gen: Generation, names: list[str], outcome: Outcome) -> Outcome:
        """Start ``names`` in order, each gated on its health."""
        for name in names:
            rec = gen.service(name)
            assert rec is not None
            self.manager.reset_failed(rec.unit)
            self.say(f"starting {rec.unit}")
            outcome.started.append(name)
            try:
                self.manager.start(rec.unit)
            except LayoutgenError as exc:
                why = str(exc)
            else:
                why = self.wait_healthy(rec)
            if why:
                outcome.ok = False
                outcome.failed = f"{name}: {why}"
                outcome.log = self.manager.journal(rec.unit)
                return outcome
            self.say(f"{name} is healthy ({rec.health})")
        return outcome

    def wait_healthy(self, rec: ServiceRecord) -> str:
        """ "" once the unit is active and /health answers 200; else why not."""
        deadline = time.monotonic() + self.bounds.health
        seen_activating = False
        while True:
            state = self.manager.state(rec.unit)
            if state.load == "not-found":
                return f"{rec.unit} not found after daemon-reload (was its file installed?)"
            if state.active == "failed" or state.sub == "auto-restart":
                return f"{rec.unit} failed ({state.result})"
            if state.active == "activating":
                seen_activating = True
                if state.main_exited:
                    # a health wait in ExecStartPost= keeps polling a server that died
                    return (
                        f"{rec.unit}: the server exited during its start "
                        f"(status {state.main_status})"
                    )
            if state.active == "inactive" and (seen_activating or state.result != "success"):
                return f"{rec.unit} stopped during its start ({state.result})"
            if state.active == "active" and healthy(rec.health):
                return ""
            if time.monotonic() > deadline:
                return (
                    f"{rec.health} did not answer 200 within {self.bounds.health:g} s "
                    f"(unit {state.text})"
                )
            time.sleep(self.bounds.poll)

    def check(self, gen: Generation, names: list[str]) -> Outcome:
        """doctor's checks on what runs: VRAM within the plan, ports bound as specified."""
        from layoutgen.live import ports

        holders = self.gpu_holders()
        sockets = ports.read()
        for name in names:
            rec = gen.service(name)
            assert rec is not None
            if holders is not None:
                use: dict[int, int] = {}
                for pid in self.manager.pids(rec.unit):
                    for gpu, used in holders.get(pid, []):
                        use[gpu] = use.get(gpu, 0) + used
                for gpu, used in sorted(use.items()):
                    planned = rec.planned.get(str(gpu))
                    if planned is None:
                        return Outcome(
                            ok=False,
                            failed=f"{name}: uses {used >> 20} MiB on GPU {gpu}, which its "
                            "plan does not give it",
                            log=self.manager.journal(rec.unit),
                        )
                    if used > planned:
                        return Outcome(
                            ok=False,
                            failed=f"{name}: uses {used >> 20} MiB on GPU {gpu}, over the "
                            f"{planned >> 20} MiB its plan budgets",
                            log=self.manager.journal(rec.unit),
                        )
            if rec.bind != "0.0.0.0" and any(s.wildcard for s in sockets.on(rec.port)):
                return Outcome(
                    ok=False,
                    failed=f"{name}: port {rec.port} is bound on every interface; the spec "
                    f"binds it to {rec.bind}",
                )
        return Outcome(ok=True)

    # -- the whole switch

    def install(self, old: Generation | None, new: Generation) -> None:
        """``new``'s files in place of ``old``'s, and plain services enabled as their
        ``[Install]`` says (quadlet's generator wires a .container's itself; timers are
        enabled once the switch succeeded), so the host boots into ``new``."""
        previous = dict(old.install) if old is not None else {}
        installer.install(new.files, new.install, previous)
        gone = sorted(set(previous.values()) - set(new.install.values()))
        for dest in gone:
            if dest.endswith((".service", ".timer")):
                self.manager.systemctl("disable", "--no-reload", Path(dest).name, check=False)
        installer.remove(gone)
        self.manager.daemon_reload()
        for rel, dest in sorted(new.install.items()):
            if dest.endswith(".service"):
                boots = "\n[Install]" in (new.files / rel).read_text(encoding="utf-8")
                verb = "enable" if boots else "disable"
                self.manager.systemctl(verb, "--no-reload", Path(dest).name, check=False)

    def switch(self, old: Generation | None, new: Generation, plan: Changes) -> Outcome:
        self.install(old, new)
        outcome = self.stop(list(plan.stop), old)
        if not outcome.ok:
            return outcome
        outcome = self.start(new, list(plan.start), Outcome(ok=True))
        if not outcome.ok:
            return outcome
        checked = self.check(new, list(plan.start))
        checked.started = outcome.started
        return checked

    def revert(self, old: Generation | None, new: Generation, started: list[str]) -> Outcome:
        """Stop what ``new`` started, reinstall ``old`` and start it again."""
        running = [n for n in reversed(new.start_order) if n in started]
        stopped = self.stop(running, new)
        if not stopped.ok:
            self.say(f"warning: {stopped.failed}")
        if old is None:
            installer.remove(sorted(new.install.values()))
            self.manager.daemon_reload()
            return Outcome(ok=True)
        self.install(new, old)
        names = [n for n in old.start_order if (s := old.service(n)) is not None and s.at_boot]
        return self.start(old, names, Outcome(ok=True))


def healthy(url: str, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return int(resp.status) == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


# ------------------------------------------------------------------ the commands


def store_for(scope: str) -> Store:
    if scope == "system" and os.geteuid() != 0:
        raise ApplyError(
            "host.deploy.scope is 'system' (rootful units under /etc): run apply as root, "
            "or write 'deploy: {scope: user}' under host for rootless units"
        )
    return Store(state_dir(scope))


def run_switch(
    store: Store,
    old: Generation | None,
    new: Generation,
    manager: Manager,
    say: Say,
    bounds: Bounds,
    *,
    keep: int,
) -> int:
    """Switch and, on failure, revert; the exit code.  ``new`` becomes current on success."""
    switcher = Switcher(manager, say, bounds)
    plan = changes(old, new, lambda unit: manager.state(unit).active in ("active", "activating"))
    try:
        outcome = switcher.switch(old, new, plan)
    except LayoutgenError as exc:
        outcome = Outcome(ok=False, failed=str(exc))
    if outcome.ok:
        store.set_state(new, "applied")
        store.set_current(new)
        pruned = store.prune(keep)
        if pruned:
            say(f"pruned generation(s) {', '.join(map(str, pruned))} (keep {keep})")
        say(f"generation {new.number} is running")
        return OK
    say(f"error: {outcome.failed}")
    for line in outcome.log:
        say(f"  | {line}")
    back = "the previous generation" if old is None else f"generation {old.number}"
    say(f"rolling back to {back}")
    try:
        reverted = switcher.revert(old, new, outcome.started or list(plan.start))
    except LayoutgenError as exc:
        reverted = Outcome(ok=False, failed=str(exc))
    store.set_state(new, "failed")
    if not reverted.ok:
        say(f"error: the rollback failed too: {reverted.failed}")
        for line in reverted.log:
            say(f"  | {line}")
        return BROKEN
    if old is not None:
        store.set_current(old)
        say(f"generation {old.number} is running again; generation {new.number} failed")
    else:
        say(f"generation {new.number} failed; its units were removed")
    return FAILED


def secrets_missing(records: list[ServiceRecord], scope: str) -> list[str]:
    """The exact commands that create each missing podman secret (values never read)."""
    out: list[str] = []
    for name in sorted({s for r in records for s in r.secrets}):
        try:
            done = subprocess.run(
                ["podman", "secret", "exists", name], capture_output=True, check=False, timeout=60
            )
        except FileNotFoundError:
            raise ApplyError("podman not found: the spec's container services need it") from None
        if done.returncode != 0:
            sudo = "" if scope == "user" else "sudo "
            out.append(f"printf '%s' \"$API_KEY\" | {sudo}podman secret create {name} -")
    return out
