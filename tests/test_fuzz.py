"""Property: no mutated spec makes validate crash, hang, or point outside the file.

Every case starts from one of the example specs under layouts/ and mutates
what people do to YAML by hand (deleted keys, values of the wrong type, bad
sizes, unknown keys, broken text: stray brackets, tabs, cut lines) and what an
attacker does to a YAML reader: anchors and aliases (shared, recursive,
undefined, alias bombs), merge keys, tags, directives, deep nesting, huge
numbers, long lines and control characters; and hostile ``tensor_overrides``
patterns (nested quantifiers, overlapping alternatives, deep groups, syntax
only Python or only llama.cpp reads: issue 31).  Every run must end in "valid" (and
then plan and render without a traceback) or in diagnostics located inside the
file they name.

The normal run draws a small sample (derandomized in CI, see conftest.py).
``LAYOUTGEN_FUZZ_CASES=10000`` runs that many cases, goes on past a failure to
count every kind, and prints on stderr (``pytest -s``) how they ended and the
slowest case; the 20 slowest, the 10 largest and every 100th case then run
again as ``layoutgen validate`` processes under a 1 GiB address-space limit,
for the time and peak RSS of whole runs: the figures behind "each run <= 2 s
and <= 200 MB".  Nothing here asserts a time.
"""

from __future__ import annotations

import copy
import os
import resource
import signal
import subprocess
import sys
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from io import StringIO
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML

from layoutgen.errors import InvalidInput, LayoutgenError
from layoutgen.inputs.source import parse
from layoutgen.render.artifacts import render
from layoutgen.render.validate import validate_document
from layoutgen.solve.plan import to_json, to_text

LAYOUTS = Path(__file__).resolve().parent.parent / "layouts"
CASES = int(os.environ.get("LAYOUTGEN_FUZZ_CASES", "300"))
#: The long run counts every kind of failure instead of stopping at the first.
LONG = CASES > 1000
#: A case still running after this long has hung (the acceptance figure is 2 s).
HANG_S = 60


@dataclass(frozen=True)
class Seed:
    name: str
    text: str
    data: Any
    paths: tuple[tuple[Any, ...], ...]


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, value in node.items():
            out += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out += _paths(value, (*prefix, i))
    return out


def _seeds() -> list[Seed]:
    out = []
    for path in sorted(LAYOUTS.glob("*.yaml")):
        text = path.read_text(encoding="utf-8")
        data = YAML(typ="safe").load(text)
        out.append(Seed(path.name, text, data, tuple(_paths(data))))
    return out


SEEDS = _seeds()

VALUES = st.one_of(
    st.integers(min_value=-(2**40), max_value=2**40),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.none(),
    st.text(max_size=12),
    st.sampled_from(["96GiB", "96G", "lots", "-1MiB", "1.5B", "gpu9", "auto", "explicit"]),
    st.lists(st.integers(min_value=-3, max_value=100), max_size=3),
    st.dictionaries(st.sampled_from(["mode", "n", "layers", "x"]), st.integers(), max_size=2),
)


def _dump(data: Any) -> str:
    buf = StringIO()
    YAML(typ="safe").dump(data, buf)
    return buf.getvalue()


def _mutate_data(draw: st.DrawFn, seed: Seed) -> str:
    """Delete, replace or add values in the data, then write it out again."""
    data = copy.deepcopy(seed.data)
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        path = draw(st.sampled_from(seed.paths))
        parent: Any = data
        try:
            for part in path[:-1]:
                parent = parent[part]
            key = path[-1]
            parent[key]
        except (KeyError, IndexError, TypeError):
            continue
        if not isinstance(parent, dict | list):
            continue  # an earlier mutation turned this container into a scalar
        op = draw(st.sampled_from(["delete", "replace", "add"]))
        if op == "delete":
            del parent[key]
        elif op == "replace":
            parent[key] = draw(VALUES)
        elif isinstance(parent, dict):
            parent[draw(st.sampled_from(["ctxx", "gpu", "Port", "x"]))] = draw(VALUES)
    return _dump(data)


# -- text mutations, one per class of hostile YAML -------------------------------


def _value_line(draw: st.DrawFn, lines: list[str]) -> int | None:
    """A line holding ``key: value``, or None."""
    candidates = [i for i, line in enumerate(lines) if ": " in line and line.lstrip()[:1] != "#"]
    return draw(st.sampled_from(candidates)) if candidates else None


