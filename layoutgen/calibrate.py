"""``layoutgen calibrate``: the buffer sizes a start-up log printed, written into the spec.

Why: compute buffers have no closed form (DESIGN §5), and a runtime build can
allocate weights or KV differently from what the plan computes.  A start-up
log prints every buffer's size; calibrate copies those numbers, exactly as
printed, into ``services.<name>.measured``, and the plan uses them (marked
measured).

Reading.  The log is streamed line by line and a size is recognised anywhere
in its line, so prose around it, leading spaces, timestamps (``0.00.021.857 I``)
and ``podman logs`` or journal prefixes do not matter.  Input is bounded: a
regular file only (a FIFO or ``/dev/zero`` is refused before it is opened for
reading), at most ``LOG_MAX`` (16 MiB) in all, lines longer than ``LINE_MAX``
(4 KiB) stepped over without being held, sizes at most 1 PiB (10 digits, 6
decimals: llama.cpp prints 2), buffer names printable.  Lines of the form
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

Whose start-up.  Sizes from another model or host would silently replace
measured ones, so the log must match the service: its model file name
(``loaded meta data ... from PATH``), ``general.architecture`` and layer count
(``block_count``; ``n_layer`` also without nextn layers, as llama.cpp prints
it) against the service's model and profile; the runtime, recognised by lines
only one runtime prints (``_RUNTIMES``), against the service's runtime kind;
the CUDA device count and the GPU buffers it names against the service's GPUs
(a container sees exactly its GPUs).  A fact the log does not show is not
checked.  A mismatch refuses the log with one line naming each difference;
``--force`` writes the sizes anyway and returns the differences to be shown.

Writing.  Only the service's ``measured`` block changes.  Each buffer in the
log gets one entry, ``CUDA0: {weights: 14498.95MiB, kv: 1491.79MiB, compute:
5418.03MiB}`` (the fields the log printed, values as printed), which replaces
that buffer's old entry as a whole; entries of buffers not in the log stay.
A comment at the end of a replaced entry is kept while the values it sat
beside are kept; where the log changes or drops one, the comment (often a
quote of the old log line) is replaced by ``# from LOG (was compute
5418.03MiB)``.  The edit is made in the text at positions
from ruamel's composer, and ruamel emits the new entries: dumping the whole
round-trip tree would re-flow a multi-line ``args: [...]`` and change lines
nobody asked to change.  The new text is parsed again and must equal the old
spec plus the new entries before it atomically replaces the file.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import stat
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO

from layoutgen import source
from layoutgen.errors import Diagnostic, InvalidInput, LayoutgenError, Problem, Severity
from layoutgen.gguf_header import NotRegularFile, open_regular
from layoutgen.plan import Plan

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
SPEC_MAX = 1 << 20  # as source.MAX_SPEC_BYTES: a spec is a few KiB

# A word of the buffer part never ends in ':', so the function is the last
# "name:" before the buffer (journal and podman prefixes come before it).
# The head is matched in a window before "buffer size" (see _BEFORE), the size
# right after it: no line, however long, costs more than a bounded search.
_SIZE_HEAD = re.compile(r"(?P<func>[A-Za-z_]\w*):\s+(?P<words>(?:\S*[^\s:]\s+)+?)buffer size")
_SIZE = re.compile(
    r"\s*+=\s*+(?P<mib>[0-9]++(?:\.[0-9]++)?+)\s*+MiB\b"
)  # possessive: no backtracking
_CLIP = frozenset({"reserve_compute_meta", "alloc_compute_meta"})
_GPU_BUFFER = re.compile(r"^(?:(?:CUDA|ROCm|Vulkan|SYCL|MUSA|CANN|Metal)[0-9]+|RPC[0-9]+\[.+\])$")
_BUFFER_NAME = re.compile(r"^[\x21-\x7e]{1,128}$")  # CUDA0, CUDA_Host, RPC0[HOST:PORT], ...
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
#: Lines only one runtime prints, each a dated rule with its source.
_RUNTIMES: tuple[tuple[str, str, re.Pattern[str]], ...] = (
    # ik_llama.cpp's llama_init_from_model prints its own context options on
    # every start (src/llama.cpp: "attn_max_b", "fused_moe"; seed 001), and its
    # CUDA backend pins host memory with "Allocating N GiB of pinned host memory".
    ("ik_llama.cpp", "attn_max_b ", re.compile(r": attn_max_b\s+=\s+-?[0-9]")),
    ("ik_llama.cpp", "fused_moe ", re.compile(r": fused_moe\s+=\s+-?[0-9]")),
    ("ik_llama.cpp", "pinned host", re.compile(r"Allocating [0-9.]+ GiB of pinned host memory")),
    # llama.cpp (checked in build 11434) logs from load_tensors, print_info,
    # llama_context, sched_reserve, llama_kv_cache* and llama_memory_recurrent;
    # ik_llama.cpp (checked 2026-08, and ik-llama-cpp-python 0.1.5) kept the
    # older names llm_load_tensors, llm_load_print_meta, llama_kv_cache_init and
    # llama_init_from_model (its print_info prints only the vocabulary).  A log
    # with the older names only, as older llama.cpp builds printed them too,
    # is attributed to neither runtime.
    *(
        ("llama.cpp", f"{name}:", re.compile(rf"(?:^|[^\w~]){name}:\s"))
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
    ("llama.cpp", "print_info: arch", re.compile(r"print_info:\s+arch\s")),
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
        size = _SIZE.match(line, m.end()) if m else None
        if m is None or size is None:
            return
        buffer, *kind = m["words"].split()
        if not _BUFFER_NAME.match(buffer):
            raise self.error(
                number,
                m.start("words") + 1,
                f"buffer name {_shown(buffer)} is not one a runtime prints (CUDA0, CUDA_Host, "
                "CPU_Mapped, RPC0[HOST:PORT], ...); is the log damaged?",
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
    with _open(
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
            raise _too_big(name, LOG_MAX, "it grew past the limit while being read")
        complete = chunk.endswith(b"\n")
        if inside_long:
            inside_long = not complete
            continue
        number += 1
        if complete or len(chunk) <= LINE_MAX:
            yield number, chunk
        else:
            inside_long = True


def _too_big(name: str, limit: int, why: str) -> InvalidInput:
    message = f"larger than the {limit >> 20} MiB calibrate reads; {why}"
    return InvalidInput([Diagnostic(name, 0, 0, Severity.ERROR, message)])


@contextlib.contextmanager
def _open(path: Path, name: str, limit: int, why: str, advice: str) -> Iterator[BinaryIO]:
    """A regular file of at most ``limit`` bytes, opened without blocking; one-line errors."""
    try:
        f = open_regular(path)
    except FileNotFoundError:
        message = "no such file"
    except IsADirectoryError:
        message = "is a directory, not a file"
    except NotRegularFile as exc:
        message = f"is {exc.kind}, not a regular file; {advice}"
    except OSError as exc:
        message = f"cannot read: {exc.strerror or exc}"
    else:
        with f:
            size = os.fstat(f.fileno()).st_size
            if size > limit:
                raise _too_big(name, limit, f"it has {size / (1 << 20):.1f} MiB; {why}")
            yield f
        return
    raise InvalidInput([Diagnostic(name, 0, 0, Severity.ERROR, message)])


@dataclass(frozen=True)
class Calibrated:
    service: str
    entries: Entries  # what was written, by buffer
    #: what --force let through: the mismatches between the log and the service
    overridden: tuple[str, ...] = ()


def calibrate(log: Path, spec: Path, service: str | None, *, force: bool = False) -> Calibrated:
    """Read ``log``, write its sizes into ``spec`` (atomically); raise on any user error.

    A log whose model, layer count, runtime or devices differ from the
    service's is refused (one line naming each difference), or with ``force``
    written anyway, the differences returned in ``overridden``.
    """
    read = read_log_file(log, str(log))
    text = _read_spec(spec, str(spec))
    doc = source.parse(text, str(spec), spec)
    chosen = _choose(doc, service)
    new_text, chosen = edit_spec(text, str(spec), chosen, read.entries, log_name=log.name)
    problems = mismatches(read, expected(doc, chosen))
    if problems and not force:
        message = (
            f"the log is not from a start-up of service {chosen}: {'; '.join(problems)}; "
            "calibrate the service it is from (--service NAME), or pass --force to write "
            "its sizes anyway"
        )
        raise InvalidInput([Diagnostic(str(log), 0, 0, Severity.ERROR, message)])
    target = Path(os.path.realpath(spec))  # a link keeps pointing at the updated file
    try:
        _write(target, new_text)
    except OSError as exc:
        raise LayoutgenError(f"cannot write {spec}: {exc.strerror}") from None
    return Calibrated(chosen, read.entries, tuple(problems))


def _read_spec(spec: Path, name: str) -> str:
    with _open(spec, name, SPEC_MAX, "a spec is a few KiB", "give the spec file itself") as f:
        raw = f.read(SPEC_MAX + 1)
    if len(raw) > SPEC_MAX:
        raise _too_big(name, SPEC_MAX, "it grew past the limit while being read")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInput(
            [Diagnostic(name, 0, 0, Severity.ERROR, f"not UTF-8 text ({exc.reason})")]
        ) from None


@dataclass(frozen=True)
class Expected:
    """What a start-up log of one service must show; None or empty where the spec cannot say."""

    service: str
    model: str | None = None
    file: str | None = None  # the model's file name (the first shard's)
    arch: str | None = None
    layers: frozenset[int] = frozenset()  # block_count; without nextn layers too
    runtime: str | None = None  # kind
    runtime_id: str | None = None
    container: bool = True
    #: the service's GPU buffers in the runtime's names, and their host GPU ids
    gpu_buffers: tuple[str, ...] = ()
    gpus: tuple[str, ...] = ()
    cuda: int = 0  # local CUDA GPUs


def expected(doc: source.Document, service: str) -> Expected:
    """The model, runtime and devices of ``service``; the spec must pass its schema."""
    from layoutgen.footprint import device_order
    from layoutgen.profile import load_profile
    from layoutgen.roles import resolve_service
    from layoutgen.schema_errors import validate_mapping
    from layoutgen.spec import Spec

    spec = validate_mapping(
        doc, Spec, "a spec is a mapping with keys host, models, runtimes and services"
    )
    rs = resolve_service(spec, service)
    svc = rs.service
    gpus, buffers, _ = device_order(spec, rs.gpus)
    found: dict[str, Any] = {
        "service": service,
        "gpu_buffers": buffers,
        "gpus": gpus,
        "cuda": sum(1 for b in buffers if b.startswith("CUDA")),
    }
    runtime = spec.runtimes.get(svc.runtime)
    if runtime is not None:
        found.update(runtime=runtime.kind, runtime_id=svc.runtime, container=bool(runtime.image))
    model = spec.models.get(svc.model)
    if model is not None:
        found.update(model=svc.model, file=PurePosixPath(model.path).name)
        try:
            profile = load_profile(doc.path.parent / model.profile)
        except (InvalidInput, OSError):
            profile = None  # validate reports it; the other checks still run
        if profile is not None:
            hp = profile.hparams
            found.update(
                arch=profile.arch, layers={hp.n_layer, hp.n_layer - (hp.nextn_layers or 0)}
            )
    found["layers"] = frozenset(found.get("layers", ()))
    return Expected(**found)


def mismatches(log: Log, want: Expected) -> list[str]:
    """Each way the log shows another model, runtime or device set than ``want``'s."""
    out: list[str] = []
    who = f"service {want.service}"
    facts = log.facts
    if want.file and (seen := facts.get("file")):
        name = PurePosixPath(seen.value).name
        if name != want.file:
            out.append(
                f"log says model file {_shown(name)} (line {seen.line}), {who}'s model "
                f"{want.model} is {want.file}"
            )
    if want.arch and (seen := facts.get("arch")) and seen.value != want.arch:
        out.append(
            f"log says arch {seen.value} (line {seen.line}), {who}'s model {want.model} "
            f"is {want.arch}"
        )
    layers = facts.get("block_count")
    if want.layers and layers and int(layers.value) not in want.layers:
        out.append(_layers(layers, want, who))
    elif (
        want.layers
        and not layers
        and (n := facts.get("n_layer"))
        and int(n.value) not in want.layers
    ):
        out.append(_layers(n, want, who))
    if want.runtime:
        for kind, seen in sorted(log.runtimes.items(), key=lambda kv: kv[1].line):
            if kind != want.runtime:
                out.append(
                    f"log is from {kind} (line {seen.line}: {_shown(seen.value)}), {who} "
                    f"runs {want.runtime} (runtime {want.runtime_id})"
                )
                break
    cuda = facts.get("cuda")
    if cuda and (int(cuda.value) < want.cuda or (want.container and int(cuda.value) != want.cuda)):
        out.append(
            f"log says {_count(int(cuda.value), 'CUDA device')} (line {cuda.line}), {who} "
            f"uses {want.cuda} ({', '.join(want.gpus) or 'no GPU'})"
        )
    extra = [(b, n) for b, n in log.gpu_buffers.items() if b not in want.gpu_buffers]
    if extra:
        names = ", ".join(_shown(b) for b, _ in extra)
        out.append(
            f"log has GPU buffer{'s' if len(extra) > 1 else ''} {names} (line {extra[0][1]}), "
            f"{who}'s GPU buffers are {', '.join(want.gpu_buffers) or 'none'}"
        )
    return out


