"""Quoting, one function per target format: POSIX shell and systemd command lines.

Templates never quote: every argument reaches them already quoted for the
file it goes into (STYLE: one serializer does all quoting).  ``-ot`` regexes
are full of backslashes, and the two formats disagree about them:

- POSIX sh: single quotes keep everything literal; a single quote itself is
  written ``'\\''``.
- systemd ``ExecStart=`` (and quadlet ``Exec=``, which quadlet splits with
  the same rules before writing ExecStart): C-style escapes are interpreted
  inside and outside quotes, so every backslash is doubled (a lone ``\\.``
  is an invalid escape: systemd drops the line, and podman 5.4's quadlet
  silently drops the whole argument list); ``%`` starts a specifier and is
  written ``%%``; ``$`` starts a variable and is written ``$$``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# Used with fullmatch: "$" alone would let "x\n" pass as safe to leave unquoted.
_SH_SAFE = re.compile(r"[A-Za-z0-9_@%+=:,./-]+")
_SYSTEMD_SAFE = re.compile(r"[A-Za-z0-9_@+=:,./-]+")


def shell(arg: str) -> str:
    """One argument for a POSIX shell script."""
    if _SH_SAFE.fullmatch(arg):
        return arg
    return "'" + arg.replace("'", "'\\''") + "'"


def shell_line(argv: Iterable[str]) -> str:
    return " ".join(shell(a) for a in argv)


def systemd(arg: str) -> str:
    """One argument for a systemd command line (``ExecStart=``, quadlet ``Exec=``)."""
    escaped = arg.replace("%", "%%").replace("$", "$$")
    if _SYSTEMD_SAFE.fullmatch(arg):
        return escaped
    out = []
    for ch in escaped:
        if ch == "\\":
            out.append("\\\\")
        elif ch == '"':
            out.append('\\"')
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def systemd_line(argv: Iterable[str]) -> str:
    return " ".join(systemd(a) for a in argv)


def unit_value(value: str) -> str:
    """A unit-file value that is not a command line, checked to be read back as written.

    Such values (``Image=``, ``Volume=``, ``Description=`` ...) have no quoting:
    a newline ends them, a trailing backslash continues them onto the next
    line, leading and trailing blanks are dropped, and systemd expands ``%``
    specifiers (quadlet passes ``$`` on to ``ExecStart``, where systemd expands
    it too).  The spec's validation keeps such characters out of every value
    that lands here; this is the renderer's own guard, so that a gap there is
    a crash (a bug, reported) and never a unit that says something else.
    """
    if (
        value != value.strip()
        or value.endswith("\\")
        or any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in value)
        or "%" in value.replace("%%", "")
        or "$" in value.replace("$$", "")
    ):
        raise ValueError(f"unit value {value!r} would not be read back as written")
    return value
