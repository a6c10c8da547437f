"""systemctl, journalctl and a unit's processes, for the system manager or the user's.

Every call runs the real programs with an argument list (no shell); a unit name
is always one the generation recorded.  ``pids`` reads the unit's cgroup, in
each hierarchy the host mounts (cgroup v2, or v1's ``name=systemd`` and the
hybrid ``unified`` tree): a container started by a quadlet unit lives below it.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from layoutgen.errors import LayoutgenError

CGROUP_ROOTS = ("/sys/fs/cgroup", "/sys/fs/cgroup/systemd", "/sys/fs/cgroup/unified")


class SystemdError(LayoutgenError):
    """systemctl is missing, or refused a command."""


@dataclass(frozen=True)
class UnitState:
    active: str  # ActiveState: active, activating, failed, inactive, ...
    sub: str  # SubState: running, auto-restart, dead, ...
    result: str  # Result: success, exit-code, timeout, ...
    main_pid: int
    cgroup: str
    load: str  # LoadState: loaded, not-found, ...
    main_exited: bool = False  # the main process ran and is gone
    main_status: int = 0

    @property
    def text(self) -> str:
        return f"{self.active} ({self.sub})"


class Manager:
    def __init__(self, scope: str) -> None:
        self.scope = scope
        self._user = ["--user"] if scope == "user" else []

    def _run(self, argv: list[str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run(
                argv, capture_output=True, text=True, check=False, timeout=timeout
            )
        except FileNotFoundError:
            raise SystemdError(
                f"{argv[0]} not found: apply needs systemd on the host (and podman for "
                "container services)"
            ) from None
        except subprocess.TimeoutExpired:
            raise SystemdError(f"{' '.join(argv)} did not return within {timeout:g} s") from None

    def systemctl(self, *args: str, check: bool = True, timeout: float = 120) -> str:
        done = self._run(["systemctl", *self._user, *args], timeout)
        if check and done.returncode != 0:
            raise SystemdError(
                f"systemctl {' '.join([*self._user, *args])} failed: {done.stderr.strip()}"
            )
        return done.stdout

    def daemon_reload(self) -> None:
        self.systemctl("daemon-reload")

    def start(self, unit: str) -> None:
        """Queue the start; the caller watches the state (health gates it)."""
        self.systemctl("start", "--no-block", unit)

    def stop(self, unit: str, timeout: float = 180) -> None:
        self.systemctl("stop", unit, check=False, timeout=timeout)

    def reset_failed(self, unit: str) -> None:
        self.systemctl("reset-failed", unit, check=False)

    def state(self, unit: str) -> UnitState:
        out = self.systemctl(
            "show",
            "--property=ActiveState,SubState,Result,MainPID,ControlGroup,LoadState,ExecMainStatus,ExecMainPID",
            unit,
            check=False,
        )
        d = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
        return UnitState(
            active=d.get("ActiveState", "unknown"),
            sub=d.get("SubState", "unknown"),
            result=d.get("Result", ""),
            main_pid=int(d.get("MainPID", "0") or 0),
            cgroup=d.get("ControlGroup", ""),
            load=d.get("LoadState", "unknown"),
            main_exited=bool(int(d.get("ExecMainPID", "0") or 0))
            and not int(d.get("MainPID", "0") or 0),
            main_status=int(d.get("ExecMainStatus", "0") or 0),
        )

    def journal(self, unit: str, lines: int = 15) -> list[str]:
        argv = ["journalctl", *self._user, "--no-pager", "-o", "cat", "-n", "200", "-u", unit]
        try:
            done = self._run(argv, timeout=30)
        except SystemdError:
            return []
        kept = [line for line in done.stdout.splitlines() if line.strip()]
        # the last start only: earlier runs of the unit tell another story
        starts = [i for i, line in enumerate(kept) if line.startswith("Starting ")]
        return kept[starts[-1] if starts else 0 :][-lines:]

    def pids(self, unit: str) -> set[int]:
        """Every process of the unit (its cgroup and below), in any mounted hierarchy."""
        state = self.state(unit)
        found: set[int] = set()
        if state.main_pid:
            found.add(state.main_pid)
        if not state.cgroup:
            return found
        for root in CGROUP_ROOTS:
            top = Path(root + state.cgroup)
            if not top.is_dir():
                continue
            for folder, _dirs, files in os.walk(top):
                if "cgroup.procs" in files:
                    try:
                        text = Path(folder, "cgroup.procs").read_text()
                    except OSError:
                        continue
                    found.update(int(p) for p in text.split() if p.isdigit())
        return found
