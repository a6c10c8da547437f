"""Host RAM's bandwidth on a host of several NUMA nodes, by where a service's pages sit.

A decode's host threads read every host weight a token needs; on a host of more than
one node the bandwidth they get depends on which nodes' memory controllers hold the
pages and on how much of the traffic crosses between sockets (xGMI, UPI). This module
prices that from the host's layout (:class:`Topology`) and what the service does
(:class:`Reading`, from its ``numa:`` and its ``--numa`` flag):

* pages **fill** nodes in order from the first (the kernel's first touch: the thread
  that loads or repacks the weights places them on its node until it is full, then on
  the nearest: ubergarm's 386 GiB model "loaded mostly on node 1, then some of the
  weights went into node 0", ik_llama.cpp issue 296), **interleave** round-robin over
  a set of nodes (``numactl --interleave``, ``NUMAPolicy=interleave``, and an EPYC at
  NPS0, whose hardware interleaves every socket's channels), or sit **local** to the
  thread that reads them (``--numa distribute`` over memory-mapped weights: each page is
  faulted in by the thread that computes on it; llama.cpp PR 27986: a warmed
  distribute equals a per-node copy of the model);
* threads run on every node or on a bound set (``numa: {policy: bind}``,
  ``--numa isolate``).

A token's reads take the longest of: each node's share of the bytes over its
controllers' bandwidth (the host's peak split evenly over its nodes), and each socket's
bytes that threads on other sockets read over the link between them. One node, or every
page local: the whole peak. Pages on one node of two sockets read by threads on both:
that node's bandwidth, or the link's, whichever is less.

Threads that span sockets also meet at every op's barrier across the link; the speed
model prices that (model.Constants.cross_socket) with the sockets :func:`bandwidth`
reports.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal

from layoutgen.speed.model import Memory

Pages = Literal["fill", "interleave", "local"]

#: llama.cpp / ik_llama.cpp ``--numa`` values (common/arg.cpp: distribute, isolate,
#: numactl)
FLAGS = ("distribute", "isolate", "numactl")


@dataclass(frozen=True)
class Topology:
    """A host's NUMA layout: SOCKETS packages and NODES nodes the OS shows (a multiple of
    the sockets; 1 over several sockets is an EPYC at NPS0), LINK the bytes/s one way
    between two sockets (None: not known, then nothing limits what crosses), and
    NODE_MEMORY the bytes one node holds."""

    sockets: int = 1
    nodes: int = 1
    link: float | None = None
    node_memory: float = math.inf

    def __post_init__(self) -> None:
        if self.sockets < 1 or self.nodes < 1:
            raise ValueError("sockets and nodes must be at least 1")
        if self.nodes != 1 and self.nodes % self.sockets:
            raise ValueError(f"{self.nodes} nodes do not split over {self.sockets} sockets")

    @property
    def hardware_interleaved(self) -> bool:
        """One node over several sockets (NPS0): every socket's channels interleaved."""
        return self.nodes == 1 and self.sockets > 1

    @property
    def units(self) -> int:
        """Memory units priced: the nodes, or the sockets where one node spans them."""
        return self.sockets if self.hardware_interleaved else self.nodes

    def socket_of(self, node: int) -> int:
        return node // (self.units // self.sockets)


@dataclass(frozen=True)
class Reading:
    """How a service's pages and threads sit on the nodes: PAGES fill, interleave or
    local; PAGE_NODES the nodes pages go to first (None: all); THREAD_NODES the nodes
    its threads run on (None: all); WHY the plan's words for it."""

    pages: Pages
    page_nodes: tuple[int, ...] | None
    thread_nodes: tuple[int, ...] | None
    why: str


