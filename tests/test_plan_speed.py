"""The plan's decode speed (layoutgen.speed.plan_speed): bytes from the plan, the figure
from the speed model, and host RAM shared by lanes that decode together."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from layoutgen.solve.plan import SpeedPlan, to_json, to_text
from layoutgen.spec.validate import validate_file
from layoutgen.speed import cases, hardware, model, plan_speed

from conftest import ROOT

TINY = ROOT / "tests" / "cases" / "speed" / "dense-tiny.yaml"
LAYOUTS = ROOT / "layouts"

DENSE = f"""\
host:
  name: tiny
  cpu: {{cores: 16, threads: 32, model: EPYC 9175F}}
  ram: 64GiB
  ram_reserve: 8GiB
  podman: "5.4"
models:
  tiny:
    path: /mnt/data/models/tiny/tiny.gguf
    profile: {TINY}
runtimes:
  llama:
    kind: llama.cpp
    image: ghcr.io/ggml-org/llama.cpp:server
services:
  lane:
    model: tiny
    runtime: llama
    role: batch
    port: 8000
    ctx: 4096
    parallel: 1
    threads: 8
"""


def _write(tmp: Path, text: str, name: str = "spec.yaml") -> Path:
    path = tmp / name
    path.write_text(text)
    return path


def _speed(path: Path, service: str) -> SpeedPlan:
    found = validate_file(path).plan.service(service).speed
    assert isinstance(found, SpeedPlan), found
    return found


def test_dense_cpu_only_bytes_and_speed_by_hand(tmp_path: Path) -> None:
    v = validate_file(_write(tmp_path, DENSE))
    sp = v.plan.service("lane")
    s = sp.speed
    assert isinstance(s, SpeedPlan)
    # every weight but token_embd, read once a token: 2 layers x (4 attention matrices
    # 1024x1024 f16 + 3 FFN matrices 1024x4096 f16 + 2 f32 norms) + output_norm + output
    weights = 2 * (4 * 1024 * 1024 * 2 + 3 * 1024 * 4096 * 2 + 2 * 1024 * 4) + 1024 * 4
    weights += 1024 * 1000 * 2
    # f16 K and V, 8 heads x 128, 2 layers, per context token; depth 4096 / 1 / 2
    kv = 2 * 2 * 8 * 128 * 2
    assert s.depth == 2048
    assert s.host_bytes_per_token == pytest.approx(weights + kv * 2048)
    assert s.efficiency == plan_speed.PRIOR_EFFICIENCY and s.efficiency_basis == "prior"
    bw = 12 * 6400e6 * 8  # EPYC 9175F: 12 channels DDR5-6400
    flops = 8 * 4.2e9 * 64  # 8 threads' cores x base clock x FP32 FLOPs a cycle
    params = weights / 2  # f16 (the norms' f32 are negligible here but counted below)
    seconds = max((weights + kv * 2048) / (0.37 * bw), 2 * params / flops)
    assert 1 / s.decode_tps == pytest.approx(seconds + 0.5e-3, rel=1e-3)
    # and exactly the speed model's figure on the workload plan_speed builds
    rt = v.spec.runtimes["llama"].rules()
    w = plan_speed.workload(sp, v.profiles["tiny"], rt, 4096)
    m = plan_speed.machine(v.spec, v.services[0])
    assert isinstance(m, model.Machine)
    assert s.decode_tps == model.decode(m, w, 2048).tps


def test_plan_prints_speed_and_json_carries_it(tmp_path: Path) -> None:
    v = validate_file(_write(tmp_path, DENSE))
    text = to_text(v.plan)
    assert "decode speed, one request at depth = ctx per slot / 2" in text
    assert "tok/s at depth 2,048, estimated (η 0.37 prior); asks host RAM for" in text
    doc = json.loads(to_json(v.plan))["services"]["lane"]["speed"]
    assert set(doc) == {
        "decode_tps",
        "depth",
        "host_bytes_per_token",
        "host_demand",
        "efficiency",
        "efficiency_basis",
    }
    assert doc["host_demand"] == pytest.approx(
        doc["host_bytes_per_token"] * doc["decode_tps"], 1e-3
    )


def test_without_a_host_bandwidth_nothing_is_said(tmp_path: Path) -> None:
    v = validate_file(_write(tmp_path, DENSE.replace(", model: EPYC 9175F", "")))
    assert v.plan.service("lane").speed is None
    assert "decode speed" not in to_text(v.plan)
    assert "speed" not in json.loads(to_json(v.plan))["services"]["lane"]


def test_memory_bandwidth_and_efficiency_are_given(tmp_path: Path) -> None:
    text = DENSE.replace(", model: EPYC 9175F", "").replace(
        "  ram: 64GiB\n", "  ram: 64GiB\n  memory_bandwidth: 100GB/s\n  efficiency: 0.5\n"
    )
    s = _speed(_write(tmp_path, text), "lane")
    assert s.efficiency == 0.5 and s.efficiency_basis == "given"
    # no CPU model: no compute floor, bytes alone
    assert 1 / s.decode_tps == pytest.approx(s.host_bytes_per_token / 50e9 + 0.5e-3)


def test_prior_efficiency_is_the_median_of_the_fitted_machines() -> None:
    fitted = [
        model.fit(r.measurements).efficiency for r in cases.load_dir(ROOT / "tests" / "speed_data")
    ]
    assert round(statistics.median(fitted), 2) == plan_speed.PRIOR_EFFICIENCY


@pytest.mark.parametrize(
    ("name", "entry"),
    [
        ("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", "RTX PRO 6000 Blackwell"),
        ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "RTX PRO 6000 Blackwell"),
        ("NVIDIA GeForce RTX 4090", "RTX 4090"),
        ("nvidia h100 pcie", "H100 PCIe"),
        ("NVIDIA GeForce RTX 4080 SUPER", None),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", None),
        ("NVIDIA H100 80GB HBM3", None),
    ],
)
def test_gpu_names_match_the_table_word_for_word(name: str, entry: str | None) -> None:
    found = hardware.gpu_by_name(name)
    assert (found.name if found is not None else None) == entry


def _seed001(tmp: Path, eta: str = "0.486") -> Path:
    text = (LAYOUTS / "glm51-5-head12-tail10-2gpu.yaml").read_text()
    text = text.replace(
        "    threads: 32                      # SMT on\n",
        "    threads: 32\n    model: EPYC 9175F\n",
    )
    text = text.replace("  ram: 768GiB\n", f"  ram: 768GiB\n  efficiency: {eta}\n")
    text = text.replace("profile: models/", f"profile: {LAYOUTS}/models/")
    return _write(tmp, text)


def test_seed001_head12_tail10_within_5_percent_of_measured(tmp_path: Path) -> None:
    """Seed 001 configuration 5 measured 21.75 t/s at depth 62; the plan (depth 16,384)
    reads 16k tokens of KV more, a few percent slower."""
    path = _seed001(tmp_path)
    v = validate_file(path)
    sp = v.plan.service("grandpa")
    s = sp.speed
    assert isinstance(s, SpeedPlan) and s.depth == 16384
    assert abs(s.decode_tps / 21.75 - 1) < 0.05, s.decode_tps
    rt = v.spec.runtimes["ik_llama"].rules()
    m = plan_speed.machine(v.spec, v.services[0])
    assert isinstance(m, model.Machine)
    w = plan_speed.workload(sp, v.profiles["glm-5.1-iq3_ks"], rt, 32768)
    at_62 = model.decode(m, w, 62).tps
    assert abs(at_62 / 21.75 - 1) < 0.05, at_62


LANES = (LAYOUTS / "workstation-gpu-cpu-lanes.yaml").read_text()


def _lanes(tmp: Path, batch: str | None, interactive: str | None) -> Path:
    text = LANES.replace(
        "    threads: 32                      # SMT on\n",
        "    threads: 32\n    model: EPYC 9175F\n",
    )
    text = text.replace("profile: models/", f"profile: {LAYOUTS}/models/")
    # seed 000's interactive lane with experts partly in host RAM
    text = text.replace(
        "    threads: 4                       # assumed\n",
        "    threads: 4\n    experts: {mode: n-cpu-moe, n: 24}\n",
    )
    if interactive is not None:
        text = text.replace("    port: 8000 ", f'    schedule: "{interactive}"\n    port: 8000 ')
    if batch is not None:
        text = text.replace("    port: 8001 ", f'    schedule: "{batch}"\n    port: 8001 ')
    return _write(tmp, text)


def _lane_warnings(path: Path) -> list[str]:
    return [d.message for d in validate_file(path).warnings if "host RAM for" in d.message]


def test_seed000_lanes_warn_at_full_speed(tmp_path: Path) -> None:
    path = _lanes(tmp_path, None, None)
    v = validate_file(path)
    (found,) = [d for d in v.warnings if "host RAM for" in d.message]
    # at the later service in the spec: its mapping, the line after its name
    assert found.line == path.read_text().splitlines().index("  batch-lane:") + 2
    assert found.message.startswith(
        "services.batch-lane: interactive and batch-lane decode at the same time and ask "
        "host RAM for "
    )
    assert "give the batch lane a schedule outside the interactive hours" in found.message


def test_seed000_lanes_apart_do_not_warn(tmp_path: Path) -> None:
    assert _lane_warnings(_lanes(tmp_path, "22:00-06:00", "08:00-20:00")) == []


def test_a_batch_schedule_overlapping_the_interactive_hours_still_warns(tmp_path: Path) -> None:
    assert len(_lane_warnings(_lanes(tmp_path, "18:00-23:00", "08:00-20:00"))) == 1
    # an unscheduled service runs all day
    assert len(_lane_warnings(_lanes(tmp_path, "22:00-06:00", None))) == 1


def test_services_that_conflict_are_never_a_pair(tmp_path: Path) -> None:
    path = _lanes(tmp_path, None, None)
    text = path.read_text().replace(
        "    threads: 12 ", "    conflicts: [interactive]\n    threads: 12 ", 1
    )
    assert "conflicts: [interactive]" in text
    assert _lane_warnings(_write(tmp_path, text, "c.yaml")) == []
