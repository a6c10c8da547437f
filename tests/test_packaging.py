"""The wheel carries every package: pyproject lists them by hand (templates/ maps to a
data package), and a package missing there works in the editable checkout only."""

from __future__ import annotations

import tomllib

from conftest import ROOT


def test_every_package_of_layoutgen_is_listed_in_pyproject() -> None:
    listed = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    found = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for init in (ROOT / "layoutgen").rglob("__init__.py")
    }
    assert found - listed == set(), "add them to [tool.setuptools] packages"
    assert listed - found == {"layoutgen_templates"}
