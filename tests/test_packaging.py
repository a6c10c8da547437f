"""The wheel carries every package: pyproject lists them by hand (templates/ and
layouts/schema/ map to data packages), and a package missing there works in the
editable checkout only.  So the wheel is built, installed into a clean virtualenv
outside the checkout, and run there on copies of the examples (issue 32)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

import layoutgen

from conftest import ROOT

DATA_PACKAGES = {"layoutgen_templates", "layoutgen_schema"}


def test_every_package_of_layoutgen_is_listed_in_pyproject() -> None:
    listed = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    found = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for init in (ROOT / "layoutgen").rglob("__init__.py")
    }
    assert found - listed == set(), "add them to [tool.setuptools] packages"
    assert listed - found == DATA_PACKAGES


def test_the_version_is_written_once() -> None:
    """pyproject reads layoutgen.__version__; no second copy to forget."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"]
    assert project["project"]["dynamic"] == ["version"]
    attr = project["tool"]["setuptools"]["dynamic"]["version"]["attr"]
    assert attr == "layoutgen.__version__"
    assert f"## [{layoutgen.__version__}]" in (ROOT / "CHANGELOG.md").read_text()


def _run(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert result.returncode == 0, f"{args}\n{result.stdout}\n{result.stderr}"
    return result


@pytest.mark.slow
def test_the_wheel_installs_and_renders_outside_the_checkout(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    env["LAYOUTGEN_CACHE_DIR"] = "off"
    # sdist, then the wheel built from the sdist: what the sdist lacks, the wheel lacks
    dist = tmp_path / "dist"
    _run([sys.executable, "-m", "build", "--outdir", str(dist), str(ROOT)], tmp_path, env)
    (wheel,) = dist.glob("layoutgen-*.whl")
    assert wheel.name.startswith(f"layoutgen-{layoutgen.__version__}-")
    names = set(zipfile.ZipFile(wheel).namelist())
    templates = {p.name for p in (ROOT / "templates").glob("*.j2")}
    assert {f"layoutgen_templates/{t}" for t in templates} <= names
    assert {"layoutgen_schema/spec.schema.json", "layoutgen_schema/profile.schema.json"} <= names
    assert not any(n.startswith(("tests/", "layouts/", "docs/")) for n in names)

    venv = tmp_path / "venv"  # a clean virtualenv: nothing of the checkout's .venv
    _run([sys.executable, "-m", "venv", str(venv)], tmp_path, env)
    bin_ = venv / "bin"
    _run([str(bin_ / "python"), "-m", "pip", "install", "--quiet", str(wheel)], tmp_path, env)

    work = tmp_path / "work"  # outside the checkout, and not a git repository
    shutil.copytree(ROOT / "layouts", work / "layouts")
    version = _run([str(bin_ / "layoutgen"), "--version"], work, env)
    assert version.stdout == f"layoutgen {layoutgen.__version__}\n"
    where = _run(
        [
            str(bin_ / "python"),
            "-c",
            "import layoutgen, json; from layoutgen.render.artifacts import default_templates; "
            "from importlib.resources import files; "
            "print(json.dumps([layoutgen.__file__, str(default_templates()), "
            "files('layoutgen_schema').joinpath('spec.schema.json').read_text()]))",
        ],
        work,
        env,
    )
    module, templates_dir, schema_text = json.loads(where.stdout)
    assert Path(module).is_relative_to(venv) and Path(templates_dir).is_relative_to(venv)
    # the committed copy, shipped (tests/test_schema.py keeps it what `layoutgen schema` prints)
    assert schema_text == (ROOT / "layouts" / "schema" / "spec.schema.json").read_text()
    schema = _run([str(bin_ / "layoutgen"), "schema"], work, env)
    assert json.loads(schema.stdout)["title"] == json.loads(schema_text)["title"]

    specs = sorted(p.name for p in (work / "layouts").glob("*.yaml"))
    assert len(specs) >= 10
    rendered = _run(
        [str(bin_ / "layoutgen"), "render", *(f"layouts/{s}" for s in specs)], work, env
    )
    assert "Traceback" not in rendered.stderr

    # the same bytes as the checkout renders from the same copies
    ref = tmp_path / "ref"
    shutil.copytree(ROOT / "layouts", ref / "layouts")
    checkout = Path(sys.executable).parent / "layoutgen"
    _run([str(checkout), "render", *(f"layouts/{s}" for s in specs)], ref, env)
    got = {p.relative_to(work): p.read_bytes() for p in (work / "out").rglob("*") if p.is_file()}
    want = {p.relative_to(ref): p.read_bytes() for p in (ref / "out").rglob("*") if p.is_file()}
    assert len(got) >= 50
    assert got.keys() == want.keys()
    assert [p for p in got if got[p] != want[p]] == []
