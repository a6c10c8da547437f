"""Runtimes: everything one runtime decides, as dated rules chosen by version.

One package or module per runtime (``llama_cpp``, ``ik_llama_cpp``, ``vllm``),
each a :class:`~layoutgen.core.runtime.Runtime`; :func:`get` returns the one a
spec's ``runtimes.<id>`` names, at its ``version``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from layoutgen.core.runtime import Runtime


def get(
    kind: str, version: str | None = None, sched_copies: int = 4, blas: bool = False
) -> Runtime:
    """The runtime ``kind`` at ``version`` (None: the newest rules); raises
    VersionError for a version that names no build, KeyError for an unknown kind."""
    cls: type[Runtime]
    if kind == "vllm":  # imported only for specs that use it (~9 ms of every validate)
        from layoutgen.runtimes.vllm import Vllm

        cls = Vllm
    else:
        from layoutgen.runtimes.ik_llama_cpp import IkLlamaCpp
        from layoutgen.runtimes.llama_cpp import LlamaCpp

        cls = {c.KIND: c for c in (LlamaCpp, IkLlamaCpp)}[kind]
    return cls(None if version is None else cls.parse_version(version), sched_copies, blas)
