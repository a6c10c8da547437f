"""validate accepts exactly what render accepts (issue 15 item 1).

A spec render refuses (no host.podman for quadlet units, a podman too old for
the keys the layout needs) is refused by validate too, at the line to change;
``host.targets`` leaves quadlet out where the host has no usable podman.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import run_cli
from specs import VALID

PODMAN = '  podman: "5.4"\n'


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("command", ["validate", "render"])
def test_no_podman_version_is_refused_by_both(tmp_path: Path, command: str) -> None:
    assert PODMAN in VALID
    spec = _write(tmp_path, VALID.replace(PODMAN, ""))
    args = [command, str(spec)] + (["-o", str(tmp_path / "out")] if command == "render" else [])
    result = run_cli(args)
    assert result.code == 1
    lines = (result.stdout + result.stderr).splitlines()
    assert any(line.startswith(f"{spec}:2:3: error: host.podman is not set") for line in lines), (
        lines
    )


def test_a_podman_too_old_for_the_keys_is_refused_at_host_podman(tmp_path: Path) -> None:
    spec = _write(tmp_path, VALID.replace(PODMAN, '  podman: "4.4"\n'))
    result = run_cli(["validate", str(spec)])
    assert result.code == 1
    line = VALID.splitlines().index(PODMAN.rstrip("\n")) + 1
    assert f"{spec}:{line}:11: error: podman 4.4 (host.podman) is too old" in result.stdout
    assert "leave quadlet out of host.targets" in result.stdout


def test_targets_without_quadlet_need_no_podman_version(tmp_path: Path) -> None:
    text = VALID.replace(PODMAN, "  targets: [podman, systemd]\n")
    spec = _write(tmp_path, text)
    assert run_cli(["validate", str(spec)]).code == 0
    out = tmp_path / "out"
    assert run_cli(["render", str(spec), "-o", str(out)]).code == 0
    written = {
        p.relative_to(out).parts[1]
        for p in out.rglob("*")
        if p.is_file() and len(p.relative_to(out).parts) > 2
    }
    assert written == {"podman", "systemd"}
