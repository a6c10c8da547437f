"""vLLM's GPU memory, by its own rules (DESIGN §5 "vLLM"; issue 17 item 2).

vLLM does not place tensors the way llama.cpp does: each GPU worker takes a
budget (``gpu_memory_utilization`` x the card, or ``--kv-cache-memory-bytes``),
loads its shard of the weights, runs one dummy forward pass of
``max_num_batched_tokens`` tokens plus one dummy sampler pass of
``max_num_seqs`` rows, and gives whatever the budget has left to KV blocks.
Weights, budget and KV arithmetic are exact; the terms vLLM *measures* at
start-up (activation peak, non-torch memory, CUDA graphs) are estimated here
from model dimensions, high rather than low: an estimate that is too high
costs KV blocks in the plan, one that is too low is the OOM the plan exists to
prevent.

Sources (wheels from PyPI, read for this module): vLLM 0.8.5, 0.9.2, 0.10.1.1,
0.10.2, 0.11.0, 0.11.1, 0.11.2, 0.12.0, 0.19.1, 0.20.0, 0.20.2, 0.21.0, 0.33.0, and
flashinfer-python 0.2.11 (``flashinfer/sampling.py``) —
``vllm/v1/worker/gpu_worker.py`` (``determine_available_memory``),
``vllm/utils/mem_utils.py`` (``memory_profiling``), ``vllm/v1/worker/utils.py``
(``request_memory``), ``vllm/v1/core/kv_cache_utils.py`` (``get_num_blocks``,
``get_kv_cache_config_from_groups``, ``check_enough_kv_cache_memory``,
``estimate_max_model_len``, ``_get_kv_cache_groups_uniform_page_size``),
``vllm/v1/kv_cache_interface.py`` (``FullAttentionSpec``, ``SlidingWindowSpec``,
``MLAAttentionSpec``), ``vllm/v1/worker/gpu_model_runner.py`` (``profile_run``,
``_dummy_sampler_run``, ``profile_cudagraph_memory``), ``vllm/v1/sample/sampler.py`` and
``vllm/v1/sample/ops/topk_topp_sampler.py`` (the dummy sampler's tensors),
``vllm/distributed/device_communicators/custom_all_reduce.py`` and ``pynccl.py`` (what a
TP worker allocates outside torch), ``vllm/env_override.py`` (NCCL_CUMEM_ENABLE=0),
``vllm/envs.py``.
The V0 engine (before 0.8) is covered for the logs that print its terms (the 0.7.3
wheel's ``vllm/worker/worker.py`` ``determine_num_available_blocks`` and
``vllm/utils.py`` ``memory_profiling``), and 0.8.4's defaults from its
``vllm/engine/arg_utils.py``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from enum import StrEnum

from layoutgen.errors import LayoutgenError

GiB = 1 << 30
MiB = 1 << 20

#: Bytes per element of each ``--kv-cache-dtype`` (``auto`` takes the model dtype).
KV_DTYPE_BYTES: dict[str, int] = {
    "bfloat16": 2,
    "float16": 2,
    "half": 2,
    "float32": 4,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
}

#: Sampler bytes per logit at the dummy sampler's peak: model-dtype logits (2),
#: their fp32 copy (4), top-k/top-p sort values (4) and int64 indices (8),
#: sorted softmax (4), cumsum (4), mask (1), scattered-back logits (4), probs (4),
#: exponential draw (4) = 39 (the temperature-scaled copy is freed before the
#: sort's peak).  Checked against the peaks that are the sampler's: PR 10511's V0
#: run (256 rows of Llama-3's 128,256 logits: 1.26 GiB, 39.0 B a logit with the
#: hidden states) and llm-d's nine H100 rows of V1 (1,024 rows, three
#: vocabularies: 38.4 B).  Counted from the tensors, it takes no margin: 41 B
#: with :data:`ACTIVATION_MARGIN` on top put 1,024-row peaks 12 % high, which on
#: an 80 GB card with a large checkpoint is 10 % of the KV cache (issue 35).
SAMPLER_BYTES_PER_LOGIT = 39
#: The same with FlashInfer's top-k/top-p sampling, which samples without sorting
#: (``TopKTopPSampler.forward_cuda`` -> ``flashinfer_sample`` of the 0.10.1.1 wheel;
#: ``top_k_top_p_sampling_from_logits`` of flashinfer-python 0.2.11 masks the top k into
#: a new fp32 tensor and softmaxes that): model-dtype logits (2), their fp32 copy (4,
#: divided by the temperature in place), the masked logits (4) and probs (4) = 14.  The
#: dennislee22 A100 logs that print "Using FlashInfer for top-p & top-k sampling" (256
#: rows of Qwen2's 152,064 logits) leave 0.55 GiB for the activation and non-torch terms
#: together, 13-14 B a logit; the sorting sampler's 39 B would be 1.41 GiB.
SAMPLER_BYTES_PER_LOGIT_FLASHINFER = 14
#: Headroom on the forward pass's estimate (fitted to fewer logs than the sampler):
#: it must come out high, not low.
ACTIVATION_MARGIN = 1.05
#: Hidden-size tensors a token holds beyond one GPU's at the forward pass's peak when
#: the layers are split by tensor parallelism (:func:`forward_bytes_per_token`).
ALL_REDUCE_COPIES = 2
#: Non-torch memory one worker adds after vLLM's baseline (cuBLAS/attention
#: workspaces): the larger of 0.16 GiB (PR 12126) and 0.35 GiB (issue 10517).
NON_TORCH_BASE = int(0.35 * GiB)
#: The same in V0 0.7.0-0.7.3: ``memory_profiling`` (vllm/utils.py of the 0.7.3 wheel)
#: counts the non-torch growth from a ``MemorySnapshot`` taken in ``init_device`` once
#: the CUDA context exists (PR 12126) to after the profile run: cuBLAS and workspaces
#: alone.  The 0.7.x logs in tests/vllm_logs measure 0.03-0.11 GiB on one GPU with a text
#: model (ragbench and distagentgc's A100s, a 4060) and 0.16 with PR 12126's vision
#: model; planned above each.  (0.6.4 measured 0.35 on a 3090: NON_TORCH_BASE stays.)
NON_TORCH_V0_7 = int(0.17 * GiB)
V0_7 = (0, 7)
#: The same from 0.9.2, whose V1 worker takes its snapshot after the CUDA context:
#: kernel modules loaded by the profile run and library handles.  The five V1 logs in
#: tests/vllm_logs that print it ("Actual usage is ... for non-torch memory") show 0.02
#: to 0.07 GiB on one GPU; llm-d-benchmark's summary of its H100 runs
#: (config_explorer/empirical-vllm-memory-results.md, figures without the log lines)
#: 0.13 to 0.14 GiB on one GPU.  Planned above each.
NON_TORCH_SNAPSHOT = int(0.20 * GiB)
#: Of a TP worker's NCCL memory (:data:`NON_TORCH_TP`), what a release that starts NCCL
#: before its snapshot (0.11.0+) still allocates inside the profile, for the collectives
#: it connects later: the same summary's TP 2 run has 0.55 GiB of non-torch memory
#: against 0.13-0.14 on one GPU, +0.42; planned at 0.45 GiB
NCCL_AFTER_SNAPSHOT = int(0.45 * GiB)
#: The first release whose V1 worker profiles from a MemorySnapshot taken at start-up
#: (gpu_worker.py of the 0.9.2 wheel); 0.8.0-0.9.1 subtract everything in use on the
#: GPU after the profile run (total - free - torch's allocations): their own CUDA
#: context, and every other process's memory
SNAPSHOT_BASELINE = (0, 9, 2)
#: NCCL and custom all-reduce buffers of a TP > 1 worker whose GPUs talk over NVLink.
#: NCCL keeps each channel's send/receive buffers (per protocol: SIMPLE's NCCL_BUFFSIZE
#: of 4 MiB, LL128, LL) in device memory under its P2P transport, and opens many
#: channels on NVLink; vLLM's custom all-reduce adds two 8 MiB IPC buffers and their
#: metadata (cudaMalloc'd outside torch: CustomAllreduce.create_shared_buffer of the
#: 0.10.1.1 wheel) and an 8 MiB torch tensor.  PR 10511's TP 2 on H100s: +1.79 GiB over
#: TP 1 (3.58 against 1.79); distagentgc's TP 2 on 40 GB A100-class cards: +1.45 (1.54
#: against 0.09 GiB).  The larger is planned, and wherever NVLink is not ruled out.
NON_TORCH_TP = int(1.79 * GiB)
#: The same where the GPUs have no NVLink between them: NCCL's PCIe rings open few
#: channels, and without peer access (vLLM: "Custom allreduce is disabled because your
#: platform lacks GPU P2P capability"; NCCL_P2P_DISABLE=1) its SHM transport keeps the
#: buffers in host shared memory.  Two PCIe L40S at TP 2 (issue 15815, 0.7.1) measure
#: 0.30 GiB of non-torch memory in all; dennislee22's two A100 80GB pods without P2P
#: (0.10.1.1) leave 0.13 GiB more outside the KV cache than the same model at TP 1, with
#: half the weights and the same sampler.  Planned at the larger.
NON_TORCH_TP_PCIE = int(0.30 * GiB)
#: vLLM 0.6.5-0.6.6 measured from before the CUDA context (PR 10511; PR 12126
#: moved the baseline after it in 0.7.0): the context counts as non-torch, as it
#: does in the V1 worker of 0.8.0-0.9.1 (:func:`device_wide`).  1.44 GiB is PR
#: 10511's H100 (1.79 GiB of non-torch memory less the 0.35 of the other terms); the V1
#: worker of 0.8.x plans the context of the service's GPU class instead
#: (:attr:`VllmService.context_bytes`), and this figure only where that is not known.
CUDA_CONTEXT_0_6_5 = int(1.44 * GiB)
#: CUDA graph capture, beyond the largest capture's activations: a fixed part (a
#: 0.10.2 capture of three small sizes of Qwen2.5-3B took 0.14 GiB, the
#: memoryawarerlhf log) and a part per captured graph and piece of it (piecewise
#: graphs split at each attention: n_layer + 1 pieces; a full graph holds as many
#: kernels): 0.25 MiB on one GPU (0.10.2 llava-v1.6-mistral-7b, 67 sizes x 33
#: pieces, took 0.67 GiB), 0.55 MiB with tensor parallelism (0.10.2
#: Qwen3-235B-A22B-FP8 on 8 L40S, 67 x 95, took 3.45 GiB: an all-reduce ends
#: every piece).  Those two logs were read in public files whose repositories the
#: search did not name, so they are not kept in tests/vllm_logs; the logs kept there
#: that print a capture took less than this estimate (test_vllm_memory).
CUDAGRAPH_FIXED = 128 * MiB
CUDAGRAPH_PER_PIECE = 256 * 1024
CUDAGRAPH_PER_PIECE_TP = 563 * 1024
#: the first release whose default capture sizes grow with the speculative tokens
SPEC_SCALES_CAPTURE = (0, 13)


class Basis(StrEnum):
    EXACT = "exact"
    ESTIMATED = "estimated"
    UPPER_BOUND = "upper-bound"


def version_tuple(text: str) -> tuple[int, ...]:
    """``0.10.1.1`` -> (0, 10, 1, 1); ``0.6.4.post1`` -> (0, 6, 4); ``0.19.2rc1`` ->
    (0, 19, 2): a pre-release has its release's rules (its number is the one it leads to)."""
    parts: list[int] = []
    for piece in text.lstrip("v").split("."):
        digits = re.match(r"[0-9]+", piece)
        if digits is None:
            break
        parts.append(int(digits[0]))
        if digits.end() < len(piece):  # 2rc1: the number, then nothing after it counts
            break
    if not parts:
        raise ValueError(f"{text!r} is not a vLLM version: write it as pip shows it (e.g. 0.11.0)")
    return tuple(parts)


