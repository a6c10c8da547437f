"""ik_llama.cpp: where it puts tensors, how it sizes buffers, what its flags mean, by build.

Read from ik_llama.cpp's tree (mirror of 2026-08-15, build 4840: the build
number is the tree's commit count, which ``--version`` prints); each rule
below names the pull request that introduced the behaviour, its merge
commit and the first build that has it.  Seed 001's GLM-5.1 runs, the
calibration of this module, print no build: their logs split layers by
size, pin host weights with mmap on, and count ``--n-cpu-moe`` from blk.0,
which places them between builds 4357 and 4796.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from layoutgen.core.rules import Rule, rule
from layoutgen.core.runtime import Runtime, flag_value
from layoutgen.models.quants import by_name

if TYPE_CHECKING:
    from layoutgen.core.setting import Basis, Setting
    from layoutgen.models.profile import HParams, Profile
    from layoutgen.models.tensors import Tensor

_KEEP_IN_NEXTN = re.compile(r"\.attn_[kv]_b\.weight$")
_MAINLINE_KV = frozenset({"f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"})

RULES = (
    rule(
        "flash-mla-2-by-step",
        3590,
        "2025-03-18",
        "ik_llama.cpp PR #260 (9fe2b06f7)",
        "MLA-2 prompt processing with flash attention decompresses the cache for one -amb "
        "step of heads at a time, straight from the cache; before, on any build with a GPU "
        "backend, the whole cache was cast to f32, every head's K and V decompressed at "
        "once in f32 (K's rope part repeated per head and concatenated), then cast to the "
        "cache type, and -amb did not bound it",
    ),
    rule(
        "offload-by-expert-share",
        3745,
        "2025-06-12",
        "ik_llama.cpp PR #520 (dc663fe63)",
        "a MoE matmul with host experts runs on the first GPU (which copies the expert "
        "tensor into its compute buffer) only when ubatch x n_expert_used >= 32 x n_expert; "
        "before, whenever ubatch >= 32",
    ),
    rule(
        "reasoning-budget",
        3870,
        "2025-09-01",
        "ik_llama.cpp PR #723 (d7882c3cf)",
        "llama-server takes --reasoning-budget (0 turns thinking off)",
    ),
    rule(
        "f16-mask-with-flash-attn",
        3907,
        "2025-10-13",
        "ik_llama.cpp PR #825 (4e24d48e6)",
        "with flash attention the causal KQ mask is built as f16 (before: f32, cast to "
        "f16 on each device)",
    ),
    rule(
        "kv-skips-unused-layers",
        3918,
        "2025-10-20",
        "ik_llama.cpp PR #843 (1f072ab13)",
        "no KV cache for nextn/MTP layers when MTP is off (before: every layer had one)",
    ),
    rule(
        "flash-attn-by-default",
        3928,
        "2025-10-25",
        "ik_llama.cpp PR #863 (41d6c42b9)",
        "flash attention on by default; -fa removed, -no-fa turns it off",
    ),
    rule(
        "no-pipeline-with-overrides",
        3941,
        "2025-10-31",
        "ik_llama.cpp PR #879 (a3bd0158f)",
        "no pipeline parallelism (4 copies of every graph input) when tensors are "
        "overridden (-ot, --cpu-moe)",
    ),
    rule(
        "mla-3-by-default",
        3983,
        "2025-11-12",
        "ik_llama.cpp PR #943 (ddc88bac1)",
        "an MLA model without -mla runs MLA 3 (common.h mla_attn = 3); before, 0: "
        "standard attention, a full K and V cache per head",
    ),
    rule(
        "flash-attn-value",
        3989,
        "2025-11-13",
        "ik_llama.cpp PR #944 (874926800)",
        "-fa/--flash-attn takes on|off|auto, as mainline's does",
    ),
    rule(
        "no-row-split",
        4035,
        "2025-12-01",
        "ik_llama.cpp PR #1022 (a71934998)",
        "-sm graph (tensor parallel) replaces -sm row, which now loads every layer on the "
        "main GPU alone",
    ),
    rule(
        "merge-up-gate",
        4109,
        "2026-01-12",
        "ik_llama.cpp PR #1137 (c03c2d7cc)",
        "-muge fuses each layer's up and gate experts into one tensor",
    ),
    rule(
        "mla-amb-one-step",
        4156,
        "2026-01-31",
        'ik_llama.cpp commit b85a2a50d ("Reduce compute buffer size for mla=3", no pull request)',
        "MLA prompt processing with flash attention decompresses the cache for one -amb "
        "step of heads at a time (before: every step's K and V were built before any "
        "attention ran, all held at once); heads per step by divisor of n_head (before: "
        "halved while even)",
    ),
    rule(
        "amb-step-fit",
        4265,
        "2026-03-07",
        "ik_llama.cpp PR #1375 (c1c342146)",
        "-amb's heads per MLA step: n_head/k for the smallest k whose share of the "
        "decompressed cache fits -amb (builds 4156-4264 compared the share of n_head/k "
        "steps instead: n_head/2 heads, or 1)",
    ),
    rule(
        "n-cpu-moe-by-device",
        4325,
        "2026-03-19",
        "ik_llama.cpp PR #1464 (9b7db9bc3)",
        "--n-cpu-moe is applied by the loader: over several GPUs with a layer split it is "
        "shared in proportion to each device's layers, each giving up its highest layers",
    ),
    rule(
        "split-by-size",
        4327,
        "2026-03-20",
        "ik_llama.cpp PR #1466 (0871ab296)",
        "layers split over GPUs by their size (weights and KV), not their count",
    ),
    rule(
        "pinned-overrides",
        4353,
        "2026-03-25",
        "ik_llama.cpp PR #1508 (d66dc7c0c)",
        "without mmap, tensors overridden to the CPU go to pinned CUDA_Host (before: CPU)",
    ),
    rule(
        "pinned-overrides-with-mmap",
        4357,
        "2026-03-26",
        "ik_llama.cpp PR #1510 (095bd3d3b)",
        "with tensors overridden to the CPU, mmap is turned off and every host tensor goes "
        "to pinned CUDA_Host (before, with mmap: mapped CPU buffers)",
    ),
    rule(
        "worst-graph-tokens",
        4378,
        "2026-04-01",
        "ik_llama.cpp PR #1560 (9660eb448)",
        "-wgt/--worst-graph-tokens N reserves the output for N tokens instead of a whole "
        "ubatch: the logits in the output device's compute buffer shrink to n_vocab x N",
    ),
    rule(
        "n-cpu-moe-from-last",
        4797,
        "2026-08-07",
        "ik_llama.cpp PR #2262 (da2293ded)",
        "--n-cpu-moe on one GPU keeps the last N MoE layers (before nextn) in host RAM, "
        "not the first N layers",
    ),
    rule(
        "amb-256-by-default",
        4832,
        "2026-08-13",
        "ik_llama.cpp PR #2312 (37d82c231)",
        "-amb (attention max batch, MiB) defaults to 256 instead of 0 (unlimited)",
    ),
)


@dataclass(frozen=True)
class IkLlamaCpp(Runtime):
    KIND: ClassVar[str] = "ik_llama.cpp"
    FLAVOUR = "ik"
    RULES = RULES
    READ_FROM: ClassVar[str] = "ik_llama.cpp build 4840 (8337e4cd, 2026-08-15)"
    CACHE_TYPES: ClassVar[frozenset[str]] = _MAINLINE_KV | {"q6_0"}
    INSTEAD: ClassVar[Mapping[str, str]] = {
        "draft": "ik_llama.cpp's draft model takes other flags than llama.cpp's (its own "
        "context, --ctx-size-draft, and --draft-max) and layoutgen does not plan its memory; "
        "pass them in 'args' and leave room for it",
    }
    KV_ALWAYS_UNIFIED: ClassVar[bool] = True
    #: -ngl below all layers: checked against the truth table's 2025 logs (a llama-2 at
    #: -ngl 0 on an RTX 3090 Ti, Qwen3-235B at -ngl 63 of 94 on two 4090s)
    PARTIAL_OFFLOAD: ClassVar[bool] = True
    SWA_RING: ClassVar[bool] = False
    FLAT_V: ClassVar[bool] = True
    PACKED_STATE: ClassVar[bool] = True
    MLA_LEVELS: ClassVar[bool] = True
    #: ggml_moe_up_gate reads ffn_up_exps and ffn_gate_exps in one op
    #: (llm_build_moe_ffn, with -fmoe: on by default), wherever each lies
    EXPERT_GROUPS = (frozenset({"up", "gate"}),)
    #: lines only ik prints: llama_init_from_model's own context options ("attn_max_b",
    #: "fused_moe"; seed 001), and its CUDA backend's pinned-memory line
    LOG_MARKERS: ClassVar[tuple[tuple[str, re.Pattern[str]], ...]] = (
        ("attn_max_b ", re.compile(r": attn_max_b\s+=\s+-?[0-9]")),
        ("fused_moe ", re.compile(r": fused_moe\s+=\s+-?[0-9]")),
        ("pinned host", re.compile(r"Allocating [0-9.]+ GiB of pinned host memory")),
    )

    # ---- weights -------------------------------------------------------------------

    def keeps(self, profile: Profile, tensor: Tensor, nextn: frozenset[int]) -> bool:
        """GLM-DSA: ik creates the nextn layer's ``attn_k_b``/``attn_v_b`` even without MTP."""
        if tensor.layer not in nextn:
            return True
        return profile.arch == "glm-dsa" and bool(_KEEP_IN_NEXTN.search(tensor.name))

    def host_buffer(self, *, gpus: bool, host_overrides: bool, mmap: bool) -> str:
        """Host weights beside a GPU: pinned ``CUDA_Host`` without mmap; since build 4357
        also with mmap as soon as any tensor is overridden to the CPU (ik turns mmap
        off); else mapped, named ``CPU``."""
        if not gpus:
            return "CPU"
        if not mmap or (host_overrides and self.follows("pinned-overrides-with-mmap")):
            return "CUDA_Host"
        return "CPU"

    def expert_host_buffer(self, *, gpus: bool, mmap: bool) -> str:
        """Experts overridden to the CPU: ``CPU`` until build 4353 (a 2025 log with
        --no-mmap: CPU 138767 MiB of experts beside CUDA_Host 497 MiB), pinned
        ``CUDA_Host`` since, without mmap (#1508) and from 4357 with it (#1510)."""
        if not gpus:
            return "CPU"
        if self.follows("pinned-overrides-with-mmap"):
            return "CUDA_Host"
        if self.follows("pinned-overrides") and not mmap:
            return "CUDA_Host"
        return "CPU"

    def created_weights(self, profile: Profile, mla: int | None) -> Mapping[int, int]:
        from layoutgen.runtimes.ik_llama_cpp.placement import computed_wkv_b

        return computed_wkv_b(profile, mla)

    def gpu_layers(self, n_layer: int, ngl: int) -> tuple[int, bool]:
        """``-ngl N`` counts repeating layers only: layers from n_layer - N go to the
        GPUs, and the output only when N exceeds n_layer (``llm_load_tensors``, every
        build from 2025 to 4840: i_gpu_start = n_layer - N, the output offloaded
        ``if (n_gpu_layers > n_layer)``).  -ngl 94 on a 94-layer model leaves the
        output on the CPU, where llama.cpp would offload it."""
        return max(n_layer - ngl, 0), ngl > n_layer

    def splits_rows(self) -> bool:
        """-sm row's split buffer until build 4035 (PR #1022 gave the split buffer type to
        -sm graph and attn)."""
        return not self.follows("no-row-split")

    def cpu_layer_kv_buffer(self, *, gpus: bool) -> str:
        """A CPU layer's buffer type is ``llama_default_buffer_type_cpu(true)``: pinned
        ``CUDA_Host`` on a CUDA build, where its KV cache goes too (a llama-2 at -ngl 0:
        CUDA_Host KV buffer 400 MiB).  ggml-cuda falls back to a plain ``CPU`` buffer
        when cudaMallocHost fails or GGML_CUDA_NO_PINNED is set: the same host RAM."""
        return "CUDA_Host" if gpus else "CPU"

    def layer_split(
        self,
        s: Setting,
        kv_per_layer: Mapping[int, int],
        shares: Sequence[float],
        layers: Sequence[int],
    ) -> dict[int, str]:
        from layoutgen.core.placement import split_by_count
        from layoutgen.core.setting import output_device
        from layoutgen.runtimes.ik_llama_cpp.placement import split_by_size, split_sizes

        # a partial -ngl splits only the offloaded layers, and the output when it goes
        with_output = output_device(s) is not None
        by_count = split_by_count(list(layers), s.devices, shares, output=with_output)
        sizes, output = split_sizes(s.profile, kv_per_layer, s.kv.ubatch)
        wanted = set(layers)
        sizes = {il: b for il, b in sizes.items() if il in wanted}
        by_size = split_by_size(sizes, output if with_output else 0, s.devices, shares)
        if by_size == by_count:
            return by_size  # the rule changes nothing here: not asked (solve.builds)
        return by_size if self.follows("split-by-size") else by_count

    def n_cpu_moe_host(
        self, s: Setting, layers: Mapping[int, str], expert_layers: Sequence[int], n: int
    ) -> set[int]:
        """Before build 4325: blk.0 .. blk.n-1 (common.cpp wrote one -ot rule per layer).
        Since: on one GPU (or n >= n_layer) the same until build 4797, then the last n
        layers that have experts, counted down from the first nextn layer; over several
        GPUs with a layer split, n shared in proportion to each device's layer count
        (rounded, then corrected one at a time toward the exact share), each device
        giving up its highest layers (``create_tensors_helper``)."""
        n_layer = s.profile.hparams.n_layer
        if not self.follows("n-cpu-moe-by-device"):
            return set(range(min(n, n_layer)))
        if len(s.devices) < 2 or n >= n_layer:
            if not self.follows("n-cpu-moe-from-last"):
                return set(range(min(n, n_layer)))
            return set(sorted(expert_layers, reverse=True)[:n])
        counts = [sum(1 for il in range(n_layer) if layers.get(il) == d) for d in s.devices]
        share = _share(counts, n, n_layer)
        host: set[int] = set()
        for d, dev in enumerate(s.devices):
            mine = sorted((il for il in range(n_layer) if layers.get(il) == dev), reverse=True)
            host.update(mine[: share[d]])
        return host

    # ---- KV cache ------------------------------------------------------------------

    def ctx_padding(self, flash_attn: bool) -> int:
        return 256 if flash_attn else 32

    def sizes_state(self, hp: HParams) -> bool:
        """Only qwen3next-style recurrent layers (ssm groups and time-step rank): the
        packed conv + delta-net state is what layoutgen.core.kvcache models."""
        return bool(hp.ssm_group_count and hp.ssm_time_step_rank)

    def kv_for_nextn(self) -> bool:
        return not self.follows("kv-skips-unused-layers")

    def mla_default(self) -> int | None:
        return 3 if self.follows("mla-3-by-default") else 0

    def v_cache_needs_flash_attn(self, cache_type_v: str) -> bool:
        """ik accepts only f16 and bf16 V caches without flash attention."""
        return by_name(cache_type_v, "ik").name not in ("f16", "bf16")

    # ---- compute buffers -----------------------------------------------------------

    def compute(
        self,
        s: Setting,
        buffer: str,
        output: str | None,
        layers: Mapping[int, str],
        experts: Mapping[int, str],
    ) -> tuple[int, Basis]:
        from layoutgen.runtimes.ik_llama_cpp.compute import estimate

        return estimate(self, s, buffer, output, layers, experts)

    def loads_since(self, profile: Profile) -> int | None:
        from layoutgen.runtimes.ik_llama_cpp.arch_since import ARCH_SINCE

        found = ARCH_SINCE.get(profile.arch)
        return None if found is None else found[0]

    def gpu_matmul(self, qtype: str) -> bool | Rule | None:
        from layoutgen.runtimes.ik_llama_cpp.cuda_types import gpu_matmul

        return gpu_matmul(qtype, self.version)

    def attn_max_mib(self, args: Sequence[str]) -> int:
        """-amb as given, else this build's default (256 MiB since build 4832, 0 before)."""
        value = flag_value(args, "-amb", "--attention-max-batch")
        if value is not None and value.isdigit():
            return max(128, int(value)) if int(value) else 0  # ik raises 1..127 to 128
        return 256 if self.follows("amb-256-by-default") else 0

    def output_tokens(self, args: Sequence[str], ubatch: int) -> int:
        """Tokens the worst-case graph computes logits for: -wgt N (since build 4378)
        when given, else the whole ubatch."""
        value = flag_value(args, "-wgt", "--worst-graph-tokens")
        if value is not None and value.isdigit() and self.follows("worst-graph-tokens"):
            return int(value) or ubatch
        return ubatch

    def fused_moe(self, args: Sequence[str]) -> bool:
        """-fmoe: on by default since build 3928 (rule flash-attn-by-default), off before."""
        if any(a in ("-no-fmoe", "--no-fused-moe") for a in args):
            return False
        return self.follows("flash-attn-by-default") or any(
            a in ("-fmoe", "--fused-moe") for a in args
        )

    # ---- flags ---------------------------------------------------------------------

    def flash_attn_flags(self, on: bool) -> list[str]:
        if self.follows("flash-attn-value"):
            return ["-fa", "on" if on else "off"]
        if self.follows("flash-attn-by-default"):
            return [] if on else ["-no-fa"]
        return ["-fa"] if on else []

    def fa_bare(self) -> bool:
        """-fa alone turned flash attention on until build 3927 (common.cpp; the
        default was off); from 3985 it reads on|off|auto."""
        return not self.follows("flash-attn-by-default")

    def reasoning_off(self) -> list[str]:
        return ["--reasoning-budget", "0"] if self.follows("reasoning-budget") else []

    def merges_up_gate(self, args: Sequence[str]) -> bool:
        return any(a in ("-muge", "--merge-up-gate-experts") for a in args) and self.follows(
            "merge-up-gate"
        )


def _share(counts: Sequence[int], n: int, n_layer: int) -> list[int]:
    """ik's split of ``n`` expert overrides over devices holding ``counts`` layers."""
    want = [c * n / n_layer for c in counts]
    out = [round_half_away(w) for w in want]
    while sum(out) > n:
        # the device furthest above its share gives one back; ties: the first device
        over = [(out[i] - 1 - want[i], -i) for i in range(len(out)) if out[i]]
        if not over:
            break
        out[-max(over)[1]] -= 1
    while sum(out) < n:
        # the device furthest below its share takes one more; ties: the first device
        under = [(out[i] + 1 - want[i], i) for i in range(len(out)) if out[i] < counts[i]]
        if not under:
            break
        out[min(under)[1]] += 1
    return out


def round_half_away(x: float) -> int:
    """C's roundf: halves away from zero (Python's round() goes to even)."""
    return int(x + 0.5) if x >= 0 else -int(-x + 0.5)
