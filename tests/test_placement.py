"""Weight placement against seed 001/003's logged buffers (GLM-5.1 IQ3_KS on ik_llama.cpp)."""

from __future__ import annotations

import pytest

from layoutgen.core.placement import loaded, place_weights, split_by_count
from layoutgen.models.profile import Profile, load_profile
from layoutgen.runtimes.ik_llama_cpp import IkLlamaCpp
from layoutgen.runtimes.ik_llama_cpp.placement import computed_wkv_b, split_by_size, split_sizes
from layoutgen.runtimes.llama_cpp import LlamaCpp

from conftest import ROOT

MiB = 2**20
GiB = 2**30

IK, MAIN = IkLlamaCpp(), LlamaCpp()


@pytest.fixture(scope="module")
def glm() -> Profile:
    return load_profile(ROOT / "layouts" / "models" / "glm-5.1-iq3_ks.yaml")


def _experts_on(layers: dict[str, range]) -> dict[int, str]:
    return {layer: dev for dev, rng in layers.items() for layer in rng}


def _one_gpu(glm: Profile, experts: dict[int, str]) -> dict[str, int]:
    layers = {i: "CUDA0" for i in range(glm.hparams.n_layer)}
    host = IK.host_buffer(gpus=True, host_overrides=True, mmap=True)
    return place_weights(glm, IK, layers, experts, host, "CUDA0").buffers


def test_all_experts_on_host_one_gpu(glm: Profile) -> None:
    buffers = _one_gpu(glm, {})
    # Seed 001 configuration 3: "llm_load_tensors:  CUDA_Host buffer size = 307110.47 MiB"
    assert f"{buffers['CUDA_Host'] / MiB:.2f}" == "307110.47"
    # "CUDA0 buffer size = 14498.95 MiB": every non-expert tensor ik loads, the DSA
    # indexer included; the profile's types for them are fitted (its source: says
    # how) and land 2.85 MiB (0.02 %) short. Issue 4 asks for 1 %.
    assert buffers["CUDA0"] / MiB == pytest.approx(14498.95, rel=0.001)
    assert set(buffers) == {"CUDA0", "CUDA_Host"}


def test_n_cpu_moe_64_one_gpu(glm: Profile) -> None:
    # --n-cpu-moe 64 on one GPU: experts of blk.0-63 in host memory (blk.3-63 have
    # experts), blk.64-77 on the GPU. Seed 001: "Allocating 244.02 GiB of pinned host memory".
    buffers = _one_gpu(glm, _experts_on({"CUDA0": range(64, 78)}))
    assert f"{buffers['CUDA_Host'] / GiB:.2f}" == "244.02"


