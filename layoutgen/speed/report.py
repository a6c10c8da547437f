"""``python -m layoutgen.speed.report [DIR]``: predicted vs measured decode t/s.

Public machines: one efficiency fitted on all of a machine's results. Seed 001: the
efficiency and the heat-ramp slope fitted on configurations 1 and 5 only.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

from layoutgen.speed import cases, heat, model

SEED_CALIBRATION = (0, 4)  # configurations 1 and 5


def rows(folder: Path) -> list[tuple[str, float, float, str, str]]:
    """(result, predicted, measured, role, constants) for every record in FOLDER."""
    out = []
    for rec in cases.load_dir(folder):
        ms = rec.measurements
        seed = rec.id.startswith("seed")
        cal = [ms[i] for i in SEED_CALIBRATION] if seed else list(ms)
        f = model.fit(cal, fit_slope=seed)
        const = f"eta={f.efficiency:.3f}" + (f" slope={f.slope:.3f}" if f.slope is not None else "")
        for x in ms:
            w = x.workload
            if f.slope is not None:
                w = w.with_heat(heat.ramp(w.moe_layers, f.slope))
            p = model.decode(replace(x.machine, efficiency=f.efficiency), w, x.depth).tps
            role = "calibration" if x in cal else "prediction"
            out.append((x.name, p, x.measured_tps, role, const))
    return out


def table(folder: Path) -> str:
    lines = [f"{'result':52} {'pred':>7} {'meas':>7} {'error':>7}  role / constants"]
    for name, p, m, role, const in rows(folder):
        lines.append(f"{name:52} {p:7.2f} {m:7.2f} {100 * (p / m - 1):+6.1f}%  {role} {const}")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    folder = Path(argv[0]) if argv else Path("tests/speed_data")
    sys.stdout.write(table(folder))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
