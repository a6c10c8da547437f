"""The hooks in .pre-commit-hooks.yaml, run by the real pre-commit in a scratch git repository.

How: a session fixture snapshots this repository's working tree (tracked and
untracked files that git does not ignore) into a fresh git repository and
commits it; every test's project points its .pre-commit-config.yaml at that
path with `rev:` = the snapshot commit, exactly as a user points at the
GitHub URL and a tag. pre-commit clones it and `pip install .`s it
(`language: python`) into PRE_COMMIT_HOME, a session temporary directory, so
the hook environment is built once per session (pydantic, typer, ... from
PyPI or pip's cache) and reused by every test.

Why not `pre-commit try-repo /work/main`: (1) its temporary commit of local
changes takes only `git add -u` (modified tracked files) plus staged ones, so
an uncommitted new or changed .pre-commit-hooks.yaml that is not staged is
not seen, and with only untracked changes it uses HEAD as is; (2) it builds
its Store in a throwaway directory, ignoring PRE_COMMIT_HOME, so every call
would pip-install the hook environment again. The snapshot has neither problem.

git and pre-commit run with no global or system git configuration and
without inherited GIT_*/PRE_COMMIT_*/SKIP variables (pytest may itself run
from a git hook). pre-commit missing from the environment fails the tests.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "layouts" / "familiar-final.yaml"
# A layout the fit check refuses: layoutgen-validate must leave layouts/invalid/ alone.
REFUSED = ROOT / "layouts" / "invalid" / "familiar-final-explicit-20.yaml"
HOOKS = ("layoutgen-validate", "layoutgen-render-check")


@dataclass(frozen=True)
class HookRepo:
    path: Path
    rev: str
    env: dict[str, str]


@dataclass(frozen=True)
class Project:
    path: Path
    env: dict[str, str]
    host: str  # the single out/<host>/ the spec renders


def _run(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run a command; stdout and stderr merged, as a user sees them."""
    return subprocess.run(
        args,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=300,
        check=False,
    )


def _ok(args: list[str], cwd: Path, env: dict[str, str]) -> str:
    proc = _run(args, cwd, env)
    assert proc.returncode == 0, f"{' '.join(args)} exited {proc.returncode}:\n{proc.stdout}"
    return proc.stdout


def _git_init(path: Path, env: dict[str, str]) -> None:
    _ok(["git", "init", "-q", "-b", "main"], path, env)
    _ok(["git", "config", "user.name", "layoutgen tests"], path, env)
    _ok(["git", "config", "user.email", "tests@layoutgen.invalid"], path, env)
    _ok(["git", "config", "commit.gpgsign", "false"], path, env)


def _commit_all(path: Path, env: dict[str, str], message: str) -> None:
    _ok(["git", "add", "-A"], path, env)
    _ok(["git", "commit", "-q", "-m", message], path, env)


def pre_commit(project: Project, *args: str) -> subprocess.CompletedProcess[str]:
    return _run([sys.executable, "-m", "pre_commit", *args], project.path, project.env)


def layoutgen(cwd: Path, env: dict[str, str], *args: str) -> str:
    """The layoutgen under test (this checkout), as `make render` runs it."""
    code = "from layoutgen.cli import main; main()"
    return _ok([sys.executable, "-c", code, *args], cwd, env)


@pytest.fixture(scope="session")
def hook_repo(tmp_path_factory: pytest.TempPathFactory) -> HookRepo:
    if importlib.util.find_spec("pre_commit") is None:
        pytest.fail(
            f"pre-commit is not installed for {sys.executable}; these tests run the real tool: "
            "pip install pre-commit (it is part of the test extra, `make test` installs it)",
            pytrace=False,
        )
    base = tmp_path_factory.mktemp("precommit")
    gitconfig = base / "gitconfig"
    gitconfig.write_text("")
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("GIT_", "PRE_COMMIT")) and k != "SKIP"
    }
    env |= {
        "GIT_CONFIG_GLOBAL": str(gitconfig),
        "GIT_CONFIG_NOSYSTEM": "1",
        "PRE_COMMIT_HOME": str(base / "pre-commit-home"),
        "PRE_COMMIT_COLOR": "never",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }

    # The working tree as it is now, committed: what a user gets at `rev:`.
    snapshot = base / "layoutgen"
    listed = _ok(["git", "ls-files", "-z", "-co", "--exclude-standard"], ROOT, env)
    for name in sorted(set(filter(None, listed.split("\0")))):
        src = ROOT / name
        if src.is_file():  # a tracked file deleted in the working tree is left out
            (snapshot / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, snapshot / name)
    assert (snapshot / ".pre-commit-hooks.yaml").is_file()
    _git_init(snapshot, env)
    _commit_all(snapshot, env, "snapshot of the working tree")
    rev = _ok(["git", "rev-parse", "HEAD"], snapshot, env).strip()
    repo = HookRepo(snapshot, rev, env)

    # Build the hook environment once (pip install of layoutgen and its dependencies).
    scratch = base / "install"
    scratch.mkdir()
    _git_init(scratch, env)
    _write_config(scratch, repo)
    _commit_all(scratch, env, "config")
    _ok([sys.executable, "-m", "pre_commit", "install-hooks"], scratch, env)
    return repo


def _write_config(path: Path, repo: HookRepo) -> None:
    hooks = "".join(f"      - id: {hook}\n" for hook in HOOKS)
    (path / ".pre-commit-config.yaml").write_text(
        f"repos:\n  - repo: {repo.path}\n    rev: {repo.rev}\n    hooks:\n{hooks}"
    )


