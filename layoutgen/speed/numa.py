"""Which memory controllers serve a decode's host reads on a NUMA host.

The speed model reads host RAM at ``efficiency x bandwidth``; on a host with more
than one NUMA node the bandwidth a token's weights come at depends on where the
pages sit and where the threads run (llama.cpp's ``--numa distribute|isolate|
numactl``, ``numactl --interleave=all`` or ``-N 0 -m 0``, the BIOS's NPS/SNC
setting).  This module prices that: a host's *peak* bandwidth (the figure the
model already has, for the whole host) is split evenly over its nodes, and a
policy says how many nodes' controllers a token reads and what share crosses
the inter-socket link.

Readings (``Numa.bandwidth``):

* one node per host (NPS0, or NPS1 on one socket): every channel, the whole peak;
* ``bind`` (``--numa isolate``, ``numactl -N n -m n``): one node's share;
* ``interleave`` (``numactl --interleave=all``, and ``--numa distribute`` once the
  page cache was dropped so the threads' first touch spreads the pages): all nodes,
  but a socket reads (S-1)/S of its bytes from the other sockets, so the total is at
  most ``link / ((S-1)/S)`` when the link is given;
* ``first_touch`` (no policy: the loader thread touches every page, so they all sit
  on its node): one node's controllers serve every thread, whatever their count.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Policy = Literal["bind", "interleave", "first_touch"]

#: llama.cpp / ik_llama.cpp ``--numa`` values -> the policy they give a decode
NUMA_FLAG: dict[str, Policy] = {
    "isolate": "bind",
    "distribute": "interleave",
    "numactl": "bind",
}


@dataclass(frozen=True)
class Numa:
    """A host's NUMA layout: SOCKETS x NODES_PER_SOCKET nodes sharing PEAK bytes/s
    evenly; LINK is the inter-socket bandwidth (bytes/s, all links, one way), None
    when not known (then only the node count limits a reading)."""

    sockets: int = 1
    nodes_per_socket: int = 1
    link: float | None = None

    def __post_init__(self) -> None:
        if self.sockets < 1 or self.nodes_per_socket < 1:
            raise ValueError("sockets and nodes_per_socket must be at least 1")

    @property
    def nodes(self) -> int:
        return self.sockets * self.nodes_per_socket

    def bandwidth(self, peak: float, policy: Policy) -> float:
        """Bytes/s a token's host reads get under POLICY on a host of PEAK bytes/s."""
        if self.nodes == 1:
            return peak
        node = peak / self.nodes
        if policy in ("bind", "first_touch"):
            return node
        if self.sockets == 1 or self.link is None:
            return peak
        remote = (self.sockets - 1) / self.sockets
        return min(peak, self.link / remote)

    def reading(self, policy: Policy) -> str:
        """One line for the plan: which NUMA reading the estimate assumed."""
        if self.nodes == 1:
            return "one NUMA node: the host's whole RAM bandwidth"
        what = {
            "bind": "one node's memory controllers (--numa isolate / numactl -N -m)",
            "first_touch": "one node's controllers (no NUMA policy: pages on the loader's node)",
            "interleave": "all nodes' controllers, interleaved (--numa distribute / "
            "numactl --interleave=all)",
        }[policy]
        return f"{self.sockets} socket(s) x {self.nodes_per_socket} node(s): {what}"


def policy_from_args(args: tuple[str, ...] | list[str]) -> Policy:
    """The policy a server's ARGS (and a numactl wrapper's, if it is in them) give."""
    a = list(args)
    for i, arg in enumerate(a):
        if arg == "--interleave=all" or arg.startswith("--interleave"):
            return "interleave"
        if arg in ("-N", "-m", "--cpunodebind", "--membind") or arg.startswith(
            ("--cpunodebind=", "--membind=")
        ):
            return "bind"
        if arg == "--numa" and i + 1 < len(a):
            return NUMA_FLAG.get(a[i + 1], "first_touch")
        if arg.startswith("--numa="):
            return NUMA_FLAG.get(arg.split("=", 1)[1], "first_touch")
    return "first_touch"
