"""tests/tools/build_llama.sh shows progress while it builds (issue 15 item 9).

The build's own output goes to its log; one line per ~10 % of the steps
(ninja's ``[N/M]``, make's ``[ P%]``) reaches the terminal.  The function is
run from the script itself, on the shapes of lines ninja and make print.
"""

from __future__ import annotations

import itertools
import re
import subprocess
from pathlib import Path

from conftest import ROOT

SCRIPT = ROOT / "tests" / "tools" / "build_llama.sh"


def _progress(lines: list[str], tmp_path: Path) -> tuple[list[str], str]:
    body = SCRIPT.read_text()
    function = re.search(r"^progress\(\) \{\n.*?^\}\n", body, re.S | re.M)
    assert function is not None
    program = (
        "set -euo pipefail\n"
        f"work={tmp_path}; start=$SECONDS\n"
        "log() { printf 'build_llama: %s\\n' \"$*\" >&2; }\n"
        f"{function.group(0)}progress\n"
    )
    proc = subprocess.run(
        ["bash", "-c", program], input="\n".join(lines) + "\n", capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stderr.splitlines(), (tmp_path / "build.log").read_text()


def test_ninja_steps_print_about_every_ten_percent(tmp_path: Path) -> None:
    steps = [f"[{i}/200] Building CXX object ggml/src/x{i}.cpp.o" for i in range(1, 201)]
    shown, log = _progress(steps, tmp_path)
    percents = [int(re.search(r"(\d+) %", line)[1]) for line in shown]
    assert percents == sorted(percents) and percents[-1] == 100
    assert 10 <= len(percents) <= 11
    assert all(b - a >= 10 for a, b in itertools.pairwise(percents))
    assert log.splitlines() == steps  # everything kept in the log


def test_make_percentages_and_other_lines(tmp_path: Path) -> None:
    lines = [
        "-- configuring",
        "[  5%] Building C object a.o",
        "warning: x",
        "[ 50%] Built target b",
    ]
    shown, log = _progress(lines, tmp_path)
    assert [re.search(r"(\d+) %", s)[1] for s in shown] == ["5", "50"]
    assert log.splitlines() == lines
