"""llama.cpp's compute-buffer estimate (runtimes/llama_cpp/compute.py), by its structure.

The expectations are reasoned from how llama.cpp builds and allocates the
graph, not copied from the estimator: the KQ mask is n_kv x ubatch f16, so
it doubles with the context; activations scale with the ubatch; pipeline
parallelism (two devices, no overrides) keeps four copies of every input.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from layoutgen.core.kvcache import KVSettings
from layoutgen.models.profile import HParams
from layoutgen.models.tensors import Tensor
from layoutgen.runtimes.llama_cpp import LlamaCpp, compute

MiB = 1 << 20
DENSE = HParams(n_layer=4, n_embd=512, n_head=8, n_head_kv=2, key_length=64, n_ff=1024, vocab=1000)
MOE = HParams(
    n_layer=4,
    n_embd=512,
    n_head=8,
    n_head_kv=2,
    key_length=64,
    n_expert=16,
    n_expert_used=2,
    expert_ff=256,
    vocab=1000,
)


#: DeepSeek-V3's widths (4 layers, as tests/oracle/gpu/faithful.py writes them)
DSV3 = HParams(
    n_layer=4,
    n_embd=7168,
    n_head=128,
    n_head_kv=1,
    key_length=576,
    value_length=512,
    q_lora_rank=1536,
    kv_lora_rank=512,
    rope_dim=64,
    n_ff=18432,
    n_expert=256,
    n_expert_used=8,
    n_expert_shared=1,
    expert_ff=2048,
    leading_dense=1,
    vocab=129280,
)
#: Qwen3-235B-A22B's widths
QWEN3 = HParams(
    n_layer=4,
    n_embd=4096,
    n_head=64,
    n_head_kv=4,
    key_length=128,
    value_length=128,
    n_expert=128,
    n_expert_used=8,
    expert_ff=1536,
    vocab=151936,
)

MAIN = LlamaCpp()


def _kv(ctx: int = 4096, ubatch: int = 512, parallel: int = 1) -> KVSettings:
    return KVSettings(
        rt=MAIN,
        ctx=ctx,
        parallel=parallel,
        ubatch=ubatch,
        cache_type_k="f16",
        cache_type_v="f16",
    )


def _graph(
    hp: HParams = DENSE,
    kv: KVSettings | None = None,
    devices: tuple[str, ...] = ("D0",),
    host_experts: bool = False,
) -> compute.Graph:
    layers = {il: devices[il * len(devices) // hp.n_layer] for il in range(hp.n_layer)}
    expert_bytes = dict.fromkeys(range(hp.n_layer), 1 * MiB) if hp.n_expert else {}
    experts = {} if host_experts else {il: layers[il] for il in expert_bytes}
    return compute.Graph(
        hparams=hp,
        kv=kv or _kv(),
        devices=devices,
        layers=layers,
        experts=experts,
        expert_layer_bytes=expert_bytes,
    )


def test_mask_is_f16_cells_by_ubatch_and_doubles_with_the_context() -> None:
    assert compute.mask_bytes(_graph(kv=_kv(ctx=4096))) == 4096 * 512 * 2
    assert compute.mask_bytes(_graph(kv=_kv(ctx=8192))) == 2 * compute.mask_bytes(_graph())
    # four slots: four streams of 1024 cells; the mask covers one stream's cells
    assert compute.mask_bytes(_graph(kv=_kv(parallel=4))) == 1024 * 512 * 2
    no_fa = replace(_kv(), flash_attn=False)
    assert compute.mask_bytes(_graph(kv=no_fa)) == 4096 * 512 * 4


def test_doubling_the_context_adds_one_mask_to_device_and_host() -> None:
    small, big = _graph(kv=_kv(ctx=4096)), _graph(kv=_kv(ctx=8192))
    extra = compute.mask_bytes(big) - compute.mask_bytes(small)
    grown = compute.device(big, "D0", output=True) - compute.device(small, "D0", output=True)
    assert grown == extra
    assert compute.host(big) - compute.host(small) == extra


def test_buffers_scale_linearly_with_the_ubatch() -> None:
    # every term (activations, mask rows, embeddings, indices) is per token: at a
    # fixed context, doubling the ubatch doubles the buffer, bar the alignment slack
    one, two = _graph(kv=_kv(ubatch=256)), _graph(kv=_kv(ubatch=512))
    slack = compute.ALIGN_SLACK

    def dev(g: compute.Graph) -> int:
        return compute.device(g, "D0", output=True) - slack

    assert dev(two) == 2 * dev(one)
    assert compute.host(two) - slack == 2 * (compute.host(one) - slack)


def test_host_holds_mask_four_embedding_rows_and_the_index_inputs() -> None:
    g = _graph()
    embd = 512 * 512 * 4  # n_embd x ubatch f32
    # per token: inp_tokens and inp_mixed_tokens (i32), inp_mixed_slots (i64),
    # positions (i32, up to 4 with M-RoPE), k_idxs and v_idxs (i64), out_ids (i32)
    small = 512 * (4 + 4 + 8 + 4 * 4 + 8 + 8 + 4)
    assert compute.small_inputs(g, host=True) == small
    assert compute.host(g) == compute.mask_bytes(g) + 4 * embd + small + compute.ALIGN_SLACK


def test_the_device_copies_the_indices_it_reads_not_the_tokens() -> None:
    # the tokens are read by get_rows on the CPU, where token_embd stays
    g = _graph()
    assert compute.small_inputs(g, host=True) - compute.small_inputs(g, host=False) == 512 * 8


def test_without_flash_attention_v_idxs_index_every_v_element() -> None:
    # the V cache is transposed: one i64 index per token per V element
    # (n_head_kv x head = 2 x 64 here) instead of one per token
    fa, no_fa = _graph(), _graph(kv=replace(_kv(), flash_attn=False))
    grown = compute.small_inputs(no_fa, host=True) - compute.small_inputs(fa, host=True)
    assert grown == 512 * 8 * (2 * 64 - 1)
    # MLA has no V cache: no v_idxs at all
    mla = _graph(DSV3)
    assert compute.small_inputs(mla, host=True) == compute.small_inputs(fa, host=True) - 512 * 8


def test_a_quantized_kv_cache_adds_its_hadamard_rotations() -> None:
    # f32 n_rot x n_rot matrices: K 64 x 64 (the head), V 64 x 64
    q8 = replace(_kv(), cache_type_k="q8_0", cache_type_v="q8_0")
    assert compute.rotation_bytes(_graph(kv=q8)) == 2 * 64 * 64 * 4
    assert compute.rotation_bytes(_graph()) == 0
    assert compute.host(_graph(kv=q8)) - compute.host(_graph()) == 2 * 64 * 64 * 4


def test_pipeline_parallelism_needs_two_devices_and_no_overrides() -> None:
    assert _graph().copies == 1
    assert _graph(devices=("D0", "D1")).copies == 4  # GGML_SCHED_MAX_COPIES of a default build
    assert _graph(MOE, devices=("D0", "D1"), host_experts=True).copies == 1
    assert _graph(MOE, devices=("D0", "D1")).copies == 4  # GGML_SCHED_MAX_COPIES of a default build


def test_pipeline_copies_multiply_the_inputs_not_the_working_set() -> None:
    one = _graph(devices=("D0",))
    two = _graph(devices=("D0", "D1"))
    mask = compute.mask_bytes(one)
    # the host's graph inputs (mask and two embeddings inputs) are held four times
    assert compute.host(two) - compute.host(one) >= 3 * mask
    # the first device receives the mask and three embeddings rows, four times;
    # without the output head its buffer stays below 4x the single-device one
    d0 = compute.device(two, "D0", output=False)
    assert d0 >= 4 * (mask + 3 * 512 * 512 * 4)
    assert d0 < 4 * compute.device(one, "D0", output=True)


def test_logits_count_on_the_output_device_only() -> None:
    # logits: 100k x 512 x 4 B dominate every layer
    wide = DENSE.model_copy(update={"vocab": 100_000})
    g = _graph(wide, devices=("D0", "D1"))
    out = compute.device(g, "D1", output=True)
    assert out - compute.device(g, "D1", output=False) > 150 * MiB
    assert compute.device(g, "D0", output=False) < 100 * MiB


def test_experts_on_host_move_their_activations_to_the_host() -> None:
    # routed gate+up: 2 x 2 x 4096 floats per token
    moe = MOE.model_copy(update={"expert_ff": 4096})
    on_dev = _graph(moe, devices=("D0",))
    on_host = _graph(moe, devices=("D0",), host_experts=True)
    routed = 2 * 2 * 4096 * 512 * 4
    assert compute.device(on_dev, "D0", output=True) >= routed
    assert compute.device(on_host, "D0", output=True) < routed
    assert compute.host(on_host) >= routed
    assert compute.host(on_dev) < routed


def test_cuda_offload_adds_one_host_expert_layer_to_the_first_cuda_device() -> None:
    g = _graph(MOE, devices=("D0",), host_experts=True)
    cuda = replace(g, cuda=frozenset({"D0"}))
    assert compute.device(cuda, "D0", output=True) - compute.device(g, "D0", output=True) == MiB
    # below 32 tokens llama.cpp keeps host-weight ops on the CPU
    tiny = replace(cuda, kv=_kv(ubatch=16))
    assert compute.device(tiny, "D0", output=True) == compute.device(
        replace(tiny, cuda=frozenset()), "D0", output=True
    )


def test_mla_stacks_its_query_tensors_as_llama_cpp_allocates_them() -> None:
    # DeepSeek-V3 on one GPU, -c 32768 -ub 512: llama.cpp's allocator
    # (GGML_ALLOCATOR_DEBUG) reached its high-water mark at layer 0's Qcur with, from
    # the bottom: the three embeddings copies, the f16 mask, the indices, the
    # mixed batch's never-freed dup of inp_mixed_embd, q (n_head x (128 + 64),
    # already freed: a hole), q_nope_absorbed (n_head x 512), q_pe (n_head x 64)
    # and Qcur (n_head x 576): 424.01 MiB, as the H100 logged
    g = replace(_graph(DSV3, kv=_kv(ctx=32768)), mla_q_head=128 + 64)
    floats = 3 * 7168 + 7168 + 128 * (192 + 512 + 64 + 576)
    trace = floats * 512 * 4 + 32768 * 512 * 2
    got = compute.device(g, "D0", output=True)
    assert got >= trace
    # above it: q_a (q_lora_rank, allocated before q; in a hole on this device), the
    # indices and the alignment slack
    assert got - trace <= 1536 * 512 * 4 + compute.small_inputs(g, host=False) + (
        compute.ALIGN_SLACK
    )


def test_an_unknown_qk_nope_is_bounded_from_the_kv_rank() -> None:
    known = replace(_graph(DSV3, kv=_kv(ctx=32768)), mla_q_head=128 + 64)
    unknown = replace(known, mla_q_head=0)
    glm_flash = replace(known, mla_q_head=192 + 64)  # GLM-4.7-Flash: qk_nope 192
    for g in (known, glm_flash):
        assert compute.device(unknown, "D0", output=True) >= compute.device(g, "D0", output=True)


def test_mla_q_head_comes_from_the_query_projection() -> None:
    q_b = Tensor("blk.0.attn_q_b.weight", "q8_0", (1536, 128 * 192), 1)
    q = Tensor("blk.0.attn_q.weight", "q8_0", (7168, 128 * 192), 1)  # no query LoRA
    other = Tensor("blk.0.attn_kv_a_mqa.weight", "q8_0", (7168, 576), 1)
    assert compute.mla_q_head(DSV3, [other, q_b]) == 192
    assert compute.mla_q_head(DSV3, [q]) == 192
    assert compute.mla_q_head(DENSE, [q]) == 0  # not MLA


def test_without_flash_attention_each_layer_holds_the_kq_matrix() -> None:
    # kq = mul_mat(k, q): n_kv x ubatch x n_head f32 (4096 cells, 8 heads)
    kq = 4096 * 512 * 8 * 4
    fa, no_fa = _graph(), _graph(kv=replace(_kv(), flash_attn=False))
    assert compute.device(no_fa, "D0", output=True) - compute.device(fa, "D0", output=True) >= kq
    cpu_fa = replace(fa, devices=(), layers={}, experts={})
    cpu_no_fa = replace(no_fa, devices=(), layers={}, experts={})
    assert compute.host(cpu_no_fa) - compute.host(cpu_fa) >= kq


def test_mla_without_flash_attention_transposes_every_streams_latent() -> None:
    # ggml_cont(ggml_transpose(v)) over the cache view: cells per stream x streams x
    # kv_lora_rank, f16; not per token
    kv = replace(_kv(ctx=8192, parallel=2), flash_attn=False)
    one = compute.device(_graph(DSV3, kv=kv), "D0", output=True)
    kv_ub = replace(kv, ubatch=256)
    half = compute.device(_graph(DSV3, kv=kv_ub), "D0", output=True)
    flat = 4096 * 2 * 512 * 2
    assert one - 2 * (half - flat - compute.ALIGN_SLACK) - compute.ALIGN_SLACK == flat


def test_held_residual_streams_follow_the_input_copies() -> None:
    one = _graph(devices=("D0",))
    two = _graph(devices=("D0", "D1"))
    # one device: the dup of inp_mixed_embd; residual and norm sit where two of
    # the three embeddings copies were
    assert compute._held(one, first=True) == 1
    # pipeline copies pin every input: dup, residual, norm and one more hole
    assert compute._held(two, first=True) == 4
    assert compute._held(two, first=False) == 3
    # a later device without pipeline copies: residual and norm, which a copied-in
    # expert result (n_expert_used wide) makes room for; its own experts' stacked
    # down projections leave one more hole
    moe_two = _graph(MOE, devices=("D0", "D1"), host_experts=True)
    assert compute._held(moe_two, first=False) == 2
    assert compute._held(moe_two, first=False, freed=2) == 2
    assert compute._held(moe_two, first=False, freed=8) == 8
    assert compute._held(moe_two, first=False, fragmented=True) == 3


def test_the_down_projection_stacks_when_gate_and_up_cannot_hold_it() -> None:
    # DeepSeek-V3's widths at 32 heads and a 4096 vocabulary peaked (allocator
    # trace) at gate, up, swiglu (8 x 2048 each), down (8 x 7168) and their sum
    assert compute._routed(DSV3, swiglu_fits=False) == 3 * 8 * 2048 + 8 * 7168 + 7168
    # a Mixtral shape: down (2 x 4096) fits where gate and up (2 x 14336 each) were
    mixtral = MOE.model_copy(update={"n_embd": 4096, "n_expert_used": 2, "expert_ff": 14336})
    assert compute._routed(mixtral, swiglu_fits=False) == 3 * 2 * 14336


def test_cpu_only_holds_the_embeddings_and_the_dup_below_the_logits() -> None:
    # Qwen3-235B on the CPU alone, -c 16384 -ub 512 -fa on: the allocator's peak was
    # inp_embd, three freed embeddings tensors' room, the f16 mask, the mixed
    # batch's dup of inp_mixed_embd and the logits: 352.77 MiB as llama.cpp printed
    g = replace(_graph(QWEN3, kv=_kv(ctx=16384)), devices=(), layers={}, experts={})
    trace = (4 * 4096 + 4096 + 151936) * 512 * 4 + 16384 * 512 * 2
    got = compute.host(g)
    assert got >= trace
    # above it: the final norm (seen in a hole here, counted), indices, slack
    assert got - trace <= 4096 * 512 * 4 + compute.small_inputs(g, host=True) + (
        compute.ALIGN_SLACK
    )


def test_ik_fused_moe_offload_copies_up_and_gate_together(tmp_path: Path) -> None:
    """ik_llama.cpp with -fmoe builds one ``ggml_moe_up_gate`` op reading ffn_up_exps
    and ffn_gate_exps (src/llama.cpp llm_build_moe_ffn, 2025-06 fb6a0d01; HEAD
    src/llama-build-context.cpp); offloaded to the first GPU, the scheduler copies each
    host weight the op reads into that GPU's compute buffer as a split input
    (ggml-backend ggml_backend_sched_split_graph), so both are there at once.
    Without -fmoe up, gate and down are separate ops: one tensor at a time, the
    largest (down).  GLM-5.1 with every expert on the host at -ub 8192 (seed 001)."""
    import re

    from layoutgen.models.profile import load_profile
    from layoutgen.render.validate import validate_file

    layouts = Path(__file__).resolve().parents[1] / "layouts"
    text = (layouts / "glm51-3-cpu-moe-1gpu.yaml").read_text()
    text = text.replace("profile: models/", f"profile: {layouts}/models/")
    text = re.sub(r"\n    measured:\n(?:      .*\n)+", "\n", text)  # estimate, not measured
    text = text.replace("-muge, ", "")

    def cuda0(flag: str | None) -> int:
        path = tmp_path / f"{flag or 'default'}.yaml"
        path.write_text(text if flag is None else text.replace("args: [", f"args: [{flag}, "))
        plan = validate_file(path).plan
        return next(s for s in plan.services if s.name == "grandpa").buffers["CUDA0"].compute

    glm = load_profile(layouts / "models" / "glm-5.1-iq3_ks.yaml")
    size = {t.name: t.nbytes for t in glm.tensors() if t.name.startswith("blk.3.ffn_")}
    up, gate = size["blk.3.ffn_up_exps.weight"], size["blk.3.ffn_gate_exps.weight"]
    assert up + gate > size["blk.3.ffn_down_exps.weight"]  # the pair is the larger copy
    # the same bytes as -muge's one fused tensor (seed 001's 5418.03 MiB: up + gate
    # + the activations), more than one tensor at a time
    # (fused MoE is on by default at the layout's build, 4357: -fmoe is gone since
    # 3928, and the closed-world check refuses it there)
    assert cuda0(None) == cuda0("-muge")
    assert cuda0(None) > cuda0("-no-fmoe")


def test_ik_pipeline_copies_keep_every_offloaded_host_expert(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With pipeline copies (n_copies > 1, ik before build 3941 with overrides) the
    scheduler makes every split input a leaf and an output of each copy
    (ggml-backend ggml_backend_sched_split_graph), so none is freed: the first GPU
    holds every host expert tensor it multiplies, four times, and what the MoE ops of
    the other GPUs' layers read from there.  ik discussion 816's GLM-4.5 on five GPUs
    (experts in host RAM, -ub 4096, n_copies=4) failed allocating 965,110.94 MiB on
    CUDA0; with one copy the same layout holds one expert tensor at a time."""
    from tests.truth import table

    path = table.RECORDS / "ik-glm4moe-d816-reddragongecko-5gpu-oom-ncopies4.yaml"
    record = table.load(path)
    assert "allocating 965110.94 MiB on device 0: cudaMalloc failed" in record["logged"]
    logged = 965110.94 * 2**20
    planned: dict[int, int] = {}
    solve = table._solve

    def keep(spec: dict[str, Any], tmp: Path, name: str) -> Any:
        result = solve(spec, tmp, name)
        if not name.endswith(".pass1"):
            copies = spec["runtimes"]["r"]["sched_copies"]
            planned[copies] = result.plan.services[0].buffers["CUDA0"].compute
        return result

    monkeypatch.setattr(table, "_solve", keep)
    assert table.evaluate(path, tmp_path).reason is None  # roomy GPUs: planned
    one = dict(record, logged=record["logged"].replace("(n_copies=4)", "(n_copies=1)"))
    monkeypatch.setattr(table, "load", lambda _p: one)
    (tmp_path / "one").mkdir()
    table.evaluate(path, tmp_path / "one")
    assert logged * 0.99 <= planned[4] <= logged * 1.01
    # one copy: the fused up+gate of one layer and the activations, not 900 GiB
    assert planned[1] < 8 * 2**30
    # -ngl 93 of 93 layers leaves the output on the CPU: no pipeline parallelism
    # (llama_new_context_with_model wants n_gpu_layers > n_layer), whatever the build
    settings = dict(record["settings"], ngl=93)
    partial = dict(record, settings=settings)
    monkeypatch.setattr(table, "load", lambda _p: partial)
    planned.clear()
    (tmp_path / "partial").mkdir()
    table.evaluate(path, tmp_path / "partial")
    assert planned[4] < 8 * 2**30


