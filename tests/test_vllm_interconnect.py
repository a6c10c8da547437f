"""vLLM's tensor-parallel non-torch memory by interconnect, and its sampler by what the
installation runs (issue 35 items 1-3).

Both are read from vLLM's code (vllm_memory: NON_TORCH_TP, NON_TORCH_TP_PCIE,
SAMPLER_BYTES_PER_LOGIT_FLASHINFER) and checked against the dennislee22 logs: one model
(Qwen2-7B-Instruct), one release (0.10.1.1), 256 sampler rows, on A100s at TP 1 and
TP 2, with FlashInfer's sampler (pip-installed pods) and without it (a Ray run), the TP
2 runs without NVLink (no P2P in one node; two nodes over Ray).  Each log prints the
weights and the KV memory, so what the profile took besides them (activation and
non-torch memory together) is ``utilization x total - weights - KV``.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from test_vllm_memory import LOGS, gib, load, model_of, num, service_of
from test_vllm_plan import plan

from layoutgen.runtimes.vllm import memory as vm

#: logs that say which sampler ran ("Using FlashInfer for top-p & top-k sampling" or
#: "FlashInfer is not available") and whose GPU total is known
SAMPLED = [
    p
    for p in LOGS
    if "flashinfer_sampler" in load(p)["flags"] and load(p)["gpu"]["total_gib"] is not None
]


def _beside_kv(path: Path) -> tuple[int, int]:
    """(what the log leaves for activation and non-torch memory, what the plan puts there)."""
    record = load(path)
    service, model = service_of(record), model_of(record)
    budget = round(service.gpu_total_bytes * service.gpu_memory_utilization)
    weights, kv = gib(record, "weights_gib"), gib(record, "available_kv_gib")
    if kv is None:
        # 0.8.x prints the KV tokens only: whole blocks of every layer, so the KV memory
        # to within one block (johnson7788/RLDecisionAgent's 0.8.5 runs)
        per_token = vm.kv_bytes_per_token_layer(model, service) * model.n_layer
        kv = int(num(record["values"]["kv_tokens"])) * per_token
    assert weights is not None and kv is not None
    logged = budget - weights - kv
    planned = vm.activation_estimate(model, service) + vm.non_torch_estimate(service)
    return logged, planned


def test_the_sampled_logs_cover_both_samplers_and_both_interconnects() -> None:
    flags = [load(p)["flags"] for p in SAMPLED]
    assert {f["flashinfer_sampler"] for f in flags} == {True, False}
    assert {f["tensor_parallel_size"] for f in flags} == {1, 2}
    assert any(f.get("nvlink") is False for f in flags)


@pytest.mark.parametrize("path", SAMPLED, ids=lambda p: p.stem)
def test_activation_and_non_torch_are_planned_high_by_less_than_half_a_gib(path: Path) -> None:
    """Never below what the log left beside its KV cache, and at most 0.4 GiB above
    (non-torch memory is planned as an upper bound: 0.20 GiB, 0.30 more at TP 2 without
    NVLink)."""
    logged, planned = _beside_kv(path)
    assert logged <= planned <= logged + 0.4 * vm.GiB, (logged / vm.GiB, planned / vm.GiB)


def test_the_other_sampler_would_miss_each_log() -> None:
    """The sampler is the mechanism: with the other one, every log is missed (FlashInfer's
    14 B a logit under the sort's runs, the Ray run and the 0.8.5 Qwen2.5-0.5B; the sort's
    39 B over FlashInfer's runs by more than the 0.4 GiB the test above allows: 0.8 GiB
    and more on the pods, a fifth of the 0.25 pod's KV cache; 0.6 on SmolLM2's 49,152
    logits a row)."""
    for path in SAMPLED:
        record = load(path)
        service = service_of(record)
        flipped = replace(service, flashinfer_sampler=not service.flashinfer_sampler)
        logged, _ = _beside_kv(path)
        other = vm.activation_estimate(model_of(record), flipped) + vm.non_torch_estimate(flipped)
        if service.flashinfer_sampler:
            assert other > logged + 0.4 * vm.GiB, path.stem
        else:
            assert other < logged, path.stem


def test_the_flashinfer_sampler_follows_the_env_by_release() -> None:
    service = vm.VllmService(
        gpu_total_bytes=80 * vm.GiB,
        max_model_len=8192,
        max_num_seqs=256,
        max_num_batched_tokens=2048,
        version="0.10.2",
    )
    vocab = 152064
    model = replace(model_of(load(SAMPLED[0])), vocab_size=vocab)
    sort = vm.activation_estimate(model, service)
    fast = vm.activation_estimate(model, replace(service, flashinfer_sampler=True))
    assert sort - fast == 256 * vocab * (39 - 14)
    # unset: the sort, the larger (0.8.0-0.11.0 use FlashInfer only where it is installed)
    assert not vm.flashinfer_sampler(service)
    assert vm.flashinfer_sampler(replace(service, version="0.21.0", flashinfer_sampler=True))
    assert not vm.flashinfer_sampler(replace(service, flashinfer_sampler=False))


def test_nccl_by_interconnect() -> None:
    tp2 = vm.VllmService(
        gpu_total_bytes=24 * vm.GiB,
        max_model_len=8192,
        max_num_seqs=256,
        max_num_batched_tokens=2048,
        version="0.10.1.1",
        tensor_parallel_size=2,
    )
    assert vm.nccl_estimate(tp2) == vm.NON_TORCH_TP  # not known: the larger
    assert vm.nccl_estimate(replace(tp2, nvlink=True)) == vm.NON_TORCH_TP
    assert vm.nccl_estimate(replace(tp2, nvlink=False)) == vm.NON_TORCH_TP_PCIE
    assert vm.nccl_estimate(replace(tp2, tensor_parallel_size=1, nvlink=False)) == 0
    # from 0.11.0 NCCL starts before the snapshot; without NVLink nothing is left
    # beside the budget for it (0.30 GiB, under the 0.45 the profile still counts)
    newer = replace(tp2, version="0.11.0")
    assert vm.nccl_outside(newer) == vm.NON_TORCH_TP - vm.NCCL_AFTER_SNAPSHOT
    assert vm.nccl_outside(replace(newer, nvlink=False)) == 0


def test_nvlink_from_the_env_and_the_gpu_names() -> None:
    rtx = "NVIDIA GeForce RTX 4090"
    assert vm.nvlink_between({}, [rtx, rtx]) is False
    assert vm.nvlink_between({}, ["NVIDIA GeForce RTX 5060 Ti", rtx]) is False
    assert vm.nvlink_between({}, ["NVIDIA L40S", "NVIDIA L40S"]) is False
    assert vm.nvlink_between({}, ["NVIDIA L4", "NVIDIA L4"]) is False
    assert vm.nvlink_between({}, ["NVIDIA RTX 6000 Ada Generation"] * 2) is False
    assert vm.nvlink_between({}, ["NVIDIA RTX PRO 6000 Blackwell Workstation Edition"] * 2) is False
    # a bridge may be fitted, or the board has NVLink: not ruled out
    assert vm.nvlink_between({}, ["NVIDIA GeForce RTX 3090"] * 2) is None
    assert vm.nvlink_between({}, ["NVIDIA RTX A6000"] * 2) is None
    assert vm.nvlink_between({}, ["NVIDIA A40"] * 2) is None
    assert vm.nvlink_between({}, ["NVIDIA A100 80GB PCIe"] * 2) is None
    assert vm.nvlink_between({}, ["NVIDIA H100 80GB HBM3"] * 2) is None
    assert vm.nvlink_between({}, [rtx, None]) is None
    assert vm.nvlink_between({"NCCL_P2P_DISABLE": "1"}, [None, None]) is False
    assert vm.nvlink_between({"NCCL_P2P_DISABLE": "0"}, [None, None]) is None


TP2 = """\
  chat:
    model: tiny
    runtime: vllm
    role: worker
    port: 8000
    ctx: 32768
    max_num_seqs: 2
    gpus: [gpu0, gpu1]
