"""Hostile YAML: every attack on the reader ends in one located line, in bounded time and memory.

tests/cases/hostile-yaml/<attack>.yaml must fail ``layoutgen validate`` (exit 1)
and print exactly <attack>.out, one ``file:line:col: error:`` line; the first
line of each file says what it attacks (``pytest --update-golden`` rewrites the
.out files).  Attacks too big to commit (a 1 MB line, a 20 MB spec, a million
brackets, 100,001 values) are generated here.

Each case runs in its own process under an address-space limit and a timeout:
a bomb that expands, or a parser that recurses or loops, fails the test
instead of hanging it or the machine.  Both limits are generous sanity
bounds (a case takes well under a second and ~50 MB), not timings.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from specs import VALID

CASES = Path(__file__).parent / "cases" / "hostile-yaml"
HOSTILE = sorted(CASES.glob("*.yaml"))
MEMORY = 1 << 30  # RLIMIT_AS of each run
TIMEOUT = 60  # seconds; a run that needs this long has hung
RSS_SANITY_KB = 512 * 1024

# The CLI under an address-space limit, reporting its peak RSS on the way out.
# (VmHWM, not ru_maxrss: Linux carries ru_maxrss across exec, so a child of a big
# pytest process would report the parent's size.)
_PROGRAM = """\
import atexit, re, resource, sys
resource.setrlimit(resource.RLIMIT_AS, ({memory}, {memory}))
atexit.register(lambda: sys.stderr.write("\\nmaxrss_kb=" + re.search(
    r"VmHWM:\\s+(\\d+)", open("/proc/self/status").read()).group(1) + "\\n"))
