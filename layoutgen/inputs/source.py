"""Reading YAML with positions, and turning spec paths into ``file:line:col``.

This is the one YAML reader, for specs and profiles alike, and the one place
that knows about positions.  Later stages get plain Python data from
:meth:`Document.plain` and report problems by *spec path*, which
:meth:`Document.locate` maps back to a position.

A text is built only once it has passed the bounds of
:mod:`layoutgen.inputs.yamlbounds` (size, nesting, aliases, tags, directives,
numbers): a hostile spec is refused before it costs anything.
"""

from __future__ import annotations

import functools
import os
import re
import stat
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from layoutgen.errors import Diagnostic, InvalidInput, Problem, Severity, SpecPath
from layoutgen.inputs.yamlbounds import (
    MAX_PROFILE_BYTES,
    MAX_SPEC_BYTES,
    ONLY_YAML_12,
    Bounds,
    check_size,
    short,
)

_YAML_DIRECTIVE = re.compile(r"^\ufeff?%YAML[ \t]+(\S+)", re.MULTILINE)
#: Line breaks to libyaml but not to ruamel's reader, nor to most editors (the
#: same error would be reported on different lines), and lone surrogates.
_ODD_BREAK = re.compile("[\x85\u2028\u2029\ud800-\udfff]")


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
        self._within: tuple[Path, ...] | None = None

    @property
    def within(self) -> tuple[Path, ...]:
        """The directories the files this document names may resolve into (:func:`boundary`)."""
        if self._within is None:
            self._within = boundary(self.path)
        return self._within

    @within.setter
    def within(self, roots: Sequence[Path]) -> None:
        self._within = tuple(roots)

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
            if key_node.tag == "tag:yaml.org,2002:merge":
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

    The text is checked event by event first (:class:`~layoutgen.inputs.yamlbounds.Bounds`),
    on libyaml's parser (ruamel.yaml.clib: ~10x faster than ruamel's own on a
    profile), and built only when every check passes.  Anything libyaml's parser refuses is
    parsed again by ruamel's own, whose messages name the offending character
    or token (libyaml's do not), under the same checks.
    """
    from ruamel.yaml.error import YAMLError

    # A character is at most 4 bytes: count bytes only where it could matter.
    big = len(text) * 4 > MAX_SPEC_BYTES
    check_size(len(text.encode("utf-8", "surrogatepass")) if big else len(text), text, name)
    if "\r" in text:  # as reading in text mode does: CRLF and CR line ends become LF
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    odd = _ODD_BREAK.search(text)
    if odd is not None:
        raise _at(text, odd.start(), name, _odd_break(odd.group()))
    if "%YAML" in text:  # before any parser: ruamel's asserts on %YAML 1.3
        for m in _YAML_DIRECTIVE.finditer(text):
            if m.group(1) != "1.2":
                raise _at(text, m.start(), name, f"'%YAML {short(m.group(1))}': {ONLY_YAML_12}")
    where = path or Path(name)
    if _c_parser() is None:  # pragma: no cover - ruamel.yaml.clib is a dependency
        return _parse_pure(text, name, where)
    try:
        Bounds(name).check(_c_events(text))
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
            Bounds(name).check(YAML(typ="safe", pure=True).parse(text))
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


# ------------------------------------------------------------------ where files may be

#: ``--allow-outside``: read specs and profiles wherever they resolve (set by the CLI)
_ALLOW_OUTSIDE = False
#: the environment's way to say ``--allow-outside`` (a host whose profiles live in /srv)
ALLOW_OUTSIDE_ENV = "LAYOUTGEN_ALLOW_OUTSIDE"


def allow_outside(on: bool = True) -> None:
    """Read specs, profiles and heat files wherever they resolve (``--allow-outside``)."""
    global _ALLOW_OUTSIDE
    _ALLOW_OUTSIDE = on


def outside_allowed() -> bool:
    """``--allow-outside`` was given, or ``LAYOUTGEN_ALLOW_OUTSIDE=1`` is set."""
    return _ALLOW_OUTSIDE or os.environ.get(ALLOW_OUTSIDE_ENV) == "1"


def repository(start: Path) -> Path | None:
    """The top of the git work tree holding ``start`` (a directory), found lexically:
    the nearest of it and its parents with a ``.git`` entry; None outside one."""
    here = Path(os.path.abspath(start))
    for folder in (here, *here.parents):
        if os.path.lexists(folder / ".git"):
            return folder
    return None


def boundary(spec: Path) -> tuple[Path, ...]:
    """The directories (resolved) that a spec, and the files it names, may resolve into.

    The git repository holding the spec as it was named (its directory when it
    is in none), and the repository of the working directory: in CI both are
    the checkout of the pull request.  Why: the repository's content, symbolic
    links included, is whoever opened the pull request's to choose, and a link
    ``layouts/x.yaml -> /etc/shadow`` (or a profile ``../../../home/ci/.netrc``)
    must not make a CI job read, and quote, a file that is not theirs.
    """
    folder = Path(os.path.abspath(spec)).parent
    roots = [repository(folder) or folder]
    here = repository(Path.cwd())
    if here is not None and here not in roots:
        roots.append(here)
    return tuple(_resolved(r) for r in roots)


def _resolved(path: Path) -> Path:
    try:
        return path.resolve()
    except (OSError, RuntimeError):  # a loop: nothing resolves into it
        return path


def outside(
    path: Path,
    within: Sequence[Path],
    display: str | None = None,
    what: str = "reads specs and profiles",
    fix: str = "move the file into the repository",
) -> str | None:
    """Why ``path`` may not be read (it resolves outside ``within``, or into a
    ``.git`` directory), in one line naming ``display`` and never the content; None
    when it may be (or ``--allow-outside`` was given).  ``what``: what layoutgen
    does there, ``fix``: what to do instead, for the message."""
    if outside_allowed():
        return None
    shown = display or str(path)
    try:
        real = path.resolve()
    except (OSError, RuntimeError):  # RuntimeError: a symbolic link loop (Python < 3.13)
        return f"cannot resolve {shown} (a loop of symbolic links?); replace it with the file"
    for root in within:
        try:
            rel = real.relative_to(root)
        except ValueError:
            continue
        if ".git" in rel.parts:
            return (
                f"{shown} resolves into the repository's .git directory; layoutgen never "
                "reads git's own files as specs or profiles: name a file of the work tree"
            )
        return None
    where = " or ".join(str(r) for r in within) or "the repository"
    return (
        f"{shown} resolves outside {where}, through a symbolic link or a ../ path; layoutgen "
        f"{what} only inside the repository (the spec's directory outside one), so that a "
        f"pull request cannot make CI read or write other files: {fix}, or give "
        "--allow-outside if you trust where it points"
    )


def load(path: Path, name: str | None = None, within: Sequence[Path] | None = None) -> Document:
    """Read and parse a YAML file; unreadable files are diagnostics too.

    A file that resolves outside ``within`` (default: :func:`boundary` of the
    file itself) is refused unread; the document's ``within`` is the same.
    """
    display = name or str(path)

    def refuse(message: str, line: int = 0, col: int = 0) -> InvalidInput:
        return InvalidInput([Diagnostic(display, line, col, Severity.ERROR, message)])

    roots = tuple(within) if within is not None else boundary(path)
    try:
        why = outside(path, roots, "the file")
    except ValueError as exc:  # a NUL in the name
        raise refuse(f"cannot read: {exc}") from None
    if why is not None:
        raise refuse(why)
    try:
        info = path.stat()
        if stat.S_ISDIR(info.st_mode):
            raise refuse("is a directory, not a YAML file")
        if not stat.S_ISREG(info.st_mode):
            # A FIFO would block the read forever, /dev/zero would never end.
            raise refuse("not a regular file (a pipe, device or socket); give a YAML file")
        check_size(info.st_size, None, display)
        with path.open("rb") as f:
            raw = f.read(MAX_PROFILE_BYTES + 1)
    except FileNotFoundError:
        raise refuse("no such file") from None
    except OSError as exc:
        raise refuse(f"cannot read: {exc.strerror}") from None
    except ValueError as exc:  # a NUL in the name
        raise refuse(f"cannot read: {exc}") from None
    doc = parse_bytes(raw, display, path)
    doc.within = roots
    return doc


def parse_bytes(raw: bytes, display: str, path: Path) -> Document:
    """Parse a file's bytes as :func:`load` read them (size bound, UTF-8)."""
    check_size(len(raw), None, display)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        before = raw[: exc.start].decode("utf-8", errors="replace")
        line = before.count("\n") + 1
        col = len(before) - (before.rfind("\n") + 1) + 1
        message = f"not UTF-8 text ({exc.reason}); save the file as UTF-8"
        raise InvalidInput([Diagnostic(display, line, col, Severity.ERROR, message)]) from None
    return parse(text, display, path)


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
        key = short(parts[1]) if len(parts) > 1 else "?"
        original = f" (the first has value {short(parts[5])!r})" if len(parts) > 5 else ""
        return f"duplicate key {key!r} in this mapping{original}; keep one of them"
    problem = short((exc.problem or "").strip(), 200)
    context = short((exc.context or "").strip(), 200)
    text = f"{context}, {problem}" if context and problem else problem or context
    start, mark = exc.context_mark, exc.problem_mark
    if start is not None and mark is not None and start.line != mark.line:
        text += f" (it started at line {start.line + 1}, column {start.column + 1})"
    return f"invalid YAML: {text}"
