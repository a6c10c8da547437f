"""The NUMA term on public results: same-machine pairs that differ only in where the
pages and threads sit (tests/speed_data: ik258-2x9355-*, ik296-2x6980p-*,
ik396-2x8480-maverick-pair), predicted with the shipped constants (model.DEFAULT, the
priors) and compared as ratios, so each machine's own miss (a 128-core Xeon's +50 %)
cancels.

Measured 2026-11-28 (predicted against measured ratio, the faster reading over the
slower): dual EPYC 9355, NPS0 over NPS4: 1.19 against 1.17; dual Xeon 6980P, one socket
bound over both with the pages where the loader put them: 1.82 against 1.47 (the bound
run was in the 'balanced' power profile, the other in 'performance': the measured ratio
is low by that much); dual Xeon 8480+, one socket bound over --numa distribute at the
default 112 threads (assumed; the source gives none): 2.13 against 1.48.  Without the
term the first two read 1.00 and the third 1.29 (its thread counts alone).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from layoutgen.solve import plan_speed
from layoutgen.speed import cases, model

DATA = Path(__file__).parent / "speed_data"
#: (faster record, result, slower record, result)
PAIRS = (
    ("ik258-2x9355-dsv3-nps0", 0, "ik258-2x9355-dsv3-nps4", 0),
    ("ik296-2x6980p-dsv3-iq4kr4", 0, "ik296-2x6980p-dsv3-iq4kr4", 1),
    ("ik396-2x8480-maverick-pair", 0, "ik396-2x8480-maverick-pair", 1),
)


def _shipped(rec: cases.Record, x: model.Measurement) -> tuple[float, float]:
    """(predicted, measured) t/s of X with the priors a spec without calibration gets."""
    host = (
        plan_speed.PRIOR_MEASURED_EFFICIENCY
        if rec.host_basis == "measured"
        else plan_speed.PRIOR_EFFICIENCY
    )
    m = model.Machine(x.machine.name, x.machine.memories, host, plan_speed.PRIOR_GPU_EFFICIENCY)
    return model.decode(m, x.workload, x.depth).tps, x.measured_tps


def _ratios() -> list[tuple[str, float, float]]:
    out = []
    for fast, i, slow, j in PAIRS:
        a, b = cases.load(DATA / f"{fast}.yaml"), cases.load(DATA / f"{slow}.yaml")
        (pa, ma), (pb, mb) = _shipped(a, a.measurements[i]), _shipped(b, b.measurements[j])
        out.append((fast, pa / pb, ma / mb))
    return out


def test_every_pair_goes_the_measured_way_within_half() -> None:
    for name, predicted, measured in _ratios():
        assert measured > 1.1, name  # each pair is a real difference
        assert predicted > 1.1, (name, predicted, measured)
        assert 1 / 1.5 < predicted / measured < 1.5, (name, predicted, measured)


def test_nps0_over_nps4_on_the_same_command() -> None:
    # the one pair whose runs differ in the BIOS setting alone (same command, same day)
    _name, predicted, measured = _ratios()[0]
    assert measured == pytest.approx(9.85 / 8.43)
    assert predicted == pytest.approx(measured, rel=0.05), (predicted, measured)


def test_the_multi_socket_records_are_read_as_such() -> None:
    recs = [r for r in cases.load_dir(DATA) if r.sockets > 1]
    assert {r.machine.name for r in recs} >= {"ik258-2x9355", "ik534-6980p", "ik396-2x8480"}
    # every one of their results carries the NUMA reading: one socket's threads or two
    spans = {x.machine.memory(model.HOST).sockets for r in recs for x in r.measurements}
    assert spans == {1, 2}