@dataclass(frozen=True)
class VllmModel:
    """What vLLM's memory depends on, from the model's config.json and checkpoint."""

    n_layer: int  #: decoder layers that keep KV (attention, incl. sliding)
    n_head_kv: int
    head_dim_k: int
    head_dim_v: int
    hidden_size: int
    intermediate_size: int  #: dense FFN width (0 for pure MoE layers)
    vocab_size: int
    weights_bytes: int  #: whole checkpoint as loaded, all ranks together
    dtype_bytes: int = 2
    kv_lora_rank: int = 0  #: MLA when > 0: one latent "head" per token
    rope_dim: int = 0
    sliding_window: int = 0
    sliding_layers: frozenset[int] = field(default_factory=frozenset)
    mamba_layers: int = 0  #: linear-attention / mamba layers (fixed state per sequence)
    mamba_state_bytes: int = 0  #: state of one such layer for one sequence, per GPU
    moe_intermediate_size: int = 0
    moe_top_k: int = 0
    n_head: int = 0  #: attention (query) heads, for the LoRA slots of q and o
    lora_embeddings: bool = False  #: the model class lists embedding_modules (Llama)
    #: the rotary embedding's cos/sin cache: rows and width (``get_rope`` builds one, in
    #: the activation dtype, on every rank: not split by TP); 0 without rotary
    rope_positions: int = 0
    rotary_dim: int = 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0


