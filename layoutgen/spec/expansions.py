"""Passthrough ``args`` that a shell or systemd would have expanded.

Why refuse them: layoutgen hands each ``args`` item to the server as one
argument, quoted so that no shell and no systemd expands it (``$`` is written
``$$`` and ``%`` is written ``%%`` in units).  An item that still reads
``$OT_ARGS``, ``${N}``, ``$(nproc)``, a backtick or a systemd specifier such
as ``%h`` was copied from a script or unit where something expanded it: the
server would receive the text itself (seed 001's configuration 5 built 66
``-ot`` flags in ``$OT_ARGS``; passed through, the server gets one argument
``$OT_ARGS`` and the plan puts every expert layer in host RAM).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from layoutgen.errors import Problem
from layoutgen.inputs.literals import clip
from layoutgen.spec.schema import Spec

#: how to bring what really runs, for messages here and in ``layoutgen import``
WHAT_RUNS = (
    "a running container (layoutgen import CONTAINER, or the JSON 'podman inspect "
    "CONTAINER' prints), a running process (layoutgen import PID), or the script itself "
    "(layoutgen import --shell FILE: the script runs with podman, docker, llama-server and "
    "vllm replaced by recorders, so nothing starts)"
)

#: what sh expands in a word: $NAME, ${...}, $(...), $((...)), positional and special
#: parameters ($1, $@, ...), and backticks
_SHELL = re.compile(r"\$(?:[A-Za-z_][A-Za-z0-9_]*|\{[^}]*\}?|\(\(?|[0-9@*#?$!-])|`")
#: systemd specifiers (%n, %h, %i, ...); '%%' is a literal percent sign
_SPECIFIER = re.compile(r"%%|%[A-Za-z]")


def shell_expansion(text: str) -> str | None:
    """The first expansion a shell would make in ``text`` (``$OT_ARGS``, ``$(``, a backtick)."""
    m = _SHELL.search(text)
    if m is None:
        return None
    found = m.group()
    if found.startswith("$(") or found == "`":
        end = text.find(")" if found.startswith("$(") else "`", m.end())
        return text[m.start() : end + 1] if end >= 0 else text[m.start() :]
    return found


def specifier(text: str) -> str | None:
    """The first systemd specifier in ``text`` (``%h``), skipping ``%%``."""
    return next((m.group() for m in _SPECIFIER.finditer(text) if m.group() != "%%"), None)


def describe(expansion: str) -> str:
    """How a message names an expansion: ``variable '$OT_ARGS'``, ``command substitution ...``."""
    if expansion.startswith("$((") or expansion.startswith("$[("):
        return f"arithmetic expansion {clip(expansion)}"
    if expansion.startswith("$(") or expansion.startswith("`"):
        return f"command substitution {clip(expansion)}"
    return f"variable {clip(expansion)}"


def check(spec: Spec) -> Iterator[Problem]:
    """Each ``args`` item holding a shell expansion or a systemd specifier, located."""
    for name in sorted(spec.services):
        for i, arg in enumerate(spec.services[name].args):
            path = ("services", name, "args", i)
            found = shell_expansion(arg)
            if found is not None:
                yield Problem(
                    path,
                    f"services.{name}.args[{i}]: {clip(arg)} holds the shell {describe(found)}; "
                    "layoutgen passes every args item to the server as written, so it would "
                    f"receive {clip(found)} itself: write the arguments it stands for "
                    "(tensor placement goes in tensor_overrides:), or import what really "
                    f"runs: {WHAT_RUNS}",
                )
                continue
            spec_ = specifier(arg)
            if spec_ is not None:
                yield Problem(
                    path,
                    f"services.{name}.args[{i}]: {clip(arg)} holds the systemd specifier "
                    f"{spec_}; layoutgen writes args so that systemd expands nothing, so the "
                    f"server would receive {spec_} itself: write the value it stands for",
                )