def _glm_cpu_moe(tmp_path: Path, repacked: tuple[str, ...]) -> dict[str, int]:
    """Compute per buffer of seed 001's GLM-5.1 with every expert on the host at -ub
    1024 (still offloaded: 1024 x 8 >= 32 x 256), the REPACKED experts as q2_k_r4."""
    import re

    from layoutgen.render.validate import validate_file

    layouts = Path(__file__).resolve().parents[1] / "layouts"
    profile = (layouts / "models" / "glm-5.1-iq3_ks.yaml").read_text()
    for part in repacked:
        profile = re.sub(
            rf'(blk\.\{{3\.\.77\}}\.ffn_{part}_exps\.weight", type: )"iq[34]_ks"(.*bytes: )\d+',
            r'\1"q2_k_r4"\g<2>1056964608',  # 6144 x 2048 x 256 / 256 x 84 B
            profile,
        )
    assert profile.count('"q2_k_r4"') == len(repacked)
    name = "-".join(repacked) or "none"
    (tmp_path / f"{name}.yaml").write_text(profile)
    text = (layouts / "glm51-3-cpu-moe-1gpu.yaml").read_text()
    text = text.replace("profile: models/glm-5.1-iq3_ks.yaml", f"profile: {tmp_path}/{name}.yaml")
    text = text.replace("profile: models/", f"profile: {layouts}/models/")
    text = re.sub(r"\n    measured:\n(?:      .*\n)+", "\n", text)  # estimate, not measured
    text = text.replace("ubatch: 8192", "ubatch: 1024")
    spec = tmp_path / f"{name}.spec.yaml"
    spec.write_text(text)
    sp = next(s for s in validate_file(spec).plan.services if s.name == "grandpa")
    return {b: p.compute for b, p in sp.buffers.items()}


