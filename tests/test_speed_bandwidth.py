"""Issue 33 items 1-2: a measured host bandwidth is taken as measured, host RAM and GPU
memory each have their own efficiency, a service with every layer on GPUs is estimated
without a host bandwidth, and the depth is one the user asks (default 0, llama-bench's
tg128), said in the plan."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_plan_speed import DENSE, _speed, _write

from layoutgen.errors import InvalidInput
from layoutgen.render.validate import validate_file
from layoutgen.solve import plan_speed
from layoutgen.solve.plan import SpeedPlan, to_json, to_text
from layoutgen.speed import model
from layoutgen.speed.model import HOST, Chunk, Machine, Memory, Workload

from conftest import ROOT, run_cli

NO_CPU = DENSE.replace(", model: EPYC 9175F", "")
# the tiny dense model's weights a token reads (test_plan_speed works them out by hand)
WEIGHTS = 2 * (4 * 1024 * 1024 * 2 + 3 * 1024 * 4096 * 2 + 2 * 1024 * 4) + 1024 * 4
WEIGHTS += 1024 * 1000 * 2
KV = 2 * 2 * 8 * 128 * 2  # f16 K and V, 8 heads x 128, 2 layers, per context token
#: per token: 0.5 ms, and per layer computed (2 + the output layer) 6.3 us a host
#: thread (8 threads: wake-ups and barriers) or 87 us a GPU (launches)
HOST_FIXED = 0.5e-3 + 3 * 8 * 6.3e-6
GPU_FIXED = 0.5e-3 + 3 * 87e-6


def test_a_measured_bandwidth_is_taken_as_measured(tmp_path: Path) -> None:
    text = NO_CPU.replace("  ram: 64GiB\n", "  ram: 64GiB\n  memory_bandwidth_measured: 60GB/s\n")
    s = _speed(_write(tmp_path, text), "lane")
    assert s.host_figure == "measured" and s.efficiency_basis == "prior"
    assert s.efficiency == plan_speed.PRIOR_MEASURED_EFFICIENCY == 1.0
    assert 1 / s.decode_tps == pytest.approx(WEIGHTS / (1.0 * 60e9) + HOST_FIXED)
    # the same figure written as a peak gets the peak's prior: a measured figure is not
    # scaled as if it were a datasheet peak
    peak = _speed(
        _write(tmp_path, text.replace("memory_bandwidth_measured", "memory_bandwidth"), "p.yaml"),
        "lane",
    )
    assert peak.host_figure == "peak" and peak.efficiency == plan_speed.PRIOR_EFFICIENCY
    assert s.decode_tps / peak.decode_tps == pytest.approx(
        (WEIGHTS / (0.61 * 60e9) + HOST_FIXED) / (WEIGHTS / (1.0 * 60e9) + HOST_FIXED)
    )
    plan = validate_file(_write(tmp_path, text, "m.yaml")).plan
    assert "(host RAM η 1 prior x measured)" in to_text(plan)
    doc = json.loads(to_json(plan))["services"]["lane"]["speed"]
    assert doc["host_figure"] == "measured" and doc["efficiency"] == 1.0


def test_a_written_efficiency_scales_the_measured_figure(tmp_path: Path) -> None:
    text = NO_CPU.replace(
        "  ram: 64GiB\n", "  ram: 64GiB\n  memory_bandwidth_measured: 60GB/s\n  efficiency: 0.9\n"
    )
    s = _speed(_write(tmp_path, text), "lane")
    assert (s.efficiency, s.efficiency_basis, s.host_figure) == (0.9, "given", "measured")
    assert 1 / s.decode_tps == pytest.approx(WEIGHTS / (0.9 * 60e9) + HOST_FIXED)


def test_peak_and_measured_together_are_refused_where_written(tmp_path: Path) -> None:
    text = NO_CPU.replace(
        "  ram: 64GiB\n",
        "  ram: 64GiB\n  memory_bandwidth: 100GB/s\n  memory_bandwidth_measured: 60GB/s\n",
    )
    path = _write(tmp_path, text)
    with pytest.raises(InvalidInput) as exc:
        validate_file(path)
    (d,) = exc.value.diagnostics
    assert d.line == 2 and "give one of memory_bandwidth" in d.message  # at host
    assert "memory_bandwidth_measured (a figure you measured" in d.message
    result = run_cli(["validate", str(path)])
    assert result.code == 1 and "Traceback" not in result.stdout + result.stderr


GPU_ONLY = NO_CPU.replace(
    '  podman: "5.4"\n',
    '  podman: "5.4"\n  gpus:\n'
    "    - {id: gpu0, index: 0, vram: 24GiB, reserve: 512MiB, bandwidth: 1000GB/s}\n",
).replace("    threads: 8\n", "    threads: 8\n    gpus: [gpu0]\n")


def test_every_layer_on_a_gpu_needs_no_host_bandwidth(tmp_path: Path) -> None:
    s = _speed(_write(tmp_path, GPU_ONLY), "lane")
    assert s.host_figure == "none" and s.host_bytes_per_token == 0 and s.host_demand == 0
    assert (s.gpu_efficiency, s.gpu_efficiency_basis) == (plan_speed.PRIOR_GPU_EFFICIENCY, "prior")
    # weights and no KV (depth 0) over the GPU's peak x the GPU prior: no host term
    assert 1 / s.decode_tps == pytest.approx(WEIGHTS / (0.82 * 1000e9) + GPU_FIXED)
    text = to_text(validate_file(_write(tmp_path, GPU_ONLY, "g.yaml")).plan)
    assert "(GPU η 0.82 prior); reads nothing from host RAM" in text


def test_the_gpus_efficiency_is_their_own(tmp_path: Path) -> None:
    text = GPU_ONLY.replace("  ram: 64GiB\n", "  ram: 64GiB\n  gpu_efficiency: 0.8\n")
    s = _speed(_write(tmp_path, text), "lane")
    assert (s.gpu_efficiency, s.gpu_efficiency_basis) == (0.8, "given")
    assert 1 / s.decode_tps == pytest.approx(WEIGHTS / (0.8 * 1000e9) + GPU_FIXED)
    # host RAM's efficiency does not touch a GPU-only token
    both = text.replace("  ram: 64GiB\n", "  ram: 64GiB\n  efficiency: 0.1\n")
    assert _speed(_write(tmp_path, both, "b.yaml"), "lane").decode_tps == s.decode_tps


def test_a_token_reading_host_ram_without_its_bandwidth_is_not_estimated(tmp_path: Path) -> None:
    # one layer left on the CPU (-ngl 2 of 2 layers + output): a token reads host RAM,
    # whose bandwidth is unknown
    text = GPU_ONLY.replace("    gpus: [gpu0]\n", "    gpus: [gpu0]\n    gpu_layers: 2\n")
    v = validate_file(_write(tmp_path, text))
    assert v.plan.service("lane").speed is None
    assert "decode speed" not in to_text(v.plan)


def test_host_and_gpu_efficiencies_apply_to_their_own_bytes() -> None:
    m = Machine(
        "m", (Memory(HOST, 100e9, 1e18), Memory("CUDA0", 1000e9, 1e18)), 0.5, gpu_efficiency=0.8
    )
    w = Workload((Chunk(HOST, 0, 1e9, 1.0), Chunk("CUDA0", 1, 4e9, 1.0)), 1, 1)
    k = model.Constants(gpu_layer=0.0, cpu_layer_thread=0.0)
    b = model.decode(m, w, 0, k)
    assert b.device_seconds == pytest.approx({HOST: 1e9 / 50e9, "CUDA0": 4e9 / 800e9})
    # without a GPU efficiency of its own the machine has one constant (the old fits)
    one = model.decode(Machine("m", m.memories, 0.5), w, 0, k)
    assert one.device_seconds["CUDA0"] == pytest.approx(4e9 / 500e9)


def test_fit_gpu_target_fits_the_gpus_only() -> None:
    m = Machine("m", (Memory(HOST, 100e9, 1e18), Memory("CUDA0", 1000e9, 1e18)), 0.5)
    w = Workload((Chunk("CUDA0", 0, 4e9, 1.0),), 1, 1)
    truth = model.decode(model.with_eta(m, 0.7, "gpu"), w, 0).tps
    found = model.fit([model.Measurement("x", m, w, 0, truth)], target="gpu")
    assert found.efficiency == pytest.approx(0.7, rel=1e-6)


# --- depth -------------------------------------------------------------------------------


def test_plan_depth_gives_the_speed_there_and_at_depth_0(tmp_path: Path) -> None:
    path = _write(tmp_path, DENSE)
    base = run_cli(["plan", str(path)])
    assert base.code == 0 and "tok/s at depth 0, estimated" in base.stdout
    assert "depth 0 is llama-bench tg128's, plan --depth N for another" in base.stdout
    deep = run_cli(["plan", "--depth", "2048", str(path)])
    assert deep.code == 0, deep.stderr
    s0 = _speed(path, "lane")
    assert f"tok/s at depth 2,048 ({s0.decode_tps:.1f} at depth 0), estimated" in deep.stdout
    doc = json.loads(run_cli(["plan", "--json", "--depth", "2048", str(path)]).stdout)
    speed = doc["services"]["lane"]["speed"]
    assert speed["depth"] == 2048 and speed["decode_tps_depth0"] == round(s0.decode_tps, 2)
    assert speed["decode_tps"] < speed["decode_tps_depth0"]  # 2,048 tokens of KV more
    assert speed["host_bytes_per_token"] == pytest.approx(WEIGHTS + KV * 2048, abs=1)
    bad = run_cli(["plan", "--depth", "-1", str(path)])
    assert bad.code == 2


# --- what the model does not see, said --------------------------------------------------


def test_what_the_model_cannot_see_is_stated(tmp_path: Path) -> None:
    """-rtr over a type no published figure prices (dense-tiny's f16, on ik_llama.cpp)
    is said under the speed, in the text and the JSON alike."""
    ik = DENSE.replace("kind: llama.cpp", "kind: ik_llama.cpp").replace(
        "image: ghcr.io/ggml-org/llama.cpp:server",
        'image: localhost/ik_llama.cpp:4840\n    version: "4840"',
    )
    text = ik.replace("    threads: 8\n", "    threads: 8\n    args: [-rtr]\n")
    s = _speed(_write(tmp_path, text), "lane")
    (said,) = s.caveats
    assert said.startswith("-rtr repacks host weights at load: no published figure prices")
    out = to_text(validate_file(_write(tmp_path, text, "c.yaml")).plan)
    assert f"    not modelled: {said}" in out
    doc = json.loads(to_json(validate_file(_write(tmp_path, text, "j.yaml")).plan))
    assert doc["services"]["lane"]["speed"]["caveats"] == list(s.caveats)
    # a plain service says nothing of the kind
    assert _speed(_write(tmp_path, ik, "plain.yaml"), "lane").caveats == ()


def test_threads_past_the_cores_and_numa_on_one_node_are_priced_not_said(
    tmp_path: Path,
) -> None:
    """32 threads on 16 cores: the cores compute (the FLOPs floor of 16), but each of
    the 32 arrives at every barrier: 3 layers x 16 threads x 6.3 us more than 16
    threads; --numa distribute on a host of one node changes nothing. Neither is a
    caveat now."""
    sixteen = DENSE.replace("    threads: 8\n", "    threads: 16\n")
    more = DENSE.replace("    threads: 8\n", "    threads: 32\n    args: [--numa, distribute]\n")
    a, b = (
        _speed(_write(tmp_path, sixteen), "lane"),
        _speed(_write(tmp_path, more, "m.yaml"), "lane"),
    )
    assert a.caveats == b.caveats == () and b.numa is None
    assert 1 / b.decode_tps - 1 / a.decode_tps == pytest.approx(3 * 16 * 6.3e-6, rel=1e-6)


def test_calibrate_on_a_gpu_only_service_fits_the_gpus_efficiency(tmp_path: Path) -> None:
    spec = _write(tmp_path, GPU_ONLY)
    # the run: 100 tokens after an empty prompt (mean depth 50) at a GPU efficiency of 0.8
    truth = 1 / ((WEIGHTS + KV * 50) / (0.8 * 1000e9) + GPU_FIXED)
    ms = 100 / truth * 1000
    log = tmp_path / "timing.log"
    log.write_text(
        "prompt eval time =      10.00 ms /     0 tokens\n"
        f"       eval time = {ms:10.4f} ms /   100 tokens\n"
    )
    result = run_cli(["calibrate", str(log), str(spec), "--service", "lane"])
    assert result.code == 0, result.stderr
    assert "host.gpu_efficiency: 0.8" in result.stderr
    text = spec.read_text()
    assert "  gpu_efficiency: 0.8  # fitted by layoutgen calibrate from timing.log" in text
    assert "\n  efficiency:" not in text  # host RAM's is not what that run measured
    s = _speed(spec, "lane")
    assert (s.gpu_efficiency, s.gpu_efficiency_basis) == (0.8, "given")
    assert s.decode_tps == pytest.approx(1 / (WEIGHTS / (0.8 * 1000e9) + GPU_FIXED))  # depth 0


# --- seed 001's layouts carry its CPU -----------------------------------------------------

SEED001 = {  # layout -> the seed's measured decode tok/s (tests/speed_data/seed001-*.yaml)
    "glm51-1-ot-exps-cpu-2gpu.yaml": 18.84,
    "glm51-2-cpu-moe-2gpu.yaml": 18.84,
    "glm51-3-cpu-moe-1gpu.yaml": 18.86,
    "glm51-4-n-cpu-moe-64-1gpu.yaml": 19.94,
    "glm51-5-head12-tail10-2gpu.yaml": 21.75,
}


def test_seed001_layouts_print_a_speed_from_the_seeds_hardware() -> None:
    """As shipped they carry the seed's CPU (EPYC 9175F) and GPUs, no efficiency: each
    prints a speed from the priors, within 10 % of the seed's (issue 33's acceptance;
    measured 2026-11-28 with the priors fitted together, lomo.fit: -2.5 to +1.4 %;
    the seed's machine is one of the fitting set's 13), and the ratios between them are
    within 5 % of the seed's."""
    found = {}
    for name, measured in SEED001.items():
        v = validate_file(ROOT / "layouts" / name)
        s = v.plan.service("grandpa").speed
        assert isinstance(s, SpeedPlan), name
        assert v.spec.host.cpu.model == "EPYC 9175F" and v.spec.host.efficiency is None
        assert (s.host_figure, s.efficiency_basis, s.depth) == ("peak", "prior", 0)
        assert abs(s.decode_tps / measured - 1) < 0.10, (name, s.decode_tps)
        found[name] = s.decode_tps
    last = "glm51-5-head12-tail10-2gpu.yaml"
    for name, measured in SEED001.items():
        ratio = found[name] / found[last]
        assert abs(ratio / (measured / SEED001[last]) - 1) < 0.05, name
