"""The plan's decode speed (layoutgen.solve.plan_speed): bytes from the plan, the figure
from the speed model, and host RAM shared by lanes that decode together."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from layoutgen.render.validate import validate_file
from layoutgen.solve import plan_speed
from layoutgen.solve.plan import SpeedPlan, to_json, to_text
from layoutgen.speed import cases, hardware, heat, model, priors

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
    # f16 K and V, 8 heads x 128, 2 layers, per context token; depth 0 by default (what
    # llama-bench's tg128 reports), 2048 asked for (plan --depth 2048)
    kv = 2 * 2 * 8 * 128 * 2
    assert s.depth == 0 and s.decode_tps_depth0 is None
    assert s.host_bytes_per_token == pytest.approx(weights)
    assert s.efficiency == plan_speed.PRIOR_EFFICIENCY == 0.61 and s.efficiency_basis == "prior"
    assert s.host_figure == "peak" and s.gpu_efficiency is None  # no GPU
    bw = 12 * 6400e6 * 8  # EPYC 9175F: 12 channels DDR5-6400
    flops = 8 * 4.2e9 * 64  # 8 threads' cores x base clock x FP32 FLOPs a cycle
    params = weights / 2  # f16 (the norms' f32 are negligible here but counted below)
    # per token 0.5 ms, and 6.3 us per layer the host computes (2 + the output layer)
    # and thread (8): the threads' wake-ups and barriers
    fixed = 0.5e-3 + 3 * 8 * 6.3e-6
    seconds = max(weights / (0.61 * bw), 2 * params / flops)
    assert 1 / s.decode_tps == pytest.approx(seconds + fixed, rel=1e-3)
    deep = plan_speed.at_depth(s, 2048)
    assert deep.depth == 2048 and deep.decode_tps_depth0 == s.decode_tps
    assert deep.host_bytes_per_token == pytest.approx(weights + kv * 2048)
    seconds = max((weights + kv * 2048) / (0.61 * bw), 2 * params / flops)
    assert 1 / deep.decode_tps == pytest.approx(seconds + fixed, rel=1e-3)
    # and exactly the speed model's figure on the workload plan_speed builds
    rt = v.spec.runtimes["llama"].rules()
    w = plan_speed.workload(sp, v.profiles["tiny"], rt, 4096)
    m = plan_speed.machine(v.spec, v.services[0])
    assert isinstance(m, model.Machine)
    assert s.decode_tps == model.decode(m, w, 0).tps
    assert deep.decode_tps == model.decode(m, w, 2048).tps


def test_plan_prints_speed_and_json_carries_it(tmp_path: Path) -> None:
    v = validate_file(_write(tmp_path, DENSE))
    text = to_text(v.plan)
    assert "decode speed, one request (speed model, DESIGN); depth 0 is llama-bench" in text
    assert "tok/s at depth 0, estimated (host RAM η 0.61 prior x peak); asks host RAM for" in text
    doc = json.loads(to_json(v.plan))["services"]["lane"]["speed"]
    assert set(doc) == {
        "decode_tps",
        "depth",
        "host_bytes_per_token",
        "host_demand",
        "efficiency",
        "efficiency_basis",
        "host_figure",
        "prefill_tps",
        "ubatch",
    }
    assert doc["host_figure"] == "peak" and doc["depth"] == 0
    assert doc["prefill_tps"] > 0 and doc["ubatch"] == v.services[0].ubatch
    # the wording carries the public check's figure (tests/test_prefill_table.py)
    assert "    prefill " in text and "an order of magnitude: 49 % median error on 71" in text
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
    # no CPU model: no compute floor, bytes alone (and the 3 layers x 8 threads' barriers)
    fixed = 0.5e-3 + 3 * 8 * 6.3e-6
    assert 1 / s.decode_tps == pytest.approx(s.host_bytes_per_token / 50e9 + fixed)


def test_priors_are_the_fit_over_the_fitted_machines() -> None:
    """GPU memory's prior, host RAM's over a peak and over a measured figure, fitted
    together on tests/speed_data (layoutgen.speed.priors, lomo.fit), rounded."""
    gpu, peak, measured = priors.priors(ROOT / "tests" / "speed_data")
    assert round(gpu, 2) == plan_speed.PRIOR_GPU_EFFICIENCY
    assert round(peak, 2) == plan_speed.PRIOR_EFFICIENCY
    assert measured is not None and round(measured, 2) == plan_speed.PRIOR_MEASURED_EFFICIENCY
    g = priors.constants(ROOT / "tests" / "speed_data")
    assert model.DEFAULT.gpu_layer == pytest.approx(g.gpu_layer, rel=0.02)
    assert model.DEFAULT.cpu_layer_thread == pytest.approx(g.cpu_layer_thread, rel=0.02)
    # fitted on the hosts of several sockets alone, the others fixed (lomo.fit)
    assert model.DEFAULT.cross_socket == pytest.approx(g.cross_socket, rel=0.02)
    # a thread's pull: not fitted (off), as the default
    assert g.thread_bandwidth == 0 == model.DEFAULT.thread_bandwidth
    records = cases.load_dir(ROOT / "tests" / "speed_data")
    assert len(priors.gpu_fits(records)) >= 3  # machines with every layer on GPUs
    assert len(priors.host_fits(records, gpu, "peak")) >= 5
    assert len(priors.host_fits(records, gpu, "measured")) >= 2


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


def _seed001(tmp: Path, eta: str = "0.616") -> Path:
    text = (LAYOUTS / "glm51-5-head12-tail10-2gpu.yaml").read_text()
    assert "    model: EPYC 9175F " in text  # the seed's CPU, as the layout carries it
    text = text.replace("  ram: 768GiB\n", f"  ram: 768GiB\n  efficiency: {eta}\n")
    text = text.replace("profile: models/", f"profile: {LAYOUTS}/models/")
    return _write(tmp, text)


def test_seed001_head12_tail10_within_5_percent_of_measured(tmp_path: Path) -> None:
    """Seed 001 configuration 5 measured 21.75 t/s at depth 62; the plan's depth 0 is
    that run; at depth 16,384 it reads 16k tokens of KV more, a few percent slower."""
    path = _seed001(tmp_path)
    v = validate_file(path)
    sp = v.plan.service("grandpa")
    s = sp.speed
    assert isinstance(s, SpeedPlan) and s.depth == 0
    assert abs(s.decode_tps / 21.75 - 1) < 0.05, s.decode_tps
    deep = plan_speed.at_depth(s, 16384)
    assert 0.9 < deep.decode_tps / s.decode_tps < 1
    rt = v.spec.runtimes["ik_llama"].rules()
    m = plan_speed.machine(v.spec, v.services[0])
    assert isinstance(m, model.Machine)
    w = plan_speed.workload(sp, v.profiles["glm-5.1-iq3_ks"], rt, 32768)
    at_62 = model.decode(m, w, 62).tps
    assert abs(at_62 / 21.75 - 1) < 0.05, at_62


LANES = (LAYOUTS / "workstation-gpu-cpu-lanes.yaml").read_text()


def _lanes(tmp: Path, batch: str | None, interactive: str | None) -> Path:
    assert "    model: EPYC 9175F " in LANES  # seed 000's CPU, as the layout carries it
    text = LANES.replace("profile: models/", f"profile: {LAYOUTS}/models/")
    # seed 000's interactive lane with experts partly in host RAM: 36 of 48 layers' (at
    # 24 the two lanes ask 96 % of host RAM's effective bandwidth: the layers' thread
    # barriers leave it idle part of each token)
    text = text.replace(
        "    threads: 4                       # assumed\n",
        "    threads: 4\n    experts: {mode: n-cpu-moe, n: 36}\n",
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


# --- the next GiB of VRAM -----------------------------------------------------------------

MOE_TINY = ROOT / "tests" / "cases" / "speed" / "moe-tiny.yaml"
EXPERT = 629145600  # one moe-tiny expert tensor: f16 1024 x 4800 x 64, 600 MiB

MOE = f"""\
host:
  name: tiny
  cpu: {{cores: 16, threads: 32}}
  ram: 64GiB
  ram_reserve: 8GiB
  memory_bandwidth: 100GB/s
  efficiency: 0.5
  gpu_efficiency: 0.5
  podman: "5.4"
  gpus:
    - {{id: gpu0, index: 0, vram: 24GiB, reserve: 512MiB, bandwidth: 1000GB/s}}
