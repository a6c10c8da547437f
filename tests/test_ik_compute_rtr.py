"""-rtr (run-time repacking) on ik_llama.cpp: host experts become row-interleaved types
(``q4_k`` -> ``q4_k_r4``, compute.REPACKED_AS) that no CUDA build multiplies, so their
MoE ops stay on the CPU: CUDA_Host holds their activations and the first GPU copies no
expert tensor in.  Checked on ik issue 455's log (RTX 3080, DeepSeek-V3 UD-Q4_K_XL with
exps=CPU, -rtr, build 3712: CUDA0 compute 3,425 MiB, CUDA_Host 176 MiB), held out."""

from __future__ import annotations

from pathlib import Path

from ruamel.yaml import YAML

from layoutgen.runtimes.ik_llama_cpp.compute import REPACKED_AS
from layoutgen.runtimes.ik_llama_cpp.cuda_types import CUDA_MATMUL
from tests.truth import table
from tests.truth.holdout_report import HOLDOUT

I455 = HOLDOUT / "ik-deepseek2-i455-luzamm-3080-rtr-mla3.yaml"


def _compute(path: Path, tmp: Path) -> dict[str, tuple[int, int]]:
    outcome = table.evaluate(path, tmp)
    assert outcome.reason is None, outcome.reason
    return {r.buffer: (r.logged, r.planned or 0) for r in outcome.rows if r.field == "compute"}


def _without_rtr(tmp: Path) -> Path:
    yaml = YAML(typ="safe", pure=True)
    record = yaml.load(I455.read_text())
    flags = record["settings"]["other_flags"]
    assert "-rtr" in flags
    record["settings"]["other_flags"] = ["--no-mmap" if f == "-rtr" else f for f in flags]
    path = tmp / I455.name
    with path.open("w") as f:
        yaml.dump(record, f)
    return path


def test_repacked_host_experts_run_on_the_cpu(tmp_path: Path) -> None:
    found = _compute(I455, tmp_path)
    host_logged, host_planned = found["CUDA_Host"]
    gpu_logged, gpu_planned = found["CUDA0"]
    assert host_planned >= host_logged  # the experts' activations are on the host side
    assert abs(gpu_planned / gpu_logged - 1) < 0.05  # and no expert copy on the GPU


def test_without_rtr_the_first_gpu_multiplies_them(tmp_path: Path) -> None:
    repacked = _compute(I455, tmp_path)
    plain = _compute(_without_rtr(tmp_path), tmp_path)
    assert plain["CUDA_Host"][1] < repacked["CUDA_Host"][1]
    assert plain["CUDA0"][1] > repacked["CUDA0"][1]


def test_no_repacked_type_of_a_k_quant_has_a_cuda_matmul() -> None:
    for qtype in ("q2_k", "q3_k", "q4_k", "q5_k", "q6_k", "q8_0", "q4_0", "iq4_xs"):
        assert REPACKED_AS[qtype] not in CUDA_MATMUL, qtype
