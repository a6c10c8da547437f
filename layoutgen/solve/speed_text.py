"""Words for a planned speed (the plan's text imports this, so it stays light)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from layoutgen.solve.plan import SpeedPlan


def efficiency_words(s: SpeedPlan) -> str:
    """The efficiencies a plan's speed used, each with its basis: "host RAM η 0.38 prior
    x peak, GPU η 0.51 prior"."""
    parts = []
    if s.host_figure != "none":
        parts.append(f"host RAM η {s.efficiency:g} {s.efficiency_basis} x {s.host_figure}")
    if s.gpu_efficiency is not None:
        parts.append(f"GPU η {s.gpu_efficiency:g} {s.gpu_efficiency_basis}")
    return ", ".join(parts) or f"η {s.efficiency:g} {s.efficiency_basis}"