models:
  moe:
    path: /mnt/data/models/moe/moe.gguf
    profile: {MOE_TINY}
  tiny:
    path: /mnt/data/models/tiny/tiny.gguf
    profile: {TINY}
runtimes:
  llama:
    kind: llama.cpp
    image: ghcr.io/ggml-org/llama.cpp:server
services:
  boss:
    model: moe
    runtime: llama
    role: orchestrator
    gpus: [gpu0]
    experts: host
    port: 8000
    ctx: 4096
    parallel: 1
    threads: 8
  lane:
    model: tiny
    runtime: llama
    role: worker
    gpus: [gpu0]
    port: 8001
    ctx: 4096
    parallel: 1
    threads: 8
"""
ONE_ON_GPU = "{mode: explicit, layers: {}, tensors: {gpu0: [blk.0.ffn_down_exps]}}"


def test_next_gib_gain_by_hand_and_from_the_model(tmp_path: Path) -> None:
    v = validate_file(_write(tmp_path, MOE))
    sp = v.plan.service("boss")
    s = sp.speed
    assert isinstance(s, SpeedPlan)
    (x,) = s.marginal
    # 600 MiB fits in a GiB, two (1,200 MiB) do not: one tensor, layer 0's first by name
    assert (x.gpu, x.bytes, x.tensors) == ("gpu0", EXPERT, ("blk.0.ffn_down_exps.weight",))
    # a token reads 2/64 of it: from host RAM at 0.5 x 100 GB/s, then from gpu0 at 0.5 x
    # 1000 GB/s; no compute floor (no CPU model, no GPU name), the hops stay (layer 0's
    # gate and up are still on the host)
    saved = EXPERT * 2 / 64 * (1 / 50e9 - 1 / 500e9)
    t = 1 / s.decode_tps
    assert x.gain_tps == pytest.approx(1 / (t - saved) - 1 / t, rel=1e-9)
    # and decode() before and after moving the tensor by hand on the Workload
    rt = v.spec.runtimes["llama"].rules()
    w = plan_speed.workload(sp, v.profiles["moe"], rt, 4096)
    m = plan_speed.machine(v.spec, v.services[0])
    assert isinstance(m, model.Machine)
    chunks = tuple(
        model.Chunk("gpu0", c.layer, c.nbytes, c.params, True, c.name)
        if (c.layer, c.name, c.device) == (0, "ffn_down_exps", model.HOST)
        else c
        for c in w.chunks
    )
    after = model.decode(m, model.Workload(chunks, 64, 2, w.kv_per_token, w.heat), 0).tps
    assert x.gain_tps == pytest.approx(after - model.decode(m, w, 0).tps, rel=1e-12)
    # no GPU experts: nothing to give back
    assert s.give_back == ()


def test_give_back_undoes_the_next_gib(tmp_path: Path) -> None:
    """With blk.0.ffn_down_exps on gpu0, giving back its only expert tensor is the all-host
    layout: the t/s lost is the t/s the next GiB gains there."""
    host = _speed(_write(tmp_path, MOE), "boss")
    one = _speed(_write(tmp_path, MOE.replace("experts: host", f"experts: {ONE_ON_GPU}")), "boss")
    (back,) = one.give_back
    assert (back.gpu, back.bytes, back.tensors) == (
        "gpu0",
        EXPERT,
        ("blk.0.ffn_down_exps.weight",),
    )
    assert back.gain_tps == pytest.approx(-host.marginal[0].gain_tps, rel=1e-9)
    assert one.decode_tps - host.decode_tps == pytest.approx(-back.gain_tps, rel=1e-9)
    # the next GiB there moves the next tensor of layer 0 (gate: by name after down)
    assert one.marginal[0].tensors == ("blk.0.ffn_gate_exps.weight",)


def test_give_back_frees_at_least_a_gib_coldest_first() -> None:
    m = model.Machine("m", (model.Memory(model.HOST, 100e9, 1e18), model.Memory("g", 1e12, 1e18)))
    chunks = [model.Chunk("g", 0, 1e9, 1e9)]
    chunks += [
        model.Chunk(dev, i, 0.6 * 2**30, 1e9, routed=True, name="ffn_up_exps")
        for dev, i in (("g", 1), ("g", 2), ("g", 3), (model.HOST, 4))
    ]
    w = model.Workload(tuple(chunks), 8, 8, (), heat.HeatProfile({1: 2.0, 2: 0.5}))
    back = model.give_back(m, w, 0, "g")
    assert back is not None
    # layer 2 (coldest), then 3 (heat 1.0): 1.2 GiB >= 1 GiB; layer 1 (hottest) stays
    assert back.tensors == ("blk.2.ffn_up_exps", "blk.3.ffn_up_exps")
    assert back.nbytes == pytest.approx(1.2 * 2**30) and back.gain_tps < 0
    gain = model.next_gib(m, w, 0, "g")
    assert gain is not None and gain.tensors == ("blk.4.ffn_up_exps",)


def test_next_gib_moves_the_smallest_tensor_when_none_fits() -> None:
    m = model.Machine("m", (model.Memory(model.HOST, 100e9, 1e18), model.Memory("g", 1e12, 1e18)))
    chunks = [model.Chunk("g", 0, 1e9, 1e9)]
    chunks += [
        model.Chunk(model.HOST, i, size, 1e9, routed=True, name="ffn_up_exps")
        for i, size in ((1, 1.5 * 2**30), (2, 1225 * 2**20))
    ]
    w = model.Workload(tuple(chunks), 8, 8)
    assert model.marginal_gb(m, w, 0, "g", budget=2**30) == (0.0, ())
    x = model.next_gib(m, w, 0, "g")
    assert x is not None
    assert (x.tensors, x.nbytes) == (("blk.2.ffn_up_exps",), 1225 * 2**20)
    assert x.gain_tps > 0


def test_plan_prints_the_next_gib_and_a_gib_of_each_service_sharing_the_gpu(
    tmp_path: Path,
) -> None:
    v = validate_file(_write(tmp_path, MOE.replace("experts: host", f"experts: {ONE_ON_GPU}")))
    s = v.plan.service("boss").speed
    assert isinstance(s, SpeedPlan)
    gain, loss = s.marginal[0].gain_tps, s.give_back[0].gain_tps
    text = to_text(v.plan)
    assert (
        f"    next GiB on gpu0: {gain:+.2f} tok/s (blk.0.ffn_gate_exps, 600 MiB); "
        f"giving back: {loss:+.2f} tok/s (blk.0.ffn_down_exps, 600 MiB)\n"
    ) in text
    assert f"    a GiB from lane on gpu0 would give boss {gain:+.2f} tok/s\n" in text
    assert text.count("would give") == 1  # lane keeps no experts in host RAM
    doc = json.loads(to_json(v.plan))["services"]
    speed = doc["boss"]["speed"]
    assert speed["marginal"] == [
        {
            "gpu": "gpu0",
            "gain_tps": round(gain, 3),
            "bytes": EXPERT,
            "tensors": ["blk.0.ffn_gate_exps.weight"],
        }
    ]
    assert set(speed["give_back"][0]) == {"gpu", "gain_tps", "bytes", "tensors"}
    assert speed["give_back"][0]["gain_tps"] == round(loss, 3) < 0
    assert "marginal" not in doc["lane"]["speed"] and "give_back" not in doc["lane"]["speed"]


def test_without_bandwidths_no_marginal_is_said(tmp_path: Path) -> None:
    text = MOE.replace("  memory_bandwidth: 100GB/s\n", "")
    v = validate_file(_write(tmp_path, text))
    assert v.plan.service("boss").speed is None
    out = to_text(v.plan)
    assert "next GiB" not in out and "would give" not in out
    assert "speed" not in json.loads(to_json(v.plan))["services"]["boss"]
    # a GPU without a bandwidth: the speed is not modelled, and no marginal either
    text = MOE.replace(", bandwidth: 1000GB/s", "")
    v = validate_file(_write(tmp_path, text))
    assert isinstance(v.plan.service("boss").speed, str)
    assert "next GiB" not in to_text(v.plan)


def test_seed001_next_gib_is_the_smallest_glm_tensor(tmp_path: Path) -> None:
    v = validate_file(_seed001(tmp_path))
    s = v.plan.service("grandpa").speed
    assert isinstance(s, SpeedPlan)
    assert [x.gpu for x in s.marginal] == ["gpu0", "gpu1"]
    for x in s.marginal:
        # no GLM-5.1 expert tensor fits in a GiB: the smallest moves (1,225 MiB), from
        # blk.15, the hottest host layer (head 3-14 are on gpu0)
        assert x.bytes == 1225 * 2**20 and x.tensors[0].startswith("blk.15.")
        assert x.gain_tps > 0
    back = {x.gpu: x for x in s.give_back}
    assert back["gpu0"].tensors[0].startswith("blk.14.")  # the coldest head layer
    assert back["gpu1"].tensors[0].startswith("blk.77.")
    assert "(no expert tensor fits in a GiB; the smallest: blk.15.ffn_" in to_text(v.plan)


SEED004 = {"genesis": 83.0, "aeon": 68.86}  # "~83 tok/s steady"; AEON's 68.86


def test_seed004s_mtp_services_within_5_percent_with_the_documented_acceptance() -> None:
    """Seed 004: vLLM at tensor parallel 2 on two RTX 5060 Ti (448 GB/s each, the GPU
    prior), MTP with 3 drafted tokens.  A step reads the rank's weights but the embedding
    and the MTP head; each draft reads the MTP head and the LM head; a step yields
    1 + a + a^2 + a^3 tokens at the acceptance a (0.78, fitted on these two services:
    not held out, a check that one acceptance serves two checkpoints)."""
    v = validate_file(LAYOUTS / "vllm-tower-seed004.yaml")
    for name, measured in SEED004.items():
        s = v.plan.service(name).speed
        assert isinstance(s, SpeedPlan), name
        assert abs(s.decode_tps / measured - 1) < 0.05, (name, s.decode_tps)
        assert any("speculative acceptance: 0.78" in c for c in s.caveats)
    rs = next(r for r in v.services if r.name == "genesis")
    sp = v.plan.service("genesis")
    profile = v.profiles[rs.service.model]
    w = plan_speed.budget_workload(sp, profile)
    tensors = list(profile.tensors())
    total = sum(t.nbytes for t in tensors)
    embed = sum(t.nbytes for t in tensors if "embed_tokens" in t.name)
    mtp = sum(t.nbytes for t in tensors if t.name.startswith("mtp."))
    share = sp.buffers[sorted(sp.buffers)[0]].weights / total
    assert sum(c.nbytes for c in w.chunks) == pytest.approx((total - embed - mtp) * share)
    draft = plan_speed.mtp_draft_workload(sp, profile)
    assert draft is not None
    head = sum(t.nbytes for t in tensors if t.name == "lm_head.weight")
    assert sum(c.nbytes for c in draft.chunks) == pytest.approx((mtp + head) * share)
    m = plan_speed.machine(v.spec, rs)
    assert isinstance(m, model.Machine)
    step = model.decode(m, w, 0).seconds + 3 * model.decode(m, draft, 0).seconds
    a = plan_speed.SPECULATIVE_ACCEPTANCE
    s = v.plan.service("genesis").speed
    assert isinstance(s, SpeedPlan)
    assert s.decode_tps == pytest.approx((1 + a + a**2 + a**3) / step)


def test_tokens_per_step() -> None:
    assert plan_speed.tokens_per_step(0.0, 3) == 1.0  # every draft refused: the target's
    assert plan_speed.tokens_per_step(1.0, 3) == 4.0  # every draft taken
    assert plan_speed.tokens_per_step(0.5, 2) == pytest.approx(1.75)


def test_seed004s_beelink_prints_a_speed_from_the_cpu_the_seed_states() -> None:
    """Seed 004's Beelink (Core i5-1235U, 32GB DDR4-3200, CPU only): "Peak throughput:
    10.44 tok/s" at 8 threads. The layout carries the CPU, so its plan prints a speed:
    10.5 tok/s (measured 2026-11-28). Gemma 4 ties its output to token_embd (262,144 x
    2,816): reading that copy each token is 0.6 of the 2.9 GB a token reads; left out,
    the plan read 13.2, 26 % fast."""
    v = validate_file(LAYOUTS / "beelink-cpu-only.yaml")
    assert v.spec.host.cpu.model == "Core i5-1235U" and v.spec.host.efficiency is None
    s = v.plan.service("gemma4-26b").speed
    assert isinstance(s, SpeedPlan) and s.host_figure == "peak"
    assert abs(s.decode_tps / 10.44 - 1) < 0.10


def test_a_given_speculative_acceptance_replaces_the_default(tmp_path: Path) -> None:
    """speculative.acceptance (issue 33 item 3): seed 004's Genesis at 0.9 instead of the
    default 0.78 yields 1 + a + a^2 + a^3 tokens a step at the given a: the speed scales
    by the ratio of the two sums, and the plan says the figure was given."""
    text = (LAYOUTS / "vllm-tower-seed004.yaml").read_text(encoding="utf-8")
    assert text.count("    speculative: {method: mtp, num_tokens: 3}\n") == 2
    given = text.replace(
        "    speculative: {method: mtp, num_tokens: 3}\n",
        "    speculative: {method: mtp, num_tokens: 3, acceptance: 0.9}\n",
    )
    (tmp_path / "models").symlink_to(LAYOUTS / "models")
    (tmp_path / "seed004.yaml").write_text(given, encoding="utf-8")
    before = validate_file(LAYOUTS / "vllm-tower-seed004.yaml").plan.service("genesis").speed
    after = validate_file(tmp_path / "seed004.yaml").plan.service("genesis").speed
    assert isinstance(before, SpeedPlan) and isinstance(after, SpeedPlan)
    ratio = plan_speed.tokens_per_step(0.9, 3) / plan_speed.tokens_per_step(0.78, 3)
    assert after.decode_tps / before.decode_tps == pytest.approx(ratio, rel=1e-6)
    assert any("0.9 a drafted token as given" in c for c in after.caveats)


def test_a_tied_targets_output_is_read_from_its_embeddings(tmp_path: Path) -> None:
    """A model without output.weight builds its output from token_embd (placement's
    tied_output) and reads that copy whole each token: the same bytes as an output
    tensor of its own. dense-tiny without output.weight reads exactly what dense-tiny
    reads (token_embd is 1024 x 1000 f16, as output.weight is); before, the tied copy
    was left out with the embedding's one row a token."""
    tied = tmp_path / "tied.yaml"
    tied.write_text(
        "".join(line for line in TINY.read_text().splitlines(True) if "output.weight," not in line)
    )
    assert "name: output.weight" not in tied.read_text()
    plain = _speed(_write(tmp_path, DENSE), "lane")
    found = _speed(_write(tmp_path, DENSE.replace(str(TINY), str(tied)), "t.yaml"), "lane")
    assert found.host_bytes_per_token == plain.host_bytes_per_token
    assert found.decode_tps == pytest.approx(plain.decode_tps)