def _layers(seen: Seen, want: Expected, who: str) -> str:
    return (
        f"log says {seen.value} layers (line {seen.line}), {who}'s model {want.model} "
        f"has {max(want.layers)}"
    )


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _shown(text: str) -> str:
    shown = text if text.isprintable() else repr(text)
    return shown if len(shown) <= 80 else shown[:77] + "..."


def edit_spec(
    text: str, name: str, service: str | None, entries: Entries, *, log_name: str = "the log"
) -> tuple[str, str]:
    """The spec's text with ``entries`` in the service's ``measured`` block, and the service.

    An entry's comment is kept while it stays true: where the log changes or
    drops a value the entry had, the comment (which may quote the old value)
    is replaced by one saying where the new values come from and what they
    replaced.
    """
    from ruamel.yaml import YAML
    from ruamel.yaml.nodes import MappingNode

    doc = source.parse(text, name)
    data = doc.plain()
    chosen = _choose(doc, service)
    svc_key, svc = _pair(YAML(typ="rt").compose(text), "services", chosen)
    if not isinstance(svc, MappingNode) or svc.flow_style or not svc.value:
        raise _error(
            doc,
            ("services", chosen),
            f"services.{chosen}: write it as a block mapping (one key per line) so that "
            "calibrate can add its measured sizes",
        )
    lines = text.split("\n")
    cr = "\r" if lines[0].endswith("\r") else ""  # keep CRLF files CRLF
    indent = svc.value[0][0].start_mark.column
    old = data["services"][chosen].get("measured")
    step = max(indent - svc_key.start_mark.column, 1)
    layout = _Layout(lines, cr, indent, step, log_name, old if isinstance(old, dict) else {})
    measured = next(((k, v) for k, v in svc.value if k.value == "measured"), None)
    if measured is None:
        edits = layout.new_block(svc.value[-1], entries)
    elif isinstance(measured[1], MappingNode) and not measured[1].flow_style and measured[1].value:
        edits = layout.update_block(measured[1], entries)
    elif old is None or isinstance(old, dict):  # a flow mapping or an empty value
        edits = layout.rewrite_block(measured, {**(old or {}), **entries})
    else:
        raise _error(
            doc,
            ("services", chosen, "measured"),
            f"services.{chosen}.measured: expected a mapping of buffer names; fix it "
            "(layoutgen validate) first",
        )
    for begin, stop, new in sorted(edits, reverse=True):
        lines[begin:stop] = new
    new_text = "\n".join(lines)
    _check(data, new_text, name, chosen, entries)
    return new_text, chosen


