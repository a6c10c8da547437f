"""Start-up time as ratios to F, the import of the design card's stack (issue 15).

F is ``python -c "import typer, pydantic, ruamel.yaml"``, measured in the same
run: the commands are timed in rounds, each round running F and every command
once, so that a machine busy for a moment slows all of them alike.  Medians.

Targets: ``validate`` of the largest example <= 2.0 F, ``render`` of every
example <= 2.5 F, ``inspect`` of a sparse 8-shard model <= 1.5 F and <= 64 MB,
``--help`` <= 0.8 F.  Each is printed warm (layoutgen's cache of parsed
profiles and compiled templates filled by an earlier run, as on a developer's
machine or a pre-commit hook's second run) and cold (``LAYOUTGEN_CACHE_DIR=off``,
a first run).  Printed, never asserted.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

ROUNDS = 21
TARGETS = {"validate": 2.0, "render": 2.5, "inspect": 1.5, "--help": 0.8}


def _run(argv: list[str], env: Mapping[str, str]) -> float:
    """Wall seconds of one run."""
    start = time.perf_counter()
    subprocess.run(
        argv, env=dict(env), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False
    )
    return time.perf_counter() - start


def _peak_mb(argv: list[str], env: Mapping[str, str]) -> float:
    """Peak RSS of one run of ``argv`` in a fresh measuring process (VmHWM at exit)."""
    probe = (
        "import resource, subprocess, sys; subprocess.run(sys.argv[1:], "
        "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe, *argv], env=dict(env), capture_output=True, text=True
    )
    return int(out.stdout.strip() or 0) / 1024


def main() -> None:
    from bench_inspect import build
    from bytecode import cached

    layoutgen = str(Path(sys.executable).with_name("layoutgen"))
    largest = max(sorted((ROOT / "layouts").glob("*.yaml")), key=lambda p: p.stat().st_size)
    examples = [str(p) for p in sorted((ROOT / "layouts").glob("*.yaml"))]
    tmp = Path(tempfile.mkdtemp(prefix="layoutgen-startup-"))
    try:
        model = build(tmp, ik=True)[0]
        commands = {
            "F": [sys.executable, "-c", "import typer, pydantic, ruamel.yaml"],
            "validate": [layoutgen, "validate", str(largest)],
            "render": [layoutgen, "render", "-o", str(tmp / "out"), *examples],
            "inspect": [layoutgen, "inspect", str(model), "-o", str(tmp / "profile.yaml")],
            "--help": [layoutgen, "--help"],
            # context, not targets: F's `import pydantic` is lazy (pydantic 2 loads its
            # validator stack at first use), so the stack in use costs more than F
            "stack in use": [
                sys.executable,
                "-c",
                "import typer, pydantic, ruamel.yaml\nclass A(pydantic.BaseModel):\n"
                "    x: int = 1\nA(x=2)\nimport os; os._exit(0)",
            ],
            "imports": [
                sys.executable,
                "-c",
                "import layoutgen.cli, layoutgen.render.validate, layoutgen.render.artifacts, "
                "layoutgen.render.outdir, jinja2\nimport os; os._exit(0)",
            ],
        }
        cached()  # bytecode written, as issue 15 measures (tests/bench/bytecode.py)
        warm = dict(os.environ, LAYOUTGEN_CACHE_DIR=str(tmp / "cache"))
        cold = dict(os.environ, LAYOUTGEN_CACHE_DIR="off")
        context = ("stack in use", "imports")
        for argv in commands.values():  # fill the cache, write out/ once
            _run(argv, warm)
        times: dict[tuple[str, str], list[float]] = {}
        for _ in range(ROUNDS):
            for name, argv in commands.items():
                for label, env in (("warm", warm), ("cold", cold)):
                    if name in ("F", *context) and label == "cold":
                        continue
                    times.setdefault((name, label), []).append(_run(argv, env))
        f = statistics.median(times[("F", "warm")])
        print(
            f"start-up, medians of {ROUNDS} interleaved rounds; F = import typer, pydantic, "
            f"ruamel.yaml = {f * 1000:.0f} ms (python -c pass not counted out)"
        )
        for name, target in TARGETS.items():
            w = statistics.median(times[(name, "warm")])
            c = statistics.median(times[(name, "cold")])
            extra = ""
            if name == "inspect":
                extra = f", {_peak_mb(commands[name], warm):.0f} MB peak RSS (target <= 64 MB)"
            met = "met" if w / f <= target else "NOT met"
            print(
                f"  {name:9} {w * 1000:4.0f} ms = {w / f:.2f} F warm, {c * 1000:4.0f} ms = "
                f"{c / f:.2f} F cold; target <= {target} F: {met} (warm){extra}"
            )
        use, imports = (statistics.median(times[(n, "warm")]) for n in context)
        print(
            f"  context: the stack in use (one pydantic model built, exit without teardown) "
            f"{use * 1000:.0f} ms = {use / f:.2f} F; render's imports alone (no work) "
            f"{imports * 1000:.0f} ms = {imports / f:.2f} F"
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
