"""A service's NUMA placement (``services.NAME.numa``) as each target writes it.

- systemd and quadlet units (quadlet passes its ``[Service]`` section through):
  ``NUMAPolicy=`` and ``NUMAMask=`` (systemd 243), and for ``bind``
  ``CPUAffinity=numa`` (systemd 246: the CPUs of the NUMAMask= nodes).  systemd
  sets them on the unit's main process (podman run, or the server itself);
  memory policy and CPU affinity survive fork and exec, so conmon, the OCI
  runtime and the container's server get them too (tests/e2e/test_numa_e2e.py).
- the podman script: ``numactl --interleave=NODES`` or ``numactl
  --cpunodebind=NODES --membind=NODES`` in front of ``podman run``, and a check
  that numactl is installed before anything starts.

Node lists are ints (validated against the host by spec/checks.py), written as
ranges (``0-7``, ``0,2-3``): the list syntax both systemd and numactl read.
"""

from __future__ import annotations

from layoutgen.render import quoting
from layoutgen.spec.schema import Service, Spec


def node_list(nodes: list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``0-2,5``: sorted, consecutive nodes as one range."""
    runs: list[list[int]] = []
    for n in sorted(set(nodes)):
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def mask(spec: Spec, svc: Service) -> str | None:
    """The service's nodes (every node of the host when it names none), or None
    without ``numa``."""
    if svc.numa is None:
        return None
    nodes = svc.numa.nodes
    return node_list(list(nodes) if nodes is not None else list(range(spec.host.cpu.nodes)))


def unit_keys(spec: Spec, svc: Service) -> list[tuple[str, str]]:
    """``[Service]`` keys (systemd.exec(5)); none without ``numa``."""
    nodes = mask(spec, svc)
    if svc.numa is None or nodes is None:
        return []
    keys = [("NUMAPolicy", svc.numa.policy), ("NUMAMask", nodes)]
    if svc.numa.policy == "bind":
        keys.append(("CPUAffinity", "numa"))
    return keys


def numactl(spec: Spec, svc: Service) -> list[str]:
    """The words in front of ``podman run`` in the script; none without ``numa``."""
    nodes = mask(spec, svc)
    if svc.numa is None or nodes is None:
        return []
    if svc.numa.policy == "interleave":
        return ["numactl", f"--interleave={nodes}"]
    return ["numactl", f"--cpunodebind={nodes}", f"--membind={nodes}"]


def numactl_check(name: str, spec: Spec, svc: Service) -> list[str]:
    """Shell lines the script runs before anything else: stop, saying why and what
    to install, when numactl is missing."""
    words = numactl(spec, svc)
    if not words or svc.numa is None:
        return []
    message = (
        f"{name}: numactl is not installed: services.{name}.numa (policy "
        f"{svc.numa.policy}, NUMA nodes {mask(spec, svc)}) runs podman under "
        f"{' '.join(words)}; install numactl (Debian/Ubuntu: apt-get install numactl; "
        "Fedora/RHEL: dnf install numactl)"
    )
    check = (
        f"command -v numactl >/dev/null 2>&1 || {{ echo {quoting.shell(message)} >&2; exit 1; }}"
    )
    return [check]
