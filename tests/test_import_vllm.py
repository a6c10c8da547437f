"""vLLM commands import as vLLM services (issue 30: they were refused or read as llama.cpp)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from layoutgen.importer import import_text

ROOT = Path(__file__).resolve().parent.parent


def _imported(text: str, source: str = "cmd.sh") -> tuple[dict[str, Any], list[str], str]:
    imported = import_text(text, source)
    doc = YAML(typ="safe").load(imported.yaml)
    return doc, [w.gcc() for w in imported.warnings], imported.yaml


SERVE = (
    "CUDA_VISIBLE_DEVICES=0,1 VLLM_MARLIN_USE_ATOMIC_ADD=1 HF_TOKEN=hf_secret \\\n"
    "  vllm serve /srv/models/Qwen3.6-27B-AutoRound-INT4 --tensor-parallel-size 2 \\\n"
    "  --max-model-len 32768 --max-num-seqs 4 --max-num-batched-tokens 4096 \\\n"
    "  --kv-cache-dtype fp8 --speculative-config "
    '\'{"method":"mtp","num_speculative_tokens":3}\' \\\n'
    "  --gpu-memory-utilization 0.90 --port 8022 --trust-remote-code \\\n"
    "  --default-chat-template-kwargs '{\"enable_thinking\": false}'\n"
)


def test_vllm_serve_becomes_a_vllm_service() -> None:
    doc, warnings, yaml = _imported(SERVE)
    assert doc["runtimes"] == {"vllm": {"kind": "vllm", "binary": "vllm"}}
    (svc,) = doc["services"].values()
    assert svc == {
        "model": "qwen3.6-27b-autoround-int4",
        "runtime": "vllm",
        "role": "worker",
        "port": 8022,
        "ctx": 32768,
        "gpus": ["gpu0", "gpu1"],
        "parallel": 4,
        "max_num_seqs": 4,
        "batch": 4096,
        "kv_cache_dtype": "fp8",
        "speculative": {"method": "mtp", "num_tokens": 3},
        "env": {"VLLM_MARLIN_USE_ATOMIC_ADD": "1"},
        "args": [
            "--trust-remote-code",
            "--default-chat-template-kwargs",
            '{"enable_thinking": false}',
        ],
    }
    assert doc["models"]["qwen3.6-27b-autoround-int4"]["path"] == (
        "/srv/models/Qwen3.6-27B-AutoRound-INT4"
    )
    assert (
        "cmd.sh:5:3: warning: --gpu-memory-utilization 0.90: replaced by the plan's own "
        "budget (layoutgen plan prints it and the utilization it renders); vLLM refuses to "
        "start when less than it is free"
    ) in warnings
    assert "hf_secret" not in yaml and any("HF_TOKEN looks like a secret" in w for w in warnings)


def test_python_module_entrypoint() -> None:
    doc, _, _ = _imported(
        "CUDA_VISIBLE_DEVICES=1 python3 -m vllm.entrypoints.openai.api_server "
        "--model /m/q --port 9000 --enforce-eager --served-model-name q"
    )
    (svc,) = doc["services"].values()
    assert svc["runtime"] == "vllm" and svc["gpus"] == ["gpu1"]
    assert svc["enforce_eager"] is True and svc["served_model_name"] == "q"
    # vLLM's defaults: the model's length, the release's scheduler limit (max_num_seqs
    # unwritten), and a KV that holds one full-length request (its start check)
    assert svc["ctx"] == 0 and svc["parallel"] == 1 and "max_num_seqs" not in svc


def test_vllm_image_in_podman_maps_volume_devices_and_tag() -> None:
    doc, warnings, _ = _imported(
        "podman run -d --name chat --device nvidia.com/gpu=0 --device nvidia.com/gpu=1 "
        "-p 127.0.0.1:8000:8000 -v /srv/hf/Qwen3-32B:/models/qwen3-32b:ro "
        "-e VLLM_LOGGING_LEVEL=INFO --ipc=host docker.io/vllm/vllm-openai:v0.11.0 "
        "--model /models/qwen3-32b -tp 2 --max-model-len 32k --max-num-seqs 8"
    )
    assert doc["runtimes"]["vllm"] == {
        "kind": "vllm",
        "image": "docker.io/vllm/vllm-openai:v0.11.0",
        "version": "0.11.0",
    }
    assert doc["models"]["qwen3-32b"]["path"] == "/srv/hf/Qwen3-32B"
    svc = doc["services"]["chat"]
    assert svc["gpus"] == ["gpu0", "gpu1"] and svc["ctx"] == 32000 and svc["parallel"] == 8
    assert svc["env"] == {"VLLM_LOGGING_LEVEL": "INFO"}
    assert "cmd.sh:1:171: warning: dropped --ipc=host: the spec has no key for it" in warnings


@pytest.mark.parametrize(
    "rendered",
    [
        "podman/aeon.sh",
        "quadlet/aeon.container",
        "systemd/aeon.service",
        "podman/genesis.sh",
        "quadlet/genesis.container",
        "systemd/genesis.service",
    ],
)
def test_the_rendered_vllm_files_import_to_their_spec(rendered: str) -> None:
    """import(render(spec)) for the vLLM example, from each kind of file render writes
    (out/ is the golden render of layouts/): the service's keys come back."""
    spec = YAML(typ="safe").load((ROOT / "layouts" / "vllm-tower-seed004.yaml").read_text())
    script = ROOT / "out" / "tower-vllm" / rendered
    name = script.stem
    doc, _, _ = _imported(script.read_text(), script.name)
    got = doc["services"][name]
    want = spec["services"][name]
    for key in ("port", "ctx", "gpus", "kv_cache_dtype", "speculative", "env", "args"):
        assert got.get(key) == want.get(key), key
    assert got["parallel"] == want.get("parallel", 2)  # the worker role's 2, rendered
    (runtime,) = doc["runtimes"].values()
    assert runtime["image"] == spec["runtimes"][want["runtime"]]["image"]
    assert runtime["version"] == spec["runtimes"][want["runtime"]]["version"]