def _replace_value(draw: st.DrawFn, text: str, fragment: str) -> str:
    lines = text.split("\n")
    i = _value_line(draw, lines)
    if i is None:
        return text + fragment + "\n"
    head = lines[i][: lines[i].index(": ") + 2]
    lines[i] = head + fragment
    return "\n".join(lines)


def _insert_line(draw: st.DrawFn, text: str, line: str) -> str:
    lines = text.split("\n")
    i = draw(st.integers(min_value=0, max_value=len(lines)))
    return "\n".join([*lines[:i], line, *lines[i:]])


def broken_text(draw: st.DrawFn, text: str) -> str:
    pos = draw(st.integers(min_value=0, max_value=len(text)))
    how = draw(st.sampled_from(["cut", "insert", "dup"]))
    if how == "cut":
        return text[:pos] + text[pos + draw(st.integers(min_value=1, max_value=20)) :]
    if how == "insert":
        bad = draw(st.sampled_from([":", "[", "{", "\t", '"', "- ", "&a", "*b", "\n  x", "? "]))
        return text[:pos] + bad + text[pos:]
    lines = text.splitlines(keepends=True)
    i = draw(st.integers(min_value=0, max_value=max(len(lines) - 1, 0)))
    return "".join(lines[: i + 1] + lines[i:])


def aliases(draw: st.DrawFn, text: str) -> str:
    """Shared, recursive and undefined aliases."""
    kind = draw(st.sampled_from(["share", "recursive", "undefined", "twice", "self-list"]))
    lines = text.split("\n")
    i, j = _value_line(draw, lines), _value_line(draw, lines)
    if i is None or j is None:
        return text
    if kind == "share":  # anchor one value, alias it from another key
        cut = lines[i].index(": ") + 2
        lines[i] = lines[i][:cut] + "&v " + lines[i][cut:]
        lines[j] = lines[j][: lines[j].index(": ") + 2] + "*v"
        return "\n".join(lines)
    if kind == "recursive":
        return _replace_value(draw, text, draw(st.sampled_from(["&r [*r]", "&r {k: *r}"])))
    if kind == "undefined":
        return _replace_value(draw, text, "*nowhere")
    if kind == "twice":
        text = _replace_value(draw, text, "&t 1")
        return _replace_value(draw, text, "&t 2")
    return _insert_line(draw, text, "x: &l [a, *l]")


def bombs(draw: st.DrawFn, text: str) -> str:
    """A billion laughs of drawn depth and width, as extra keys or as a value."""
    depth = draw(st.integers(min_value=2, max_value=12))
    width = draw(st.integers(min_value=2, max_value=10))
    lines = [f"l0: &l0 [{', '.join(['x'] * width)}]"]
    lines += [f"l{d}: &l{d} [{', '.join([f'*l{d - 1}'] * width)}]" for d in range(1, depth)]
    if draw(st.booleans()):
        lines.append(f"bomb: *l{depth - 1}")
    return "\n".join(lines) + "\n" + text


def merges(draw: st.DrawFn, text: str) -> str:
    """Merge keys: of another mapping, of the mapping itself, of a scalar, of a list."""
    fragment = draw(
        st.sampled_from(
            [
                "&m {<<: *m}",
                "{<<: 1}",
                "{<<: [1, 2]}",
                "{<<: *base, port: 8099}",
                "{<<: [*base, *base], ctx: 4096}",
                "{<<: *base, <<: *base}",
            ]
        )
    )
    base = "base: &base {port: 8090, ctx: 2048, role: worker}\n"
    return base + _replace_value(draw, text, fragment)


TAGS = [
    "!!float",
    "!!int",
    "!!bool",
    "!!str",
    "!!null",
    "!!set",
    "!!omap",
    "!!pairs",
    "!!binary",
    "!!timestamp",
    "!!python/object/apply:os.system",
    "!!merge",
    "!!map",
    "!!seq",
    "!foo",
    "!",
    "!<tag:yaml.org,2002:int>",
    "!<!bar>",
]


