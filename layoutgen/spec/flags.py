"""Closed-world passthrough flags (issue 30 item 5).

Every item of a service's ``args`` is read as its runtime reads its argv, at the
spec's ``runtimes.<id>.version``, against that runtime's flag table (generated from
the runtime's own argument parser: :mod:`layoutgen.runtimes.llama_cpp.flag_table`,
:mod:`layoutgen.runtimes.ik_llama_cpp.flag_table`,
:mod:`layoutgen.runtimes.vllm.flag_table`):

* a spelling no build has: an error with the closest spellings (difflib);
* a spelling that build lacks: an error naming the builds that have it;
* a flag whose values the runtime reads: its values are taken as values, whatever
  they look like (``--alias -x``); a bare token no flag reads: an error;
* a flag that changes memory or placement: modelled (the plan reads it: ``-fa``,
  ``-mla``, ``-amb``, ``--no-mmap``, ...) or refused with the reason (``-sm graph``,
  ``--spec-type``, ``-ser``, ``-nkvo``, ``--override-kv``, ...);
* every other flag is harmless: it changes no memory and no placement (sampling,
  chat templates, logging, HTTP, ``--alias``, ``--metrics``).  The lists below were
  made by reading each option's help and handler in the newest build read.

Flags layoutgen owns (``OWNED`` in :mod:`layoutgen.spec.checks`) are refused there,
not here; here only their other spellings (``--ctx_size``: both parsers read '_' as
'-' in a ``--`` name; vLLM's argparse abbreviations and ``--config.field``).  A
build older than every one a sampled table read (llama.cpp before 9093) takes a word
after a flag as its value and none as none, with one warning listing its flags.

Dating.  ik_llama.cpp's table reads the parser at every commit that touched it, so
each flag's builds are exact.  llama.cpp's and vLLM's tables read sampled builds
(PyPI sdists and wheels): a flag first seen at sample X may have come at any build
after the sample before X, and one seen in the oldest sample (llama.cpp 9093, vLLM
0.8.0) may be older still.  Inside such an undated window a flag is accepted with a
warning (refusing would refuse runs that start); outside every window of the
flag's builds it is an error.  With no ``version:`` the build is unknown: a flag that
some build has is accepted (with a warning when the newest build lacks it), and the
forms written say which builds could run the command (build_range: ik's bare ``-fa``
is 2771-3927, ``-fa on`` 3985 on, ``-fmoe`` 3571-3927, ``-no-fmoe`` 3928 on), which
bounds the builds the plan is made for (layoutgen.solve.builds); flags no one build
reads together are an error naming each one's builds.
"""

from __future__ import annotations

import bisect
import datetime
import difflib
import functools
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from layoutgen.errors import Problem, Severity, printable
from layoutgen.inputs.literals import clip
from layoutgen.spec.roles import ResolvedService
from layoutgen.spec.schema import Spec

#: llama-server's ``-np`` default: -1, "auto" (common.h), which tools/server/server.cpp
#: turns into 4 slots sharing one unified KV stream (builds 9093-11434 read);
#: ``-np auto`` itself is refused by the int parser (std::stoi), ``-np -1`` is auto.
PARALLEL_AUTO = 4
PARALLEL_AUTO_KV_UNIFIED = True
#: ik_llama.cpp's -np default: 1 (common.h n_parallel = 1; no auto), build 4840
IK_PARALLEL_DEFAULT = 1

_DRAFT = "use 'draft:' (layoutgen places the draft model and budgets its KV cache)"
_SPEC = (
    "speculative decoding other than a draft model (MTP, n-gram) changes KV and compute "
    "buffers the plan does not size; use 'draft:' for a draft model, or remove it"
)

#: spellings whose effect the plan reads from args (layoutgen.solve.footprint,
#: Runtime.flash_attn, the runtimes' attn_max_mib/output_tokens/
#: fused_moe/merges_up_gate/repacked), or that only restate the default
MODELLED: frozenset[str] = frozenset(
    {
        "-fa",
        "--flash-attn",
        "-lm",
        "--load-mode",
        "-rtr",
        "--run-time-repack",
        "--no-mmap",
        "--mmap",
        "-mla",
        "--mla-use",
        "--swa-full",
        "-kvu",
        "--kv-unified",
        "-no-kvu",
        "--no-kv-unified",
        "-amb",
        "--attention-max-batch",
        "-wgt",
        "--worst-graph-tokens",
        "-fmoe",
        "--fused-moe",
        "-no-fmoe",
        "--no-fused-moe",
        "-muge",
        "--merge-up-gate-experts",
        "--merge-up-gate-expsrts",
        "-nr",
        "--no-repack",
        "--repack",
        "-kvo",
        "--kv-offload",
        "--op-offload",
        "--mmproj-offload",
        "--no-mmproj",
        "--warmup",
        "--no-warmup",
    }
)

