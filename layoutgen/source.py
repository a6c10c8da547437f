"""Reading YAML with positions, and turning spec paths into ``file:line:col``.

This is the one YAML reader, for specs and profiles alike, and the one place
that knows about positions.  Later stages get plain Python data from
:meth:`Document.plain` and report problems by *spec path*, which
:meth:`Document.locate` maps back to a position.

Why the reader is bounded: a spec arrives through review, and a few bytes of
YAML can ask for gigabytes (an alias bomb), recurse forever (``&a [*a]``),
nest deep enough to crash a recursive parser, or carry tags and numbers that
make a constructor raise.  Every event is therefore checked (size, nesting,
what aliases copy, tags, directives, numbers) *before* anything is built, and
every refusal is a located diagnostic saying what to write instead.
"""

from __future__ import annotations

import functools
import re
import stat
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from layoutgen.errors import Diagnostic, InvalidInput, Problem, Severity, SpecPath

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
_ONLY_12 = (
    "layoutgen reads YAML 1.2 (1.1 would read yes/no/on/off as booleans and 0755 as octal); "
    "remove the %YAML line"
)
_YAML_DIRECTIVE = re.compile(r"^%YAML[ \t]+(\S+)", re.MULTILINE)
#: Line breaks to libyaml but not to ruamel's reader, nor to most editors (the
#: same error would be reported on different lines), and lone surrogates.
_ODD_BREAK = re.compile("[\x85\u2028\u2029\ud800-\udfff]")
_PROFILE_HINT = re.compile(r"^tensors[ \t]*:", re.MULTILINE)
_SPEC_HINT = re.compile(r"^services[ \t]*:", re.MULTILINE)


class Document:
    """A loaded YAML file: its display name, text, plain data and node graph.

    The node graph is what the data was built from (aliases shared, merge
    keys flattened); it knows the line and column of every key and value, so
    locating a problem costs a walk down one path, not another parse.
    """

    def __init__(
        self, name: str, path: Path, text: str, data: Any, root: Any = None, loader: Any = None
    ) -> None:
        self.name = name
        self.path = path
        self.text = text
        self._data = data
        self._root = root
        self._loader = loader  # builds mapping keys (an int key, a quoted one) for lookups
        self._keys: dict[int, dict[Any, tuple[Any, Any]]] = {}

    def plain(self) -> Any:
        return self._data

    def locate(self, path: SpecPath, *, at_key: bool = False) -> tuple[int, int]:
        """1-based (line, col) of the value (or key) at ``path``.

        Components that do not exist in the document (a missing key, a union
        tag from pydantic) stop the walk: the deepest existing node is used,
        so a missing key is reported at the mapping that lacks it.
        """
        node = self._root
        pos: tuple[int, int] = (0, 0)
        parent_key_pos: tuple[int, int] | None = None
        for i, part in enumerate(path):
            found = self._child(node, part)
            if found is None:
                if parent_key_pos is not None:
                    pos = parent_key_pos
                continue
            key, value = found
            pos = _pos(key if at_key and i == len(path) - 1 and key is not None else value)
            parent_key_pos = _pos(key) if key is not None else pos
            node = value
        return pos[0] + 1, pos[1] + 1

    def diagnostic(self, problem: Problem) -> Diagnostic:
        line, col = self.locate(problem.path, at_key=problem.at_key)
        return Diagnostic(self.name, line, col, problem.severity, problem.message)

    def _child(self, node: Any, part: str | int) -> tuple[Any, Any] | None:
        """(key node or None, value node) of ``part`` in a collection node."""
        from ruamel.yaml.nodes import MappingNode, SequenceNode

        if isinstance(node, SequenceNode):
            ok = isinstance(part, int) and 0 <= part < len(node.value)
            return (None, node.value[part]) if ok else None
        if not isinstance(node, MappingNode):
            return None
        keys = self._keys.get(id(node))
        if keys is None:  # built once per mapping: many problems in one never rescan it
            keys = self._keys[id(node)] = self._mapping(node, set())
        return keys.get(part)

    def _mapping(self, node: Any, seen: set[int]) -> dict[Any, tuple[Any, Any]]:
        """Key -> (key node, value node); a merged key points where it is written.

        Building the data flattened merge keys into ``node.value`` (merged pairs
        first, so the mapping's own keys, later, win); a ``<<`` still there is
        followed all the same.
        """
        from ruamel.yaml.error import YAMLError
        from ruamel.yaml.nodes import MappingNode, ScalarNode

        out: dict[Any, tuple[Any, Any]] = {}
        seen.add(id(node))
        for key_node, value_node in node.value:
            if key_node.tag == f"{_YAML}merge":
                sources = value_node.value if not isinstance(value_node, MappingNode) else None
                for src in reversed(sources) if isinstance(sources, list) else [value_node]:
                    if isinstance(src, MappingNode) and id(src) not in seen:
                        out.update(self._mapping(src, seen))
                continue
            if not isinstance(key_node, ScalarNode):
                continue  # refused when parsed; never part of a path
            try:
                key = self._loader.construct_object(key_node, deep=True)
            except YAMLError:  # pragma: no cover - building the data built this key
                continue
            out[key] = (key_node, value_node)
        return out


