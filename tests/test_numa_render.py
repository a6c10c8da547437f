"""services.NAME.numa rendered into each target, checked by the real tools.

Expected values are by hand from systemd.exec(5) and numactl(8): a dual-socket
EPYC at NPS4 shows 2 x 4 = 8 NUMA nodes, 0-7, so ``{policy: interleave}`` with no
nodes is ``NUMAPolicy=interleave`` + ``NUMAMask=0-7`` (systemd) and ``numactl
--interleave=0-7`` (script); ``{policy: bind, nodes: [N]}`` adds
``CPUAffinity=numa`` (systemd >= 246: the CPUs of the mask's nodes) and is
``numactl --cpunodebind=N --membind=N``.  The quadlet generator (podman 5.4) must
pass the [Service] keys through to the unit it generates, and ``systemd-analyze
verify`` must accept them (it warns, on stderr, on a key or value it cannot parse:
the negative control below shows it does for these keys).  The script runs with
the real numactl in front of tests/fakepodman.py's podman, whose ``run`` prints a
file that here is /proc/self/numa_maps: the policy its child process (cat) holds,
inherited from numactl through two execs and a fork.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from layoutgen.render.artifacts import render
from layoutgen.render.numa import node_list
from layoutgen.render.validate import validate_file
from tests.fakepodman import FakePodman

from realtools import (
    parse_unit,
    quadlet_dryrun,
    shellcheck,
    systemd_verify,
)
from specs import VALID

DUAL_NPS4 = "cpu: {cores: 64, threads: 128, sockets: 2, numa_nodes: 8}"
ONE_NODE = "cpu: {cores: 16, threads: 32}"


def _spec(tmp: Path, cpu: str, grandpa: str | None, worker0: str | None) -> dict[str, str]:
    """VALID's two services with the given ``numa:`` values, rendered in memory."""
    text = VALID.replace("cpu: {cores: 16, threads: 32}", cpu)
    if grandpa is not None:
        text = text.replace("    threads: 15\n", f"    threads: 15\n    numa: {grandpa}\n")
    if worker0 is not None:
        text = text.replace(
            "    cache_type_k: q8_0\n", f"    cache_type_k: q8_0\n    numa: {worker0}\n"
        )
    path = tmp / "spec.yaml"
    path.write_text(text)
    return render(validate_file(path, "spec.yaml"), "spec.yaml")


def _write(tmp: Path, files: dict[str, str], suffix: str) -> list[Path]:
    out = []
    for rel, text in sorted(files.items()):
        if rel.endswith(suffix):
            path = tmp / Path(rel).name
            path.write_text(text)
            path.chmod(0o755)
            out.append(path)
    return out


def _service(files: dict[str, str], rel: str) -> list[tuple[str, str]]:
    return parse_unit(files[rel])["Service"]


