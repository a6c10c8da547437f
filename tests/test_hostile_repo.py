"""A pull request is untrusted input: CI survives a hostile one (issue 31).

Each test builds the repository a pull request would make: a base commit
(a valid layout, its profile, the rendered out/) cloned, and on top of it a
commit of everything a hostile author can put in a repository: a regular
expression that hangs a backtracking matcher, specs and profiles that are
symbolic links out of the repository (and into ``.git``, where CI keeps its
token), links in ``out/`` (the lock, a generated file, a directory, out/
itself), a ``templates/`` directory reaching for Python internals, and
``diff`` arguments git would read as options or paths leaving the repository.

Then it runs what the docs' pre-commit and CI recipes give (docs/how-to/pre-commit.md, git-ops.md):
the pre-commit hooks through the real ``pre-commit`` tool (as
tests/test_precommit.py does), ``layoutgen validate``, ``render --check`` and
the ``diff`` loop; plus ``render --templates``.  Each command must end (a
subprocess timeout), exit 0, 1 or 2 with no traceback; the canary files
outside the repository must be unchanged, and their content in no output.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from test_precommit import HookRepo, _commit_all, _git_init, _ok, _write_config, hook_repo

from layoutgen.inputs import source

__all__ = ["hook_repo"]  # the session fixture, shared with test_precommit.py

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "layouts" / "beelink-cpu-only.yaml"
PROFILE = "models/gemma-4-26b-a4b-q5_k_m.yaml"
#: a command that runs longer than this hangs CI (each ends in about a second)
TIMEOUT_S = 120
CANARY = "canary-3b7e0d"
BOMB = "(.*)*X"


@dataclass(frozen=True)
class PullRequest:
    path: Path
    env: dict[str, str]
    canaries: dict[Path, tuple[bytes, int]]  # outside the repository: content, mtime


def _canary(folder: Path, name: str) -> Path:
    path = folder / name
    path.write_text(f"{CANARY} {name}: root:$6$salt$hash:19000:0:99999:7:::\nTOKEN: ghs_{name}\n")
    return path


def _run(pr: PullRequest, *args: str) -> subprocess.CompletedProcess[str]:
    """One CI step: ended within the timeout, no traceback, no canary in its output."""
    proc = subprocess.run(
        list(args),
        cwd=pr.path,
        env=pr.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    shown = f"{' '.join(args)} exited {proc.returncode}:\n{proc.stdout}"
    assert "Traceback" not in proc.stdout, shown
    assert CANARY not in proc.stdout and "ghs_" not in proc.stdout, shown
    assert proc.returncode in (0, 1, 2), shown
    return proc


def layoutgen(pr: PullRequest, *args: str) -> subprocess.CompletedProcess[str]:
    code = "from layoutgen.cli import main; main()"
    return _run(pr, sys.executable, "-c", code, *args)


def _untouched(pr: PullRequest) -> None:
    for path, (content, mtime) in pr.canaries.items():
        assert path.read_bytes() == content, f"{path} was written"
        assert path.stat().st_mtime_ns == mtime, f"{path} was written"
    assert not [p for p in pr.path.parent.rglob("PWNED*")], "a hostile command ran"


@pytest.fixture
def pull_request(tmp_path: Path, hook_repo: HookRepo) -> PullRequest:
    env = {k: v for k, v in hook_repo.env.items() if k != source.ALLOW_OUTSIDE_ENV}
    outside = tmp_path / "outside"  # the CI machine's other files
    outside.mkdir()
    (outside / "dir").mkdir()
    secrets = [_canary(outside, n) for n in ("shadow", "profile", "lock", "plan", "environ")]
    _canary(outside / "dir", "gemma4-26b.service")

    base = tmp_path / "base"
    (base / "layouts" / "models").mkdir(parents=True)
    shutil.copy2(SPEC, base / "layouts" / "spec.yaml")
    shutil.copy2(SPEC.parent / PROFILE, base / "layouts" / PROFILE)
    _git_init(base, env)
    _write_config(base, hook_repo)
    code = "from layoutgen.cli import main; main()"
    _ok([sys.executable, "-c", code, "render"], base, env)
    _commit_all(base, env, "layouts and out/")

    pr = tmp_path / "pr"
    _ok(["git", "clone", "-q", str(base), str(pr)], tmp_path, env)
    _ok(["git", "config", "user.name", "mallory"], pr, env)
    _ok(["git", "config", "user.email", "m@layoutgen.invalid"], pr, env)
    # what actions/checkout leaves in .git/config: the job's token
    with open(pr / ".git" / "config", "a") as f:
        f.write(f'[http "https://github.com/"]\n\textraheader = AUTHORIZATION: {CANARY} ghs_x\n')
    layouts = pr / "layouts"
    text = (layouts / "spec.yaml").read_text()
    # a regular expression that hangs a backtracking matcher
    (layouts / "bomb.yaml").write_text(
        text + f"    tensor_overrides: [{{pattern: '{BOMB}', device: host}}]\n"
    )
    # specs and profiles out of the repository, or into .git
    (layouts / "shadow.yaml").symlink_to(outside / "shadow")
    (layouts / "token.yaml").symlink_to("../.git/config")
    (layouts / "models" / "evil.yaml").symlink_to(outside / "profile")
    (layouts / "evil-link.yaml").write_text(text.replace(PROFILE, "models/evil.yaml"))
    (layouts / "evil-path.yaml").write_text(text.replace(PROFILE, str(outside / "profile")))
    (layouts / "evil-dotdot.yaml").write_text(text.replace(PROFILE, "../../outside/profile"))
    # a template directory reaching for Python internals
    shutil.copytree(ROOT / "templates", pr / "templates")
    unit = pr / "templates" / "systemd.service.j2"
    unit.write_text(
        "{{ cycler.__init__.__globals__.os.system('touch "
        + str(pr / "PWNED")
        + "') }}\n"
        + unit.read_text()
    )
    (pr / "templates" / "layout.md.j2").unlink()
    (pr / "templates" / "layout.md.j2").symlink_to(outside / "environ")
    _commit_all(pr, env, "a hostile pull request")
    canaries = {
        p: (p.read_bytes(), p.stat().st_mtime_ns) for p in outside.rglob("*") if p.is_file()
    }
    assert len(canaries) == len(secrets) + 1
    return PullRequest(pr, env, canaries)


OUT_HAZARDS = {
    "lock": lambda pr, outside: (pr / "out" / ".layoutgen.lock").symlink_to(outside / "lock"),
    "generated file": lambda pr, outside: _replace_link(
        pr / "out" / "beelink" / "plan.json", outside / "plan"
    ),
    "directory": lambda pr, outside: _replace_link(
        pr / "out" / "beelink" / "systemd", outside / "dir"
    ),
    "out itself": lambda pr, outside: _replace_link(pr / "out", outside / "dir"),
}


def _replace_link(path: Path, target: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink()
    path.symlink_to(target)


@pytest.mark.parametrize("hazard", sorted(OUT_HAZARDS))
def test_the_ci_recipes_survive_a_hostile_pull_request(
    pull_request: PullRequest, hazard: str
) -> None:
    pr = pull_request
    outside = pr.path.parent / "outside"
    OUT_HAZARDS[hazard](pr.path, outside)
    _commit_all(pr.path, pr.env, f"link in out/: {hazard}")

    # pre-commit's hooks, as docs/how-to/pre-commit.md configures them
    hooks = _run(pr, sys.executable, "-m", "pre_commit", "run", "--all-files", "--verbose")
    assert hooks.returncode == 1, hooks.stdout  # the pull request fails its checks
    # the bomb is refused at its line, not run
    line = len((pr.path / "layouts" / "spec.yaml").read_text().splitlines()) + 1
    assert re.search(rf"layouts/bomb\.yaml:{line}:\d+: error: .*nested quantifiers", hooks.stdout)

    # the plain CI steps
    specs = sorted(p.relative_to(pr.path).as_posix() for p in (pr.path / "layouts").glob("*.yaml"))
    validated = layoutgen(pr, "validate", *specs)
    assert validated.returncode == 1
    for name in ("shadow", "evil-link", "evil-path", "evil-dotdot"):
        assert re.search(
            rf"layouts/{name}\.yaml:[\d:]* ?error: .*resolves outside", validated.stdout
        )
    assert "layouts/token.yaml: error: the file resolves into the repository's .git" in (
        validated.stdout
    )
    checked = layoutgen(pr, "render", "--check")
    assert checked.returncode == 1
    checked_one = layoutgen(pr, "render", "--check", "layouts/spec.yaml")
    assert checked_one.returncode == 1
    assert re.search(r"symbolic link|resolves outside", checked_one.stdout), checked_one.stdout
    rendered = layoutgen(pr, "render", "layouts/spec.yaml")
    assert rendered.returncode == 1

    # render with the pull request's templates
    templated = layoutgen(pr, "render", "--check", "--templates", "templates", "layouts/spec.yaml")
    assert templated.returncode == 1
    _untouched(pr)

    # the diff loop of docs/how-to/git-ops.md over every spec, then arguments git would misread
    for spec in specs:
        base = f"origin/main:{spec}"
        exists = subprocess.run(["git", "cat-file", "-e", base], cwd=pr.path, env=pr.env)
        if exists.returncode == 0:
            layoutgen(pr, "diff", base, spec)
    for old in (
        "--output=PWNED:layouts/spec.yaml",
        "-oPWNED:layouts/spec.yaml",
        "HEAD:../outside/shadow",
        f"HEAD:{outside / 'shadow'}",
        "HEAD:../../../../../../etc/passwd",
    ):
        proc = layoutgen(pr, "diff", "--", old, "layouts/spec.yaml")
        assert proc.returncode == 1
        assert proc.stdout.startswith(f"error: {old}: "), proc.stdout
    _untouched(pr)


def test_the_base_repository_passes_the_same_recipes(tmp_path: Path, hook_repo: HookRepo) -> None:
    """The checks above fail for the hostile content, not for the recipes: a clean
    clone passes every one, with no --allow-outside."""
    env = {k: v for k, v in hook_repo.env.items() if k != source.ALLOW_OUTSIDE_ENV}
    base = tmp_path / "base"
    (base / "layouts" / "models").mkdir(parents=True)
    shutil.copy2(SPEC, base / "layouts" / "spec.yaml")
    shutil.copy2(SPEC.parent / PROFILE, base / "layouts" / PROFILE)
    alias = base / "layouts" / "models" / "alias.yaml"  # a link inside is fine
    alias.symlink_to(Path(PROFILE).name)
    _git_init(base, env)
    _write_config(base, hook_repo)
    pr = PullRequest(base, env, {})
    assert layoutgen(pr, "render", "layouts/spec.yaml").returncode == 0
    _commit_all(base, env, "layouts and out/")
    hooks = _run(pr, sys.executable, "-m", "pre_commit", "run", "--all-files")
    assert hooks.returncode == 0, hooks.stdout
    validated = layoutgen(pr, "validate", "layouts/spec.yaml", "layouts/models/alias.yaml")
    assert validated.returncode == 0, validated.stdout
    assert layoutgen(pr, "render", "--check", "layouts/spec.yaml").returncode == 0
    assert layoutgen(pr, "diff", "HEAD:layouts/spec.yaml", "layouts/spec.yaml").returncode == 0
    assert not os.path.lexists(base / "out" / ".layoutgen.lock")