@dataclass(frozen=True)
class VllmService:
    """One ``vllm serve`` as its flags set it (vLLM's defaults are the caller's to fill)."""

    gpu_total_bytes: int  #: cudaMemGetInfo total of one GPU
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    version: str
    gpu_memory_utilization: float = 0.9
    kv_cache_memory_bytes: int | None = None
    kv_cache_dtype: str = "auto"
    block_size: int = 16
    tensor_parallel_size: int = 1
    enforce_eager: bool = False
    #: speculative tokens a step (MTP/draft): a decode step is 1 + these tokens a request
    spec_tokens: int = 0
    #: VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS as the service's environment sets it
    #: (None: not set, the release's default)
    estimate_cudagraphs: bool | None = None
    #: VLLM_USE_FLASHINFER_SAMPLER as the service's environment sets it (None: not set;
    #: see :func:`flashinfer_sampler`)
    flashinfer_sampler: bool | None = None
    #: whether the service's GPUs talk over NVLink (None: not known, planned as NVLink;
    #: see :func:`nvlink_between`)
    nvlink: bool | None = None
    #: what the worker process holds on its GPU before it measures (the CUDA context,
    #: cuBLAS): ``host.gpu_overhead`` or the default of the GPU's class, the figure that
    #: sits beside the budget from 0.9.2; 0.8.0-0.9.1 count it inside as non-torch memory
    #: (None: not known, :data:`CUDA_CONTEXT_0_6_5`)
    context_bytes: int | None = None

    @property
    def v1(self) -> bool:
        """V1 is the default engine from 0.8.0 (and the only one from 0.11)."""
        return version_tuple(self.version) >= (0, 8)


@dataclass(frozen=True)
class Term:
    bytes: int
    basis: Basis


@dataclass(frozen=True)
class VllmMemory:
    """Each term of one worker's budget (per GPU), as vLLM will account it."""

    budget: Term
    weights: Term
    activation: Term
    non_torch: Term
    cudagraph: Term
    cudagraph_in_budget: bool  #: subtracted before KV (0.20.0+), else taken after
    kv_available: Term
    kv_bytes_per_token: int  #: all layers of one GPU
    block_size: int
    kv_tokens: Term
    max_concurrency: float


class KvCacheRefused(LayoutgenError):
    """vLLM refuses to start: its KV cache cannot hold one max_model_len request."""

    def __init__(self, max_model_len: int, needed: int, available: int, estimate: int) -> None:
        self.max_model_len = max_model_len
        self.needed = needed
        self.available = available
        self.estimated_max_model_len = estimate
        super().__init__(
            f"vLLM will refuse to start: one request of max_model_len {max_model_len} needs "
            f"{needed / GiB:.2f} GiB of KV cache, the budget leaves {available / GiB:.2f} GiB; "
            f"the longest that fits is about {estimate} tokens: lower max_model_len, raise "
            "gpu_memory_utilization, or use a smaller kv_cache_dtype"
        )


def kv_dtype_bytes(model: VllmModel, service: VllmService) -> int:
    if service.kv_cache_dtype == "auto":
        return model.dtype_bytes
    try:
        return KV_DTYPE_BYTES[service.kv_cache_dtype]
    except KeyError:
        raise LayoutgenError(
            f"kv_cache_dtype {service.kv_cache_dtype!r} is not one vLLM knows: write auto, "
            + ", ".join(sorted(KV_DTYPE_BYTES))
        ) from None


