"""Speculative decoding with a draft model on llama.cpp (issue 14 item 2).

``draft: {model, gpus, cache_type_k, cache_type_v, max_tokens}`` on a llama.cpp
service loads a second, smaller GGUF in the same process (llama.cpp 11434
common/speculative.cpp ``common_base_params_to_speculative`` and
``common_speculative_init_result``): with the draft's devices and every layer
offloaded, a context of the target's n_ctx and slots, and the draft's cache
types.  The bytes below are derived by hand from the two small profiles here,
independently of the footprint code.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from layoutgen.errors import InvalidInput
from layoutgen.render.artifacts import render
from layoutgen.render.validate import Validated, validate_file
from layoutgen.solve.plan import Part

from realtools import quadlet_dryrun, unit_values

F16, F32 = 2, 4


def _profile(name: str, n_layer: int, embd: int, heads: int, ff: int, vocab: int) -> str:
    kv = 2 * 128  # 2 KV heads of 128
    layer = f"blk.{{0..{n_layer - 1}}}."
    tensors = [
        ("token_embd.weight", "f16", [embd, vocab]),
        (layer + "attn_norm.weight", "f32", [embd]),
        (layer + "attn_q.weight", "f16", [embd, embd]),
        (layer + "attn_k.weight", "f16", [embd, kv]),
        (layer + "attn_v.weight", "f16", [embd, kv]),
        (layer + "attn_output.weight", "f16", [embd, embd]),
        (layer + "ffn_norm.weight", "f32", [embd]),
        (layer + "ffn_up.weight", "f16", [embd, ff]),
        (layer + "ffn_gate.weight", "f16", [embd, ff]),
        (layer + "ffn_down.weight", "f16", [ff, embd]),
        ("output_norm.weight", "f32", [embd]),
        ("output.weight", "f16", [embd, vocab]),
    ]
    lines = "".join(
        f'  - {{name: "{n}", type: {t}, shape: {shape}, '
        f"bytes: {math.prod(shape) * (F16 if t == 'f16' else F32)}}}\n"
        for n, t, shape in tensors
    )
    return f"""\
schema: 1
name: {name}
arch: llama
source: written by tests/test_draft.py
hparams:
  n_layer: {n_layer}
  n_embd: {embd}
  n_head: {heads}
  n_head_kv: 2
  key_length: 128
  value_length: 128
  n_ff: {ff}
  vocab: {vocab}
  n_ctx_train: 8192
tensors:
{lines}"""


BIG = _profile("big", 4, 1024, 8, 2816, 32000)
SMALL = _profile("small", 2, 512, 4, 1408, 32064)  # 64 tokens more: within llama.cpp's 128
OTHER = _profile("other", 2, 512, 4, 1408, 151936)

SPEC = """\
host:
  name: box
  cpu: {cores: 16, threads: 32}
  ram: 256GiB
  ram_reserve: 16GiB
  podman: "5.4"
  gpus:
    - {id: gpu0, index: 0, vram: 24GiB, reserve: 1GiB}
    - {id: gpu1, index: 1, vram: 24GiB, reserve: 1GiB}
    - {id: gpu2, index: 2, vram: 24GiB, reserve: 1GiB}
models:
  big:
    path: /srv/models/big/big-f16.gguf
    profile: big.yaml
  small:
    path: /srv/models/small/small-f16.gguf
    profile: small.yaml
  other:
    path: /srv/models/other/other-f16.gguf
    profile: other.yaml
  hf:
    path: /srv/models/hf/checkpoint
    profile: hf.yaml
runtimes:
  llama:
    kind: llama.cpp
    image: ghcr.io/ggml-org/llama.cpp:server-cuda-b11434
    version: b11434
  ik:
    kind: ik_llama.cpp
    image: registry.home.arpa/ik_llama.cpp:b4357
    version: "4357"
  vllm:
    kind: vllm
    image: docker.io/vllm/vllm-openai:v0.11.0
    version: "0.11.0"
services:
  coder:
    model: big
    runtime: %(runtime)s
    role: worker
    port: 8001
    ctx: 8192
    gpus: [gpu0, gpu1]
