"""Every command the documentation shows is run, and shows what the tool prints.

README.md and every page under docs/ (issue 15: stale examples mislead; issue 32:
every code block on every page that shows a command is run by a test).

A page's blocks run in order, as one reader's session, in a scratch copy of the
repository (``layouts/``, ``templates/``, ``out/`` rendered afresh, a git history with
``origin/main``),
with the page's fixtures from ``tests/docs_fixtures/PAGE/`` (the import how-to's
host-only spec and command line, the misspelt spec the commands page shows).  A
block "shows a command" when it is a ``sh``/``bash`` block, or a ``text``/``console``
block with a line that starts with ``$ ``:

- ``sh`` blocks run with bash (``-eu -o pipefail``) and must exit 0;
- ``text`` and ``console`` blocks are transcripts: each ``$`` line runs, and every line
  after it up to the next ``$`` must be a line the command printed (stdout and stderr,
  as a terminal shows them; ``...`` elides), with no traceback;
- what needs the live host runs against stand-ins that do what the page relies on:
  ``podman logs NAME`` prints a real start-up log (``tests/cases/calibrate``),
  ``systemctl`` and ``journalctl`` record their arguments, ``curl -r A-B -o FILE URL``
  takes the range from a "hub" of sparse GGUF shards; ``make TARGET`` is ``make -n``
  against this repository's Makefile (the target exists and its recipe expands), and
  ``.venv/bin/pytest OPTIONS`` collects with those options.

A block that needs the target host itself (``apply`` switching systemd units, NVML)
says which test runs its commands, on the line before its fence:
``<!-- docs-test: tests/e2e/test_apply_e2e.py -->``; that test must exist and run each
``layoutgen`` command and option the block shows.

Quoted diagnostics of the repository's own layouts (``layouts/x.yaml:L:C: error: …``
in prose) are what ``validate`` prints, byte for byte.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import ROOT, run_cli
from gguf_fixtures import Spec, write_model

FIXTURES = Path(__file__).parent / "docs_fixtures"
DOCS = ROOT / "docs"
#: generated copies of README.md and CHANGELOG.md (tests/test_docs_pages.py keeps them current)
COPIES = {"index.md", "changelog.md"}


def pages() -> list[Path]:
    found = [p for p in sorted(DOCS.rglob("*.md")) if p.relative_to(DOCS).as_posix() not in COPIES]
    return [ROOT / "README.md", *found]


def page_id(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


@dataclass(frozen=True)
class Block:
    lang: str
    body: str
    line: int  # of the opening fence, 1-based
    #: ``<!-- docs-test: tests/e2e/x.py -->`` on the line before the fence: commands
    #: that need the target host itself (systemd as PID 1, NVML), run by that test
    elsewhere: str | None = None

    @property
    def shows_command(self) -> bool:
        return self.lang in {"sh", "bash", "shell"} or (
            self.lang in {"text", "console"}
            and any(line.startswith("$ ") for line in self.body.splitlines())
        )


FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)


ELSEWHERE = re.compile(r"<!-- docs-test: (tests/\S+\.py) -->")


def blocks(text: str) -> list[Block]:
    out = []
    for m in FENCE.finditer(text):
        before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]  # the line above
        marked = ELSEWHERE.fullmatch(before.strip())
        elsewhere = marked.group(1) if marked else None
        out.append(Block(m.group(1), m.group(2), text.count("\n", 0, m.start()) + 1, elsewhere))
    return out


def check_elsewhere(page: str, block: Block) -> None:
    """A block run by another test: that test exists and runs each command the block
    shows (``layoutgen SUBCOMMAND``), so the page cannot name one it does not."""
    where = f"{page}:{block.line}"
    test = ROOT / str(block.elsewhere)
    assert test.is_file(), f"{where}: {block.elsewhere} does not exist"
    source = test.read_text(encoding="utf-8")
    for line in block.body.splitlines():
        words = line.split("#", 1)[0].split()
        if words[:1] == ["$"]:
            words = words[1:]
        if words[:1] == ["layoutgen"] and len(words) > 1:
            assert f"layoutgen {words[1]}" in source, (
                f"{where}: {block.elsewhere} runs no `layoutgen {words[1]}`"
            )
            for option in (w for w in words[2:] if w.startswith("--")):
                assert option in source, f"{where}: {block.elsewhere} never passes {option}"


# --- the scratch repository and the stand-ins -------------------------------------------

STUBS = {
    # make TARGET: the target exists in this repository's Makefile and its recipe expands
    "make": '#!/bin/sh\nexec {make} -n -C "$DOCS_ROOT" "$@" > /dev/null\n',
    "podman": (
        "#!/bin/sh\n"
        'echo "podman $*" >> "$DOCS_CALLS"\n'
        'if [ "$1" = logs ]; then cat "$DOCS_LOGS/$2.log"; fi\n'
    ),
    "systemctl": '#!/bin/sh\necho "systemctl $*" >> "$DOCS_CALLS"\n',
    "journalctl": '#!/bin/sh\necho "journalctl $*" >> "$DOCS_CALLS"\n',
    "curl": (
        "#!{python}\n"
        "import os, sys\n"
        "a = sys.argv[1:]\n"
        "lo, hi = (int(x) for x in a[a.index('-r') + 1].split('-'))\n"
        "out, url = a[a.index('-o') + 1], a[-1]\n"
        "with open(os.path.join(os.environ['DOCS_HUB'], url.rsplit('/', 1)[1]), 'rb') as f:\n"
        "    f.seek(lo)\n"
        "    data = f.read(hi - lo + 1)\n"
        "open(out, 'wb').write(data)\n"
    ),
}
#: the checkout's own .venv/bin, as the pages call it
VENV_STUBS = {
    "activate": 'export PATH="{bindir}:$PATH"\n',
    # collect only: the options exist; the page's pytest runs are the suite itself
    "pytest": '#!/bin/sh\ncd "$DOCS_ROOT" && exec {bindir}/pytest -q --co -p no:cacheprovider '
    '"$@" tests/test_cases.py > /dev/null\n',
    "python": '#!/bin/sh\ncd "$DOCS_ROOT" && exec {python} "$@" > /dev/null\n',
}


def _hub(into: Path) -> None:
    """Eight GGUF shards named as the profiles page's model, data regions sparse."""
    tensors = [
        Spec("token_embd.weight", (256, 1000), 14, 1000 * 210),
        *(Spec(f"blk.{i}.attn_q.weight", (256, 256), 2, 256 * 8 * 18) for i in range(6)),
        Spec("output.weight", (256, 1000), 14, 1000 * 210),
    ]
    kv = {
        "llama.block_count": (6, 4),
        "llama.embedding_length": (256, 4),
        "general.name": ("docs model", 8),
    }
    from gguf import GGUFValueType

    kv = {k: (v, GGUFValueType(t)) for k, (v, t) in kv.items()}
    paths = write_model(into / "GLM-5.1-IQ3_KS.gguf", "llama", kv, tensors, split_max_tensors=1)
    assert paths[0].name == "GLM-5.1-IQ3_KS-00001-of-00008.gguf"