#: lines[start:stop] = new lines (0-based line numbers of the original text)
Edit = tuple[int, int, list[str]]


@dataclass(frozen=True)
class _Layout:
    """The text being edited and how the service is indented."""

    lines: list[str]
    cr: str  # "\r" in a CRLF file
    indent: int  # of the service's keys
    step: int  # one more level of indentation
    log: str  # the log's file name, for comments
    old: Mapping[str, Any]  # the measured block before the edit

    def new_block(self, last: tuple[Any, Any], entries: Entries) -> list[Edit]:
        """No ``measured`` yet: a block after the service's last value."""
        end, _ = _end(last[0], last[1], self.lines)
        block = ["measured:", *(" " * self.step + _entry(b, e) for b, e in entries.items())]
        return [(end + 1, end + 1, [" " * self.indent + line + self.cr for line in block])]

    def update_block(self, block: Any, entries: Entries) -> list[Edit]:
        """A block mapping: replace the logged buffers' entries in place, append new ones."""
        pairs = {k.value: (k, v) for k, v in block.value}
        edits: list[Edit] = []
        for buf in (b for b in entries if b in pairs):
            key, value = pairs[buf]
            first = key.start_mark.line
            end, col = _end(key, value, self.lines)
            kept = [ln for ln in self.lines[first + 1 : end] if ln.lstrip().startswith("#")]
            comment = _comment(self.lines[end], col)
            replaced = _replaced(self.old.get(buf), entries[buf])
            if comment and replaced is not None:
                lead = comment[: len(comment) - len(comment.lstrip())]
                comment = f"{lead}# from {_shown(self.log)}{replaced}"
            line = " " * key.start_mark.column + _entry(buf, entries[buf]) + comment
            edits.append((first, end + 1, [*kept, line + self.cr]))
        added = [b for b in entries if b not in pairs]
        if added:
            end, _ = _end(block.value[-1][0], block.value[-1][1], self.lines)
            col = block.value[0][0].start_mark.column
            new = [" " * col + _entry(b, entries[b]) + self.cr for b in added]
            edits.append((end + 1, end + 1, new))
        return edits

    def rewrite_block(self, measured: tuple[Any, Any], merged: Mapping[str, Any]) -> list[Edit]:
        """A flow mapping or an empty value: rewritten as a block, comment kept."""
        key, value = measured
        end, col = _end(key, value, self.lines)
        head = " " * self.indent + "measured:" + _comment(self.lines[end], col) + self.cr
        pad = " " * (self.indent + self.step)
        body = [pad + _entry(b, e) + self.cr for b, e in merged.items()]
        return [(key.start_mark.line, end + 1, [head, *body])]


