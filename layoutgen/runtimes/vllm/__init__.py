"""vLLM: one budget per GPU, filled with KV blocks (DESIGN §5 "vLLM"; issue 17).

vLLM does not place tensors: each tensor-parallel worker loads its share of
the weights, profiles one forward pass, and takes KV blocks from a budget
(``--gpu-memory-utilization`` x the card, or exactly
``--kv-cache-memory-bytes`` where the release has that flag).  layoutgen
turns that around: the spec says how many requests (``parallel``) of how
many tokens (``ctx`` = ``--max-model-len``) the KV cache must hold at once
(``max_num_seqs`` = ``--max-num-seqs``, vLLM's default unless written, is how
many its scheduler runs), the KV cache is sized for them in whole blocks, and the budget is the
weights share + activation peak + non-torch memory (+ CUDA graphs where the
release counts them in the budget) + that KV cache.  The memory terms come
from :mod:`layoutgen.runtimes.vllm.memory`; this module holds what the
solver and the renderers ask: versions and their dated rules, the model's
dimensions from a ``format: safetensors`` profile, how many GPUs can split
it, the flags layoutgen owns, and the rounded ``--gpu-memory-utilization``.

Read from the vLLM wheels 0.8.5 … 0.33.0 (see vllm_memory's docstring).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Literal

from layoutgen.core.rules import Version, VersionError
from layoutgen.core.runtime import Runtime
from layoutgen.errors import printable
from layoutgen.inputs.literals import clip
from layoutgen.models.profile import HParams, Profile

if TYPE_CHECKING:
    from layoutgen.runtimes.vllm import memory as vm

#: the newest release whose source the rules were read from (no ``version:``)
NEWEST = "0.33.0"
#: the oldest release planned: the V1 engine (default from 0.8.0) allocates KV as
#: vllm_memory models it; V0 is covered there for logs only
OLDEST = (0, 8, 0)
_VERSION = re.compile(r"v?[0-9]{1,3}(\.[0-9]{1,4}){1,3}((\.?post|rc|\.dev)[0-9]{1,6})?")


@dataclass(frozen=True)
class Release:
    """One behaviour vLLM has had since a release, with where that is recorded."""

    name: str
    since: tuple[int, ...]
    source: str
    summary: str

    def applies(self, release: tuple[int, ...]) -> bool:
        return release >= self.since


RELEASES: tuple[Release, ...] = (
    Release(
        "snapshot-baseline",
        (0, 9, 2),
        "vllm/v1/worker/gpu_worker.py of the 0.9.2 wheel: init_device takes a "
        "MemorySnapshot and refuses to start when less than utilization x total is free; "
        "the 0.9.0 wheel's determine_available_memory subtracts total - free - torch's "
        "allocations after the profile run (vllm_memory.device_wide)",
        "vLLM profiles its own memory from a start-up snapshot, and checks that its "
        "budget is free; before, it counts everything in use on the GPU (its CUDA "
        "context and other processes) inside --gpu-memory-utilization, so it must start "
        "before the services it shares a GPU with",
    ),
    Release(
        "kv-cache-memory-bytes",
        (0, 10, 2),
        "vllm/engine/arg_utils.py of the 0.10.2 wheel: cache_group.add_argument("
        '"--kv-cache-memory-bytes", ...) (absent from 0.10.1.1); gpu_worker.py '
        "determine_available_memory returns it as the KV cache, unprofiled",
        "--kv-cache-memory-bytes sets the KV cache exactly; --gpu-memory-utilization "
        "then only sizes the start-up free-memory check",
    ),
    Release(
        "cudagraph-in-budget",
        (0, 20, 0),
        "vllm/envs.py of the 0.20.0 wheel: VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS "
        "defaults to 1 (0.18.0-0.19.1: 0; the service's env sets it either way: "
        "vllm_memory.cudagraph_in_budget)",
        "CUDA graphs are estimated inside the budget, before the KV cache; before, "
        "captured after it, outside --gpu-memory-utilization",
    ),
    Release(
        "nccl-before-snapshot",
        (0, 11, 0),
        "vllm/v1/worker/gpu_worker.py of the 0.11.0 wheel: init_device calls "
        "init_worker_distributed_environment before MemorySnapshot() (PR #25359; the "
        "0.10.2 wheel takes the snapshot first) (vllm_memory.nccl_before_snapshot)",
        "most of a tensor-parallel worker's NCCL buffers are allocated before the start-up "
        "snapshot: outside --gpu-memory-utilization, beside the CUDA context, and "
        "already taken when the free-memory check runs; before, non-torch memory of "
        "the profile, inside the budget",
    ),
    Release(
        "flashinfer-sampler-opt-in",
        (0, 11, 1),
        "vllm/v1/sample/ops/topk_topp_sampler.py of the 0.11.1 wheel: FlashInfer's top-k/"
        "top-p sampling only with VLLM_USE_FLASHINFER_SAMPLER=1 (0.8.0-0.11.0: whenever "
        "flashinfer is importable, unless it is 0) (vllm_memory.flashinfer_sampler)",
        "the sampler sorts its logits (39 B a logit at the profile's peak) unless "
        "VLLM_USE_FLASHINFER_SAMPLER=1; before, FlashInfer samples (14 B) wherever the "
        "image has it, which the plan counts only where the service's env says so",
    ),
    Release(
        "language-model-only",
        (0, 17, 0),
        "vllm/engine/arg_utils.py of the 0.17.0 wheel: --language-model-only (PR #34120, "
        "2026-02-09; absent from 0.16.0): every modality's limit set to 0",
        "--language-model-only serves a multimodal checkpoint text-only, as "
        "--limit-mm-per-prompt with 0 for every modality",
    ),
)

#: profile dtype (config.json torch_dtype) -> bytes per element
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4}

KvCacheDtype = Literal["auto", "fp8", "fp8_e4m3", "fp8_e5m2"]


@dataclass(frozen=True)
class Vllm(Runtime):
    KIND: ClassVar[str] = "vllm"
    MEMORY: ClassVar[Literal["tensors", "budget"]] = "budget"
    LOADS: ClassVar[Literal["gguf", "safetensors"]] = "safetensors"
    CTX_IS_TOTAL: ClassVar[bool] = False
    #: the official image's entrypoint is ``vllm serve`` (older images:
    #: ``python3 -m vllm.entrypoints.openai.api_server``); both take ``--model DIR``
    ENTRYPOINT_WORDS: ClassVar[int] = 2
    #: vllm/envs.py: VLLM_API_KEY, read by the OpenAI server when --api-key is absent
    API_KEY_ENV: ClassVar[str | None] = "VLLM_API_KEY"
    #: PyTorch shares tensors between vLLM's processes (API server, engine core, TP
    #: workers) through /dev/shm; podman's 64m default is too small.  Sized rather than
    #: --ipc=host, which would share the host's IPC namespace with the container (vLLM's
    #: docs offer either; 2g as its Kubernetes examples size the dshm volume)
    SHM_SIZE: ClassVar[str | None] = "2g"
    READ_FROM: ClassVar[str] = f"vLLM {NEWEST} wheel (vllm/v1/worker/gpu_worker.py)"
    SERVICE_KEYS: ClassVar[frozenset[str]] = frozenset(
        {
            "kv_cache_dtype",
            "enforce_eager",
            "env",
            "served_model_name",
            "speculative",
            "max_num_seqs",
        }
    )
    INSTEAD: ClassVar[dict[str, str]] = {
        "cache_type_k": "use 'kv_cache_dtype:' (auto, fp8, fp8_e4m3 or fp8_e5m2)",
        "cache_type_v": "use 'kv_cache_dtype:' (auto, fp8, fp8_e4m3 or fp8_e5m2)",
        "ubatch": "vLLM has no micro-batch; 'batch:' is --max-num-batched-tokens",
        "tensor_split": "vLLM splits every layer evenly over 'gpus:' (tensor parallel)",
        "gpu_layers": "vLLM keeps every layer on the GPUs",
        "experts": "vLLM keeps every expert on the GPUs",
        "tensor_overrides": "vLLM has no -ot",
        "measured": "vLLM's buffers are planned as one budget",
        "draft": "vLLM 0.11's V1 engine has no draft-model proposer; use "
        "'speculative: {method: mtp, num_tokens: N}' with a checkpoint that keeps its MTP layers",
    }
    OWNED_FLAGS: ClassVar[tuple[tuple[tuple[str, ...], str], ...] | None] = (
        (("--model",), "set the model under 'models:' and 'model:'"),
        (("--max-model-len",), "use 'ctx:' (one request's tokens; 0: the trained context)"),
        (("--max-num-seqs",), "use 'max_num_seqs:'"),
        (("--max-num-batched-tokens",), "use 'batch:'"),
        (("-tp", "--tensor-parallel-size"), "use 'gpus:' (one tensor-parallel rank per GPU)"),
        (
            ("-pp", "--pipeline-parallel-size", "-dp", "--data-parallel-size"),
            "layoutgen plans tensor parallelism only; use 'gpus:'",
        ),
        (("--gpu-memory-utilization",), "layoutgen renders it from the plan's budget"),
        (("--kv-cache-memory-bytes",), "layoutgen renders it from 'ctx:' and 'parallel:'"),
        (("--kv-cache-dtype",), "use 'kv_cache_dtype:'"),
        (("--block-size",), "layoutgen plans vLLM's default 16-token blocks; remove it"),
        (("--enforce-eager",), "use 'enforce_eager: true'"),
        (("--served-model-name",), "use 'served_model_name:'"),
        (
            (
                "--enable-lora",
                "--max-loras",
                "--max-lora-rank",
                "--max-cpu-loras",
                "--lora-modules",
                "--fully-sharded-loras",
                "--lora-dtype",
            ),
            "use 'lora:' (layoutgen budgets the LoRA slots)",
        ),
        (("--speculative-config",), "use 'speculative:' (layoutgen budgets its KV)"),
        (("--host",), "services bind as layoutgen decides; use 'expose: true' to open them"),
        (("--port",), "use 'port:'"),
    )

    @classmethod
    def parse_version(cls, text: str) -> Version:
        """A vLLM release as pip shows it (``0.11.0``, ``v0.10.1.1``, ``0.19.2rc1``)."""
        from layoutgen.runtimes.vllm import memory as vm

        if not _VERSION.fullmatch(text):
            raise VersionError(
                f"{printable(clip(text))} is not a vLLM release: write it as pip shows it "
                "(python -c 'import vllm; print(vllm.__version__)'), e.g. 0.11.0"
            )
        if vm.version_tuple(text) < OLDEST:
            raise VersionError(
                f"vLLM {printable(clip(text))} runs the V0 engine, which layoutgen does not "
                "plan: its memory rules are modelled (the public V0 logs plan within 5 %), "
                "but its options and defaults are not read (without chunked prefill V0 "
                "profiles a whole max_model_len prompt, and its flags differ from V1's); "
                "move to vLLM 0.9.2 or later "
                '(write version: "0.9.2" and an image of that release, e.g. '
                "docker.io/vllm/vllm-openai:v0.9.2; 0.8.x also plans, but counts every "
                "process on its GPUs as its own)"
            )
        return Version(text=text)

    @property
    def release(self) -> tuple[int, ...]:
        """The release whose rules apply (the newest read when no version is given)."""
        from layoutgen.runtimes.vllm import memory as vm

        return vm.version_tuple(NEWEST if self.version is None else self.version.text)

    @property
    def release_text(self) -> str:
        return NEWEST if self.version is None else self.version.text

    def follows(self, name: str) -> bool:
        for r in RELEASES:
            if r.name == name:
                return r.applies(self.release)
        raise KeyError(f"vllm has no rule {name!r}")


# ---- the model, from a format: safetensors profile ------------------------------------


def _most(value: int | tuple[int, ...] | None) -> int:
    if value is None:
        return 0
    return max(value) if isinstance(value, tuple) else value


def attention_layers(hp: HParams) -> int:
    """Decoder layers with a KV cache: all but recurrent and nextn/MTP ones (vLLM loads
    an MTP layer only for speculative decoding)."""
    return hp.n_layer - len(hp.recurrent_layers or ()) - (hp.nextn_layers or 0)


def gated_delta_net(hp: HParams) -> bool:
    """Whether the recurrent layers carry Gated DeltaNet's sizes (Qwen3-Next/3.5)."""
    return bool(hp.ssm_group_count and hp.ssm_time_step_rank and hp.ssm_state_size)


