"""Speed model (layoutgen.speed): acceptance figures, then each term on its own."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from layoutgen.speed import cases, hardware, heat, model, report
from layoutgen.speed.model import HOST, Chunk, Machine, Memory, Workload

DATA = Path(__file__).parent / "speed_data"
SEED = DATA / "seed001-glm51-epyc9175f.yaml"


def test_public_results_within_15_percent_one_constant_per_machine() -> None:
    """One efficiency per machine explains all its results (CPU only, hybrid, both
    runtimes, thread counts): the CPU kernels' compute (layoutgen.speed.cpu_compute)
    prices low thread counts where a figure has the type, the per-thread pull is off
    (the model's default: ikawrakow's 1-thread runs read 22 GB/s a thread, the 13900K
    sweep's 12 GB/s would price them 2x slow); records marked cannot_see left out, and
    hosts of several sockets, whose results differ by where their pages and threads sit:
    tests/test_speed_numa.py checks them pair by pair."""
    recs = [
        r
        for r in cases.load_dir(DATA)
        if not r.id.startswith("seed") and r.cannot_see is None and r.sockets == 1
    ]
    results = [m for r in recs for m in r.measurements]
    assert len(results) >= 10
    by_machine: dict[str, list[model.Measurement]] = {}
    for m in results:  # a machine may have a record per model (PR 4766: F16 and Q8_0)
        by_machine.setdefault(m.machine.name, []).append(m)
    assert len(by_machine) >= 9
    table = report.table(DATA)
    worst = {}
    for name, ms in by_machine.items():
        f = model.fit(ms)  # one per machine
        assert f.slope is None
        worst[name] = f.worst_error
    # every machine within 30 %, seven in ten within 15 % (measured 2026-11-28: 14 of
    # 19): what one constant cannot reach is a build's kernels (jg-3090: llama 7B Q4_0
    # in 2024-01 at 52 % of peak, Llama-3 8B Q4_0 in 2025-09 at 79 %), a thread count's
    # on a CPU no figure prices (slaren-13900k: AVX2 Q4_0) and the knee of a thread
    # sweep (ik-5975wx: TQ2_0 at 2-4 threads)
    assert max(worst.values()) < 0.30, (worst, table)
    assert sum(w < 0.15 for w in worst.values()) >= 0.70 * len(worst), (worst, table)


def test_seed001_calibrated_on_configuration_1_predicts_the_others_within_5_percent() -> None:
    """Issue 33 item 4: one log (configuration 1) fixes the machine's host efficiency;
    with the GLM heat prior the other four configurations follow within 5 % (measured
    2026-11-28: +1.9 % and +2.2 % at configurations 4 and 5).  The prior's slope was
    fitted on configurations 1 and 5 before the per-layer terms; refitted with them the
    two results put the ramp at its bound, so the prior stays as it was."""
    ms = cases.load(SEED).measurements
    assert [m.measured_tps for m in ms] == [18.84, 18.84, 18.86, 19.94, 21.75]
    ms = [
        replace(x, workload=x.workload.with_heat(heat.ramp(x.workload.moe_layers, 0.446)))
        for x in ms
    ]
    assert heat.GLM_DSA_SLOPE == 0.446
    f = model.fit([ms[0]])  # one constant
    for x in ms:
        p = model.decode(replace(x.machine, efficiency=f.efficiency), x.workload, x.depth).tps
        assert abs(p / x.measured_tps - 1) < 0.05, report.table(DATA)


def test_seed001_one_constant_uniform_heat_also_within_5_percent() -> None:
    """Without any heat profile, the efficiency from configuration 1 alone suffices."""
    ms = cases.load(SEED).measurements
    f = model.fit([ms[0]])
    errs = []
    for x in ms:
        p = model.decode(replace(x.machine, efficiency=f.efficiency), x.workload, x.depth).tps
        errs.append(p / x.measured_tps - 1)
    assert max(abs(e) for e in errs) < 0.05
    assert errs[3] > 0.02  # config 4 (tail 14 layers) is where uniform heat is weakest


# --- terms, with figures derived by hand -------------------------------------------------


def machine(host_bw: float = 100e9, gpu_bw: float = 1000e9, eta: float = 1.0) -> Machine:
    return Machine("m", (Memory(HOST, host_bw, 1e15), Memory("CUDA0", gpu_bw, 1e15, 32e9)), eta)


def moe_workload(expert_dev: str = HOST) -> Workload:
    chunks = [Chunk("CUDA0", 0, 1e9, 0.5e9)]  # dense: 1 GB read fully
    chunks += [Chunk(expert_dev, 1, 8e9, 4e9, routed=True, name="ffn_up_exps")]
    return Workload(tuple(chunks), n_expert=64, n_expert_used=8, kv_per_token=(("CUDA0", 1e5),))


K0 = model.Constants(hop_latency=0.0, token_overhead=0.0, gpu_layer=0.0, cpu_layer_thread=0.0)


def test_decode_reads_dense_fully_and_k_over_n_of_routed_experts() -> None:
    b = model.decode(machine(), moe_workload(), depth=0, k=K0)
    assert b.device_bytes == {"CUDA0": 1e9, HOST: 1e9}  # 8 GB x 8/64
    assert b.device_seconds["CUDA0"] == pytest.approx(1e-3)  # 1 GB / 1000 GB/s
    assert b.device_seconds[HOST] == pytest.approx(10e-3)  # 1 GB / 100 GB/s
    assert b.tps == pytest.approx(1 / 11e-3)


def test_kv_read_grows_with_depth_on_its_device() -> None:
    b = model.decode(machine(), moe_workload(), depth=10_000, k=K0)
    assert b.device_bytes["CUDA0"] == pytest.approx(1e9 + 1e5 * 10_000)  # +1 GB
    assert b.device_seconds["CUDA0"] == pytest.approx(2e-3)


def test_efficiency_scales_every_memory() -> None:
    b = model.decode(machine(eta=0.5), moe_workload(), depth=0, k=K0)
    assert b.seconds == pytest.approx(22e-3)


def test_each_layer_costs_a_gpu_its_launches_and_host_threads_their_barriers() -> None:
    """Per token: 33 us a layer on a GPU, 7.3 us a layer and thread on the host (given
    here; model.Constants holds the fitted ones); moving a layer's experts moves its
    cost too."""
    m = machine()
    host = replace(m.memory(HOST), threads=16)
    m = replace(m, memories=(host, m.memory("CUDA0")))
    k = replace(K0, gpu_layer=33e-6, cpu_layer_thread=7.3e-6)
    w = moe_workload()  # dense layer 0 on CUDA0, layer 1's experts on the host
    b = model.decode(m, w, 0, k)
    assert b.device_seconds["CUDA0"] == pytest.approx(1e-3 + 33e-6)
    assert b.device_seconds[HOST] == pytest.approx(10e-3 + 16 * 7.3e-6)
    experts = [c for c in w.chunks if c.routed]
    moved = model.decode(m, w, 0, k, experts, "CUDA0")
    assert moved.device_seconds["CUDA0"] == pytest.approx(2e-3 + 2 * 33e-6)
    assert moved.device_seconds[HOST] == pytest.approx(0.0)
    assert moved.tps == pytest.approx(model.decode(m, moe_workload("CUDA0"), 0, k).tps)


def test_heat_weights_a_layers_routed_bytes() -> None:
    w = moe_workload().with_heat(heat.HeatProfile({1: 1.5}))
    assert model.decode(machine(), w, 0, K0).device_bytes[HOST] == pytest.approx(1.5e9)


def test_hops_and_overhead() -> None:
    w = moe_workload()  # CUDA0 (dense 0) -> host (experts 1): one hand-off
    assert model.hops(w) == 1
    k = replace(K0, hop_latency=10e-6, token_overhead=0.5e-3)
    b = model.decode(machine(), w, 0, k)
    assert b.seconds == pytest.approx(11e-3 + 10e-6 + 0.5e-3)
    assert model.hops(moe_workload("CUDA0")) == 0


def test_compute_floor_dominates_when_flops_are_scarce() -> None:
    m = Machine("slow", (Memory(HOST, 100e9, 1e12), Memory("CUDA0", 1e12, 1e15)))
    # host: 4e9 params x 8/64 = 0.5e9 params -> 1e9 FLOP / 1e12 = 1 ms < 10 ms memory
    assert model.decode(m, moe_workload(), 0, K0).device_seconds[HOST] == pytest.approx(10e-3)
    m2 = replace(m, memories=(Memory(HOST, 100e9, 1e10), m.memories[1]))
    assert model.decode(m2, moe_workload(), 0, K0).device_seconds[HOST] == pytest.approx(0.1)


def test_distinct_expert_share() -> None:
    assert model.distinct_share(256, 8, 1) == pytest.approx(8 / 256)
    assert model.distinct_share(256, 8, 30) == pytest.approx(1 - (248 / 256) ** 30)
    assert model.distinct_share(256, 8, 2000) == pytest.approx(1.0)


def test_prefill_streams_host_experts_over_pcie_from_32_tokens() -> None:
    m, w = machine(), moe_workload()
    k = replace(K0, compute_efficiency=1.0, gpu_compute_efficiency=1.0)
    # 512 tokens: host experts (8 GB) cross PCIe at 32 GB/s = 250 ms, their FLOPs run on
    # the GPU (0.5e9 params x 2 x 512 / 1e15 = 0.512 ms), the dense GB reads in 1 ms
    t512 = 512 / model.prefill_tps(m, w, 512, k)
    assert t512 == pytest.approx(0.25 + 0.512e-3 + 1e-3, rel=1e-6)
    # 16 tokens: the CPU reads the distinct experts, 8 GB x share(16) / 100 GB/s
    t16 = 16 / model.prefill_tps(m, w, 16, k)
    share = model.distinct_share(64, 8, 16)
    assert t16 == pytest.approx(8e9 * share / 100e9 + 1e-3, rel=1e-3)


def test_fit_recovers_a_known_efficiency() -> None:
    w = moe_workload()
    truth = model.decode(machine(eta=0.4), w, 0).tps
    meas = model.Measurement("x", machine(), w, 0, truth)
    assert model.fit([meas]).efficiency == pytest.approx(0.4, rel=1e-4)


def test_fit_refuses_two_machines() -> None:
    w = moe_workload()
    a = model.Measurement("a", machine(), w, 0, 50.0)
    b = model.Measurement("b", replace(machine(), name="other"), w, 0, 50.0)
    with pytest.raises(ValueError, match="one machine"):
        model.fit([a, b])


def test_marginal_gb_moves_the_hottest_tensor_that_fits() -> None:
    m = machine()
    chunks = [Chunk("CUDA0", 0, 1e9, 1e9)]
    chunks += [Chunk(HOST, i, 0.6e9, 0.3e9, routed=True, name="ffn_up_exps") for i in (1, 2)]
    w = Workload(tuple(chunks), 8, 8, (), heat.HeatProfile({1: 0.5, 2: 1.5}))
    gain, moved = model.marginal_gb(m, w, 0, "CUDA0", budget=1e9, k=K0)
    assert moved == ("blk.2.ffn_up_exps",)  # hottest; the second would exceed 1 GB
    # host bytes 0.3 + 0.9 GB -> 0.3 GB; GPU 1 GB -> 1.9 GB
    before, after = 1 / (1e-3 + 12e-3), 1 / (1.9e-3 + 3e-3)
    assert gain == pytest.approx(after - before)


def test_marginal_gb_is_zero_when_no_glm_tensor_fits_in_1_gb() -> None:
    x = cases.load(SEED).measurements[0]
    assert model.marginal_gb(x.machine, x.workload, 61, "CUDA0") == (0.0, ())
    gain, moved = model.marginal_gb(x.machine, x.workload, 61, "CUDA0", budget=2 * 2**30)
    assert moved and gain > 0


# --- heat ---------------------------------------------------------------------------------


def test_ramp_has_mean_one_and_head_hot_for_positive_slope() -> None:
    p = heat.ramp(list(range(3, 78)), 0.4)
    assert sum(p.values.values()) / 75 == pytest.approx(1.0)
    assert p.of(3) == pytest.approx(1.4) and p.of(77) == pytest.approx(0.6)
    assert heat.prior("glm-dsa", [3, 4]).of(3) > 1 and heat.prior("qwen3moe", [3]).of(3) == 1


def test_heat_yaml(tmp_path: Path) -> None:
    f = tmp_path / "h.yaml"
    f.write_text("schema: 1\nsource: hand\nlayers:\n  3: 300\n  4: 100\n")
    p = heat.load_yaml(f)
    assert (p.of(3), p.of(4), p.of(5)) == (1.5, 0.5, 1.0)
    f.write_text("schema: 1\nlayers:\n  3: 0\n")
    with pytest.raises(heat.HeatError, match="layer 3 has count 0; counts must be finite and"):
        heat.load_yaml(f)
    f.write_text("schema: 1\nlayers:\n  3: .inf\n  4: 1\n")
    with pytest.raises(heat.HeatError, match="layer 3 has count inf; counts must be finite"):
        heat.load_yaml(f)
    f.write_text("layers: {}\n")
    with pytest.raises(heat.HeatError, match="expected a mapping with 'schema: 1'"):
        heat.load_yaml(f)


def test_heat_from_mainline_imatrix_gguf(tmp_path: Path) -> None:
    gguf = pytest.importorskip("gguf")
    import numpy as np

    path = tmp_path / "imatrix.gguf"
    w = gguf.GGUFWriter(str(path), "imatrix")
    for layer, counts in ((1, [30.0, 10.0]), (2, [20.0, 20.0])):
        name = f"blk.{layer}.ffn_down_exps.weight"
        w.add_tensor(f"{name}.in_sum2", np.ones((2, 4), dtype=np.float32))
        w.add_tensor(f"{name}.counts", np.array([counts], dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    profile, per_expert = heat.load_imatrix_gguf(path)
    assert per_expert == {1: [30.0, 10.0], 2: [20.0, 20.0]}
    assert profile.of(1) == profile.of(2) == 1.0  # top-k: equal tokens per layer


# --- hardware -------------------------------------------------------------------------------


def test_hardware_figures() -> None:
    assert hardware.gpu("RTX PRO 6000 Blackwell").bandwidth == 1792e9
    assert hardware.gpu("H100 SXM").bandwidth == 3350e9
    assert hardware.gpu("RTX 4090").bandwidth == 1008e9
    assert hardware.gpu("RTX 3090").bandwidth == 936e9
    assert hardware.cpu("EPYC 9175F").memory_bandwidth == pytest.approx(614.4e9)
    assert hardware.cpu("EPYC 9654").memory_bandwidth == pytest.approx(460.8e9)
    assert hardware.ddr_bandwidth(2, 5600) == pytest.approx(89.6e9)
    with pytest.raises(KeyError, match="unknown GPU 'RTX 9999'; known: "):
        hardware.gpu("RTX 9999")
    assert all(g.source for g in hardware.GPUS.values())
    assert all(c.source for c in hardware.CPUS.values())


def test_records_carry_sources_and_verbatim_lines() -> None:
    from ruamel.yaml import YAML

    for f in DATA.glob("*.yaml"):
        d = YAML(typ="safe").load(f.read_text())
        assert d["source"] and d["hardware"] and d["model"]
        assert all(r["verbatim"] and str(r["measured"]) in r["verbatim"] for r in d["results"])


def test_glm_seed_bytes_match_the_log() -> None:
    rec = cases.load(SEED)
    s = rec.shape
    assert len(s.moe_layers) == 75 and s.moe_layers[0] == 3 and s.moe_layers[-1] == 77
    assert sum(b for _, b, _ in s.experts) == 4088 * 2**20
    host = sum(c.nbytes for c in rec.measurements[0].workload.chunks if c.device == HOST)
    assert host == 75 * 4088 * 2**20  # CUDA_Host 307110.47 MiB less token_embd 510.47
    assert math.isclose(s.dense_bytes * len(s.layers), 14498.95 * 2**20)
