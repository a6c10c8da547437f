"""ik_llama.cpp's compute buffers, term by term, from how its graph is built.

ggml's allocator keeps one buffer per backend and its high-water mark is
what the log prints; ik's graphs (``src/llama-build-context.cpp``,
``src/graphs/build_deepseek2.cpp``) peak in one of two places, and the
estimate is the larger:

- **a layer**: the KQ mask copied in from the host (n_kv x ubatch, f32, or
  f16 with flash attention since build 3907; a second one for
  sliding-window models) and, before 3907, its f16 cast; the embeddings'
  rows or the residual stream copied in; the residual and the normed input
  (2 x n_embd x ubatch f32); and the larger of the attention's and the
  FFN's own tensors.  Attention: Q/K/V
  activations; without flash attention the KQ scores (n_head x n_kv x
  ubatch f32, split by heads to fit ``-amb`` MiB when given); MLA at levels
  2-3 with flash attention decompresses the cache for the heads of one
  ``-amb`` step (n_kv x heads x (qk_nope + v) f32, then K and V as f16),
  otherwise it scores against the latent cache (KQ as above) and keeps its
  transpose.  Before build 4156 (rule ``mla-amb-one-step``) every step's K and
  V were built before the first attention ran, so the steps before the last
  stay allocated beside it, and the steps were found by halving the heads.
  FFN: the routed experts' activations, or gate/up/down of a dense layer.
- **the output**: the logits (n_vocab x ubatch f32, or x N tokens with
  ``-wgt N`` since build 4378; twice for gemma2/grok/gemma4, whose
  ``ggml_softcap`` cannot run in place) and two n_embd-wide tensors, on the
  device holding the output layer.

A dense FFN's width is the widest among the layers on that device (models
whose FFN width varies by layer: Nemotron-Ultra, 0 to 425,984).

The first GPU also receives host experts for big batches (rule
``offload-by-expert-share``): the largest host expert tensor and the
experts' activations (seed 001); with ``-fmoe`` (or ``-muge``) up and gate
together, the two inputs of the one ``ggml_moe_up_gate`` op the scheduler
copies in at once.  Read from ggml-backend.cpp's scheduler: a node whose
weight lives on another backend starts a new split ("the memory of the
previously offloaded weights can be reused"), so one op's weights are staged
at a time; each is allocated whole (``ggml_dup_tensor_layout``) even where
``-ooae`` copies only the experts the batch's ids use; ubatch decides only
whether the op is offloaded at all (``ggml_backend_cuda_offload_op``).  With
pipeline copies (``n_copies`` > 1) no split input is ever freed: every host
expert tensor, once per copy (ik discussion 816: 965,110.94 MiB on CUDA0).
The host side (``CUDA_Host`` beside GPUs) holds the mask(s), the token
embeddings' rows, and the routed experts' activations of layers whose
experts stay in host RAM and run there.  A CPU-only run holds all of it in
``CPU``.

Before build 3907 the f32 mask is cast to f16 by one node, on the first
layer's device: only that device holds the f32 copy, every other GPU is sent
the f16 result.  With pipeline copies (GGML_SCHED_MAX_COPIES > 1) every copy
of every graph input stays allocated, beside the logits too.

Checked against the truth table (tests/truth): the host side and the output
term reproduce logs to the MiB across architectures; Kimi-K2 at 131072 cells
with -amb 512 on a 2025-09 build (issue 756) to 1 %.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING

from layoutgen.core.kvcache import cells
from layoutgen.core.placement import has_lm_head
from layoutgen.core.rules import remembering
from layoutgen.core.setting import dense_staged
from layoutgen.models.quants import by_name
from layoutgen.runtimes.ik_llama_cpp.placement import expert_activations, offload_copy

if TYPE_CHECKING:
    from layoutgen.core.runtime import Runtime
    from layoutgen.core.setting import Basis, Setting
    from layoutgen.models.profile import HParams, Profile
    from layoutgen.runtimes.ik_llama_cpp import IkLlamaCpp

F32, F16 = 4, 2
MiB = 1 << 20
#: architectures whose graph caps the final logits with ggml_softcap (build_gemma2,
#: build_grok, build_gemma4 when final_logit_softcapping > 0: counted, high)
SOFTCAPPED_LOGITS = frozenset({"gemma2", "grok", "gemma4"})
#: build_deepseek2's pp_opt: ubatches of at least this many tokens attend in head space
PP_OPT_TOKENS = 128
#: ggml-cuda offloads a host-weight op to the first GPU from this many tokens
OFFLOAD_MIN_BATCH = 32


def _int(value: int | tuple[int, ...] | None) -> int:
    if isinstance(value, tuple):
        return max(value, default=0)
    return value or 0


def masks(s: Setting) -> int:
    """How many KQ masks the graph builds: two with sliding-window layers."""
    hp = s.profile.hparams
    return 2 if hp.swa_layers and hp.sliding_window else 1


@functools.lru_cache(maxsize=64)
def _types(profile: Profile) -> frozenset[str]:
    return frozenset(t.type for t in profile.tensors())


def _gpu_weights_run_on_host(
    s: Setting, layers: Mapping[int, str], experts: Mapping[int, str]
) -> int:
    """The largest weight on a GPU whose type this build's CUDA backend cannot multiply
    (cuda_types): the scheduler runs its op on the CPU and copies the weight into the
    host compute buffer for it, one op at a time.  ik PR #492's log (DeepSeek-R1's
    iq1_m_r4 down experts on two A6000s, a build before PR #494's kernel): CUDA_Host
    compute 932 MiB, an iq1_m_r4 expert tensor (784 MiB) beside the usual 46-190."""
    from layoutgen.core.placement import expert_kind, loaded

    if not s.devices:
        return 0
    lacking = {q for q in sorted(_types(s.profile)) if s.rt.gpu_matmul(q) is not True}
    if not lacking:
        return 0
    biggest = 0
    for t in loaded(s.profile, s.rt):
        if t.type not in lacking or len(t.shape) < 2 or t.layer is None:
            continue
        where = experts.get(t.layer) if expert_kind(t.name) else layers.get(t.layer)
        if where in s.devices:
            biggest = max(biggest, t.nbytes)
    return biggest


def _expert_layers(s: Setting) -> list[int]:
    """The layers with routed experts the runtime loads (from the profile's tensors)."""
    from layoutgen.core.setting import expert_bytes

    return list(expert_bytes(s.profile, s.rt))


def _host_expert_bytes(s: Setting, experts: Mapping[int, str]) -> int:
    """Bytes of every routed-expert tensor left in host memory."""
    from layoutgen.core.setting import expert_bytes

    return sum(b for il, b in expert_bytes(s.profile, s.rt).items() if il not in experts)


def _experts_on_host(s: Setting, experts: Mapping[int, str]) -> bool:
    return any(il not in experts for il in _expert_layers(s))


#: ``-rtr`` (``--run-time-repack``): with mmap off (which -rtr sets) the loader passes
#: every host tensor through ``iqk_repack_tensor`` (src/llama.cpp, "if (!ml.use_mmap &&
#: ml.repack_tensors)"), which turns these types into their row-interleaved forms
#: (ggml/src/iqk/iqk_quantize.cpp, ``get_repack_info``'s k_map: the same at builds 3712
#: and 4840 but for mxfp4, added since; bf16/f16 only on AVX512-BF16 hosts, left out).
REPACKED_AS: Mapping[str, str] = {
    **{
        t: f"{t}_r4"
        for t in (
            "iq2_k", "iq3_k", "iq4_k", "iq5_k", "iq4_ks", "iq5_ks", "iq4_nl", "iq2_bn",
            "iq2_xxs", "iq2_xs", "iq2_s", "iq3_xxs", "iq3_s", "q2_k", "q3_k", "q4_k",
            "q5_k", "q6_k", "q5_0", "q6_0",
        )
    },
    **{t: f"{t}_r8" for t in ("iq4_xs", "q4_0", "q8_0", "q8_k", "q8_kv")},
    "mxfp4": "mxfp4_r8",
}  # fmt: skip


def _repacks(s: Setting) -> bool:
    """Whether host tensors are repacked at load (-rtr, which also turns mmap off)."""
    return any(a in ("-rtr", "--run-time-repack") for a in s.args)


def _cuda_multiplies_host_experts(s: Setting, experts: Mapping[int, str]) -> bool:
    """Whether any host expert tensor is of a type some build's CUDA backend multiplies.

    The scheduler offloads an op only where ``ggml_backend_supports_op`` agrees; the
    CPU-repacked types (``q2_k_r4``, ``q8_0_r8``, ...) have no CUDA matmul in any build
    (cuda_types), so their MoE ops stay on the CPU, nothing is copied to the first GPU
    and CUDA_Host holds the experts' activations.  A type whose kernel came in some
    build counts as multiplied whatever the version: an unknown build may have it."""
    by_cuda = _expert_layers_by_cuda(s.profile, s.rt, _repacks(s))
    return any(il not in experts for il in by_cuda[0])


def _cpu_only_host_experts(s: Setting, experts: Mapping[int, str]) -> bool:
    """Whether a host expert tensor is of a type no CUDA build multiplies (its op runs
    on the CPU even where the others' are offloaded)."""
    by_cuda = _expert_layers_by_cuda(s.profile, s.rt, _repacks(s))
    return any(il not in experts for il in by_cuda[1])


@remembering(64)
def _expert_layers_by_cuda(
    profile: Profile, rt: Runtime, repacked: bool = False
) -> tuple[frozenset[int], ...]:
    """The expert layers holding a routed-expert tensor of a type some CUDA build
    multiplies, and those holding one of a type none does.  REPACKED: the host experts'
    types as -rtr leaves them (REPACKED_AS): ``q4_k_r4`` has no CUDA matmul in any
    build, so the MoE ops stay on the CPU and CUDA_Host holds their activations (ik
    issue 455, build 3712, -rtr with exps=CPU: CUDA_Host compute 176 MiB, not the 78 of
    a run whose expert matmuls go to the GPU)."""
    from layoutgen.core.placement import expert_layer, loaded
    from layoutgen.runtimes.ik_llama_cpp.cuda_types import CUDA_MATMUL

    cuda: set[int] = set()
    cpu: set[int] = set()
    for t in loaded(profile, rt):
        layer = expert_layer(t.name)
        if layer is not None:
            qtype = t.type.lower()
            qtype = REPACKED_AS.get(qtype, qtype) if repacked else qtype
            (cuda if qtype in CUDA_MATMUL else cpu).add(layer)
    return frozenset(cuda), frozenset(cpu)


def _offloaded(rt: IkLlamaCpp, hp: HParams, ub: int) -> bool:
    """Whether host experts' matmuls run on the first GPU (rule offload-by-expert-share)."""
    if not hp.n_expert or ub < 32:
        return False
    if ub * (hp.n_expert_used or 0) >= 32 * hp.n_expert:
        return True  # either way: the rule is not asked (solve.builds)
    return not rt.follows("offload-by-expert-share")


def _host_experts(s: Setting, fused: bool) -> int:
    """Activations of routed experts computed on the CPU: up and gate (fused with
    ``-fmoe``), and the down projection's n_expert_used outputs."""
    hp, ub = s.profile.hparams, s.kv.ubatch
    used, ff, e = hp.n_expert_used or 0, hp.expert_ff or 0, hp.n_embd or 0
    return ((1 if fused else 2) * ff + e) * used * ub * F32


def _attention(rt: IkLlamaCpp, s: Setting) -> int:
    hp, kv = s.profile.hparams, s.kv
    ub, n_kv = kv.ubatch, cells(hp, kv, swa=False)
    n_head = _int(hp.n_head)
    # -amb's default is a dated rule: asked only where it bounds something (MLA, or
    # attention without flash), so builds on either side of it are one epoch elsewhere
    if (hp.kv_lora_rank and kv.mla != 0) or not kv.flash_attn:
        amb = rt.attn_max_mib(s.args) * MiB
    if hp.kv_lora_rank and kv.mla != 0:
        rank, rope = hp.kv_lora_rank, hp.rope_dim or 0
        nope = max(0, (hp.key_length or 192) - rope) if (hp.key_length or 0) < rank else 128
        v = hp.value_length if hp.value_length and hp.value_length < rank else 128
        level = 3 if kv.mla is None else kv.mla
        if level > 1 and kv.flash_attn and ub >= PP_OPT_TOKENS:
            # -mla 3 came after PR #260 (3599): only level 2 had the f32 path
            if level == 2 and not rt.follows("flash-mla-2-by-step"):
                return _f32_decompressed(s, n_head, n_kv, nope, rope, v)
            # prompt processing attends in head space over the decompressed cache:
            # q (qk_nope + rope per head) and the output (v per head) beside the
            # decompressed heads of one -amb step (build_deepseek2.cpp, pp_opt)
            heads = _heads_per_step(rt, n_head, n_kv * n_head * (nope + v) * F32, amb)
            per_head = n_kv * ((nope + v) * F32 + (nope + rope + v) * F16)
            step = heads * per_head
            if not rt.follows("mla-amb-one-step"):
                # every step's K (nope + rope) and V (f16) is built before the first
                # attention runs: the steps before the last stay allocated beside it
                # (Kimi-K2, 4 x 131072 cells, 16 steps: 4,800 MiB; issue 756's log)
                step += (n_head // heads - 1) * heads * n_kv * (nope + rope + v) * F16
            return n_head * ub * (nope + rope + v) * F32 + step
        absorbed = n_head * ub * (rank + rope + rank) * F32  # q in latent space, kqv
        kq = n_head * n_kv * ub * F32
        return absorbed + (min(kq, amb) if amb else kq) + n_kv * rank * F16
    n_kv_heads = _int(hp.n_head_kv) or n_head
    dk = hp.key_length or ((hp.n_embd or 0) // n_head if n_head else 0)
    dv = hp.value_length or dk
    qkv = ub * (n_head * dk + n_kv_heads * (dk + dv) + n_head * dv) * F32
    if kv.flash_attn:
        return qkv
    kq = n_head * n_kv * ub * F32
    return qkv + (min(kq, amb) if amb else kq)


def _f32_decompressed(s: Setting, n_head: int, n_kv: int, nope: int, rope: int, v: int) -> int:
    """MLA-2 prompt processing with flash attention before PR #260 (builds 3583-3589, on
    any build with a GPU backend: llama.cpp's ``else`` branch, "Hahaha, we need to
    convert the KV cache for this layer to f32"): the layer's cache cast to f32
    (``kv_cache_view_f32``, n_kv x (rank + rope)), every head decompressed at once
    (``kv_f32`` = wkv_b x cache, n_kv x n_head x (nope + v) f32), the rope part repeated
    per head (``k_rope_f32``, rope f32) and concatenated (``k_f32``, nope + rope f32),
    then K and V cast to the cache type; -amb is not read.  ggml-alloc frees the f32
    cache after the repeat and the repeat after the concat: at the concat all four are
    allocated, the f32 cache as a hole below the rest; K's cast lands in the repeat's
    hole when it fits (q8_0: 204 bytes a row of 192 in 256), else on top.  q_concat
    (nope + rope per head, f32) is built first and stays until the attention runs.
    pr259's log (3596 on its branch, A6000, 32768 cells, q8_0): 8,470 MiB of compute;
    pr239's (16 RTX 3090, 2048 cells, f16): 810 MiB on each GPU."""
    rank = s.profile.hparams.kv_lora_rank or 0
    cache_row = by_name(s.kv.cache_type_k, "ik")
    heads = n_kv * n_head
    f32_cache = n_kv * (rank + rope) * F32
    kv_f32, repeat, k_f32 = (
        heads * (nope + v) * F32,
        heads * rope * F32,
        heads * (nope + rope) * F32,
    )
    k_cast = (
        n_kv * n_head * cache_row.row_bytes(nope + rope)
        if (nope + rope) % cache_row.block_size == 0
        else k_f32
    )
    at_concat = f32_cache + kv_f32 + repeat + k_f32
    peak = at_concat + (k_cast if k_cast > repeat else 0)
    q_concat = n_head * s.kv.ubatch * (nope + rope) * F32
    return q_concat + peak


def _heads_per_step(rt: IkLlamaCpp, n_head: int, kv_f32: int, amb: int) -> int:
    """Heads decompressed at once, as build_deepseek2 fits them to -amb (whole MiB)."""
    size, limit = kv_f32 // MiB, amb // MiB
    if not limit or size <= limit:
        return n_head
    if not rt.follows("mla-amb-one-step"):
        heads = n_head  # halved while even and the step is still too big
        while heads % 2 == 0 and size > limit:
            heads, size = heads // 2, size // 2
        return heads
    fits_step = rt.follows("amb-step-fit")
    for niter in range(2, n_head):
        share = size // niter if fits_step else size // (n_head // niter)
        if n_head % niter == 0 and share <= limit:
            return n_head // niter
    return 1


def _ffn(s: Setting, experts_here: bool, here: list[int] | None = None) -> int:
    """The FFN's activations: the routed experts', or a dense layer's gate/up/down at the
    widest FFN among the layers HERE (Nemotron-Ultra's differ by layer: 0 to 425,984;
    each GPU holds its own layers' widest; none given: the model's widest)."""
    hp, ub = s.profile.hparams, s.kv.ubatch
    if experts_here:
        return expert_activations(s.profile, ub)
    if here and set(here) <= set(_expert_layers(s)):
        # only MoE layers here, their experts elsewhere: the router's logits and
        # probabilities (the hparams' n_ff is the unused dense width; Qwen3-235B at
        # -ngl 63 with exps=CPU: the second GPU's 896 MiB holds no FFN of 12288)
        return 2 * (hp.n_expert or 0) * ub * F32
    n_ff = hp.n_ff
    if isinstance(n_ff, tuple) and here:
        widest = max((n_ff[il] for il in here if il < len(n_ff)), default=0)
    else:
        widest = _int(n_ff)
    return 3 * widest * ub * F32


def estimate(
    rt: IkLlamaCpp,
    s: Setting,
    buffer: str,
    output: str | None,
    layers: Mapping[int, str],
    experts: Mapping[int, str],
) -> tuple[int, Basis]:
    hp, kv = s.profile.hparams, s.kv
    ub, e = kv.ubatch, hp.n_embd or 0
    n_kv = cells(hp, kv, swa=False)
    f16_mask = kv.flash_attn and rt.follows("f16-mask-with-flash-attn")
    mask = masks(s) * n_kv * ub * (F16 if f16_mask else F32)
    cast = masks(s) * n_kv * ub * F16 if kv.flash_attn and not f16_mask else 0
    fused = rt.fused_moe(s.args)
    on_host = _experts_on_host(s, experts)
    offloaded = (
        bool(s.devices) and _offloaded(rt, hp, ub) and _cuda_multiplies_host_experts(s, experts)
    )
    host_runs_experts = on_host and (not offloaded or _cpu_only_host_experts(s, experts))
    copies = _copies(rt, s, layers, experts)
    # a partial -ngl: layers (or the output) left on the CPU beside GPUs
    partial = bool(s.devices) and (len(layers) < (hp.n_layer or 0) or output is None)
    basis: Basis = "upper-bound" if partial else "estimated"
    if s.devices and buffer not in s.devices:
        if buffer != "CUDA_Host":
            return 0, "estimated"
        host = (mask + e * ub * F32) * copies
        if host_runs_experts:
            host += _host_experts(s, fused)
        host += _gpu_weights_run_on_host(s, layers, experts)
        if partial:
            # the CPU layers' residual stream besides the embeddings' rows: a llama-2 at
            # -ngl 0 logged both (21.01 MiB), Qwen3-235B at -ngl 63 only the rows
            host += e * ub * F32
        return host, basis
    # gemma2/grok/gemma4 cap the logits with one ggml_softcap, which ggml-alloc cannot
    # do in place: the capped copy sits beside the matmul's (gemma-2-2b on the CPU:
    # 2 x 500 MiB + the final norm, ik issue 60)
    capped = 2 if s.profile.arch in SOFTCAPPED_LOGITS else 1
    vocab = (hp.vocab or 0) if has_lm_head(s.profile) else 0  # an encoder pools, no logits
    logits = capped * vocab * rt.output_tokens(s.args, ub) * F32 + 2 * e * ub * F32
    if cast and layers and layers[min(layers)] != buffer:
        # one cast node, on the first layer's device: every other GPU is sent its f16
        # result (two T4s, 4 copies: 4 x 32 MiB on CUDA1, issue 398's log)
        mask, cast = cast, 0
    here = [il for il, dev in layers.items() if dev == buffer] if s.devices else []
    moe_here = any(experts.get(il) == buffer for il in here) if s.devices else not on_host
    first_gpu = next((d for d in s.devices if d.startswith("CUDA")), None)
    offload_target = buffer == first_gpu and (partial or on_host)
    # no layer, no output, no experts, no host matmuls (-ngl 0 on a second GPU): the
    # scheduler gives it no node and ik no compute buffer
    idle = not here and buffer != output and not offload_target
    if s.devices and idle and all(dev != buffer for dev in experts.values()):
        return 0, basis
    held = 2 * e * ub * F32
    # split inputs: the mask, and the embeddings' rows (on layer 0's device) or the
    # residual stream (on the others), n_embd x ubatch f32; CPU only: the same, once
    inputs = (mask + e * ub * F32) * copies + cast if s.devices else mask + e * ub * F32
    layer = inputs + held + max(_attention(rt, s), _ffn(s, moe_here, here))
    away = [il for il, dev in experts.items() if dev == buffer and layers.get(il) != buffer]
    if s.devices and away:
        # experts overridden (-ot) to this GPU from layers on another device: their MoE
        # ops run here, where their weights are (ggml-backend.c's scheduler, pass 1:
        # "operations with weights are preferably run on the same backend as the
        # weights"), each in a split of its own whose input, the layer's normed hidden
        # state (n_embd x ubatch f32), is copied in (ik discussion 491: blk 30-45's
        # experts on CUDA2, their layers on CUDA1: CUDA2 836 MiB at ub 4096, more than
        # its own layers' attention needs)
        layer = max(layer, e * ub * F32 + expert_activations(s.profile, ub))
    if not s.devices and host_runs_experts:
        layer = max(layer, inputs + held + _host_experts(s, fused))
    if buffer == first_gpu and partial and ub >= OFFLOAD_MIN_BATCH:
        # big-batch matmuls of host weights run here, one copied weight per split: the
        # largest, its output and the normed input beside it (a llama-2 at -ngl 0: its
        # q8_0 output 166.02 MiB + logits 62.5 + 2 x 10 = 248.52 MiB, 248.54 logged)
        layer = max(layer, dense_staged(s, layers, output) + held)
    if buffer == first_gpu and on_host and offloaded:
        copy = offload_copy(
            s.profile,
            ub,
            experts,
            # -fmoe's ggml_moe_up_gate reads up and gate in one op: the scheduler
            # copies both in for it, as one -muge tensor (ggml-backend, split inputs)
            merge_up_gate=rt.merges_up_gate(s.args) or fused,
            # (asked only where the share decides: solve.builds)
            by_share=ub * (hp.n_expert_used or 0) < 32 * (hp.n_expert or 0)
            and rt.follows("offload-by-expert-share"),
        )
        if copies > 1:
            # pipeline copies: ggml_backend_sched_split_graph makes every split input a
            # leaf and an output of each copy, so no copy is ever freed: every host
            # expert tensor the first GPU multiplies stays in its buffer, once per copy
            # (ik discussion 816, GLM-4.5 with 235,294 MiB of host experts, n_copies=4:
            # "allocating 965110.94 MiB on device 0: cudaMalloc failed")
            copy = copies * _host_expert_bytes(s, experts)
            # and so does what the MoE ops of layers on other GPUs read from there: the
            # normed input (n_embd x ubatch f32) and the chosen experts' ids (i32)
            away = [
                il for il in _expert_layers(s) if il not in experts and layers.get(il) != buffer
            ]
            copy += copies * len(away) * (e + (hp.n_expert_used or 0)) * ub * F32
        # seed 001 (GLM-5.1, -ub 8192, -muge): 5418.03 MiB logged = the fused up+gate
        # copy (2450) + the activations (2944) + 24: the copy phase holds no more
        layer = max(layer, copy + expert_activations(s.profile, ub))
    peak = layer
    if buffer == output or not s.devices:
        # with several copies every copy of every graph input stays allocated (the
        # scheduler marks them inputs and outputs); with one, they are freed by now
        kept = (mask + e * ub * F32) * copies if copies > 1 else 0
        peak = max(peak, logits + kept)
    return peak, basis


def _copies(
    rt: IkLlamaCpp, s: Setting, layers: Mapping[int, str], experts: Mapping[int, str]
) -> int:
    """Pipeline parallelism's copies of every graph input over several GPUs (the build's
    GGML_SCHED_MAX_COPIES, ``runtimes.<id>.sched_copies``), unless tensors are
    overridden (since build 3941).  llama_new_context_with_model enables it only with
    more than one device, every layer and the output offloaded (n_gpu_layers >
    n_layer), -sm layer and the KV cache on the GPUs (no -nkvo)."""
    if len(s.devices) < 2 or s.row_shares is not None:
        return 1
    n_layer = s.profile.hparams.n_layer or 0
    if s.gpu_layers is not None and s.gpu_layers <= n_layer:
        return 1
    if any(a in ("-nkvo", "--no-kv-offload") for a in s.args):
        return 1
    overridden = any(experts.get(il) != layers.get(il) for il in _expert_layers(s))
    if overridden and rt.follows("no-pipeline-with-overrides"):
        return 1
    return rt.sched_copies
