"""Git-ops pull (opt-in, ``host.gitops``): a ``layoutgen-pull.service`` and ``.timer``.

The timer (``OnActiveSec=1min`` after it starts, at boot or when apply enables
it, then ``OnUnitInactiveSec`` = the interval) starts the service, which runs
``layoutgen apply --pull``: fetch the branch the running generation's
``host.gitops`` names into the state directory's checkout, refuse a commit that
is not a fast-forward of the deployed one (a force-push, or a branch moved back,
is never deployed by a timer), check it out and apply the spec from it.  git
and systemd's timers do the work; layoutgen only decides.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from layoutgen.errors import LayoutgenError
from layoutgen.render.validate import Validated

UNIT = "layoutgen-pull"
TEMPLATES = ("layoutgen-pull.service.j2", "layoutgen-pull.timer.j2")


class PullError(LayoutgenError):
    """A fetch that failed, or a commit that is not a fast-forward of the deployed one."""


def checkout_dir(state: Path) -> Path:
    return state / "checkout"


def units(v: Validated, spec: Path) -> dict[str, str]:
    """The pull units (relative to the host folder), or none without ``host.gitops``."""
    g = v.spec.host.gitops
    if g is None:
        return {}
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    from layoutgen.render import quoting
    from layoutgen.render.artifacts import default_templates, header

    scope = v.spec.host.deploy.scope
    exe = shutil.which("layoutgen") or str(Path(sys.argv[0]).absolute())
    argv = [exe, "apply", "--pull", *(["--user"] if scope == "user" else [])]
    env = ImmutableSandboxedEnvironment(
        loader=jinja2.FileSystemLoader(str(default_templates())),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )
    ctx = {
        "header": header(str(spec)),
        "exec_start": quoting.systemd_line(argv),
        "repo": g.repo,
        "branch": g.branch,
        "interval": g.interval,
        "wanted_by": "multi-user.target" if scope == "system" else "default.target",
        "timers": "timers.target",
    }
    out: dict[str, str] = {}
    for name in TEMPLATES:
        text = env.get_template(name).render(ctx)
        out[f"systemd/{name.removesuffix('.j2')}"] = text if text.endswith("\n") else text + "\n"
    return out


def _git(*args: str, cwd: Path | None = None) -> str:
    try:
        done = subprocess.run(
            ["git", *args],
            cwd=cwd,
            capture_output=True,
            text=True,
            check=False,
            timeout=300,
            env={**os.environ, "GIT_TERMINAL_PROMPT": "0"},
        )
    except FileNotFoundError:
        raise PullError("git not found: the pull service needs it") from None
    if done.returncode != 0:
        raise PullError(f"git {' '.join(args)}: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout.strip()


def pull(checkout: Path, repo: str, branch: str, deployed: str) -> tuple[str, bool]:
    """Fetch ``branch`` into ``checkout``; (commit, changed).  Refuses a non-fast-forward."""
    if not (checkout / ".git").is_dir():
        checkout.parent.mkdir(parents=True, exist_ok=True)
        _git("clone", "--quiet", "--branch", branch, "--", repo, str(checkout))
    else:
        _git(
            "fetch",
            "--quiet",
            "--",
            repo,
            f"+refs/heads/{branch}:refs/layoutgen/fetched",
            cwd=checkout,
        )
        _git("checkout", "--quiet", "--detach", "refs/layoutgen/fetched", cwd=checkout)
    commit = _git("rev-parse", "HEAD", cwd=checkout)
    if deployed and deployed != commit:
        try:
            _git("merge-base", "--is-ancestor", deployed, commit, cwd=checkout)
        except PullError:
            raise PullError(
                f"{repo} {branch} is at {commit[:12]}, which is not a fast-forward of the "
                f"deployed {deployed[:12]}; the pull service deploys only fast-forwards: "
                "run layoutgen apply by hand to deploy it"
            ) from None
    return commit, commit != deployed
