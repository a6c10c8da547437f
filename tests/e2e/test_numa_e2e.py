"""services.NAME.numa under real systemd (257, PID 1 of a podman container; machine.py).

What the rendered units say must reach the server process itself, read from the
kernel's view of it (/proc/PID/numa_maps: the task's memory policy on every
mapping that has none of its own, "interleave:0", "bind:0"; /proc/PID/status:
the CPUs it may run on):

1. the quadlet form, ``{policy: interleave}``: systemd sets the policy on the
   unit's ``podman run``; the fake server in the container (a child of conmon and
   runc, started by that podman) holds it;
2. the native form, ``{policy: bind, nodes: [0]}``: the sandboxed server holds
   ``bind:0``, and ``CPUAffinity=numa`` gave it node 0's CPUs (the node's cpulist
   in sysfs).

The machine has one NUMA node (0), as CI's have; a process the units did not start
holds the kernel's "default" policy, the control that the policy came from them.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest

from tests.e2e import machine
from tests.e2e.test_apply_e2e import apply, health, show, spec
from tests.fakenvml import build


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[machine.Machine]:
    if shutil.which("podman") is None:
        pytest.fail("the e2e suite needs podman on this machine: make e2e-tools installs it")
    if os.geteuid() != 0:
        pytest.fail("the e2e suite needs root: its host is a privileged podman container")
    lib = build(tmp_path_factory.mktemp("fakenvml"))
    m = machine.boot(tmp_path_factory.mktemp("e2e"), lib, quadlet=True)
    try:
        yield m
    finally:
        if not os.environ.get("LAYOUTGEN_E2E_KEEP"):  # debugging: podman exec NAME bash
            machine.shutdown(m)


def policies(m: machine.Machine, pid: str) -> set[str]:
    """The memory policies /proc/PID/numa_maps shows, one per mapping."""
    rows = m.ok(f"cat /proc/{pid}/numa_maps").splitlines()
    assert rows, f"no mappings in /proc/{pid}/numa_maps"
    return {row.split()[1] for row in rows}


def status_field(m: machine.Machine, pid: str, name: str) -> str:
    for line in m.ok(f"cat /proc/{pid}/status").splitlines():
        key, _, value = line.partition(":")
        if key == name:
            return value.strip()
    raise AssertionError(f"no {name} in /proc/{pid}/status")


def test_a_process_the_units_did_not_start_has_the_default_policy(
    host: machine.Machine,
) -> None:
    assert host.ok("ls -d /sys/devices/system/node/node*").split() == [
        "/sys/devices/system/node/node0"
    ]
    assert policies(host, "self") == {"default"}


def test_quadlet_interleave_reaches_the_server_in_the_container(host: machine.Machine) -> None:
    host.model("inter", vram_mib=4000)
    path = spec(
        host, "numa-q", {"inter": "ctx: 4096, port: 8111, numa: {policy: interleave}"}, "quadlet"
    )

    done = apply(host, path)

    assert done.returncode == 0, done.stderr
    assert health(host, 8111) == 200
    assert show(host, "inter.service", "FragmentPath") == "/run/systemd/generator/inter.service"
    assert show(host, "inter.service", "NUMAPolicy") == "interleave"
    assert show(host, "inter.service", "NUMAMask") == "0"
    server = host.ok("podman inspect --format '{{.State.Pid}}' inter").strip()
    # the container's PID 1 is the fake server (python3 running llama-server)
    assert "/usr/local/bin/llama-server" in host.ok(f"tr '\\0' ' ' < /proc/{server}/cmdline")
    assert policies(host, server) == {"interleave:0"}


def test_native_bind_reaches_the_server_with_the_nodes_cpus(host: machine.Machine) -> None:
    host.model("bound", vram_mib=4000)
    path = spec(
        host, "numa-n", {"bound": "ctx: 4096, port: 8112, numa: {policy: bind, nodes: [0]}"}
    )

    done = apply(host, path)

    assert done.returncode == 0, done.stderr
    assert health(host, 8112) == 200
    assert show(host, "bound.service", "NUMAPolicy") == "bind"
    assert show(host, "bound.service", "NUMAMask") == "0"
    assert show(host, "bound.service", "CPUAffinityFromNUMA") == "yes"
    server = show(host, "bound.service", "MainPID")
    assert "/usr/local/bin/llama-server" in host.ok(f"tr '\\0' ' ' < /proc/{server}/cmdline")
    assert policies(host, server) == {"bind:0"}
    node0 = host.ok("cat /sys/devices/system/node/node0/cpulist").strip()
    assert status_field(host, server, "Cpus_allowed_list") == node0
    assert status_field(host, server, "Mems_allowed_list") == "0"
