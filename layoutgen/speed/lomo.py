"""``python -m layoutgen.speed.lomo [DIR ...]``: the decode-speed truth table,
leave-one-machine-out.

The speed model has a few constants shared by every machine (:class:`Globals`): GPU
memory's efficiency, host RAM's over a peak figure and over a measured one, a GPU
layer's and a host layer-and-thread's fixed cost.  :func:`fit` chooses them on a set
of records, each machine weighing the same (the mean absolute log error of its results),
never one constant per record or per machine.  :func:`table` then predicts each machine
with the constants fitted on all the *other* machines: the figure a user gets on a
machine the model never saw, with the hardware as its owner wrote it.

``make speed-table`` prints it over ``tests/speed_data`` and ``tests/speed_data/heldout``;
``--markdown`` prints the per-machine table the docs carry.
"""

from __future__ import annotations

import math
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path

from layoutgen.speed import cases, cpu_compute, model

FOLDERS = (Path("tests/speed_data"), Path("tests/speed_data/heldout"))


@dataclass(frozen=True)
class Globals:
    """The constants every machine shares (module docstring); bounds in :data:`BOUNDS`."""

    gpu: float = 0.5
    peak: float = 0.4
    #: over a measured figure: 1, by mechanism (an mlc or STREAM read bandwidth is
    #: what a decode reads at); not fitted (fitted, it came to 1.01)
    measured: float = 1.0
    #: bytes/s one thread pulls from host RAM: not fitted (0: off), as model.DEFAULT;
    #: fitted (bounds 1-80 GB/s) it went to its upper bound on every fold but the
    #: thread sweep's, which wants about 12 GB/s
    thread_bandwidth: float = 0.0
    gpu_layer: float = 20e-6  # seconds a token and layer on a GPU (launches)
    cpu_layer_thread: float = 0.2e-6  # seconds a token, host layer and thread (barriers)
    #: a barrier arrival's cost across sockets over one within a socket
    cross_socket: float = 1.0

    def machine(self, rec: cases.Record, m: model.Machine) -> model.Machine:
        host = self.measured if rec.host_basis == "measured" else self.peak
        return replace(m, efficiency=host, gpu_efficiency=self.gpu)

    def constants(self) -> model.Constants:
        return replace(
            model.DEFAULT,
            thread_bandwidth=self.thread_bandwidth,
            gpu_layer=self.gpu_layer,
            cpu_layer_thread=self.cpu_layer_thread,
            cross_socket=self.cross_socket,
        )


BOUNDS: dict[str, tuple[float, float]] = {
    "gpu": (0.1, 1.2),
    "peak": (0.1, 1.2),
    "gpu_layer": (1e-7, 300e-6),
    "cpu_layer_thread": (1e-9, 40e-6),
    "cross_socket": (1.0, 30.0),
}


@dataclass(frozen=True)
class Row:
    record: str
    machine: str
    result: str
    predicted: float
    measured: float
    cannot_see: str | None
    #: one of the published figures the CPU compute rates are derived from
    #: (cpu_compute.FIGURES): reproduced by construction, so the fair summaries leave
    #: it out (:func:`fair`)
    figure: bool = False

    @property
    def error(self) -> float:
        return self.predicted / self.measured - 1.0


def predict(rec: cases.Record, g: Globals) -> list[Row]:
    k = g.constants()
    out = []
    for x in rec.measurements:
        p = model.decode(g.machine(rec, x.machine), x.workload, x.depth, k).tps
        name = x.name.split(": ", 1)[-1]
        out.append(
            Row(rec.id, rec.machine.name, name, p, x.measured_tps, rec.cannot_see, figure(rec, x))
        )
    return out


def figure(rec: cases.Record, x: model.Measurement) -> bool:
    """Whether result X of REC is a figure cpu_compute derives a rate from: the same
    source, thread count and measured speed."""
    url = rec.source.split()[0]
    threads = x.machine.memory(model.HOST).threads
    return any(
        f.source.split()[0] == url and f.threads == threads and f.tps == x.measured_tps
        for f in cpu_compute.FIGURES
    )


def fair(rows: Sequence[Row]) -> list[Row]:
    """ROWS less those the CPU compute figures come from."""
    return [r for r in rows if not r.figure]


