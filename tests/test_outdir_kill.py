"""out/<host>/ is replaced whole: SIGKILL at random moments, and concurrent renders.

A 40-service spec (three files per service and three per host, 123 in all) is rendered in
memory in two versions that differ in every file, with services removed and
added; a writer process (tests/tools/kill_render.py) replaces the old tree
with the new one and is killed at a seeded random moment of its write.
After each kill the host tree must be byte for byte the old tree or the new
one (the person's own files included), ``render --check`` must not call
leftovers "up to date", and the next render must leave nothing behind.

LAYOUTGEN_KILLS=100 (``make kills``) kills 100 times instead of 10;
LAYOUTGEN_KILLS_REPORT=FILE appends the tally of where the kills landed.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from layoutgen.render import outdir, swap
from layoutgen.render.artifacts import render
from layoutgen.render.validate import validate_file

from conftest import ROOT

KILLS = int(os.environ.get("LAYOUTGEN_KILLS", "10"))
TOOL = ROOT / "tests" / "tools" / "kill_render.py"
PROFILE = ROOT / "layouts" / "models" / "gemma-4-26b-a4b-q5_k_m.yaml"
HOST = "big"
SPEC = "layouts/big.yaml"  # the spec's name, as the CLI would record it


def big_spec(services: range, ctx: int) -> str:
    """A CPU host running one small container per service: 3 files each."""
    lines = [
        "version: 1",
        "host:",
        f"  name: {HOST}",
        "  cpu: {cores: 64, threads: 128}",
        "  ram: 1024GiB",
        "  ram_reserve: 16GiB",
        '  podman: "5.4"',
        "models:",
        "  gemma:",
        "    path: /srv/models/gemma-4-26B-A4B-it-Q5_K_M.gguf",
        f"    profile: {PROFILE}",
        "runtimes:",
        "  llama:",
        "    kind: llama.cpp",
        "    image: ghcr.io/ggml-org/llama.cpp:server",
        "services:",
    ]
    for i in services:
        lines += [
            f"  s{i:02d}:",
            "    role: batch",
            "    model: gemma",
            "    runtime: llama",
            f"    port: {9000 + i}",
            f"    ctx: {ctx}",
            "    threads: 1",
        ]
    return "\n".join(lines) + "\n"


def rendered(tmp: Path, services: range, ctx: int) -> dict[str, dict[str, str]]:
    spec = tmp / f"big-{services.start}-{ctx}.yaml"
    spec.write_text(big_spec(services, ctx))
    return {SPEC: render(validate_file(spec, SPEC), SPEC)}


Snapshot = dict[str, tuple[str, bytes | str, int]]


def snapshot(top: Path) -> Snapshot:
    """Every entry under top: kind, content (or link target) and mode."""
    out: Snapshot = {}
    for dirpath, dirs, files in os.walk(top):
        for name in dirs + files:
            path = Path(dirpath) / name
            rel = path.relative_to(top).as_posix()
            st = path.lstat()
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(path), 0)
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", b"", stat.S_IMODE(st.st_mode))
            else:
                out[rel] = ("file", path.read_bytes(), stat.S_IMODE(st.st_mode))
    return out


def add_own_files(host: Path) -> None:
    """What a person keeps beside the generated files: never lost."""
    (host / "NOTES.md").write_text("# my notes\n")
    (host / "tools").mkdir()
    (host / "tools" / "deploy.sh").write_text("#!/bin/sh\nexit 0\n")
    (host / "tools" / "deploy.sh").chmod(0o750)
    (host / "empty").mkdir()
    (host / "current").symlink_to("layout.md")
    (host / "systemd" / "local-override.conf").write_text("[Service]\nNice=5\n")


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    tmp = tmp_path_factory.mktemp("kill")
    old = rendered(tmp, range(0, 40), 4096)
    new = rendered(tmp, range(5, 45), 8192)  # every file differs; 5 services gone, 5 new
    alt = rendered(tmp, range(0, 40), 16384)
    assert (
        len(old[SPEC]) == 123
    )  # 40 x (script, quadlet, unit) + layout.md, plan.json, endpoints.json
    refs: dict[str, Path] = {}
    base = tmp / "ref-old"
    outdir.write(base, old)
    add_own_files(base / HOST)
    refs["old"] = base
    for name, version in (("new", new), ("alt", alt)):
        refs[name] = tmp / f"ref-{name}"
        shutil.copytree(base, refs[name], symlinks=True)
        outdir.write(refs[name], version)
    snaps = {name: snapshot(root / HOST) for name, root in refs.items()}
    assert snaps["old"] != snaps["new"] and snaps["old"]["NOTES.md"] == snaps["new"]["NOTES.md"]
    files = {}
    for name, version in (("old", old), ("new", new), ("alt", alt)):
        files[name] = tmp / f"{name}.json"
        files[name].write_text(json.dumps(version))
    return {"refs": refs, "snaps": snaps, "json": files, "rendered": {"new": new, "alt": alt}}


def _writer(root: Path, rendered_json: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(TOOL), str(root), str(rendered_json), *extra],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _write_time(trees: dict[str, object], tmp: Path, *extra: str) -> float:
    """How long the write takes here, uninterrupted (the window kills are spread over)."""
    refs, files = trees["refs"], trees["json"]
    assert isinstance(refs, dict) and isinstance(files, dict)
    times = []
    for i in range(3):
        root = tmp / f"timing-{i}"
        shutil.copytree(refs["old"], root, symlinks=True)
        proc = _writer(root, files["new"], *extra)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        times.append(float(out.split()[-1]))
        shutil.rmtree(root)
    return max(times)


def _leftovers(root: Path) -> list[str]:
    return sorted(e for e in os.listdir(root) if e != HOST)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["exchange", "journal"])
def test_a_killed_render_leaves_the_old_tree_or_the_new_one(
    trees: dict[str, object], tmp_path: Path, mode: str
) -> None:
    refs, snaps, files, versions = trees["refs"], trees["snaps"], trees["json"], trees["rendered"]
    assert isinstance(refs, dict) and isinstance(snaps, dict)
    assert isinstance(files, dict) and isinstance(versions, dict)
    extra = ("--journal",) if mode == "journal" else ()
    if mode == "exchange" and swap._renameat2 is None:
        pytest.skip("no renameat2 here: the journal mode is the one in use")
    window = _write_time(trees, tmp_path, *extra) * 1.3
    rng = random.Random(f"layoutgen-kills-{mode}")
    kills = KILLS if mode == "exchange" else max(3, KILLS // 3)
    tally: Counter[str] = Counter()
    for i in range(kills):
        root = tmp_path / f"k{i}"
        shutil.copytree(refs["old"], root, symlinks=True)
        proc = _writer(root, files["new"], *extra)
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        time.sleep(rng.uniform(0, window))
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
        finished = proc.returncode == 0
        if not (root / HOST).exists():  # the journal's instant between two renames
            assert mode == "journal" and any(
                e.endswith(".layoutgen-swap") for e in os.listdir(root)
            )
            tally["host absent: journal finishes the swap"] += 1
            with swap.locked(root, "test", 5):
                swap.recover(root)
        tree = snapshot(root / HOST)
        state = "old" if tree == snaps["old"] else "new" if tree == snaps["new"] else "MIXED"
        left = _leftovers(root)
        tally[f"{state}, {'leftovers' if left else 'clean'}{', finished' if finished else ''}"] += 1
        assert state != "MIXED", f"kill {i}: the tree is neither the old nor the new one"
        report = outdir.check(root, versions["new"])
        if state == "old" or left:
            assert report.changes or any(f.kind == "leftover" for f in report.findings), (
                f"kill {i}: --check would say 'up to date' over {left}"
            )
        outdir.write(root, versions["new"])
        assert snapshot(root / HOST) == snaps["new"]
        assert _leftovers(root) == [], f"kill {i}: the next render left {_leftovers(root)}"
        assert not [
            p for p in root.rglob("*") if "layoutgen-" in p.name and p.name != outdir.MANIFEST
        ]
        shutil.rmtree(root)
    if report_file := os.environ.get("LAYOUTGEN_KILLS_REPORT"):
        with open(report_file, "a", encoding="utf-8") as f:
            f.write(f"{mode}: {kills} kills over {window * 1000:.0f} ms: {dict(tally)}\n")


@pytest.mark.slow
def test_concurrent_renders_take_turns(trees: dict[str, object], tmp_path: Path) -> None:
    """Two writers started at once: both succeed, and the tree is wholly one of theirs."""
    refs, snaps, files = trees["refs"], trees["snaps"], trees["json"]
    assert isinstance(refs, dict) and isinstance(snaps, dict) and isinstance(files, dict)
    for i in range(6):
        root = tmp_path / f"c{i}"
        shutil.copytree(refs["old"], root, symlinks=True)
        procs = [_writer(root, files[v], "--wait-go") for v in ("new", "alt")]
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        results = [proc.communicate(timeout=60) for proc in procs]
        assert [p.returncode for p in procs] == [0, 0], results
        tree = snapshot(root / HOST)
        assert tree in (snaps["new"], snaps["alt"]), f"round {i}: two renders mixed"
        assert _leftovers(root) == []


def test_a_second_render_waits_for_the_lock_then_says_who_holds_it(tmp_path: Path) -> None:
    from conftest import run_cli

    spec = tmp_path / "big.yaml"
    spec.write_text(big_spec(range(2), 4096))
    out = tmp_path / "out"
    assert run_cli(["render", "-o", str(out), str(spec)]).code == 0
    before = snapshot(out)
    with swap.locked(out, "held by the test", 10):
        started = time.monotonic()
        proc = subprocess.run(
            [
                str(Path(sys.executable).parent / "layoutgen"),
                "render",
                "-o",
                str(out),
                "--lock-timeout",
                "0.5",
                str(spec),
            ],
            capture_output=True,
            text=True,
            check=False,
            cwd=ROOT,
        )
        waited = time.monotonic() - started
    assert proc.returncode == 1
    assert waited >= 0.5
    holder = (f"pid {os.getpid()} on ", "held by the test")
    message = proc.stderr.splitlines()[-1]
    assert message.startswith(f"error: {out}/.layoutgen.lock: another layoutgen (pid ")
    assert all(h in message for h in holder)
    assert message.endswith(
        f") is writing {out}; waited 0.5 s for it. Let it finish and run again, or give "
        "--lock-timeout SECONDS to wait longer"
    )
    assert snapshot(out) == before  # nothing written, the lock file gone with its holder
    assert not (out / ".layoutgen.lock").exists()