@dataclass
class Session:
    repo: Path
    env: dict[str, str]
    calls: Path

    def bash(self, script: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", "-eu", "-o", "pipefail", "-c", script],
            cwd=self.repo,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=300,
        )


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


def session(tmp: Path, page: str = "") -> Session:
    repo = tmp / "repo"
    repo.mkdir()
    for name in ("layouts", "templates", "out"):
        shutil.copytree(ROOT / name, repo / name, symlinks=True)
    shutil.copy(ROOT / ".pre-commit-hooks.yaml", repo)
    # out/ as this tree renders it: whether the committed out/ is current is
    # test_render's question; the pages' `render --check` asks it of this copy
    bindir = Path(sys.executable).parent
    subprocess.run([str(bindir / "layoutgen"), "render"], cwd=repo, capture_output=True, check=True)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "-c", "user.name=docs", "-c", "user.email=docs@invalid", "add", "-A")
    _git(repo, "-c", "user.name=docs", "-c", "user.email=docs@invalid", "commit", "-qm", "docs")
    _git(repo, "update-ref", "refs/remotes/origin/main", "HEAD")
    fixtures = FIXTURES / Path(page).relative_to("docs").with_suffix("") if page else None
    if fixtures is not None and fixtures.is_dir():  # the page's own: tests/docs_fixtures/PAGE/
        shutil.copytree(fixtures, repo, dirs_exist_ok=True)

    stubs = tmp / "stubs"
    stubs.mkdir()
    make = shutil.which("make") or "make"
    for name, text in STUBS.items():
        (stubs / name).write_text(text.format(make=make, python=sys.executable))
        (stubs / name).chmod(0o755)
    venv = repo / ".venv" / "bin"
    venv.mkdir(parents=True)
    for name, text in VENV_STUBS.items():
        (venv / name).write_text(text.format(bindir=bindir, python=sys.executable))
        (venv / name).chmod(0o755)
    home = tmp / "home"
    (home / "models").mkdir(parents=True)
    _hub(home / "models")
    calls = tmp / "calls"
    env = {
        "PATH": f"{stubs}:{bindir}:/usr/bin:/bin",
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "COLUMNS": "100",
        "DOCS_ROOT": str(ROOT),
        "DOCS_CALLS": str(calls),
        "DOCS_LOGS": str(tmp / "logs"),
        "DOCS_HUB": str(home / "models"),
        "LAYOUTGEN_CACHE_DIR": str(tmp / "cache"),
        "GIT_AUTHOR_NAME": "docs",
        "GIT_AUTHOR_EMAIL": "docs@invalid",
        "GIT_COMMITTER_NAME": "docs",
        "GIT_COMMITTER_EMAIL": "docs@invalid",
    }
    (tmp / "logs").mkdir()
    # `podman logs grandpa`: seed 001's one-GPU start-up (layouts/glm51-3-cpu-moe-1gpu.yaml)
    shutil.copy(
        ROOT / "tests" / "cases" / "calibrate" / "seed001-1gpu.log", tmp / "logs" / "grandpa.log"
    )
    return Session(repo, env, calls)