def by_machine(records: Sequence[cases.Record]) -> dict[str, list[cases.Record]]:
    out: dict[str, list[cases.Record]] = {}
    for r in records:
        out.setdefault(r.machine.name, []).append(r)
    return out


def loss(records: Sequence[cases.Record], g: Globals) -> float:
    """Sum over machines of the mean absolute log error of the machine's results: each
    machine weighs the same, and a machine whose mechanism the model lacks (16 GPUs in
    a row, Metal's launches) pulls the constants no harder than one it explains (a
    squared error let such machines set them: leave-one-machine-out median 18.6 %,
    37 % within 15 %, against 11.8 % and 59 % with this one, the measured figure's
    efficiency fitted in both)."""
    total = 0.0
    for recs in by_machine(records).values():
        errs = [abs(math.log(r.predicted / r.measured)) for rec in recs for r in predict(rec, g)]
        total += sum(errs) / len(errs)
    return total


def fit(records: Sequence[cases.Record], sweeps: int = 3, iters: int = 30) -> Globals:
    """The globals minimising :func:`loss` on RECORDS (coordinate descent, each constant
    by golden section within :data:`BOUNDS`); a constant no record reads keeps its
    default.  Records that say what the model cannot see (``cannot_see:``) are
    predicted, never fitted: a mechanism the model lacks must not bend its constants."""
    records = [r for r in records if r.cannot_see is None]
    # in two stages: every constant but the cross-socket one on the hosts of one socket,
    # whose results it cannot move; then that one alone on the hosts of several, whose
    # results mix it with the others (their threads, barriers and bandwidth), so they
    # must not bend the single-socket constants
    one = [r for r in records if r.sockets == 1]
    several = [r for r in records if r.sockets > 1]
    g = _descend(one, Globals(), [n for n in BOUNDS if n != "cross_socket"], sweeps, iters)
    if several:
        g = _descend(several, g, ["cross_socket"], 1, iters)
    return g


def _descend(
    records: Sequence[cases.Record], g: Globals, names: Sequence[str], sweeps: int, iters: int
) -> Globals:
    """G with NAMES fitted on RECORDS by coordinate descent (:func:`fit`)."""
    names = [f.name for f in fields(Globals) if f.name in names]
    for _ in range(sweeps):
        for name in names:
            lo, hi = BOUNDS[name]
            base = loss(records, g)
            probe = loss(records, replace(g, **{name: hi if getattr(g, name) < hi else lo}))
            if probe == base:  # nothing reads it
                continue
            at = g

            def varied(v: float, n: str = name, at: Globals = at) -> float:
                return loss(records, replace(at, **{n: v}))

            g = replace(g, **{name: model.golden(varied, lo, hi, iters, log=True)})
    return g


@dataclass(frozen=True)
class Summary:
    results: int
    machines: int
    median_abs: float
    within_15: float
    within_30: float
    median_signed: float


def summary(found: Sequence[Row]) -> Summary:
    errs = [r.error for r in found]
    absolute = [abs(e) for e in errs]
    return Summary(
        results=len(found),
        machines=len({r.machine for r in found}),
        median_abs=statistics.median(absolute),
        within_15=sum(a <= 0.15 for a in absolute) / len(found),
        within_30=sum(a <= 0.30 for a in absolute) / len(found),
        median_signed=statistics.median(errs),
    )


def load(folders: Sequence[Path] = FOLDERS) -> list[cases.Record]:
    return [r for folder in folders for r in cases.load_dir(folder)]


def leave_one_machine_out(
    records: Sequence[cases.Record],
) -> tuple[list[Row], dict[str, Globals]]:
    """Each machine's results predicted with the globals fitted on every other machine."""
    groups = by_machine(records)
    rows: list[Row] = []
    fitted: dict[str, Globals] = {}
    for name, recs in groups.items():
        others = [r for n, rs in groups.items() if n != name for r in rs]
        g = fitted[name] = fit(others)
        rows += [row for rec in recs for row in predict(rec, g)]
    return rows, fitted


def summary_line(label: str, s: Summary) -> str:
    return (
        f"{label}: {s.results} results on {s.machines} machines; median |error| "
        f"{100 * s.median_abs:.1f} %, within 15 %: {100 * s.within_15:.0f} %, within 30 %: "
        f"{100 * s.within_30:.0f} %, signed median {100 * s.median_signed:+.1f} %"
    )