sys.argv = ["layoutgen", *sys.argv[1:]]
from layoutgen.cli import app  # main() leaves by os._exit, before atexit handlers
app()
"""


@dataclass(frozen=True)
class Run:
    code: int
    stdout: str
    stderr: str
    maxrss_kb: int


def validate(*files: str, cwd: Path) -> Run:
    program = _PROGRAM.format(memory=MEMORY)
    proc = subprocess.run(
        [sys.executable, "-c", program, "validate", *files],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    m = re.search(r"maxrss_kb=(\d+)", proc.stderr)
    assert m is not None, proc.stderr[-2000:]  # a run killed before exiting: no report
    assert "Traceback" not in proc.stderr, proc.stderr[-4000:]
    return Run(proc.returncode, proc.stdout, proc.stderr, int(m.group(1)))


def _located_inside(line: str, root: Path) -> None:
    name, row, col, rest = line.split(":", 3)
    assert rest.startswith(" error: "), line
    lines = (root / name).read_text(encoding="utf-8").split("\n")
    assert 1 <= int(row) <= len(lines), line
    assert 1 <= int(col) <= len(lines[int(row) - 1]) + 1, line


def test_every_case_says_what_it_attacks() -> None:
    assert len(HOSTILE) >= 25
    firsts = [p.read_text(encoding="utf-8").split("\n")[0] for p in HOSTILE]
    assert all(f.startswith("# ") for f in firsts)
    assert len(set(firsts)) == len(firsts)


@pytest.mark.parametrize("case", HOSTILE, ids=[p.stem for p in HOSTILE])
def test_hostile_case(case: Path, update_golden: bool) -> None:
    run = validate(case.name, cwd=CASES)
    golden = case.with_suffix(".out")
    if update_golden:
        golden.write_text(run.stdout, encoding="utf-8")
    assert run.code == 1, run.stdout + run.stderr
    assert run.stdout == golden.read_text(encoding="utf-8")
    (line,) = run.stdout.splitlines()
    _located_inside(line, CASES)
    assert run.maxrss_kb < RSS_SANITY_KB


# -- generated attacks -----------------------------------------------------------


def _line_of(text: str, needle: str) -> tuple[int, int]:
    """1-based (line, col) of the first ``needle`` in ``text``."""
    index = text.index(needle)
    return text.count("\n", 0, index) + 1, index - (text.rfind("\n", 0, index) + 1) + 1


def _long_comment_and_bad_port(path: Path) -> str:
    text = VALID.replace("host:\n", "#" + "x" * 1_000_000 + "\nhost:\n", 1)
    text = text.replace("port: 8000", "port: 99999")
    path.write_text(text)
    row, col = _line_of(text, "99999")
    return (
        f"{path.name}:{row}:{col}: error: services.grandpa.port: must be at most 65535, got 99999"
    )


def _long_comment_and_broken_yaml(path: Path) -> str:
    text = VALID.replace("host:\n", "#" + "x" * 1_000_000 + "\nhost:\n", 1) + "broken: [\n"
    path.write_text(text)
    row = text.count("\n") + 1
    return (
        f"{path.name}:{row}:1: error: invalid YAML: while parsing a flow node, expected the "
        "node content, but found '<stream end>'"
    )


def _long_value(path: Path) -> str:
    text = VALID + "x: " + "y" * 1_000_000 + "\n"
    path.write_text(text)
    row, _ = _line_of(text, "\nx:")
    return (
        f"{path.name}:{row + 1}:1: error: (top level): unknown key 'x'; expected one of: "
        "host, models, runtimes, services, version"
    )


def _half_a_million_brackets(path: Path) -> str:
    text = "host: " + "[" * 500_000 + "]" * 500_000 + "\n"
    path.write_text(text)
    # The top-level mapping is level 1, so the 64th bracket (column 70) is level 65.
    return (
        f"{path.name}:1:70: error: nested more than 64 levels deep; a spec or profile needs "
        "fewer than 10: write this value flat"
    )


def _deep_block_list(path: Path) -> str:
    text = "host:\n" + "".join(" " * i + "-\n" for i in range(1, 1200))
    path.write_text(text)
    # Line n opens level n: line 65 is the first too deep.
    return (
        f"{path.name}:65:65: error: nested more than 64 levels deep; a spec or profile needs "
        "fewer than 10: write this value flat"
    )


def _twenty_megabytes(path: Path) -> str:
    path.write_text(VALID + ("# filler\n" * 2_300_000))
    size = path.stat().st_size
    return (
        f"{path.name}: error: file of {size} bytes is too large: a spec may hold at most 1 MiB "
        "and a model profile 4 MiB; check that this is the file you meant"
    )


def _two_megabyte_spec(path: Path) -> str:
    # Over the spec limit, under the profile limit: no top-level 'tensors:', so a spec.
    path.write_text(VALID + ("# filler\n" * 230_000))
    size = path.stat().st_size
    return (
        f"{path.name}: error: file of {size} bytes is too large: a spec may hold at most 1 MiB "
        "and a model profile 4 MiB; check that this is the file you meant"
    )


def _many_values(path: Path) -> str:
    text = "host: [" + "1," * 100_001 + "]\n"
    path.write_text(text)
    # Values 1-3 are the mapping, 'host' and the list: item 99,998 is value 100,001.
    col = len("host: [") + 2 * 99_997 + 1
    return (
        f"{path.name}:1:{col}: error: more than 100000 values in one file (a spec holds "
        "hundreds, an unfolded profile tens of thousands); check that this is the file you meant"
    )


def _number_of_5000_digits(path: Path) -> str:
    path.write_text("host:\n  name: " + "9" * 5000 + "\n")
    return (
        f"{path.name}:2:9: error: the number 9999999999999999999999999999999999999... is beyond "
        "64 bits, more than any size or count can be; write the real value"
    )


def _alias_bomb_30_levels(path: Path) -> str:
    lines = ["a0: &a0 [x, x]"]
    lines += [f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}]" for i in range(1, 31)]
    path.write_text("\n".join(lines) + "\n")
    # Level i holds 2^(i+2) - 1 values; levels 1..10 copy 8,164 in all, and the
    # first alias of level 11 (line 12) copies 4,095 more.
    return (
        f"{path.name}:12:12: error: aliases here copy more than 10000 values in all (an alias "
        "bomb?); write the shared values out, or share fewer"
    )


def _fifo(path: Path) -> str:
    os.mkfifo(path)  # a read would block until someone writes: never
    return f"{path.name}: error: not a regular file (a pipe, device or socket); give a YAML file"


def _unfolded_too_far(path: Path) -> str:
    entries = "".join(
        f'  - {{name: "blk.{{0..4095}}.t{i}.weight", type: "f32", shape: [4], bytes: 16}}\n'
        for i in range(30)
    )
    text = (
        "schema: 1\nname: many\narch: llama\nsource: generated\nhparams:\n  n_layer: 4096\n"
        "tensors:\n" + entries
    )
    path.write_text(text)
    row, col = _line_of(text, '"blk.{0..4095}.t24')
    return (
        f"{path.name}:{row}:{col}: error: tensors[24].name: more than 100000 tensors once "
        "unfolded (the largest models have about 2000); check the layer sets"
    )


GENERATED: dict[str, Callable[[Path], str]] = {
    "long-comment-and-bad-port": _long_comment_and_bad_port,
    "long-comment-and-broken-yaml": _long_comment_and_broken_yaml,
    "long-value": _long_value,
    "half-a-million-brackets": _half_a_million_brackets,
    "deep-block-list": _deep_block_list,
    "twenty-megabytes": _twenty_megabytes,
    "two-megabyte-spec": _two_megabyte_spec,
    "many-values": _many_values,
    "number-of-5000-digits": _number_of_5000_digits,
    "alias-bomb-30-levels": _alias_bomb_30_levels,
    "fifo": _fifo,
    "profile-unfolded-too-far": _unfolded_too_far,
}


@pytest.mark.parametrize("name", sorted(GENERATED))
def test_generated_attack(name: str, tmp_path: Path) -> None:
    path = tmp_path / f"{name}.yaml"
    expected = GENERATED[name](path)
    run = validate(path.name, cwd=tmp_path)
    assert (run.code, run.stdout) == (1, expected + "\n"), run.stderr[-2000:]
    assert run.maxrss_kb < RSS_SANITY_KB


def test_a_large_profile_is_read_as_a_profile(tmp_path: Path) -> None:
    """Between the spec and the profile limits, a file with top-level 'tensors:' is read."""
    from specs import PROFILE

    text = PROFILE.read_text(encoding="utf-8")
    filler = "".join(
        f"  line {i} of a long note on where the numbers came from\n" for i in range(40_000)
    )
    text = text.replace("source: |\n", "source: |\n" + filler, 1)
    assert "source: |\n" in PROFILE.read_text(encoding="utf-8")
    path = tmp_path / "big-profile.yaml"
    path.write_text(text)
    assert 1 << 20 < path.stat().st_size < 4 << 20
    run = validate(path.name, cwd=tmp_path)
    assert (run.code, run.stdout) == (0, ""), run.stdout + run.stderr[-2000:]
    assert "big-profile.yaml: valid (model profile)" in run.stderr
