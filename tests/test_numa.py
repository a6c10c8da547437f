"""The NUMA reading of layoutgen.speed.numa, by hand."""

from __future__ import annotations

import pytest

from layoutgen.speed.numa import Numa, policy_from_args

PEAK = 921.6e9  # 2 x 12 x DDR5-4800 x 8


def test_one_node_reads_every_channel() -> None:
    assert Numa().bandwidth(PEAK, "bind") == PEAK
    assert Numa(sockets=1, nodes_per_socket=1).bandwidth(PEAK, "first_touch") == PEAK


def test_bind_reads_one_node() -> None:
    nps4 = Numa(sockets=2, nodes_per_socket=4)
    assert nps4.bandwidth(PEAK, "bind") == pytest.approx(PEAK / 8)
    assert nps4.bandwidth(PEAK, "first_touch") == pytest.approx(PEAK / 8)


def test_interleave_is_limited_by_the_link() -> None:
    assert Numa(sockets=2, nodes_per_socket=4).bandwidth(PEAK, "interleave") == PEAK
    linked = Numa(sockets=2, nodes_per_socket=4, link=200e9)
    # half of every socket's bytes cross the link: at most 2 x 200 GB/s
    assert linked.bandwidth(PEAK, "interleave") == pytest.approx(400e9)
    one_socket = Numa(sockets=1, nodes_per_socket=4, link=1.0)
    assert one_socket.bandwidth(PEAK, "interleave") == PEAK


def test_policy_from_args() -> None:
    assert policy_from_args(["--numa", "distribute", "-t", "32"]) == "interleave"
    assert policy_from_args(["--numa=isolate"]) == "bind"
    assert policy_from_args(["numactl", "-N", "0", "-m", "0", "llama-server"]) == "bind"
    assert policy_from_args(["numactl", "--interleave=all", "llama-server"]) == "interleave"
    assert policy_from_args(["-t", "32"]) == "first_touch"


def test_reading_names_the_assumption() -> None:
    assert "interleaved" in Numa(2, 4).reading("interleave")
    assert "whole RAM" in Numa().reading("bind")


def test_bad_layout_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        Numa(sockets=0)