def tags(draw: st.DrawFn, text: str) -> str:
    """A tag in front of an existing value, or in front of a value that cannot fit it."""
    lines = text.split("\n")
    i = _value_line(draw, lines)
    if i is None:
        return text
    tag = draw(st.sampled_from(TAGS))
    cut = lines[i].index(": ") + 2
    if draw(st.booleans()):
        lines[i] = lines[i][:cut] + tag + " " + lines[i][cut:]
    else:
        value = draw(st.sampled_from(["abc", "{a, b}", "[a: 1]", "2026-13-45", "aGVsbG8=", '""']))
        lines[i] = lines[i][:cut] + tag + " " + value
    return "\n".join(lines)


def directives(draw: st.DrawFn, text: str) -> str:
    head = draw(
        st.sampled_from(
            [
                "%YAML 1.2\n---\n",
                "%YAML 1.1\n---\n",
                "%YAML 2.0\n---\n",
                "%YAML 1.3\n---\n",
                "%YAML 1.2\n%YAML 1.2\n---\n",
                "%TAG !e! tag:example.com,2026:\n---\n",
                "%TAG !! tag:example.com,2026:\n---\n",
                "%FOO bar\n---\n",
                "---\n",
                "--- !!map\n",
                "",
            ]
        )
    )
    tail = draw(st.sampled_from(["", "...\n", "---\nmore: 1\n", "...\n%YAML 1.2\n---\nx: 1\n"]))
    return head + text + tail


def nesting(draw: st.DrawFn, text: str) -> str:
    depth = draw(st.sampled_from([10, 62, 63, 64, 65, 300, 10_000, 100_000]))
    style = draw(st.sampled_from(["list", "map", "block"]))
    if style == "list":
        fragment = "[" * depth + "]" * depth
    elif style == "map":
        fragment = "{a: " * depth + "x" + "}" * depth
    else:
        depth = min(depth, 1000)  # indentation grows quadratically in bytes
        fragment = "\n" + "".join(" " * (k + 2) + "-\n" for k in range(depth))
    return _replace_value(draw, text, fragment)


NUMBERS = [
    "9" * 19,
    "9" * 20,
    "9" * 400,
    "9" * 5000,
    "-" + "9" * 30,
    str(2**63 - 1),
    str(2**63),
    str(-(2**63)),
    "0x" + "f" * 100,
    "0o" + "7" * 40,
    "0b" + "1" * 100,
    "1_000_000_000_000_000_000_000",
    "1e400",
    "-.inf",
    ".nan",
    "9" * 400 + "GiB",
    '"' + "9" * 400 + 'GiB"',
    "1" + "0" * 30 + "MiB",
    "1025TiB",
    "0." + "0" * 5000 + "1GiB",
]


def numbers(draw: st.DrawFn, text: str) -> str:
    return _replace_value(draw, text, draw(st.sampled_from(NUMBERS)))


def long_lines(draw: st.DrawFn, text: str) -> str:
    size = draw(st.sampled_from([1_000, 100_000, 1_000_000]))
    where = draw(st.sampled_from(["comment", "plain", "quoted", "key"]))
    if where == "comment":
        return _insert_line(draw, text, "#" + "x" * size)
    if where == "key":
        return _insert_line(draw, text, "k" * size + ": 1")
    fragment = "y" * size if where == "plain" else '"' + "y" * size + '"'
    return _replace_value(draw, text, fragment)


CONTROL = ["\x00", "\x01", "\x07", "\x08", "\x0b", "\x0c", "\x1b", "\x7f", "\x85", "\x9f"]
CONTROL += ["\u2028", "\u2029", "\ufeff", "\ufffe", "\uffff", "\t", "\r", "\r\n", "\U0001f600"]


def control(draw: st.DrawFn, text: str) -> str:
    """Control characters raw in the text, or escaped inside a double-quoted string."""
    char = draw(st.sampled_from(CONTROL))
    if draw(st.booleans()):
        pos = draw(st.integers(min_value=0, max_value=len(text)))
        return text[:pos] + char + text[pos:]
    escaped = "".join(
        f"\\x{ord(c):02x}"
        if ord(c) < 0x100
        else f"\\u{ord(c):04x}"
        if ord(c) < 0x10000
        else f"\\U{ord(c):08x}"
        for c in char
    )
    return _replace_value(draw, text, '"a' + escaped + 'b"')