#: spelling -> why the plan cannot take it (llama.cpp and ik_llama.cpp)
UNMODELLED: Mapping[str, str] = {
    **dict.fromkeys(
        ("-sm", "--split-mode"),
        "the plan splits layers itself (-sm layer; 'split_mode: row' for a row split); "
        "-sm graph/attn (tensor parallelism) places tensors the plan does not model: "
        "use 'split_mode:'",
    ),
    **dict.fromkeys(("--spec-type", "--spec-default", "--spec-stage", "--spec-autotune"), _SPEC),
    **dict.fromkeys(("-mtp", "--multi-token-prediction", "--mtp-requantize-output-tensor"), _SPEC),
    **dict.fromkeys(
        (
            "-md",
            "--model-draft",
            "--spec-draft-model",
            "--spec-draft-hf",
            "-hfd",
            "-hfrd",
            "--hf-repo-draft",
            "-ngld",
            "--gpu-layers-draft",
            "--n-gpu-layers-draft",
            "--spec-draft-ngl",
            "-devd",
            "--device-draft",
            "--spec-draft-device",
            "-ctkd",
            "--cache-type-k-draft",
            "--spec-draft-type-k",
            "-ctvd",
            "--cache-type-v-draft",
            "--spec-draft-type-v",
            "-cd",
            "--ctx-size-draft",
            "--spec-draft-ctx-size",
            "-otd",
            "--override-tensor-draft",
            "--spec-draft-override-tensor",
            "-cmoed",
            "--cpu-moe-draft",
            "--spec-draft-cpu-moe",
            "-ncmoed",
            "--n-cpu-moe-draft",
            "--spec-draft-n-cpu-moe",
            "--draft-params",
        ),
        _DRAFT,
    ),
    **dict.fromkeys(
        ("-ser", "--smart-expert-reduction"),
        "uses fewer experts per token than the model's n_expert_used: compute buffers "
        "the plan does not size; remove it",
    ),
    **dict.fromkeys(
        ("-nkvo", "--no-kv-offload"),
        "keeps the KV cache in host RAM while the plan puts each layer's cache beside "
        "the layer on its GPU; remove it",
    ),
    **dict.fromkeys(
        ("-okv", "--override-kv"),
        "changes the model's metadata after the plan read it from the GGUF (layer "
        "count, experts, context): the plan would size another model; remove it",
    ),
    **dict.fromkeys(
        ("-no-fa", "--no-flash-attn"),
        "turns flash attention off where the plan reads only '-fa': write '-fa', 'off' "
        "(builds that take a value) or drop flash attention from args",
    ),
    **dict.fromkeys(
        ("-mm", "--mmproj", "-mmu", "--mmproj-url", "--mmproj-auto"),
        "a multimodal projector's weights and compute buffer are not planned",
    ),
    **dict.fromkeys(
        ("-ncffn", "--n-cpu-ffn"),
        "moves feed-forward tensors to the CPU behind the plan's back; use 'tensor_overrides:'",
    ),
    **dict.fromkeys(
        ("--no-op-offload",),
        "runs host-weight matmuls on the CPU: compute buffers the plan does not size; remove it",
    ),
    **dict.fromkeys(
        ("--no-host",),
        "bypasses the pinned host buffer the plan puts host weights in; remove it",
    ),
    **dict.fromkeys(
        ("--kv-unified-per-slot",), "sizes the context from the slots; use 'ctx:' and 'parallel:'"
    ),
    **dict.fromkeys(
        ("--rpc",), "rpc devices are planned from the host's 'rpc:' list; declare them there"
    ),
    **dict.fromkeys(
        ("-dio", "--direct-io", "-ndio", "--no-direct-io"),
        "changes how weights are read (mmap off); write '--no-mmap', or '-lm', 'dio' on "
        "builds that have -lm",
    ),
    **dict.fromkeys(
        (
            *("-ctk-first", "--cache-type-k-first", "-ctk-last", "--cache-type-k-last"),
            *("-ctv-first", "--cache-type-v-first", "-ctv-last", "--cache-type-v-last"),
        ),
        "gives some layers another KV cache type than the plan sizes; use "
        "'cache_type_k:'/'cache_type_v:'",
    ),
    **dict.fromkeys(
        ("-dsa", "--dsa", "--dsa-top-k", "--indexer-cache-type-k", "--fused-indexer-topk"),
        "DSA attention's indexer cache and compute are not planned for ik_llama.cpp",
    ),
    **dict.fromkeys(
        ("--swa-compress",), "changes the sliding-window KV cache the plan sizes; remove it"
    ),
    **dict.fromkeys(("--max-gpu",), "limits the GPUs the model spreads over; use 'gpus:'"),
    **dict.fromkeys(
        ("-op", "--offload-policy", "--cuda-params", "-cuda"),
        "changes which ops run on the GPUs: compute buffers the plan does not size",
    ),
    **dict.fromkeys(
        ("--defer-experts", "--prefetch-experts", "--prefetch-experts-threads"),
        "changes where and when routed experts are loaded; use 'experts:'",
    ),
    **dict.fromkeys(
        ("-no-fug", "--no-fused-up-gate", "--max-extra-alloc"),
        "changes compute buffers the plan sizes; remove it",
    ),
    **dict.fromkeys(("-lzm", "--lazy-mode"), "reads tensors on demand instead of loading them"),
    **dict.fromkeys(("-ot", "--override-tensor"), "use 'tensor_overrides:'"),
    **dict.fromkeys(
        ("-no-ooae", "--no-offload-only-active-experts"),
        "copies whole expert tensors, not the active experts, into the compute buffer "
        "of the GPU that runs a host-expert matmul: a buffer the plan does not size",
    ),
    **dict.fromkeys(
        (
            *("-hf", "-hfr", "--hf-repo", "-hff", "--hf-file", "-mu", "--model-url"),
            *("-dr", "--docker-repo", "-hfd", "-hfrd", "--hf-repo-draft"),
            *("-hfv", "-hfrv", "--hf-repo-v", "-hffv", "--hf-file-v"),
        ),
        "loads a model the plan does not know; set the model under 'models:'",
    ),
    **dict.fromkeys(
        ("--models-dir", "--models-preset", "--models-max", "--models-autoload"),
        "router mode loads and unloads models the plan does not know; run one service per model",
    ),
    **dict.fromkeys(
        (
            *("--gpt-oss-20b-default", "--gpt-oss-120b-default", "--embd-gemma-default"),
            *("--vision-gemma-4b-default", "--vision-gemma-12b-default"),
            *("--fim-qwen-1.5b-default", "--fim-qwen-3b-default", "--fim-qwen-7b-default"),
            *("--fim-qwen-7b-spec", "--fim-qwen-14b-spec", "--fim-qwen-30b-default"),
        ),
        "a preset sets the model (and context, batch, draft) itself; write them in the spec",
    ),
}

