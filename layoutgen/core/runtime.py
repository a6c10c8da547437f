"""What every runtime module answers, and the dated-rule machinery they share.

The solver, the KV model and the renderers ask a :class:`Runtime` instead
of branching on a runtime's name: where host weights land and under which
buffer name, how layers split over devices, which layers ``--n-cpu-moe``
moves, how the KV cache is padded and laid out, what the compute buffers
hold, which flags mean what.  One subclass per runtime
(:mod:`layoutgen.runtimes.llama_cpp`, :mod:`layoutgen.runtimes.ik_llama_cpp`),
each with its :data:`Runtime.RULES`: behaviours that changed from one build
to the next, chosen by the spec's ``runtimes.<id>.version``.

A new runtime release with a new behaviour is one :func:`~rules.rule` in
that runtime's ``RULES`` plus the branch that asks :meth:`Runtime.follows`
for it, in that runtime's module.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Literal

from layoutgen.core.rules import Rule, Version, parse_version

if TYPE_CHECKING:
    from layoutgen.core.setting import Basis, Setting
    from layoutgen.models.profile import HParams, Profile
    from layoutgen.models.tensors import Tensor

Flavour = Literal["mainline", "ik"]


@dataclass(frozen=True)
class Runtime:
    """One runtime at one version (None: the newest rules this layoutgen knows)."""

    version: Version | None = None
    #: GGML_SCHED_MAX_COPIES the binary was built with: pipeline parallelism's copies of
    #: every graph input over several GPUs (4 by default; -DGGML_SCHED_MAX_COPIES=1 is
    #: a common build to save that memory, the log prints "n_copies=N")
    sched_copies: int = 4
    #: built with a BLAS library (GGML_BLAS=ON): a host backend of its own for big-batch
    #: matmuls of host weights, whose compute buffer is named CPU beside CUDA_Host
    blas: bool = False

    #: the name a spec's ``runtimes.<id>.kind`` gives
    KIND: ClassVar[str] = ""
    #: which ggml type table its tensors and caches use
    FLAVOUR: ClassVar[Flavour] = "mainline"
    #: behaviours by build, oldest first
    RULES: ClassVar[tuple[Rule, ...]] = ()
    #: the build whose source the rules without a date were read from
    READ_FROM: ClassVar[str] = ""
    #: KV cache types it accepts (-ctk/-ctv)
    CACHE_TYPES: ClassVar[frozenset[str]] = frozenset()
    #: lines only this runtime prints in a start-up log: (needle, pattern); calibrate
    #: tells whose log it reads by them
    LOG_MARKERS: ClassVar[tuple[tuple[str, re.Pattern[str]], ...]] = ()
    #: whether a partial -ngl (``gpu_layers``) is planned for it
    PARTIAL_OFFLOAD: ClassVar[bool] = False
    #: whether rpc devices (ggml-rpc-server) are planned for it
    RPC_DEVICES: ClassVar[bool] = False
    #: whether layoutgen can plan its memory yet
    PLANNABLE: ClassVar[bool] = True
    #: routed-expert tensor kinds that must share a device: one op reads them together
    #: (ik_llama.cpp's fused up/gate), so a split copies a whole tensor per batch
    EXPERT_GROUPS: ClassVar[tuple[frozenset[str], ...]] = ()

    def expert_group(self, kind: str) -> frozenset[str]:
        """The routed-expert kinds that move with ``kind`` (itself included)."""
        return next((g for g in self.EXPERT_GROUPS if kind in g), frozenset({kind}))

    #: whether it reads the API key from LLAMA_API_KEY
    READS_API_KEY_ENV: ClassVar[bool] = False

    # ---- what differs between a tensor-placing runtime and a budgeted one -----------
    #: how its memory is planned: "tensors" (every tensor and buffer: llama.cpp,
    #: ik_llama.cpp) or "budget" (one budget per GPU, filled with KV: vLLM)
    MEMORY: ClassVar[Literal["tensors", "budget"]] = "tensors"
    #: the profile format it loads
    LOADS: ClassVar[Literal["gguf", "safetensors"]] = "gguf"
    #: whether ``ctx`` is the total over all slots (-c); else one request's length
    CTX_IS_TOTAL: ClassVar[bool] = True
    #: words at the front of the argv that a container image's entrypoint supplies
    ENTRYPOINT_WORDS: ClassVar[int] = 1
    #: the variable it reads its API key from when a podman secret provides it
    #: (None: a file, ``--api-key-file``)
    API_KEY_ENV: ClassVar[str | None] = None
    #: service keys only some runtimes read: the ones this runtime reads
    SERVICE_KEYS: ClassVar[frozenset[str]] = frozenset(
        {
            "cache_type_k",
            "cache_type_v",
            "ubatch",
            "threads",
            "threads_batch",
            "experts",
            "reasoning",
            "mlock",
            "tensor_split",
            "split_mode",
            "tensor_overrides",
            "gpu_layers",
            "measured",
        }
    )
    #: a key another runtime reads -> what to write instead on this one
    INSTEAD: ClassVar[Mapping[str, str]] = {}
    #: the container's /dev/shm (podman --shm-size), None: podman's default 64m
    SHM_SIZE: ClassVar[str | None] = None
    #: flags layoutgen decides, refused in passthrough args: (flags, what to write
    #: instead); None: llama.cpp's table (layoutgen.spec.checks.OWNED)
    OWNED_FLAGS: ClassVar[tuple[tuple[tuple[str, ...], str], ...] | None] = None

    @classmethod
    def parse_version(cls, text: str) -> Version:
        """A ``version:`` as this runtime's builds print it; raises VersionError."""
        return parse_version(text)

    @property
    def kind(self) -> str:
        return self.KIND

    def loads_since(self, profile: Profile) -> int | None:
        """The first build that loads PROFILE's architecture (None: not known, every
        build layoutgen has rules for): builds before it are no epoch of a plan."""
        return None

    @classmethod
    def dated_rules(cls) -> tuple[Rule, ...]:
        """Every rule a build of this runtime is asked about (RULES and any tables of
        its own): the builds where they flip bound the epochs of an unknown build."""
        return cls.RULES

    def follows(self, name: str) -> bool:
        """Whether this build has the behaviour called ``name`` (a KeyError is a typo)."""
        found = _BY_NAME.get((self.KIND, name))
        if found is None:
            found = _BY_NAME[self.KIND, name] = _rule(self.KIND, self.RULES, name)
        return found.applies(self.version)

    def assumed(self) -> dict[str, object]:
        """What the plan says about the rules it used (plan JSON ``runtimes``)."""
        return {
            "kind": self.KIND,
            "version": None if self.version is None else self.version.text,
            "rules": "newest" if self.version is None else "as of this version",
            "read_from": self.READ_FROM,
            "sched_copies": self.sched_copies,
            "blas": self.blas,
        }

    # ---- weights -------------------------------------------------------------------

    def keeps(self, profile: Profile, tensor: Tensor, nextn: frozenset[int]) -> bool:
        """Whether the runtime loads ``tensor`` (nextn/MTP layers: not, by default)."""
        return tensor.layer not in nextn

    def host_buffer(self, *, gpus: bool, host_overrides: bool, mmap: bool) -> str:
        """The buffer host-resident weights land in."""
        raise NotImplementedError

    def expert_host_buffer(self, *, gpus: bool, mmap: bool) -> str:
        """The buffer routed experts overridden to the CPU land in (default: with the
        other host weights)."""
        return self.host_buffer(gpus=gpus, host_overrides=True, mmap=mmap)

    def repacked(
        self, profile: Profile, isa: str, args: Sequence[str]
    ) -> Mapping[str, tuple[str, int]]:
        """Host tensors the CPU backend copies into a buffer of its own (CPU_REPACK, AMX)
        when no GPU's pinned buffer takes them: name -> (buffer, bytes there); none by
        default."""
        return {}

    def gpu_matmul(self, qtype: str) -> bool | Rule | None:
        """Whether this build's CUDA backend multiplies ``qtype`` weights: True; else the
        rule of the build that does, or None when none does.  Unknown: True."""
        return True

    def created_weights(self, profile: Profile, mla: int | None) -> Mapping[int, int]:
        """Bytes per layer of weights the runtime computes at start-up (not in the file)."""
        return {}

    def gpu_layers(self, n_layer: int, ngl: int) -> tuple[int, bool]:
        """What ``-ngl N`` offloads: the first repeating layer on a GPU, and whether the
        output layer goes too.  llama.cpp counts the output as one of the N
        (``llama_model::load_tensors``: i_gpu_start = n_layer + 1 - N, the output
        being layer n_layer): layers from n_layer + 1 - N, the output from N = 1."""
        return min(max(n_layer + 1 - ngl, 0), n_layer), ngl >= 1

    def blas_bytes(self, s: Setting, layers: Mapping[int, str], output: str | None) -> int:
        """The compute buffer of a BLAS build's BLAS backend beside GPUs (0: none)."""
        return 0

    def splits_rows(self) -> bool:
        """Whether ``-sm row`` splits matrices by rows over the GPUs (ggml-cuda's split
        buffer type); llama.cpp's does."""
        return True

    def cpu_layer_kv_buffer(self, *, gpus: bool) -> str:
        """The buffer the KV cache of a layer left on the CPU lands in: llama.cpp's
        CPU device buffer (``llama_kv_cache``: the layer's device is the CPU)."""
        return "CPU"

    def layer_split(
        self,
        s: Setting,
        kv_per_layer: Mapping[int, int],
        shares: Sequence[float],
        layers: Sequence[int],
    ) -> dict[int, str]:
        """Which device holds each of ``layers`` (the offloaded ones) when there are several."""
        raise NotImplementedError

    def n_cpu_moe_host(
        self, s: Setting, layers: Mapping[int, str], expert_layers: Sequence[int], n: int
    ) -> set[int]:
        """The expert layers ``--n-cpu-moe n`` keeps in host RAM."""
        raise NotImplementedError

    # ---- KV cache (read by layoutgen.core.kvcache) --------------------------------

    def ctx_padding(self, flash_attn: bool) -> int:
        """The multiple the total context is padded to."""
        return 256

    def stream_padding(self) -> int:
        """The multiple each sequence's own KV stream is padded to."""
        return 256

    #: one KV stream for all sequences whatever -kvu says
    KV_ALWAYS_UNIFIED: ClassVar[bool] = False
    #: sliding-window layers keep a ring of n_swa (+ ubatch) cells, not the context
    SWA_RING: ClassVar[bool] = True
    #: V cache as one flat tensor per layer (ik) rather than [n_embd_v, cells]
    FLAT_V: ClassVar[bool] = False
    #: recurrent (DeltaNet) state packed in one tensor, min(n_seq, cells) rows (ik)
    PACKED_STATE: ClassVar[bool] = False
    #: DSA lightning-indexer keys cached per layer
    DSA_INDEXER_CACHE: ClassVar[bool] = False
    #: -mla levels with different cache layouts (ik)
    MLA_LEVELS: ClassVar[bool] = False

    #: caches MLA's compressed KV only for GGUFs converted for it (n_head_kv 1); older
    #: DeepSeek conversions get full K and V per head
    MLA_NEEDS_MLA_GGUF: ClassVar[bool] = False
    #: refuses different K and V cache types for an MLA model
    MLA_SAME_KV_TYPES: ClassVar[bool] = False

    def sizes_state(self, hp: HParams) -> bool:
        """Whether layoutgen knows this runtime's recurrent-state layout for ``hp``."""
        return True

    def kv_unified(self, asked: bool) -> bool:
        """Whether all sequences share one KV stream, given what -kvu says."""
        return asked

    def mla_default(self) -> int | None:
        """The MLA level an MLA model runs without -mla (None: the runtime has no
        levels: MLA whenever the model is converted for it)."""
        return None

    def kv_for_nextn(self) -> bool:
        """Whether nextn/MTP layers get a KV cache when MTP is not used."""
        return False

    def v_cache_needs_flash_attn(self, cache_type_v: str) -> bool:
        """Whether the runtime refuses this V cache type without flash attention."""
        raise NotImplementedError

    # ---- compute buffers -----------------------------------------------------------

    def compute(
        self,
        s: Setting,
        buffer: str,
        output: str | None,
        layers: Mapping[int, str],
        experts: Mapping[int, str],
    ) -> tuple[int, Basis]:
        """An estimate of ``buffer``'s compute buffer and its basis."""
        raise NotImplementedError

    # ---- flags ---------------------------------------------------------------------

    def flash_attn_flags(self, on: bool) -> list[str]:
        """Flags that turn flash attention on or off, as this build spells them."""
        raise NotImplementedError

    def fa_bare(self) -> bool:
        """Whether this build's -fa takes no value (the flag alone turns it on)."""
        return False

    def flash_attn_arg(self, args: Sequence[str]) -> str | None:
        """The value of the last ``-fa``/``--flash-attn`` in passthrough ARGS, if any, as
        this build reads it: where -fa takes no value (ik before 3928) the flag alone is
        "on"."""
        value = None
        if any(a in ("-fa", "--flash-attn") for a in args) and self.fa_bare():
            return "on"
        for i, arg in enumerate(args):
            if arg in ("-fa", "--flash-attn") and i + 1 < len(args):
                value = args[i + 1]
        return value

    def flash_attn(self, args: Sequence[str], gpus: bool, written: bool | None = None) -> bool:
        """Whether the server runs with flash attention: the one answer argv and sizing share.

        The service's ``flash_attn:`` (WRITTEN) decides, else the user's ``-fa`` (``auto``
        counts as on: both runtimes enable
        it where the backend supports it, and llama.cpp does for a quantized V
        cache); otherwise layoutgen renders ``-fa on`` with GPUs and ``-fa off``
        on the CPU alone.
        """
        if written is not None:
            return written
        value = self.flash_attn_arg(args)
        if value is None:
            return gpus
        return value not in ("off", "0", "false")

    def fit_off(self) -> list[str]:
        """Flags that stop the runtime re-fitting the placement on its own."""
        return []

    def mlock(self) -> list[str]:
        """Flags that read the model into locked RAM."""
        return ["--mlock"]

    def reasoning_off(self) -> list[str]:
        """Flags that turn a reasoning model's thinking off."""
        raise NotImplementedError


#: (runtime kind, rule name) -> the rule: looked up by name, not by hashing the whole
#: RULES tuple on every question (a fifth of a solve)
_BY_NAME: dict[tuple[str, str], Rule] = {}


def _rule(kind: str, rules: tuple[Rule, ...], name: str) -> Rule:
    for r in rules:
        if r.name == name:
            return r
    raise KeyError(f"{kind} has no rule {name!r}")


def flag_value(args: Sequence[str], *names: str) -> str | None:
    """The value after the last occurrence of any of ``names`` in passthrough args."""
    value = None
    for i, arg in enumerate(args):
        if arg in names and i + 1 < len(args):
            value = args[i + 1]
    return value