def unplanned(plan: Plan, service: str, buffers: Iterable[str]) -> list[str]:
    """Buffers the log has and the plan does not: their measured values go unused."""
    planned = plan.service(service).buffers
    return [b for b in buffers if b not in planned]


def _choose(doc: source.Document, service: str | None) -> str:
    data = doc.plain()
    services: dict[str, Any] = {}
    if isinstance(data, dict) and isinstance(data.get("services"), dict):
        services = data["services"]
    names = sorted(str(n) for n in services)
    if not names:
        raise _error(
            doc,
            ("services",),
            "no services to calibrate; the spec needs the service "
            "the log is from under 'services:'",
        )
    if service is None:
        if len(names) > 1:
            raise _error(
                doc,
                ("services",),
                f"{len(names)} services ({', '.join(names)}): say "
                "which one the log is from with --service NAME",
            )
        service = names[0]
    elif service not in services:
        raise _error(
            doc,
            ("services",),
            f"no service {service!r} in this spec; its services are: {', '.join(names)}",
        )
    if not isinstance(services.get(service), dict):
        raise _error(doc, ("services", service), f"services.{service}: expected a mapping")
    return service


def _error(doc: source.Document, path: tuple[str, ...], message: str) -> InvalidInput:
    return InvalidInput([doc.diagnostic(Problem(path, message, at_key=True))])