#: spellings that make llama-server print something and exit (llama.cpp, ik_llama.cpp)
EXITS = frozenset(
    {"-h", "--help", "--usage", "--version", "--license", "--list-devices"}
    | {"--completion-bash", "--cache-list"}
)

#: vLLM spellings the plan reads (layoutgen.spec.model_checks: a multimodal checkpoint is
#: planned text-only when every modality is limited to 0, or with the language model
#: alone)
VLLM_MODELLED = frozenset({"--limit-mm-per-prompt", "--language-model-only"})

#: vLLM spellings that change memory and are not planned (its owned ones are
#: Vllm.OWNED_FLAGS)
VLLM_UNMODELLED: Mapping[str, str] = {
    **dict.fromkeys(
        ("--cpu-offload-gb", "--swap-space", "--kv-offloading-size", "--kv-offloading-backend"),
        "moves weights or KV cache to host RAM: the plan budgets them on the GPUs",
    ),
    **dict.fromkeys(
        ("--quantization", "-q"),
        "quantizes the weights the plan sizes from the checkpoint's dtype; use a "
        "checkpoint quantized already",
    ),
    **dict.fromkeys(
        ("--enable-expert-parallel", "-ep"),
        "expert parallelism splits experts unlike the plan's tensor parallelism",
    ),
    **dict.fromkeys(
        (
            "--optimization-level",
            "--max-seq-len-to-capture",
            "--cuda-graph-sizes",
            "--compilation-config",
            "-O",
            "--max-cudagraph-capture-size",
            "--cudagraph-capture-sizes",
        ),
        "changes the CUDA graphs the plan budgets; use 'enforce_eager:' or remove it",
    ),
    **dict.fromkeys(
        ("--num-gpu-blocks-override", "--num-lookahead-slots"),
        "changes the KV blocks the plan sizes; use 'ctx:' and 'parallel:'",
    ),
    **dict.fromkeys(
        ("--mm-processor-kwargs", "--mm-encoder-tp-mode"),
        "changes the multimodal profile run the plan budgets",
    ),
    **dict.fromkeys(("--hf-overrides",), "changes the model config the plan read"),
    **dict.fromkeys(
        ("--enable-eplb", "--num-redundant-experts", "--eplb-config"),
        "expert load balancing keeps redundant expert copies the plan does not budget",
    ),
    **dict.fromkeys(
        ("--cpu-offload-params", "--offload-backend", "--offload-group-size"),
        "moves weights to host RAM: the plan budgets them on the GPUs",
    ),
    **dict.fromkeys(
        ("--offload-num-in-group", "--offload-params", "--offload-prefetch-step"),
        "moves weights to host RAM: the plan budgets them on the GPUs",
    ),
    **dict.fromkeys(
        ("--kv-cache-dtype-skip-layers", "--mamba-cache-dtype", "--mamba-ssm-cache-dtype"),
        "changes cache dtypes the plan sizes; use 'kv_cache_dtype:'",
    ),
    **dict.fromkeys(
        ("--device-memory-utilization", "--mm-ipc-gpu-memory-gb"),
        "changes the GPU memory vLLM takes beside the plan's budget",
    ),
    **dict.fromkeys(
        ("--mamba-block-size", "--kv-sharing-fast-prefill", "--speculative-max-model-len"),
        "changes the KV cache the plan sizes",
    ),
    **dict.fromkeys(("--load-format",), "changes how the weights are loaded and sized"),
    **dict.fromkeys(("--dtype",), "changes the weights' dtype the plan sized"),
}


