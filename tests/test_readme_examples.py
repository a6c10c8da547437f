"""README examples are the tool's own output (issue 15: stale examples mislead).

Each quoted diagnostic of a bundled layout in README is produced again by the
CLI, byte for byte; an example that drifts from the tool fails here.
"""

from __future__ import annotations

import re

from conftest import ROOT, run_cli

README = (ROOT / "README.md").read_text(encoding="utf-8")
#: README lines that quote a diagnostic of a bundled layout
QUOTED = re.compile(r"^(layouts/\S+\.yaml):\d+:\d+: (?:error|warning): .*$", re.MULTILINE)


def test_readme_quotes_diagnostics_as_the_tool_prints_them() -> None:
    """Quotes of files the repository holds (an illustrative ``layouts/broken.yaml``
    is not one)."""
    lines = [m.group(0) for m in QUOTED.finditer(README) if (ROOT / m.group(1)).is_file()]
    assert len(lines) >= 3  # the fit-check examples at least
    for spec in sorted({line.split(":", 1)[0] for line in lines}):
        result = run_cli(["validate", str(ROOT / spec)])
        printed = {x.replace(str(ROOT) + "/", "") for x in result.stdout.splitlines()}
        for line in (x for x in lines if x.startswith(spec + ":")):
            assert line in printed, f"README quotes a line validate no longer prints:\n{line}"