def state_bytes(hp: HParams, tp: int, dtype_bytes: int) -> int:
    """One Gated DeltaNet layer's state for one sequence on one GPU.

    ``MambaStateShapeCalculator.gated_delta_net_state_shape`` (0.20.0): conv
    state ``(key_dim x 2 + value_dim) / tp x (kernel - 1)``, temporal state
    ``num_v_heads / tp x head_v x head_k``; both in the model dtype
    (``mamba_cache_dtype`` auto).
    """
    if not hp.recurrent_layers or not gated_delta_net(hp):
        return 0
    n_k, n_v = hp.ssm_group_count or 0, hp.ssm_time_step_rank or 0
    head_k, inner = hp.ssm_state_size or 0, hp.ssm_inner_size or 0
    head_v = inner // n_v
    conv = (head_k * n_k * 2 + inner) // tp * ((hp.ssm_conv_kernel or 1) - 1)
    temporal = n_v // tp * head_v * head_k
    return (conv + temporal) * dtype_bytes


#: architectures whose vLLM model class lists ``embedding_modules``, so LoRA slots
#: cover embed_tokens and lm_head too (0.11.0: llama.py:493 LlamaForCausalLM, which
#: also serves Mistral checkpoints; Qwen2/Qwen3 list none, qwen3.py:264)
LORA_EMBEDDING_ARCHS = frozenset({"llama", "mistral"})


