"""Start-up logs: the buffer sizes one start-up printed, and whose start-up it was.

Why a module of its own: a start-up log is untrusted text of any size, and
reading it (recognising sizes and identity facts in lines, summing them,
telling one start-up from two) is a different job from checking the log
against a service and editing the spec, which :mod:`layoutgen.calibrate.command` and
:mod:`layoutgen.calibrate.measured` do with what this module returns.

Reading.  The log is streamed line by line and a size is recognised anywhere
in its line, so prose around it, leading spaces, timestamps (``0.00.021.857 I``)
and ``podman logs`` or journal prefixes do not matter.  Input is bounded: a
regular file only (a FIFO or ``/dev/zero`` is refused before it is opened for
reading), at most ``LOG_MAX`` (16 MiB) in all, lines longer than ``LINE_MAX``
(4 KiB) stepped over without being held, sizes at most 1 PiB (10 digits, 6
decimals: llama.cpp prints 2), buffer names as validate accepts them in
``measured`` (one rule: :data:`layoutgen.inputs.literals.BUFFER`, checked before
anything is written).  Lines end at ``\n`` alone (a CRLF's ``\r`` is dropped);
inside a line only spaces and tabs separate words, so a ``\r``, ``\x0b``,
``\x1c``, U+0085 or U+2028 is part of a word (a terminal's progress output),
never a new line or a word break.  A size that is not a finite number of MiB
(``nan``, ``inf``, ``-1``) is an error at its line.  Lines of the form
``<function>: <BUFFER> [<kind>] buffer size = <N> MiB`` count:

- weights: ``llm_load_tensors:  CUDA_Host buffer size`` (ik_llama.cpp),
  ``load_tensors:   CPU_Mapped model buffer size`` (llama.cpp);
- kv: ``KV buffer size`` (``llama_kv_cache_init``, ``llama_kv_cache``; both
  caches of a sliding-window model), ``RS buffer size``
  (``llama_memory_recurrent``: recurrent state is what those layers keep
  instead of a KV cache), ``DSV4 <name> state buffer size``;
- compute: ``compute buffer size`` after any function name
  (``llama_init_from_model``, ``llama_context``, ``sched_reserve``) but the
  multimodal projector's (``reserve_compute_meta``, ``alloc_compute_meta``:
  clip's buffers, not the model's).

Ignored: output buffers (``CPU  output buffer size``: the logits, a few MiB
that are none of the three fields), LoRA adapters, totals (``KV self size``,
``llama_kv_cache: size = ...``) and the debug lines comparing a compute buffer
with its expected size.

Summing.  One start-up can print a buffer more than once: the weights of a
split GGUF mapped once per file (``CPU_Mapped``, one line per shard, one after
another) and the KV lines of several caches are summed; of repeated compute
lines (llama.cpp prints them again when it re-reserves its graph, and a
reserved buffer never shrinks) the largest counts.  Sums are exact decimal
sums of the printed numbers.

One start-up.  A runtime prints all its model buffers in one go, before any
KV cache or compute buffer.  So a weights line begins a second start-up when
a KV or compute line came before it, or when its buffer already had a weights
line and another buffer's line came in between.  Two start-ups in one log (a
restarted server, ``podman logs`` of a container that ran twice, a
speculative draft model beside the main one) would add up to a wrong figure:
calibrate refuses such a log and names the line where the second one begins.

Identity facts.  Beside the sizes, the reader keeps the first line showing
the model file name, ``general.architecture``, the layer count and the CUDA
device count, and the first line only one runtime prints (``_RUNTIMES``);
:func:`layoutgen.calibrate.command.mismatches` compares them with the service.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import BinaryIO

from layoutgen.errors import Diagnostic, InvalidInput, Severity
from layoutgen.inputs.literals import BUFFER
from layoutgen.models.inputs import open_bounded, too_big
from layoutgen.runtimes.ik_llama_cpp import IkLlamaCpp
from layoutgen.runtimes.llama_cpp import LlamaCpp

FIELDS = ("weights", "kv", "compute")
#: Buffer name -> field -> size text as written into the spec (``14498.95MiB``).
Entries = dict[str, dict[str, str]]

#: Largest log read.  A start-up log is well under 1 MiB at the default
#: verbosity; at ``-lv 5`` llama.cpp logs ~0.9 KiB per tensor (its placement,
#: its buffer), ~3 MiB for GLM-5.1's 1,809 tensors with the ``-fit`` dry run.
#: 16 MiB leaves room for some traffic after the start-up in a ``podman logs``
#: capture and keeps a read (every line is looked at) to ~0.3 s.
LOG_MAX = 16 << 20
#: Longer lines are stepped over unread: every line calibrate reads is a few
#: hundred bytes even behind journal prefixes.
LINE_MAX = 4096
#: Largest buffer size accepted from a log (1 PiB in MiB): larger is no allocation.
MIB_MAX = 1 << 30

# A word of the buffer part never ends in ':', so the function is the last
# "name:" before the buffer (journal and podman prefixes come before it).
# The head is matched in a window before "buffer size" (see _BEFORE), the size
# right after it: no line, however long, costs more than a bounded search.
# Words are separated by spaces and tabs only (see the module docstring).
_SIZE_HEAD = re.compile(
    r"(?P<func>[A-Za-z_][A-Za-z0-9_]*):[ \t]+(?P<words>(?:[^ \t]*[^ \t:][ \t]+)+?)buffer size"
)
_SIZE = re.compile(
    r"[ \t]*+=[ \t]*+(?P<mib>[0-9]++(?:\.[0-9]++)?+)[ \t]*+MiB\b"
)  # possessive: no backtracking
#: what stands where a size should: a non-finite or negative one is refused at its line
#: rather than stepped over (other words there are some other line's, and skipped)
_NOT_A_SIZE = re.compile(r"[ \t]*+=[ \t]*+(?P<v>[-+]?[A-Za-z0-9.]{1,24}+)", re.ASCII)
_NON_FINITE = ("nan", "inf", "infinity")
_CLIP = frozenset({"reserve_compute_meta", "alloc_compute_meta"})
_GPU_BUFFER = re.compile(r"^(?:(?:CUDA|ROCm|Vulkan|SYCL|MUSA|CANN|Metal)[0-9]+|RPC[0-9]+\[.+\])$")
_TWICE = (
    ": the log holds more than one start-up (a restarted server, or a second model such as "
    "a speculative draft); calibrate measures one: pass the log of a single start-up "
    "(podman logs --since TIME NAME, or keep only the lines of the start you want)"
)
_NOTHING = (
    "no buffer sizes found in {log} (is it a llama.cpp/ik_llama.cpp start-up log? the "
    "server prints '... buffer size = N MiB' lines at its default log level: on llama.cpp "
    "keep -lv at 3 or more; capture stdout and stderr, e.g. podman logs NAME > LOG 2>&1)"
)

# What a start-up log says about the model, the runtime and the devices, as both
# runtimes print it (llama.cpp 11434: src/llama-model-loader.cpp, llama-model.cpp,
# ggml-cuda.cu; ik_llama.cpp 2026-08: src/llama.cpp, ggml/src/ggml-cuda.cu).
_WORD = r"(?P<v>[A-Za-z0-9_.-]{1,64})"
_NUMBER = r"(?P<v>[0-9]{1,9})"
_FACTS: tuple[tuple[str, str, re.Pattern[str]], ...] = (
    # llama_model_loader's key/value dump, the same in both runtimes
    ("arch", "general.architecture", re.compile(rf"general\.architecture\s+str\s+=\s+{_WORD}$")),
    ("block_count", ".block_count", re.compile(rf"\.block_count\s+u32\s+=\s+{_NUMBER}$")),
    # llm_load_print_meta (ik_llama.cpp, older llama.cpp) and print_info (llama.cpp)
    ("arch", " arch ", re.compile(rf"(?:llm_load_print_meta|print_info):\s+arch\s+=\s+{_WORD}$")),
    (
        "n_layer",
        " n_layer ",
        re.compile(rf"(?:llm_load_print_meta|print_info):\s+n_layer\s+=\s+{_NUMBER}$"),
    ),
    ("block_count", " n_layer_all ", re.compile(rf"print_info:\s+n_layer_all\s+=\s+{_NUMBER}$")),
    (
        "file",
        "loaded meta data",
        re.compile(
            r"loaded meta data with [0-9]+ key-value pairs and [0-9]+ tensors "
            r"from (?P<v>.+?) \(version "
        ),
    ),
    ("cuda", " CUDA devices", re.compile(rf"ggml_cuda_init: found {_NUMBER} CUDA devices")),
)
#: Lines only one runtime prints: each runtime module's LOG_MARKERS.
_RUNTIMES: tuple[tuple[str, str, re.Pattern[str]], ...] = tuple(
    (rt.KIND, needle, pattern)
    for rt in (LlamaCpp, IkLlamaCpp)
    for needle, pattern in rt.LOG_MARKERS
)
#: A pattern is matched in a window around the first occurrence of its needle
#: (this many characters before it and after it), so that no line, however
#: long or hostile, costs more than a few hundred characters of matching.
_BEFORE, _AFTER = 256, 320
_INTERESTING = re.compile(
    rb"buffer size|general\.architecture|block_count|n_layer|arch |loaded meta data|"
    rb"CUDA devices|attn_max_b|fused_moe|pinned host|load_tensors:|llama_context:|"
    rb"sched_reserve:|llama_kv_cache|llama_memory_recurrent:|print_info:"
)


def _field(func: str, kind: tuple[str, ...]) -> str | None:
    if kind in ((), ("model",)):
        return "weights"
    if kind[-1:] in (("KV",), ("RS",)) or (kind[:1] == ("DSV4",) and kind[-1:] == ("state",)):
        return "kv"
    if kind == ("compute",) and func not in _CLIP:
        return "compute"
    return None


@dataclass(frozen=True)
class Seen:
    """A value a log line shows, and the line (1-based)."""

    value: str
    line: int


@dataclass(frozen=True)
class Log:
    """What one start-up log says: its buffer sizes, and whose start-up it was."""

    entries: Entries
    #: "arch", "block_count", "n_layer", "file", "cuda": the first value seen
    facts: dict[str, Seen]
    #: runtime kind -> the first line only that runtime prints
    runtimes: dict[str, Seen]
    #: GPU buffer (CUDA0, RPC0[host:port], ...) -> the first line naming it
    gpu_buffers: dict[str, int]


class _Reader:
    """Reads a log line by line, keeping only sizes and facts (see the module docstring)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.sizes: dict[str, dict[str, Decimal]] = {}
        self.first: dict[str, int] = {}  # buffer -> line of its first weights line
        self.previous: str | None = None  # the buffer of the previous size line, if weights
        self.later: int | None = None  # the line of the first KV or compute line
        self.facts: dict[str, Seen] = {}
        self.runtimes: dict[str, Seen] = {}
        self.gpu_buffers: dict[str, int] = {}

    def error(self, number: int, col: int, message: str) -> InvalidInput:
        return InvalidInput([Diagnostic(self.name, number, col, Severity.ERROR, message)])

    def line(self, number: int, line: str) -> None:
        if (at := line.find("buffer size")) >= 0:
            self._size(number, line, at)
        for key, needle, pattern in _FACTS:
            if key not in self.facts and (m := _search(pattern, needle, line)):
                self.facts[key] = Seen(m["v"], number)
        for kind, needle, pattern in _RUNTIMES:
            if kind not in self.runtimes and (m := _search(pattern, needle, line)):
                self.runtimes[kind] = Seen(m[0].strip(" :"), number)

    def _size(self, number: int, line: str, at: int) -> None:
        m = _SIZE_HEAD.search(line, max(0, at - _BEFORE), at + len("buffer size"))
        if m is None:
            return
        size = _SIZE.match(line, m.end())
        if size is None:
            odd = _NOT_A_SIZE.match(line, m.end())
            value = odd["v"] if odd is not None else ""
            if value.lower().lstrip("+-") in _NON_FINITE or value[:1] == "-":
                raise self.error(
                    number,
                    line.index(value, m.end()) + 1,
                    f"buffer size {shown(value)} is not a size a runtime prints (a finite, "
                    "non-negative number of MiB); is the log damaged?",
                )
            return
        buffer, *kind = re.split(r"[ \t]+", m["words"].strip(" \t"))
        if not BUFFER.fullmatch(buffer):
            raise self.error(
                number,
                m.start("words") + 1,
                f"buffer name {shown(buffer)} is not one a runtime prints (CUDA0, CUDA_Host, "
                "CPU_Mapped, RPC0[HOST:PORT], ...: a letter, then letters, digits and '_', "
                "then an optional [HOST:PORT]); is the log damaged?",
            )
        field = _field(m["func"], tuple(kind))
        mib = self._mib(number, size.start("mib") + 1, size["mib"])
        if field == "weights":
            if self.later is not None or (buffer in self.first and self.previous != buffer):
                where = (
                    f"{buffer}'s model buffer is logged again (first at line {self.first[buffer]})"
                    if buffer in self.first
                    else f"a model buffer is logged after the KV or compute buffers "
                    f"(line {self.later})"
                )
                raise self.error(number, m.start("words") + 1, where + _TWICE)
            self.first.setdefault(buffer, number)
            self.previous = buffer
        else:
            self.previous = None
            if field is None:
                return
            self.later = self.later or number
        if _GPU_BUFFER.match(buffer):
            self.gpu_buffers.setdefault(buffer, number)
        fields = self.sizes.setdefault(buffer, {})
        if field not in fields:
            fields[field] = mib
        elif field == "compute":
            fields[field] = max(fields[field], mib)
        else:
            fields[field] += mib

    def _mib(self, number: int, col: int, text: str) -> Decimal:
        whole, _, fraction = text.partition(".")
        if len(whole) <= 10 and len(fraction) <= 6 and Decimal(text) <= MIB_MAX:
            return Decimal(text)
        shown = text if len(text) <= 24 else f"{text[:20]}... ({len(text)} characters)"
        raise self.error(
            number,
            col,
            f"buffer size {shown} MiB is not a size a runtime prints (at most {MIB_MAX} MiB, "
            "that is 1 PiB, with 2 decimals); is the log damaged?",
        )

    def result(self) -> Log:
        if not self.sizes:
            raise self.error(0, 0, _NOTHING.format(log=self.name))
        entries = {
            buf: {f: f"{self.sizes[buf][f]:f}MiB" for f in FIELDS if f in self.sizes[buf]}
            for buf in sorted(self.sizes)
        }
        return Log(entries, self.facts, self.runtimes, self.gpu_buffers)


