"""Lanes sharing host RAM's bandwidth (issue 18 item 4), on seed 000's workstation.

Seed 000: an EPYC 9175F (12 channels of DDR5-6400) with one RTX PRO 6000
Blackwell; a batch lane running a large MoE in host RAM, an interactive lane
on ik_llama.cpp with part of its experts in host RAM, and "patterns where
running multiple models simultaneously causes both to slow down due to
bandwidth competition".  The contention warning must fire when both decode at
full speed, and not when the batch lane's schedule keeps it off during the
interactive hours.
"""

from __future__ import annotations

import pytest

from layoutgen.speed import cases, hardware
from layoutgen.speed.contention import (
    Lane,
    WindowError,
    check,
    overlap,
    parse_windows,
    together,
    warning,
)
from layoutgen.speed.model import HOST, Constants, Machine, decode

#: seed 001 measured the same CPU; its efficiency fitted on configurations 1 and 5 with
#: bytes alone (before the per-layer terms) serves here: these lanes are priced by their
#: reads alone (Constants without the per-layer costs), the contention check's subject
EFFICIENCY = 0.486
READS_ALONE = Constants(gpu_layer=0.0, cpu_layer_thread=0.0)

MACHINE = {
    "machine": "seed000-epyc9175f",
    "cpu": "EPYC 9175F",
    "ram": {"channels": 12, "mts": 6400},
    "threads": 16,
    "gpus": ["RTX PRO 6000 Blackwell"],
}
#: public model facts (model cards and ggml-org's GGUFs): gpt-oss-120b MXFP4 as the
#: batch lane's MoE, Qwen3-30B-A3B Q4_K_M as the interactive lane's
GPT_OSS_120B = {
    "arch": "gpt-oss",
    "params": 116.83e9,
    "size_gib": 59.03,
    "expert_bpw": 4.25,
    "n_layer": 36,
    "leading_dense": 0,
    "n_expert": 128,
    "n_expert_used": 4,
    "n_embd": 2880,
    "expert_ff": 2880,
    "vocab": 201088,
    "kv_bytes_per_token": 36864,
}
QWEN3_30B_A3B = {
    "arch": "qwen3moe",
    "params": 30.53e9,
    "size_gib": 17.28,
    "n_layer": 48,
    "leading_dense": 0,
    "n_expert": 128,
    "n_expert_used": 8,
    "n_embd": 2048,
    "expert_ff": 768,
    "vocab": 151936,
    "kv_bytes_per_token": 98304,
}


def _lane(model: dict, placement: dict, windows: str | None = None) -> Lane:
    m = cases.machine(MACHINE)
    machine = Machine(m.name, m.memories, EFFICIENCY)
    w = cases.workload(cases.shape(model), placement, gpus=1)
    b = decode(machine, w, depth=4096, k=READS_ALONE)
    return Lane(
        model["arch"],
        b.seconds,
        b.device_seconds.get(HOST, 0.0),
        b.device_bytes.get(HOST, 0.0),
        None if windows is None else parse_windows(windows),
    )


BANDWIDTH = EFFICIENCY * hardware.ddr_bandwidth(12, 6400)


def test_seed_000s_two_lanes_fight_over_host_ram_at_full_speed() -> None:
    batch = _lane(GPT_OSS_120B, {"cpu_only": True})
    interactive = _lane(QWEN3_30B_A3B, {"n_cpu_moe": 36})  # 36 of 48 MoE layers in RAM
    assert batch.demand < BANDWIDTH and interactive.demand < BANDWIDTH  # each fits alone
    (pair,) = check([batch, interactive], BANDWIDTH)
    assert pair.over and pair.stretch > 1
    for name in pair.lanes:
        assert pair.tps_together[name] < pair.tps_alone[name]
    # together they take exactly what the memory gives
    used = sum(lane.host_bytes * pair.tps_together[lane.name] for lane in (batch, interactive))
    assert used == pytest.approx(BANDWIDTH, rel=1e-6)
    text = warning(pair)
    assert "decode at the same time" in text and "GB/s" in text and "tok/s" in text


def test_a_batch_schedule_outside_the_interactive_hours_removes_the_warning() -> None:
    batch = _lane(GPT_OSS_120B, {"cpu_only": True}, "22:00-06:00")
    interactive = _lane(QWEN3_30B_A3B, {"n_cpu_moe": 36}, "08:00-20:00")
    assert check([batch, interactive], BANDWIDTH) == []
    late = _lane(QWEN3_30B_A3B, {"n_cpu_moe": 36}, "08:00-23:00")  # an hour of overlap
    assert len(check([batch, late], BANDWIDTH)) == 1


def test_the_fluid_share_of_two_host_bound_lanes_is_half_each() -> None:
    """Two identical lanes that only read host RAM: each gets half the bandwidth."""
    gb = 1e9
    lane = Lane("a", seconds=0.01, host_seconds=0.01, host_bytes=3 * gb)  # 300 GB/s alone
    other = Lane("b", seconds=0.01, host_seconds=0.01, host_bytes=3 * gb)
    s = together((lane, other), 400 * gb)
    assert s.tps_together["a"] == pytest.approx(400 * gb / 2 / (3 * gb), rel=1e-6)
    assert s.stretch == pytest.approx(1.5, rel=1e-6)
    fits = together((Lane("c", 0.02, 0.01, gb), Lane("d", 0.02, 0.01, gb)), 400 * gb)
    assert fits.stretch == 1.0 and not fits.over


def test_windows() -> None:
    assert parse_windows("22:00-06:00") == ((0, 360), (1320, 1440))
    assert parse_windows("08:00-12:00, 13:00-18:30") == ((480, 720), (780, 1110))
    night = Lane("n", 1, 1, 1, parse_windows("22:00-06:00"))
    assert overlap(night, Lane("m", 1, 1, 1, parse_windows("05:00-07:00")))
    assert not overlap(night, Lane("d", 1, 1, 1, parse_windows("06:00-22:00")))
    assert overlap(night, Lane("always", 1, 1, 1))
    for bad in ("25:00-01:00", "8:00-9:00", "10:00-10:00", "10:00"):
        with pytest.raises(WindowError, match=r"HH:MM-HH:MM|empty"):
            parse_windows(bad)
