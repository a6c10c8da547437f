"""Reading YAML with positions, and turning spec paths into ``file:line:col``.

ruamel's round-trip loader keeps the line and column of every key and value
(``.lc``).  Later stages never see ruamel objects: they get plain Python data
from :meth:`Document.plain` and report problems by *spec path*, which
:meth:`Document.locate` maps back to a position.  This is the one place that
knows about positions.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from layoutgen.errors import Diagnostic, InvalidInput, Problem, Severity, SpecPath


class Document:
    """A loaded YAML file: its display name, text, plain data and (lazily) positions.

    Most files are valid, and a valid file needs no positions: its data comes
    from the fast C-backed safe loader.  The round-trip tree that knows every
    line and column is parsed only when a problem has to be located.
    """

    def __init__(self, name: str, path: Path, text: str, data: Any) -> None:
        self.name = name
        self.path = path
        self.text = text
        self._data = data
        self._tree: Any = None

    @property
    def tree(self) -> Any:
        if self._tree is None:
            self._tree = _parse_rt(self.text, self.name)
        return self._tree

    def plain(self) -> Any:
        return self._data

    def locate(self, path: SpecPath, *, at_key: bool = False) -> tuple[int, int]:
        """1-based (line, col) of the value (or key) at ``path``.

        Components that do not exist in the document (a missing key, a union
        tag from pydantic) stop the walk: the deepest existing node is used,
        so a missing key is reported at the mapping that lacks it.
        """
        node = self.tree
        pos: tuple[int, int] = (0, 0)
        parent_key_pos: tuple[int, int] | None = None
        for i, part in enumerate(path):
            last = i == len(path) - 1
            child_pos = _child_pos(node, part, key=at_key and last)
            if child_pos is None:
                if parent_key_pos is not None:
                    pos = parent_key_pos
                continue
            pos = child_pos
            parent_key_pos = _child_pos(node, part, key=True) or child_pos
            node = node[part]
        return pos[0] + 1, pos[1] + 1

    def diagnostic(self, problem: Problem) -> Diagnostic:
        line, col = self.locate(problem.path, at_key=problem.at_key)
        return Diagnostic(self.name, line, col, problem.severity, problem.message)


def _child_pos(node: Any, part: str | int, *, key: bool) -> tuple[int, int] | None:
    lc = getattr(node, "lc", None)
    if lc is None:
        return None
    if isinstance(node, dict):
        if part not in node:
            return None
        pos = lc.key(part) if key else lc.value(part)
    elif isinstance(node, list):
        if not isinstance(part, int) or not 0 <= part < len(node):
            return None
        pos = lc.item(part)
    else:  # pragma: no cover - ruamel only attaches lc to containers
        return None
    return int(pos[0]), int(pos[1])


def _plain(node: Any) -> Any:
    """Strip ruamel's subclasses so that pydantic sees ordinary Python data."""
    if isinstance(node, dict):
        return {_plain(k): _plain(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_plain(v) for v in node]
    if isinstance(node, bool):
        return bool(node)
    if isinstance(node, int):
        return int(node)
    if isinstance(node, float):
        return float(node)
    if isinstance(node, str):
        return str(node)
    return node


def _parse_rt(text: str, name: str) -> Any:
    """The round-trip tree (positions); YAML errors become located diagnostics."""
    from ruamel.yaml import YAML
    from ruamel.yaml.error import MarkedYAMLError, YAMLError

    yaml = YAML(typ="rt")
    yaml.allow_duplicate_keys = False
    try:
        return yaml.load(text)
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
        raise InvalidInput(
            [Diagnostic(name, line, col, Severity.ERROR, _yaml_message(exc))]
        ) from None
    except YAMLError as exc:
        raise InvalidInput(
            [Diagnostic(name, 1, 1, Severity.ERROR, f"invalid YAML: {exc}")]
        ) from None


def parse(text: str, name: str, path: Path | None = None) -> Document:
    """Parse YAML text into a :class:`Document`.

    The fast path is ruamel's safe loader (libyaml-backed when ruamel.yaml.clib
    is installed: ~10x faster on a 1800-tensor profile).  Anything it refuses
    is parsed again by the round-trip loader, whose messages and positions are
    the ones we report, so both loaders never disagree in what users see.
    """
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    fast = YAML(typ="safe")
    fast.allow_duplicate_keys = False
    try:
        data = _plain(fast.load(text))
    except YAMLError:
        tree = _parse_rt(text, name)  # raises the located diagnostic
        doc = Document(name, path or Path(name), text, _plain(tree))
        doc._tree = tree
        return doc
    return Document(name, path or Path(name), text, data)


def load(path: Path, name: str | None = None) -> Document:
    """Read and parse a YAML file; unreadable files are diagnostics too."""
    display = name or str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InvalidInput([Diagnostic(display, 0, 0, Severity.ERROR, "no such file")]) from None
    except IsADirectoryError:
        raise InvalidInput(
            [Diagnostic(display, 0, 0, Severity.ERROR, "is a directory, not a YAML file")]
        ) from None
    except UnicodeDecodeError as exc:
        raise InvalidInput(
            [Diagnostic(display, 0, 0, Severity.ERROR, f"not UTF-8 text ({exc.reason})")]
        ) from None
    except OSError as exc:
        raise InvalidInput(
            [Diagnostic(display, 0, 0, Severity.ERROR, f"cannot read: {exc.strerror}")]
        ) from None
    return parse(text, display, path)


def _yaml_message(exc: Any) -> str:
    from ruamel.yaml.constructor import DuplicateKeyError

    if isinstance(exc, DuplicateKeyError):
        # ruamel's text is long and points at its docs; keep the essential part:
        # 'found duplicate key "port" with value "8003" (original value: "8001")'.
        problem = str(exc.problem)
        parts = problem.split('"')
        key = parts[1] if len(parts) > 1 else "?"
        original = f" (the first has value {parts[5]!r})" if len(parts) > 5 else ""
        return f"duplicate key {key!r} in this mapping{original}; keep one of them"
    problem = (exc.problem or "").strip()
    context = (exc.context or "").strip()
    text = f"{context}, {problem}" if context and problem else problem or context
    start, mark = exc.context_mark, exc.problem_mark
    if start is not None and mark is not None and start.line != mark.line:
        text += f" (it started at line {start.line + 1}, column {start.column + 1})"
    return f"invalid YAML: {text}"
