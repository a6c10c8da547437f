"""The tensor-override pattern language against llama.cpp's own regex engine.

llama.cpp reads ``-ot PATTERN=BUFFER`` with ``std::regex`` (ECMAScript) and
``std::regex_search``.  A small C++ program (tests/tools/regex_oracle.cpp) does
exactly that, built with the C++ compiler ``make runtime`` builds llama.cpp
with; every pattern layoutgen accepts must be one std::regex accepts, and find
the same tensors.  Patterns are drawn from a grammar over tensor-name
characters (a fixed seed: the same ~2,000 every run) beside the forms users
write and the forms layoutgen writes.
"""

from __future__ import annotations

import random
import shutil
import subprocess
from pathlib import Path

import pytest

from layoutgen.core.override import expert_rules
from layoutgen.inputs.patterns import PatternError, compile_pattern

SOURCE = Path(__file__).parent / "tools" / "regex_oracle.cpp"

NAMES = [
    *(
        f"blk.{i}.ffn_{k}_exps.weight"
        for i in (0, 1, 3, 9, 10, 12, 19, 77, 78)
        for k in ("up", "gate", "down")
    ),
    *(f"blk.{i}.ffn_{k}_shexp.weight" for i in (3, 13) for k in ("up", "down")),
    "blk.0.ffn_gate_up_exps.weight",
    "blk.13.attn_kv_a_mqa.weight",
    "blk.2.attn_norm.weight",
    "blk.40.ffn_gate_inp.weight",
    "token_embd.weight",
    "output.weight",
    "output_norm.weight",
    "",
    "a",
    "ab",
    "ba.b1",
]
WRITTEN = [
    r"blk\.(3|4|1[0-2])\.ffn_(up|gate|down)_exps",
    r"blk\.1[2-9]\.ffn_.*",
    r"^blk\.(1[0-9]|2[0-3])\.",
    r"exps\.weight$|^token",
    r"blk\.\d{2}\.attn",
    r"[^.]+_shexp",
    r"(?:\.[a-z]){2}",
    r"^output\.weight$",
    r"ffn_(down|up)_exps",
    r"\.ffn_.*_exps\.=",
    r"blk\.7[0-9]?\.",
    r"n_(up|gate)_?e",
    r"x{0,3}kv_a",
    r"[\w]+\.\D",
    r"\s|\S\S\S\S\S\S\S\S\S\S\S\S\S\S\S\S\S\S\S\S\S\S\S\S\S\S\S\S",
    r"[a-c-]+x",
    r"\x2e[\x61-\x7a]",
    r"(up|gate)*?_",
]
ATOMS = ["a", "b", ".", r"\.", "[ab]", "[^a]", r"\d", r"\w", r"\W", "1", "blk", "_", "[0-9]"]
QUANTIFIERS = ["", "", "", "*", "+", "?", "{2}", "{1,3}", "{0,}", "*?", "+?"]


def _draw(rng: random.Random, depth: int = 0) -> str:
    out = ""
    for _ in range(rng.randint(1, 4)):
        if depth < 2 and rng.random() < 0.3:
            branches = [_draw(rng, depth + 1) for _ in range(rng.randint(1, 3))]
            item = rng.choice(["(", "(?:"]) + "|".join(branches) + ")"
        else:
            item = rng.choice(ATOMS)
        out += item + rng.choice(QUANTIFIERS)
    if rng.random() < 0.2:
        out = "^" + out
    if rng.random() < 0.2:
        out += "$"
    return out


def _accepted(patterns: list[str]) -> list[str]:
    out = []
    for text in patterns:
        try:
            compile_pattern(text)
        except PatternError:
            continue
        out.append(text)
    return out


def _oracle(tmp_path: Path, patterns: list[str], names: list[str]) -> list[str]:
    compiler = shutil.which("c++") or shutil.which("g++")
    assert compiler, "a C++ compiler (the one llama.cpp is built with: make runtime)"
    exe = tmp_path / "regex_oracle"
    subprocess.run(
        [compiler, "-std=c++17", "-O1", "-o", str(exe), str(SOURCE)], check=True, timeout=300
    )
    lines = [f"N{n}" for n in names] + [f"P{p}" for p in patterns]
    done = subprocess.run(
        [str(exe)], input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_llama_cpp_accepts_every_pattern_layoutgen_accepts_and_finds_the_same(
    tmp_path: Path,
) -> None:
    rng = random.Random(31)
    drawn = [_draw(rng) for _ in range(4000)]
    ours = [rule.pattern for rule in expert_rules({"CUDA0": [3, 4, 5, 10, 11, 77]})]
    patterns = _accepted(WRITTEN + ours + drawn)
    assert len(patterns) > 1500  # the grammar mostly draws accepted patterns
    names = NAMES + [
        "".join(rng.choice("ab.1_x") for _ in range(rng.randint(0, 8))) for _ in range(40)
    ]
    results = _oracle(tmp_path, patterns, names)
    assert len(results) == len(patterns)
    for text, line in zip(patterns, results, strict=True):
        assert not line.startswith("E "), f"std::regex refuses {text!r}: {line}"
        pattern = compile_pattern(text)
        ours_line = "".join("1" if pattern.search(n) else "0" for n in names)
        differ = [n for n, a, b in zip(names, ours_line, line, strict=False) if a != b]
        assert ours_line == line, (text, differ)


@pytest.mark.parametrize("text", ["(?P<n>a)", "a{,3}", "(?<=a)b", "a*+", r"\Z"])
def test_syntax_only_python_reads_is_refused(text: str) -> None:
    """Python's re takes these; ECMAScript does not (or reads them otherwise)."""
    with pytest.raises(PatternError):
        compile_pattern(text)