#: how a modelled flag written in another build's form is reported (ik_llama.cpp:
#: "-fa on" before 3985, where -fa reads no value; -no-fmoe before 3928): an error,
#: since the truth table writes each record's build's own forms (tests/truth/table.py)
FA_FORM: Severity | None = Severity.ERROR
_FA = ("-fa", "--flash-attn")
#: forms older than every build a sampled table read, kept by hand with their source:
#: llama.cpp's -fa took no value until the flash_attn_type change of late August 2025
#: (downstream projects synced it as of release b6327: "Deprecate flash_attn and
#: introduce flash_attn_type (auto|on|off)"); the build that brought it is not read
EARLIER_FORMS: Mapping[tuple[str, str], str] = {
    ("llama.cpp", "-fa"): "took no value before about build 6327",
    ("llama.cpp", "--flash-attn"): "took no value before about build 6327",
}
_UNKNOWN = "\0unknown"
#: modelled flags whose form or presence changed from build to build, which the truth
#: table writes in the newest form whatever the build (reported as FA_FORM says)
_FORMS = frozenset(
    {
        *_FA,
        *("-fmoe", "--fused-moe", "-no-fmoe", "--no-fused-moe"),
        *("-mla", "--mla-use", "-amb", "--attention-max-batch"),
    }
)


def flash_attn_args(kind: str, build: int | None, on: bool) -> list[str] | None:
    """-fa as ``kind`` at ``build`` reads it (None: no args can say it, or the builds
    differ): ik_llama.cpp bare -fa before 3928 (off by default), none 3928-3984 (on by
    default, -no-fa), ``-fa on|off`` from 3985; llama.cpp ``-fa on|off`` in every build
    read (9093-11434)."""
    if kind != "ik_llama.cpp":
        return ["-fa", "on" if on else "off"]
    if build is None:
        return None
    if build < 3928:
        return ["-fa"] if on else []
    if build < 3985:
        # on by default; off is -no-fa, which the plan does not read (render's
        # flash_attn reads only -fa): not expressible in args
        return [] if on else None
    return ["-fa", "on" if on else "off"]


@dataclass(frozen=True)
class Span:
    first: Any
    until: Any  # None: still in the newest build read
    arity: int


@dataclass(frozen=True)
class Table:
    """One runtime's flags: spelling -> (canonical, spans), oldest first."""

    kind: str
    rows: Mapping[str, tuple[str, tuple[Span, ...]]]
    #: sampled builds in order (None: every build that changed the parser was read)
    samples: tuple[Any, ...] | None
    newest: Any

    def previous_sample(self, build: Any) -> Any:
        """The sample read before ``build`` (None: ``build`` is the oldest)."""
        assert self.samples is not None
        i = self.samples.index(build)
        return self.samples[i - 1] if i else None


@functools.cache
def table(kind: str) -> Table:
    if kind == "llama.cpp":
        from layoutgen.runtimes.llama_cpp import flag_table as mod
    elif kind == "ik_llama.cpp":
        from layoutgen.runtimes.ik_llama_cpp import flag_table as mod  # type: ignore[no-redef]
    else:
        from layoutgen.runtimes.vllm import flag_table as mod  # type: ignore[no-redef]

    def key(x: Any) -> Any:
        return _release(x) if kind == "vllm" else int(x)

    rows = {
        s: (c, tuple(Span(key(f), None if u is None else key(u), a) for f, u, a in sp))
        for s, c, sp in mod.FLAGS
    }
    samples = None if mod.SAMPLES is None else tuple(key(x) for x in mod.SAMPLES)
    newest = samples[-1] if samples else mod.NEWEST  # type: ignore[attr-defined]
    return Table(kind, rows, samples, newest)


def _release(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"[0-9]+", text)[:3])


@dataclass(frozen=True)
class Where:
    """A build's relation to a flag: present, absent, or undated (a warning)."""

    span: Span | None
    undated: bool = False


