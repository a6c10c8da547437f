"""The solver against the seeds' logged numbers (DESIGN §10), through the example layouts."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from layoutgen.render.validate import validate_file
from layoutgen.solve.plan import Plan

from conftest import ROOT, run_cli

MiB = 2**20
GiB = 2**30
LAYOUTS = ROOT / "layouts"


def _plan(name: str) -> Plan:
    return validate_file(LAYOUTS / name).plan


def _buf(plan: Plan, service: str, buffer: str) -> dict[str, int]:
    part = plan.service(service).buffers[buffer]
    return {"weights": part.weights, "kv": part.kv, "compute": part.compute}


def test_glm51_all_experts_on_host_one_gpu() -> None:
    # Seed 001 configuration 3: "CUDA_Host buffer size = 307110.47 MiB",
    # "CUDA0 KV buffer size = 1491.79 MiB".
    plan = _plan("glm51-3-cpu-moe-1gpu.yaml")
    host, gpu = _buf(plan, "grandpa", "CUDA_Host"), _buf(plan, "grandpa", "CUDA0")
    assert abs(host["weights"] / (307110.47 * MiB) - 1) < 0.01
    assert abs(gpu["kv"] / (1491.79 * MiB) - 1) < 0.005
    # The measured compute buffer from the layout is used as measured.
    assert round(gpu["compute"] / MiB, 2) == 5418.03  # "CUDA0 compute buffer size = 5418.03 MiB"
    assert plan.service("grandpa").buffers["CUDA0"].basis["compute"] == "measured"
    assert plan.service("grandpa").expert_layers == {"host": tuple(range(3, 78))}


def test_glm51_two_gpus_split_the_kv_as_logged() -> None:
    # Seed 001 configuration 1: "CUDA0 KV buffer size = 784.15 MiB", "CUDA1 ... 707.64 MiB".
    plan = _plan("glm51-1-ot-exps-cpu-2gpu.yaml")
    assert abs(_buf(plan, "grandpa", "CUDA0")["kv"] / (784.15 * MiB) - 1) < 0.01
    assert abs(_buf(plan, "grandpa", "CUDA1")["kv"] / (707.64 * MiB) - 1) < 0.01


def test_ik_first_gpu_compute_counts_the_host_expert_copy() -> None:
    # Seed 001 configuration 2 (--cpu-moe, 2 GPUs, -ub 8192, -muge) carries no measured
    # compute; configuration 1 (-ot exps=CPU: the same placement) logged "CUDA0 compute
    # buffer size = 5418.03 MiB" and "CUDA1 ... 5032.00 MiB". CUDA0 does not hold the
    # logits there: its buffer is a host expert copied in for the big batch's matmul.
    plan = _plan("glm51-2-cpu-moe-2gpu.yaml")
    cuda0 = plan.service("grandpa").buffers["CUDA0"]
    assert cuda0.basis["compute"] == "estimated"
    assert abs(cuda0.compute / (5418.03 * MiB) - 1) < 0.01
    assert abs(_buf(plan, "grandpa", "CUDA1")["compute"] / (5032.00 * MiB) - 1) < 0.06
    # Seed 001 configuration 5 (head 12 + tail 10, estimated compute): nvtop shows the
    # process at 64,268 / 55,322 MiB on the two GPUs; the plan, overhead included.
    gpus = {d.id: d.used for d in _plan("glm51-5-head12-tail10-2gpu.yaml").devices}
    assert abs(gpus["gpu0"] / (64268 * MiB) - 1) < 0.01
    assert abs(gpus["gpu1"] / (55322 * MiB) - 1) < 0.01


def test_ik_offload_copy_needs_host_experts_and_a_big_batch() -> None:
    from layoutgen.models.profile import load_profile
    from layoutgen.runtimes.ik_llama_cpp.placement import offload_copy

    glm = load_profile(LAYOUTS / "models" / "glm-5.1-iq3_ks.yaml")
    # -muge fuses up+gate (1225 + 1225 MiB); without it the largest is down (1638 MiB)
    assert offload_copy(glm, 8192, {}, merge_up_gate=True) == 2450 * MiB
    assert offload_copy(glm, 8192, {}, merge_up_gate=False) == 1638 * MiB
    all_on_gpu = {layer: "CUDA0" for layer in range(3, 78)}
    assert offload_copy(glm, 8192, all_on_gpu, merge_up_gate=True) == 0
    # ubatch x 8 used experts must reach 32 x 256 experts: 1024 offloads, 1023 does not
    assert offload_copy(glm, 1024, {}, merge_up_gate=True) > 0
    assert offload_copy(glm, 1023, {}, merge_up_gate=True) == 0


def test_n_cpu_moe_64_fits_with_the_logged_pinned_memory() -> None:
    # Seed 001 configuration 4: "Allocating 244.02 GiB of pinned host memory".
    plan = _plan("glm51-4-n-cpu-moe-64-1gpu.yaml")
    host = _buf(plan, "grandpa", "CUDA_Host")["weights"]
    assert abs(host / (244.02 * GiB) - 1) < 0.01
    assert plan.service("grandpa").expert_layers["gpu1"] == tuple(range(64, 78))


def test_n_cpu_moe_58_is_refused_naming_the_device_and_shortfall() -> None:
    # Seed 001: "allocating 5418.03 MiB on device 0: cudaMalloc failed: out of memory".
    result = run_cli(["validate", str(LAYOUTS / "invalid" / "glm51-n-cpu-moe-58-1gpu.yaml")])
    assert result.code == 1
    assert "services.grandpa: does not fit GPU gpu1 (its CUDA0) even alone: needs " in result.stdout
    assert "short by " in result.stdout


def test_seed_003_head15_tail4() -> None:
    # Seed 003: CUDA0 68,698 MiB, CUDA1 23,473 MiB, CUDA_Host 229,438 MiB (model
    # buffers; the compute buffers used are seed 001's measured ones, in the layout).
    plan = _plan("glm51-head15-tail4-ctx65k.yaml")
    for buffer, logged in (("CUDA0", 68698), ("CUDA1", 23473), ("CUDA_Host", 229438)):
        got = _buf(plan, "grandpa", buffer)["weights"]
        # issue 4 asks 3 %; with the profile fitted to seed 001 it is within 0.01 %
        assert abs(got / (logged * MiB) - 1) < 0.001, buffer


def test_final_layout_keeps_both_workers_and_puts_experts_head_and_tail() -> None:
    plan = _plan("familiar-final.yaml")
    for worker, gpu in (("naughty-worker0", "gpu0"), ("naughty-worker1", "gpu1")):
        sp = plan.service(worker)
        assert set(sp.expert_layers) == {gpu}  # fully resident on its GPU
        assert sp.buffers["CUDA0"].kv > 0
    experts = plan.service("grandpa").expert_layers
    on_gpus = [n for dev, layers in experts.items() if dev != "host" for n in layers]
    assert {3, 4, 5, 77, 76, 75} <= set(on_gpus)  # head and tail first
    assert all(d.free >= 0 for d in plan.devices)
    # auto fills the GPUs: neither has room left for one more expert layer (seed 001:
    # gate 1225 + down 1638 + up 1225 MiB each). The seed hoped for 20 (its hand budget
    # books 54 + 42 + 12 = 108 GB per 96 GB card); what fits beside the workers is less.
    assert all(d.free < 4088 * MiB for d in plan.devices if d.id != "host")


def test_plan_json_is_versioned_and_stable(tmp_path: Path) -> None:
    spec = LAYOUTS / "familiar-final.yaml"
    first = run_cli(["plan", "--json", str(spec)])
    assert first.code == 0
    assert first.stdout == run_cli(["plan", "--json", str(spec)]).stdout
    doc = json.loads(first.stdout)
    assert doc["schema"] == 1 and doc["host"] == "compute"
    assert set(doc["devices"]) == {"gpu0", "gpu1", "host"}
    grandpa = doc["services"]["grandpa"]
    assert set(grandpa["buffers"]) >= {"CUDA0", "CUDA1", "CUDA_Host"}
    for name, buf in grandpa["buffers"].items():
        assert all(isinstance(buf[k], int) for k in ("weights", "kv", "compute", "overhead"))
        assert buf["basis"]["weights"] in ("exact", "measured"), name


@pytest.mark.parametrize("layout", sorted(LAYOUTS.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_accepted_plan_is_within_capacity(layout: Path) -> None:
    plan = validate_file(layout).plan
    for device in plan.devices:
        assert device.free >= 0, device


def test_conflicting_services_are_budgeted_per_scenario(tmp_path: Path) -> None:
    # Two Qwen3-Coder-Next workers on one 96 GB
    # GPU do not fit together (~50 GiB each), but fit as alternatives.
    from specs import VALID, write

    both_on_gpu0 = VALID.replace(
        "    role: orchestrator\n", "    role: worker\n    gpus: [gpu0]\n"
    ).replace("ctx: 32768", "ctx: 262144")
    spec = write(tmp_path, both_on_gpu0)
    refused = run_cli(["validate", str(spec)])
    assert refused.code == 1 and "does not fit GPU gpu0" in refused.stdout
    alternatives = both_on_gpu0.replace(
        "    threads: 15\n", "    threads: 15\n    conflicts: [worker0]\n"
    )
    assert alternatives != both_on_gpu0
    accepted = run_cli(["validate", str(write(tmp_path, alternatives, "alt.yaml"))])
    assert accepted.code == 0, accepted.stdout


def test_ctx_zero_is_the_trained_context(tmp_path: Path) -> None:
    """-c 0 makes the runtime take the model's n_ctx_train: the plan of ctx: 0 is the
    plan of ctx: n_ctx_train, and its argv says -c 0 (the oracle suite runs it)."""
    from layoutgen.models.profile import load_profile
    from layoutgen.render.validate import validate_file
    from layoutgen.solve.plan import to_json

    layout = (LAYOUTS / "glm51-3-cpu-moe-1gpu.yaml").read_text()
    layout = layout.replace("profile: models/", f"profile: {LAYOUTS}/models/")
    trained = load_profile(LAYOUTS / "models" / "glm-5.1-iq3_ks.yaml").hparams.n_ctx_train
    assert trained and "ctx: 32768" in layout

    def plan(ctx: int) -> dict:
        path = tmp_path / f"ctx{ctx}.yaml"
        path.write_text(layout.replace("ctx: 32768", f"ctx: {ctx}", 1))
        return json.loads(to_json(validate_file(path).plan))["services"]["grandpa"]

    zero, full = plan(0), plan(trained)
    assert zero["buffers"] == full["buffers"]
    assert zero["argv"][zero["argv"].index("-c") + 1] == "0"


def test_ctx_zero_without_a_trained_context_is_refused_where_written(tmp_path: Path) -> None:
    from tests.specs import PROFILE, VALID

    profile = tmp_path / "untrained.yaml"
    lines = PROFILE.read_text().splitlines(keepends=True)
    profile.write_text("".join(line for line in lines if "n_ctx_train" not in line))
    spec = tmp_path / "spec.yaml"
    spec.write_text(VALID.replace(str(PROFILE), str(profile)).replace("ctx: 262144", "ctx: 0", 1))
    result = run_cli(["validate", str(spec)])
    assert result.code == 1
    assert "services.worker0.ctx: 0 means the context model 'coder' was trained for" in (
        result.stdout
    )


FIT = f"""\
host:
  name: t
  cpu: {{cores: 8, threads: 16}}
  ram: 256GiB
  ram_reserve: 8GiB
  gpus:
    - {{id: gpu0, index: 0, vram: VRAM, reserve: 512MiB}}