"""


def test_a_spec_without_nvlink_plans_the_smaller_nccl_term(tmp_path: Path) -> None:
    """NCCL_P2P_DISABLE=1 in the service's env (or cards without an NVLink connector)
    plans 0.30 GiB of NCCL memory where NVLink, or not knowing, plans 1.79."""
    known = plan(tmp_path, TP2, version="0.10.2").plan.service("chat").budget
    env = "    env: {NCCL_P2P_DISABLE: '1'}\n"
    without = plan(tmp_path, TP2 + env, version="0.10.2").plan.service("chat").budget
    assert known is not None and without is not None
    assert known.term("non_torch") - without.term("non_torch") == (
        vm.NON_TORCH_TP - vm.NON_TORCH_TP_PCIE
    )
    assert known.term("kv") == without.term("kv")  # the same requests, a smaller budget
    assert without.budget < known.budget


def test_a_spec_that_says_flashinfer_samples_plans_its_smaller_peak(tmp_path: Path) -> None:
    chat = TP2.replace("gpus: [gpu0, gpu1]", "gpus: [gpu0]").replace("    max_num_seqs: 2\n", "")
    sort = plan(tmp_path, chat, version="0.10.2").plan.service("chat").budget
    env = "    env: {VLLM_USE_FLASHINFER_SAMPLER: '1'}\n"
    fast = plan(tmp_path, chat + env, version="0.10.2").plan.service("chat").budget
    assert sort is not None and fast is not None
    # 1,024 rows (0.10.2's default on a 95 GiB card) of Llama-3's 128,256 logits
    assert sort.term("activation") - fast.term("activation") == 1024 * 128256 * (39 - 14)