def _pair(root: Any, *keys: str) -> tuple[Any, Any]:
    key: Any = None
    node = root
    for name in keys:
        key, node = next((k, v) for k, v in node.value if k.value == name)
    return key, node


def _end(key: Any, value: Any, lines: list[str]) -> tuple[int, int]:
    """Line and column (0-based) just after ``value``, the value of ``key``."""
    from ruamel.yaml.nodes import MappingNode, ScalarNode, SequenceNode

    if isinstance(value, MappingNode | SequenceNode) and not value.flow_style:
        last = value.value[-1]  # block collections end after trailing comments: use their last leaf
        if isinstance(value, MappingNode):
            return _end(last[0], last[1], lines)
        return _end(last, last, lines)
    if isinstance(value, ScalarNode) and value.value == "" and value.style is None:
        line = key.end_mark.line  # an empty value: the line of its key, after the colon
        return line, lines[line].find(":", key.end_mark.column) + 1
    if isinstance(value, ScalarNode) and value.style in ("|", ">"):
        line = value.end_mark.line - 1  # a block scalar ends at the start of the next line
        while line > value.start_mark.line and not lines[line].strip():
            line -= 1
        return line, len(lines[line].rstrip("\r"))
    return value.end_mark.line, value.end_mark.column


def _replaced(old: Any, new: Mapping[str, str]) -> str | None:
    """None if ``new`` keeps every value of the ``old`` entry, else what it replaced."""
    from layoutgen.sizes import SizeError, parse_size

    if not isinstance(old, Mapping):
        return "" if old is not None else None
    changed = []
    for key, value in old.items():
        try:
            same = key in new and parse_size(value) == parse_size(new[key])
        except SizeError:
            same = False
        if not same:
            changed.append(f"{key} {value}" if _PLAIN.match(f"{key} {value}") else str(key))
    if not changed:
        return None
    return " (was " + ", ".join(_shown(c) for c in changed) + ")"