@pytest.fixture
def project(tmp_path: Path, hook_repo: HookRepo) -> Project:
    """A clean repository: one spec, its profiles, a refused layout, rendered out/, committed."""
    path = tmp_path / "project"
    (path / "layouts" / "invalid").mkdir(parents=True)
    shutil.copy2(SPEC, path / "layouts" / "x.yaml")
    shutil.copy2(REFUSED, path / "layouts" / "invalid" / REFUSED.name)
    shutil.copytree(ROOT / "layouts" / "schema", path / "layouts" / "schema")
    profiles = re.findall(r"^\s+profile:\s*(\S+)", SPEC.read_text(), re.MULTILINE)
    assert profiles, f"{SPEC} names no model profiles"
    for profile in profiles:
        (path / "layouts" / profile).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(SPEC.parent / profile, path / "layouts" / profile)
    _git_init(path, hook_repo.env)
    _write_config(path, hook_repo)
    layoutgen(path, hook_repo.env, "render")
    (host,) = [p.name for p in (path / "out").iterdir() if p.is_dir()]
    _commit_all(path, hook_repo.env, "layouts and out/")
    return Project(path, hook_repo.env, host)


def _hook_line(output: str, name: str) -> str:
    (line,) = [ln for ln in output.splitlines() if ln.startswith(f"{name}...")]
    return line


def test_both_hooks_pass_on_a_clean_tree(project: Project) -> None:
    proc = pre_commit(project, "run", "--all-files", "--verbose")
    assert proc.returncode == 0, proc.stdout
    assert _hook_line(proc.stdout, "layoutgen validate").endswith("Passed")
    assert _hook_line(proc.stdout, "layoutgen render --check").endswith("Passed")
    # validate got the spec and its profiles, not the refused layout or the schemas
    # (no warning: the example pins its image to the build it names)
    assert "layouts/x.yaml: valid (3 services)\n" in proc.stdout
    assert "layouts/models/glm-5.1-iq3_ks.yaml: valid (model profile)" in proc.stdout
    assert "layouts/invalid/" not in proc.stdout
    assert "up to date" in proc.stdout


def test_validate_fails_with_located_errors(project: Project) -> None:
    spec = project.path / "layouts" / "x.yaml"
    lines = spec.read_text().splitlines(keepends=True)
    # break the first worker's role, remembering where and in which service
    index = next(i for i, ln in enumerate(lines) if re.match(r"\s+role: worker\b", ln))
    service = next(
        m.group(1) for ln in reversed(lines[:index]) if (m := re.match(r"  ([a-z0-9-]+):\s*$", ln))
    )
    column = lines[index].index("worker") + 1
    lines[index] = lines[index].replace("role: worker", "role: wroker", 1)
    spec.write_text("".join(lines))
    _ok(["git", "add", "layouts/x.yaml"], project.path, project.env)

    proc = pre_commit(project, "run", "layoutgen-validate")  # the staged files, as on commit
    assert proc.returncode == 1, proc.stdout
    assert _hook_line(proc.stdout, "layoutgen validate").endswith("Failed")
    assert (
        f"layouts/x.yaml:{index + 1}:{column}: error: services.{service}.role: expected one of "
        "'orchestrator', 'worker', 'batch' or 'embedding', got 'wroker'; did you mean 'worker'?"
    ) in proc.stdout.splitlines()
    assert "layouts/x.yaml: invalid (1 error)" in proc.stdout


def test_render_check_fails_on_a_hand_edited_out(project: Project) -> None:
    rendered = project.path / "out" / project.host / "layout.md"
    rendered.write_text(rendered.read_text() + "hand edit\n")
    _ok(["git", "add", "out"], project.path, project.env)

    proc = pre_commit(project, "run", "layoutgen-render-check")
    assert proc.returncode == 1, proc.stdout
    assert _hook_line(proc.stdout, "layoutgen render --check").endswith("Failed")
    assert "- exit code: 2" in proc.stdout
    output = proc.stdout.splitlines()
    assert f"--- a/{project.host}/layout.md" in output
    assert f"+++ b/{project.host}/layout.md" in output
    assert "-hand edit" in output
    assert "1 file(s) would change" in output


def test_commit_is_refused_until_out_is_rendered(project: Project) -> None:
    """`pre-commit install`, then a spec change committed without `layoutgen render`."""
    _ok([sys.executable, "-m", "pre_commit", "install"], project.path, project.env)
    spec = project.path / "layouts" / "x.yaml"
    text = spec.read_text()
    old = re.search(r"^\s+port: (\d+)", text, re.MULTILINE)
    assert old is not None
    new = str(int(old.group(1)) + 10)
    spec.write_text(text[: old.start(1)] + new + text[old.end(1) :])
    _ok(["git", "add", "layouts/x.yaml"], project.path, project.env)

    proc = _run(["git", "commit", "-m", "move a port"], project.path, project.env)
    assert proc.returncode != 0, proc.stdout
    assert _hook_line(proc.stdout, "layoutgen validate").endswith("Passed")
    assert _hook_line(proc.stdout, "layoutgen render --check").endswith("Failed")
    diff = proc.stdout.splitlines()
    assert any(ln.startswith(f"--- a/{project.host}/") for ln in diff)
    assert any(ln.startswith("-") and old.group(1) in ln for ln in diff)
    assert any(ln.startswith("+") and new in ln for ln in diff)

    layoutgen(project.path, project.env, "render")
    _ok(["git", "add", "out"], project.path, project.env)
    out = _ok(["git", "commit", "-m", "move a port"], project.path, project.env)
    assert _hook_line(out, "layoutgen render --check").endswith("Passed")
    log = _ok(["git", "log", "--format=%s"], project.path, project.env)
    assert log.splitlines()[0] == "move a port"
