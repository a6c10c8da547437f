"""Writing measured sizes into a spec's text: ``services.<name>.measured``, nothing else.

Why in the text: a spec is written by hand, with comments and a layout its
author chose; calibrate must change the lines of one block and leave every
other byte as it was.

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
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from layoutgen.calibrate.startlog import Entries, shown
from layoutgen.errors import InvalidInput, LayoutgenError, Problem
from layoutgen.inputs import source


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
    chosen = choose_service(doc, service)
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
                comment = f"{lead}# from {shown(self.log)}{replaced}"
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


def choose_service(doc: source.Document, service: str | None) -> str:
    """The service the log is from: ``service``, or the spec's only one; else a located error."""
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
    from layoutgen.spec.sizes import SizeError, parse_size

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
    return " (was " + ", ".join(shown(c) for c in changed) + ")"


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


def write_spec(path: Path, text: str) -> None:
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
