"""Prefill against public prompt-processing measurements (tests/speed_data/prefill).

Each record there is a decode record's machine, model and placement (the same format,
read by :func:`layoutgen.speed.cases.load`) whose results are the same source's prompt
rows: llama-bench ``pp512`` (one ubatch of 512 at llama-bench's default ``-ub 512``) or
llama-sweep-bench ``S_PP`` at ``N_KV`` 0 (its PP column is the ubatch). Each result
carries ``ubatch:``; :func:`layoutgen.speed.model.prefill_tps` predicts it with the
shipped constants (nothing here is fitted), and ``python -m
layoutgen.speed.prefill_table`` prints each error and the summary, as
``layoutgen.speed.lomo`` does for decode.
"""

from __future__ import annotations

import math
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from ruamel.yaml import YAML

from layoutgen.speed import cases, cpu_compute, model

FOLDER = Path("tests/speed_data/prefill")


@dataclass(frozen=True)
class Row:
    record: str
    result: str
    machine: str
    kind: str  # "CPU only", "full GPU" or "hybrid"
    runtime: str  # cpu_compute.runtime_family: "ik_llama.cpp" or "llama.cpp"
    ubatch: int
    predicted: float
    measured: float
    #: what it was predicted from, to predict it again at other constants
    machine_model: model.Machine = field(repr=False, compare=False)
    workload: model.Workload = field(repr=False, compare=False)

    @property
    def error(self) -> float:
        return self.predicted / self.measured - 1.0


@dataclass(frozen=True)
class Summary:
    results: int
    machines: int
    median_abs: float
    within_25: float
    within_50: float
    median_signed: float


def kind(w: model.Workload) -> str:
    """Where a result's weights sit: all on the host, all on GPUs, or both."""
    devices = {c.device for c in w.chunks}
    if devices == {model.HOST}:
        return "CPU only"
    return "hybrid" if model.HOST in devices else "full GPU"


def predict(path: Path, k: model.Constants = model.DEFAULT) -> list[Row]:
    """The record at PATH's results, each predicted at its ``ubatch:``."""
    rec = cases.load(path)
    d = YAML(typ="safe").load(path.read_text(encoding="utf-8"))
    raw, runtime = d["results"], cpu_compute.runtime_family(str(d["runtime"])) or "llama.cpp"
    return [
        Row(
            rec.id,
            x.name.split(": ", 1)[1],
            rec.machine.name,
            kind(x.workload),
            runtime,
            int(r["ubatch"]),
            model.prefill_tps(x.machine, x.workload, int(r["ubatch"]), k),
            x.measured_tps,
            x.machine,
            x.workload,
        )
        for x, r in zip(rec.measurements, raw, strict=True)
    ]


def rows(folder: Path = FOLDER, k: model.Constants = model.DEFAULT) -> list[Row]:
    return [row for p in sorted(folder.glob("*.yaml")) for row in predict(p, k)]


def refit(found: Sequence[Row], efficiency: float) -> list[Row]:
    """FOUND as predicted at compute EFFICIENCY instead of the shipped one (the rest of
    the constants as shipped: a host expert's PCIe stream does not scale with it)."""
    k = replace(model.DEFAULT, compute_efficiency=efficiency, gpu_compute_efficiency=efficiency)
    return [
        replace(r, predicted=model.prefill_tps(r.machine_model, r.workload, r.ubatch, k))
        for r in found
    ]


def fit(found: Sequence[Row]) -> float:
    """The compute efficiency that minimises the mean over machines of each machine's
    median |log(predicted / measured)| (each machine weighing the same, however many
    results it has)."""
    by: dict[str, list[Row]] = {}
    for r in found:
        by.setdefault(r.machine, []).append(r)

    def loss(e: float) -> float:
        return statistics.fmean(
            statistics.median(abs(math.log(x.predicted / x.measured)) for x in refit(rs, e))
            for rs in by.values()
        )

    return model.golden(loss, 0.05, 5.0, iters=40, log=True)


def by_kind(r: Row) -> str:
    return r.kind


