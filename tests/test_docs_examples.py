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


#: a README example of a command's output: "$ layoutgen plan SPEC" then its lines
EXAMPLE = re.compile(r"```text\n\$ layoutgen (plan) (\S+)\n(.*?)```", re.S)


def test_readme_plan_examples_are_what_plan_prints() -> None:
    """Issue 15 item 7: the plan example showed `used 62,089` / `3,238~` where the
    tool printed 64,245 / 5,394~. Every line shown (`...` elides) is printed today."""
    examples = EXAMPLE.findall(README)
    assert examples
    for command, spec, body in examples:
        result = run_cli([command, str(ROOT / spec)])
        assert result.code == 0, result.stderr
        printed = result.stdout.replace(str(ROOT) + "/", "").splitlines()
        for line in body.splitlines():
            if line.strip() != "...":
                assert line in printed, (
                    f"README shows a line `layoutgen {command}` no longer prints:\n{line}"
                )
