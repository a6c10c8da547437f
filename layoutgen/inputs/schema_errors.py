"""Turn pydantic's validation errors into located, human problems.

pydantic reports each error with a ``loc`` tuple that mixes real keys with
union tags (``experts.explicit.layers``); we walk it through the user's data
so that the path we print and locate is the one the user wrote.  Messages say
what was found and what to write instead; unknown keys get a "did you mean".
"""

from __future__ import annotations

import difflib
import types
import typing
from typing import Any, TypeVar

from pydantic import BaseModel
from pydantic_core import ErrorDetails

from layoutgen.errors import Diagnostic, InvalidInput, Problem, Severity, SpecPath
from layoutgen.inputs.source import Document

#: Names people bring from llama.cpp flags or other tools, and the spec key meant.
ALIASES = {
    "ctx_size": "ctx",
    "ctx-size": "ctx",
    "context": "ctx",
    "n_ctx": "ctx",
    "np": "parallel",
    "n_parallel": "parallel",
    "slots": "parallel",
    "ctk": "cache_type_k",
    "ctv": "cache_type_v",
    "cache-type-k": "cache_type_k",
    "cache-type-v": "cache_type_v",
    "batch_size": "batch",
    "ubatch_size": "ubatch",
    "threads-batch": "threads_batch",
    "host": "expose",
    "bind": "expose",
    "listen": "expose",
    "gpu": "gpus",
    "devices": "gpus",
    "depends_on": "after",
    "requires": "after",
    "cap_add": "capabilities",
    "extra_args": "args",
    "flags": "args",
    "memory": "ram",
    "vram_reserve": "reserve",
}


M = TypeVar("M", bound=BaseModel)


def validate_mapping(doc: Document, model: type[M], expected: str) -> M:
    """Validate a document's top-level mapping as ``model``, or raise located diagnostics.

    ``expected`` says what the file should be, for a file that is empty or
    not a mapping ("a spec is a mapping with keys host, ...").
    """
    from pydantic import ValidationError

    data = doc.plain()
    if not isinstance(data, dict):
        what = "empty file" if data is None else "not a mapping"
        raise InvalidInput([Diagnostic(doc.name, 1, 1, Severity.ERROR, f"{what}: {expected}")])
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = problems_from(exc.errors(), data, model)
        raise InvalidInput([doc.diagnostic(p) for p in problems]) from None


def problems_from(errors: list[ErrorDetails], data: Any, root: type[BaseModel]) -> list[Problem]:
    return [_problem(err, data, root) for err in errors]


def _problem(err: ErrorDetails, data: Any, root: type[BaseModel]) -> Problem:
    loc = tuple(err["loc"])
    at_key = bool(loc) and loc[-1] == "[key]"
    if at_key:
        loc = loc[:-1]
    path = _user_path(data, loc)
    kind = err["type"]
    if kind == "union_tag_invalid" and isinstance(err.get("input"), dict):
        path = (*path, "mode")  # point at the bad tag, not the whole mapping
    where = dotted(path)
    if kind == "missing":
        missing = str(loc[-1])
        desc = _description(root, loc)
        hint = f" ({desc})" if desc else ""
        return Problem(path, f"{_owner(path)}: missing required key '{missing}'{hint}")
    if kind == "extra_forbidden":
        known = _known_keys(root, loc[:-1])
        key = str(loc[-1])
        alias = ALIASES.get(key.lower())
        hint = f"; did you mean {alias!r}?" if alias in known else _suggest(key, known)
        return Problem(path, f"{_owner(path)}: unknown key {_short(key)!r}{hint}", at_key=True)
    return Problem(path, f"{where}: {_message(err)}", at_key=at_key)


def dotted(path: SpecPath) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _owner(path: SpecPath) -> str:
    return dotted(path[:-1]) if path else "(top level)"


def _user_path(data: Any, loc: tuple[Any, ...]) -> SpecPath:
    """Drop loc parts that are not in the data (union tags), keep the rest."""
    out: list[str | int] = []
    node = data
    for i, part in enumerate(loc):
        last = i == len(loc) - 1
        in_dict = isinstance(node, dict) and part in node
        in_list = isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)
        if in_dict or in_list:
            out.append(part)
            node = node[part]
        elif last and isinstance(node, dict) and isinstance(part, str):
            out.append(part)  # a missing key: name it
    return tuple(out)


