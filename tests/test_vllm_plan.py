"""vLLM services planned beside llama.cpp ones (issue 17 items 3 and 6).

A vLLM service's footprint per GPU is one budget: its weights share, the
activation peak, non-torch memory and CUDA graphs (the terms of
``layoutgen.runtimes.vllm.memory``), and the KV cache for ``parallel``
requests of ``ctx`` tokens in whole blocks (plus the block pool's null
block).  Checked here: the terms equal vllm_memory's, the rendered
``--gpu-memory-utilization`` never asks for more than the budget, tensor
parallelism halves the weights and KV heads, a GPU shared with llama.cpp
passes vLLM's start-up check in start order, and every refusal is located.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from layoutgen.errors import InvalidInput
from layoutgen.models.profile import load_profile
from layoutgen.render.validate import Validated, validate_file
from layoutgen.runtimes.vllm import memory as vm
from layoutgen.runtimes.vllm import vllm_model
from layoutgen.solve.plan import to_json, to_text

ROOT = Path(__file__).resolve().parent.parent
GIB = 1 << 30

#: a Llama-3-8B-shaped checkpoint cut to 4 layers (config.json keys as hf_hparams reads them)
PROFILE = """\
schema: 1
name: tiny-llama
arch: llama
format: safetensors
source: written by tests/test_vllm_plan.py (Llama-3-8B dimensions, 4 layers)
hparams:
  n_layer: 4
  n_embd: 4096
  n_head: 32
  n_head_kv: 8
  key_length: 128
  value_length: 128
  n_ff: 14336
  vocab: 128256
  n_ctx_train: 131072
  dtype: bfloat16
tensors:
  - {name: model.embed_tokens.weight, type: bf16, shape: [128256, 4096], bytes: 1050673152}
  - {name: "blk.{0..3}.self_attn.q_proj.weight", type: bf16, shape: [4096, 4096], bytes: 33554432}
  - {name: "blk.{0..3}.self_attn.k_proj.weight", type: bf16, shape: [1024, 4096], bytes: 8388608}
  - {name: "blk.{0..3}.self_attn.v_proj.weight", type: bf16, shape: [1024, 4096], bytes: 8388608}
  - {name: "blk.{0..3}.mlp.gate_proj.weight", type: bf16, shape: [14336, 4096], bytes: 117440512}
  - {name: lm_head.weight, type: bf16, shape: [128256, 4096], bytes: 1050673152}
"""

HOST = """\
host:
  name: box
  cpu: {cores: 16, threads: 32}
  ram: 256GiB
  ram_reserve: 16GiB
  podman: "5.4"
  gpus:
    - {id: gpu0, index: 0, vram: 97247MiB, reserve: 1GiB}
    - {id: gpu1, index: 1, vram: 97247MiB, reserve: 1GiB}
models:
  tiny:
    path: /srv/models/tiny/checkpoint
    profile: tiny.yaml
  coder:
    path: /srv/models/coder/Qwen3-Coder-Next-Q4_0.gguf
    profile: %(coder)s
runtimes:
  vllm:
    kind: vllm
    image: docker.io/vllm/vllm-openai:v0.11.0
    version: "%(version)s"
  llama:
    kind: llama.cpp
    image: ghcr.io/ggml-org/llama.cpp:server-cuda-b6123
    version: b6123
services:
"""

CHAT = """\
  chat:
    model: tiny
    runtime: vllm
    role: worker
    port: 8000
    ctx: 32768
    max_num_seqs: 2
    gpus: [gpu0]
"""

CODER = """\
  coder:
    model: coder
    runtime: llama
    role: worker
    port: 8001
    ctx: 65536
    gpus: [gpu0]
