"""out/: whole-host swaps, ownership by spec, and what ``render --check`` reports.

The kill and concurrency tests are in test_outdir_kill.py; these pin the
rules one by one, with the messages word for word.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from layoutgen.render import nofollow, outdir, swap
from layoutgen.render.outdir import MANIFEST, OwnershipError, apply, check, write

from conftest import run_cli

ROOT = Path(__file__).resolve().parent.parent
GEMMA = ROOT / "layouts" / "models" / "gemma-4-26b-a4b-q5_k_m.yaml"


def spec(tmp: Path, name: str, services: dict[str, int], host: str = "lab") -> str:
    """A valid spec file (one small container per service); its path, as the CLI names it."""
    text = (
        f"version: 1\nhost:\n  name: {host}\n  cpu: {{cores: 8, threads: 16}}\n"
        "  ram: 512GiB\n  ram_reserve: 4GiB\n"
        f'  podman: "5.4"\nmodels:\n  gemma:\n    path: /srv/models/gemma.gguf\n'
        f"    profile: {GEMMA}\n"
        "runtimes:\n  llama:\n    kind: llama.cpp\n    image: ghcr.io/ggml-org/llama.cpp:server\n"
        "services:\n"
    )
    for svc, port in services.items():
        text += (
            f"  {svc}:\n    role: batch\n    model: gemma\n    runtime: llama\n"
            f"    port: {port}\n    ctx: 4096\n    threads: 4\n"
        )
    path = tmp / name
    path.write_text(text)
    return str(path)


def tree(top: Path) -> dict[str, bytes]:
    return {
        p.relative_to(top).as_posix(): p.read_bytes()
        for p in sorted(top.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


def test_files_it_did_not_generate_survive_every_render(tmp_path: Path) -> None:
    out = tmp_path / "out"
    first = spec(tmp_path, "a.yaml", {"chat": 8080, "code": 8081})
    assert run_cli(["render", "-o", str(out), first]).code == 0
    host = out / "lab"
    (host / "NOTES.md").write_text("mine\n")
    (host / "systemd" / "chat.service.d").mkdir()
    (host / "systemd" / "chat.service.d" / "override.conf").write_text("[Service]\nNice=5\n")
    (host / "bin").mkdir(mode=0o750)
    (host / "bin" / "deploy").write_text("#!/bin/sh\n")
    (host / "bin" / "deploy").chmod(0o700)
    (host / "empty").mkdir()
    (host / "current").symlink_to("layout.md")
    notes = (host / "NOTES.md").stat().st_ino
    unchanged = (host / "systemd" / "code.service").stat().st_ino
    # chat changes, code stays, a third service comes
    second = spec(tmp_path, "a.yaml", {"chat": 8090, "code": 8081, "night": 8082})
    assert run_cli(["render", "-o", str(out), second]).code == 0
    assert (host / "systemd" / "code.service").stat().st_ino == unchanged  # linked over
    assert (host / "systemd" / "night.service").is_file()
    # and two go
    assert run_cli(["render", "-o", str(out), spec(tmp_path, "a.yaml", {"chat": 8090})]).code == 0
    assert not (host / "systemd" / "code.service").exists()
    assert not (host / "systemd" / "night.service").exists()
    assert (host / "NOTES.md").read_text() == "mine\n"
    assert (host / "NOTES.md").stat().st_ino == notes  # carried over, not copied
    assert (host / "systemd" / "chat.service.d" / "override.conf").is_file()
    assert stat.S_IMODE((host / "bin").stat().st_mode) == 0o750
    assert stat.S_IMODE((host / "bin" / "deploy").stat().st_mode) == 0o700
    assert (host / "empty").is_dir()
    assert os.readlink(host / "current") == "layout.md"
    assert sorted(os.listdir(out)) == ["lab"]  # no lock, no staging left


def test_an_up_to_date_host_is_not_touched(tmp_path: Path) -> None:
    out = tmp_path / "out"
    first = spec(tmp_path, "a.yaml", {"chat": 8080})
    assert run_cli(["render", "-o", str(out), first]).code == 0
    inode = (out / "lab").stat().st_ino
    result = run_cli(["render", "-o", str(out), first])
    # a podman script, a quadlet and a systemd unit, layout.md, plan.json, endpoints.json
    assert result.stderr.splitlines()[-1] == f"{out}: 0 written, 6 unchanged, 0 removed"
    assert (out / "lab").stat().st_ino == inode


def test_a_second_spec_for_a_host_is_refused_naming_both(tmp_path: Path) -> None:
    out = tmp_path / "out"
    a = spec(tmp_path, "a.yaml", {"chat": 8080})
    b = spec(tmp_path, "b.yaml", {"night": 8090})
    assert run_cli(["render", "-o", str(out), a]).code == 0
    before = tree(out)
    result = run_cli(["render", "-o", str(out), b])
    assert result.code == 1
    host = out / "lab"
    la, lb = "a.yaml", "b.yaml"  # named from out/'s parent, as in every rendered header
    assert result.stderr.splitlines()[-1] == (
        f"{host}: error: host 'lab' is also described by {la} (see {host}/{MANIFEST}); specs "
        "of one host are checked together for GPUs, RAM and ports, so render them in one "
        f"call: layoutgen render {la} {lb}; or give {lb} another host.name; or, if {la} is "
        f"gone, render with --forget {la}"
    )
    assert tree(out) == before
    assert run_cli(["render", "--check", "-o", str(out), b]).code == 1
    # rendered together they share the host, each with its own layout and plan
    assert run_cli(["render", "-o", str(out), a, b]).code == 0
    assert not (host / "layout.md").exists()
    assert (host / "layout.a.md").is_file() and (host / "plan.b.json").is_file()


def test_a_renamed_spec_takes_its_files_over_with_forget(tmp_path: Path) -> None:
    out = tmp_path / "out"
    old = spec(tmp_path, "old.yaml", {"chat": 8080})
    assert run_cli(["render", "-o", str(out), old]).code == 0
    new = spec(tmp_path, "new.yaml", {"chat": 8080})
    os.unlink(old)
    result = run_cli(["render", "-o", str(out), new])
    assert result.code == 1
    assert "also described by old.yaml (old.yaml no longer exists)" in result.stderr
    assert run_cli(["render", "-o", str(out), "--forget", old, new]).code == 0
    manifest = (out / "lab" / MANIFEST).read_text()
    assert "old.yaml" not in manifest and "new.yaml\tlab/layout.md" in manifest
    assert "generated by layoutgen from new.yaml;" in (out / "lab" / "layout.md").read_text()


def test_a_host_renamed_in_the_spec_leaves_nothing_behind(tmp_path: Path) -> None:
    out = tmp_path / "out"
    a = spec(tmp_path, "a.yaml", {"chat": 8080})
    assert run_cli(["render", "-o", str(out), a]).code == 0
    (out / "lab" / "NOTES.md").write_text("mine\n")
    assert run_cli(["render", "-o", str(out), spec(tmp_path, "a.yaml", {"chat": 1}, "den")])
    assert sorted(os.listdir(out / "lab")) == ["NOTES.md"]  # the person's file only
    assert (out / "den" / "layout.md").is_file()
    assert run_cli(["render", "-o", str(out), "--forget", a]).code == 0
    assert sorted(os.listdir(out)) == ["lab"]


def test_another_specs_file_is_never_overwritten(tmp_path: Path) -> None:
    write(tmp_path, {"a.yaml": {"h/layout.md": "a\n", "h/plan.json": "{}\n", "h/x": "a\n"}})
    with pytest.raises(OwnershipError) as exc:
        write(tmp_path, {"b.yaml": {"h/x": "b\n"}})
    assert exc.value.messages == [
        f"{tmp_path}/h/x: error: b.yaml renders this file, but a.yaml (a.yaml no longer "
        f"exists) generated it (see {tmp_path}/h/{MANIFEST}); layoutgen never overwrites "
        "another spec's files: give b.yaml another host.name or service name, or, if b.yaml "
        "replaces a.yaml, render with --forget a.yaml"
    ]
    assert (tmp_path / "h" / "x").read_text() == "a\n"
    # a file of another spec that nobody renders again is kept, and reported as foreign
    write(tmp_path, {"b.yaml": {"h/y": "b\n"}})
    report = check(tmp_path, {"b.yaml": {"h/y": "b\n"}})
    assert [f.message(tmp_path, True) for f in report.findings] == [
        f"{tmp_path}/h/layout.md: note: generated from a.yaml, which this call does not "
        "render; kept as is",
        f"{tmp_path}/h/plan.json: note: generated from a.yaml, which this call does not "
        "render; kept as is",
        f"{tmp_path}/h/x: note: generated from a.yaml, which this call does not render; kept as is",
    ]


def test_a_file_it_did_not_generate_is_never_overwritten(tmp_path: Path) -> None:
    (tmp_path / "h").mkdir()
    (tmp_path / "h" / "x.service").write_text("[Unit]\nmine\n")
    with pytest.raises(OwnershipError) as exc:
        write(tmp_path, {"a.yaml": {"h/x.service": "generated\n"}})
    assert exc.value.messages == [
        f"{tmp_path}/h/x.service: error: a.yaml renders this file, but a file layoutgen did "
        "not generate is there (no manifest lists it, it has no 'generated by layoutgen' "
        "line); layoutgen never overwrites such files: move it away, or rename the service"
    ]
    # one with layoutgen's header (a lost manifest) is taken over
    (tmp_path / "h" / "x.service").write_text("# generated by layoutgen from a.yaml; do not edit\n")
    write(tmp_path, {"a.yaml": {"h/x.service": "generated\n"}})
    assert (tmp_path / "h" / "x.service").read_text() == "generated\n"


def test_check_reports_leftovers_strays_and_foreign_files(tmp_path: Path) -> None:
    out = tmp_path / "out"
    a = spec(tmp_path, "a.yaml", {"chat": 8080})
    assert run_cli(["render", "-o", str(out), a]).code == 0
    assert run_cli(["render", "--check", "-o", str(out), a]).stderr.endswith("up to date\n")
    host = out / "lab"
    (out / ".lab.layoutgen-new-0badc0de").mkdir()  # a render killed while building
    (out / ".lab.layoutgen-new-0badc0de" / "layout.md").write_text("half\n")
    (host / "systemd" / ".chat.service.layoutgen-tmp").write_text("half\n")  # older layoutgen
    (out / swap.LOCK).write_text("pid 4242 on box since 2026-01-01 00:00:00: layoutgen render\n")
    stray = host / "systemd" / "gone.service"
    stray.write_text("# generated by layoutgen from layouts/gone.yaml; do not edit\n")
    (host / "NOTES.md").write_text("# mine\n")  # the person's own: not reported
    result = run_cli(["render", "--check", "-o", str(out), a])
    assert result.code == 2
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        f"{out}/.lab.layoutgen-new-0badc0de: warning: staging directory of an interrupted "
        "render; `layoutgen render` removes it",
        f"{out}/.layoutgen.lock: warning: lock file of a killed render (pid 4242 on box since "
        "2026-01-01 00:00:00: layoutgen render); `layoutgen render` removes it",
        f"{host}/systemd/.chat.service.layoutgen-tmp: warning: temporary file of an older "
        "render; `layoutgen render` removes it",
        f"{stray}: warning: looks generated by layoutgen, but no manifest lists it; layoutgen "
        "never deletes such files: delete it if no spec generates it",
        "3 leftovers of interrupted renders",
        "1 stray file in no manifest",
    ]
    result = run_cli(["render", "-o", str(out), a])
    assert result.code == 0
    assert result.stderr.splitlines() == [
        f"{out}/.lab.layoutgen-new-0badc0de: note: removed the staging directory of an "
        "interrupted render",
        f"{out}/.layoutgen.lock: note: removed the lock file of a killed render (pid 4242 on "
        "box since 2026-01-01 00:00:00: layoutgen render)",
        f"{host}/systemd/.chat.service.layoutgen-tmp: note: removed the temporary file of an "
        "older render",
        f"{stray}: warning: looks generated by layoutgen, but no manifest lists it; layoutgen "
        "never deletes such files: delete it if no spec generates it",
        f"{out}: 0 written, 6 unchanged, 0 removed",
    ]
    assert sorted(os.listdir(out)) == ["lab"]
    assert stray.is_file() and (host / "NOTES.md").is_file()
    stray.unlink()
    assert run_cli(["render", "--check", "-o", str(out), a]).code == 0


def test_check_reports_an_edited_manifest(tmp_path: Path) -> None:
    write(tmp_path, {"a.yaml": {"h/x": "x\n"}})
    (tmp_path / "h" / MANIFEST).write_text("# emptied by hand\n")
    report = check(tmp_path, {"a.yaml": {"h/x": "x\n"}})
    assert report.changes == []
    assert [f.kind for f in report.findings] == ["manifest"]
    write(tmp_path, {"a.yaml": {"h/x": "x\n"}})
    assert check(tmp_path, {"a.yaml": {"h/x": "x\n"}}).findings == []


def test_a_swap_killed_between_its_two_renames_is_finished_from_its_journal(
    tmp_path: Path,
) -> None:
    """Without RENAME_EXCHANGE: the journal names the complete new tree."""
    new = tmp_path / ".h.layoutgen-new-00000001"
    old = tmp_path / ".h.layoutgen-old-00000002"
    new.mkdir()
    (new / "x").write_text("new\n")
    old.mkdir()
    (old / "x").write_text("old\n")
    journal = tmp_path / ".h.layoutgen-swap"
    journal.write_text(f"new {new.name}\nold {old.name}\n")
    report = check(tmp_path, {})
    assert sorted(f.path for f in report.findings) == sorted([new.name, old.name, journal.name])
    assert swap.recover(tmp_path) == [
        (new.name, "staging directory of an interrupted render"),
        (old.name, "old tree of an interrupted render"),
        (journal.name, "journal of an interrupted swap"),
    ]
    assert os.listdir(tmp_path) == ["h"]
    assert (tmp_path / "h" / "x").read_text() == "new\n"


def test_the_journal_swap_gives_the_same_trees(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(swap, "_renameat2", None)
    write(tmp_path, {"a.yaml": {"h/x": "1\n", "h/y": "1\n"}})
    (tmp_path / "h" / "mine").write_text("mine\n")
    write(tmp_path, {"a.yaml": {"h/x": "2\n"}})
    assert tree(tmp_path / "h") == {
        MANIFEST: f"{outdir._MANIFEST_HEAD}\na.yaml\th/x\n".encode(),
        "mine": b"mine\n",
        "x": b"2\n",
    }
    assert os.listdir(tmp_path) == ["h"]


def test_a_host_directory_that_is_a_link_is_refused(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "x").write_text("outside\n")
    (tmp_path / "h").symlink_to("real")
    with pytest.raises(nofollow.LinkRefused) as exc:
        apply(tmp_path, {"a.yaml": {"h/x": "x\n"}})
    assert str(exc.value).startswith(f"{tmp_path}/h: a symbolic link where layoutgen keeps")
    assert (tmp_path / "real" / "x").read_text() == "outside\n"
