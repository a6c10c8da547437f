"""The ``fake_nvml`` fixture: ``pytest_plugins = ["tests.fakenvml.conftest_plugin"]``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakenvml import CompilerMissing, FakeNvml, build


@pytest.fixture(scope="session")
def fake_nvml_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fake libnvidia-ml.so.1, compiled once per session; no compiler fails, never skips."""
    try:
        return build(tmp_path_factory.mktemp("fakenvml-lib"))
    except CompilerMissing as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture
def fake_nvml(fake_nvml_lib: Path, tmp_path: Path) -> FakeNvml:
    workdir = tmp_path / "fakenvml"
    workdir.mkdir()
    return FakeNvml(lib=fake_nvml_lib, workdir=workdir)
