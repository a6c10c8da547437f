"""Issue 33 item 3: the decode-speed truth table, leave-one-machine-out.

layoutgen.speed.lomo fits the constants every machine shares (GPU memory's efficiency,
host RAM's over a peak and over a measured figure, a thread's pull) on all machines but
one and predicts that one; ``make speed-table`` prints it.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from layoutgen.speed import cases, cpu_compute, lomo, model

DATA = Path(__file__).parent / "speed_data"
FOLDERS = (DATA, DATA / "heldout")


def test_the_table_has_what_the_issue_asks() -> None:
    records = lomo.load(FOLDERS)
    results = [x for r in records for x in r.measurements]
    assert len(results) >= 80
    assert len(lomo.by_machine(records)) >= 18
    runtimes = " ".join(r.path.read_text(encoding="utf-8") for r in records)
    assert "ik_llama.cpp" in runtimes and "llama.cpp build 5635" in runtimes
    kinds = {
        ("cpu" if not r.machine.gpus else "gpu" if not r.host_reads else "hybrid") for r in records
    }
    assert kinds == {"cpu", "gpu", "hybrid"}


@pytest.fixture(scope="module")
def lomo_run() -> tuple[list[cases.Record], list[lomo.Row], dict[str, lomo.Globals]]:
    records = lomo.load(FOLDERS)
    rows, fitted = lomo.leave_one_machine_out(records)
    return records, rows, fitted


def test_a_machine_is_predicted_from_the_others_only(
    lomo_run: tuple[list[cases.Record], list[lomo.Row], dict[str, lomo.Globals]],
) -> None:
    """A machine's fold is fitted on every other machine, and its rows are those
    constants' predictions; fitting on all machines would give other constants."""
    records, rows, fitted = lomo_run
    name = "slaren-13900k"
    others = [r for r in records if r.machine.name != name]
    assert fitted[name] == lomo.fit(others)
    mine = [row for r in records if r.machine.name == name for row in lomo.predict(r, fitted[name])]
    assert [r for r in rows if r.machine == name] == mine
    assert lomo.fit(records) != fitted[name]


def test_fit_recovers_known_constants() -> None:
    """Records made to measure what given constants predict give those constants back."""
    truth = lomo.Globals(gpu=0.7, peak=0.45, gpu_layer=40e-6)  # measured: 1, not fitted
    made = []
    for r in lomo.load((DATA,)):
        if r.cannot_see is not None:
            continue
        rows = lomo.predict(r, truth)
        made.append(
            replace(
                r,
                measurements=tuple(
                    replace(x, measured_tps=row.predicted)
                    for x, row in zip(r.measurements, rows, strict=True)
                ),
            )
        )
    g = lomo.fit(made, sweeps=4, iters=40)
    assert g.gpu == pytest.approx(0.7, rel=0.01)
    assert g.peak == pytest.approx(0.45, rel=0.01)
    assert g.measured == 1.0
    assert g.gpu_layer == pytest.approx(40e-6, rel=0.02)
    assert lomo.loss(made, g) < 0.01  # a mean absolute log error: 0.04 % a machine


def test_records_marked_cannot_see_are_predicted_not_fitted() -> None:
    records = lomo.load((DATA,))
    blind = [r for r in records if r.cannot_see is not None]
    assert blind  # the EPYC 9654's IQ1_S run, mainline's CPU attention
    seen = [r for r in records if r.cannot_see is None]
    assert lomo.fit(records) == lomo.fit(seen)


def test_summary_figures(
    lomo_run: tuple[list[cases.Record], list[lomo.Row], dict[str, lomo.Globals]],
) -> None:
    _, rows, _ = lomo_run
    s = lomo.summary(rows)
    errors = sorted(abs(r.error) for r in rows)
    assert s.within_15 == sum(e <= 0.15 for e in errors) / len(errors)
    assert all(math.isfinite(r.predicted) and r.predicted > 0 for r in rows)  # none refused
    # issue 33's acceptance, on this table held out machine by machine, less the rows
    # the CPU compute figures are derived from (they come back by construction): median
    # |error| at most 10 %, at least 70 % of results within 15 % (measured 2026-11-28:
    # 6.4 %, 83 % of 144; on the 86 results before the compute term 6.4 %, 78 %)
    figures = [r for r in rows if r.figure]
    # every figure is a row of the table, found once
    distinct = {(f.source.split()[0], f.threads, f.tps) for f in cpu_compute.FIGURES}
    assert len(figures) == len(distinct)
    f = lomo.summary(lomo.fair(rows))
    assert f.median_abs <= 0.10 and f.within_15 >= 0.70


def test_a_result_may_give_its_own_thread_count_and_threads_cap_host_bandwidth() -> None:
    rec = cases.load(DATA / "slaren34-13900k-llama7b.yaml")
    threads = [x.machine.memory(model.HOST).threads for x in rec.measurements]
    assert threads == [4, 8, 16, 24, 24]  # 32 threads: the 24 cores
    x4, x8 = rec.measurements[0], rec.measurements[1]
    k = model.Constants(thread_bandwidth=10e9)
    m4 = replace(x4.machine, efficiency=0.6)
    m8 = replace(x8.machine, efficiency=0.6)
    bw = 0.6 * 2 * 6400e6 * 8
    assert model.effective_bandwidth(m4, m4.memory(model.HOST), k) == 40e9
    assert model.effective_bandwidth(m8, m8.memory(model.HOST), k) == pytest.approx(min(bw, 80e9))
    # off (the default): the efficiency alone
    assert model.effective_bandwidth(m4, m4.memory(model.HOST)) == pytest.approx(bw)
    t4 = model.decode(m4, x4.workload, x4.depth, k).tps
    t8 = model.decode(m8, x8.workload, x8.depth, k).tps
    assert t4 < t8


def test_ngl_puts_the_last_layers_on_the_gpu() -> None:
    rec = cases.load(DATA / "ll11474-epyc9654-3090-r1-iq1s.yaml")
    w = rec.measurements[0].workload
    on_gpu = sorted({c.layer for c in w.chunks if c.device == "CUDA0"})
    assert on_gpu == list(range(53, 61))  # -ngl 8 of 61 layers, experts with them
    assert {c.device for c in w.chunks if c.layer < 53} == {model.HOST}


def test_the_markdown_table_has_a_row_a_machine_and_the_summary() -> None:
    text = lomo.markdown(FOLDERS)
    records = lomo.load(FOLDERS)
    machines = lomo.by_machine(records)
    rows = [line for line in text.splitlines() if line.startswith("| ") and "---" not in line]
    assert len(rows) == len(machines) + 1  # the header
    assert all(f"| {name} |" in text for name in machines)
    assert "| seed001-epyc9175f | hybrid | 5 |" in text
    assert f"{sum(len(r.measurements) for r in records)} results on {len(machines)}" in text
