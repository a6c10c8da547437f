"""Cache types a runtime refuses at start-up are refused by validate, located (issue 13, item 4).

Before: a llama.cpp service with a q8_0 V cache and flash attention off ended
``plan``/``validate`` in a traceback from the KV code; a CPU-only service was
rendered with ``-fa off`` but sized as if flash attention were on (so a
quantized V cache rendered a command that cannot start, and an f16 one was
sized too small); an MLA model with different K and V cache types was planned
although llama.cpp refuses it ("model does not support different K (%s) and
V (%s) cache types", llama-context.cpp, build 11434).
"""

from __future__ import annotations

from pathlib import Path

from layoutgen.render.validate import validate_file
from layoutgen.spec.roles import flash_attn

from conftest import ROOT, run_cli
from specs import VALID, write

LLAMA = VALID.replace("kind: ik_llama.cpp", "kind: llama.cpp")


def test_quantized_v_with_flash_attention_off_is_a_located_error(tmp_path: Path) -> None:
    text = LLAMA.replace(
        "    cache_type_k: q8_0\n",
        "    cache_type_k: q8_0\n    cache_type_v: q8_0\n    args: [-fa, 'off']\n",
    )
    spec = write(tmp_path, text)
    for command in ("validate", "plan"):
        result = run_cli([command, str(spec)])
        assert result.code == 1
        out = result.stdout + result.stderr
        assert "Traceback" not in out
        assert (
            "error: services.worker0.cache_type_v: llama.cpp refuses a q8_0 V cache without "
            "flash attention, and its args turn flash attention off; write cache_type_v: f16, "
            "or '-fa', 'on' in args"
        ) in out


def test_a_cpu_only_service_is_sized_as_it_is_rendered(tmp_path: Path) -> None:
    """-fa off is rendered on the CPU alone: the KV is sized for it, and q8_0 V refused."""
    cpu = LLAMA.replace("    gpus: [gpu0]\n", "    gpus: []\n    experts: host\n")
    validated = validate_file(write(tmp_path, cpu))
    worker = next(rs for rs in validated.services if rs.name == "worker0")
    argv = next(sp.argv for sp in validated.plan.services if sp.name == "worker0")
    assert not worker.gpus
    assert argv[argv.index("-fa") + 1] == "off"
    assert flash_attn(worker) is False  # what the KV and compute were sized with

    quantized = cpu.replace(
        "    cache_type_k: q8_0\n", "    cache_type_k: q8_0\n    cache_type_v: q8_0\n"
    )
    result = run_cli(["validate", str(write(tmp_path, quantized, "q.yaml"))])
    assert result.code == 1
    assert (
        "services.worker0.cache_type_v: llama.cpp refuses a q8_0 V cache without flash "
        "attention, and it runs on the CPU alone, where layoutgen renders -fa off; write "
        "cache_type_v: f16, or add '-fa', 'on' to args"
    ) in result.stdout


def test_flash_attention_changes_the_planned_kv_and_compute(tmp_path: Path) -> None:
    """Sizing follows the -fa the service runs with (it did not for CPU-only services)."""
    cpu = LLAMA.replace("    gpus: [gpu0]\n", "    gpus: []\n    experts: host\n")

    def kv(text: str, name: str) -> int:
        validated = validate_file(write(tmp_path, text, name))
        plan = next(sp for sp in validated.plan.services if sp.name == "worker0")
        return sum(part.kv + part.compute for part in plan.buffers.values())

    # the KQ mask is f32 without flash attention, f16 with it (compute.py)
    off = kv(cpu, "off.yaml")
    on = kv(
        cpu.replace("    cache_type_k: q8_0\n", "    cache_type_k: q8_0\n    args: [-fa, 'on']\n"),
        "on.yaml",
    )
    assert off > on


def test_mla_with_different_k_and_v_types_is_refused_on_llama_cpp(tmp_path: Path) -> None:
    profile = ROOT / "layouts" / "models" / "glm-5.1-iq3_ks.yaml"
    text = LLAMA.replace("qwen3-coder-next-q4_0.yaml", profile.name).replace(
        "    cache_type_k: q8_0\n", "    cache_type_k: q8_0\n    cache_type_v: f16\n"
    )
    result = run_cli(["validate", str(write(tmp_path, text))])
    assert result.code == 1
    assert (
        "services.worker0.cache_type_v: llama.cpp refuses different K (q8_0) and V (f16) "
        "cache types for an MLA model (glm-dsa); write cache_type_v: q8_0"
    ) in result.stdout
    # the same on ik_llama.cpp, which keeps MLA's one cache in K, is not refused for it
    ik = text.replace("kind: llama.cpp", "kind: ik_llama.cpp")
    assert "different K" not in run_cli(["validate", str(write(tmp_path, ik, "ik.yaml"))]).stdout


def test_non_qwen3next_recurrent_layers_on_ik_are_a_located_error(tmp_path: Path) -> None:
    """ik's recurrent state is modelled for qwen3next-style layers only: say so, no traceback."""
    source = (ROOT / "layouts" / "models" / "qwen3-coder-next-q4_0.yaml").read_text()
    mamba = source.replace('arch: "qwen3next"', 'arch: "mamba2"')
    mamba = (
        "\n".join(
            line
            for line in mamba.splitlines()
            if "ssm_group_count" not in line and "ssm_time_step_rank" not in line
        )
        + "\n"
    )
    assert mamba.count("ssm_") < source.count("ssm_")
    (tmp_path / "mamba.yaml").write_text(mamba)
    text = VALID.replace(
        str(ROOT / "layouts" / "models" / "qwen3-coder-next-q4_0.yaml"), "mamba.yaml"
    )
    for command in ("validate", "plan"):
        result = run_cli([command, str(write(tmp_path, text))])
        out = result.stdout + result.stderr
        assert result.code == 1 and "Traceback" not in out, out
        assert (
            "services.worker0.runtime: model 'coder' has recurrent layers that are not "
            "qwen3next-style"
        ) in out


def test_the_advice_spells_flash_attention_as_the_build_does(tmp_path: Path) -> None:
    """Issue 30: ik_llama.cpp before build 3928 turns flash attention on with a bare -fa
    ('-fa on' is an unknown argument there); the error says what that build takes."""
    cpu = VALID.replace("    gpus: [gpu0]\n", "    gpus: []\n    experts: host\n").replace(
        "    cache_type_k: q8_0\n", "    cache_type_k: q8_0\n    cache_type_v: q8_0\n"
    )
    old = cpu.replace('version: "4840"', 'version: "3900"')
    assert old != cpu
    result = run_cli(["validate", str(write(tmp_path, old, "old.yaml"))])
    assert result.code == 1
    assert (
        "ik_llama.cpp refuses a q8_0 V cache without flash attention, and it runs on the "
        "CPU alone, where layoutgen renders -fa off; write cache_type_v: f16, or add '-fa' "
        "to args"
    ) in result.stdout, result.stdout
    result = run_cli(["validate", str(write(tmp_path, cpu, "new.yaml"))])
    assert "or add '-fa', 'on' to args" in result.stdout, result.stdout