def _search(pattern: re.Pattern[str], needle: str, line: str) -> re.Match[str] | None:
    at = line.find(needle)
    if at < 0:
        return None
    return pattern.search(line, max(0, at - _BEFORE), at + _AFTER)


def read_log(text: str, name: str) -> Entries:
    """The sizes of the one start-up in ``text``, by buffer (see the module docstring)."""
    return read_log_text(text, name).entries


def read_log_text(text: str, name: str) -> Log:
    reader = _Reader(name)
    for number, line in enumerate(text.split("\n"), 1):
        if len(line) <= LINE_MAX:
            reader.line(number, line.rstrip("\r"))
    return reader.result()


def read_log_file(path: Path, name: str) -> Log:
    """Stream a log file (a regular file of at most ``LOG_MAX`` bytes) into a :class:`Log`."""
    reader = _Reader(name)
    why = "a start-up log is a few MiB at most: pass only the start-up"
    with open_bounded(
        path, name, LOG_MAX, why, "save the log to a file first (podman logs NAME > LOG 2>&1)"
    ) as f:
        for number, line in _lines(f, name):
            if _INTERESTING.search(line):
                reader.line(number, line.decode("utf-8", errors="replace").rstrip("\r\n"))
    return reader.result()


def _lines(f: BinaryIO, name: str) -> Iterator[tuple[int, bytes]]:
    """(line number, line) of every line of at most ``LINE_MAX`` bytes; longer ones are skipped.

    No more than ``LINE_MAX + 1`` bytes are held at once, and no more than
    ``LOG_MAX`` bytes are read in all (the file may grow while it is read).
    """
    number, total, inside_long = 0, 0, False
    while chunk := f.readline(LINE_MAX + 1):
        total += len(chunk)
        if total > LOG_MAX:
            raise too_big(name, LOG_MAX, "it grew past the limit while being read")
        complete = chunk.endswith(b"\n")
        if inside_long:
            inside_long = not complete
            continue
        number += 1
        if complete or len(chunk) <= LINE_MAX:
            yield number, chunk
        else:
            inside_long = True


def shown(text: str) -> str:
    """``text`` as a message quotes it: on one line, and at most 80 characters."""
    out = text if text.isprintable() else repr(text)
    return out if len(out) <= 80 else out[:77] + "..."