def _pos(node: Any) -> tuple[int, int]:
    mark = node.start_mark
    return int(mark.line), int(mark.column)


def parse(text: str, name: str, path: Path | None = None) -> Document:
    """Parse YAML text into a :class:`Document`, or raise located diagnostics.

    The text is checked event by event first (:class:`_Bounds`), on libyaml's
    parser (ruamel.yaml.clib: ~10x faster than ruamel's own on a profile), and
    built only when every check passes.  Anything libyaml's parser refuses is
    parsed again by ruamel's own, whose messages name the offending character
    or token (libyaml's do not), under the same checks.
    """
    from ruamel.yaml.error import YAMLError

    # A character is at most 4 bytes: count bytes only where it could matter.
    big = len(text) * 4 > MAX_SPEC_BYTES
    _check_size(len(text.encode("utf-8", "surrogatepass")) if big else len(text), text, name)
    if "\r" in text:  # as reading in text mode does: CRLF and CR line ends become LF
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    odd = _ODD_BREAK.search(text)
    if odd is not None:
        raise _at(text, odd.start(), name, _odd_break(odd.group()))
    if "%YAML" in text:  # before any parser: ruamel's asserts on %YAML 1.3
        for m in _YAML_DIRECTIVE.finditer(text):
            if m.group(1) != "1.2":
                raise _at(text, m.start(), name, f"'%YAML {_short(m.group(1))}': {_ONLY_12}")
    where = path or Path(name)
    if _c_parser() is None:  # pragma: no cover - ruamel.yaml.clib is a dependency
        return _parse_pure(text, name, where)
    try:
        _Bounds(name).check(_c_events(text))
    except YAMLError:
        return _parse_pure(text, name, where)
    try:
        root, data, loader = _build(text, pure=False)
    except YAMLError as exc:
        # A constructor's error (a duplicate key) is in ruamel's words already;
        # for anything libyaml found, ask ruamel's parser what it sees.
        if not _is_constructor_error(exc):
            return _parse_pure(text, name, where)
        raise _yaml_error(exc, name, text) from None
    return Document(name, where, text, data, root, loader)


def _parse_pure(text: str, name: str, path: Path) -> Document:
    """ruamel's pure-Python parser: its messages and positions, the same checks."""
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _Bounds(name).check(YAML(typ="safe", pure=True).parse(text))
            root, data, loader = _build(text, pure=True)
    except YAMLError as exc:
        raise _yaml_error(exc, name, text) from None
    return Document(name, path, text, data, root, loader)


def _build(text: str, *, pure: bool) -> tuple[Any, Any, Any]:
    """(node graph, plain data, constructor) of a checked text.

    The safe constructor builds only dict, list, str, int, float, bool and
    None (the checks refused every other tag), so the data is plain already.
    """
    from ruamel.yaml import YAML

    yaml = YAML(typ="safe", pure=pure)
    yaml.allow_duplicate_keys = False
    if pure:
        root = yaml.compose(text)
        loader = yaml.constructor
    else:
        yaml.Resolver = _resolver()
        loader, parser = yaml.get_constructor_parser(text)
        try:
            root = parser.get_single_node()
        finally:
            parser.dispose()
    data = loader.construct_document(root) if root is not None else None
    return root, data, loader


@functools.cache
def _resolver() -> Any:
    """ruamel's YAML 1.2 resolver, without asking for the version at every scalar.

    The checks refuse every ``%YAML`` directive but 1.2, so the version is
    known; ruamel otherwise looks it up twice per scalar (a fifth of a load).
    """
    from ruamel.yaml.resolver import VersionedResolver

    class Resolver12(VersionedResolver):
        @property
        def processing_version(self) -> Any:
            return (1, 2)

    return Resolver12


def _c_parser() -> Any:
    """libyaml's parser (ruamel.yaml.clib), or None where it is not installed."""
    import ruamel.yaml.main

    return getattr(ruamel.yaml.main, "CParser", None)


def _c_events(text: str) -> Iterator[Any]:
    parser = _c_parser()(text)
    try:
        while parser.check_event():
            yield parser.get_event()
    finally:
        parser.dispose()


def _is_constructor_error(exc: Exception) -> bool:
    from ruamel.yaml.constructor import ConstructorError

    return isinstance(exc, ConstructorError)