def test_ik_host_experts_of_a_type_no_cuda_build_multiplies_stay_on_the_cpu(
    tmp_path: Path,
) -> None:
    """The scheduler offloads a host-weight op to the first GPU only where the CUDA
    backend supports it (ggml-backend ggml_backend_sched_backend_id_from_cur: offload
    when ``ggml_backend_supports_op`` and ``offload_op``); CPU-repacked types such as
    q2_k_r4 have no CUDA matmul in any ik build, so nothing is copied to CUDA0 and
    CUDA_Host computes the experts."""
    iq3 = _glm_cpu_moe(tmp_path, ())
    q2r4 = _glm_cpu_moe(tmp_path, ("gate", "up", "down"))
    # offloaded: the fused up+gate copy (2 x 1,225 MiB) and the activations on CUDA0;
    # q2_k_r4: neither
    copy = 2 * 1284505600  # blk.N.ffn_up_exps + ffn_gate_exps, iq3_ks
    assert iq3["CUDA0"] > copy > 2 * q2r4["CUDA0"]
    # the host runs the experts instead: -muge's up+gate and down outputs, f32
    host = (2048 + 6144) * 8 * 1024 * 4
    assert q2r4["CUDA_Host"] - iq3["CUDA_Host"] == host
    # down alone repacked: up+gate still go to CUDA0, the host runs down
    mixed = _glm_cpu_moe(tmp_path, ("down",))
    assert mixed["CUDA0"] == iq3["CUDA0"]
    assert mixed["CUDA_Host"] == q2r4["CUDA_Host"]
