"""Timers and their one-shot services: what a LoRA update and a schedule share.

Both render a plain ``.timer`` firing at daily times and a ``Type=oneshot``
service it runs; every value but the ``ExecStart=`` line (quoted by
:func:`layoutgen.render.quoting.systemd_line`) must be literal unit text.
"""

from __future__ import annotations

from collections.abc import Iterable

from layoutgen.render import quoting

Sections = dict[str, list[tuple[str, str]]]


def daily_timer(
    description: str, times: Iterable[str], service: str, *, catch_up: bool = False
) -> Sections:
    """A timer running ``service`` (a unit name without ``.service``) at each HH:MM.

    ``catch_up``: ``Persistent=true``, so a run the host was off for happens at the next
    boot (a daily adapter update).  Not for a schedule's start and stop timers: after a
    night off both would fire at boot, in no set order."""
    return {
        "Unit": [("Description", description)],
        "Timer": [
            *[("OnCalendar", f"*-*-* {t}:00") for t in sorted(set(times))],
            *([("Persistent", "true")] if catch_up else []),
            ("Unit", f"{service}.service"),
        ],
        "Install": [("WantedBy", "timers.target")],
    }


def checked(*units: Sections) -> None:
    """Refuse (RenderError) any value that is not literal unit text; ExecStart= is
    already quoted."""
    for sections in units:
        for lines in sections.values():
            for key, value in lines:
                if key != "ExecStart":
                    quoting.unit_value(value)