def at(tab: Table, spans: Sequence[Span], build: Any) -> Where:
    """Which span (if any) holds ``build``; ``undated`` where the samples cannot say.

    Every build read (ik_llama.cpp): a span holds the builds from its first to before
    its until.  Sampled builds (llama.cpp, vLLM): a span surely holds the builds from
    its first sample to the last sample that still had the flag; a build between the
    sample before ``first`` and ``first`` (any build older than the oldest sample), or
    between that last sample and ``until``, is undated."""
    if tab.samples is None:
        for sp in spans:
            if sp.first <= build and (sp.until is None or build < sp.until):
                return Where(sp)
        return Where(None)
    for sp in spans:
        last = None if sp.until is None else tab.previous_sample(sp.until)
        if sp.first <= build and (last is None or build <= last):
            return Where(sp)
    for sp in spans:
        before = tab.previous_sample(sp.first)
        if build < sp.first and (before is None or build > before):
            return Where(sp, undated=True)
        if sp.until is not None and tab.previous_sample(sp.until) < build < sp.until:
            return Where(sp, undated=True)
    return Where(None)


def _show(build: Any) -> str:
    return ".".join(map(str, build)) if isinstance(build, tuple) else str(build)


def _builds(tab: Table, spans: Sequence[Span]) -> str:
    """Where a flag is, as exactly as the table knows: "builds 4378 on" (every build
    read), or for sampled builds "read in builds 10502-11434 (not in 10001)"."""
    parts = []
    for sp in spans:
        if tab.samples is None:
            end = " on" if sp.until is None else f"-{_show(sp.until - 1)}"
            parts.append(f"builds {_show(sp.first)}{end}")
            continue
        last = tab.samples[-1] if sp.until is None else tab.previous_sample(sp.until)
        before = tab.previous_sample(sp.first)
        text = f"read in builds {_show(sp.first)}-{_show(last)}"
        notes = [f"not in {_show(before)}"] if before is not None else []
        notes += [f"gone by {_show(sp.until)}"] if sp.until is not None else []
        parts.append(text + (f" ({', '.join(notes)})" if notes else ""))
    return "; ".join(parts)


def first_build(kind: str, args: Sequence[str]) -> int | None:
    """The first build whose parser takes every flag in ARGS in the form written (see
    build_range); None: not known."""
    found = build_range(kind, args)
    return None if found is None else found[0]


def build_range(kind: str, args: Sequence[str]) -> tuple[int | None, int | None] | None:
    """The builds whose parser takes every flag in ARGS in the form written (with a
    value where a value follows), as (first, last), None for an open end: an older or
    newer build refuses the command, so it is no epoch of the plan
    (layoutgen.solve.builds).  A bare ``-fa`` bounds ik's builds above (3927: later
    ones read a value), ``-no-fmoe`` below (3928).  None: no build takes them all
    (``_service`` says which flags part).  Sampled tables (llama.cpp, vLLM) date no
    build exactly: (None, None)."""
    tab = table(kind)
    if tab.samples is not None:
        return (None, None)
    allowed: list[tuple[int, int | None]] = [(0, None)]
    for _flag, spans in _written_spans(tab, args):
        allowed = _intersect(allowed, [(int(sp.first), _last(sp)) for sp in spans])
    if not allowed:
        return None
    first = min(a for a, _ in allowed)
    lasts = [b for _, b in allowed]
    return (first or None, None if None in lasts else max(b for b in lasts if b is not None))


def _written_spans(tab: Table, args: Sequence[str]) -> Iterator[tuple[str, list[Span]]]:
    """Each flag of ARGS with the spans of builds that read it as written."""
    for i, arg in enumerate(args):
        flag = arg.split("=", 1)[0] if arg.startswith("--") else arg
        row = tab.rows.get(flag)
        if row is None or (flag in _FORMS and FA_FORM is None):
            # not a flag (a value), or one the flag check refuses; or a flag whose
            # form changed by build while FA_FORM is off (see there)
            continue
        valued = "=" in arg or (
            i + 1 < len(args) and (not args[i + 1].startswith("-") or _number(args[i + 1]))
        )
        yield flag, [sp for sp in row[1] if (sp.arity > 0) == valued] or list(row[1])


def _last(sp: Span) -> int | None:
    return None if sp.until is None else int(sp.until) - 1


def _intersect(
    a: Sequence[tuple[int, int | None]], b: Sequence[tuple[int, int | None]]
) -> list[tuple[int, int | None]]:
    """The builds in both A and B (closed ranges; None: no upper end)."""
    out = []
    for lo1, hi1 in a:
        for lo2, hi2 in b:
            lo = max(lo1, lo2)
            his = [h for h in (hi1, hi2) if h is not None]
            hi = min(his) if his else None
            if hi is None or lo <= hi:
                out.append((lo, hi))
    return sorted(out, key=lambda r: r[0])


def flash_attn_default(kind: str, build: int | None) -> bool | None:
    """Flash attention with no -fa, by build: ik_llama.cpp off before 3928 (PR #863,
    41d6c42b9: common.h's flash_attn default false -> true), on since; llama.cpp
    ``auto`` (on where the backend has it) in every build read (9093-11434).  None:
    unknown (no build given and the builds differ)."""
    if kind == "ik_llama.cpp":
        if build is None:
            return None
        return build >= 3928
    return True


