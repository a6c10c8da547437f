"""Property: no mutated spec makes validate crash or point outside the file.

Mutations cover what people do to YAML by hand: deleted keys, values of the
wrong type, bad sizes, unknown keys, and broken text (stray brackets, tabs,
cut lines).  Every run must end in "valid" or located diagnostics.
"""

from __future__ import annotations

import copy
from io import StringIO
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML

from layoutgen.errors import InvalidInput
from layoutgen.source import parse
from layoutgen.validate import validate_document

from specs import VALID

BASE = YAML(typ="safe").load(VALID)

VALUES = st.one_of(
    st.integers(min_value=-(2**40), max_value=2**40),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.none(),
    st.text(max_size=12),
    st.sampled_from(["96GiB", "96G", "lots", "-1MiB", "1.5B", "gpu9", "auto", "explicit"]),
    st.lists(st.integers(min_value=-3, max_value=100), max_size=3),
    st.dictionaries(st.sampled_from(["mode", "n", "layers", "x"]), st.integers(), max_size=2),
)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, value in node.items():
            out += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out += _paths(value, (*prefix, i))
    return out


PATHS = _paths(BASE)


def _dump(data: Any) -> str:
    buf = StringIO()
    YAML(typ="safe").dump(data, buf)
    return buf.getvalue()


@st.composite
def mutated(draw: st.DrawFn) -> str:
    data = copy.deepcopy(BASE)
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        path = draw(st.sampled_from(PATHS))
        parent: Any = data
        try:
            for part in path[:-1]:
                parent = parent[part]
            key = path[-1]
            parent[key]
        except (KeyError, IndexError, TypeError):
            continue
        if not isinstance(parent, dict | list):
            continue  # an earlier mutation turned this container into a scalar
        op = draw(st.sampled_from(["delete", "replace", "add"]))
        if op == "delete":
            del parent[key]
        elif op == "replace":
            parent[key] = draw(VALUES)
        elif isinstance(parent, dict):
            parent[draw(st.sampled_from(["ctxx", "gpu", "Port", "x"]))] = draw(VALUES)
    text = _dump(data)
    if draw(st.booleans()):
        # Break the text itself: cut, insert a troublesome character, or repeat a line.
        pos = draw(st.integers(min_value=0, max_value=len(text)))
        how = draw(st.sampled_from(["cut", "insert", "dup"]))
        if how == "cut":
            text = text[:pos] + text[pos + draw(st.integers(min_value=1, max_value=20)) :]
        elif how == "insert":
            bad = draw(st.sampled_from([":", "[", "{", "\t", '"', "- ", "&a", "*b", "\n  x"]))
            text = text[:pos] + bad + text[pos:]
        else:
            lines = text.splitlines(keepends=True)
            i = draw(st.integers(min_value=0, max_value=max(len(lines) - 1, 0)))
            text = "".join(lines[: i + 1] + lines[i:])
    return text


@settings(
    max_examples=1000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(mutated())
def test_mutated_specs_never_crash_and_stay_located(text: str) -> None:
    lines = text.splitlines()
    try:
        validate_document(parse(text, "fuzz.yaml"))
    except InvalidInput as exc:
        assert exc.diagnostics, "an invalid spec must say why"
        for diag in exc.diagnostics:
            assert diag.file == "fuzz.yaml"
            assert diag.message
            assert 1 <= diag.line <= max(len(lines), 1) + 1, diag
            row = lines[diag.line - 1] if diag.line <= len(lines) else ""
            assert 1 <= diag.col <= len(row) + 1, (diag, row)
