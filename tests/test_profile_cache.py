"""The profile cache: a profile's bytes parse once across runs; errors never cached."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from layoutgen.errors import InvalidInput
from layoutgen.models import profile_cache
from layoutgen.render import validate

from specs import PROFILE, VALID, write


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    where = tmp_path / "cache"
    monkeypatch.setenv("LAYOUTGEN_CACHE_DIR", str(where))
    monkeypatch.setattr(validate, "_PARSED", {})  # no answers from this process's memory
    return where


def _spec(tmp: Path, profile_text: str) -> Path:
    (tmp / "p.yaml").write_text(profile_text)
    return write(tmp, VALID.replace(str(PROFILE), "p.yaml"))


def _entries(cache: Path) -> list[Path]:
    return sorted((cache / "profiles").glob("*.pickle")) if (cache / "profiles").exists() else []


def _parsed_again(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    real = validate.profile_from_document

    def counting(doc):  # type: ignore[no-untyped-def]
        calls.append(doc.name)
        return real(doc)

    monkeypatch.setattr(validate, "profile_from_document", counting)
    return calls


def test_a_second_run_reads_the_profile_from_the_cache(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = _spec(tmp_path, PROFILE.read_text())
    first = validate.validate_file(spec, "spec.yaml")
    assert len(_entries(cache)) == 1 and oct(_entries(cache)[0].parent.stat().st_mode)[-3:] == "700"

    monkeypatch.setattr(validate, "_PARSED", {})
    parsed = _parsed_again(monkeypatch)
    second = validate.validate_file(spec, "spec.yaml")
    assert parsed == []  # not parsed: the cached profile answered
    assert second.plan == first.plan


def test_changed_bytes_parse_again_and_errors_are_never_kept(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = PROFILE.read_text()
    spec = _spec(tmp_path, text)
    validate.validate_file(spec, "spec.yaml")
    parsed = _parsed_again(monkeypatch)
    (tmp_path / "p.yaml").write_text(text + "\n# a comment changes the bytes\n")
    validate.validate_file(spec, "spec.yaml")
    assert len(parsed) == 1 and len(_entries(cache)) == 2

    (tmp_path / "p.yaml").write_text(text.replace("schema: 1", "schema: 2", 1))
    for _ in range(2):  # refused each time, located in the profile, nothing cached
        with pytest.raises(InvalidInput, match=r"p\.yaml:\d+:\d+"):
            validate.validate_file(spec, "spec.yaml")
    assert len(_entries(cache)) == 2


def test_a_damaged_or_writable_entry_is_ignored_and_rewritten(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = _spec(tmp_path, PROFILE.read_text())
    validate.validate_file(spec, "spec.yaml")
    (entry,) = _entries(cache)
    for damage in (lambda: entry.write_bytes(b"not a pickle"), lambda: entry.chmod(0o666)):
        damage()
        monkeypatch.setattr(validate, "_PARSED", {})
        parsed = _parsed_again(monkeypatch)
        validate.validate_file(spec, "spec.yaml")
        assert len(parsed) == 1, "the entry was trusted"
        entry.chmod(0o600)
        assert profile_cache.get(PROFILE.read_bytes()) is not None  # rewritten


def test_off_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAYOUTGEN_CACHE_DIR", "off")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr(validate, "_PARSED", {})
    validate.validate_file(_spec(tmp_path, PROFILE.read_text()), "spec.yaml")
    assert not (tmp_path / "xdg").exists()


def test_concurrent_runs_share_one_cache(cache: Path, tmp_path: Path) -> None:
    """Eight processes validating at once: each entry is renamed into place whole."""
    spec = _spec(tmp_path, PROFILE.read_text())
    exe = str(Path(sys.executable).with_name("layoutgen"))
    env = dict(os.environ, LAYOUTGEN_CACHE_DIR=str(cache))
    procs = [
        subprocess.Popen([exe, "validate", str(spec)], env=env, stderr=subprocess.PIPE)
        for _ in range(8)
    ]
    assert all(p.wait() == 0 for p in procs)
    assert len(_entries(cache)) == 1
    assert not [p for p in (cache / "profiles").iterdir() if p.name.startswith(".tmp-")]
    assert profile_cache.get(PROFILE.read_bytes()) is not None


def test_an_entry_holds_no_hash_of_the_process_that_wrote_it(cache: Path, tmp_path: Path) -> None:
    """str hashes differ per process (PYTHONHASHSEED): a profile's cached hash must not
    travel in the cache, or an unpickled profile and its freshly loaded twin would be
    equal with different hashes (broken dict and lru_cache lookups)."""
    from layoutgen.models.profile import load_profile

    profile = load_profile(PROFILE)
    hash(profile), list(profile.tensors())  # both cached on the instance now
    profile_cache.put(PROFILE.read_bytes(), profile)
    script = (
        "import sys; from pathlib import Path; "
        "from layoutgen.models import profile_cache; "
        "from layoutgen.models.profile import load_profile; "
        "p = Path(sys.argv[1]); got = profile_cache.get(p.read_bytes()); "
        "fresh = load_profile(p); "
        "assert got == fresh and hash(got) == hash(fresh), 'stale hash'; "
        "assert '_hash' not in vars(got) or hash(got) == hash(fresh)"
    )
    env = dict(os.environ, LAYOUTGEN_CACHE_DIR=str(cache), PYTHONHASHSEED="12345")
    done = subprocess.run(
        [sys.executable, "-c", script, str(PROFILE)], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


def test_compiled_templates_follow_an_edited_template(cache: Path, tmp_path: Path) -> None:
    """jinja2 keeps compiled templates in the cache; an edit between two runs counts."""
    import shutil

    from conftest import ROOT

    templates = tmp_path / "templates"
    shutil.copytree(ROOT / "templates", templates)
    spec = write(tmp_path, VALID)
    exe = str(Path(sys.executable).with_name("layoutgen"))
    env = dict(os.environ, LAYOUTGEN_CACHE_DIR=str(cache))

    def render(out: str) -> str:
        argv = [exe, "render", "--templates", str(templates), "-o", str(tmp_path / out), str(spec)]
        done = subprocess.run(argv, env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return (tmp_path / out / "compute" / "layout.md").read_text()

    first = render("a")
    assert list((cache / "templates").iterdir()), "nothing compiled into the cache"
    layout = templates / "layout.md.j2"
    layout.write_text(layout.read_text() + "\nedited after the first run\n")
    second = render("b")
    assert "edited after the first run" in second and "edited" not in first
