"""Benchmarks time layoutgen with its bytecode cached, as issue 15 measures.

A ``PYTHONDONTWRITEBYTECODE`` in the caller's environment (this project's
dev VM sets it) would make every child process recompile each module edited
since its ``.pyc`` was written, on every run: 53 modules, about 75 ms of each
start-up after a day's edits.  ``cached()`` compiles the package once and
takes the variable out of this process's environment, which the measured
child processes inherit.
"""

from __future__ import annotations

import compileall
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def cached() -> None:
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    sys.dont_write_bytecode = False
    compileall.compile_dir(str(ROOT / "layoutgen"), quiet=1)