def _transcript(s: Session, where: str, command: str, shown: list[str]) -> None:
    """``$ command`` and the lines shown after it: each shown line was printed."""
    result = s.bash(command)
    assert "Traceback" not in result.stdout, f"{where}: {command}\n{result.stdout}"
    assert result.returncode in (0, 1, 2), f"{where}: {command}\n{result.stdout}"
    printed = result.stdout.splitlines()
    for line in shown:
        if line.strip() != "...":
            assert line in printed, (
                f"{where} shows a line `{command}` no longer prints:\n{line}\n"
                f"it printed:\n{result.stdout}"
            )


def check_block(s: Session, page: str, block: Block) -> None:
    where = f"{page}:{block.line}"
    if block.lang in {"text", "console"}:
        # a transcript: each `$ ` line a command, the lines up to the next one its output
        steps: list[tuple[str, list[str]]] = []
        for line in block.body.splitlines():
            if line.startswith("$ "):
                steps.append((line[2:], []))
            elif steps:
                steps[-1][1].append(line)
        for command, shown in steps:
            _transcript(s, where, command, shown)
    else:
        result = s.bash(block.body)
        assert result.returncode == 0, f"{where}: exit {result.returncode}\n{result.stdout}"
        assert "Traceback" not in result.stdout, f"{where}\n{result.stdout}"


def pages_with_commands() -> list[Path]:
    """The pages that show a command (the others are checked by mkdocs --strict alone)."""
    return [p for p in pages() if any(b.shows_command for b in blocks(p.read_text()))]