"""


def validated(tmp_path: Path, extra: str = "", runtime: str = "llama") -> Validated:
    (tmp_path / "big.yaml").write_text(BIG)
    (tmp_path / "small.yaml").write_text(SMALL)
    (tmp_path / "other.yaml").write_text(OTHER)
    hf = _profile("hf", 2, 512, 4, 1408, 32000).replace(
        "arch: llama", "arch: llama\nformat: safetensors"
    )
    (tmp_path / "hf.yaml").write_text(hf)
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC % {"runtime": runtime} + extra)
    return validate_file(path, "spec.yaml")


def refused(tmp_path: Path, extra: str, runtime: str = "llama") -> list[str]:
    with pytest.raises(InvalidInput) as exc:
        validated(tmp_path, extra, runtime)
    return [d.gcc() for d in exc.value.diagnostics if d.severity.name == "ERROR"]


def _delta(a: Part | None, b: Part, key: str) -> int:
    return int(getattr(b, key)) - (0 if a is None else int(getattr(a, key)))


# the draft's bytes by hand: 2 layers of 512 wide, FFN 1408, 2 KV heads of 128
LAYER = 2 * 512 * F32 + (2 * 512 * 512 + 2 * 512 * 256 + 3 * 512 * 1408) * F16
OUTPUT = 512 * F32 + 512 * 32064 * F16  # output_norm and output, on the last device
EMBD = 512 * 32064 * F16  # token_embd stays on the host
# K and V, 2 layers x 2 KV heads x 128 x ctx 8192 (the target's, all slots) x f16
KV_F16 = 2 * 2 * 2 * 128 * 8192 * F16


def test_draft_weights_kv_and_compute_on_its_gpu(tmp_path: Path) -> None:
    plain = validated(tmp_path).plan.service("coder")
    sp = validated(tmp_path, "    draft: {model: small, gpus: [gpu1]}\n").plan.service("coder")
    gpu1, host = sp.buffers["CUDA1"], sp.buffers["CPU_Mapped"]
    assert _delta(plain.buffers["CUDA1"], gpu1, "weights") == 2 * LAYER + OUTPUT
    assert _delta(plain.buffers["CUDA1"], gpu1, "kv") == KV_F16
    assert _delta(plain.buffers["CUDA1"], gpu1, "compute") > 0
    assert gpu1.basis["compute"] == "upper-bound"
    assert gpu1.basis["weights"] == gpu1.basis["kv"] == "exact"
    # one process: no second CUDA context
    assert _delta(plain.buffers["CUDA1"], gpu1, "overhead") == 0
    assert _delta(plain.buffers["CPU_Mapped"], host, "weights") == EMBD
    # nothing of the draft on the GPU it does not use
    for key in ("weights", "kv", "compute"):
        assert _delta(plain.buffers["CUDA0"], sp.buffers["CUDA0"], key) == 0
    # the plan JSON tells the draft's share apart
    assert sp.draft["CUDA1"].weights == 2 * LAYER + OUTPUT
    assert sp.draft["CUDA1"].kv == KV_F16 and "CUDA0" not in sp.draft
    assert plain.draft == {}


def test_the_plan_json_shows_the_drafts_share(tmp_path: Path) -> None:
    import json

    from layoutgen.solve.plan import to_json

    v = validated(tmp_path, "    draft: {model: small, gpus: [gpu1]}\n")
    draft = json.loads(to_json(v.plan))["services"]["coder"]["draft"]
    assert draft["CUDA1"] == {
        "weights": 2 * LAYER + OUTPUT,
        "kv": KV_F16,
        "compute": v.plan.service("coder").draft["CUDA1"].compute,
    }
    assert "draft" not in json.loads(to_json(validated(tmp_path).plan))["services"]["coder"]


def test_draft_split_over_the_services_gpus_by_default(tmp_path: Path) -> None:
    plain = validated(tmp_path).plan.service("coder")
    sp = validated(tmp_path, "    draft: {model: small}\n").plan.service("coder")
    # -ts 23,23 (inherited) over 2 layers + the output counted as one (llama_model::
    # load_tensors): layer il goes where the cumulative share 0.5, 1 covers il / 3, so
    # layers 0 and 1 on CUDA0, the output on CUDA1
    assert _delta(plain.buffers["CUDA0"], sp.buffers["CUDA0"], "weights") == 2 * LAYER
    assert _delta(plain.buffers["CUDA1"], sp.buffers["CUDA1"], "weights") == OUTPUT
    assert _delta(plain.buffers["CUDA0"], sp.buffers["CUDA0"], "kv") == KV_F16
    assert _delta(plain.buffers["CUDA1"], sp.buffers["CUDA1"], "kv") == 0


def test_draft_argv(tmp_path: Path) -> None:
    extra = "    draft: {model: small, gpus: [gpu1], cache_type_v: q8_0, max_tokens: 8}\n"
    argv = list(validated(tmp_path, extra).plan.service("coder").argv)
    i = argv.index("-md")
    assert argv[i : i + 11] == [
        "-md", "/models/small/small-f16.gguf", "-ngld", "999", "-devd", "CUDA1",
        "-ctvd", "q8_0", "--spec-draft-n-max", "8", "--host",
    ]  # fmt: skip
    assert "-ctkd" not in argv  # f16 is llama.cpp's default (common.h:346)
    both = list(validated(tmp_path, "    draft: {model: small}\n").plan.service("coder").argv)
    assert both[both.index("-devd") + 1] == "CUDA0,CUDA1"


def test_draft_mount_passes_the_quadlet_generator(tmp_path: Path) -> None:
    v = validated(tmp_path, "    draft: {model: small, gpus: [gpu1]}\n")
    files = render(v, "spec.yaml")
    container = files["box/quadlet/coder.container"]
    assert "Volume=/srv/models/small:/models/small:ro,z" in container
    assert "--volume /srv/models/small:/models/small:ro,z" in files["box/podman/coder.sh"] or (
        "/srv/models/small:/models/small:ro,z" in files["box/podman/coder.sh"]
    )
    units = tmp_path / "quadlet"
    units.mkdir()
    for path, text in files.items():
        if "/quadlet/" in path:
            (units / Path(path).name).write_text(text)
    result = quadlet_dryrun(units)
    assert result.ok, (result.rc, result.warnings)
    exec_start = result.exec_start("coder.service")
    assert "/srv/models/small:/models/small:ro,z" in exec_start
    assert "-md /models/small/small-f16.gguf" in exec_start
    assert unit_values(result.units["coder.service"], "Service", "ExecStart")


def test_draft_refused_on_ik_llama_cpp_and_vllm(tmp_path: Path) -> None:
    (ik,) = refused(tmp_path, "    draft: {model: small}\n", runtime="ik")
    assert "spec.yaml:45:5: error: services.coder.draft: ik_llama.cpp has no draft (a " in ik
    assert "llama.cpp setting); ik_llama.cpp's draft model takes other flags" in ik
    errors = refused(tmp_path, "    draft: {model: small}\n", runtime="vllm")
    (vllm,) = [e for e in errors if "services.coder.draft" in e]
    assert "spec.yaml:45:5: error: services.coder.draft: vllm has no draft" in vllm
    assert "no draft-model proposer" in vllm


def test_draft_refusals_are_located(tmp_path: Path) -> None:
    errors = refused(tmp_path, "    draft: {model: smal, gpus: [gpu2]}\n")
    assert errors == [
        "spec.yaml:45:20: error: services.coder.draft.model: no model 'smal' under "
        "'models:'; did you mean 'small'?",
        "spec.yaml:45:33: error: services.coder.draft.gpus: 'gpu2' is not one of the "
        "service's GPUs (gpu0, gpu1); the draft runs in the same process",
    ]
    (same,) = refused(tmp_path, "    draft: {model: big}\n")
    assert "services.coder.draft.model: 'big' is the service's own model" in same


def test_draft_profile_refusals(tmp_path: Path) -> None:
    (vocab,) = refused(tmp_path, "    draft: {model: other}\n")
    assert vocab.startswith("spec.yaml:45:20: error: services.coder.draft.model: model 'other' ")
    assert "has 151,936 tokens, the service's model 'big' 32,000" in vocab
    assert "differs by more than 128 tokens" in vocab
    (hf,) = refused(tmp_path, "    draft: {model: hf}\n")
    assert "services.coder.draft.model: model 'hf' is a Hugging Face checkpoint" in hf
