"""ik_llama.cpp behaviours that changed between builds, each checked against the
source that changed it and the public log that shows it.

- MLA prompt processing with flash attention and ``-amb``: until build 4156
  (commit b85a2a50d, 2026-01-31) build_deepseek2 built every step's K and V before
  the first attention ran, so all steps but the last stayed allocated; heads per
  step were halved while even until then, fitted by divisor since (correctly since
  PR #1375, build 4265).
- The KQ mask before build 3907: one f32 mask cast to f16 by one node, on the
  first layer's device; every other GPU is sent the f16 result.
- CUDA matmul kernels by type: a weight on a GPU whose type the build cannot
  multiply is refused (ik would copy it back to the host every batch).
"""

from __future__ import annotations

import dataclasses
import textwrap
from pathlib import Path

import pytest

from layoutgen import runtimes
from layoutgen.models.profile import dump_profile, load_profile
from layoutgen.models.quants import tensor_nbytes
from layoutgen.render.validate import validate_file
from layoutgen.runtimes.ik_llama_cpp import compute
from tests.truth import table

MiB = 1 << 20
KIMI = table.RECORDS / "ik-deepseek2-i756-lissanro-kimik2-4gpu-mla3-ub4096.yaml"
T4S = table.RECORDS / "ghx-ik-qwen3moe-i398-pt13762104-2xt4-ncopies4.yaml"
PROFILE = Path(__file__).resolve().parents[1] / "layouts" / "models" / "qwen3-coder-next-q4_0.yaml"


def _ik(version: str) -> runtimes.Runtime:
    return runtimes.get("ik_llama.cpp", version)


@pytest.mark.parametrize(
    ("version", "n_head", "size_mib", "amb", "heads"),
    [
        # Kimi-K2: 64 heads x (128 + 128) x 131072 cells f32 = 8192 MiB, -amb 512
        ("4155", 64, 8192, 512, 4),  # halved 4 times
        ("4156", 64, 8192, 512, 32),  # 8192 / 32 heads = 256 <= 512 at the first divisor
        ("4265", 64, 8192, 512, 4),  # 8192 / 16 steps = 512
        # 96 heads, 6144 MiB: halving stops at 6 heads (384 MiB); a divisor finds 8 (512)
        ("4155", 96, 6144, 512, 6),
        ("4265", 96, 6144, 512, 8),
        # no -amb, or a cache that fits: every head at once
        ("4155", 64, 8192, 0, 64),
        ("4265", 64, 256, 512, 64),
    ],
)
def test_heads_per_mla_step_as_each_build_fits_them(
    version: str, n_head: int, size_mib: int, amb: int, heads: int
) -> None:
    rt = _ik(version)
    assert compute._heads_per_step(rt, n_head, size_mib * MiB, amb * MiB) == heads


def _planned(record: Path, tmp: Path, **changes: object) -> dict[str, int]:
    data = table.load(record)
    data.update(changes)
    path = tmp / record.name
    from ruamel.yaml import YAML

    with path.open("w") as f:
        YAML(typ="safe", pure=True).dump(data, f)
    outcome = table.evaluate(path, tmp)
    assert outcome.reason is None, outcome.reason
    return {r.buffer: r.planned or 0 for r in outcome.rows if r.field == "compute"}


def test_before_4156_every_mla_steps_k_and_v_stay_allocated(tmp_path: Path) -> None:
    """Kimi-K2 at -c 131072 -ub 4096 -amb 512: 16 steps of 4 heads; the 15 steps before
    the last keep K (128 + 64) and V (128) per head and cell as f16."""
    old = _planned(KIMI, tmp_path, version="4155")
    new = _planned(KIMI, tmp_path, version="4265")
    held = 15 * 4 * 131072 * (128 + 64 + 128) * 2
    assert held == 4800 * MiB
    for gpu in ("CUDA1", "CUDA2"):
        assert old[gpu] - new[gpu] == held
    # the output GPU's peak moves to the logits (163840 x 4096 f32) once the steps shrink
    assert old["CUDA3"] == old["CUDA1"] and new["CUDA3"] > new["CUDA1"]


