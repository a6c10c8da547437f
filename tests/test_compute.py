"""llama.cpp's compute-buffer estimate (layoutgen.compute), checked by its structure.

The expectations are reasoned from how llama.cpp builds and allocates the
graph, not copied from the estimator: the KQ mask is n_kv x ubatch f16, so
it doubles with the context; activations scale with the ubatch; pipeline
parallelism (two devices, no overrides) keeps four copies of every input.
"""

from __future__ import annotations

from dataclasses import replace

from layoutgen import compute
from layoutgen.kvcache import KVSettings
from layoutgen.profile import HParams

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


def _kv(ctx: int = 4096, ubatch: int = 512, parallel: int = 1) -> KVSettings:
    return KVSettings(
        runtime="llama.cpp",
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
    # every term (activations, mask rows, embeddings) is per token: at a fixed
    # context, doubling the ubatch doubles the whole buffer
    one, two = _graph(kv=_kv(ubatch=256)), _graph(kv=_kv(ubatch=512))
    assert compute.device(two, "D0", output=True) == 2 * compute.device(one, "D0", output=True)
    assert compute.host(two) == 2 * compute.host(one)


def test_host_holds_mask_and_four_embedding_rows_on_one_device() -> None:
    g = _graph()
    embd = 512 * 512 * 4  # n_embd x ubatch f32
    small = 512 * 24  # positions, KV indices, output ids
    assert compute.host(g) == compute.mask_bytes(g) + 4 * embd + small


def test_pipeline_parallelism_needs_two_devices_and_no_overrides() -> None:
    assert _graph().copies == 1
    assert _graph(devices=("D0", "D1")).copies == compute.SCHED_COPIES
    assert _graph(MOE, devices=("D0", "D1"), host_experts=True).copies == 1
    assert _graph(MOE, devices=("D0", "D1")).copies == compute.SCHED_COPIES


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
