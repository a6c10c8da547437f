"""A spec's NUMA layout and a service's ``numa:`` in the plan: the speed read from where
the pages sit (layoutgen.speed.numa, through plan_speed.with_numa), the plan's line,
the refusals. Figures worked out by hand in the comments."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from layoutgen.errors import InvalidInput
from layoutgen.render.validate import Validated, validate_file
from layoutgen.solve.plan import SpeedPlan, to_json, to_text
from layoutgen.speed import model

from conftest import ROOT

TINY = ROOT / "tests" / "cases" / "speed" / "dense-tiny.yaml"

SPEC = f"""\
host:
  name: tiny
  cpu: {{cores: 32, threads: 64, model: EPYC 9175F@CPU@}}
  ram: @RAM@
  ram_reserve: @RESERVE@
  podman: "5.4"
models:
  tiny:
    path: /mnt/data/models/tiny/tiny.gguf
    profile: {TINY}
runtimes:
  llama:
    kind: llama.cpp
    image: ghcr.io/ggml-org/llama.cpp:server
services:
  lane:
    model: tiny
    runtime: llama
    role: batch
    port: 8000
    ctx: 4096
    parallel: 1
    threads: 8
@SERVICE@"""

# dense-tiny's weights a token reads (tests/test_plan_speed.py works them out): 2 layers
# of 4 attention and 3 FFN f16 matrices and 2 f32 norms, output_norm, output
WEIGHTS = 2 * (4 * 1024 * 1024 * 2 + 3 * 1024 * 4096 * 2 + 2 * 1024 * 4) + 1024 * 4
WEIGHTS += 1024 * 1000 * 2
SOCKET = 12 * 6400e6 * 8  # one EPYC 9175F: 12 channels DDR5-6400
XGMI = 256e9  # four xGMI3 x16 links, one way (hardware.XGMI4)


def _text(cpu: str = "", service: str = "", ram: str = "64GiB", reserve: str = "8GiB") -> str:
    text = SPEC
    for key, value in (("@CPU@", cpu), ("@SERVICE@", service), ("@RAM@", ram)):
        text = text.replace(key, value)
    return text.replace("@RESERVE@", reserve)


def _plan(
    tmp: Path, cpu: str = "", service: str = "", ram: str = "64GiB", reserve: str = "8GiB"
) -> Validated:
    path = tmp / "spec.yaml"
    path.write_text(_text(cpu, service, ram, reserve))
    return validate_file(path)


def _speed(tmp: Path, cpu: str, service: str = "") -> SpeedPlan:
    found = _plan(tmp, cpu, service).plan.service("lane").speed
    assert isinstance(found, SpeedPlan), found
    return found


def _seconds(bandwidth: float, threads: int, crossing: float) -> float:
    """dense-tiny's token on host RAM read at BANDWIDTH (x the 0.61 prior), its 8
    threads' cores computing (f16: no CPU figure, the FLOPs floor), 3 host layers'
    barriers of THREADS threads at 6.3 us x CROSSING, and 0.5 ms."""
    params = WEIGHTS / 2
    flops = threads * 4.2e9 * 64
    return (
        max(WEIGHTS / (0.61 * bandwidth), 2 * params / flops)
        + 3 * threads * 6.3e-6 * crossing
        + 0.5e-3
    )


def test_two_sockets_read_where_the_pages_sit(tmp_path: Path) -> None:
    two = ", sockets: 2, numa_nodes: 2"
    k = model.DEFAULT.cross_socket
    # no policy: every page on node 0 (the loader's), 8 threads over both sockets: node
    # 0's 614 GB/s, or the link's 256 GB/s for the half read from socket 1: 512 GB/s
    spread = _speed(tmp_path, two)
    assert 1 / spread.decode_tps == pytest.approx(_seconds(2 * XGMI, 8, k), rel=1e-3)
    # bound to node 0: its 614 GB/s, threads on one socket: no crossing
    bound = _speed(tmp_path, two, "    numa: {policy: bind, nodes: [0]}\n")
    assert 1 / bound.decode_tps == pytest.approx(_seconds(SOCKET, 8, 1.0), rel=1e-3)
    # interleaved over both: each node half the bytes (1/1229), a quarter crossing each
    # way (0.25 / 256 GB/s = 1/1024): 1,024 GB/s
    mixed = _speed(tmp_path, two, "    numa: {policy: interleave}\n")
    assert 1 / mixed.decode_tps == pytest.approx(_seconds(4 * XGMI, 8, k), rel=1e-3)
    # --numa distribute over memory-mapped weights (the batch role locks them: mlock
    # off): every page local, 1,229 GB/s
    local = _speed(tmp_path, two, "    mlock: false\n    args: [--numa, distribute]\n")
    assert 1 / local.decode_tps == pytest.approx(_seconds(2 * SOCKET, 8, k), rel=1e-3)
    # the same machine at NPS0: the hardware interleaves whatever the service asks
    nps0 = _speed(tmp_path, ", sockets: 2, numa_nodes: 1")
    assert nps0.decode_tps == pytest.approx(mixed.decode_tps)
    # a host of one socket (the spec's default): its 614 GB/s, no NUMA term, as bound
    one = _speed(tmp_path, "").decode_tps
    assert one == pytest.approx(bound.decode_tps)
    assert bound.decode_tps > spread.decode_tps


def test_the_plan_says_which_reading_it_used(tmp_path: Path) -> None:
    v = _plan(tmp_path, ", sockets: 2, numa_nodes: 8", "    numa: {policy: interleave}\n")
    text = to_text(v.plan)
    assert (
        "    NUMA: 2 sockets, 8 NUMA nodes; pages interleaved over every node: host RAM read "
        "at 1,024 of its 1,229 GB/s, threads on 2 sockets"
    ) in text
    doc = json.loads(to_json(v.plan))["services"]["lane"]["speed"]
    assert doc["numa"].startswith("2 sockets, 8 NUMA nodes; pages interleaved")
    plain = _plan(tmp_path)
    assert "NUMA:" not in to_text(plain.plan)
    assert "numa" not in json.loads(to_json(plain.plan))["services"]["lane"]["speed"]


def test_a_link_not_known_is_said(tmp_path: Path) -> None:
    # an unnamed CPU: no table figure for the link; write host.cpu.socket_link
    path = tmp_path / "spec.yaml"
    text = _text(", sockets: 2")
    text = text.replace("model: EPYC 9175F, ", "")
    text = text.replace("  podman:", "  memory_bandwidth: 500GB/s\n  podman:")
    path.write_text(text)
    speed = validate_file(path).plan.service("lane").speed
    assert isinstance(speed, SpeedPlan) and speed.numa is not None
    assert "the link between sockets is not known (host.cpu.socket_link)" in speed.numa
    path.write_text(text.replace("sockets: 2", "sockets: 2, socket_link: 100GB/s"))
    linked = validate_file(path).plan.service("lane").speed
    assert isinstance(linked, SpeedPlan) and linked.numa is not None
    # pages on node 0 (250 GB/s), half of them read over 100 GB/s: 200 GB/s
    assert "host RAM read at 200 of its 500 GB/s" in linked.numa


def test_a_bound_service_must_fit_its_nodes(tmp_path: Path) -> None:
    # 32 nodes of 2 GiB / 32 = 64 MiB, less 256 MiB / 32 = 8 MiB of reserve each: bound to
    # one, dense-tiny's weights, 4096-token KV and compute buffers (192 MiB) do not fit,
    # though the host's 1.75 GiB holds them: NUMAPolicy=bind would refuse their pages
    with pytest.raises(InvalidInput) as caught:
        _plan(
            tmp_path,
            ", sockets: 2, numa_nodes: 32",
            "    numa: {policy: bind, nodes: [3]}\n",
            ram="2GiB",
            reserve="256MiB",
        )
    msg = str(caught.value)
    assert "spec.yaml:24:33: error: services.lane: does not fit NUMA node 3 it is bound" in msg
    assert "has 64 MiB - reserve 8 MiB = 56 MiB (host.ram and ram_reserve over 32 nodes)" in msg
    assert "needs 192 MiB of host RAM" in msg and "short by 136 MiB" in msg
    # bound to four of them (224 MiB free): it fits
    fits = _plan(
        tmp_path,
        ", sockets: 2, numa_nodes: 32",
        "    numa: {policy: bind, nodes: [0, 1, 2, 3]}\n",
        ram="2GiB",
        reserve="256MiB",
    )
    assert fits.plan.service("lane").speed is not None


def test_nodes_the_host_does_not_have_are_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput) as caught:
        _plan(tmp_path, ", sockets: 2, numa_nodes: 2", "    numa: {policy: bind, nodes: [2]}\n")
    assert (
        "spec.yaml:24:33: error: services.lane.numa.nodes: node 2 is not on the host, which "
        "has 2 NUMA nodes (0-1; host.cpu.numa_nodes, else one a socket)"
    ) in str(caught.value)
    # NUMA nodes that do not split over the sockets, bind without nodes: the schema's
    with pytest.raises(
        InvalidInput, match=re.escape("must be 1 (NPS0: one node over every socket) or a")
    ):
        _plan(tmp_path, ", sockets: 2, numa_nodes: 3")
    with pytest.raises(
        InvalidInput, match=re.escape("policy bind needs 'nodes:', e.g. nodes: [0]")
    ):
        _plan(tmp_path, ", sockets: 2", "    numa: {policy: bind}\n")
