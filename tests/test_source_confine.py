"""Specs and profiles that resolve outside the repository are refused unread (issue 31).

A link ``layouts/x.yaml -> /etc/shadow`` printed the file's lines as unknown
keys; a profile ``../../../home/ci/.netrc`` would too.  Each case points at a
canary file outside the repository and checks that its content is in no
output, and that ``--allow-outside`` (or ``LAYOUTGEN_ALLOW_OUTSIDE=1``) reads it.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from layoutgen.inputs import source

from conftest import ROOT, run_cli

SPEC = ROOT / "layouts" / "beelink-cpu-only.yaml"
PROFILE = "models/gemma-4-26b-a4b-q5_k_m.yaml"
CANARY = "canary-91e2: root:$6$secret:19000:0:99999:7:::\nTOKEN: do-not-print\n"


@pytest.fixture(autouse=True)
def _confined(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(source.ALLOW_OUTSIDE_ENV, raising=False)
    source.allow_outside(False)


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A git work tree with one valid layout and its profile; the working directory."""
    top = tmp_path / "repo"
    (top / "layouts" / "models").mkdir(parents=True)
    shutil.copy(SPEC, top / "layouts" / "spec.yaml")
    shutil.copy(ROOT / "layouts" / PROFILE, top / "layouts" / PROFILE)
    subprocess.run(["git", "init", "-q", str(top)], check=True)
    monkeypatch.chdir(top)
    return top


@pytest.fixture
def canary(tmp_path: Path) -> Path:
    path = tmp_path / "shadow"
    path.write_text(CANARY)
    return path


def _quiet(result: object) -> str:
    text = str(getattr(result, "stdout", "")) + str(getattr(result, "stderr", ""))
    assert "canary" not in text and "do-not-print" not in text and "Traceback" not in text
    return text


def test_the_repositorys_layouts_are_read(repo: Path) -> None:
    assert run_cli(["validate", "layouts/spec.yaml"]).code == 0


def test_a_spec_linked_out_of_the_repository_is_refused_unread(repo: Path, canary: Path) -> None:
    (repo / "layouts" / "x.yaml").symlink_to(canary)
    result = run_cli(["validate", "layouts/x.yaml"])
    assert result.code == 1
    text = _quiet(result)
    assert text.startswith(f"layouts/x.yaml: error: the file resolves outside {repo}")
    assert "--allow-outside" in text


@pytest.mark.parametrize("how", ["flag", "env"])
def test_allow_outside_reads_it(
    repo: Path, canary: Path, how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    (repo / "layouts" / "x.yaml").symlink_to(canary)
    args = ["validate", "layouts/x.yaml"]
    if how == "flag":
        args.insert(1, "--allow-outside")
    else:
        monkeypatch.setenv(source.ALLOW_OUTSIDE_ENV, "1")
    result = run_cli(args)
    assert result.code == 1  # read, and not a spec
    assert "resolves outside" not in result.stdout + result.stderr
    assert run_cli(["validate", "layouts/x.yaml"]).code == 1  # the flag does not stick
    if how == "flag":
        again = run_cli(["validate", "layouts/x.yaml"])
        assert "resolves outside" in again.stdout + again.stderr


@pytest.mark.parametrize("kind", ["link", "dotdot", "absolute"])
def test_a_profile_outside_the_repository_is_refused_unread(
    repo: Path, canary: Path, kind: str
) -> None:
    spec = repo / "layouts" / "spec.yaml"
    text = spec.read_text()
    if kind == "link":
        (repo / "layouts" / PROFILE).unlink()
        (repo / "layouts" / PROFILE).symlink_to(canary)
        ref = PROFILE
    else:
        ref = str(canary) if kind == "absolute" else "../../shadow"
        spec.write_text(text.replace(f"profile: {PROFILE}", f"profile: {ref}"))
    result = run_cli(["validate", "layouts/spec.yaml"])
    assert result.code == 1
    text = _quiet(result)
    assert f"error: models.gemma-4-26b-a4b-q5_k_m.profile: {ref!r} resolves outside" in text


def test_a_link_into_dot_git_is_refused(repo: Path) -> None:
    """actions/checkout keeps the job's token in .git/config."""
    (repo / ".git" / "config").write_text("[http]\n\textraheader = AUTHORIZATION: canary\n")
    (repo / "layouts" / "g.yaml").symlink_to("../.git/config")
    result = run_cli(["validate", "layouts/g.yaml"])
    assert result.code == 1
    assert "resolves into the repository's .git directory" in _quiet(result)


def test_a_link_inside_the_repository_is_followed(repo: Path) -> None:
    (repo / "layouts" / "alias.yaml").symlink_to("spec.yaml")
    assert run_cli(["validate", "layouts/alias.yaml"]).code == 0


def test_without_a_repository_the_specs_directory_is_the_bound(
    tmp_path: Path, canary: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    here = tmp_path / "plain"
    (here / "models").mkdir(parents=True)
    shutil.copy(ROOT / "layouts" / PROFILE, here / PROFILE)
    shutil.copy(SPEC, here / "spec.yaml")
    (here / "x.yaml").symlink_to(canary)
    monkeypatch.chdir(tmp_path)
    assert run_cli(["validate", "plain/spec.yaml"]).code == 0
    result = run_cli(["validate", "plain/x.yaml"])
    assert result.code == 1
    assert f"resolves outside {here}" in _quiet(result)


def test_render_refuses_an_output_root_linked_out_of_the_repository(
    repo: Path, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (repo / "out").symlink_to(elsewhere)
    for args in (["render"], ["render", "--check"]):
        result = run_cli([*args, "layouts/spec.yaml"])
        assert result.code == 1
        assert result.stderr.startswith(f"error: out resolves outside {repo}")
    assert list(elsewhere.iterdir()) == []
    assert run_cli(["render", "--allow-outside", "layouts/spec.yaml"]).code == 0
    assert (elsewhere / "beelink" / "plan.json").is_file()


def test_a_symbolic_link_loop_is_an_error(repo: Path) -> None:
    (repo / "layouts" / "a.yaml").symlink_to("b.yaml")
    (repo / "layouts" / "b.yaml").symlink_to("a.yaml")
    result = run_cli(["validate", "layouts/a.yaml"])
    assert result.code == 1
    assert "Traceback" not in result.stderr


def test_output_files_are_not_written_through_a_link(repo: Path, canary: Path) -> None:
    """``probe -o`` / ``inspect -o``: a link at the output path is an error, its
    target is left as it was."""
    link = repo / "host.yaml"
    link.symlink_to(canary)
    result = run_cli(["probe", "-o", str(link)])
    assert result.code == 1
    assert f"error: {link}: cannot write: a symbolic link" in result.stderr
    assert canary.read_text() == CANARY
    plain = repo / "plain.yaml"
    assert run_cli(["probe", "-o", str(plain)]).code == 0
    assert plain.read_text().startswith("host:") or "host:" in plain.read_text()
