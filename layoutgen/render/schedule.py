"""A service's daily schedule (``schedule: "22:00-06:00"``): timers start and stop it.

Per scheduled service four plain systemd units, beside its own (quadlet has no
timers, so in ``quadlet/`` too, as the LoRA updates): ``<name>-start.timer`` fires at
each window's start and runs the one-shot ``<name>-start.service``, which asks
systemd to start ``<name>.service``; ``<name>-stop.timer`` and ``<name>-stop.service``
do the same at each window's end.  The service itself then has no ``[Install]``: it
runs only when its timers say.  The one-shot runs :data:`CONTROL`, a fixed bash
program taking the action and the unit as positional parameters (never as code); it
asks the system manager as root and the user's manager otherwise, and does not wait
for the start (``--no-block``: a large model's start takes longer than a one-shot's
timeout).  A reboot inside a window starts the service at the next window's start.
"""

from __future__ import annotations

from dataclasses import dataclass

from layoutgen.render import quoting, sandbox
from layoutgen.render.oneshot import checked, daily_timer
from layoutgen.spec.roles import ResolvedService

CONTROL = r"""set -eu
action=$1 unit=$2
if [ "$(id -u)" = 0 ]; then
  exec systemctl --no-block "$action" -- "$unit"
fi
exec systemctl --user --no-block "$action" -- "$unit"
"""


@dataclass(frozen=True)
class ScheduleUnits:
    """``<name>.service`` (one-shot) and ``<name>.timer`` for one edge of the windows."""

    name: str
    service: dict[str, list[tuple[str, str]]]
    timer: dict[str, list[tuple[str, str]]]


def edges(text: str) -> tuple[list[str], list[str]]:
    """The windows' starts and ends as ``HH:MM`` (24:00 is 00:00), in the written order."""
    starts: list[str] = []
    ends: list[str] = []
    for part in text.split(","):
        start, _, end = part.strip().partition("-")
        starts.append(start)
        ends.append("00:00" if end == "24:00" else end)
    return starts, ends


def schedule_units(rs: ResolvedService) -> list[ScheduleUnits]:
    text = rs.service.schedule
    if text is None:
        return []
    target = f"{rs.name}.service"
    out = []
    for action, times in zip(("start", "stop"), edges(text), strict=True):
        name = f"{rs.name}-{action}"
        description = f"layoutgen: {action} {rs.name} on its schedule ({text})"
        service = {
            "Unit": [("Description", description)],
            "Service": [
                ("Type", "oneshot"),
                (
                    "ExecStart",
                    quoting.systemd_line(["/bin/bash", "-c", CONTROL, "schedule", action, target]),
                ),
                ("Restart", "no"),
                ("TimeoutStartSec", "60s"),
                *sandbox.scheduler(),
            ],
        }
        timer = daily_timer(description, times, name)
        checked(service, timer)
        out.append(ScheduleUnits(name, service, timer))
    return out
