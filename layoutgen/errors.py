"""User-facing errors and diagnostics.

Why one base class: the CLI turns every ``LayoutgenError`` into a message and
an exit code, and lets anything else keep its traceback, because anything
else is a bug in layoutgen rather than a mistake in the user's input.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

#: A path into a YAML document: mapping keys and sequence indexes, outermost first.
SpecPath = tuple[str | int, ...]


class Severity(StrEnum):
    ERROR = "error"
    WARNING = "warning"


@dataclass(frozen=True, order=True)
class Diagnostic:
    """One problem found in one file.

    ``line`` and ``col`` are 1-based; 0 means "the file as a whole" (for
    example a file that could not be read at all).
    """

    file: str
    line: int
    col: int
    severity: Severity
    message: str

    def gcc(self) -> str:
        where = f"{self.file}:{self.line}:{self.col}" if self.line else self.file
        return f"{printable(where)}: {self.severity.value}: {printable(self.message)}"

    def github(self) -> str:
        kind = "error" if self.severity is Severity.ERROR else "warning"
        # GitHub workflow commands need %, CR and LF escaped in the message.
        msg = printable(self.message).replace("%", "%25")
        loc = f"file={printable(self.file)}"
        if self.line:
            loc += f",line={self.line},col={self.col}"
        return f"::{kind} {loc}::{msg}"


def printable(text: str) -> str:
    """``text`` on one line, with no terminal control sequences.

    A message may quote a value from the input (a key ending in a newline,
    an escape sequence); printed raw it would split the line that tools read
    as one diagnostic, or drive the terminal.  Control characters are written
    as Python escapes instead (``\\n``, ``\\x1b``).
    """
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() or ch == " " else repr(ch)[1:-1] for ch in text)


@dataclass(frozen=True)
class Problem:
    """A problem located by a spec path, before it is resolved to line:col."""

    path: SpecPath
    message: str
    severity: Severity = Severity.ERROR
    #: Point at the key itself rather than at its value (unknown keys, duplicates).
    at_key: bool = False


class LayoutgenError(Exception):
    """Base of every error caused by the user's input or environment.

    The core raises these; only the CLI prints them.  Each message says what
    is wrong and what to write instead.
    """


class InvalidInput(LayoutgenError):
    """One or more located diagnostics make an input file unusable."""

    def __init__(self, diagnostics: list[Diagnostic]) -> None:
        self.diagnostics = sorted(diagnostics)
        super().__init__("\n".join(d.gcc() for d in self.diagnostics))
