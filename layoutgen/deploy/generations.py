"""Generations: every apply renders into a new numbered folder of the state directory.

Layout (``/var/lib/layoutgen`` as root, ``$XDG_STATE_HOME/layoutgen`` otherwise)::

    generations/<N>/generation.json   what was applied: spec, services, install paths, state
    generations/<N>/files/...         the rendered host tree (quadlet/, systemd/, plan.json, ...)
    current -> generations/<N>        the generation the host runs (replaced by rename)
    lock                              one apply or rollback at a time (flock)

A generation is written whole before ``current`` points at it, and ``current``
moves by ``rename(2)`` of a new link, so a killed apply leaves the old link or
the new one.  Pruning keeps the newest ``keep`` generations and never the one
``current`` names.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from layoutgen.errors import LayoutgenError

META = "generation.json"
FILES = "files"
#: a generation's states: applied (it ran healthy), failed (apply rolled it back),
#: rolled-back (a later rollback left it), pending (apply is running it)
STATES = ("pending", "applied", "failed", "rolled-back")


class GenerationError(LayoutgenError):
    """A generation that does not exist, or a state directory that cannot be used."""


def state_dir(scope: str, env: Mapping[str, str] | None = None) -> Path:
    """Where generations live: LAYOUTGEN_STATE_DIR, else by scope and platform."""
    env = os.environ if env is None else env
    if env.get("LAYOUTGEN_STATE_DIR"):
        return Path(env["LAYOUTGEN_STATE_DIR"])
    if scope == "system":
        return Path("/var/lib/layoutgen")
    base = env.get("XDG_STATE_HOME") or str(
        Path(env.get("HOME", "~")).expanduser() / ".local/state"
    )
    return Path(base) / "layoutgen"


@dataclass(frozen=True)
class ServiceRecord:
    """One service as a generation records it."""

    name: str
    unit: str  # "x.service"
    health: str  # the /health URL
    port: int
    bind: str  # "127.0.0.1" or "0.0.0.0"
    at_boot: bool  # apply starts it (alternatives not chosen at boot stay stopped)
    #: NVML GPU index (as text) -> bytes the plan budgets for this service there
    planned: Mapping[str, int] = field(default_factory=dict)
    secrets: tuple[str, ...] = ()

    def as_json(self) -> dict[str, Any]:
        return {
            "unit": self.unit,
            "health": self.health,
            "port": self.port,
            "bind": self.bind,
            "at_boot": self.at_boot,
            "planned": dict(sorted(self.planned.items())),
            "secrets": list(self.secrets),
        }

    @classmethod
    def from_json(cls, name: str, d: Mapping[str, Any]) -> ServiceRecord:
        return cls(
            name=name,
            unit=str(d["unit"]),
            health=str(d["health"]),
            port=int(d["port"]),
            bind=str(d["bind"]),
            at_boot=bool(d["at_boot"]),
            planned={str(k): int(v) for k, v in d.get("planned", {}).items()},
            secrets=tuple(d.get("secrets", ())),
        )


@dataclass(frozen=True)
class Generation:
    number: int
    path: Path
    spec: str
    host: str
    scope: str
    #: rendered file (relative to files/) -> the absolute path it is installed at
    install: Mapping[str, str]
    services: tuple[ServiceRecord, ...]
    start_order: tuple[str, ...]
    state: str
    created: str
    commit: str = ""  # the git commit the spec came from (git-ops), "" when not known
    #: host.gitops as applied: {repo, branch, spec}; None when the spec has none
    gitops: Mapping[str, str] | None = None

    @property
    def files(self) -> Path:
        return self.path / FILES

    def service(self, name: str) -> ServiceRecord | None:
        return next((s for s in self.services if s.name == name), None)

    def as_json(self) -> dict[str, Any]:
        return {
            "schema": 1,
            "generation": self.number,
            "spec": self.spec,
            "host": self.host,
            "scope": self.scope,
            "commit": self.commit,
            "gitops": None if self.gitops is None else dict(self.gitops),
            "created": self.created,
            "state": self.state,
            "start_order": list(self.start_order),
            "install": dict(sorted(self.install.items())),
            "services": {s.name: s.as_json() for s in self.services},
        }


class Store:
    """The state directory of one scope."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @property
    def generations_dir(self) -> Path:
        return self.root / "generations"

    @contextmanager
    def locked(self) -> Iterator[None]:
        """One apply, rollback or pull at a time on this host and scope."""
        self.root.mkdir(parents=True, exist_ok=True, mode=0o755)
        fd = os.open(self.root / "lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise GenerationError(
                    f"{self.root}/lock: another layoutgen apply or rollback is running on this "
                    "host; wait for it to end"
                ) from None
            yield
        finally:
            os.close(fd)

    def numbers(self) -> list[int]:
        try:
            names = os.listdir(self.generations_dir)
        except FileNotFoundError:
            return []
        return sorted(
            int(n) for n in names if n.isdigit() and (self.generations_dir / n / META).is_file()
        )

    def load(self, number: int) -> Generation:
        path = self.generations_dir / str(number)
        try:
            d = json.loads((path / META).read_text(encoding="utf-8"))
        except FileNotFoundError:
            have = ", ".join(map(str, self.numbers())) or "none"
            raise GenerationError(
                f"no generation {number} in {self.generations_dir} (generations: {have})"
            ) from None
        except (OSError, ValueError) as exc:
            raise GenerationError(f"{path / META}: unreadable ({exc})") from None
        return Generation(
            number=int(d["generation"]),
            path=path,
            spec=str(d["spec"]),
            host=str(d["host"]),
            scope=str(d["scope"]),
            install={str(k): str(v) for k, v in d["install"].items()},
            services=tuple(ServiceRecord.from_json(n, s) for n, s in d["services"].items()),
            start_order=tuple(d["start_order"]),
            state=str(d["state"]),
            created=str(d["created"]),
            commit=str(d.get("commit", "")),
            gitops=d.get("gitops"),
        )

    def all(self) -> list[Generation]:
        return [self.load(n) for n in self.numbers()]

    def current_number(self) -> int | None:
        try:
            target = os.readlink(self.root / "current")
        except (FileNotFoundError, OSError):
            return None
        name = Path(target).name
        return int(name) if name.isdigit() else None

    def current(self) -> Generation | None:
        number = self.current_number()
        return None if number is None else self.load(number)

    def create(
        self,
        files: Mapping[str, str],
        meta: Mapping[str, Any],
    ) -> Generation:
        """A new generation (the next number) holding ``files``, state ``pending``."""
        self.generations_dir.mkdir(parents=True, exist_ok=True)
        number = max(self.numbers(), default=0) + 1
        tmp = self.generations_dir / f".new-{number}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        for rel, text in files.items():
            path = tmp / FILES / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        data = {**meta, "generation": number, "state": "pending"}
        (tmp / META).write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        os.rename(tmp, self.generations_dir / str(number))
        return self.load(number)

    def set_state(self, gen: Generation, state: str) -> Generation:
        assert state in STATES, state
        d = gen.as_json()
        d["state"] = state
        _write_atomic(gen.path / META, json.dumps(d, indent=1, sort_keys=True) + "\n")
        return self.load(gen.number)

    def set_current(self, gen: Generation) -> None:
        link = self.root / "current"
        tmp = self.root / f".current-{os.getpid()}"
        with _suppress_missing():
            os.unlink(tmp)
        os.symlink(f"generations/{gen.number}", tmp)
        os.rename(tmp, link)

    def prune(self, keep: int) -> list[int]:
        """Remove all but the newest ``keep`` generations; never the current one, nor the
        newest one before it that ran healthy (what ``rollback`` returns to), however many
        failed generations came since."""
        current = self.current_number()
        numbers = self.numbers()
        healthy = [
            g.number
            for g in self.all()
            if g.state in ("applied", "rolled-back") and (current is None or g.number < current)
        ]
        kept = {current, healthy[-1] if healthy else None}
        doomed = [n for n in numbers[: max(len(numbers) - keep, 0)] if n not in kept]
        for n in doomed:
            shutil.rmtree(self.generations_dir / str(n), ignore_errors=True)
        return doomed


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


@contextmanager
def _suppress_missing() -> Iterator[None]:
    with suppress(FileNotFoundError):
        yield