def vllm_model(profile: Profile, tp: int, *, mtp: bool = False) -> vm.VllmModel:
    """What vLLM's memory depends on, from the profile's hyperparameters and bytes.

    ``mtp``: speculative decoding with the checkpoint's MTP layers, which then keep
    KV like any attention layer (EagleProposer's layers join the KV cache groups);
    their weights are in the profile's bytes either way (``mtp.*`` tensors and
    decoder layers past num_hidden_layers are profiled, hf_checkpoint.py)."""
    from layoutgen.runtimes.vllm import memory as vm

    hp = profile.hparams
    heads = _most(hp.n_head)
    dtype_bytes = DTYPE_BYTES.get((hp.dtype or "bfloat16").lower(), 2)
    k = hp.key_length or ((hp.n_embd or 0) // heads if heads else 0)
    return vm.VllmModel(
        n_layer=attention_layers(hp) + ((hp.nextn_layers or 0) if mtp else 0),
        n_head_kv=_most(hp.n_head_kv) or heads,
        head_dim_k=k,
        head_dim_v=hp.value_length or k,
        hidden_size=hp.n_embd or 0,
        intermediate_size=_most(hp.n_ff),
        vocab_size=hp.vocab or 0,
        weights_bytes=profile.total_bytes,
        dtype_bytes=dtype_bytes,
        kv_lora_rank=hp.kv_lora_rank or 0,
        rope_dim=hp.rope_dim or 0,
        sliding_window=hp.sliding_window or 0,
        sliding_layers=frozenset(hp.swa_layers or ()) if hp.sliding_window else frozenset(),
        mamba_layers=len(hp.recurrent_layers or ()),
        mamba_state_bytes=state_bytes(hp, tp, dtype_bytes),
        moe_intermediate_size=hp.expert_ff or 0 if hp.n_expert else 0,
        moe_top_k=hp.n_expert_used or 0 if hp.n_expert else 0,
        n_head=heads,
        lora_embeddings=profile.arch in LORA_EMBEDDING_ARCHS,
        rope_positions=hp.rope_positions or 0,
        rotary_dim=(hp.rope_dim or k) if hp.rope_positions else 0,
    )


def tp_sizes(hp: HParams, most: int = 64) -> list[int]:
    """GPU counts vLLM can split the model over: attention heads divide evenly, and KV
    heads divide or are replicated (``QKVParallelLinear``: ``divide(kv, tp)`` when
    tp <= kv heads, else ``divide(tp, kv)``); MLA splits the query heads only."""
    heads = _most(hp.n_head)
    kv = _most(hp.n_head_kv) or heads
    out = []
    for tp in range(1, most + 1):
        if heads and heads % tp:
            continue
        if not hp.kv_lora_rank and kv and (kv % tp if tp <= kv else tp % kv):
            continue
        out.append(tp)
    return out


# ---- the budget -------------------------------------------------------------------------


@dataclass(frozen=True)
class Budget:
    """One worker's budget (per GPU) as layoutgen plans it, and the flags that pin it."""

    service: vm.VllmService
    weights: vm.Term
    lora: vm.Term  #: the LoRA slots (--max-loras x --max-lora-rank), with the weights
    activation: vm.Term
    non_torch: vm.Term
    #: NCCL buffers allocated before vLLM's snapshot (from 0.11.0, TP > 1): outside the
    #: budget, beside the CUDA context; 0 where they are non-torch memory inside it
    nccl: vm.Term
    cudagraph: vm.Term
    cudagraph_in_budget: bool
    kv: vm.Term  #: the KV cache vLLM will allocate
    kv_asked: int  #: parallel requests of max_model_len tokens, whole blocks, + the null block
    budget: int  #: weights + activation + non-torch (+ graphs) + kv
    utilization_milli: int  #: --gpu-memory-utilization x 1000
    rounded_up: bool  #: rounding down would have left KV short of one request
    kv_cache_memory_bytes: int | None  #: rendered where the release has the flag
    kv_bytes_per_token: int
    block_size: int
    kv_tokens: int
    max_concurrency: float

    @property
    def utilization(self) -> str:
        """As rendered: three decimals, never an exponent."""
        return f"{self.utilization_milli // 1000}.{self.utilization_milli % 1000:03d}"

    def requested(self, total: int) -> int:
        """What vLLM's start-up check asks to be free: ``ceil(total x utilization)``."""
        return -(-total * self.utilization_milli // 1000)


def plan_budget(
    rt: Vllm,
    model: vm.VllmModel,
    totals: Sequence[int],
    *,
    max_model_len: int,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    kv_cache_dtype: str,
    enforce_eager: bool,
    room: int | None = None,
    lora: int = 0,
    lora_exact: bool = True,
    spec: int = 0,
    parallel: int | None = None,
    estimate_cudagraphs: bool | None = None,
    flashinfer_sampler: bool | None = None,
    nvlink: bool | None = None,
    context: int | None = None,
) -> Budget:
    """The budget for ``parallel`` requests of ``max_model_len`` tokens (default
    ``max_num_seqs``), with vLLM's scheduler admitting ``max_num_seqs`` at once: that
    sizes the dummy sampler's rows and the CUDA graphs' batch sizes, not the KV cache.

    ``totals``: each GPU's total memory.  ``flashinfer_sampler``: the service's
    VLLM_USE_FLASHINFER_SAMPLER (:func:`~layoutgen.runtimes.vllm.memory.flashinfer_sampler`);
    ``nvlink``: whether its GPUs talk over NVLink
    (:func:`~layoutgen.runtimes.vllm.memory.nvlink_between`); ``context``: what a worker
    holds on its GPU before it measures, the largest of its GPUs'
    (:attr:`~layoutgen.runtimes.vllm.memory.VllmService.context_bytes`).  ``room``: the
    most the budget may take on the tightest of them beside everything else; when what that leaves
    for KV is below one request, vLLM would refuse to start, and
    :class:`~layoutgen.runtimes.vllm.memory.KvCacheRefused` says what fits.
    """
    from layoutgen.runtimes.vllm import memory as vm

    tp = len(totals)
    service = vm.VllmService(
        gpu_total_bytes=min(totals),
        max_model_len=max_model_len,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        version=rt.release_text,
        kv_cache_dtype=kv_cache_dtype,
        tensor_parallel_size=tp,
        enforce_eager=enforce_eager,
        spec_tokens=spec,
        estimate_cudagraphs=estimate_cudagraphs,
        flashinfer_sampler=flashinfer_sampler,
        nvlink=nvlink,
        context_bytes=context,
    )
    weights = vm.Term(math.ceil(model.weights_bytes / tp), vm.Basis.EXACT)
    # speculative decoding: the rejection sampler's rows (vm.sampler_rows), and the
    # proposer's own buffers
    activation = vm.Term(
        vm.activation_estimate(model, service) + vm.speculative_extra(model, service, spec),
        vm.Basis.ESTIMATED,
    )
    requests = max_num_seqs if parallel is None else parallel
    lora_term = vm.Term(lora, vm.Basis.EXACT if lora_exact else vm.Basis.ESTIMATED)
    non_torch = vm.Term(vm.non_torch_estimate(service), vm.Basis.UPPER_BOUND)
    outside_nccl = vm.nccl_outside(service)
    nccl = vm.Term(outside_nccl, vm.Basis.UPPER_BOUND)
    graphs = vm.Term(vm.cudagraph_estimate(model, service), vm.Basis.ESTIMATED)
    in_budget = vm.cudagraph_in_budget(service)
    before_kv = weights.bytes + lora_term.bytes + activation.bytes + non_torch.bytes
    before_kv += graphs.bytes if in_budget else 0
    block = vm.effective_block_size(model, service)
    page = block * vm.kv_bytes_per_token_layer(model, service)
    groups = vm._groups(model, block)
    slot = page * (groups[0][1] if groups else model.n_layer)  # one block of every layer
    one = vm.kv_needed_one_request(model, service)
    # whole blocks per request, for every request, and the block pool's null block
    # (BlockPool: block 0 is never handed out)
    kv_asked = requests * one + slot
    # graphs outside the budget (before 0.20) and NCCL buffers taken before the
    # snapshot (from 0.11) are still this GPU's memory: the room for KV is what is
    # left after them too, as the fit check counts them
    outside = (0 if in_budget else graphs.bytes) + nccl.bytes
    if room is not None and room - before_kv - outside - slot < one:
        left = max(room - before_kv - outside - slot, 0)
        raise vm.KvCacheRefused(
            max_model_len, one, left, vm.estimate_max_model_len(model, service, left)
        )
    flag = rt.follows("kv-cache-memory-bytes")
    budget = before_kv + kv_asked
    floor = min(budget * 1000 // t for t in totals)  # rounded down to 0.001
    milli, rounded_up = max(floor, 1), floor < 1
    kv = vm.Term(kv_asked, vm.Basis.EXACT)
    if not flag:
        # vLLM fills utilization x total with KV: what rounding down leaves must hold
        # one request (vLLM's own start-up check), else round up
        while min(t * milli // 1000 for t in totals) - before_kv < one + slot:
            milli, rounded_up = milli + 1, True
        kv = vm.Term(min(t * milli // 1000 for t in totals) - before_kv, vm.Basis.ESTIMATED)
        budget = before_kv + kv.bytes
    _, _, concurrency = vm.kv_capacity(model, service, max(kv.bytes - slot, 0))
    tokens = vm.capacity_tokens(service, concurrency)
    return Budget(
        service=service,
        weights=weights,
        lora=lora_term,
        activation=activation,
        non_torch=non_torch,
        nccl=nccl,
        cudagraph=graphs,
        cudagraph_in_budget=in_budget,
        kv=kv,
        kv_asked=kv_asked,
        budget=budget,
        utilization_milli=milli,
        rounded_up=rounded_up,
        kv_cache_memory_bytes=kv_asked if flag else None,
        kv_bytes_per_token=vm.kv_bytes_per_token_layer(model, service) * model.n_layer,
        block_size=block,
        kv_tokens=tokens,
        max_concurrency=concurrency,
    )