def _version(spec: Spec, rs: ResolvedService) -> Any:
    """The service's build as the table counts it (None: unknown)."""
    runtime = spec.runtimes.get(rs.service.runtime)
    if runtime is None or runtime.version is None:
        return None
    if runtime.kind == "vllm":
        return _release(runtime.version)
    rt = runtime.rules()
    if rt.version is None:
        return None
    if rt.version.build is None and rt.version.date is not None and runtime.kind == "ik_llama.cpp":
        return build_of_day(rt.version.date)
    return rt.version.build


def build_of_day(day: datetime.date) -> int | None:
    """ik_llama.cpp's newest build on DAY (a date written as ``version:``: that day's
    build or an older one; its newest is the likeliest); None: before the first."""
    from layoutgen.runtimes.ik_llama_cpp.build_dates import DAYS

    i = bisect.bisect_right(DAYS, (day.isoformat(), 1 << 30))
    return DAYS[i - 1][1] if i else None


def check(spec: Spec, services: Sequence[ResolvedService], owned: Any) -> Iterator[Problem]:
    """Problems of every service's ``args``; ``owned(spec, name)`` is the owned-flag map
    (refused by checks._args, skipped here)."""
    for rs in sorted(services, key=lambda r: r.name):
        runtime = spec.runtimes.get(rs.service.runtime)
        if runtime is None or runtime.kind not in ("llama.cpp", "ik_llama.cpp", "vllm"):
            continue
        yield from _service(spec, rs, runtime.kind, _version(spec, rs), owned(spec, rs.name))


