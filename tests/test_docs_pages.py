"""The documentation site: it builds with --strict, its generated parts are current,
and README stays a front page (issue 32)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.tools import docs_pages

from conftest import ROOT


def test_the_generated_parts_of_the_pages_are_what_the_code_says() -> None:
    """Spec keys, each command's --help, the runtimes' rules, the flag tables' builds,
    README's and CHANGELOG's copies: a change to the code that moves them fails here."""
    assert docs_pages.stale() == [], "run: make docs-pages"


def test_a_generated_section_follows_the_code(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check is real: a rule the module gains shows up as a stale page."""
    from layoutgen.runtimes import ik_llama_cpp

    extra = ik_llama_cpp.RULES[0].__class__(
        name="docs-check",
        since_build=9999,
        since=ik_llama_cpp.RULES[0].since,
        source="tests",
        summary="a rule only this test has",
    )
    monkeypatch.setattr(ik_llama_cpp, "RULES", (*ik_llama_cpp.RULES, extra))
    assert ROOT / "docs" / "reference" / "runtime-versions.md" in docs_pages.stale()
    assert "a rule only this test has" in docs_pages.rules_ik()


@pytest.mark.slow
def test_the_site_builds_with_strict(tmp_path: Path) -> None:
    """mkdocs-material, --strict: a broken link, a missing anchor, a page left out of
    the nav fail the build (mkdocs.yml's validation settings)."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "site" / "tutorial" / "index.html").is_file()
    assert (tmp_path / "site" / "reference" / "spec" / "index.html").is_file()


def test_readme_is_a_front_page() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    for command in ("make render", "make test"):
        assert command in text
    links = re.findall(r"\]\((docs/[^)#]+)", text)
    assert len(links) >= 15
    missing = [link for link in links if not (ROOT / link).is_file()]
    assert missing == []


def test_the_sections_that_left_readme_are_pages() -> None:
    """Where README's sections went (issue 32: text moved, none lost): a heading of each
    is on a page."""
    headings = {
        line.lstrip("#").strip()
        for page in (ROOT / "docs").rglob("*.md")
        for line in page.read_text(encoding="utf-8").splitlines()
        if line.startswith("#")
    }
    moved = [
        "What works today",
        "Exit codes",
        "Diagnostics",
        "Input limits",
        "A tour of the spec",
        "Service keys",
        "`tensor_overrides` patterns",
        "Passthrough `args`: checked against the runtime's flags",
        "Roles",
        "RPC devices",
        "Runtime versions",
        "Without `version:`: every build",
        "vLLM services",
        "LoRA adapters",
        "Speculative decoding",
        "Alternatives",
        "Editors",
        "From a working command line",
        "Plans",
        "Predicted speed and lanes",
        "Plan JSON",
        "Rendering",
        "Models in a Hugging Face cache",
        "What reaches a unit file, and the sandbox",
        "Deploying",
        "The live host: probe and doctor",
        "How doctor finds each runtime's build",
        "Reviewing changes",
        "In git: pre-commit and CI recipes",
        "What layoutgen guarantees on an untrusted pull request",
        "Model profiles",
        "calibrate",
        "Example layouts",
        "Checked against llama.cpp",
        "On a real GPU",
        "Against public start-up logs",
        "Held-out logs",
        "Development",
    ]
    assert [h for h in moved if h not in headings] == []


def test_the_recipes_pin_this_release() -> None:
    """The pre-commit and CI recipes name the tag of the version this tree is
    (v<layoutgen.__version__>, a tag each release creates): a rev that exists."""
    import layoutgen

    tag = f"v{layoutgen.__version__}"
    recipes = {
        p: p.read_text(encoding="utf-8")
        for p in (
            ROOT / "docs" / "how-to" / "pre-commit.md",
            ROOT / "docs" / "how-to" / "git-ops.md",
        )
    }
    pins = [
        (p.name, m)
        for p, text in recipes.items()
        for m in re.findall(r"(?:rev: |\.git@)(v\d+\.\d+\.\d+)", text)
    ]
    assert len(pins) >= 2
    assert [pin for pin in pins if pin[1] != tag] == []


def _keys(value: object, into: set[str]) -> set[str]:
    if isinstance(value, dict):
        for key, inner in value.items():
            into.add(key)
            _keys(inner, into)
    elif isinstance(value, list):
        for inner in value:
            _keys(inner, into)
    return into


@pytest.mark.slow
def test_every_key_the_plan_json_page_shows_is_in_a_plan(tmp_path: Path) -> None:
    """The plan JSON reference is an annotated example, written by hand: each key it
    shows must be one `plan --json` prints for an example layout (or, for the epochs of
    a runtime without a build, the same layout with its version: removed)."""
    import json

    from conftest import run_cli

    page = (ROOT / "docs" / "reference" / "plan-json.md").read_text(encoding="utf-8")
    shown = set(re.findall(r'"([a-z_]+)":', page.split("```text", 1)[1].split("```", 1)[0]))
    assert len(shown) >= 30
    found: set[str] = set()
    for spec in sorted((ROOT / "layouts").glob("*.yaml")):
        result = run_cli(["plan", "--json", str(spec)])
        assert result.code == 0, result.stderr
        _keys(json.loads(result.stdout), found)
    unversioned = tmp_path / "layouts" / "x.yaml"
    shutil.copytree(ROOT / "layouts" / "models", tmp_path / "layouts" / "models")
    text = (ROOT / "layouts" / "tower-2x5060ti.yaml").read_text()
    unversioned.write_text(re.sub(r'(?m)^    version: "b11434".*\n', "", text))
    result = run_cli(["plan", "--json", "--allow-outside", str(unversioned)])
    assert result.code == 0, result.stderr
    _keys(json.loads(result.stdout), found)
    # and seed 001's host as two sockets at NPS4 (speed.numa: a host of several nodes)
    numa = tmp_path / "layouts" / "numa.yaml"
    text = (ROOT / "layouts" / "glm51-1-ot-exps-cpu-2gpu.yaml").read_text()
    numa.write_text(
        text.replace(
            "    model: EPYC 9175F", "    model: EPYC 9175F\n    sockets: 2\n    numa_nodes: 8"
        )
    )
    result = run_cli(["plan", "--json", "--allow-outside", str(numa)])
    assert result.code == 0, result.stderr
    _keys(json.loads(result.stdout), found)
    assert sorted(shown - found) == [], "the page shows keys no plan prints"


def test_every_command_is_in_the_command_tables() -> None:
    """README's table and the commands page list every command the CLI has."""
    from layoutgen.cli import app

    names = {
        c.name or c.callback.__name__.rstrip("_") for c in app.registered_commands if c.callback
    }
    assert {"validate", "render", "apply"} <= names
    for page in (ROOT / "README.md", ROOT / "docs" / "reference" / "cli.md"):
        text = page.read_text(encoding="utf-8")
        rows = "\n".join(line for line in text.splitlines() if line.startswith("| `layoutgen"))
        missing = sorted(n for n in names if f"`layoutgen {n}" not in rows and f"`{n}`" not in rows)
        assert missing == [], f"{page.name} has no row for {missing}"
