"""``--templates`` from a pull request renders in Jinja's sandbox (issue 31).

A template reaching for Python internals is a :class:`TemplateError` naming the
template file and line; nothing it tried runs.  Templates are read from their
folder only, never through a link out of it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from layoutgen.inputs import source
from layoutgen.render import artifacts
from layoutgen.render.artifacts import KINDS, TemplateError, render
from layoutgen.render.validate import validate_file

from conftest import ROOT, run_cli
from specs import PROFILE, VALID, write

BUNDLED = ROOT / "templates"


@pytest.fixture(autouse=True)
def _confined(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(source.ALLOW_OUTSIDE_ENV, raising=False)


def _spec(tmp: Path) -> Path:
    """specs.VALID with its profile beside it (a spec's files stay in its directory)."""
    shutil.copy(PROFILE, tmp / "coder.yaml")
    return write(tmp, VALID.replace(f"profile: {PROFILE}", "profile: coder.yaml"))


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    copy = tmp_path / "templates"
    shutil.copytree(BUNDLED, copy)
    return copy


def _render(tmp_path: Path, folder: Path) -> dict[str, str]:
    validated = validate_file(_spec(tmp_path), "spec.yaml")
    return render(validated, "spec.yaml", folder)


def _hostile(folder: Path, line: str) -> Path:
    """systemd.service.j2 with ``line`` as its third line."""
    path = folder / "systemd.service.j2"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join([*lines[:2], line + "\n", *lines[2:]]))
    return path


def test_a_copy_of_the_bundled_templates_renders_the_same_bytes(
    tmp_path: Path, folder: Path
) -> None:
    validated = validate_file(_spec(tmp_path), "spec.yaml")
    assert render(validated, "spec.yaml", folder) == render(validated, "spec.yaml")


@pytest.mark.parametrize(
    "line",
    [
        "{{ cycler.__init__.__globals__.os.system('touch PWNED') }}",
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",
        "{{ joiner.__init__.__globals__ }}",
        "{{ unit.__class__.__init__.__globals__['os'].system('touch PWNED') }}",
        "{{ header.__class__.__base__ }}",
        "{% set x = unit.service.update({'a': 1}) %}",
    ],
)
def test_python_internals_are_a_located_error(
    tmp_path: Path, folder: Path, line: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    path = _hostile(folder, line)
    with pytest.raises(TemplateError) as exc:
        _render(tmp_path, folder)
    message = str(exc.value)
    assert message.startswith(f"{path}:3: error: "), message
    assert "Traceback" not in message
    assert not (tmp_path / "PWNED").exists()


def test_the_cli_names_the_template_line_without_a_traceback(
    tmp_path: Path, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    path = _hostile(folder, "{{ cycler.__init__.__globals__.os.system('touch PWNED') }}")
    spec = _spec(tmp_path)
    result = run_cli(["render", "--templates", str(folder), "-o", str(tmp_path / "out"), str(spec)])
    assert result.code == 1
    assert f"{path}:3: error: the template reaches for Python internals" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "PWNED").exists()
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "line",
    [
        "{{ 'x' * 10**10 }}",
        "{{ 2 ** 1000000000 }}",
        "{{ (10 ** 60) * (10 ** 60) * (10 ** 600) * (10 ** 600) }}",
        "{% for i in range(100000) %}{% for j in range(100000) %}xxxxxxxx{% endfor %}{% endfor %}",
        "{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}",
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
        "{{ header.split(1) }}",
    ],
)
def test_a_template_that_would_exhaust_the_machine_is_an_error(
    tmp_path: Path, folder: Path, line: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(artifacts, "MAX_SECONDS", 0.5)  # the bound, not the time, is tested
    path = _hostile(folder, line)
    with pytest.raises(TemplateError) as exc:
        _render(tmp_path, folder)
    assert str(exc.value).startswith(str(path)), str(exc.value)


def test_a_template_linked_out_of_its_folder_is_refused_unread(
    tmp_path: Path, folder: Path
) -> None:
    secret = tmp_path / "secret"
    secret.write_text("canary-5c1d TOKEN\n")
    (folder / KINDS[2]).unlink()
    (folder / KINDS[2]).symlink_to(secret)
    with pytest.raises(TemplateError) as exc:
        _render(tmp_path, folder)
    assert "resolves outside" in str(exc.value)
    assert "canary" not in str(exc.value)


def test_an_include_through_a_link_is_refused(tmp_path: Path, folder: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("canary-5c1d TOKEN\n")
    (folder / "part.j2").symlink_to(secret)
    _hostile(folder, '{% include "part.j2" %}')
    with pytest.raises(TemplateError) as exc:
        _render(tmp_path, folder)
    assert "canary" not in str(exc.value)
    assert f"{folder / 'part.j2'} resolves outside" in str(exc.value)


def test_a_template_folder_linked_out_of_the_repository_is_refused(
    tmp_path: Path, folder: Path
) -> None:
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "templates").symlink_to(folder)  # folder: outside the repository
    with pytest.raises(TemplateError) as exc:
        _render(tmp_path, repo / "templates")
    assert str(exc.value).startswith(f"{repo / 'templates'} resolves outside {repo}")