# KV per layer at ctx 32768, q8_0, -mla 3: 32768 cells x 576 x 34/32 B (seed 001:
# 78 layers x this = "KV self size = 1491.75 MiB"); the nextn layer has none.
KV_32K = {n: 32768 * 576 * 34 // 32 for n in range(78)}


def _ik_split(glm: Profile, ctx: int = 32768) -> dict[int, str]:
    kv = {n: b * ctx // 32768 for n, b in KV_32K.items()}
    return split_by_size(*split_sizes(glm, kv, 8192), ("CUDA0", "CUDA1"), (1, 1))


def test_seed_003_head15_tail4_host_buffer(glm: Profile) -> None:
    layers = _ik_split(glm, ctx=65536)  # seed 003: --ctx-size 65536 -b 8192 -ub 8192
    experts = _experts_on({"CUDA0": range(3, 18), "CUDA1": range(74, 78)})
    w = place_weights(glm, IK, layers, experts, "CUDA_Host", "CUDA1")
    # Seed 003: "CUDA_Host 229,438 MiB" (56 middle expert layers + token embeddings).
    assert round(w.buffers["CUDA_Host"] / MiB) == 229438
    # Seed 003 logged CUDA0 68,698 / CUDA1 23,473 MiB; the expert part is exact
    # (15 and 4 x 4088 MiB), the rest is the fitted non-expert part (-0.02 % above).
    assert w.buffers["CUDA0"] / MiB == pytest.approx(68698, rel=0.001)
    assert w.buffers["CUDA1"] / MiB == pytest.approx(23473, rel=0.001)


def test_ik_split_matches_seed_001_kv_split(glm: Profile) -> None:
    # Seed 001 configuration 1 (2 GPUs) logged KV CUDA0 784.15 / CUDA1 707.64 MiB:
    # 41 and 37 of the 78 KV layers (20,054,528 B each on CUDA), so blk.0-40 on
    # CUDA0 and blk.41-77 (+ nextn blk.78, no KV) on CUDA1.
    layers = _ik_split(glm)
    assert [n for n, d in sorted(layers.items()) if d == "CUDA0"] == list(range(0, 41))
    assert [n for n, d in sorted(layers.items()) if d == "CUDA1"] == list(range(41, 79))


def test_two_gpu_weights_match_seed_001(glm: Profile) -> None:
    # Seed 001 configuration 2 (--cpu-moe, 2 GPUs): "CUDA0 buffer size = 7378.05 MiB",
    # "CUDA1 buffer size = 7120.90 MiB": the split above puts 41 layers' non-expert
    # tensors on CUDA0 and 37 plus blk.78's attn_k_b/attn_v_b and the output on CUDA1.
    # Both sides must agree, which pins the per-layer and the output share apart.
    w = place_weights(glm, IK, _ik_split(glm), {}, "CUDA_Host", "CUDA1")
    assert w.buffers["CUDA0"] / MiB == pytest.approx(7378.05, rel=0.001)
    assert w.buffers["CUDA1"] / MiB == pytest.approx(7120.90, rel=0.001)
    assert f"{w.buffers['CUDA_Host'] / MiB:.2f}" == "307110.47"


def test_every_loaded_tensor_is_placed_once_and_skips_are_the_runtimes(glm: Profile) -> None:
    w = place_weights(glm, IK, {}, {}, "CUDA_Host", None)
    names = [t.name for t in glm.tensors()]
    assert sorted([*w.tensor_buffer, *w.skipped]) == sorted(names)
    # ik_llama.cpp skips nextn blk.78 (but for attn_k_b/attn_v_b), nothing else: the
    # DSA indexer of blk.0-77 is loaded (create_glm_dsa_tensors, flags 0 there).
    assert w.skipped and all(n.startswith("blk.78.") for n in w.skipped)
    assert "blk.77.indexer.attn_q_b.weight" in w.tensor_buffer
    assert "blk.78.attn_k_b.weight" in w.tensor_buffer
    assert sum(w.buffers.values()) == sum(t.nbytes for t in loaded(glm, IK))


def test_host_buffer_names() -> None:
    assert IK.host_buffer(gpus=True, host_overrides=True, mmap=True) == "CUDA_Host"
    assert IK.host_buffer(gpus=True, host_overrides=False, mmap=True) == "CPU"
    assert MAIN.host_buffer(gpus=True, host_overrides=True, mmap=True) == "CPU_Mapped"
    assert MAIN.host_buffer(gpus=True, host_overrides=True, mmap=False) == "CUDA_Host"
    assert MAIN.host_buffer(gpus=False, host_overrides=False, mmap=True) == "CPU_Mapped"


def test_mainline_count_split_puts_the_output_on_the_last_device() -> None:
    # 79 layers + output = 80 slots; equal shares: blk.0-39 / blk.40-78 (+ output).
    split = split_by_count(range(79), ("CUDA0", "CUDA1"), (1, 1))
    assert max(n for n, d in split.items() if d == "CUDA0") == 39
    assert min(n for n, d in split.items() if d == "CUDA1") == 40


def test_ik_computes_wkv_b_for_mla_ggufs_without_it(glm: Profile) -> None:
    # ik_llama.cpp src/llama.cpp: with -mla 2/3 and no attn_kv_b in the GGUF it
    # computes one per layer as q8_0, [kv_lora_rank, n_head * (qk_nope + v_head)]:
    # GLM-5.1: [512, 64 * (192 + 256)] = 28672 rows of 512/32 * 34 B.
    created = computed_wkv_b(glm, 3)
    assert set(created) == set(range(79))  # blk.78 keeps attn_k_b/attn_v_b, so it too
    assert set(created.values()) == {28672 * 512 // 32 * 34}
    assert computed_wkv_b(glm, 1) == {}  # -mla 1 does not use wkv_b


def _tied_profile(arch: str = "gemma3") -> Profile:
    """Two layers, token_embd and no output.weight: the output is tied to it."""
    from layoutgen.models.profile import HParams
    from layoutgen.models.quants import tensor_nbytes
    from layoutgen.models.tensors import Folded

    def entry(name: str, qtype: str, shape: tuple[int, ...]) -> Folded:
        return Folded(name, qtype, shape, tensor_nbytes(qtype, shape))

    entries = (
        entry("token_embd.weight", "q8_0", (256, 1024)),
        entry("blk.{0..1}.attn_q.weight", "q8_0", (256, 256)),
        entry("output_norm.weight", "f32", (256,)),
    )
    hp = HParams(n_layer=2, n_embd=256, n_head=2, n_head_kv=2, vocab=1024)
    return Profile("tied", arch, "test", hp, entries)


def test_a_tied_output_is_copied_to_the_output_gpu() -> None:
    """llama.cpp's loader makes the output from token_embd (TENSOR_DUPLICATED) in the
    output layer's buffer when the GGUF has no output.weight: a second copy on the GPU
    (ik discussion 334: gemma3 27B's 1,102.77 MiB token_embd again on CUDA0).  With the
    output on the host (CPU only) both are one tensor; an encoder has no output."""
    from layoutgen import runtimes

    rt = runtimes.get("llama.cpp")
    p = _tied_profile()
    embd = next(t.nbytes for t in p.tensors() if t.name == "token_embd.weight")
    gpu = place_weights(p, rt, {0: "CUDA0", 1: "CUDA0"}, {}, "CPU", "CUDA0")
    cpu = place_weights(p, rt, {}, {}, "CPU", None)
    assert gpu.buffers["CPU"] == embd
    layers_and_norm = sum(t.nbytes for t in p.tensors() if t.name != "token_embd.weight")
    assert gpu.buffers["CUDA0"] == layers_and_norm + embd
    assert cpu.buffers == {"CPU": sum(t.nbytes for t in p.tensors())}
    bert = place_weights(_tied_profile("bert"), rt, {0: "CUDA0", 1: "CUDA0"}, {}, "CPU", "CUDA0")
    assert bert.buffers["CUDA0"] == layers_and_norm
