"""The project's pre-commit hooks, run by the real pre-commit tool in a temporary repository.

The hook repository is a snapshot of this checkout (tracked and untracked,
not ignored files) committed once per session, so pre-commit installs the
hook environment once (PRE_COMMIT_HOME in a session temp dir); each test
then runs ``pre-commit run`` in its own repository holding a layout, the
profiles it names and the rendered out/.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

PRE_COMMIT = Path(sys.executable).parent / "pre-commit"
SPEC = "layouts/final.yaml"


def _git(repo: Path, *args: str) -> str:
    env = dict(
        os.environ,
        GIT_AUTHOR_NAME="t",
        GIT_AUTHOR_EMAIL="t@example.invalid",
        GIT_COMMITTER_NAME="t",
        GIT_COMMITTER_EMAIL="t@example.invalid",
    )
    return subprocess.run(
        ["git", *args], cwd=repo, check=True, capture_output=True, text=True, env=env
    ).stdout


@pytest.fixture(scope="session")
def hook_repo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, Path]:
    assert PRE_COMMIT.exists(), f"{PRE_COMMIT} missing: make test installs the test extra"
    snapshot = tmp_path_factory.mktemp("hooks")
    listed = _git(ROOT, "ls-files", "-co", "--exclude-standard").splitlines()
    for rel in listed:
        src = ROOT / rel
        if src.is_file():
            (snapshot / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, snapshot / rel)
    _git(snapshot, "init", "-q")
    _git(snapshot, "add", "-A")
    _git(snapshot, "commit", "-qm", "snapshot")
    return snapshot, _git(snapshot, "rev-parse", "HEAD").strip(), tmp_path_factory.mktemp("pch")


@pytest.fixture
def layout_repo(tmp_path: Path, hook_repo: tuple[Path, str, Path]) -> Path:
    hooks, rev, _ = hook_repo
    shutil.copytree(ROOT / "layouts" / "models", tmp_path / "layouts" / "models")
    shutil.copy(ROOT / "layouts" / "familiar-final.yaml", tmp_path / SPEC)
    (tmp_path / ".pre-commit-config.yaml").write_text(
        f"repos:\n- repo: {hooks}\n  rev: {rev}\n  hooks:\n"
        "  - id: layoutgen-validate\n  - id: layoutgen-render-check\n"
    )
    subprocess.run(
        [Path(sys.executable).parent / "layoutgen", "render", SPEC],
        cwd=tmp_path,
        check=True,
        capture_output=True,
    )
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-qm", "layout")
    return tmp_path


def _run(repo: Path, home: Path, *hook: str) -> subprocess.CompletedProcess[str]:
    _git(repo, "add", "-A")
    env = dict(os.environ, PRE_COMMIT_HOME=str(home))
    return subprocess.run(
        [str(PRE_COMMIT), "run", *hook, "--all-files"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_both_hooks_pass_on_a_clean_tree(
    layout_repo: Path, hook_repo: tuple[Path, str, Path]
) -> None:
    result = _run(layout_repo, hook_repo[2])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "layoutgen validate" in result.stdout and "layoutgen render --check" in result.stdout


def test_validate_hook_fails_with_located_messages(
    layout_repo: Path, hook_repo: tuple[Path, str, Path]
) -> None:
    spec = layout_repo / SPEC
    lines = spec.read_text().splitlines()
    row = next(i for i, line in enumerate(lines, 1) if line.strip().startswith("ctx: 32768"))
    spec.write_text(spec.read_text().replace("ctx: 32768", "ctx: lots", 1))
    result = _run(layout_repo, hook_repo[2], "layoutgen-validate")
    assert result.returncode == 1
    assert (
        f"{SPEC}:{row}:10: error: services.grandpa.ctx: expected a whole number, got 'lots'"
    ) in result.stdout


def test_render_check_hook_fails_on_a_stale_out(
    layout_repo: Path, hook_repo: tuple[Path, str, Path]
) -> None:
    spec = layout_repo / SPEC
    spec.write_text(spec.read_text().replace("port: 8002", "port: 8012", 1))
    result = _run(layout_repo, hook_repo[2], "layoutgen-render-check")
    assert result.returncode == 1
    assert "-PublishPort=127.0.0.1:8002:8002" in result.stdout
    assert "+PublishPort=127.0.0.1:8012:8012" in result.stdout