_PLAIN = re.compile(r"^[\w.]{1,40} [\w.]{1,40}$")


def _comment(line: str, col: int) -> str:
    rest = line[col:].rstrip("\r")
    return rest if rest.lstrip().startswith("#") else ""


def _entry(buffer: str, value: object) -> str:
    """``BUF: {weights: ..., kv: ...}`` as ruamel writes it (it quotes what needs quotes)."""
    from ruamel.yaml import YAML
    from ruamel.yaml.comments import CommentedMap

    inner: object = value
    if isinstance(value, Mapping):
        inner = CommentedMap(value)
        inner.fa.set_flow_style()
    yaml = YAML(typ="rt")
    yaml.width = 1 << 16
    out = io.StringIO()
    yaml.dump(CommentedMap([(buffer, inner)]), out)
    return out.getvalue().rstrip("\n")


def _check(data: Any, new_text: str, name: str, service: str, entries: Entries) -> None:
    """The edited text must mean the old spec plus the new entries, and nothing else."""
    try:
        new = source.parse(new_text, name).plain()
    except InvalidInput:
        new = None
    svc = dict(data["services"][service])
    old = svc.get("measured")
    svc["measured"] = {**(old if isinstance(old, dict) else {}), **entries}
    if new != {**data, "services": {**data["services"], service: svc}}:
        lines = "; ".join(_entry(b, e) for b, e in entries.items())
        raise LayoutgenError(
            f"cannot edit services.{service}.measured in place (anchors, aliases or unusual "
            f"layout?); the spec is unchanged: add these entries by hand: {lines}"
        )


def _write(path: Path, text: str) -> None:
    """Beside the target first, then ``os.replace``: no reader sees half a spec."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, stat.S_IMODE(path.stat().st_mode))
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
