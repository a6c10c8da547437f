"""Bounds on YAML input, checked before anything is built from it.

Why: a spec arrives through review, and a few bytes of YAML can ask for
gigabytes (an alias bomb), recurse forever (``&a [*a]``), nest deep enough to
crash a recursive parser, or carry tags and numbers that make a constructor
raise.  So the file's size is checked before it is read, and every event of
the parser (nesting, what aliases copy, tags, directives, numbers) before the
document is composed; every refusal is a located diagnostic saying what to
write instead.

Invariant: a refusal happens before anything is built.  :mod:`layoutgen.inputs.source`
builds a node graph and data only from a text that passed every check here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from layoutgen.errors import Diagnostic, InvalidInput, Severity

#: A spec is written by hand: the biggest example (layouts/) is 6 KB, so 1 MiB
#: leaves a margin of 170x while keeping a hostile spec's parse well under a second.
MAX_SPEC_BYTES = 1 << 20
#: A model profile lists every tensor: the biggest (GLM-5.1, 1809 tensors) is
#: 7 KB folded as ``layoutgen inspect`` writes it and 165 KB unfolded, so 4 MiB
#: leaves a margin of 25x even for a hand-written unfolded profile.
MAX_PROFILE_BYTES = 4 << 20
#: Specs nest about 6 levels (services.NAME.experts.layers.GPU[...]), profiles 4.
#: Parsers, constructors and validators recurse (and libyaml slows down
#: quadratically with depth), so deeper documents are refused before they are built.
MAX_DEPTH = 64
#: Values (scalars, lists, mappings) written in one document: the biggest spec
#: holds 163, GLM-5.1's profile 521 folded and 19,782 unfolded.  ruamel builds
#: about 80,000 a second, so this keeps the worst file near a second.
MAX_NODES = 100_000
#: Nodes that aliases may copy, in total.  Sharing one block between 40 services
#: copies a few hundred; a "billion laughs" asks for 10^9 and is refused here.
MAX_ALIAS_NODES = 10_000
#: Integers beyond 64 bits mean nothing to any size or count, and Python refuses
#: to even print one of more than 4300 digits.
MAX_INT = 2**63 - 1

_YAML = "tag:yaml.org,2002:"
#: Explicit tags that only restate a type YAML already has; anything else
#: (!!set, !!omap, !!binary, !!timestamp, !!python/..., local !tags) is refused.
_SCALAR_TAGS = {f"{_YAML}{t}" for t in ("str", "int", "float", "bool", "null")}
_COLLECTION_TAGS = {"seq": f"{_YAML}seq", "map": f"{_YAML}map"}
_COMPLEX_KEY = "a list or mapping used as a key; keys are names and numbers: write a plain key"
_TOO_MANY = (
    f"more than {MAX_NODES} values in one file (a spec holds hundreds, an unfolded profile "
    "tens of thousands); check that this is the file you meant"
)
ONLY_YAML_12 = (
    "layoutgen reads YAML 1.2 (1.1 would read yes/no/on/off as booleans and 0755 as octal); "
    "remove the %YAML line"
)
_PROFILE_HINT = re.compile(r"^tensors[ \t]*:", re.MULTILINE)
_SPEC_HINT = re.compile(r"^services[ \t]*:", re.MULTILINE)


def check_size(size: int, text: str | None, name: str) -> None:
    """Refuse a file over the profile limit, or over the spec limit unless it is a profile.

    A file above the spec limit is read only if its text has a top-level
    ``tensors:`` key and no ``services:`` (what makes it a profile).
    """
    limit = MAX_PROFILE_BYTES
    if text is not None and size > MAX_SPEC_BYTES:
        is_profile = _PROFILE_HINT.search(text) and not _SPEC_HINT.search(text)
        limit = MAX_PROFILE_BYTES if is_profile else MAX_SPEC_BYTES
    if size > limit:
        raise InvalidInput(
            [
                Diagnostic(
                    name,
                    0,
                    0,
                    Severity.ERROR,
                    f"file of {size} bytes is too large: a spec may hold at most "
                    f"{MAX_SPEC_BYTES >> 20} MiB and a model profile {MAX_PROFILE_BYTES >> 20} "
                    "MiB; check that this is the file you meant",
                )
            ]
        )


class _Refused(Exception):
    def __init__(self, mark: Any, message: str) -> None:
        super().__init__(message)
        self.mark = mark
        self.message = message


class Bounds:
    """Checks a YAML event stream before anything is built from it.

    One pass, no recursion: nesting depth, what aliases copy (each anchor's
    expanded size is known when it closes; an alias to an anchor still open is
    a cycle), duplicate anchors, tags, directives, and numbers a constructor
    cannot build.  Scanning stops at the first refusal, so a document nested a
    million levels deep costs no more than one nested ``MAX_DEPTH`` deep.
    """

    def __init__(self, name: str) -> None:
        from ruamel.yaml.resolver import VersionedResolver

        self.name = name
        self.resolver = VersionedResolver(version=(1, 2))

    def check(self, events: Iterable[Any]) -> None:
        try:
            self._walk(events)
        except _Refused as exc:
            mark = exc.mark
            line, col = (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
            raise InvalidInput(
                [Diagnostic(self.name, line, col, Severity.ERROR, exc.message)]
            ) from None

    def _walk(self, events: Iterable[Any]) -> None:
        from ruamel.yaml.events import (
            AliasEvent,
            DocumentStartEvent,
            MappingEndEvent,
            MappingStartEvent,
            ScalarEvent,
            SequenceEndEvent,
            SequenceStartEvent,
        )

        starts = (MappingStartEvent, SequenceStartEvent)
        # Per open collection: [anchor, nodes it holds once aliases are expanded,
        # entries so far (keys and values) for a mapping, -1 for a list].
        stack: list[list[Any]] = []
        sizes: dict[str, int | None] = {}  # anchor -> expanded size; None while open
        where: dict[str, Any] = {}  # anchor -> mark of its definition
        collections: set[str] = set()  # anchors of lists and mappings
        copied = nodes = 0
        for event in events:
            kind = event.__class__
            if kind is ScalarEvent or kind is AliasEvent or kind in starts:
                nodes += 1
                if nodes > MAX_NODES:
                    raise _Refused(event.start_mark, _TOO_MANY)
            if kind is ScalarEvent:
                if event.tag is not None:
                    self._tagged_scalar(event)
                elif event.implicit[0] and (
                    len(event.value) > 17 or (event.value[4:5] == "-" and event.value[:1].isdigit())
                ):
                    self._plain_scalar(event)  # a long number, or a date
                if event.anchor is not None:
                    self._anchor(event, sizes, where)
                    sizes[event.anchor] = 1
                if stack:
                    top = stack[-1]
                    top[1] += 1
                    if top[2] >= 0:
                        top[2] += 1
            elif kind is MappingStartEvent or kind is SequenceStartEvent:
                if len(stack) >= MAX_DEPTH:
                    raise _Refused(
                        event.start_mark,
                        f"nested more than {MAX_DEPTH} levels deep; a spec or profile needs "
                        "fewer than 10: write this value flat",
                    )
                if stack:
                    top = stack[-1]
                    if top[2] >= 0:
                        if top[2] % 2 == 0:
                            raise _Refused(event.start_mark, _COMPLEX_KEY)
                        top[2] += 1
                if event.tag is not None:
                    self._collection_tag(event, "map" if kind is MappingStartEvent else "seq")
                if event.anchor is not None:
                    self._anchor(event, sizes, where)
                    sizes[event.anchor] = None
                    collections.add(event.anchor)
                stack.append([event.anchor, 1, 0 if kind is MappingStartEvent else -1])
            elif kind is MappingEndEvent or kind is SequenceEndEvent:
                anchor, size, _ = stack.pop()
                if anchor is not None:
                    sizes[anchor] = size
                if stack:
                    stack[-1][1] += size
            elif kind is AliasEvent:
                size = sizes.get(event.anchor, 1)  # an undefined alias: the composer says so
                if size is None:
                    raise _Refused(
                        event.start_mark,
                        f"alias *{short(event.anchor)} refers to the value that contains it "
                        "(a recursive structure); write the value out instead",
                    )
                copied += size
                if copied > MAX_ALIAS_NODES:
                    raise _Refused(
                        event.start_mark,
                        f"aliases here copy more than {MAX_ALIAS_NODES} values in all (an alias "
                        "bomb?); write the shared values out, or share fewer",
                    )
                if stack:
                    top = stack[-1]
                    top[1] += size
                    if top[2] >= 0:
                        if top[2] % 2 == 0 and event.anchor in collections:
                            raise _Refused(event.start_mark, _COMPLEX_KEY)
                        top[2] += 1
            elif kind is DocumentStartEvent:
                self._directives(event)

    def _anchor(self, event: Any, sizes: dict[str, Any], where: dict[str, Any]) -> None:
        anchor = event.anchor
        if anchor in sizes:
            first = where[anchor]
            raise _Refused(
                event.start_mark,
                f"anchor &{short(anchor)} is defined twice (first at line {first.line + 1}, "
                f"column {first.column + 1}); give each anchor its own name",
            )
        where[anchor] = event.start_mark

    def _directives(self, event: Any) -> None:
        version = getattr(event, "version", None)
        if version is not None and tuple(version) != (1, 2):
            shown = ".".join(str(v) for v in version)
            raise _Refused(event.start_mark, f"'%YAML {shown}': {ONLY_YAML_12}")
        tags = getattr(event, "tags", None)
        if tags:
            handle = short(next(iter(tags)))
            raise _Refused(
                event.start_mark,
                f"'%TAG {handle}': layoutgen reads no custom tags; remove the %TAG line",
            )

    def _collection_tag(self, event: Any, kind: str) -> None:
        if event.tag != _COLLECTION_TAGS[kind]:
            what = "mapping" if kind == "map" else "list"
            raise _Refused(
                event.start_mark,
                f"tag {_tag(event.tag)} on a {what} is not supported: layoutgen reads plain "
                "mappings, lists, strings, numbers and booleans; remove the tag",
            )

    def _tagged_scalar(self, event: Any) -> None:
        from ruamel.yaml.nodes import ScalarNode

        tag = event.tag
        if tag not in _SCALAR_TAGS:
            raise _Refused(
                event.start_mark,
                f"tag {_tag(tag)} is not supported: layoutgen reads plain mappings, lists, "
                "strings, numbers and booleans; remove the tag (quote a value meant as text)",
            )
        if tag == f"{_YAML}str":
            return
        value = event.value
        implied = str(self.resolver.resolve(ScalarNode, value, (True, False)))
        fits = implied == tag or (tag == f"{_YAML}float" and implied == f"{_YAML}int")
        if not fits:
            kind = {"int": "a whole number", "float": "a number", "bool": "true or false"}
            meant = kind.get(tag.removeprefix(_YAML), "null")
            raise _Refused(
                event.start_mark,
                f"{_tag(tag)} {short(value)!r}: the tag needs {meant}; remove the tag and "
                "write the value plainly",
            )
        self._number(event, implied)

    def _plain_scalar(self, event: Any) -> None:
        from ruamel.yaml.nodes import ScalarNode

        implied = str(self.resolver.resolve(ScalarNode, event.value, (True, False)))
        if implied == f"{_YAML}timestamp":
            from ruamel.yaml.constructor import SafeConstructor

            try:
                SafeConstructor().construct_yaml_timestamp(ScalarNode(implied, event.value))
            except ValueError as exc:
                raise _Refused(
                    event.start_mark,
                    f"{short(event.value)!r} reads as a date but is not one ({exc}); "
                    "quote it if it is text",
                ) from None
        self._number(event, implied)

    def _number(self, event: Any, implied: str) -> None:
        if implied != f"{_YAML}int" or len(event.value) <= 17:  # below 10^17: in range
            return
        digits = event.value.replace("_", "").lstrip("+-")
        base = {"0x": 16, "0o": 8, "0b": 2}.get(digits[:2], 10)
        digits = (digits[2:] if base != 10 else digits).lstrip("0") or "0"
        try:
            beyond = len(digits) > 64 or int(digits, base) > MAX_INT
        except ValueError:  # pragma: no cover - the resolver read it as an integer
            return  # the constructor says what is wrong with it
        if beyond:
            raise _Refused(
                event.start_mark,
                f"the number {short(event.value)} is beyond 64 bits, more than any size or "
                "count can be; write the real value",
            )


def _tag(tag: str) -> str:
    return "!!" + tag.removeprefix(_YAML) if tag.startswith(_YAML) else short(tag)


def short(text: str, limit: int = 40) -> str:
    """A value for a message: one line, at most ``limit`` characters."""
    text = text.replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 3] + "..."