models:
  q: {{path: /m/q.gguf, profile: {LAYOUTS / "models" / "qwen3-coder-next-q4_0.yaml"}}}
  e: {{path: /m/e.gguf, profile: {LAYOUTS / "models" / "gemma-4-26b-a4b-q5_k_m.yaml"}}}
runtimes:
  llama: {{kind: llama.cpp, binary: /opt/llama/llama-server, version: b6123}}
services:
  chat:
    model: q
    runtime: llama
    role: worker
    port: 8080
    ctx: 32768
    experts: gpu
  embed:
    model: e
    runtime: llama
    role: embedding
    port: 8081
    ctx: 4096
"""


def _refusal(tmp_path: Path, vram: str) -> list[str]:
    spec = tmp_path / "fit.yaml"
    spec.write_text(FIT.replace("VRAM", vram))
    result = run_cli(["validate", str(spec)])
    assert result.code == 1
    return [line for line in result.stdout.splitlines() if "does not fit" in line]


def test_a_service_too_big_alone_is_the_one_named(tmp_path: Path) -> None:
    """Issue 15: the error pointed at 'embed' (placed last) while 'chat' alone needs
    twice the card; it names chat, at its own line, with its own need."""
    (line,) = _refusal(tmp_path, "24GiB")
    assert line.startswith(f"{tmp_path / 'fit.yaml'}:15:5: error: services.chat: does not fit ")
    assert "GPU gpu0 (its CUDA0) even alone" in line
    assert "(and the device holds embed " in line


def _mib(line: str, pattern: str) -> int:
    found = re.search(pattern + r" ([\d,]+) MiB", line)
    assert found is not None, (pattern, line)
    return int(found[1].replace(",", ""))


def test_services_that_fit_alone_but_not_together_name_the_largest_share(
    tmp_path: Path,
) -> None:
    (line,) = _refusal(tmp_path, "56GiB")
    assert ":15:5: error: services.chat: does not fit GPU gpu0" in line
    assert "beside the services sharing it: together they need" in line
    need, room = _mib(line, "together they need"), _mib(line, "=")
    chat, embed = _mib(line, "shares: chat"), _mib(line, ", embed")
    assert chat + embed == need > room
    assert embed < chat <= room  # each fits alone; the larger share is named


def test_threads_are_counted_for_services_that_run_together(tmp_path: Path) -> None:
    """Issue 31: twelve alternatives that never run together (each conflicts with
    every other) ask for 8 threads each, not 96; two that run together and ask for
    more than the host has are still warned about, by name."""
    from specs import VALID, write

    head = VALID.split("services:\n")[0] + "services:\n"
    names = [f"alt{i:02d}" for i in range(12)]

    def service(name: str, port: int, threads: int, conflicts: list[str]) -> str:
        return (
            f"  {name}:\n    model: coder\n    runtime: ik\n    role: batch\n"
            f"    port: {port}\n    ctx: 4096\n    threads: {threads}\n"
            + (f"    conflicts: [{', '.join(conflicts)}]\n" if conflicts else "")
        )

    alternatives = head + "".join(
        service(n, 8100 + i, 8, [o for o in names if o != n]) for i, n in enumerate(names)
    )
    result = run_cli(["validate", str(write(tmp_path, alternatives, "alt.yaml"))])
    assert result.code == 0, result.stdout
    assert "threads" not in result.stdout, result.stdout

    together = head + service("a", 8100, 20, []) + service("b", 8101, 20, [])
    result = run_cli(["validate", str(write(tmp_path, together, "both.yaml"))])
    assert result.code == 0, result.stdout
    assert "host.cpu.threads: services ask for 40 threads in all" in result.stdout