def _service(
    spec: Spec, rs: ResolvedService, kind: str, build: Any, owned: Mapping[str, Any]
) -> Iterator[Problem]:
    tab = table(kind)
    name = rs.name
    args = rs.service.args
    vllm = kind == "vllm"
    label = "vLLM" if vllm else kind
    i = 0
    bare = ""  # the switch just read, for a stray value's message
    #: flags seen in the oldest build read, which the spec's older build may lack
    older: list[tuple[Any, str]] = []
    while i < len(args):
        arg = args[i]
        after, bare = bare, ""
        path = ("services", name, "args", i)
        where = f"services.{name}.args[{i}]"
        i += 1
        if arg in ("", ";") or (arg.startswith("-") and " " in arg.strip()):
            continue  # checks._args says what to write
        if not arg.startswith("-") or _number(arg):
            if after == _UNKNOWN:
                continue  # the value of an unknown flag: refused with the flag
            severity = FA_FORM if after.split(" ", 1)[0] in _FORMS else Severity.ERROR
            if severity is None:
                continue
            yield Problem(
                path,
                f"{where}: {clip(arg)} is not a flag and no flag before it reads a "
                f"value{f' ({after})' if after else ''}: {label} would refuse it; "
                "remove it, or put the flag it belongs to before it",
                severity,
            )
            continue
        flag, eq, inline = arg.partition("=") if vllm else (arg, "", "")
        # both parsers turn '_' into '-' in a '--' flag's name (vLLM: up to the first '.')
        key = flag.replace("_", "-") if flag.startswith("--") else flag
        if vllm and key.startswith("--"):
            key = key.split(".", 1)[0]  # --compilation-config.level 3: one field of it
            if key not in tab.rows:
                # argparse takes a unique prefix of an option (allow_abbrev)
                matches = sorted(
                    s
                    for s in tab.rows
                    if s.startswith(key) and (build is None or at(tab, tab.rows[s][1], build).span)
                )
                if len(matches) > 1:
                    bare = _UNKNOWN
                    yield Problem(
                        path,
                        f"{where}: {clip(flag)} is the start of several vLLM options ("
                        + ", ".join(matches[:6])
                        + "): argparse refuses it as ambiguous; write the whole name",
                    )
                    continue
                if matches:
                    key = matches[0]
        mine = owned.get(key)
        if mine is not None:
            if arg.split("=", 1)[0] not in owned:  # else checks._args said it already
                yield Problem(
                    path,
                    f"{where}: {clip(flag)} is {key} to {label}, which {mine.reason}; "
                    f"{mine.instead}",
                )
            row = tab.rows.get(key)
            if not eq and row is not None:
                n = row[1][-1].arity
                if vllm and n != 0:
                    while i < len(args) and (not args[i].startswith("-") or _number(args[i])):
                        i += 1
                else:
                    i += min(max(n, 0), len(args) - i)
            continue
        if vllm and key.startswith("-O"):
            # FlexibleArgumentParser: -O3, -O=3, -O 3 (--optimization-level, or -O itself
            # in older releases): the compilation level
            yield Problem(path, f"{where}: {clip(flag)} {VLLM_UNMODELLED['-O']}")
            if key == "-O" and i < len(args) and not args[i].startswith("-"):
                i += 1
            continue
        row = tab.rows.get(key)
        if row is None and vllm and not flag.startswith("--") and flag[:2] in tab.rows:
            key, flag, eq, inline = (
                flag[:2],
                flag[:2],
                "=",
                flag[2:],
            )  # -O3: argparse's attached value
            row = tab.rows[key]
        if row is None and not vllm and "=" in flag and flag.split("=", 1)[0] in tab.rows:
            name_, value_ = flag.split("=", 1)
            if name_ in owned:
                continue  # checks._args refuses it as decided by layoutgen
            yield Problem(
                path,
                f"{where}: {clip(flag)}: {label} reads a flag's value from the next "
                f"argument, not after '='; write {name_!r}, {clip(value_)}",
            )
            continue
        if row is None:
            bare = _UNKNOWN
            flag_shown = clip(flag)
            close = difflib.get_close_matches(key, list(tab.rows), n=3, cutoff=0.75)
            hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
            newest = _show(tab.newest)
            yield Problem(
                path,
                f"{where}: {flag_shown} is not a {label} flag in any build layoutgen read "
                f"(newest: {newest}){hint}",
            )
            continue
        _canonical, spans = row
        undated = False
        if build is None:
            # any build: the newest form, except -fa, whose forms users meet today
            # (llama.cpp's bare -fa of builds before about 6327 is older than every
            # build read: EARLIER_FORMS)
            arity = _arity_any(spans, None) if key in _FA else spans[-1].arity
            if (kind, key) in EARLIER_FORMS:
                arity = -2
            if arity < 0 and not vllm:
                if FA_FORM is not None:
                    # the form written says which builds (build_range): some read it
                    # as written, or the check after the loop says none does
                    if i < len(args) and (not args[i].startswith("-") or _number(args[i])):
                        i += 1
                    continue
                i += 1 if i < len(args) and not args[i].startswith("-") else 0
                continue
            if spans[-1].until is not None:
                yield Problem(
                    path,
                    f"{where}: {flag} is not in the newest {label} builds ("
                    f"{_builds(tab, spans)}); write the build under "
                    f"runtimes.{rs.service.runtime}.version, or remove it",
                    Severity.WARNING,
                )
        else:
            found = at(tab, spans, build)
            if found.span is None:
                near = min(spans, key=lambda sp: abs(_order(sp.first) - _order(build)))
                i += min(max(near.arity, 0), len(args) - i)
                if key in _FORMS and FA_FORM is None:
                    continue  # a modelled flag in another build's form: see FA_FORM
                yield Problem(
                    path,
                    f"{where}: {flag} is not in {label} {_show(build)} ("
                    f"{_builds(tab, spans)}); remove it, or use a build that has it",
                )
                continue
            if found.undated and tab.samples and build < tab.samples[0]:
                older.append((path, flag))
            elif found.undated:
                yield Problem(
                    path,
                    f"{where}: whether {label} {_show(build)} has {flag} is not known "
                    f"({_builds(tab, spans)}; the build between two samples that "
                    "brought or dropped it is undated): check that build's --help",
                    Severity.WARNING,
                )
            arity = found.span.arity
            # undated: the form read in the nearest sample may not be this build's
            # (llama.cpp's -fa took no value before about 6327): a word after the flag
            # is its value, none is no value
            undated = found.undated
        if arity == 0 and build is not None and not undated:
            bare = f"{flag} reads none in {label} {_show(build)}"
        values = []
        if eq:
            values = [inline]
        elif undated and not vllm:
            if i < len(args) and (not args[i].startswith("-") or _number(args[i])):
                values.append(args[i])
                i += 1
        elif vllm and arity != 0:
            # argparse reads an option's values up to the next option (a negative number
            # is a value); the wheels' tables cannot always tell a switch from an option
            # with a value, so vLLM's are read as argparse would, whatever the table says
            while i < len(args) and (not args[i].startswith("-") or _number(args[i])):
                values.append(args[i])
                i += 1
            if not values and all(sp.arity != 0 for sp in spans):
                yield Problem(
                    path,
                    f"{where}: {flag} reads a value in every vLLM release read and none "
                    "follows it: vLLM would refuse the command; add its value after it",
                )
                continue
        elif arity != 0:
            want = 1 if arity < 0 else arity
            for _ in range(want):
                if i >= len(args):
                    break
                values.append(args[i])
                i += 1
            if len(values) < want:
                yield Problem(
                    path,
                    f"{where}: {flag} reads {want} value{'s' if want > 1 else ''} and args "
                    f"end before {'it' if want == 1 else 'them'}: {label} would refuse the "
                    f"command; add {'its value' if want == 1 else 'them'} after it",
                )
                continue
        yield from _classify(spec, rs, kind, build, path, where, key, flag, values)
    if build is None and not vllm and FA_FORM is not None and build_range(kind, args) is None:
        yield _parting(name, kind, tab, args)
    if older:
        assert tab.samples is not None
        yield Problem(
            older[0][0],
            f"services.{name}.args: {label} {_show(build)} is older than the oldest build "
            f"whose flags layoutgen read ({_show(tab.samples[0])}), so whether it has "
            + ", ".join(dict.fromkeys(f for _p, f in older))
            + " is not known: check them against that build's --help",
            Severity.WARNING,
        )


