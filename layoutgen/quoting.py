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

_SH_SAFE = re.compile(r"^[A-Za-z0-9_@%+=:,./-]+$")
_SYSTEMD_SAFE = re.compile(r"^[A-Za-z0-9_@+=:,./-]+$")


def shell(arg: str) -> str:
    """One argument for a POSIX shell script."""
    if arg and _SH_SAFE.match(arg):
        return arg
    return "'" + arg.replace("'", "'\\''") + "'"


def shell_line(argv: Iterable[str]) -> str:
    return " ".join(shell(a) for a in argv)


def systemd(arg: str) -> str:
    """One argument for a systemd command line (``ExecStart=``, quadlet ``Exec=``)."""
    escaped = arg.replace("%", "%%").replace("$", "$$")
    if arg and _SYSTEMD_SAFE.match(arg):
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
