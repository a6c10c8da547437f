"""Property: no arrangement of symbolic links in a repository makes layoutgen read,
write or print a file outside it, crash or hang (issue 31).

Every case starts from one small repository (a layout, its profile, the rendered
``out/``) and replaces one to three of its paths, where a pull request can put
a link, with a link: the spec, the profile, the profiles' directory, a new
spec, ``out/`` itself, the lock, the host directory, a generated file, a
directory on the way to one, the manifest, a swap journal, a staging
directory, a file of the user's own.  Each link points at a canary file or
directory outside the repository, a FIFO, ``/dev/zero``,
``/proc/self/environ``, a missing file, itself, ``.git/config`` (where CI
keeps its token), or back inside the repository.  Then ``validate``,
``render --check`` and ``render`` run as CI runs them (the CLI, in process,
with no ``--allow-outside``): each must exit 0, 1 or 2 without a traceback,
print no canary, and leave every file outside the repository as it was.

The normal run draws a small seeded sample (``LAYOUTGEN_FUZZ_CASES``, default
60 here); ``make fuzz`` runs 10,000, goes on past a failure to count every
kind, and prints (``pytest -s``) how the cases ended and the slowest one.
Nothing here asserts a time; a case running for ``HANG_S`` is a failure.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import time
import traceback
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from layoutgen.inputs import source

from conftest import ROOT, run_cli

CASES = int(os.environ.get("LAYOUTGEN_FUZZ_CASES", "60"))
LONG = CASES > 1000
HANG_S = 20
CANARY = "canary-symlink-51d0"
SPEC = ROOT / "layouts" / "beelink-cpu-only.yaml"
PROFILE = "models/gemma-4-26b-a4b-q5_k_m.yaml"
HOST = "beelink"
UNIT = "gemma4-26b.service"

#: where a pull request can put a link (paths in the repository)
SLOTS = (
    "layouts/spec.yaml",
    f"layouts/{PROFILE}",
    "layouts/models",
    "layouts/x.yaml",
    "out",
    "out/.layoutgen.lock",
    f"out/{HOST}",
    f"out/{HOST}/plan.json",
    f"out/{HOST}/layout.md",
    f"out/{HOST}/systemd",
    f"out/{HOST}/systemd/{UNIT}",
    f"out/{HOST}/.layoutgen-manifest",
    f"out/.{HOST}.layoutgen-swap",
    f"out/.{HOST}.layoutgen-new-0123abcd",
    f"out/{HOST}/notes.txt",
)


def _targets(outside: Path, repo: Path) -> tuple[str, ...]:
    """What a link may point at (absolute, or relative to the link)."""
    return (
        str(outside / "secret"),
        str(outside / "secret.yaml"),
        str(outside / "dir"),
        str(outside / "fifo"),
        str(outside / "missing"),
        "/dev/zero",
        "/proc/self/environ",
        "SELF",  # the link itself: a loop
        str(repo / ".git" / "config"),
        str(repo / "layouts" / "spec.yaml"),  # inside: allowed where a spec is read
        "../../outside/secret",
    )


@contextmanager
def _hang_guard(seconds: int) -> Iterator[None]:
    def hung(signum: int, frame: object) -> None:
        raise TimeoutError(f"a case ran for {seconds} s")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _world(base: Path) -> tuple[Path, Path, Path]:
    """(pristine repository, the working copy's path, the outside folder)."""
    outside = base / "outside"
    (outside / "dir" / "systemd").mkdir(parents=True)
    secret = f"{CANARY}: root:$6$salt$hash:19000:0:99999:7:::\nTOKEN: {CANARY}\n"
    (outside / "secret").write_text(secret)
    (outside / "secret.yaml").write_text(f"host: {{name: {CANARY}}}\n{CANARY}: 1\n")
    for name in ("plan.json", "layout.md", UNIT, ".layoutgen-manifest", "spec.yaml"):
        (outside / "dir" / name).write_text(secret)
    (outside / "dir" / "systemd" / UNIT).write_text(secret)
    (outside / "dir" / PROFILE.split("/")[1]).write_text(secret)
    os.mkfifo(outside / "fifo")
    pristine = base / "pristine"
    (pristine / "layouts" / "models").mkdir(parents=True)
    (pristine / ".git").mkdir()  # what makes it a repository to layoutgen
    (pristine / ".git" / "config").write_text(f"[http]\n\textraheader = AUTH: {CANARY}\n")
    shutil.copy2(SPEC, pristine / "layouts" / "spec.yaml")
    shutil.copy2(SPEC.parent / PROFILE, pristine / "layouts" / PROFILE)
    return pristine, base / "repo", outside


def _snapshot(outside: Path) -> dict[str, tuple[bytes | None, int]]:
    found = {}
    for path in sorted(outside.rglob("*")):
        info = path.lstat()
        data = path.read_bytes() if path.is_file() and not path.is_symlink() else None
        found[str(path)] = (data, info.st_mtime_ns)
    return found


def _place(repo: Path, rng: random.Random, targets: tuple[str, ...]) -> str:
    slot = rng.choice(SLOTS)
    target = rng.choice(targets)
    link = repo / slot
    on_the_way = [repo.joinpath(*slot.split("/")[:i]) for i in range(1, slot.count("/") + 1)]
    if any(p.is_symlink() or (p.exists() and not p.is_dir()) for p in on_the_way):
        return f"{slot}: not placed (a link on the way)"  # never write through one
    if link.is_symlink() or link.is_file():
        link.unlink()
    elif link.is_dir():
        shutil.rmtree(link)
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(slot.rsplit("/", 1)[-1] if target == "SELF" else target)
    return f"{slot} -> {target}"


def _clean(text: str) -> None:
    assert CANARY not in text, text
    assert "PATH=" not in text, text  # /proc/self/environ
    assert "Traceback" not in text, text


def check_case(repo: Path, outside: Path, before: dict[str, tuple[bytes | None, int]]) -> str:
    """validate, render --check and render as CI runs them; how the case ended."""
    codes = []
    specs = sorted(p.name for p in (repo / "layouts").glob("*.yaml"))
    with _hang_guard(HANG_S):
        for args in (
            ["validate", *(f"layouts/{s}" for s in specs)],
            ["render", "--check"],
            ["render"],
        ):
            result = run_cli(args)
            assert result.code in (0, 1, 2), (args, result)
            _clean(result.stdout + result.stderr)
            codes.append(result.code)
    assert _snapshot(outside) == before, "a file outside the repository changed"
    return "clean" if codes == [0, 0, 0] else "refused"


def test_links_never_leave_the_repository(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(source.ALLOW_OUTSIDE_ENV, raising=False)
    source.allow_outside(False)
    pristine, repo, outside = _world(tmp_path)
    monkeypatch.chdir(pristine)
    assert run_cli(["render"]).code == 0
    before = _snapshot(outside)
    targets = _targets(outside, repo)
    rng = random.Random(31)
    outcomes: Counter[str] = Counter()
    failures: dict[str, tuple[int, str]] = {}
    slowest = (0.0, "")
    monkeypatch.chdir(tmp_path)
    for case in range(CASES):
        if repo.exists():
            shutil.rmtree(repo)
        shutil.copytree(pristine, repo, symlinks=True)
        os.chdir(repo)
        placed = [_place(repo, rng, targets) for _ in range(rng.choice([1, 1, 2, 3]))]
        what = f"case {case}: {'; '.join(placed)}"
        start = time.perf_counter()
        try:
            outcome = check_case(repo, outside, before)
        except Exception as exc:  # a traceback, a hang, a leak: say which case
            if not LONG:
                raise AssertionError(f"{what}: {exc!r}") from exc
            frames = traceback.extract_tb(exc.__traceback__)
            ours = [f for f in frames if "/layoutgen/" in f.filename] or frames
            key = f"{type(exc).__name__} at {Path(ours[-1].filename).name}:{ours[-1].lineno}"
            count, first = failures.get(key, (0, what))
            failures[key] = (count + 1, first)
            outcome = "failed"
        finally:
            os.chdir(tmp_path)
        seconds = time.perf_counter() - start
        slowest = max(slowest, (seconds, what))
        outcomes[outcome] += 1
    if LONG:
        print(f"\nsymlink fuzz: {CASES} cases: {dict(outcomes)}; slowest {slowest[0]:.2f} s")
        print(f"  ({slowest[1]})")
        for key, (count, first) in failures.items():
            print(f"  {count} x {key}; first: {first}")
    assert not failures, failures
    # the links reach the checks: most cases are refused, and some still pass
    assert outcomes["refused"] > CASES // 2, outcomes
