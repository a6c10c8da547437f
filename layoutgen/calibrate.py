"""``layoutgen calibrate``: the buffer sizes a start-up log printed, written into the spec.

Why: compute buffers have no closed form (DESIGN §5), and a runtime build can
allocate weights or KV differently from what the plan computes.  A start-up
log prints every buffer's size; calibrate copies those numbers, exactly as
printed, into ``services.<name>.measured``, and the plan uses them (marked
measured).

Reading.  The log is read line by line and a size is recognised anywhere in
its line, so prose around it, leading spaces, timestamps (``0.00.021.857 I``)
and ``podman logs`` or journal prefixes do not matter.  Lines of the form
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

Writing.  Only the service's ``measured`` block changes.  Each buffer in the
log gets one entry, ``CUDA0: {weights: 14498.95MiB, kv: 1491.79MiB, compute:
5418.03MiB}`` (the fields the log printed, values as printed), which replaces
that buffer's old entry as a whole (a comment at its end is kept); entries
of buffers not in the log stay.  The edit is made in the text at positions
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
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from layoutgen import source
from layoutgen.errors import Diagnostic, InvalidInput, LayoutgenError, Problem, Severity
from layoutgen.plan import Plan

FIELDS = ("weights", "kv", "compute")
#: Buffer name -> field -> size text as written into the spec (``14498.95MiB``).
Entries = dict[str, dict[str, str]]

# A word of the buffer part never ends in ':', so the function is the last
# "name:" before the buffer (journal and podman prefixes come before it).
_SIZE = re.compile(
    r"(?P<func>[A-Za-z_]\w*):\s+(?P<words>(?:\S*[^\s:]\s+)+?)"
    r"buffer size\s*=\s*(?P<mib>[0-9]+(?:\.[0-9]+)?)\s*MiB\b"
)
_CLIP = frozenset({"reserve_compute_meta", "alloc_compute_meta"})
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


def _field(func: str, kind: tuple[str, ...]) -> str | None:
    if kind in ((), ("model",)):
        return "weights"
    if kind[-1:] in (("KV",), ("RS",)) or (kind[:1] == ("DSV4",) and kind[-1:] == ("state",)):
        return "kv"
    if kind == ("compute",) and func not in _CLIP:
        return "compute"
    return None


def read_log(text: str, name: str) -> Entries:
    """The sizes of the one start-up in ``text``, by buffer (see the module docstring)."""
    sizes: dict[str, dict[str, Decimal]] = {}
    first: dict[str, int] = {}  # buffer -> line of its first weights line
    previous: str | None = None  # the buffer of the previous size line, if it was weights
    later: int | None = None  # the line of the first KV or compute line
    for number, line in enumerate(text.splitlines(), 1):
        m = _SIZE.search(line) if "buffer size" in line else None
        if m is None:
            continue
        buffer, *kind = m["words"].split()
        field, mib = _field(m["func"], tuple(kind)), Decimal(m["mib"])
        if field == "weights":
            if later is not None or (buffer in first and previous != buffer):
                where = (
                    f"{buffer}'s model buffer is logged again (first at line {first[buffer]})"
                    if buffer in first
                    else f"a model buffer is logged after the KV or compute buffers (line {later})"
                )
                col = m.start("words") + 1
                raise InvalidInput([Diagnostic(name, number, col, Severity.ERROR, where + _TWICE)])
            first.setdefault(buffer, number)
            previous = buffer
        else:
            previous = None
            if field is None:
                continue
            later = later or number
        fields = sizes.setdefault(buffer, {})
        if field not in fields:
            fields[field] = mib
        elif field == "compute":
            fields[field] = max(fields[field], mib)
        else:
            fields[field] += mib
    if not sizes:
        raise InvalidInput([Diagnostic(name, 0, 0, Severity.ERROR, _NOTHING.format(log=name))])
    return {
        buf: {f: f"{sizes[buf][f]:f}MiB" for f in FIELDS if f in sizes[buf]}
        for buf in sorted(sizes)
    }


@dataclass(frozen=True)
class Calibrated:
    service: str
    entries: Entries  # what was written, by buffer


def calibrate(log: Path, spec: Path, service: str | None) -> Calibrated:
    """Read ``log``, write its sizes into ``spec`` (atomically); raise on any user error."""
    entries = read_log(_read(log, str(log)).decode("utf-8", errors="replace"), str(log))
    raw = _read(spec, str(spec))
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInput(
            [Diagnostic(str(spec), 0, 0, Severity.ERROR, f"not UTF-8 text ({exc.reason})")]
        ) from None
    new_text, chosen = edit_spec(text, str(spec), service, entries)
    target = Path(os.path.realpath(spec))  # a link keeps pointing at the updated file
    try:
        _write(target, new_text)
    except OSError as exc:
        raise LayoutgenError(f"cannot write {spec}: {exc.strerror}") from None
    return Calibrated(chosen, entries)


def edit_spec(text: str, name: str, service: str | None, entries: Entries) -> tuple[str, str]:
    """The spec's text with ``entries`` in the service's ``measured`` block, and the service."""
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
    layout = _Layout(lines, cr, indent, max(indent - svc_key.start_mark.column, 1))
    old = data["services"][chosen].get("measured")
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


def _read(path: Path, name: str) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        message = "no such file"
    except IsADirectoryError:
        message = "is a directory, not a file"
    except OSError as exc:
        message = f"cannot read: {exc.strerror}"
    raise InvalidInput([Diagnostic(name, 0, 0, Severity.ERROR, message)])


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