@pytest.mark.slow
@pytest.mark.parametrize("page", pages_with_commands(), ids=page_id)
def test_every_command_on_the_page_runs_as_shown(page: Path, tmp_path: Path) -> None:
    commands = [b for b in blocks(page.read_text(encoding="utf-8")) if b.shows_command]
    assert commands
    for block in (b for b in commands if b.elsewhere):
        check_elsewhere(page_id(page), block)
    here = [b for b in commands if not b.elsewhere]
    if not here:
        return
    s = session(tmp_path, page_id(page) if page.parent != ROOT else "")
    for block in here:
        check_block(s, page_id(page), block)


def test_the_pages_show_commands() -> None:
    """The walk-through pages keep their commands (a test that finds none tests nothing)."""
    counts = {page_id(p): sum(b.shows_command for b in blocks(p.read_text())) for p in pages()}
    assert counts["README.md"] >= 5
    assert counts["docs/tutorial.md"] >= 10
    assert sum(counts.values()) >= 30


def test_a_command_block_that_fails_is_reported(tmp_path: Path) -> None:
    """The harness itself: a wrong line, a failing command and a missing target fail."""
    s = session(tmp_path, "docs/reference/cli.md")
    with pytest.raises(AssertionError, match="no longer prints"):
        check_block(
            s, "x", Block("text", "$ layoutgen validate layouts/tower-2x5060ti.yaml\nnope\n", 1)
        )
    second = "$ layoutgen --version\nlayoutgen 0.0.0\n"  # a transcript's second command
    with pytest.raises(AssertionError, match=r"layoutgen 0\.0\.0"):
        check_block(s, "x", Block("console", "$ true\n" + second, 1))
    with pytest.raises(AssertionError, match="exit 1"):
        check_block(s, "x", Block("sh", "layoutgen validate layouts/broken.yaml\n", 1))
    with pytest.raises(AssertionError, match="exit 2"):
        check_block(s, "x", Block("sh", "make no-such-target\n", 1))
    e2e = "tests/test_packaging.py"  # a test that runs no `layoutgen apply`
    with pytest.raises(AssertionError, match="runs no `layoutgen apply`"):
        check_elsewhere("x", Block("sh", "layoutgen apply x.yaml\n", 1, e2e))
    with pytest.raises(AssertionError, match="does not exist"):
        check_elsewhere("x", Block("sh", "layoutgen status\n", 1, "tests/nope.py"))


def test_the_stand_ins_do_what_the_pages_rely_on(tmp_path: Path) -> None:
    s = session(tmp_path)
    result = s.bash(
        "mkdir -p heads && curl -fL -r 0-4095 -o heads/GLM-5.1-IQ3_KS-00002-of-00008.gguf "
        "https://huggingface.co/ORG/REPO/resolve/main/GLM-5.1-IQ3_KS-00002-of-00008.gguf\n"
        "podman logs grandpa | grep -c 'buffer size'\n"
        "systemctl --user start glm.service\n"
    )
    assert result.returncode == 0, result.stdout
    assert (s.repo / "heads" / "GLM-5.1-IQ3_KS-00002-of-00008.gguf").stat().st_size == 4096
    assert int(result.stdout.split()[-1]) >= 4
    assert "systemctl --user start glm.service" in s.calls.read_text()


#: prose lines that quote a diagnostic of a bundled layout
QUOTED = re.compile(r"^(layouts/\S+\.yaml):\d+:\d+: (?:error|warning): .*$", re.MULTILINE)


def test_pages_quote_diagnostics_as_the_tool_prints_them() -> None:
    """Quotes of files the repository holds (the fixture ``layouts/broken.yaml`` is run
    above, in the scratch copy)."""
    lines = [
        m.group(0)
        for p in pages()
        for m in QUOTED.finditer(p.read_text(encoding="utf-8"))
        if (ROOT / m.group(1)).is_file()
    ]
    assert len(lines) >= 3  # the fit-check examples at least
    for spec in sorted({line.split(":", 1)[0] for line in lines}):
        result = run_cli(["validate", str(ROOT / spec)])
        printed = {x.replace(str(ROOT) + "/", "") for x in result.stdout.splitlines()}
        for line in (x for x in lines if x.startswith(spec + ":")):
            assert line in printed, f"a page quotes a line validate no longer prints:\n{line}"
