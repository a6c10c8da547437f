"""The layer contracts (.importlinter, issue 32): the tree keeps them, and they bite.

``make lint`` runs ``lint-imports`` on the tree; here the same contracts are run on
a copy of the package with one of the imports that used to tie the core in a knot
put back, so a contract that no longer checks anything (a renamed package, a typo
in a layer) fails a test instead of passing in silence.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def _lint(where: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(where)}  # this copy's layoutgen, not the checkout's
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=where,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _copy(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "layoutgen", tmp_path / "layoutgen")
    shutil.copy(ROOT / ".importlinter", tmp_path / ".importlinter")
    return tmp_path


def _add_import(module: Path, line: str) -> None:
    text = module.read_text()
    head, sep, tail = text.partition("\nfrom layoutgen.")
    module.write_text(f"{head}\n{line}{sep}{tail}")


def test_the_tree_keeps_its_layers() -> None:
    result = _lint(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Contracts: 3 kept, 0 broken." in result.stdout


@pytest.mark.parametrize(
    ("module", "line", "broken"),
    [
        # the knot of issue 32: sizing asked render for flash attention ...
        (
            "solve/footprint.py",
            "from layoutgen.render.units import build  # noqa",
            "layoutgen.solve is not allowed to import layoutgen.render",
        ),
        # ... and the runtime's interface read the solver's types
        (
            "core/runtime.py",
            "from layoutgen.solve.plan import Part  # noqa",
            "layoutgen.core is not allowed to import layoutgen.solve",
        ),
        # ... also for its annotations alone (the old runtimes/base.py's imports were)
        (
            "core/runtime.py",
            "if TYPE_CHECKING:\n    from layoutgen.solve.footprint import shares  # noqa",
            "layoutgen.core is not allowed to import layoutgen.solve",
        ),
        # a runtime's rules ask the solver back
        (
            "runtimes/llama_cpp/compute.py",
            "from layoutgen.solve.footprint import shares  # noqa",
            "layoutgen.runtimes is not allowed to import layoutgen.solve",
        ),
        # one runtime's rules borrowed from another's
        (
            "runtimes/vllm/__init__.py",
            "from layoutgen.runtimes.llama_cpp import LlamaCpp  # noqa",
            "layoutgen.runtimes.vllm is not allowed to import layoutgen.runtimes.llama_cpp",
        ),
        # the interface's defaults calling the core back
        (
            "core/runtime.py",
            "from layoutgen.core.placement import loaded  # noqa",
            "layoutgen.core.runtime is not allowed to import layoutgen.core.placement",
        ),
    ],
)
def test_an_import_against_the_layers_breaks_a_contract(
    tmp_path: Path, module: str, line: str, broken: str
) -> None:
    where = _copy(tmp_path)
    _add_import(where / "layoutgen" / module, line)
    result = _lint(where)
    assert result.returncode == 1, result.stdout + result.stderr
    assert broken in result.stdout
    assert "BROKEN" in result.stdout