def load(path: Path, name: str | None = None) -> Document:
    """Read and parse a YAML file; unreadable files are diagnostics too."""
    display = name or str(path)

    def refuse(message: str, line: int = 0, col: int = 0) -> InvalidInput:
        return InvalidInput([Diagnostic(display, line, col, Severity.ERROR, message)])

    try:
        info = path.stat()
        if stat.S_ISDIR(info.st_mode):
            raise refuse("is a directory, not a YAML file")
        if not stat.S_ISREG(info.st_mode):
            # A FIFO would block the read forever, /dev/zero would never end.
            raise refuse("not a regular file (a pipe, device or socket); give a YAML file")
        _check_size(info.st_size, None, display)
        with path.open("rb") as f:
            raw = f.read(MAX_PROFILE_BYTES + 1)
    except FileNotFoundError:
        raise refuse("no such file") from None
    except OSError as exc:
        raise refuse(f"cannot read: {exc.strerror}") from None
    except ValueError as exc:  # a NUL in the name
        raise refuse(f"cannot read: {exc}") from None
    _check_size(len(raw), None, display)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        before = raw[: exc.start].decode("utf-8", errors="replace")
        line = before.count("\n") + 1
        col = len(before) - (before.rfind("\n") + 1) + 1
        raise refuse(f"not UTF-8 text ({exc.reason}); save the file as UTF-8", line, col) from None
    return parse(text, display, path)


def _check_size(size: int, text: str | None, name: str) -> None:
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


class _Bounds:
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
                        f"alias *{_short(event.anchor)} refers to the value that contains it "
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
                f"anchor &{_short(anchor)} is defined twice (first at line {first.line + 1}, "
                f"column {first.column + 1}); give each anchor its own name",
            )
        where[anchor] = event.start_mark

    def _directives(self, event: Any) -> None:
        version = getattr(event, "version", None)
        if version is not None and tuple(version) != (1, 2):
            shown = ".".join(str(v) for v in version)
            raise _Refused(event.start_mark, f"'%YAML {shown}': {_ONLY_12}")
        tags = getattr(event, "tags", None)
        if tags:
            handle = _short(next(iter(tags)))
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
                f"{_tag(tag)} {_short(value)!r}: the tag needs {meant}; remove the tag and "
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
                    f"{_short(event.value)!r} reads as a date but is not one ({exc}); "
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
                f"the number {_short(event.value)} is beyond 64 bits, more than any size or "
                "count can be; write the real value",
            )


def _tag(tag: str) -> str:
    return "!!" + tag.removeprefix(_YAML) if tag.startswith(_YAML) else _short(tag)


def _short(text: str, limit: int = 40) -> str:
    """A value for a message: one line, at most ``limit`` characters."""
    text = text.replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _at(text: str, index: int, name: str, message: str) -> InvalidInput:
    """A diagnostic at a character index of ``text`` (lines end at LF only)."""
    line = text.count("\n", 0, index) + 1
    col = index - (text.rfind("\n", 0, index) + 1) + 1
    return InvalidInput([Diagnostic(name, line, col, Severity.ERROR, message)])


def _odd_break(char: str) -> str:
    if "\ud800" <= char <= "\udfff":  # only text not read from a file: load() decodes strictly
        return f"not UTF-8 text (a lone surrogate U+{ord(char):04X}); save the file as UTF-8"
    what = {"\x85": "NEL", "\u2028": "LINE SEPARATOR", "\u2029": "PARAGRAPH SEPARATOR"}[char]
    return (
        f"invalid YAML: U+{ord(char):04X} ({what}) is a line break to some tools and not to "
        f"others; use a plain newline, or write \\u{ord(char):04x} in a double-quoted string"
    )


def _yaml_error(exc: Any, name: str, text: str) -> InvalidInput:
    from ruamel.yaml.error import MarkedYAMLError, YAMLError

    if isinstance(exc, MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
        return InvalidInput([Diagnostic(name, line, col, Severity.ERROR, _yaml_message(exc))])
    position = getattr(exc, "position", None)
    if isinstance(position, int) and 0 <= position <= len(text):  # a ReaderError
        char = getattr(exc, "character", None)
        what = f"U+{char:04X}" if isinstance(char, int) else repr(char)
        return _at(
            text,
            position,
            name,
            f"invalid YAML: control character {what} is not allowed; remove it, or write it "
            "as an escape in a double-quoted string",
        )
    assert isinstance(exc, YAMLError)
    return InvalidInput([Diagnostic(name, 1, 1, Severity.ERROR, f"invalid YAML: {exc}")])


def _yaml_message(exc: Any) -> str:
    from ruamel.yaml.constructor import DuplicateKeyError

    if isinstance(exc, DuplicateKeyError):
        # ruamel's text is long and points at its docs; keep the essential part:
        # 'found duplicate key "port" with value "8003" (original value: "8001")'.
        problem = str(exc.problem)
        parts = problem.split('"')
        key = _short(parts[1]) if len(parts) > 1 else "?"
        original = f" (the first has value {_short(parts[5])!r})" if len(parts) > 5 else ""
        return f"duplicate key {key!r} in this mapping{original}; keep one of them"
    problem = _short((exc.problem or "").strip(), 200)
    context = _short((exc.context or "").strip(), 200)
    text = f"{context}, {problem}" if context and problem else problem or context
    start, mark = exc.context_mark, exc.problem_mark
    if start is not None and mark is not None and start.line != mark.line:
        text += f" (it started at line {start.line + 1}, column {start.column + 1})"
    return f"invalid YAML: {text}"