def test_the_logs_of_old_builds_follow_to_one_percent(tmp_path: Path) -> None:
    """Issue 756 (2025-09): 7376.02 MiB on each GPU without the first layer; issue 398
    (build 3673, 4 pipeline copies): 444.77 MiB on the output GPU, which is the logits
    beside four copies of the f16 mask and the residual stream."""
    kimi = _planned(KIMI, tmp_path)
    for gpu in ("CUDA1", "CUDA2", "CUDA3"):
        assert abs(kimi[gpu] / (7376.02 * MiB) - 1) < 0.01, kimi[gpu] / MiB
    t4 = _planned(T4S, tmp_path)
    assert abs(t4["CUDA1"] / (444.77 * MiB) - 1) < 0.01, t4["CUDA1"] / MiB


def test_only_the_first_layers_device_holds_the_f32_mask_before_3907(tmp_path: Path) -> None:
    """The cast's f32 input (2048 MiB for 131072 x 4096) is on CUDA0 only, beside the
    same layer work as the other GPUs; from build 3907 the mask is built as f16 and
    the other GPUs, which only ever held the f16 one, are unchanged."""
    old = _planned(KIMI, tmp_path, version="3906")
    new = _planned(KIMI, tmp_path, version="3907")
    f32_mask = 131072 * 4096 * 4
    assert old["CUDA0"] - old["CUDA1"] == f32_mask
    assert old["CUDA1"] == new["CUDA1"] and old["CUDA0"] > new["CUDA0"]


def _spec(tmp: Path, version: str, experts: str, qtype: str) -> Path:
    base = load_profile(PROFILE)
    entries = tuple(
        dataclasses.replace(e, type=qtype, nbytes=tensor_nbytes(qtype, e.shape))
        if "ffn_down_exps" in e.name
        else e
        for e in base.entries
    )
    profile = tmp / "model.yaml"
    profile.write_text(dump_profile(dataclasses.replace(base, entries=entries)))
    spec = tmp / "spec.yaml"
    spec.write_text(
        textwrap.dedent(
            f"""\
            host:
              name: box
              cpu: {{cores: 16, threads: 32}}
              ram: 256GiB
              ram_reserve: 16GiB
              podman: "5.4"
              gpus:
                - {{id: gpu0, index: 0, vram: 97247MiB, reserve: 1GiB}}
            models:
              coder:
                path: /models/coder.gguf
                profile: {profile}
            runtimes:
              ik:
                kind: ik_llama.cpp
                image: registry.home.arpa/ik_llama.cpp:{version}
                version: "{version}"
            services:
              chat:
                model: coder
                runtime: ik
                role: orchestrator
                port: 8000
                ctx: 8192
                experts: {experts}
            """
        )
    )
    return spec


def test_experts_of_a_type_without_a_cuda_kernel_in_that_build_are_warned_and_sized(
    tmp_path: Path,
) -> None:
    """The run starts (ik PR #492's log) and is slow: a warning, and the host compute
    buffer holds the weight copied back for the CPU op."""
    found = validate_file(_spec(tmp_path, "3728", "gpu", "iq1_m_r4"))
    text = "\n".join(f"{w.file}:{w.line}:{w.col}: {w.message}" for w in found.warnings)
    assert "spec.yaml:" in text and "services.chat.model:" in text
    assert "are iq1_m_r4 (blk.0.ffn_down_exps.weight" in text
    assert "since build 3729 (2025-06-05; ik_llama.cpp ggml-cuda.cu at 1b9b7bd5a" in text
    assert "'experts: host'" in text and "a newer build" in text
    with_kernel = validate_file(_spec(tmp_path, "3729", "gpu", "iq1_m_r4"))
    host = found.plan.services[0].buffers["CUDA_Host"].compute
    assert host > with_kernel.plan.services[0].buffers["CUDA_Host"].compute


@pytest.mark.parametrize(
    ("version", "experts"), [("3729", "gpu"), ("3728", "host")], ids=["kernel", "host"]
)
def test_a_build_with_the_kernel_or_experts_on_the_host_pass(
    tmp_path: Path, version: str, experts: str
) -> None:
    validate_file(_spec(tmp_path, version, experts, "iq1_m_r4"))


def test_a_cpu_repacked_type_has_no_gpu_kernel_in_any_build(tmp_path: Path) -> None:
    said = "\n".join(
        w.message for w in validate_file(_spec(tmp_path, "4840", "gpu", "q4_0_r8")).warnings
    )
    assert "no ik_llama.cpp build multiplies q4_0_r8 on a GPU" in said
    assert "or a newer build" not in said
    validate_file(_spec(tmp_path, "4840", "host", "q4_0_r8"))