def _parting(name: str, kind: str, tab: Table, args: Sequence[str]) -> Problem:
    """No build takes every flag of ARGS as written: the flags, each with its builds
    (the narrowest first), so the user sees which two part."""
    spans = sorted(
        _written_spans(tab, args),
        key=lambda fs: sum((_last(sp) or 1 << 20) - int(sp.first) for sp in fs[1]),
    )
    said = "; ".join(
        f"{flag} as written: {_builds(tab, sps)}" for flag, sps in spans if sps[0].first > 0
    )
    return Problem(
        ("services", name, "args"),
        f"services.{name}.args: no {kind} build reads all these flags as written ({said}); "
        "write each flag in the form of the build you run, and that build as "
        "runtimes.<id>.version (its --version prints it)",
        FA_FORM or Severity.ERROR,
    )


def _order(build: Any) -> float:
    """A build as one number, to find the nearest span."""
    if isinstance(build, tuple):
        return float(sum(x / 1000**k for k, x in enumerate(build)))
    return float(build)


def _shown(value: str) -> str:
    """A value for a message: one printable line, cut when long."""
    return printable(value if len(value) <= 40 else value[:40] + "...")


def _number(arg: str) -> bool:
    return re.fullmatch(r"-[0-9.]+(e-?[0-9]+)?", arg) is not None


def _arity_any(spans: Sequence[Span], build: Any) -> int:
    """The values a flag reads in every build (-2: the builds differ)."""
    arities = {sp.arity for sp in spans}
    if len(arities) == 1:
        return arities.pop()
    return -2


_FA_ON = frozenset({"on", "1", "auto", "true", "enabled", "-1"})
_FA_OFF = frozenset({"off", "0", "false", "disabled"})


def _classify(
    spec: Spec,
    rs: ResolvedService,
    kind: str,
    build: Any,
    path: Any,
    where: str,
    key: str,
    flag: str,
    values: list[str],
) -> Iterator[Problem]:
    if kind == "vllm":
        reason = VLLM_UNMODELLED.get(key)
        if reason:
            yield Problem(path, f"{where}: {flag} {reason}; layoutgen does not plan it")
        return
    if key in ("-fa", "--flash-attn"):
        yield from _flash_attn(rs, kind, build, path, where, flag, values)
        return
    if key in EXITS:
        yield Problem(
            path,
            f"{where}: {flag} makes llama-server print and exit: the service would never "
            "serve; remove it",
        )
        return
    reason = UNMODELLED.get(key)
    if reason is not None:
        yield Problem(
            path,
            f"{where}: {flag}{''.join(' ' + _shown(v) for v in values[:2])} changes memory or "
            f"placement the plan does not model: {reason}",
        )


def _flash_attn(
    rs: ResolvedService,
    kind: str,
    build: Any,
    path: Any,
    where: str,
    flag: str,
    values: list[str],
) -> Iterator[Problem]:
    """``-fa`` as the build reads it, against what the plan reads
    (Runtime.flash_attn: the value after the last -fa, else on with
    GPUs)."""
    from layoutgen import runtimes
    from layoutgen.spec.roles import flash_attn

    # the plan reads -fa as the spec's build does (a bare -fa is on before ik 3928)
    rt = runtimes.get(kind, str(build)) if build is not None and kind != "vllm" else None
    if not values:
        # a bare -fa: on in the builds that read no value.  Without a build the plan
        # reads the word after -fa as its value: none (the last argument) leaves flash
        # attention off on the CPU alone, a word such as 'off' (the newer form) too
        from layoutgen.spec.roles import flash_attn_arg

        if flash_attn(rs, rt):
            return
        last = flash_attn_arg(rs, rt) is None
        severity = Severity.ERROR if last else FA_FORM
        if severity is not None:
            yield Problem(
                path,
                f"{where}: a bare {flag} turns flash attention on in {kind} "
                f"{_show(build)}, and the plan reads it as off (a service on the CPU "
                f"alone): the server would run otherwise than planned; remove {flag}",
                severity,
            )
        return
    value = values[0].lower()
    if value in _FA_ON or value in _FA_OFF:
        return
    yield Problem(
        path,
        f"{where}: {flag} {clip(values[0])}: {kind}"
        + (f" {_show(build)}" if build is not None else "")
        + f" reads '{flag}' with a value, on, off or auto; write '{flag}', 'on' (or "
        "'off', 'auto')",
    )
