"""The three commands as functions returning exit codes; the CLI maps flags onto them.

``say`` receives every line for the user (the CLI prints it to stderr): apply's
progress and failures; status's table goes to ``out`` (stdout).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from layoutgen.deploy import gitops
from layoutgen.deploy.apply import (
    DEFAULT_BOUNDS,
    FAILED,
    OK,
    ApplyError,
    Bounds,
    changes,
    run_switch,
    secrets_missing,
    store_for,
)
from layoutgen.deploy.generations import Generation, GenerationError, Store
from layoutgen.deploy.prepare import prepare, validated
from layoutgen.deploy.systemd import Manager
from layoutgen.errors import LayoutgenError

Say = Callable[[str], None]


def apply(
    spec: Path | None,
    *,
    dry_run: bool,
    say: Say,
    bounds: Bounds = DEFAULT_BOUNDS,
    pull: bool = False,
    scope: str = "system",
) -> int:
    """``spec`` None with ``pull``: the spec host.gitops of the running generation names,
    fetched first (the pull service's command)."""
    try:
        if not pull:
            assert spec is not None
            v = validated(spec, say)
            scope = v.spec.host.deploy.scope
        store = store_for(scope)
        with store.locked():
            current = store.current()
            commit = ""
            if pull:
                spec, commit = _pulled(store, current, say)
                if spec is None:
                    return OK
                v = validated(spec, say)
                if v.spec.host.deploy.scope != scope:
                    raise ApplyError(
                        f"{spec}: host.deploy.scope is {v.spec.host.deploy.scope!r} at "
                        f"{commit[:12]}; the pull service runs for {scope!r}: apply it by hand"
                    )
            assert spec is not None
            prepared = prepare(v, spec)
            manager = Manager(scope)
            if dry_run:
                preview = _preview(store, prepared, commit)
                try:
                    shown = changes(current, preview, lambda u: _active(manager, u))
                finally:
                    _discard(preview, scratch=True)
                _say_changes(say, current, shown, "would")
                return OK
            missing = secrets_missing(list(prepared.services), scope)
            if missing:
                say("error: podman secrets missing; create them (apply never reads a value):")
                for line in missing:
                    say(f"  {line}")
                return FAILED
            new = store.create(prepared.files, prepared.meta(commit))
            plan = changes(current, new, lambda u: _active(manager, u))
            units = [s.unit for n in plan.start if (s := new.service(n)) is not None]
            if plan.empty and current is not None and all(_active(manager, u) for u in units):
                _discard(new)
                say(f"generation {current.number} is current and running; nothing to change")
                return OK
            _say_changes(say, current, plan, "will")
            say(f"generation {new.number}: {new.path}")
            code = run_switch(
                store, current, new, manager, say, bounds, keep=v.spec.host.deploy.keep
            )
            if code == OK:
                _timers(manager, new, say)
            return code
    except LayoutgenError as exc:
        say(f"error: {exc}")
        return FAILED


def _pulled(store: Store, current: Generation | None, say: Say) -> tuple[Path | None, str]:
    """(the checkout's spec, its commit); no spec when the branch has not moved."""
    if current is None or not current.gitops:
        raise ApplyError(
            "--pull: the running generation has no host.gitops; apply a spec with one first"
        )
    g = current.gitops
    checkout = gitops.checkout_dir(store.root)
    commit, moved = gitops.pull(checkout, g["repo"], g["branch"], current.commit)
    if not moved:
        say(f"{g['branch']} is at the deployed commit {commit[:12]}; nothing to apply")
        return None, commit
    if any(x.commit == commit and x.state == "failed" for x in store.all()):
        raise ApplyError(
            f"{g['branch']} is at {commit[:12]}, which failed here before (layoutgen rollback "
            "--list); the pull service waits for a new commit"
        )
    say(f"{g['branch']} moved to {commit[:12]}: applying {g['spec']}")
    return checkout / g["spec"], commit


def rollback(
    generation: int | None, *, scope: str, say: Say, bounds: Bounds = DEFAULT_BOUNDS
) -> int:
    try:
        store = store_for(scope)
        with store.locked():
            current = store.current()
            if generation is None:
                older = [g for g in store.all() if g.state in ("applied", "rolled-back")]
                older = [g for g in older if current is None or g.number < current.number]
                if not older:
                    raise GenerationError(
                        "no earlier generation that ran healthy to roll back to; "
                        "see 'layoutgen rollback --list'"
                    )
                target = older[-1]
            else:
                target = store.load(generation)
            if current is not None and target.number == current.number:
                say(f"generation {target.number} is already current")
                return OK
            manager = Manager(scope)
            plan = changes(current, target, lambda u: _active(manager, u))
            _say_changes(say, current, plan, "will")
            code = run_switch(store, current, target, manager, say, bounds, keep=10**6)
            if code == OK and current is not None:
                store.set_state(current, "rolled-back")
            return code
    except LayoutgenError as exc:
        say(f"error: {exc}")
        return FAILED


def generations(scope: str) -> list[str]:
    """The generations list, newest last; ``*`` marks the current one."""
    store = Store(store_for_read(scope))
    current = store.current_number()
    lines = []
    for g in store.all():
        mark = "*" if g.number == current else " "
        commit = f" {g.commit[:12]}" if g.commit else ""
        lines.append(f"{mark} {g.number:>4}  {g.created}  {g.state:<11} {g.spec}{commit}")
    return lines


def store_for_read(scope: str) -> Path:
    from layoutgen.deploy.generations import state_dir

    return state_dir(scope)


def _active(manager: Manager, unit: str) -> bool:
    return manager.state(unit).active in ("active", "activating", "reloading")


def _preview(store: Store, prepared: object, commit: str) -> Generation:
    """The generation apply would create, in a scratch folder (for --dry-run)."""
    import tempfile

    from layoutgen.deploy.prepare import Prepared

    assert isinstance(prepared, Prepared)
    scratch = Store(Path(tempfile.mkdtemp(prefix="layoutgen-dry-")))
    return scratch.create(prepared.files, prepared.meta(commit))


def _discard(gen: Generation, scratch: bool = False) -> None:
    """Remove a generation never switched to (``scratch``: the dry run's whole folder)."""
    import shutil

    shutil.rmtree(gen.path.parents[1] if scratch else gen.path, ignore_errors=True)


def _say_changes(say: Say, current: Generation | None, plan: object, verb: str) -> None:
    from layoutgen.deploy.apply import Changes

    assert isinstance(plan, Changes)
    base = "nothing installed yet" if current is None else f"generation {current.number}"
    if plan.empty and not plan.start:
        say(f"no change against {base}")
        return
    say(f"against {base}, apply {verb}:")
    for line in plan.lines():
        say(line)


def _timers(manager: Manager, gen: Generation, say: Say) -> None:
    """Enable and start the generation's timers (the git-ops pull, a LoRA update's, a
    schedule's start/stop), as the manual steps do: their [Install] names timers.target."""
    for rel, dest in sorted(gen.install.items()):
        name = Path(dest).name
        if not name.endswith(".timer"):
            continue
        if "[Install]" in (gen.files / rel).read_text(encoding="utf-8"):
            manager.systemctl("enable", "--now", name)
            say(f"{name} enabled")
        else:  # no [Install]: started for this boot (a schedule's timers, render/schedule.py)
            manager.systemctl("start", name)
            say(f"{name} started")