@pytest.mark.parametrize(
    "text",
    [
        'vllm serve /m/q --speculative-config \'{"method":"ngram","num_speculative_tokens":4}\'',
        "vllm serve /m/q --pipeline-parallel-size 2",
        "vllm serve /m/q --block-size 32",
    ],
)
def test_what_the_plan_does_not_model_is_dropped_and_said(text: str) -> None:
    doc, warnings, yaml = _imported(text)
    (svc,) = doc["services"].values()
    assert "args" not in svc and "speculative" not in svc
    assert any("dropped" in w for w in warnings) and "# dropped" in yaml


def test_vllm_as_proc_shows_it_python_running_the_script() -> None:
    """/proc/PID/cmdline of 'vllm serve' reads 'python3 /usr/local/bin/vllm serve ...'."""
    doc, warnings, _ = _imported(
        "CUDA_VISIBLE_DEVICES=0 /usr/bin/python3 /usr/local/bin/vllm serve /m/q "
        "--max-model-len 4096"
    )
    (svc,) = doc["services"].values()
    assert svc["runtime"] == "vllm" and svc["ctx"] == 4096 and svc["gpus"] == ["gpu0"]
    assert not any("python3" in w for w in warnings)


def test_tensor_parallel_takes_the_spec_gpus_in_index_order() -> None:
    from layoutgen.importer import SpecGpu

    gpus = [SpecGpu("b", 1), SpecGpu("a", 0), SpecGpu("c", 2)]
    imported = import_text("vllm serve /m/q -tp 2", "cmd.sh", gpus=gpus)
    (svc,) = YAML(typ="safe").load(imported.yaml)["services"].values()
    assert svc["gpus"] == ["a", "b"]


def test_lora_modules_become_lora_adapters_through_the_volumes() -> None:
    doc, _, _ = _imported(
        "podman run -v /srv/q:/models/q:ro -v /srv/lora/a:/adapters/a:ro "
        "-v /srv/lora/b:/adapters/b:ro vllm/vllm-openai:v0.11.0 --model /models/q "
        "--enable-lora --max-loras 2 --max-lora-rank 64 --lora-modules a=/adapters/a "
        '\'{"name": "b", "path": "/adapters/b"}\' --max-num-seqs 4'
    )
    (svc,) = doc["services"].values()
    assert svc["lora"] == {
        "max_loras": 2,
        "max_lora_rank": 64,
        "adapters": [
            {"name": "a", "path": "/srv/lora/a"},
            {"name": "b", "path": "/srv/lora/b"},
        ],
    }
    assert svc["parallel"] == 4 and "args" not in svc