def _message(err: ErrorDetails) -> str:
    kind, value, ctx = err["type"], err.get("input"), err.get("ctx") or {}
    got = _got(value)
    if kind in ("int_parsing", "int_type"):
        return f"expected a whole number, got {got}"
    if kind == "int_from_float":
        return f"expected a whole number, got {got}"
    if kind in ("bool_parsing", "bool_type"):
        return f"expected true or false, got {got}"
    if kind == "string_type":
        return f"expected a string, got {got}; quote it: '{_short(str(value))}'"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return f"expected a mapping of keys to values, got {got}"
    if kind in ("list_type", "tuple_type"):
        return f"expected a list, got {got}"
    if kind == "literal_error":
        expected = str(ctx.get("expected", ""))
        options = [o.strip().strip("'") for o in expected.replace(" or ", ",").split(",")]
        options = [o for o in options if o]
        return f"expected one of {expected}, got {got}{_suggest(str(value), options)}"
    if kind == "union_tag_invalid":
        tags = str(ctx.get("expected_tags", ""))
        options = [t.strip().strip("'") for t in tags.split(",")]
        tag = str(ctx.get("tag", value))
        close = _suggest(tag, options)
        hint = close if "did you mean" in close else ""
        return f"unknown mode {tag!r}; expected one of {tags}{hint}"
    if kind == "union_tag_not_found":
        return "missing key 'mode' (one of 'auto', 'host', 'gpu', 'n-cpu-moe', 'explicit')"
    if kind == "greater_than_equal":
        return f"must be at least {ctx.get('ge')}, got {got}"
    if kind == "greater_than":
        return f"must be greater than {ctx.get('gt')}, got {got}"
    if kind == "less_than_equal":
        return f"must be at most {ctx.get('le')}, got {got}"
    if kind == "string_pattern_mismatch":
        return f"{got} does not match the pattern {ctx.get('pattern')}"
    if kind == "value_error":
        msg = str(err["msg"])
        return msg.removeprefix("Value error, ")
    return f"{err['msg']} (got {got})"


def _got(value: Any) -> str:
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if value is None:
        return "nothing (null)"
    if isinstance(value, str):
        return repr(_short(value))
    return _short(repr(value))


def _short(text: str, limit: int = 80) -> str:
    """At most ``limit`` characters of a value: a message stays one readable line."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _suggest(word: str, options: list[str]) -> str:
    # difflib is quadratic in the word's length; no key or option is longer than 64.
    close = difflib.get_close_matches(word, options, n=1, cutoff=0.6) if len(word) <= 64 else []
    if close:
        return f"; did you mean {close[0]!r}?"
    if options and len(options) <= 30:
        return "; expected one of: " + ", ".join(sorted(options))
    return ""


# -- walking the model classes along a loc ------------------------------------


def _target(root: type[BaseModel], loc: tuple[Any, ...]) -> Any:
    """The annotation reached by following ``loc`` from ``root``, or None."""
    current: Any = root
    for part in loc:
        current = _step(current, part)
        if current is None:
            return None
    return current


def _step(tp: Any, part: Any) -> Any:
    for option in _options(tp):
        if isinstance(option, type) and issubclass(option, BaseModel):
            if isinstance(part, str) and part in option.model_fields:
                return option.model_fields[part].annotation
            tag = option.model_fields.get("mode")
            if tag is not None and tag.default == part:
                return option
        origin = typing.get_origin(option)
        if origin is dict:
            return typing.get_args(option)[1]
        if origin in (tuple, list) and isinstance(part, int):
            return typing.get_args(option)[0]
    return None


def _options(tp: Any) -> list[Any]:
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return _options(typing.get_args(tp)[0])
    if origin is typing.Union or origin is types.UnionType:
        out: list[Any] = []
        for arg in typing.get_args(tp):
            out.extend(_options(arg))
        return out
    return [tp]


def _known_keys(root: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    target = _target(root, loc)
    for option in _options(target):
        if isinstance(option, type) and issubclass(option, BaseModel):
            return list(option.model_fields)
    return []


def _description(root: type[BaseModel], loc: tuple[Any, ...]) -> str | None:
    parent = _target(root, loc[:-1])
    for option in _options(parent):
        if isinstance(option, type) and issubclass(option, BaseModel):
            info = option.model_fields.get(str(loc[-1]))
            if info is not None and info.description:
                return info.description
    return None