#: patterns that hang a backtracking matcher, patterns a linear matcher must still
#: read quickly, and syntax outside what layoutgen and llama.cpp read alike (issue 31)
HOSTILE_REGEXES = [
    "(.*)*X",
    "([a-z_.0-9]+)+X",
    "(.|.)*X",
    "((((.*)*)*)*)Z",
    "(a+)+$",
    "(a|aa)+$",
    r"(\w+\s?)+$",
    "(x+x+)+y",
    "(.*a){20}",
    "(?:a|a)*b",
    "(blk|blk\\.)*X",
    ".*a" * 30 + "X",
    ".*" * 300 + "Z",
    "(a|b)*a" + "[ab]" * 40,
    "x{0,1000}",
    "(ab){0,999}",
    "(?:[0-9]{1,3}){2}X",
    "|".join(str(i) for i in range(250)),
    "[^z]*" * 60 + "z",
    "(" * 32 + "a" + ")" * 32,
    "(" * 33 + "a" + ")" * 33,
    "(" * 500 + "a" + ")" * 500,
    "(?P<n>blk)(?P=n)",
    "(?i)BLK",
    "(?=blk)",
    "(?<!x)blk",
    r"\bblk\b",
    r"(a)\1",
    "a{,3}",
    "a*+",
    "[[:alpha:]]",
    r"\Z",
    r"\A",
    r"\p{L}",
    "[z-a]",
    "a{99999}",
    "a{2,1}",
    "\\",
    "[",
    "(",
    ")",
    "*",
    "{",
    "]",
    "^^blk$$",
    "blk\\.\u0661",
    "[\u0100-\uffff]+x",
    "a" * 1024,
    "a" * 1025,
    "(a|b)" * 200,
    "ffn_.*_exps",
    r"blk\.(3|4|1[0-2])\.ffn_(up|gate|down)_exps",
]
REGEX_ATOMS = ["a", ".", r"\.", "[a-z]", "[^.]", r"\d", r"\w", "blk", "(a|ab)", "(.|.)", "^", "$"]


@st.composite
def _composed_regex(draw: st.DrawFn) -> str:
    """A drawn pattern: atoms under quantifiers, wrapped in quantified groups."""
    out = "".join(
        draw(st.sampled_from(REGEX_ATOMS)) + draw(st.sampled_from(["", "*", "+", "?", "{2,5}"]))
        for _ in range(draw(st.integers(min_value=1, max_value=6)))
    )
    for _ in range(draw(st.integers(min_value=0, max_value=4))):
        out = f"({out})" + draw(st.sampled_from(["*", "+", "?", "{3}", "{0,40}", "|a"]))
    return out + draw(st.sampled_from(["", "X", "Z$"]))


def hostile_regex(draw: st.DrawFn, text: str) -> str:
    """A tensor_overrides rule with a hostile pattern, added to one service."""
    pattern = draw(st.one_of(st.sampled_from(HOSTILE_REGEXES), _composed_regex()))
    lines = text.split("\n")
    heads = [i for i, line in enumerate(lines) if line.rstrip() == "services:"]
    if not heads:
        return text
    keys = [
        i
        for i, line in enumerate(lines)
        if i > heads[0] and line[:2] == "  " and line[2:3].isalnum() and line.rstrip()[-1:] == ":"
    ]
    if not keys:
        return text
    at = draw(st.sampled_from(keys))
    quoted = "'" + pattern.replace("'", "''") + "'"
    rules = [f"{{pattern: {quoted}, device: host}}"]
    if draw(st.booleans()):  # behind a harmless rule: the second rule is read too
        rules.insert(0, r"{pattern: 'blk\.0\.ffn_up_exps', device: host}")
    lines.insert(at + 1, f"    tensor_overrides: [{', '.join(rules)}]")
    return "\n".join(lines)


MUTATIONS: dict[str, Callable[[st.DrawFn, str], str]] = {
    "broken-text": broken_text,
    "aliases": aliases,
    "bombs": bombs,
    "merges": merges,
    "tags": tags,
    "directives": directives,
    "nesting": nesting,
    "numbers": numbers,
    "long-lines": long_lines,
    "control": control,
    "hostile-regex": hostile_regex,
}
#: ``LAYOUTGEN_FUZZ_ONLY=hostile-regex`` (comma-separated) draws only those classes
ONLY = tuple(sorted(c for c in os.environ.get("LAYOUTGEN_FUZZ_ONLY", "").split(",") if c))
DRAWN = ONLY or tuple(sorted(MUTATIONS))