def _numa_keys(lines: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [(k, v) for k, v in lines if k in ("NUMAPolicy", "NUMAMask", "CPUAffinity")]


def test_node_list_writes_runs_as_ranges() -> None:
    assert node_list([0]) == "0"
    assert node_list(list(range(8))) == "0-7"
    assert node_list([5, 0, 2, 1]) == "0-2,5"
    assert node_list([0, 2, 4, 5, 6, 7]) == "0,2,4-7"


@pytest.fixture
def dual(tmp_path: Path) -> dict[str, str]:
    return _spec(tmp_path, DUAL_NPS4, "{policy: interleave}", "{policy: bind, nodes: [4, 5, 7]}")


def test_systemd_units(dual: dict[str, str]) -> None:
    assert _numa_keys(_service(dual, "compute/systemd/grandpa.service")) == [
        ("NUMAPolicy", "interleave"),
        ("NUMAMask", "0-7"),
    ]
    assert _numa_keys(_service(dual, "compute/systemd/worker0.service")) == [
        ("NUMAPolicy", "bind"),
        ("NUMAMask", "4-5,7"),
        ("CPUAffinity", "numa"),
    ]


def test_interleave_on_given_nodes(tmp_path: Path) -> None:
    files = _spec(tmp_path, DUAL_NPS4, "{policy: interleave, nodes: [0, 1, 2, 3]}", None)
    assert _numa_keys(_service(files, "compute/systemd/grandpa.service")) == [
        ("NUMAPolicy", "interleave"),
        ("NUMAMask", "0-3"),
    ]
    assert "exec numactl --interleave=0-3 podman run \\\n" in files["compute/podman/grandpa.sh"]
    # worker0 has no numa: nothing of it anywhere in its files
    for rel, text in files.items():
        if "worker0" in rel:
            assert "NUMA" not in text and "numactl" not in text and "CPUAffinity" not in text


def test_quadlet_passes_the_keys_through(dual: dict[str, str], tmp_path: Path) -> None:
    containers = _write(tmp_path, dual, ".container")
    assert [p.name for p in containers] == ["grandpa.container", "worker0.container"]
    for path in containers:
        assert _numa_keys(parse_unit(path.read_text())["Service"])  # written in [Service]
    result = quadlet_dryrun(tmp_path)
    assert result.ok, (result.rc, result.warnings)
    assert _numa_keys(result.units["grandpa.service"]["Service"]) == [
        ("NUMAPolicy", "interleave"),
        ("NUMAMask", "0-7"),
    ]
    assert _numa_keys(result.units["worker0.service"]["Service"]) == [
        ("NUMAPolicy", "bind"),
        ("NUMAMask", "4-5,7"),
        ("CPUAffinity", "numa"),
    ]
    generated = tmp_path / "generated"
    generated.mkdir()
    for name in ("grandpa", "worker0"):
        block = result.stdout.split(f"---{name}.service---\n", 1)[1].split("\n---", 1)[0]
        (generated / f"{name}.service").write_text(block + "\n")
    rc, stderr = systemd_verify(sorted(generated.glob("*.service")))
    assert rc == 0 and stderr == "", stderr


def test_systemd_analyze_verify_accepts_the_units(dual: dict[str, str], tmp_path: Path) -> None:
    services = _write(tmp_path, dual, ".service")
    rc, stderr = systemd_verify(services)
    assert rc == 0 and stderr == "", stderr


def test_systemd_analyze_verify_reads_these_keys(tmp_path: Path) -> None:
    """The negative control: verify does parse NUMAPolicy=, NUMAMask= and CPUAffinity=
    (an unknown policy, a bad mask and a bad CPU list each say so on stderr), so the
    empty stderr above means systemd accepted ``interleave``, ``bind``, ``0-7`` and
    ``numa``."""
    unit = tmp_path / "bad.service"
    unit.write_text(
        "[Service]\nExecStart=/usr/bin/true\n"
        "NUMAPolicy=sideways\nNUMAMask=zero\nCPUAffinity=nearby\n"
    )
    _, stderr = systemd_verify([unit])
    assert "bad.service:3: Invalid NUMA policy type, ignoring: sideways" in stderr, stderr
    assert "bad.service:4: Failed to parse NUMA node mask, ignoring: zero" in stderr, stderr
    assert "bad.service:5: Failed to parse CPU affinity 'nearby'" in stderr, stderr


def test_specs_without_numa_render_no_numa_lines(tmp_path: Path) -> None:
    files = _spec(tmp_path, ONE_NODE, None, None)
    for rel, text in files.items():
        assert "NUMA" not in text and "numactl" not in text and "CPUAffinity" not in text, rel
    assert "\nset -eu\nexec podman run \\\n" in files["compute/podman/grandpa.sh"]


def test_scripts_wrap_podman_in_numactl(dual: dict[str, str], tmp_path: Path) -> None:
    scripts = _write(tmp_path, dual, ".sh")
    rc, output = shellcheck(scripts)
    assert rc == 0, output
    grandpa = dual["compute/podman/grandpa.sh"]
    worker0 = dual["compute/podman/worker0.sh"]
    assert "exec numactl --interleave=0-7 podman run \\\n" in grandpa
    assert "exec numactl --cpunodebind=4-5,7 --membind=4-5,7 podman run \\\n" in worker0


def _numactl() -> str:
    found = shutil.which("numactl")
    if found is None:
        pytest.fail("numactl is not installed: make tools installs it (Debian's numactl)")
    return found


def _run(script: Path, podman: FakePodman, path: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["/bin/sh", str(script)],
        env={**os.environ, "PATH": path},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def _fake_podman(tmp: Path) -> FakePodman:
    """tests/fakepodman.py's podman; ``run`` prints its child's /proc/self/numa_maps."""
    podman = FakePodman(tmp / "fake")
    podman.write()
    out = podman.root / "podman-data" / "run.out"
    out.unlink()
    out.symlink_to("/proc/self/numa_maps")
    return podman


@pytest.mark.parametrize(
    ("numa", "policy"),
    [("{policy: interleave}", "interleave:0"), ("{policy: bind, nodes: [0]}", "bind:0")],
)
def test_the_container_command_inherits_the_policy(numa: str, policy: str, tmp_path: Path) -> None:
    """On this machine's one node (0): every mapping of podman's child shows the
    policy numactl set (numa_maps prints the task's policy for a mapping that has
    none of its own), and podman got the rendered argv."""
    numactl = _numactl()
    files = _spec(tmp_path, ONE_NODE, numa, None)
    script = _write(tmp_path, {"grandpa.sh": files["compute/podman/grandpa.sh"]}, ".sh")[0]
    podman = _fake_podman(tmp_path)
    done = _run(script, podman, f"{podman.bin}:{Path(numactl).parent}:/usr/bin:/bin")
    assert done.returncode == 0, done.stderr
    maps = done.stdout.splitlines()
    assert maps and all(line.split()[1] == policy for line in maps), done.stdout
    (call,) = podman.calls()
    assert call[:4] == ["run", "--rm", "--replace", "--name"]


def test_the_script_stops_without_numactl(tmp_path: Path) -> None:
    files = _spec(tmp_path, ONE_NODE, "{policy: bind, nodes: [0]}", None)
    script = _write(tmp_path, {"grandpa.sh": files["compute/podman/grandpa.sh"]}, ".sh")[0]
    podman = _fake_podman(tmp_path)
    done = _run(script, podman, str(podman.bin))  # podman there, numactl nowhere
    assert done.returncode == 1
    assert done.stderr == (
        "grandpa: numactl is not installed: services.grandpa.numa (policy bind, NUMA "
        "nodes 0) runs podman under numactl --cpunodebind=0 --membind=0; install numactl "
        "(Debian/Ubuntu: apt-get install numactl; Fedora/RHEL: dnf install numactl)\n"
    )
    assert podman.calls() == []  # nothing started