"""


def spec_text(services: str, version: str = "0.11.0") -> str:
    coder = ROOT / "layouts" / "models" / "qwen3-coder-next-q4_0.yaml"
    return HOST % {"coder": coder, "version": version} + services


def plan(tmp_path: Path, services: str, version: str = "0.11.0") -> Validated:
    (tmp_path / "tiny.yaml").write_text(PROFILE)
    path = tmp_path / "spec.yaml"
    path.write_text(spec_text(services, version))
    return validate_file(path, "spec.yaml")


def refused(tmp_path: Path, services: str, version: str = "0.11.0") -> list[str]:
    with pytest.raises(InvalidInput) as exc:
        plan(tmp_path, services, version)
    return [d.gcc() for d in exc.value.diagnostics if d.severity.name == "ERROR"]


def model_and_service(tmp_path: Path, tp: int, version: str) -> tuple[vm.VllmModel, vm.VllmService]:
    model = vllm_model(load_profile(tmp_path / "tiny.yaml"), tp)
    service = vm.VllmService(
        gpu_total_bytes=97247 << 20,
        max_model_len=32768,
        max_num_seqs=2,
        max_num_batched_tokens=2048,
        version=version,
        tensor_parallel_size=tp,
    )
    return model, service


def test_single_gpu_terms_are_vllm_memorys(tmp_path: Path) -> None:
    v = plan(tmp_path, CHAT)
    sp = v.plan.service("chat")
    b = sp.budget
    assert b is not None
    model, service = model_and_service(tmp_path, 1, "0.11.0")
    assert b.term("weights") == load_profile(tmp_path / "tiny.yaml").total_bytes
    assert b.term("activation") == vm.activation_estimate(model, service)
    assert b.term("non_torch") == vm.non_torch_estimate(service)
    assert b.term("cudagraph") == vm.cudagraph_estimate(model, service)
    # 4 layers x 8 KV heads x 128 x 2 (K, V) x 2 bytes = 16 KiB a token; 2 requests of
    # 32,768 tokens = 4,096 blocks of 16, and the block pool's null block
    one = vm.kv_needed_one_request(model, service)
    assert one == 32768 * 16384
    assert b.term("kv") == 2 * one + 16 * 16384
    assert b.kv_cache_memory_bytes == b.term("kv")
    assert b.max_concurrency == 2.0 and b.kv_tokens == 65536
    # 0.11.0 captures CUDA graphs after the budget: not in it
    assert not b.cudagraph_in_budget
    inside = ("weights", "activation", "non_torch", "kv")
    assert b.budget == sum(b.term(t) for t in inside)
    total = 97247 << 20
    assert b.utilization == f"{math.floor(b.budget * 1000 / total) / 1000:.3f}"
    assert -(-total * int(b.utilization.replace(".", "")) // 1000) <= b.budget
    part = sp.buffers["CUDA0"]
    assert part.weights == b.term("weights") and part.kv == b.term("kv")
    assert part.compute == b.term("activation") + b.term("non_torch") + b.term("cudagraph")
    assert part.overhead == v.spec.host.gpu_overhead
    assert sp.argv[:4] == ("vllm", "serve", "--model", "/models/tiny/checkpoint")
    argv = list(sp.argv)
    assert argv[argv.index("--gpu-memory-utilization") + 1] == b.utilization
    assert argv[argv.index("--kv-cache-memory-bytes") + 1] == str(b.term("kv"))
    assert argv[argv.index("--max-model-len") + 1] == "32768"
    assert argv[argv.index("--max-num-seqs") + 1] == "2"  # role worker


def test_graphs_in_the_budget_from_0_20(tmp_path: Path) -> None:
    b = plan(tmp_path, CHAT, "0.20.0").plan.service("chat").budget
    assert b is not None and b.cudagraph_in_budget
    assert b.budget == sum(
        b.term(t) for t in ("weights", "activation", "non_torch", "cudagraph", "kv")
    )


def test_without_kv_cache_memory_bytes_vllm_fills_the_rounded_budget(tmp_path: Path) -> None:
    # --kv-cache-memory-bytes came with 0.10.2: before it, vLLM's KV is what the rendered
    # utilization leaves, an estimate that must still hold one request
    v = plan(tmp_path, CHAT, "0.10.1.1")
    b = v.plan.service("chat").budget
    assert b is not None and b.kv_cache_memory_bytes is None
    assert "--kv-cache-memory-bytes" not in v.plan.service("chat").argv
    total = 97247 << 20
    milli = int(b.utilization.replace(".", ""))
    assert b.budget == total * milli // 1000
    assert dict((n, basis) for n, _, basis in b.terms)["kv"] == "estimated"
    model, service = model_and_service(tmp_path, 1, "0.10.1.1")
    assert b.term("kv") >= vm.kv_needed_one_request(model, service)


def test_tensor_parallel_two(tmp_path: Path) -> None:
    v = plan(tmp_path, CHAT.replace("gpus: [gpu0]", "gpus: [gpu0, gpu1]"))
    sp = v.plan.service("chat")
    b = sp.budget
    assert b is not None and b.tensor_parallel_size == 2
    total = load_profile(tmp_path / "tiny.yaml").total_bytes
    assert b.term("weights") == math.ceil(total / 2)
    assert b.kv_bytes_per_token == 8192  # 4 of 8 KV heads per GPU
    assert sp.device_of == {"CUDA0": "gpu0", "CUDA1": "gpu1"}
    assert sp.buffers["CUDA0"] == sp.buffers["CUDA1"]
    argv = list(sp.argv)
    assert argv[argv.index("--tensor-parallel-size") + 1] == "2"
    # 0.11.0 allocates NCCL's buffers before its snapshot (PR #25359): they are not
    # non-torch memory of the profile but baseline, as the CUDA context; what the
    # collectives connect later stays in the profile (0.55 GiB at TP 2, llm-d's H100 runs)
    assert b.term("non_torch") == vm.NON_TORCH_SNAPSHOT + vm.NCCL_AFTER_SNAPSHOT
    assert b.term("nccl") == vm.NON_TORCH_TP - vm.NCCL_AFTER_SNAPSHOT


def test_nccl_buffers_move_outside_the_budget_from_0_11(tmp_path: Path) -> None:
    """vLLM 0.10.2 takes its memory snapshot, then starts NCCL: the buffers are non-torch
    memory its profile subtracts from ``utilization x total``.  0.11.0 starts NCCL first
    (gpu_worker.py init_device, PR #25359): the buffers are already taken when the
    start-up check compares free memory with ``utilization x total``, and are not in it.
    Either way the GPU holds the same bytes; what moves is the rendered utilization and
    what the start-up check finds free."""
    tp2 = CHAT.replace("gpus: [gpu0]", "gpus: [gpu0, gpu1]")
    gpu0_total = 97247 << 20
    ctx = 1 << 30  # host.gpu_overhead's default
    nccl = vm.NON_TORCH_TP
    old = plan(tmp_path, tp2, "0.10.2").plan.service("chat")
    new = plan(tmp_path, tp2, "0.11.0").plan.service("chat")
    bo, bn = old.budget, new.budget
    assert bo is not None and bn is not None
    # before: NCCL inside the budget, as non-torch; no term of its own
    assert bo.term("non_torch") == vm.NON_TORCH_SNAPSHOT + nccl
    assert bo.term_or_zero("nccl") == 0
    assert old.buffers["CUDA0"].overhead == ctx
    # from 0.11.0: NCCL beside the CUDA context, the budget smaller by as much, less
    # the later collectives' memory the profile still sees
    later = vm.NCCL_AFTER_SNAPSHOT
    assert bn.term("non_torch") == vm.NON_TORCH_SNAPSHOT + later
    assert bn.term("nccl") == nccl - later
    assert new.buffers["CUDA0"].overhead == ctx + nccl - later
    assert bo.budget - bn.budget == nccl - later
    assert int(bn.utilization.replace(".", "")) == bn.budget * 1000 // gpu0_total
    # the GPU holds the same either way (but for CUDA graphs: 0.11.0 adds full ones)
    graphs = bo.term("cudagraph"), bn.term("cudagraph")
    assert old.buffers["CUDA0"].total - graphs[0] == new.buffers["CUDA0"].total - graphs[1]
    # the start-up check: alone on the GPU, free = total - reserve - context - NCCL
    for check in bn.start:
        assert check.free == gpu0_total - (1 << 30) - ctx - (nccl - later)
        assert check.requested <= bn.budget and check.ok
    (check_old, _) = bo.start
    assert check_old.free == gpu0_total - (1 << 30) - ctx
    # the plan says where the term lives
    text = to_text(plan(tmp_path, tp2, "0.11.0").plan)
    assert "nccl" in text and "outside the budget, beside the CUDA context" in text


def test_gpu_shared_with_llama_cpp_starts_in_order(tmp_path: Path) -> None:
    v = plan(tmp_path, CHAT + CODER)
    chat, coder = v.plan.service("chat"), v.plan.service("coder")
    assert v.plan.order == ("chat", "coder")  # fixed services by name
    b = chat.budget
    assert b is not None
    (check,) = b.start
    gpu0 = v.spec.host.gpus[0]
    # chat starts first: only the reserve and its own CUDA context are taken
    assert check.before == ()
    assert check.free == gpu0.vram - gpu0.reserve - v.spec.host.gpu_overhead
    assert check.requested <= b.budget and check.ok
    # the device holds both within capacity - reserve, neither exceeding its share
    used = sum(
        p.total for sp in (chat, coder) for p in sp.buffers.values() if p.total and sp.device_of
    )
    assert v.plan.device("gpu0").used <= gpu0.vram - gpu0.reserve
    assert used >= chat.buffers["CUDA0"].total


def test_a_vllm_service_started_after_llama_cpp_is_checked_against_what_it_holds(
    tmp_path: Path,
) -> None:
    later = CHAT.replace("chat:", "zchat:").replace("port: 8000", "port: 8002")
    v = plan(tmp_path, later + CODER)
    b = v.plan.service("zchat").budget
    assert b is not None
    (check,) = b.start
    coder = v.plan.service("coder")
    held = sum(p.total for n, p in coder.buffers.items() if coder.device_of[n] == "gpu0")
    gpu0 = v.spec.host.gpus[0]
    assert check.before == ("coder",)
    assert check.free == gpu0.vram - gpu0.reserve - held - v.spec.host.gpu_overhead
    assert check.ok


def test_vllm_before_0_9_2_must_start_before_what_shares_its_gpu(tmp_path: Path) -> None:
    """0.8.0-0.9.1 subtract everything in use on the GPU after the profile run (the 0.9.0
    wheel's determine_available_memory), so a service started earlier on the same GPU
    would shrink vLLM's KV cache: refused, with the fix; started first, it plans, its
    own CUDA context inside the budget (non-torch memory then)."""
    later = CHAT.replace("chat:", "zchat:").replace("port: 8000", "port: 8002")
    (error,) = refused(tmp_path, later + CODER, version="0.9.1")
    assert "error: services.zchat: vLLM 0.9.1 counts everything in use on GPU gpu0" in error
    assert "started after coder its KV cache would lose the " in error
    assert "start it before them (priority), or use vLLM 0.9.2 or newer" in error
    assert plan(tmp_path, later + CODER, version="0.9.2").plan.service("zchat").budget
    first = plan(tmp_path, CHAT + CODER, version="0.9.1").plan.service("chat").budget
    newer = plan(tmp_path, CHAT + CODER, version="0.9.2").plan.service("chat").budget
    assert first is not None and newer is not None
    # the context inside 0.9.1's budget is the figure beside 0.9.2's (the GPU's class
    # default, or host.gpu_overhead): one context, counted once, in either place
    newer_plan = plan(tmp_path, CHAT + CODER, version="0.9.2").plan.service("chat")
    context = newer_plan.buffers["CUDA0"].overhead
    assert context > 0
    assert first.term("non_torch") == vm.NON_TORCH_BASE + context
    assert newer.term("non_torch") == vm.NON_TORCH_SNAPSHOT
    # what is not KV grows by the context (and the older base) alone; the KV cache is
    # the same asked size either way (each rounded to a whole 0.001 of the GPU)
    grown = (first.budget - first.term("kv")) - (newer.budget - newer.term("kv"))
    assert grown == first.term("non_torch") - newer.term("non_torch")
    assert abs(first.term("kv") - newer.term("kv")) <= (97247 << 20) // 1000


def test_plan_text_and_json_show_the_budget(tmp_path: Path) -> None:
    v = plan(tmp_path, CHAT)
    text = to_text(v.plan)
    assert "chat: vLLM budget per GPU (tensor parallel 1), MiB" in text
    assert "--gpu-memory-utilization" in text and "start check gpu0:" in text
    assert "max concurrency at max_model_len 32,768: 2.00" in text
    doc = json.loads(to_json(v.plan))["services"]["chat"]["vllm"]
    assert doc["gpu_memory_utilization"] == v.plan.service("chat").budget.utilization  # type: ignore[union-attr]
    assert set(doc["per_gpu"]) == {"weights", "activation", "non_torch", "cudagraph", "kv"}
    assert doc["start_check"]["gpu0"]["before"] == []


def test_kv_too_small_for_one_request_is_located_at_ctx(tmp_path: Path) -> None:
    # 7 GiB - 1 GiB reserve - 1 GiB CUDA context - ~3.2 GiB weights and activations
    # leave under 2 GiB, less than one 131,072-token request (2 GiB)
    small = spec_text(CHAT.replace("ctx: 32768", "ctx: 131072")).replace(
        "vram: 97247MiB, reserve: 1GiB}\n    - {id: gpu1",
        "vram: 7GiB, reserve: 1GiB}\n    - {id: gpu1",
    )
    (tmp_path / "tiny.yaml").write_text(PROFILE)
    (tmp_path / "spec.yaml").write_text(small)
    with pytest.raises(InvalidInput) as exc:
        validate_file(tmp_path / "spec.yaml", "spec.yaml")
    (message,) = [d.gcc() for d in exc.value.diagnostics]
    assert message.startswith("spec.yaml:")
    assert (
        ": error: services.chat.ctx: vLLM would refuse to start: one request of 131,072 " in message
    )
    assert "tokens fit: write ctx: " in message


def test_does_not_fit_names_device_need_capacity_shortfall(tmp_path: Path) -> None:
    errors = refused(
        tmp_path,
        CHAT.replace("ctx: 32768", "ctx: 131072").replace(
            "role: worker", "role: worker\n    parallel: 64"
        ),
    )
    assert len(errors) == 1
    assert "services.chat: does not fit GPU gpu0 (its CUDA0) even alone: needs" in errors[0]
    assert "short by" in errors[0]


@pytest.mark.parametrize(
    ("key", "value", "instead"),
    [
        ("cache_type_k", "q8_0", "use 'kv_cache_dtype:'"),
        ("ubatch", "512", "'batch:' is --max-num-batched-tokens"),
        ("gpu_layers", "10", "vLLM keeps every layer on the GPUs"),
        ("tensor_split", "{gpu0: 1}", "tensor parallel"),
        ("threads", "8", "remove it"),
        ("mlock", "true", "remove it"),
        ("reasoning", "false", "remove it"),
        ("experts", "host", "vLLM keeps every expert on the GPUs"),
    ],
)
def test_llama_cpp_keys_are_refused_on_vllm(
    tmp_path: Path, key: str, value: str, instead: str
) -> None:
    (error,) = refused(tmp_path, CHAT + f"    {key}: {value}\n")
    assert (
        f"error: services.chat.{key}: vllm has no {key} (a llama.cpp and ik_llama.cpp setting); "
        in error
    )
    assert instead in error


@pytest.mark.parametrize(
    "key",
    ["kv_cache_dtype: fp8", "enforce_eager: true", "served_model_name: x", "env: {VLLM_X: '1'}"],
)
def test_vllm_keys_are_refused_on_llama_cpp(tmp_path: Path, key: str) -> None:
    (error,) = refused(tmp_path, CODER + f"    {key}\n")
    name = key.split(":")[0]
    assert (
        f"error: services.coder.{name}: llama.cpp has no {name} (a vllm setting); remove it"
        in error
    )


@pytest.mark.parametrize(
    "name", ["VLLM_API_KEY", "HF_TOKEN", "VLLM_SECRET_X", "NCCL_PASSWORD", "VLLM_MY_TOKEN"]
)
def test_secret_like_env_names_are_refused(tmp_path: Path, name: str) -> None:
    errors = refused(tmp_path, CHAT + f"    env: {{{name}: x}}\n")
    assert len(errors) == 1 and "services.chat.env" in errors[0], errors


def test_env_values_must_be_literal(tmp_path: Path) -> None:
    (error,) = refused(tmp_path, CHAT + "    env: {VLLM_X: 'a b'}\n")
    assert "cannot be written literally" in error


def test_gguf_profile_on_vllm_is_refused(tmp_path: Path) -> None:
    (error,) = refused(tmp_path, CHAT.replace("model: tiny", "model: coder"))
    assert "services.chat.model: model 'coder' is a GGUF" in error
    assert "vLLM's GGUF support is experimental" in error


def test_too_many_gpus_for_the_kv_heads(tmp_path: Path) -> None:
    # 32 heads, 8 KV heads: 3 GPUs divide neither
    three = spec_text(CHAT.replace("gpus: [gpu0]", "gpus: [gpu0, gpu1, gpu2]")).replace(
        "    - {id: gpu1, index: 1, vram: 97247MiB, reserve: 1GiB}\n",
        "    - {id: gpu1, index: 1, vram: 97247MiB, reserve: 1GiB}\n"
        "    - {id: gpu2, index: 2, vram: 97247MiB, reserve: 1GiB}\n",
    )
    (tmp_path / "tiny.yaml").write_text(PROFILE)
    (tmp_path / "spec.yaml").write_text(three)
    with pytest.raises(InvalidInput) as exc:
        validate_file(tmp_path / "spec.yaml", "spec.yaml")
    (error,) = [d.gcc() for d in exc.value.diagnostics]
    assert (
        "services.chat.gpus: vLLM runs one tensor-parallel rank per GPU and cannot split" in error
    )
    assert "over 3 GPUs; give it 1, 2, 4, 8, 16 GPUs" in error


def test_owned_flags_are_refused_in_args(tmp_path: Path) -> None:
    (error,) = refused(tmp_path, CHAT + "    args: [--gpu-memory-utilization, '0.9']\n")
    assert "services.chat.args[0]: --gpu-memory-utilization is decided by layoutgen" in error


def test_api_key_file_is_refused_on_vllm(tmp_path: Path) -> None:
    (error,) = refused(tmp_path, CHAT + "    api_key: {file: /srv/keys/chat}\n")
    assert "services.chat.api_key.file: vllm reads its key from VLLM_API_KEY" in error


def test_old_vllm_versions_are_refused(tmp_path: Path) -> None:
    (error,) = refused(tmp_path, CHAT, "0.6.4")
    assert "runtimes.vllm.version" in error and "V0 engine" in error
    # what to do: the release to move to, and how to write it
    assert 'move to vLLM 0.9.2 or later (write version: "0.9.2"' in error
    assert "docker.io/vllm/vllm-openai:v0.9.2" in error


def test_no_version_plans_with_the_newest_rules(tmp_path: Path) -> None:
    (tmp_path / "tiny.yaml").write_text(PROFILE)
    (tmp_path / "spec.yaml").write_text(spec_text(CHAT).replace('    version: "0.11.0"\n', ""))
    v = validate_file(tmp_path / "spec.yaml", "spec.yaml")
    assert v.plan.runtimes["vllm"]["rules"] == "newest"
    assert "runtime vllm (vllm): planned with the newest rules" in to_text(v.plan)


def test_same_spec_same_plan(tmp_path: Path) -> None:
    a = to_json(plan(tmp_path, CHAT + CODER).plan)
    b = to_json(plan(tmp_path, CODER + CHAT).plan)
    assert a == b


def test_the_ctx_a_refusal_suggests_fits(tmp_path: Path) -> None:
    """The refusal's "about N tokens fit" must be a ctx that then validates: the room it
    measures is the fit check's, CUDA graphs outside the budget (vLLM < 0.20) included;
    and it does not suggest fp8 to a service already on fp8 (seed 004's AEON).  The
    seed's own 122,880 tokens fit since its two RTX 5060 Tis are planned without peer
    access (0.30 GiB of NCCL memory a card, not 1.79); the model's 262,144 does not."""
    import re

    layout = ROOT / "layouts" / "vllm-tower-seed004.yaml"
    text = layout.read_text().replace("profile: models/", f"profile: {ROOT}/layouts/models/")
    marker = "    ctx: 122880"
    assert marker in text  # the layout runs the seed's own context
    spec = tmp_path / "tower.yaml"
    spec.write_text(text)
    validate_file(spec, "tower.yaml")  # what the seed ran
    spec.write_text(text.replace(marker, "    ctx: 262144", 1))
    with pytest.raises(InvalidInput) as exc:
        validate_file(spec, "tower.yaml")
    (message,) = [d.message for d in exc.value.diagnostics if "vLLM would refuse" in d.message]
    assert "kv_cache_dtype: fp8" not in message  # AEON is fp8 already
    found = re.search(r"write ctx: (\d+) or less", message)
    assert found is not None
    fits = int(found[1])
    spec.write_text(text.replace(marker, f"    ctx: {fits}", 1))
    validate_file(spec, "tower.yaml")  # the suggestion holds


VISION = (
    "  - {name: vision_model.patch_embedding.weight, type: bf16, shape: [1280, 3, 14, 14], "
    "bytes: 1505280}\n"
)


@pytest.mark.parametrize(
    ("args", "ok"),
    [
        ("", False),
        ("    args: [--limit-mm-per-prompt, '{\"image\": 1}']\n", False),
        ("    args: [--limit-mm-per-prompt, '{\"image\": 0}']\n", True),
        ("    args: ['--limit-mm-per-prompt=image=0,video=0']\n", True),
    ],
    ids=["none", "one-image", "json-zero", "pairs-zero"],
)
def test_a_multimodal_checkpoint_is_planned_text_only(tmp_path: Path, args: str, ok: bool) -> None:
    """vLLM's profiling run also encodes dummy images through a vision tower, which the
    activation estimate does not size (Llama-3.2-11B-Vision's log, tests/vllm_logs): a
    checkpoint with encoder tensors is refused unless every modality is limited to 0."""
    (tmp_path / "tiny.yaml").write_text(PROFILE + VISION)
    path = tmp_path / "spec.yaml"
    path.write_text(spec_text(CHAT + args))
    if ok:
        validate_file(path, "spec.yaml")
        return
    with pytest.raises(InvalidInput) as exc:
        validate_file(path, "spec.yaml")
    (err,) = [d.gcc() for d in exc.value.diagnostics if d.severity.name == "ERROR"]
    assert err.startswith("spec.yaml:") and "services.chat.model:" in err
    assert "carries a multimodal encoder (1 MiB of vision/audio tensors)" in err
    assert "--limit-mm-per-prompt" in err


def test_language_model_only_needs_vllm_0_17(tmp_path: Path) -> None:
    """--language-model-only came with vLLM 0.17.0 (PR #34120; the 0.16.0 wheel has no
    such flag, so that vLLM would not start): older versions are told the flag they have."""
    (tmp_path / "tiny.yaml").write_text(PROFILE + VISION)
    path = tmp_path / "spec.yaml"
    lm_only = CHAT + "    args: [--language-model-only]\n"
    path.write_text(spec_text(lm_only, version="0.16.0"))
    with pytest.raises(InvalidInput) as exc:
        validate_file(path, "spec.yaml")
    (err,) = [d.gcc() for d in exc.value.diagnostics if d.severity.name == "ERROR"]
    assert "services.chat.args: vLLM 0.16.0 has no --language-model-only (from 0.17.0)" in err
    path.write_text(spec_text(lm_only, version="0.17.0"))
    validate_file(path, "spec.yaml")  # text-only: the encoder is no longer refused


@pytest.mark.parametrize("gpus", ["[gpu0]", "[gpu0, gpu1]"], ids=["tp1", "tp2"])
def test_a_vllm_service_gets_a_decode_speed(tmp_path: Path, gpus: str) -> None:
    """Issue 18 asks a speed per service: a vLLM token reads one rank's weight share and
    its KV at half the request (ranks read theirs at once), over the GPU's bandwidth
    times the machine's efficiency, plus the fixed per-token cost."""
    (tmp_path / "tiny.yaml").write_text(PROFILE)
    text = spec_text(CHAT.replace("[gpu0]", gpus)).replace(
        "  ram_reserve: 16GiB\n",
        "  ram_reserve: 16GiB\n  memory_bandwidth: 100GB/s\n  gpu_efficiency: 0.5\n",
    )
    text = text.replace("reserve: 1GiB}", "reserve: 1GiB, bandwidth: 1000GB/s}")
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    sp = validate_file(path, "spec.yaml").plan.service("chat")
    assert sp.budget is not None and not isinstance(sp.speed, str) and sp.speed is not None
    one = sp.buffers["CUDA0"]
    # depth 0 (llama-bench tg128's) unless asked: plan --depth 16384
    # not the embedding (a row a token): the rank's share of the rest
    total = 2 * 1050673152 + 4 * (33554432 + 2 * 8388608 + 117440512)
    read = one.weights * (total - 1050673152) / total
    assert sp.speed.decode_tps == pytest.approx(1 / (read / (0.5 * 1000e9) + 0.5e-3))
    from layoutgen.solve.plan_speed import at_depth

    read += sp.budget.kv_bytes_per_token * (32768 // 2)
    deep = at_depth(sp.speed, 32768 // 2)
    assert deep.decode_tps == pytest.approx(1 / (read / (0.5 * 1000e9) + 0.5e-3))
    assert sp.speed.host_demand == 0  # a GPU lane asks nothing of host RAM


def test_no_version_says_which_release_rules_were_assumed(tmp_path: Path) -> None:
    """Without 'version:' a vLLM service is planned by the newest release's rules alone
    (no epochs, unlike llama.cpp): validate warns, names the release and the rules that
    depend on it, and the release to write: the image's tag where it names one."""
    from layoutgen.runtimes.vllm import NEWEST

    (tmp_path / "tiny.yaml").write_text(PROFILE)
    unversioned = spec_text(CHAT).replace('    version: "0.11.0"\n', "")
    for image, fix in (
        (
            "docker.io/vllm/vllm-openai:v0.11.0",
            'its image\'s tag says v0.11.0: write version: "0.11.0"',
        ),
        (
            "registry.home.arpa/vllm-genesis:custom",
            "write the release its image holds as 'version:'",
        ),
    ):
        (tmp_path / "spec.yaml").write_text(
            unversioned.replace("docker.io/vllm/vllm-openai:v0.11.0", image)
        )
        v = validate_file(tmp_path / "spec.yaml", "spec.yaml")
        (text,) = [w.message for w in v.warnings if "no 'version:'" in w.message]
        assert "runtimes.vllm: no 'version:', so service chat is planned by vLLM" in text
        assert f"vLLM {NEWEST}'s rules (the newest layoutgen read)" in text
        assert "the CUDA context beside the budget (from 0.9.2)" in text
        assert "CUDA graphs estimated inside --gpu-memory-utilization (from 0.20.0)" in text
        assert fix in text, text
    # a written release: no such warning
    v = plan(tmp_path, CHAT)
    assert not [w for w in v.warnings if "no 'version:'" in w.message]