@dataclass(frozen=True)
class Case:
    seed: str
    classes: tuple[str, ...]
    text: str

    def __repr__(self) -> str:  # hypothesis prints this for a failing case
        return f"Case(seed={self.seed!r}, classes={self.classes!r}, text={self.text[:3000]!r})"


@st.composite
def cases(draw: st.DrawFn) -> Case:
    seed = draw(st.sampled_from(SEEDS))
    # The original text keeps comments, flow mappings and quoting; the data
    # route adds wrong types and missing or unknown keys.
    from_data = draw(st.booleans()) if not ONLY else False  # ONLY: each case has one
    text = _mutate_data(draw, seed) if from_data else seed.text
    classes = ["data"] if from_data else []
    for _ in range(draw(st.integers(min_value=0 if from_data else 1, max_value=2))):
        name = draw(st.sampled_from(DRAWN))
        text = MUTATIONS[name](draw, text)
        classes.append(name)
    return Case(seed.name, tuple(classes), text)


# -- the property ------------------------------------------------------------------


@dataclass
class Stats:
    outcomes: Counter[str] = field(default_factory=Counter)
    slowest: list[tuple[float, Case]] = field(default_factory=list)
    #: the long run goes on past a failure: "TypeError at layoutgen/x.py:12" -> (count, a case)
    failures: dict[str, tuple[int, Case]] = field(default_factory=dict)

    #: cases run again as processes: the largest texts, and every 100th case
    largest: list[Case] = field(default_factory=list)
    sample: list[Case] = field(default_factory=list)

    drawn: Counter[str] = field(default_factory=Counter)  # seeds and mutation classes

    def add(self, seconds: float, case: Case, outcome: str) -> None:
        self.outcomes[outcome] += 1
        self.drawn.update([case.seed, *case.classes])
        self.slowest = sorted([*self.slowest, (seconds, case)], key=lambda t: -t[0])[:20]
        self.largest = sorted([*self.largest, case], key=lambda c: -len(c.text))[:10]
        if sum(self.outcomes.values()) % 100 == 0:
            self.sample.append(case)

    def fail(self, exc: BaseException, case: Case) -> None:
        frames = traceback.extract_tb(exc.__traceback__)
        ours = [f for f in frames if "/layoutgen/" in f.filename] or frames
        where = f"{Path(ours[-1].filename).name}:{ours[-1].lineno}" if ours else "?"
        key = f"{type(exc).__name__} at {where}"
        count, first = self.failures.get(key, (0, case))
        self.failures[key] = (count + 1, first)


@contextmanager
def _hang_guard(seconds: int) -> Iterator[None]:
    """Fail a case that runs for ``seconds`` (a hang, not a slow case); POSIX main thread."""

    def hung(signum: int, frame: object) -> None:
        raise TimeoutError(f"a case ran for {seconds} s")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _lines(text: str) -> list[str]:
    """Lines as layoutgen counts them: CRLF and CR are newlines, nothing else is."""
    return text.replace("\r\n", "\n").replace("\r", "\n").split("\n")


def _check_located(case: Case, name: str, exc: InvalidInput) -> None:
    assert exc.diagnostics, "an invalid spec must say why"
    for diag in exc.diagnostics:
        assert diag.message
        if diag.file == name:
            lines = _lines(case.text)
        else:  # a file the spec refers to (a profile): located in that file
            lines = _lines(Path(diag.file).read_text(encoding="utf-8"))
        if diag.line == 0:  # a problem with the file as a whole (its size)
            assert "too large" in diag.message, diag
            continue
        assert 1 <= diag.line <= len(lines), diag
        assert 1 <= diag.col <= len(lines[diag.line - 1]) + 1, (diag, lines[diag.line - 1][:200])


def check_case(case: Case) -> str:
    """Validate one case as the CLI would; a valid one goes on to plan and render.

    Returns how it ended.  Rendering may refuse with a user-facing error (a
    LayoutgenError); anything else is a bug.
    """
    name = case.seed.replace(".yaml", ".fuzz.yaml")
    try:
        with _hang_guard(HANG_S):
            validated = validate_document(parse(case.text, name, LAYOUTS / name))
            to_text(validated.plan)
            to_json(validated.plan)
            try:
                render(validated, name)
            except LayoutgenError:
                return "valid, not rendered"
    except InvalidInput as exc:
        _check_located(case, name, exc)
        return "invalid"
    return "valid"


