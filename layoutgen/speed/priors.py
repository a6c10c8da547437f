"""The efficiencies a machine gets before it is calibrated, fitted on tests/speed_data.

Three priors, one per kind of figure, fitted together on the fitting set
(``tests/speed_data/*.yaml``; the held-out results in ``tests/speed_data/heldout/``
are never read here) by :func:`layoutgen.speed.lomo.fit`: every machine weighs the
same, records marked ``cannot_see`` are not fitted.  The per-machine fits below
(:func:`gpu_fits`, :func:`host_fits`) show the spread between machines:

- GPU memory: one efficiency fitted per machine whose results keep nothing in host RAM
  (every layer on GPUs), over the GPUs' datasheet peaks;
- host RAM, peak: one efficiency per machine that reads host RAM and gives its RAM as
  channels x MT/s (or a peak), the GPUs at the GPU prior;
- host RAM, measured: the same for machines whose owner gave a measured bandwidth
  (``ram: {measured: ...}``: mlc, STREAM), so a measured figure is not scaled by the
  efficiency a peak needs.

``tests/test_speed_priors.py`` recomputes each and checks plan_speed's constants.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from layoutgen.speed import cases, lomo, model


def _on(rec: cases.Record, gpu_eta: float | None) -> list[model.Measurement]:
    return [
        replace(x, machine=replace(x.machine, gpu_efficiency=gpu_eta)) for x in rec.measurements
    ]


def _by_machine(records: Sequence[cases.Record]) -> dict[str, list[cases.Record]]:
    """Records grouped by machine (one machine may have a record per model)."""
    out: dict[str, list[cases.Record]] = {}
    for r in records:
        out.setdefault(r.machine.name, []).append(r)
    return out


def gpu_fits(records: Sequence[cases.Record]) -> dict[str, float]:
    """Machine -> GPU efficiency, for the machines whose results read nothing from
    host RAM (one efficiency over all of a machine's results)."""
    return {
        name: model.fit([x for r in rs for x in r.measurements], target="gpu").efficiency
        for name, rs in _by_machine(records).items()
        if not any(r.host_reads for r in rs)
    }


def host_fits(records: Sequence[cases.Record], gpu_eta: float, basis: str) -> dict[str, float]:
    """Machine -> host RAM efficiency (GPUs at GPU_ETA), for machines reading host RAM
    whose bandwidth is of BASIS ("peak" or "measured")."""
    return {
        name: model.fit([x for r in rs for x in _on(r, gpu_eta)]).efficiency
        for name, rs in _by_machine(records).items()
        if any(r.host_reads for r in rs) and rs[0].host_basis == basis
    }


def priors(folder: Path) -> tuple[float, float, float | None]:
    """(GPU, host peak, host measured): the first two fitted together on FOLDER's
    machines (lomo.fit), the last 1 by mechanism (lomo.Globals.measured); None without a
    machine that gives a measured bandwidth."""
    records = cases.load_dir(folder)
    g = lomo.fit(records)
    has_measured = any(r.host_basis == "measured" and r.cannot_see is None for r in records)
    return g.gpu, g.peak, g.measured if has_measured else None


def constants(folder: Path) -> lomo.Globals:
    """Every shared constant fitted on FOLDER (model.Constants' gpu_layer,
    cpu_layer_thread and thread_bandwidth among them)."""
    return lomo.fit(cases.load_dir(folder))


def medians(folder: Path) -> tuple[float, float]:
    """(GPU, host peak): the medians of the per-machine fits (the spread's middle)."""
    records = cases.load_dir(folder)
    gpu = statistics.median(gpu_fits(records).values())
    return gpu, statistics.median(host_fits(records, gpu, "peak").values())


def main() -> int:
    gpu, peak, measured = priors(Path("tests/speed_data"))
    print(f"GPU {gpu:.3f}  host peak {peak:.3f}  host measured {measured}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