def kv_bytes_per_token_layer(model: VllmModel, service: VllmService) -> int:
    """One token of one attention layer on one GPU (``page_size_bytes / block_size``).

    GQA: K and V of this GPU's KV heads (heads split by TP, at least one).
    MLA: one latent of ``kv_lora_rank + rope_dim`` per token, not split by TP.
    """
    size = kv_dtype_bytes(model, service)
    if model.is_mla:
        return (model.kv_lora_rank + model.rope_dim) * size
    heads = max(1, model.n_head_kv // service.tensor_parallel_size)
    return heads * (model.head_dim_k + model.head_dim_v) * size


def _groups(model: VllmModel, block_size: int) -> list[tuple[str, int]]:
    """KV cache groups as (kind, layers) — ``_get_kv_cache_groups_uniform_page_size``."""
    kinds: dict[str, int] = {}
    full = model.n_layer - len(model.sliding_layers)
    if full:
        kinds["full"] = full
    if model.sliding_layers and model.sliding_window:
        kinds["sliding"] = len(model.sliding_layers)
    if model.mamba_layers:
        kinds["mamba"] = model.mamba_layers
    if not kinds:
        return []
    group_size = min(kinds.values())
    return [(k, group_size) for k, n in kinds.items() for _ in range(math.ceil(n / group_size))]


def effective_block_size(model: VllmModel, service: VllmService) -> int:
    """Hybrid mamba models: the attention block grows until its page holds a mamba state."""
    if not model.mamba_layers or not model.mamba_state_bytes:
        return service.block_size
    per_token = kv_bytes_per_token_layer(model, service)
    tokens = math.ceil(model.mamba_state_bytes / per_token)
    return math.ceil(tokens / 16) * 16


#: the first release whose "GPU KV cache size" is ``max concurrency x max_model_len``
#: (``_report_kv_cache_config`` of the 0.21.0 wheel; 0.20.0 logs ``num_blocks //
#: n_groups x block_size``, which for hybrid and sliding-window models counts every
#: group's blocks as if each group took an equal share of the pool)
CAPACITY_FROM_CONCURRENCY = (0, 21)


def kv_capacity(model: VllmModel, service: VllmService, available: int) -> tuple[int, int, float]:
    """(blocks, tokens, max concurrency) for ``available`` KV bytes on one GPU, tokens
    as the release logs them.

    V1: ``num_blocks = available // page_size // group_size``; concurrency = blocks /
    blocks one max_model_len request needs across groups (one pool serves them all);
    tokens = ``concurrency x max_model_len`` from 0.21.0, ``num_blocks // n_groups x
    block_size`` before (the same figure for a model of one group).  The plan's figure
    is :func:`capacity_tokens`, the same in every release.  V0: one cache of all layers.
    """
    block = effective_block_size(model, service)
    page = block * kv_bytes_per_token_layer(model, service)
    if not service.v1:
        blocks = max(0, available // (page * model.n_layer))
        return blocks, blocks * block, blocks * block / service.max_model_len
    groups = _groups(model, block)
    if not groups:
        return 0, 0, 0.0
    group_size = groups[0][1]
    blocks = max(0, available // page // group_size)
    per_request = sum(_blocks_per_request(model, service, kind, block) for kind, _ in groups)
    concurrency = blocks / per_request
    if version_tuple(service.version) >= CAPACITY_FROM_CONCURRENCY:
        return blocks, capacity_tokens(service, concurrency), concurrency
    return blocks, blocks // len(groups) * block, concurrency


def capacity_tokens(service: VllmService, concurrency: float) -> int:
    """The tokens of context the KV pool holds with every request at max_model_len:
    ``max concurrency x max_model_len`` (vLLM's own figure from 0.21.0).  One figure for
    every model: a hybrid model's recurrent state and a sliding window's blocks are in
    the concurrency, so tokens and concurrency never disagree (issue 35: 65,600 tokens
    beside a concurrency of 1.00 at 262,144)."""
    return int(concurrency * service.max_model_len)


#: the first release whose recurrent (mamba / linear-attention) state takes one block a
#: speculative token beside the current one (MambaSpec.max_memory_usage_bytes of the
#: 0.15.0 wheel: ``page_size x (1 + num_speculative_blocks)``; 0.14.0: one page)
MAMBA_SPEC_BLOCKS = (0, 15)


def _blocks_per_request(model: VllmModel, service: VllmService, kind: str, block: int) -> int:
    if kind == "mamba":
        # mamba_cache_mode "none": hybrid models have no prefix caching by default
        # (ModelConfig.is_prefix_caching_supported of 0.19.1: False for attn_type hybrid)
        if version_tuple(service.version) >= MAMBA_SPEC_BLOCKS:
            return 1 + service.spec_tokens
        return 1
    if kind == "sliding":
        window = model.sliding_window - 1 + service.max_num_batched_tokens
        return math.ceil(min(window, service.max_model_len) / block) + 1
    return math.ceil(service.max_model_len / block)


def kv_needed_one_request(model: VllmModel, service: VllmService) -> int:
    """``max_memory_usage_bytes`` over the groups, times the layers of a group."""
    block = effective_block_size(model, service)
    page = block * kv_bytes_per_token_layer(model, service)
    if not service.v1:
        return math.ceil(service.max_model_len / block) * page * model.n_layer
    groups = _groups(model, block)
    return sum(_blocks_per_request(model, service, k, block) * page * n for k, n in groups)


def estimate_max_model_len(model: VllmModel, service: VllmService, available: int) -> int:
    """vLLM's binary search for the longest max_model_len whose request fits."""
    lo, hi, best = 1, service.max_model_len, 0
    while lo <= hi:
        mid = (lo + hi) // 2
        probe = replace(service, max_model_len=mid)
        if kv_needed_one_request(model, probe) <= available:
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    return best


def forward_bytes_per_token(model: VllmModel, tp: int) -> int:
    """Live activations per token at the forward pass's peak (the MLP of one layer).

    gate_up output (2 x I) + SiLU-and-mul output (I), split by TP, plus three
    hidden-size tensors (residual, normed input, down output); a MoE layer holds
    ``top_k`` copies of the expert width and of the hidden output
    (fused_moe's intermediate caches).  Llama-3-8B: 2 x (3 x 14336 + 3 x 4096).
    With tensor parallelism, two more hidden-size tensors: the row-parallel
    layers' partial sums are all-reduced out of place (a new tensor beside the
    partial one).  The two TP 2 logs whose peak is the forward pass show it on
    both ranks: Qwen2.5-14B at 32,768 tokens (2.84 GiB, 2.0 hidden rows a token
    above the TP 1 terms) and Qwen2.5-32B at 10,000 (1.26 GiB, 2.1 rows).
    """
    width = max(model.intermediate_size, model.moe_intermediate_size * model.moe_top_k)
    moe_out = model.moe_top_k * model.hidden_size if model.moe_top_k else 0
    reduced = ALL_REDUCE_COPIES * model.hidden_size if tp > 1 else 0
    return model.dtype_bytes * (3 * width // tp + 3 * model.hidden_size + moe_out + reduced)


def activation_estimate(model: VllmModel, service: VllmService) -> int:
    """The profiling run's torch peak above the weights: forward pass or sampler, larger.

    ``profile_run``: ``_dummy_run(max_num_batched_tokens)`` then
    ``_dummy_sampler_run`` on :func:`sampler_rows` rows of full-vocab logits while
    the hidden states of all tokens are still alive.
    """
    tokens = service.max_num_batched_tokens
    forward = tokens * forward_bytes_per_token(model, service.tensor_parallel_size)
    rows = sampler_rows(service)
    per_logit = (
        SAMPLER_BYTES_PER_LOGIT_FLASHINFER
        if flashinfer_sampler(service)
        else SAMPLER_BYTES_PER_LOGIT
    )
    sampler = rows * model.vocab_size * per_logit + tokens * model.hidden_size * model.dtype_bytes
    return max(int(forward * ACTIVATION_MARGIN), sampler)


#: the first V1 release whose FlashInfer sampler is opt-in (topk_topp_sampler.py of the
#: 0.11.1 wheel: ``if envs.VLLM_USE_FLASHINFER_SAMPLER``); 0.8.0-0.11.0 use it whenever
#: flashinfer is importable unless the variable is 0 (``is not False``)
FLASHINFER_SAMPLER_OPT_IN = (0, 11, 1)


def flashinfer_sampler(service: VllmService) -> bool:
    """Whether the dummy sampler runs FlashInfer's top-k/top-p sampling (14 B a logit)
    rather than PyTorch's sort (39 B), by release and VLLM_USE_FLASHINFER_SAMPLER:

    * V0 (before 0.8.0): only with the variable at 1 (its sampler reads None as off);
    * 0.8.0-0.11.0: whenever flashinfer is installed, unless the variable is 0.  Whether
      it is installed is the image's business (pip's vllm lists it only as an extra), so
      unset the plan takes the sort, the larger; "1" says it is there;
    * 0.11.1 on: only with the variable at 1 (opt-in).

    So the plan counts FlashInfer's figure exactly where the service's env sets the
    variable to 1; unset, on 0.8.0-0.11.0 with flashinfer in the image, the activation
    estimate errs high by 25 B a logit (the KV cache it plans is smaller than vLLM's)."""
    return bool(service.flashinfer_sampler)


def default_max_num_seqs(
    version: str, gpu_total_bytes: int, gpu_name: str | None, max_num_batched_tokens: int
) -> int:
    """vLLM's ``--max-num-seqs`` when none is given, for ``vllm serve`` on a CUDA GPU
    (``EngineArgs._set_default_args_v1``, read in each wheel's vllm/engine/arg_utils.py):

    * before 0.8.0 (V0): 256;
    * 0.8.0-0.8.3: 1,024 on every GPU;
    * 0.8.4: 1,024 on a GPU whose name says H100 or H200, else 256 (the device name
      that set only the batched-token default before);
    * 0.8.5: 1,024 on a GPU of 70 GiB or more, else 256;
    * 0.9.0 on: 1,024 on a GPU of 70 GiB or more whose name does not say A100, else 256
      (PR #17885: A100s keep the smaller batch);
    * 0.10.2 on: at most ``max_num_batched_tokens``.

    ``gpu_name`` is the NVML name (``host.gpus[].name``); unnamed, a large card is
    taken as not an A100, and on 0.8.4 any card as an H100 (the larger default: the
    activation estimate errs high)."""
    release = version_tuple(version)
    if release < (0, 8):
        return 256
    large = gpu_total_bytes >= 70 * GiB
    name = (gpu_name or "").lower()
    if release >= (0, 9) and "a100" in name:
        large = False
    if release < (0, 8, 4):
        large = True
    elif release < (0, 8, 5):
        large = gpu_name is None or "h100" in name or "h200" in name
    seqs = 1024 if large else 256
    if release >= (0, 10, 2):
        seqs = min(seqs, max_num_batched_tokens)
    return seqs


def sampler_rows(service: VllmService) -> int:
    """Rows of logits at the dummy sampler's peak: ``min(max_num_seqs, tokens)`` requests
    (``_dummy_run`` keeps one logit row a request); with speculative decoding the
    rejection sampler then scores one draft token a request beside the bonus token, so
    twice as many (``_dummy_sampler_run`` of the 0.20.0 wheel: ``draft_token_ids =
    [[0] for _ in range(num_reqs)]``, logits of ``num_tokens + num_reqs`` rows)."""
    rows = min(service.max_num_seqs, service.max_num_batched_tokens)
    return 2 * rows if service.spec_tokens else rows


def nccl_before_snapshot(service: VllmService) -> bool:
    """From 0.11.0 ``init_device`` initializes the distributed environment before it
    takes the ``MemorySnapshot`` (PR #25359: gpu_worker.py of the 0.11.0 wheel; 0.10.2
    took the snapshot first).  A TP > 1 worker's NCCL buffers are then part of the
    baseline, like the CUDA context: outside ``utilization x total``, and already
    taken when the start-up check compares free memory with it."""
    return version_tuple(service.version) >= (0, 11)


def nccl_estimate(service: VllmService) -> int:
    """NCCL and custom all-reduce memory of a TP > 1 worker, in all (0 for one GPU), by
    interconnect: :data:`NON_TORCH_TP_PCIE` where the GPUs are known to have no NVLink
    between them (:func:`nvlink_between`), else :data:`NON_TORCH_TP` (NVLink, or not
    known: the larger)."""
    if service.tensor_parallel_size <= 1:
        return 0
    return NON_TORCH_TP_PCIE if service.nvlink is False else NON_TORCH_TP


def nccl_outside(service: VllmService) -> int:
    """The part of :func:`nccl_estimate` allocated before vLLM's snapshot (0.11.0+):
    outside its budget, beside the CUDA context; the rest stays non-torch memory
    (without NVLink all of it: at most :data:`NCCL_AFTER_SNAPSHOT`)."""
    if not nccl_before_snapshot(service):
        return 0
    return max(nccl_estimate(service) - NCCL_AFTER_SNAPSHOT, 0)


#: NVML names of cards that have no NVLink connector: GeForce RTX 40- and 50-series,
#: L4, L40, L40S, T4, A10/A10G, the RTX Ada workstation cards (RTX 4000/4500/5000/6000
#: Ada) and the RTX PRO Blackwell cards.  Cards that take an NVLink bridge (RTX 3090,
#: RTX A6000, A40, the PCIe A100/H100) are not in it: a bridge may be fitted.
_NO_NVLINK = re.compile(
    r"geforce rtx [45]0[0-9]{2}|\bL4\b|\bL40S?\b|\bT4\b|\bA10G?\b|rtx [0-9]{4} ada"
    r"|rtx pro [0-9]{4}",
    re.IGNORECASE,
)


def nvlink_between(env: dict[str, str], names: list[str | None]) -> bool | None:
    """Whether a tensor-parallel service's GPUs talk over NVLink: False where the
    service's env sets NCCL_P2P_DISABLE to a non-zero integer (NCCL then moves data
    through host memory) or every GPU's name is a card without an NVLink connector
    (:data:`_NO_NVLINK`); else None (not known: planned as NVLink, the larger NCCL
    figure)."""
    disabled = env.get("NCCL_P2P_DISABLE")
    if disabled is not None and disabled.strip().lstrip("-").isdigit() and int(disabled):
        return False
    if names and all(name and _NO_NVLINK.search(name) for name in names):
        return False
    return None


def device_wide(service: VllmService) -> bool:
    """0.8.0-0.9.1: the V1 worker's non-KV memory is everything in use on the GPU after
    its profile run (``determine_available_memory`` of the 0.9.0 wheel: ``total - free
    - torch's allocations``), so the memory of processes started before it shrinks its
    KV cache, and its own CUDA context is inside ``utilization x total``."""
    return (0, 8) <= version_tuple(service.version) < SNAPSHOT_BASELINE


def context_in_budget(version: str) -> bool:
    """Whether vLLM counts its own CUDA context inside ``utilization x total``.

    By release (the profiler's code in each wheel):

    * 0.6.4 (``vllm/worker/worker.py``, ``memory_profiling``): the baseline is the
      memory in use after the model loads, the context included: outside;
    * 0.6.5-0.6.6: the baseline is taken before the context (PR 10511): inside,
      as non-torch memory;
    * 0.7.0-0.7.3: after it again (PR 12126): outside;
    * 0.8.0-0.9.1 (``vllm/v1/worker/gpu_worker.py determine_available_memory``):
      ``total x utilization - (torch peak + total - free - torch's allocations)``
      after the profile run, so the context (and every other process) is inside;
    * 0.9.2 on: a ``MemorySnapshot`` taken after ``init_device`` creates the context
      is the baseline: outside.

    Outside, it is the service's ``host.gpu_overhead`` beside the budget; inside, it
    is in :func:`non_torch_estimate` and nothing sits beside the budget for it: the
    plan counts it once either way."""
    release = version_tuple(version)
    return (0, 6, 5) <= release < (0, 7) or (0, 8) <= release < SNAPSHOT_BASELINE


def context_inside(service: VllmService) -> int:
    """The CUDA context where the release counts it inside the budget
    (:func:`context_in_budget`).

    * V0 0.6.5-0.6.6: :data:`CUDA_CONTEXT_0_6_5`, PR 10511's H100 figure (no other V0
      log of those releases prints its terms);
    * V1 0.8.0-0.9.1: ``total - free - torch's allocations`` after the profile run
      (``determine_available_memory`` of the 0.8.0-0.9.1 wheels) is the process's
      context and cuBLAS, the same memory that sits beside the budget from 0.9.2, so
      the same figure: :attr:`VllmService.context_bytes` (``host.gpu_overhead`` or the
      GPU class's default: 512 MiB up to Ada).  Two 0.8.5 logs on an RTX 4090 D
      (johnson7788/RLDecisionAgent: Qwen2.5-0.5B and SmolLM2-135M, 0.9 of 23.65 GiB)
      leave 0.56 GiB each beside the weights, the sampler's estimate and the KV cache:
      under the 0.35 + 0.5 planned; PR 10511's 1.44 GiB put their KV cache 6-7 % low
      (-1.6 and -1.4 % now).  Unknown: the 1.44.
    """
    if service.v1 and service.context_bytes is not None:
        return service.context_bytes
    return CUDA_CONTEXT_0_6_5


def non_torch_estimate(service: VllmService) -> int:
    """Memory outside torch's allocator that the profile counts (cuBLAS, workspaces, and
    NCCL's memory allocated after the snapshot: see :func:`nccl_outside`; the CUDA
    context where the release counts it inside the budget: :func:`context_in_budget`)."""
    extra = nccl_estimate(service) - nccl_outside(service)
    release = version_tuple(service.version)
    if context_in_budget(service.version):
        extra += context_inside(service)
    base = NON_TORCH_SNAPSHOT if release >= SNAPSHOT_BASELINE else NON_TORCH_BASE
    if V0_7 <= release < (0, 8):
        base = NON_TORCH_V0_7
    return base + extra


def capture_sizes(service: VllmService) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The batch sizes (tokens) vLLM captures CUDA graphs for, by its defaults:
    (piecewise, for every batch; full, for uniform decode batches).

    * before 0.10.0: at most 512 (SchedulerConfig.cuda_graph_sizes = [512]): 1, 2, 4,
      then every 8th;
    * from 0.10.0: at most ``min(2 x max_num_seqs, 512)`` (PR #20628);
    * from 0.11.0: cudagraph_mode FULL_AND_PIECEWISE is the default: full graphs too,
      for the sizes a uniform decode step of ``max_num_seqs`` requests can take
      (gpu_model_runner.capture_model of the 0.11.0 wheel);
    * from 0.11.1: every 16th from 256 (PR #26016); the 1, 2, 4 only up to the most;
    * from 0.13.0: a decode step of ``1 + spec_tokens`` tokens a request scales the
      most (vllm/config/vllm.py, decode_query_len; absent from the 0.12.0 wheel).

    Every size is at most ``max_num_batched_tokens``.  None with ``enforce_eager``.

    The V0 engine (before 0.8.0) captures only full decode graphs, for 1, 2, 4 and
    every 8th up to the first size that holds ``max_num_seqs`` (VllmConfig's
    batch_size_capture_list of the 0.7.1 wheel; 256 sequences: 35 graphs).
    """
    if service.enforce_eager:
        return (), ()
    if not service.v1:
        possible = (1, 2, 4, *range(8, 8193, 8))
        most = next(n for n in possible if n >= min(service.max_num_seqs, possible[-1]))
        return (), tuple(n for n in possible if n <= most)
    release = version_tuple(service.version)
    q = 1 + service.spec_tokens if release >= SPEC_SCALES_CAPTURE else 1
    tokens = service.max_num_batched_tokens
    most = 512 if release < (0, 10) else min(2 * service.max_num_seqs * q, 512)
    if release < (0, 11, 1):
        sizes = [1, 2, 4, *range(8, most + 1, 8)]
    else:
        most = min(most, tokens)
        sizes = [n for n in (1, 2, 4) if n <= most]
        sizes += range(8, min(most + 1, 256), 8)
        sizes += range(256, most + 1, 16)
    piecewise = tuple(n for n in sizes if n <= tokens)
    if release < (0, 11):
        return piecewise, ()
    decode = service.max_num_seqs * q
    return piecewise, tuple(n for n in piecewise if q <= n <= decode)


def cudagraph_estimate(model: VllmModel, service: VllmService) -> int:
    """Graph capture: the largest capture's activations, a fixed part, and a part per
    graph and piece (:data:`CUDAGRAPH_FIXED`), for the sizes :func:`capture_sizes`."""
    piecewise, full = capture_sizes(service)
    if not piecewise and not full:
        return 0
    largest = max(piecewise + full)
    first = largest * forward_bytes_per_token(model, service.tensor_parallel_size)
    # V1's pieces each end in an all-reduce under TP; V0's whole-model graphs took
    # the same at TP 2 as at TP 1 (Qwen2.5-14B on 0.7.2: 0.28 GiB each)
    split = service.tensor_parallel_size > 1 and service.v1
    per = CUDAGRAPH_PER_PIECE_TP if split else CUDAGRAPH_PER_PIECE
    pieces = (len(piecewise) + len(full)) * (model.n_layer + 1)
    return CUDAGRAPH_FIXED + first + pieces * per


#: the first release with VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS (envs.py of the 0.18.0
#: wheel, default "0"; absent from 0.17.0) and the first where it defaults to "1" (0.20.0;
#: 0.19.1 still "0")
CUDAGRAPH_ESTIMATE_ENV = (0, 18)
CUDAGRAPH_ESTIMATE_DEFAULT = (0, 20)


def cudagraph_in_budget(service: VllmService) -> bool:
    """Whether vLLM subtracts its CUDA-graph estimate from ``utilization x total`` before
    the KV cache (``determine_available_memory``: ``requested_memory - non_kv_cache_memory
    - cudagraph_memory_estimate_applied``).  VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS
    turns it on from 0.18.0 and is on unless set to 0 from 0.20.0 (the 0.20.0 wheel's
    envs.py; its log line says "default since v0.21.0", which the 0.21.0 wheel keeps).
    Never with --enforce-eager (no graphs)."""
    release = version_tuple(service.version)
    if service.enforce_eager or release < CUDAGRAPH_ESTIMATE_ENV:
        return False
    if service.estimate_cudagraphs is not None:
        return service.estimate_cudagraphs
    return release >= CUDAGRAPH_ESTIMATE_DEFAULT


def env_flag(value: str | None) -> bool | None:
    """An environment value as vLLM's envs.py reads a 0/1 switch (``bool(int(v))``);
    None where it is not set or is not an integer (vLLM would not start on it)."""
    if value is None:
        return None
    try:
        return bool(int(value.strip()))
    except ValueError:
        return None


def rope_cache_bytes(model: VllmModel) -> int:
    """The ``cos_sin_cache`` buffer vLLM's RotaryEmbedding registers on the model, so
    "Model loading took" counts it: positions x rotary width x 2 bytes (bf16/fp16
    activations).  Llama-3.1-8B: 131072 x 128 x 2 = 32 MiB, the 0.031 GiB every
    Llama-3.1 log shows beyond the checkpoint."""
    return model.rope_positions * model.rotary_dim * 2


def plan_memory(model: VllmModel, service: VllmService, *, refuse: bool = True) -> VllmMemory:
    """Every term of one worker's budget; raises KvCacheRefused when vLLM would refuse."""
    tp = service.tensor_parallel_size
    if service.kv_cache_memory_bytes is not None:
        budget = Term(service.kv_cache_memory_bytes, Basis.EXACT)
    else:
        requested = math.ceil(service.gpu_total_bytes * service.gpu_memory_utilization)
        budget = Term(requested, Basis.EXACT)
    weights = Term(math.ceil(model.weights_bytes / tp) + rope_cache_bytes(model), Basis.EXACT)
    activation = Term(activation_estimate(model, service), Basis.ESTIMATED)
    non_torch = Term(non_torch_estimate(service), Basis.UPPER_BOUND)
    graphs = Term(cudagraph_estimate(model, service), Basis.ESTIMATED)
    in_budget = cudagraph_in_budget(service)
    if service.kv_cache_memory_bytes is not None:
        available = Term(service.kv_cache_memory_bytes, Basis.EXACT)
    else:
        left = budget.bytes - weights.bytes - activation.bytes - non_torch.bytes
        if in_budget:
            left -= graphs.bytes
        available = Term(left, Basis.ESTIMATED)
    return finish(model, service, budget, weights, activation, non_torch, graphs, available, refuse)


def finish(
    model: VllmModel,
    service: VllmService,
    budget: Term,
    weights: Term,
    activation: Term,
    non_torch: Term,
    graphs: Term,
    available: Term,
    refuse: bool = True,
) -> VllmMemory:
    """The KV side of the plan from a given ``available`` (estimated or logged)."""
    needed = kv_needed_one_request(model, service)
    if refuse and needed > available.bytes:
        estimate = estimate_max_model_len(model, service, max(available.bytes, 0))
        raise KvCacheRefused(service.max_model_len, needed, available.bytes, estimate)
    _, tokens, concurrency = kv_capacity(model, service, max(available.bytes, 0))
    return VllmMemory(
        budget=budget,
        weights=weights,
        activation=activation,
        non_torch=non_torch,
        cudagraph=graphs,
        cudagraph_in_budget=cudagraph_in_budget(service),
        kv_available=available,
        kv_bytes_per_token=kv_bytes_per_token_layer(model, service) * model.n_layer,
        block_size=effective_block_size(model, service),
        kv_tokens=Term(tokens, available.basis),
        max_concurrency=concurrency,
    )


# ---- LoRA ------------------------------------------------------------------------------

#: LoRAConfig.lora_extra_vocab_size (vllm/config/lora.py:47 of 0.11.0) and the logits
#: processor's padding (lora_vocab_padding_size, 256)
LORA_EXTRA_VOCAB = 256
LORA_VOCAB_PADDING = 256


@dataclass(frozen=True)
class LoraSlots:
    """What ``--max-loras`` and ``--max-lora-rank`` allocate (``--enable-lora``)."""

    max_loras: int
    max_lora_rank: int
    max_cpu_loras: int


def lora_layer_bytes(model: VllmModel, slots: LoraSlots, tp: int) -> int:
    """One decoder layer's LoRA slots on one GPU (``fully_sharded_loras`` off).

    vLLM 0.11.0 ``vllm/lora/layers/base_linear.py:62-80`` and
    ``column_parallel_linear.py:205-224``: per slice, ``lora_a_stacked`` is
    ``max_loras x 1 x rank x input_size`` and ``lora_b_stacked``
    ``max_loras x 1 x output_slice x rank``, in ``lora_dtype`` (auto: the model's).
    Input and output sizes are the TP shard's: qkv_proj (3 slices, input hidden,
    outputs q/tp, kv/tp, kv/tp), o_proj (row parallel: input q/tp, output hidden),
    gate_up_proj (2 slices of I/tp) and down_proj (input I/tp, output hidden).
    MoE experts (FusedMoE) are not LoRA layers in 0.11.0; their dense width is 0.
    """
    r, n, h = slots.max_lora_rank, slots.max_loras, model.hidden_size
    head = model.head_dim_k
    q = model.n_head * head // tp
    kv = max(1, model.n_head_kv // tp) * head
    inter = model.intermediate_size // tp
    a = 3 * r * h + r * q + (2 * r * h if inter else 0) + (r * inter if inter else 0)
    b = (q + 2 * kv) * r + h * r + (2 * inter * r + h * r if inter else 0)
    return n * (a + b) * model.dtype_bytes


def lora_embedding_bytes(model: VllmModel, slots: LoraSlots) -> int:
    """Embedding and lm_head slots of a model class with ``embedding_modules`` (Llama,
    ``vllm/model_executor/models/llama.py:493``): ``vocal_parallel_embedding.py:50-76``
    (extra-vocab embeddings in the weights' dtype, A over vocab + 256 rows, B) and
    ``logits_processor.py:91-116`` (A, B over the vocabulary padded to 256, the
    extra-vocab embeddings)."""
    if not model.lora_embeddings:
        return 0
    r, n, h, d = slots.max_lora_rank, slots.max_loras, model.hidden_size, model.dtype_bytes
    vocab = model.vocab_size
    padded = math.ceil(vocab / LORA_VOCAB_PADDING) * LORA_VOCAB_PADDING
    embed = n * (LORA_EXTRA_VOCAB * h + (vocab + LORA_EXTRA_VOCAB) * r + h * r) * d
    head = n * (r * h + padded * r + LORA_EXTRA_VOCAB * h) * d
    return embed + head


def lora_gpu_bytes(model: VllmModel, slots: LoraSlots, tp: int) -> int:
    """Every LoRA slot on one GPU: allocated with the model (``create_lora_weights``),
    before the memory profile, so inside the budget beside the weights."""
    return model.n_layer * lora_layer_bytes(model, slots, tp) + lora_embedding_bytes(model, slots)


def lora_adapter_bytes(model: VllmModel, rank: int) -> int:
    """One adapter of ``rank`` as the CPU cache holds it (every layer, unsharded, in the
    model dtype: ``LoRAModel.from_local_checkpoint`` loads to ``cpu``)."""
    one = LoraSlots(max_loras=1, max_lora_rank=rank, max_cpu_loras=1)
    return model.n_layer * lora_layer_bytes(model, one, 1) + lora_embedding_bytes(model, one)


def lora_host_bytes(model: VllmModel, slots: LoraSlots) -> int:
    """The CPU cache: up to ``max_cpu_loras`` adapters at ``max_lora_rank`` in host RAM
    (an upper bound: smaller ranks take less)."""
    return slots.max_cpu_loras * lora_adapter_bytes(model, slots.max_lora_rank)


# ---- speculative decoding ----------------------------------------------------------------


def speculative_extra(model: VllmModel, service: VllmService, num_tokens: int) -> int:
    """The MTP proposer's own buffers, beside the profiling run's peak.

    ``EagleProposer.__init__`` (``vllm/v1/spec_decode/eagle.py:89-110`` of 0.11.0;
    ``use_eagle()`` covers mtp) keeps ``max_num_tokens`` rows of ``input_ids``
    (int32), ``positions`` (int64), ``hidden_states`` and ``inputs_embeds``
    (hidden size, model dtype).  The draft forward pass runs one MTP layer over
    the same tokens after the target's, so it does not raise the peak.
    """
    if not num_tokens:
        return 0
    tokens = service.max_num_batched_tokens
    return tokens * (4 + 8 + 2 * model.hidden_size * model.dtype_bytes)