STATS = Stats()


@settings(
    max_examples=CASES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    # the small sample is the same every run, so that it reaches every example spec
    # and mutation class every time (a random 300 missed one now and then); the long
    # sweep explores
    derandomize=not LONG,
    database=None if not LONG else settings.default.database,
)
@given(cases())
def _run_case(case: Case) -> None:
    start = time.perf_counter()
    try:
        outcome = check_case(case)
    except Exception as exc:  # a traceback, a hang, or a diagnostic outside the file
        if not LONG:
            raise  # hypothesis shrinks it to the smallest case that fails
        STATS.fail(exc, case)
        outcome = "failed"
    STATS.add(time.perf_counter() - start, case, outcome)


def test_mutated_specs_never_crash_and_stay_located() -> None:
    _run_case()
    # Even the small sample starts from every example spec and mutates with every class.
    assert {seed.name for seed in SEEDS} <= set(STATS.drawn)
    assert set(DRAWN) <= set(STATS.drawn)
    if LONG:
        _report(STATS)
        assert not STATS.failures, "\n".join(
            f"{count} x {key}: {case!r}" for key, (count, case) in STATS.failures.items()
        )


# -- the long run's figures ------------------------------------------------------

# VmHWM, not ru_maxrss: Linux carries ru_maxrss across exec, so a child of a
# 200 MB pytest process would report at least 200 MB.
_CLI = """\
import atexit, re, resource, sys
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
atexit.register(lambda: sys.stderr.write("\\nmaxrss_kb=" + re.search(
    r"VmHWM:\\s+(\\d+)", open("/proc/self/status").read()).group(1) + "\\n"))
sys.argv = ["layoutgen", "validate", sys.argv[1]]
from layoutgen.cli import app  # main() leaves by os._exit, before atexit handlers
app()
"""


def _as_cli(case: Case, tmp: Path) -> tuple[float, int, str]:
    """(seconds, peak RSS in MB, last stderr line) of ``layoutgen validate`` on the case."""
    path = tmp / case.seed.replace(".yaml", ".fuzz.yaml")
    path.write_text(case.text, encoding="utf-8", newline="")
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", _CLI, path.name],
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=HANG_S,
        check=False,
    )
    seconds = time.perf_counter() - start
    if "Traceback" in proc.stderr:
        return seconds, 0, "traceback: " + proc.stderr.strip().splitlines()[-1][:100]
    rss = next(
        (int(line.split("=")[1]) for line in proc.stderr.splitlines() if "maxrss_kb=" in line), 0
    )
    return seconds, rss // 1024, proc.stderr.strip().splitlines()[0][:100]


def _report(stats: Stats) -> None:
    import shutil
    import tempfile

    again = [case for _, case in stats.slowest] + stats.largest + stats.sample
    tmp = Path(tempfile.mkdtemp(prefix="layoutgen-fuzz-"))
    try:
        shutil.copytree(LAYOUTS / "models", tmp / "models")
        runs = [(_as_cli(case, tmp), case) for case in again]
    finally:
        shutil.rmtree(tmp)
    seconds, case = stats.slowest[0]
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    (cli_s, _, _), cli_case = max(runs, key=lambda r: r[0][0])
    (_, cli_mb, _), mb_case = max(runs, key=lambda r: r[0][1])
    crashed = [end for (_, _, end), _ in runs if end.startswith("traceback")]
    lines = [
        f"fuzz: {sum(stats.outcomes.values())} cases from {len(SEEDS)} example specs: "
        + ", ".join(f"{n} {k}" for k, n in sorted(stats.outcomes.items())),
        f"fuzz: slowest case in process {seconds:.2f} s ({case.seed}, {'+'.join(case.classes)}); "
        f"peak RSS of the whole pytest process {peak} MB",
        f"fuzz: {len(runs)} cases (the 20 slowest, the 10 largest, every 100th) as "
        f"`layoutgen validate` processes: max {cli_s:.2f} s "
        f"({cli_case.seed}, {'+'.join(cli_case.classes)}), max peak RSS {cli_mb} MB "
        f"({mb_case.seed}, {'+'.join(mb_case.classes)}); {len(crashed)} with a traceback",
    ]
    lines += [f"fuzz: FAILED {count} x {key}" for key, (count, _) in stats.failures.items()]
    print("\n".join(lines), file=sys.stderr)