def by_kind_and_cpu_runtime(r: Row) -> str:
    """CPU-only results split by the runtime whose kernels multiply on the CPU."""
    return f"{r.kind}, {r.runtime}" if r.kind == "CPU only" else r.kind


def leave_one_machine_out(
    found: Sequence[Row], group: Callable[[Row], str] = by_kind
) -> tuple[list[Row], dict[str, float]]:
    """Each result predicted at the compute efficiency fitted on the other machines of
    its GROUP (by default its kind: CPU only, hybrid, full GPU): the proposal a
    per-group efficiency would make, checked on machines it was not fitted on. Returns
    the rows and each group and machine's fitted efficiency."""
    out: list[Row] = []
    fitted: dict[str, float] = {}
    for r in found:
        others = [x for x in found if group(x) == group(r) and x.machine != r.machine]
        key = f"{group(r)}: {r.machine}"
        if key not in fitted:
            fitted[key] = fit(others) if others else model.DEFAULT.compute_efficiency
        out += refit([r], fitted[key])
    return out, fitted


def summary(found: Sequence[Row]) -> Summary:
    absolute = [abs(r.error) for r in found]
    return Summary(
        results=len(found),
        machines=len({r.machine for r in found}),
        median_abs=statistics.median(absolute),
        within_25=sum(a <= 0.25 for a in absolute) / len(found),
        within_50=sum(a <= 0.50 for a in absolute) / len(found),
        median_signed=statistics.median(r.error for r in found),
    )


def summary_line(label: str, s: Summary) -> str:
    return (
        f"{label}: {s.results} results on {s.machines} machines; median |error| "
        f"{100 * s.median_abs:.1f} %, within 25 %: {100 * s.within_25:.0f} %, within 50 %: "
        f"{100 * s.within_50:.0f} %, signed median {100 * s.median_signed:+.1f} %"
    )


def summaries(found: Sequence[Row]) -> list[str]:
    """The summary of FOUND, then of each kind, then of the CPU-only ones by runtime."""
    parts = [("all", list(found))]
    parts += [(n, [r for r in found if r.kind == n]) for n in ("CPU only", "hybrid", "full GPU")]
    parts += [
        (f"CPU only, {rt}", [r for r in found if r.kind == "CPU only" and r.runtime == rt])
        for rt in ("ik_llama.cpp", "llama.cpp")
    ]
    return [summary_line(label, summary(rs)) for label, rs in parts if rs]


def report(found: Sequence[Row], width: int = 24) -> list[str]:
    lines = [f"{'record':42} {'result':{width}} {'ubatch':>6} {'pred':>9} {'meas':>9} {'error':>8}"]
    for r in found:
        lines.append(
            f"{r.record:42} {r.result[:width]:{width}} {r.ubatch:6d} {r.predicted:9.1f} "
            f"{r.measured:9.1f} {100 * r.error:+7.1f}%"
        )
    return lines + summaries(found)


def table(folder: Path = FOLDER) -> str:
    found = rows(folder)
    lines = [
        f"prefill t/s at the shipped constants (model.prefill_tps, compute efficiency "
        f"{model.DEFAULT.compute_efficiency:g} on a CPU, "
        f"{model.DEFAULT.gpu_compute_efficiency:g} on a GPU)",
        *report(found),
    ]
    for label, group in (
        ("device kind (the shipped constants' fit)", by_kind),
        ("device kind, CPU-only results by runtime (not shipped)", by_kind_and_cpu_runtime),
    ):
        after, fitted = leave_one_machine_out(found, group)
        groups = sorted({group(r) for r in found})
        everyone = {g: fit([r for r in found if group(r) == g]) for g in groups}
        lines += [
            "",
            f"a compute efficiency per {label}, leave-one-machine-out",
            *summaries(after),
            "efficiencies fitted without each machine: "
            + ", ".join(f"{k} {v:.2f}" for k, v in sorted(fitted.items())),
            "fitted on every machine: " + ", ".join(f"{g} {everyone[g]:.2f}" for g in groups),
        ]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    sys.stdout.write(table(Path(argv[0]) if argv else FOLDER))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
