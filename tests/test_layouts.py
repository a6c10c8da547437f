"""The example layouts: each reproduces a seed scenario and validates.

They are the documentation users copy from, so they must stay valid; each
says in its header which source document and section it reproduces.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import ROOT, run_cli

LAYOUTS = sorted((ROOT / "layouts").glob("*.yaml"))
INVALID = sorted((ROOT / "layouts" / "invalid").glob("*.yaml"))


@pytest.mark.parametrize("layout", LAYOUTS, ids=[p.stem for p in LAYOUTS])
def test_example_layout_validates(layout: Path) -> None:
    result = run_cli(["validate", str(layout)])
    assert result.code == 0, result.stdout
    # A layout may show a warning on purpose; its header then says which, as
    # '# expect-warning: <text>', and nothing else may warn.
    expected = re.findall(r"^# expect-warning: (.+)$", layout.read_text(), re.MULTILINE)
    lines = result.stdout.splitlines()
    assert all(any(e in line for e in expected) for line in lines), (
        "example layouts should not draw warnings they do not declare",
        lines,
    )
    assert all(any(e in line for line in lines) for e in expected), "declared, not drawn"


@pytest.mark.parametrize("layout", LAYOUTS + INVALID, ids=[p.stem for p in LAYOUTS + INVALID])
def test_example_layout_names_its_seed(layout: Path) -> None:
    header = "\n".join(
        line for line in layout.read_text().splitlines()[:15] if line.startswith("#")
    )
    assert re.search(r"[Ss]eed 00\d", header), f"{layout.name}: say which seed it reproduces"


@pytest.mark.parametrize("layout", INVALID, ids=[p.stem for p in INVALID])
def test_invalid_layout_is_refused_for_not_fitting(layout: Path) -> None:
    result = run_cli(["validate", str(layout)])
    assert result.code == 1
    # Refused by the fit check (not a typo): device, need, capacity and shortfall.
    assert re.search(
        r"does not fit GPU \S+ .*: (together they )?needs? [\d,]+ MiB, has [\d,]+ MiB - "
        r"reserve [\d,]+ MiB = [\d,]+ MiB, short by [\d,]+ MiB; (largest|shares): ",
        result.stdout,
    )