def reading(
    policy: str | None, nodes: tuple[int, ...] | None, flag: str | None, mmap: bool
) -> Reading:
    """What a service's ``numa:`` (POLICY, NODES), its ``--numa`` FLAG and whether its
    weights stay memory-mapped (MMAP) make of its pages and threads."""
    local = flag == "distribute" and mmap
    if policy == "bind":
        return Reading(
            "local" if local else "fill",
            nodes,
            nodes,
            f"bound to node {_nodes(nodes)}: its memory and threads there",
        )
    if policy == "interleave":
        threads = None if flag != "isolate" else (0,)
        return Reading("interleave", nodes, threads, f"pages interleaved over {_nodes(nodes)}")
    if local:
        return Reading(
            "local",
            None,
            None,
            "--numa distribute over memory-mapped weights: each page on the node of the "
            "thread that reads it (after the page cache was dropped)",
        )
    if flag == "isolate":
        return Reading(
            "fill", (0,), (0,), "--numa isolate: threads and first-touched pages on one node"
        )
    how = "--numa distribute, weights not memory-mapped" if flag == "distribute" else "no policy"
    return Reading(
        "fill",
        None,
        None,
        f"{how}: pages fill the loading thread's node first, threads on every node",
    )


def _nodes(nodes: tuple[int, ...] | None) -> str:
    return "every node" if nodes is None else ",".join(map(str, nodes))


@dataclass(frozen=True)
class Share:
    """What :func:`bandwidth` found: the bytes/s a token's host reads get, the sockets
    its threads span, the share of the host's nodes they run on, and the bytes that
    did not fit the nodes the reading asked for (spilled to others)."""

    bandwidth: float
    sockets: int
    thread_share: float
    spilled: float
    #: the reading as priced (an NPS0 host's own, whatever the service asked)
    why: str = ""


def bandwidth(topo: Topology, peak: float, resident: float, r: Reading) -> Share:
    """Host RAM's bytes/s for a token of a service holding RESIDENT bytes of weights in
    host RAM, read as R says, on TOPO whose nodes share PEAK bytes/s evenly."""
    n = topo.units
    if n == 1:
        return Share(peak, 1, 1.0, 0.0, r.why)
    if topo.hardware_interleaved:  # NPS0: the hardware spreads every page over sockets
        r = Reading(
            "interleave",
            None,
            None,
            f"one node over {topo.sockets} sockets (NPS0): the hardware interleaves every "
            "page over their channels",
        )
    every = tuple(range(n))
    threads = tuple(x for x in (r.thread_nodes or every) if x < n) or (0,)
    placed = tuple(x for x in (r.page_nodes or every) if x < n) or (0,)
    share = {x: 1 / len(threads) for x in threads}
    spilled = 0.0
    if r.pages == "interleave":
        pages = {x: 1 / len(placed) for x in placed}
    elif r.pages == "local":
        pages = dict(share)
    else:  # fill the set's nodes in order, then the others (the kernel's fallback)
        order = placed + tuple(x for x in every if x not in placed)
        left, pages = max(resident, 1.0), {}
        for i, x in enumerate(order):
            take = left if i == len(order) - 1 else min(left, topo.node_memory)
            if take <= 0:
                break
            pages[x] = take / max(resident, 1.0)
            if x not in placed:
                spilled += take
            left -= take
    node_bw = peak / n
    time = max(p / node_bw for p in pages.values())
    if r.pages != "local" and topo.link is not None:
        for s in range(topo.sockets):
            on_s = sum(p for x, p in pages.items() if topo.socket_of(x) == s)
            away = sum(t for x, t in share.items() if topo.socket_of(x) != s)
            time = max(time, on_s * away / topo.link)
    sockets = len({topo.socket_of(x) for x in threads})
    return Share(1 / time, sockets, len(threads) / n, spilled, r.why)


def host_memory(
    mem: Memory, topo: Topology, resident: float, r: Reading, cores: int
) -> tuple[Memory, Share]:
    """MEM (host RAM, its bandwidth the host's peak or measured figure over every node)
    as a service reading it as R sees it: the bandwidth :func:`bandwidth` finds, the
    sockets its threads span, and its threads at most the cores of the nodes they may
    run on (CORES: the host's)."""
    found = bandwidth(topo, mem.bandwidth, resident, r)
    allowed = max(1, int(cores * found.thread_share))
    threads = min(mem.threads, allowed) if mem.threads else allowed
    flops = mem.flops * threads / mem.threads if mem.threads else mem.flops
    out = replace(
        mem, bandwidth=found.bandwidth, sockets=found.sockets, threads=threads, flops=flops
    )
    return out, found