def _globals(g: Globals) -> str:
    return (
        f"GPU η {g.gpu:.3f}, host RAM η {g.peak:.3f} x peak / {g.measured:.3f} x measured, "
        f"{g.thread_bandwidth / 1e9:.1f} GB/s a thread, {g.gpu_layer * 1e6:.1f} us a GPU "
        f"layer, {g.cpu_layer_thread * 1e9:.0f} ns a host layer and thread "
        f"(x{g.cross_socket:.2f} across sockets)"
    )


def report(rows: Sequence[Row], width: int = 20) -> list[str]:
    """ROWS as a table's lines (the result column WIDTH wide), then the summary of all,
    and of the modelled ones where some are marked cannot_see."""
    lines = [f"{'record':40} {'result':{width}} {'pred':>8} {'meas':>8} {'error':>7}"]
    for r in rows:
        blind = f"  (not modelled: {r.cannot_see})" if r.cannot_see else ""
        lines.append(
            f"{r.record:40} {r.result[:width]:{width}} {r.predicted:8.2f} {r.measured:8.2f} "
            f"{100 * r.error:+6.1f}%{blind}"
        )
    lines.append(summary_line("all", summary(rows)))
    modelled = [r for r in rows if r.cannot_see is None]
    if modelled and len(modelled) < len(rows):
        lines.append(summary_line("modelled", summary(modelled)))
    others = fair(rows)
    if others and len(others) < len(rows):
        lines.append(summary_line("less the CPU compute figures' own rows", summary(others)))
    return lines


def table(folders: Sequence[Path] = FOLDERS) -> str:
    records = load(folders)
    rows, fitted = leave_one_machine_out(records)
    lines = [
        "decode t/s, leave-one-machine-out: each machine predicted with the constants "
        "fitted on the others",
        *report(rows),
    ]
    spread = {f.name: [getattr(g, f.name) for g in fitted.values()] for f in fields(Globals)}
    lines.append(
        "constants over the folds: "
        + ", ".join(f"{n} {min(v):.3g}-{max(v):.3g}" for n, v in spread.items())
    )
    lines.append("fitted on every machine: " + _globals(fit(records)))
    return "\n".join(lines) + "\n"


def markdown(folders: Sequence[Path] = FOLDERS) -> str:
    """The accuracy table for the docs: one row a machine (held out in turn), then the
    summary; every figure from :func:`leave_one_machine_out`."""
    records = load(folders)
    rows, _ = leave_one_machine_out(records)
    kinds: dict[str, set[str]] = {}
    for rec in records:
        kind = "CPU only" if not rec.machine.gpus else "full GPU"
        if rec.machine.gpus and rec.host_reads:
            kind = "hybrid"
        kinds.setdefault(rec.machine.name, set()).add(kind)
    lines = [
        "| machine (held out) | kind | results | median error | worst |",
        "|---|---|---:|---:|---:|",
    ]
    for name in sorted(by_machine(records)):
        errs = [r.error for r in rows if r.machine == name]
        worst = max(errs, key=abs)
        lines.append(
            f"| {name} | {', '.join(sorted(kinds[name]))} | {len(errs)} | "
            f"{100 * statistics.median(errs):+.0f} % | {100 * worst:+.0f} % |"
        )
    s = summary(rows)
    lines += [
        "",
        f"{s.results} results on {s.machines} machines, each predicted with the constants "
        "fitted on the other machines: median \\|error\\| "
        f"{100 * s.median_abs:.1f} %, "
        f"{100 * s.within_15:.0f} % within 15 %, {100 * s.within_30:.0f} % within 30 %, "
        f"signed median {100 * s.median_signed:+.1f} % (`make speed-table`).",
    ]
    f = summary(fair(rows))
    if f.results < s.results:
        lines[-1] += (
            f" Less the {s.results - f.results} results the CPU compute figures are "
            f"derived from (reproduced by construction): {f.results} results, median "
            f"\\|error\\| {100 * f.median_abs:.1f} %, {100 * f.within_15:.0f} % within 15 %, "
            f"{100 * f.within_30:.0f} % within 30 %."
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    if argv[:1] == ["--markdown"]:
        sys.stdout.write(markdown(tuple(Path(a) for a in argv[1:]) or FOLDERS))
        return 0
    folders = tuple(Path(a) for a in argv) or FOLDERS
    sys.stdout.write(table(folders))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
