"""`make bench`: figures and ratios, printed; never asserted.

Each benchmark is a function printing plain lines.  Timings are medians over
repeated cold processes (what a pre-commit hook or CI step pays), next to a
baseline measured on the same machine in the same run, so the ratio travels
between machines better than the absolute figure.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
RUNS = 15


def median_ms(cmd: list[str], runs: int = RUNS) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def _load(name: str) -> object | None:
    path = Path(__file__).parent / f"{name}.py"
    if not path.exists():
        return None
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def bytecode_as_installed() -> None:
    """Measure layoutgen as an installed copy runs: with its modules compiled.

    pip compiles a package's .py files at install time; an editable checkout
    writes __pycache__ on first import - unless PYTHONDONTWRITEBYTECODE is
    set (some sandboxes and CI images do), when every start recompiles all of
    layoutgen (~100 ms here).  The children then keep bytecode in a temporary
    PYTHONPYCACHEPREFIX, compiled up front, so nothing lands in the checkout.
    """
    if not os.environ.pop("PYTHONDONTWRITEBYTECODE", None):
        return
    prefix = tempfile.mkdtemp(prefix="layoutgen-bench-pyc-")
    atexit.register(shutil.rmtree, prefix, ignore_errors=True)
    os.environ["PYTHONPYCACHEPREFIX"] = prefix
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "layoutgen")], check=True)
    print(f"(PYTHONDONTWRITEBYTECODE was set; bytecode compiled into {prefix}, as installed)")


def main() -> int:
    bytecode_as_installed()
    for name in (
        "bench_startup",
        "bench_inspect",
        "bench_inspect_hf",
        "bench_solve",
        "bench_import",
    ):
        module = _load(name)
        if module is not None:
            module.main()  # type: ignore[attr-defined]
    return 0


if __name__ == "__main__":
    sys.exit(main())
