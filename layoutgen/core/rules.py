"""Runtime versions and the dated rules they select.

Runtimes change how they place tensors and size buffers from one build to
the next (ik_llama.cpp split layers by count until build 4327, by size
since).  Each change is a :class:`Rule`: the first build that has it, the
date it was merged, and where that is recorded.  A spec names the build its
image or binary runs (``runtimes.<id>.version``); a runtime follows every
rule whose build is at or below it, and every rule when no version is given.

Versions are written as the runtime prints them: llama.cpp ``b6123`` (its
release tags) or the bare build number ``6123`` (``--version``: "version:
6123 (a1b2c3d)"); ik_llama.cpp its build number (``--version``: "version:
4327 (0871ab29)", the commit count of its tree).  A commit date
(``2026-03-20``) is accepted too, for builds that print none; a rule knows
both its build and its date, so either selects it.
"""

from __future__ import annotations

import collections
import contextlib
import datetime
import functools
import re
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass
from typing import Generic, ParamSpec, TypeVar

from layoutgen.errors import printable
from layoutgen.inputs.literals import clip

P = ParamSpec("P")
T = TypeVar("T")

_BUILD = re.compile(r"b?(?P<build>[0-9]{1,7})(?:\s*\((?P<commit>[0-9a-f]{7,40})\))?")
_DATE = re.compile(r"(?P<y>20[0-9]{2})-(?P<m>[0-9]{2})-(?P<d>[0-9]{2})")


class VersionError(ValueError):
    """A version string that names no build."""


@dataclass(frozen=True)
class Version:
    """A runtime build, by number, by commit date, or both."""

    text: str
    build: int | None = None
    date: datetime.date | None = None

    def __str__(self) -> str:
        return self.text


def parse_version(text: str) -> Version:
    """``b6123``, ``6123``, ``6123 (a1b2c3d)`` or ``2026-03-20``; raises VersionError."""
    value = text  # as written: no stripping, so what is checked is what is carried
    m = _BUILD.fullmatch(value)
    if m:
        return Version(text=value, build=int(m.group("build")))
    m = _DATE.fullmatch(value)
    if m:
        try:
            day = datetime.date(int(m.group("y")), int(m.group("m")), int(m.group("d")))
        except ValueError:
            raise VersionError(f"{value!r} is not a date") from None
        return Version(text=value, date=day)
    raise VersionError(
        f"{printable(clip(value))} names no build: write the build number the runtime's --version "
        "prints (e.g. b6123 or 4327), or the build's commit date (e.g. 2026-03-20)"
    )


@dataclass(frozen=True)
class Rule:
    """One behaviour a runtime has had since a build, with where that is recorded."""

    name: str
    since_build: int
    since: datetime.date
    source: str
    summary: str

    def applies(self, version: Version | None) -> bool:
        """Whether a runtime of ``version`` behaves this way (no version: the newest does)."""
        ASKED.add(self)
        if not _FLAGS_ONLY:
            FOR_MEMORY.add(self)
        for trace in _TRACES:
            trace.add(self)
        return self.answer(version)

    def answer(self, version: Version | None) -> bool:
        """``applies``, unrecorded: for a cache checking answers it already holds."""
        if version is None:
            return True
        if version.build is not None:
            return version.build >= self.since_build
        assert version.date is not None
        return version.date >= self.since


#: every rule asked in this process: where a plan's answers can change from one build
#: to the next (:mod:`layoutgen.solve.builds`).  A superset of what one plan asked
#: (cached answers were asked by whoever filled the cache), which costs solves at
#: builds that answer alike, never a build left out.
ASKED: set[Rule] = set()
#: the rules among them asked for anything but the flags an argv spells (placement,
#: buffers): builds that answer these alike plan the same memory
FOR_MEMORY: set[Rule] = set()
#: set while an argv is rendered (flags_only): what is asked then is about spelling
_FLAGS_ONLY: list[bool] = []


#: the rules asked inside each open tracing() block, innermost last
_TRACES: list[set[Rule]] = []


@contextlib.contextmanager
def tracing() -> Iterator[set[Rule]]:
    """The rules asked inside the block (cached answers included: remembering)."""
    asked: set[Rule] = set()
    _TRACES.append(asked)
    try:
        yield asked
    finally:
        _TRACES.pop()


def remembering(maxsize: int) -> Callable[[Callable[P, T]], Callable[P, T]]:
    """functools.lru_cache for a function of a runtime: a hit tells every open
    tracing() block the rules the cached call asked, so a trace is whole whatever
    was cached before it (what layoutgen.solve.builds reuses plans by)."""

    def wrap(fn: Callable[P, T]) -> Callable[P, T]:
        @functools.lru_cache(maxsize=maxsize)
        def traced(
            args: tuple[Hashable, ...], kwargs: tuple[tuple[str, Hashable], ...]
        ) -> tuple[T, frozenset[Rule]]:
            with tracing() as asked:
                value = fn(*args, **dict(kwargs))  # type: ignore[arg-type]
            return value, frozenset(asked)

        @functools.wraps(fn)
        def call(*args: P.args, **kwargs: P.kwargs) -> T:
            value, asked = traced(args, tuple(sorted(kwargs.items())))
            for trace in _TRACES:
                trace.update(asked)
            return value

        call.cache_clear = traced.cache_clear  # type: ignore[attr-defined]
        return call

    return wrap


class Replayed(Generic[T]):
    """Values computed under some build, reused at another whose answers to every
    rule the computation asked are the same (the LRU-bounded KEY holds the inputs
    apart from the build); a reuse tells open tracing() blocks what was asked, as
    ``remembering`` does."""

    def __init__(self, maxsize: int) -> None:
        self._maxsize = maxsize
        self._entries: collections.OrderedDict[
            Hashable, list[tuple[tuple[tuple[Rule, bool], ...], T]]
        ] = collections.OrderedDict()

    def get(self, key: Hashable, version: Version | None, compute: Callable[[], T]) -> T:
        known = self._entries.get(key)
        if known is not None:
            self._entries.move_to_end(key)
            for answers, value in known:
                if all(r.answer(version) == a for r, a in answers):
                    for r, _ in answers:
                        r.applies(version)  # the trace of whoever asks is whole
                    return value
        with tracing() as asked:
            value = compute()
        answers = tuple((r, r.answer(version)) for r in sorted(asked, key=lambda r: r.name))
        self._entries.setdefault(key, []).append((answers, value))
        while len(self._entries) > self._maxsize:
            self._entries.popitem(last=False)
        return value


@contextlib.contextmanager
def flags_only() -> Iterator[None]:
    """Rules asked inside are about how flags are spelled, not about memory."""
    _FLAGS_ONLY.append(True)
    try:
        yield
    finally:
        _FLAGS_ONLY.pop()


def rule(name: str, build: int, date: str, source: str, summary: str) -> Rule:
    return Rule(name, build, datetime.date.fromisoformat(date), source, summary)
