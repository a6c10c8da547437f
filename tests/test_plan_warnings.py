"""``plan --json`` carries the warnings ``plan`` prints (issue 30 item 7).

``plan`` prints validate's warnings (located, on stderr) and the plan's own
(the solver's: threads, speed, ...).  The JSON's ``warnings`` held only the
plan's own, so a script reading the JSON missed, e.g., that ``:latest``
moves under the plan or that a server listens on every interface.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import specs
from conftest import ROOT, run_cli

LAYOUTS = sorted((ROOT / "layouts").glob("*.yaml"))
GCC = re.compile(r"^.+?:\d+:\d+: warning: (?P<message>.*)$|^[^:]+: warning: (?P<whole>.*)$")


def _printed(stderr: str, stdout: str = "") -> set[str]:
    """The warnings a command printed: located on stderr, and ``warning:`` lines."""
    out = set()
    for line in stderr.splitlines():
        m = GCC.match(line)
        if m is not None:
            out.add(m.group("message") or m.group("whole"))
    out |= {
        line.removeprefix("warning: ")
        for line in stdout.splitlines()
        if line.startswith("warning: ")
    }
    return out


def _both(spec: Path) -> tuple[set[str], list[str], set[str]]:
    """(what text plan prints, the JSON's warnings, what plan --json prints)."""
    text = run_cli(["plan", str(spec)])
    doc = run_cli(["plan", "--json", str(spec)])
    assert text.code == doc.code == 0, (text.stderr, doc.stderr)
    return (
        _printed(text.stderr, text.stdout),
        json.loads(doc.stdout)["warnings"],
        _printed(doc.stderr),
    )


def _spec(tmp: Path) -> Path:
    """One validate warning (a server on every interface) and one of the plan's
    (more threads, summed, than the host has)."""
    text = specs.VALID.replace("    port: 8000\n", "    port: 8000\n    expose: true\n")
    text = text.replace("threads: 15", "threads: 20").replace(
        "    port: 8001\n", "    port: 8001\n    threads: 20\n"
    )
    assert "expose: true" in text and text.count("threads: 20") == 2
    return specs.write(tmp, text)


def test_the_json_holds_validates_warnings_and_the_plans(tmp_path: Path) -> None:
    printed, in_json, printed_json = _both(_spec(tmp_path))
    assert any("expose" in w and "0.0.0.0" in w for w in in_json), in_json
    assert any("40 threads" in w for w in in_json), in_json
    assert set(in_json) == printed == printed_json
    assert len(in_json) == len(set(in_json))  # each once


@pytest.mark.parametrize("layout", LAYOUTS, ids=[p.stem for p in LAYOUTS])
def test_every_example_prints_the_warnings_its_json_holds(layout: Path) -> None:
    printed, in_json, printed_json = _both(layout)
    assert set(in_json) == printed == printed_json
    expected = {
        line.split("expect-warning:", 1)[1].strip()
        for line in layout.read_text().splitlines()
        if "expect-warning:" in line
    }
    for fragment in expected:  # the examples' own expect-warning comments
        assert any(fragment in w for w in in_json), (fragment, in_json)
