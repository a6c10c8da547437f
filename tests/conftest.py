"""Shared fixtures: the CLI runner and the ``--update-golden`` switch.

Golden files (expected diagnostics under tests/cases/, and later out/) are
the contract; ``pytest --update-golden`` rewrites them from the code, and
review of that diff is what keeps them honest.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import settings
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parent.parent

# The profile cache (layoutgen/models/profile_cache.py) of this session's own:
# nothing read from or left in the user's ~/.cache, every run starts cold.
if "LAYOUTGEN_CACHE_DIR" not in os.environ:
    _CACHE = tempfile.mkdtemp(prefix="layoutgen-test-cache-")
    atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)
    os.environ["LAYOUTGEN_CACHE_DIR"] = _CACHE

# Issue 31: layoutgen refuses specs and profiles that resolve outside the repository
# unless allowed; many tests write a spec into a temporary directory that names a
# profile elsewhere, as a user who allows it would.  The tests of the refusal itself
# delete the variable (test_source_confine.py, test_hostile_repo.py, test_fuzz_symlinks.py).
os.environ.setdefault("LAYOUTGEN_ALLOW_OUTSIDE", "1")

# CI runs the same examples every time (a red CI must be reproducible);
# developers' runs explore new ones and remember failures in .hypothesis/.
settings.register_profile("ci", derandomize=True, database=None)
if os.environ.get("CI"):
    settings.load_profile("ci")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden",
        action="store_true",
        default=False,
        help="rewrite golden files (tests/cases/**/*.out) from the current code",
    )


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-golden"))


@dataclass(frozen=True)
class Result:
    code: int
    stdout: str
    stderr: str


def run_cli(args: Sequence[str]) -> Result:
    """Run the layoutgen CLI in-process; exceptions other than exits propagate."""
    from layoutgen.cli import app

    result = CliRunner().invoke(app, list(args), catch_exceptions=False)
    return Result(result.exit_code, result.stdout, result.stderr)


@pytest.fixture
def cli() -> object:
    return run_cli
