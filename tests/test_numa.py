"""layoutgen.speed.numa: host RAM's bandwidth by where pages and threads sit, by hand.

Every figure below is worked out in the comment above it from the mechanism in the
module docstring: a token's time is the longest of each node's share of the bytes over
its bandwidth (the host's peak split evenly over the nodes) and each socket's bytes read
from the other socket over the link.
"""

from __future__ import annotations

import math

import pytest

from layoutgen.speed.model import HOST, Memory
from layoutgen.speed.numa import Reading, Topology, bandwidth, host_memory, reading

GB = 1e9
PEAK = 600 * GB  # two sockets of 300 GB/s
FILL = reading(None, None, None, mmap=False)
INTERLEAVE = reading("interleave", None, None, mmap=False)
BIND0 = reading("bind", (0,), None, mmap=False)
LOCAL = reading(None, None, "distribute", mmap=True)


def test_one_node_reads_the_whole_peak_whatever_the_reading() -> None:
    for r in (FILL, INTERLEAVE, BIND0, LOCAL):
        assert bandwidth(Topology(), PEAK, 100 * GB, r).bandwidth == PEAK


def test_pages_on_one_node_read_from_both_sockets() -> None:
    # all pages on node 0 (300 GB/s); half the threads on socket 1 read them over the
    # link: 0.5 of the bytes / 200 GB/s = 1/400 < 1/300: the node's controllers bound it
    two = Topology(sockets=2, nodes=2, link=200 * GB)
    assert bandwidth(two, PEAK, 100 * GB, FILL).bandwidth == pytest.approx(300 * GB)
    # a slower link: 0.5 / 100 GB/s = 1/200 > 1/300: the link bounds it
    slow = Topology(sockets=2, nodes=2, link=100 * GB)
    assert bandwidth(slow, PEAK, 100 * GB, FILL).bandwidth == pytest.approx(200 * GB)
    found = bandwidth(slow, PEAK, 100 * GB, FILL)
    assert found.sockets == 2 and found.thread_share == 1.0 and found.spilled == 0.0


def test_interleaved_pages_use_both_sockets_less_what_crosses() -> None:
    # half the pages on each node: 0.5 / 300 = 1/600; a socket's half read by the other
    # socket's half of the threads: 0.25 / 200 = 1/800: the nodes bound it, 600
    assert bandwidth(Topology(2, 2, 200 * GB), PEAK, 1.0, INTERLEAVE).bandwidth == (
        pytest.approx(600 * GB)
    )
    # 0.25 / 100 GB/s = 1/400: the link bounds it, 400
    assert bandwidth(Topology(2, 2, 100 * GB), PEAK, 1.0, INTERLEAVE).bandwidth == (
        pytest.approx(400 * GB)
    )


def test_local_pages_cross_nothing() -> None:
    # each thread's pages on its own node: both nodes at full speed, no link traffic
    for link in (10 * GB, 100 * GB, None):
        assert bandwidth(Topology(2, 2, link), PEAK, 1.0, LOCAL).bandwidth == pytest.approx(PEAK)


def test_bind_reads_one_node_with_its_threads_only() -> None:
    found = bandwidth(Topology(2, 2, 100 * GB), PEAK, 100 * GB, BIND0)
    assert found.bandwidth == pytest.approx(300 * GB)  # no thread elsewhere: no link
    assert found.sockets == 1 and found.thread_share == 0.5


def test_fill_spills_to_the_nearest_nodes() -> None:
    # 2 x NPS4: 8 nodes of 75 GB/s and 100 GB each; 250 GB fill nodes 0, 1 (100 each)
    # and 2 (50), all on socket 0: node 0 holds 0.4 of the bytes: 0.4 / 75 = 1/187.5;
    # the link carries socket 0's bytes to the other half of the threads: 0.5 / 200 =
    # 1/400; the fullest node bounds it
    nps4 = Topology(sockets=2, nodes=8, link=200 * GB, node_memory=100 * GB)
    found = bandwidth(nps4, PEAK, 250 * GB, FILL)
    assert found.bandwidth == pytest.approx(187.5 * GB)
    assert found.spilled == 0.0  # every node was the policy's to fill
    # bound to node 0, 150 GB: 50 GB do not fit and go to node 1 (the kernel's fallback
    # under the preferred order; a strict bind would refuse them: the plan says so)
    bound = bandwidth(nps4, PEAK, 150 * GB, BIND0)
    assert bound.spilled == pytest.approx(50 * GB)


def test_nps0_is_the_hardware_interleaving_every_socket() -> None:
    nps0 = Topology(sockets=2, nodes=1, link=100 * GB)
    found = bandwidth(nps0, PEAK, 1.0, FILL)  # whatever the service asks
    assert found.bandwidth == pytest.approx(400 * GB)  # the interleaved case above
    assert "NPS0" in found.why


def test_what_the_flags_and_policy_make_of_pages_and_threads() -> None:
    assert reading(None, None, "distribute", mmap=True).pages == "local"
    # repacked or read into buffers: the loading thread touches every page first
    assert reading(None, None, "distribute", mmap=False).pages == "fill"
    isolate = reading(None, None, "isolate", mmap=True)
    assert (isolate.pages, isolate.thread_nodes) == ("fill", (0,))
    assert reading(None, None, "numactl", mmap=True).pages == "fill"
    bind = reading("bind", (1, 2), None, mmap=False)
    assert (bind.page_nodes, bind.thread_nodes) == ((1, 2), (1, 2))
    assert reading("interleave", (0, 1), None, mmap=False).pages == "interleave"


def test_host_memory_caps_threads_at_the_bound_nodes_cores() -> None:
    mem = Memory(HOST, PEAK, 64e12, threads=64)
    two = Topology(2, 2, 100 * GB)
    bound, found = host_memory(mem, two, 100 * GB, BIND0, cores=64)
    assert bound.threads == 32 and bound.sockets == 1
    assert bound.flops == pytest.approx(32e12)  # half the threads, half the FLOPs
    assert bound.bandwidth == found.bandwidth == pytest.approx(300 * GB)
    spread, _ = host_memory(mem, two, 100 * GB, FILL, cores=64)
    assert spread.threads == 64 and spread.sockets == 2


def test_a_bad_layout_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        Topology(sockets=0)
    with pytest.raises(ValueError, match="do not split"):
        Topology(sockets=2, nodes=3)
    assert Topology(2, 1).units == 2 and Topology(2, 8).socket_of(5) == 1
    assert math.isinf(Topology().node_memory)
    assert isinstance(FILL, Reading)
