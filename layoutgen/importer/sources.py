"""What ``layoutgen import`` reads: a file of text, stdin, a ``podman inspect`` record,
a process id, a container name, or a script run with recorders (``--shell``).

Each becomes command-line text and the label its messages carry; text that
came from something running (not written by the user) says so, and the YAML
header shows the line, since message columns count in it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from layoutgen.errors import Diagnostic, Severity
from layoutgen.importer import running, shellrun
from layoutgen.importer.cmdline import UnreadableCommand

#: the most of a pasted command line, unit file or inspect record import reads
MAX_BYTES = 1 << 20


@dataclass(frozen=True)
class Input:
    text: str
    label: str
    #: how the text was made, when it was not written by the user (for the YAML header)
    made: str | None = None


def _fail(label: str, message: str) -> UnreadableCommand:
    return UnreadableCommand([Diagnostic(label, 0, 0, Severity.ERROR, message)])


def _decode(raw: bytes, label: str) -> str:
    if len(raw) > MAX_BYTES:
        raise _fail(label, f"more than {MAX_BYTES} bytes; not a command line")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _fail(label, f"not UTF-8 (byte {exc.start})") from None


def _inspected(text: str, label: str, what: str) -> Input:
    line = running.inspect_text(text, label)
    return Input(line, f"{label} (podman inspect)", f"{what}, as the podman run line it amounts to")


def read_log(path: str) -> str:
    """A start-up log's text (its first megabyte: the build line is near the top)."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_BYTES)
    except OSError as exc:
        raise _fail(path, f"cannot read: {exc.strerror}") from None
    return raw.decode("utf-8", "replace")


def read(source: str | None, *, shell: Path | None = None, stdin: BinaryIO | None = None) -> Input:
    """The command text ``source`` names (see the module docstring)."""
    if shell is not None:
        if source is not None:
            raise _fail(str(shell), "give either --shell FILE or a SOURCE, not both")
        label = f"{shell} (as run)"
        text = shellrun.shell_text(shell, label)
        return Input(text, label, f"{shell}, run with recorders: what it would have started")
    if source is None:
        raise _fail("import", "nothing to import: give a FILE, -, a PID, a container or --shell")
    if source == "-":
        raw = stdin.read(MAX_BYTES + 1) if stdin is not None else b""
        text = _decode(raw, "<stdin>")
        if text.lstrip().startswith(("[", "{")):
            return _inspected(text, "<stdin>", "podman inspect from stdin")
        return Input(text, "<stdin>")
    path = Path(source)
    if path.is_file() or path.exists():
        try:
            with open(path, "rb") as fh:
                raw = fh.read(MAX_BYTES + 1)
        except OSError as exc:
            raise _fail(source, f"cannot read: {exc.strerror}") from None
        text = _decode(raw, source)
        if text.lstrip().startswith(("[", "{")):
            return _inspected(text, source, f"podman inspect record {source}")
        return Input(text, source)
    if re.fullmatch(r"\d{1,9}", source):
        label = f"pid {source}"
        made = f"process {source}'s command line"
        if running.in_container(int(source)):
            made += (
                " (it runs in a container: its paths are the container's; import the "
                "container by name to read them through its volumes)"
            )
        return Input(running.process_text(int(source)), label, made)
    if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,252}", source):
        line = running.container_text(source)
        return Input(line, f"{source} (podman inspect)", f"container {source}, as run")
    raise _fail(source, "cannot read: no such file, process id or container name")
