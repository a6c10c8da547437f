"""YAML loading: positions survive, syntax errors become located diagnostics."""

from __future__ import annotations

from pathlib import Path

import pytest

from layoutgen.errors import InvalidInput
from layoutgen.inputs.source import load, parse

TEXT = """\
a:
  b: 1
  c: [10, 20]
d: x
"""


def test_locate_values_keys_and_items() -> None:
    doc = parse(TEXT, "t.yaml")
    assert doc.locate(("a", "b")) == (2, 6)
    assert doc.locate(("a", "b"), at_key=True) == (2, 3)
    assert doc.locate(("a", "c", 1)) == (3, 11)
    assert doc.locate(("d",)) == (4, 4)


def test_missing_key_points_at_the_mapping_that_lacks_it() -> None:
    doc = parse(TEXT, "t.yaml")
    assert doc.locate(("a", "zz")) == (1, 1)
    assert doc.locate(()) == (1, 1)


def test_plain_data_has_no_ruamel_types() -> None:
    data = parse(TEXT, "t.yaml").plain()
    assert data == {"a": {"b": 1, "c": [10, 20]}, "d": "x"}
    assert type(data) is dict and type(data["a"]["c"]) is list


@pytest.mark.parametrize(
    ("text", "where", "fragment"),
    [
        ("a: 1\na: 2\n", (2, 1), "duplicate key 'a' in this mapping (the first has value '1')"),
        ("a: [1, 2\n", (2, 1), "invalid YAML"),
        ("\tfoo: 1\n", (1, 1), "'\\t' that cannot start any token"),
        # found by the fuzzer: a byte-order mark hid the directive, and ruamel asserted
        ("\ufeff%YAML 1.3\n---\na: 1\n", (1, 1), "'%YAML 1.3': layoutgen reads YAML 1.2"),
    ],
)
def test_syntax_errors_are_located(text: str, where: tuple[int, int], fragment: str) -> None:
    with pytest.raises(InvalidInput) as info:
        parse(text, "t.yaml")
    (diag,) = info.value.diagnostics
    assert (diag.line, diag.col) == where
    assert fragment in diag.message


def test_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput) as info:
        load(tmp_path / "nope.yaml")
    assert info.value.diagnostics[0].gcc().endswith("nope.yaml: error: no such file")
    (tmp_path / "bin.yaml").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(InvalidInput) as info:
        load(tmp_path / "bin.yaml")
    assert "not UTF-8 text" in info.value.diagnostics[0].message
    with pytest.raises(InvalidInput) as info:
        load(tmp_path)
    assert "is a directory" in info.value.diagnostics[0].message
