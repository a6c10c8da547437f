"""``python -m layoutgen.calibrate.heldout [DIR]``: the speed model as a user gets it, on
public results it was never fitted to.

Every result in ``tests/speed_data/heldout/`` is predicted with the priors alone
(plan_speed: host RAM's efficiency for the kind of figure its owner gave, the GPUs'
prior), never a constant fitted on it: those priors come from ``tests/speed_data/*.yaml``
(layoutgen.speed.priors), which never reads the held-out folder. The table gives each
result's error and the summary: median |error|, the share within 15 % and 30 %, and
the signed median (negative: predicted slow). Results whose records say what the model
cannot see (``cannot_see:``, e.g. a trellis quant's CPU compute) are in the table and in
the "all" summary, and left out of the "modelled" one.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

from layoutgen.solve import plan_speed
from layoutgen.speed import cases, model
from layoutgen.speed.lomo import Row, report, summary

__all__ = ["HELDOUT", "Row", "priors_for", "rows", "summary", "table"]

HELDOUT = Path("tests/speed_data/heldout")


def priors_for(rec: cases.Record) -> model.Machine:
    """REC's machine with the efficiencies a user's spec gets before calibrating."""
    host = (
        plan_speed.PRIOR_MEASURED_EFFICIENCY
        if rec.host_basis == "measured"
        else plan_speed.PRIOR_EFFICIENCY
    )
    return replace(rec.machine, efficiency=host, gpu_efficiency=plan_speed.PRIOR_GPU_EFFICIENCY)


def rows(folder: Path = HELDOUT) -> list[Row]:
    out = []
    for rec in cases.load_dir(folder):
        m = priors_for(rec)
        for x in rec.measurements:
            p = model.decode(m, x.workload, x.depth).tps
            name = x.name.split(": ", 1)[-1]
            out.append(Row(rec.id, rec.machine.name, name, p, x.measured_tps, rec.cannot_see))
    return out


def table(folder: Path = HELDOUT) -> str:
    found = rows(folder)
    lines = [
        f"held-out decode results, predicted with the priors (host RAM η "
        f"{plan_speed.PRIOR_EFFICIENCY} x peak, {plan_speed.PRIOR_MEASURED_EFFICIENCY} x "
        f"measured; GPU η {plan_speed.PRIOR_GPU_EFFICIENCY})",
        *report(found, width=18),
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    sys.stdout.write(table(Path(argv[0]) if argv else HELDOUT))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
