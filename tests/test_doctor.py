"""layoutgen doctor: each planted fault on a live host gives exactly its finding, located.

The spec has two GPUs of different sizes (a 96 GB card by index, a 32 GB card
by UUID) and two services; its plan (MiB): gpu0 grandpa 34,001 + worker0
49,227 = 83,228 of 97,247; gpu1 grandpa 12,571 of 32,607; host RAM grandpa
311 (--mlock) + worker0 427 = 738.  A healthy host runs both services on
those figures exactly; each test changes one fact of it.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from layoutgen.live import doctor, findings, hostfacts, ports
from layoutgen.live.doctor import FileState, InstalledUnit, LiveHost
from layoutgen.live.nvml import Gpu, GpuProcess, NvmlReport
from layoutgen.render.validate import Validated, validate_files

ROOT = Path(__file__).resolve().parent.parent
PROFILE = ROOT / "layouts" / "models" / "qwen3-coder-next-q4_0.yaml"
MiB = 1 << 20
GiB = 1 << 30
PRO = "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition"
RTX = "NVIDIA GeForce RTX 5090"
UUID0 = "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"
UUID1 = "GPU-11111111-2222-3333-4444-555555555555"
MODEL = "/models/coder/Qwen3-Coder-Next-Q4_0.gguf"

SPEC = f"""\
host:
  name: compute
  cpu: {{cores: 16, threads: 32}}
  ram: 768GiB
  ram_reserve: 32GiB
  podman: "5.4"
  gpus:
    - id: gpu0
      index: 0
      name: {PRO}
      vram: 97247MiB
      reserve: 1GiB
    - id: gpu1
      index: 1
      name: {RTX}
      uuid: {UUID1}
      vram: 32607MiB
      reserve: 1GiB
models:
  coder:
    path: {MODEL}
    profile: {{PROFILE}}
runtimes:
  ik:
    kind: ik_llama.cpp
    image: registry.home.arpa/ik_llama.cpp:4327
    version: "4327"
services:
  grandpa:
    model: coder
    runtime: ik
    role: orchestrator
    port: 8000
    ctx: 32768
    threads: 15
    mlock: true
  worker0:
    model: coder
    runtime: ik
    role: worker
    gpus: [gpu0]
    port: 8001
    ctx: 262144
    cache_type_k: q8_0
"""


def load(tmp: Path, profile: Path = PROFILE) -> Validated:
    path = tmp / "spec.yaml"
    path.write_text(SPEC.replace("{PROFILE}", str(profile)))
    (result,) = validate_files([(path, "spec.yaml")])
    assert result.validated is not None, result.diagnostics
    return result.validated


def proc(pid: int, name: str, mib: int | None) -> GpuProcess:
    return GpuProcess(pid, name, None if mib is None else mib * MiB, "compute")


def gpu(index: int, name: str, uuid: str, total_mib: int, *procs: GpuProcess) -> Gpu:
    used = sum(p.used or 0 for p in procs)
    total = total_mib * MiB
    return Gpu(
        index, name, uuid, f"00000000:0{index + 1}:00.0", total, used, total - used, (12, 0), procs
    )


GRANDPA0 = proc(1001, "llama-server", 34001)
WORKER0 = proc(1002, "llama-server", 49227)
GRANDPA1 = proc(1003, "llama-server", 12571)
XORG = proc(900, "Xorg", 300)  # within the 1 GiB reserve: no finding


def nvml(*gpus: Gpu) -> NvmlReport:
    return NvmlReport(True, "", "580.65.06", "13.0", gpus)


def gpu0(*procs: GpuProcess) -> Gpu:
    return gpu(0, PRO, UUID0, 97247, *procs)


def gpu1(*procs: GpuProcess, index: int = 1) -> Gpu:
    return gpu(index, RTX, UUID1, 32607, *procs)


def listen(*spec: tuple[str, int]) -> ports.Sockets:
    return ports.Sockets(tuple(ports.Listener(p, a, 4000 + p) for a, p in spec))


def healthy() -> LiveHost:
    return LiveHost(
        nvml=nvml(gpu0(XORG, GRANDPA0, WORKER0), gpu1(GRANDPA1)),
        mem_available=600 * GiB,
        memlock=None,
        sockets=listen(("127.0.0.1", 8000), ("127.0.0.1", 8001), ("0.0.0.0", 22)),
        podman="5.4.2",
        model_files={MODEL: FileState(45 * GiB)},
        rendered_dir="out/compute",
        rendered={"quadlet/grandpa.container": b"[Container]\n"},
        installed=(
            InstalledUnit(
                "grandpa.container", "/etc/containers/systemd/grandpa.container", b"[Container]\n"
            ),
        ),
        unit_states={"grandpa.service": "active", "worker0.service": "active"},
    )


def lines(v: Validated, live: LiveHost) -> list[str]:
    return [f.diagnostic.gcc() for f in findings.diagnose(v, live)]


@pytest.fixture
def v(tmp_path: Path) -> Validated:
    return load(tmp_path)


def test_the_plan_is_what_the_tests_assume(v: Validated) -> None:
    per = {(d.id, round(d.used / MiB)) for d in v.plan.devices}
    assert per == {("gpu0", 83228), ("gpu1", 12571), ("host", 738)}


def test_healthy_host_has_no_findings(v: Validated) -> None:
    assert findings.diagnose(v, healthy()) == []
    assert findings.exit_code([]) == 0
    assert findings.format_findings([], "text") == ""


# ------------------------------------------------------------------ GPUs


def test_missing_gpu_by_uuid(v: Validated) -> None:
    live = dataclasses.replace(healthy(), nvml=nvml(gpu0(XORG, GRANDPA0, WORKER0)))
    assert lines(v, live) == [
        f"spec.yaml:16:13: error: host.gpus[1].uuid: gpu1: no GPU with UUID {UUID1} on this "
        f"host (NVML sees 0: {PRO} {UUID0}); put the card back, or write the UUID "
        "'layoutgen probe' prints"
    ]


def test_missing_gpu_by_index(v: Validated) -> None:
    live = dataclasses.replace(healthy(), nvml=nvml(gpu1(GRANDPA1)))
    assert lines(v, live) == [
        "spec.yaml:9:14: error: host.gpus[0].index: gpu0: no GPU at index 0 on this host "
        f"(NVML sees 1: {RTX} {UUID1}); put the card back, or remove it from the spec"
    ]


def test_uuid_moved_to_another_index(v: Validated) -> None:
    live = dataclasses.replace(
        healthy(), nvml=nvml(gpu0(XORG, GRANDPA0, WORKER0), gpu1(GRANDPA1, index=2))
    )
    assert lines(v, live) == [
        "spec.yaml:14:14: warning: host.gpus[1].index: gpu1 moved from index 1 to 2: render "
        "uses the UUID, so its units still find the card; write index: 2"
    ]


def test_renamed_gpu(v: Validated) -> None:
    renamed = dataclasses.replace(gpu1(GRANDPA1), name="NVIDIA GeForce RTX 5090 D")
    live = dataclasses.replace(healthy(), nvml=nvml(gpu0(XORG, GRANDPA0, WORKER0), renamed))
    assert lines(v, live) == [
        f"spec.yaml:15:13: warning: host.gpus[1].name: gpu1 (index 1) is 'NVIDIA GeForce RTX "
        f"5090 D', the spec says '{RTX}'; write name: 'NVIDIA GeForce RTX 5090 D'"
    ]


def test_swapped_cards_without_uuid_suggest_adding_it(v: Validated) -> None:
    """gpu0 has no UUID: index 0 is now the 5090 (which gpu1 finds by UUID)."""
    swapped = nvml(gpu(0, RTX, UUID1, 32607), gpu(1, PRO, UUID0, 97247))
    live = dataclasses.replace(healthy(), nvml=swapped, sockets=listen())
    assert lines(v, live) == [
        f"spec.yaml:10:13: error: host.gpus[0].name: gpu0 (index 0) is '{RTX}', the spec says "
        f"'{PRO}'; a '{PRO}' is at index 1: did the indices change? write uuid: {UUID0} so "
        "the units follow the card",
        "spec.yaml:11:13: error: host.gpus[0].vram: gpu0: NVML reports 32,607 MiB total, the "
        "spec says 97,247 MiB (64,640 MiB less): the plan needs 84,252 MiB with the reserve, "
        "more than the card has; write vram: 32607MiB and plan again",
        "spec.yaml:14:14: warning: host.gpus[1].index: gpu1 moved from index 1 to 0: render "
        "uses the UUID, so its units still find the card; write index: 0",
    ]


def test_vram_other_than_the_spec(v: Validated) -> None:
    bigger = dataclasses.replace(gpu0(XORG, GRANDPA0, WORKER0), total=97887 * MiB + 123)
    live = dataclasses.replace(healthy(), nvml=nvml(bigger, gpu1(GRANDPA1)))
    assert lines(v, live) == [
        "spec.yaml:11:13: warning: host.gpus[0].vram: gpu0: NVML reports 97,887 MiB total, "
        "the spec says 97,247 MiB (640 MiB more); write vram: 97887MiB"
    ]


def test_no_driver(v: Validated) -> None:
    live = dataclasses.replace(
        healthy(), nvml=NvmlReport(False, "libnvidia-ml.so.1 not found", "", "", ())
    )
    assert lines(v, live) == [
        "spec.yaml:7:3: error: host.gpus: NVML is not available (libnvidia-ml.so.1 not found): "
        "the 2 local GPU(s) cannot be checked; run doctor where the NVIDIA driver is loaded"
    ]


# ------------------------------------------------------- foreign processes


def test_foreign_process_the_plan_still_fits_beside(v: Validated) -> None:
    xorg = proc(4242, "Xorg", 6144)
    live = dataclasses.replace(healthy(), nvml=nvml(gpu0(xorg, GRANDPA0, WORKER0), gpu1(GRANDPA1)))
    assert lines(v, live) == [
        "spec.yaml:12:16: warning: gpu0: process 4242 (Xorg) holds 6,144 MiB, more than the "
        "reserve of 1,024 MiB; the plan (83,228 MiB of 97,247 MiB) still fits beside it with "
        "7,875 MiB to spare: raise reserve to 6GiB so the plan counts it"
    ]


def test_foreign_process_the_plan_does_not_fit_beside(v: Validated) -> None:
    comfy = proc(4343, "python3", 20480)  # no vLLM service: a python process is foreign
    live = dataclasses.replace(healthy(), nvml=nvml(gpu0(comfy, GRANDPA0, WORKER0), gpu1(GRANDPA1)))
    assert lines(v, live) == [
        "spec.yaml:12:16: error: gpu0: process 4343 (python3) holds 20,480 MiB; the plan "
        "needs 83,228 MiB of 97,247 MiB, 6,461 MiB short with it there: stop it, or raise "
        "reserve to 20GiB and let the plan shrink by 6,461 MiB"
    ]
    (finding,) = findings.diagnose(v, live)
    assert finding.check == "foreign-process"


def test_servers_of_a_stopped_layout_are_foreign(v: Validated) -> None:
    """Nothing listens on 8000/8001: the llama-server on gpu1 is not this layout's."""
    live = dataclasses.replace(
        healthy(), nvml=nvml(gpu0(XORG), gpu1(proc(77, "llama-server", 2048))), sockets=listen()
    )
    assert lines(v, live) == [
        "spec.yaml:18:16: warning: gpu1: process 77 (llama-server) holds 2,048 MiB, more than "
        "the reserve of 1,024 MiB; the plan (12,571 MiB of 32,607 MiB) still fits beside it "
        "with 17,988 MiB to spare: raise reserve to 2GiB so the plan counts it"
    ]


# --------------------------------------------------------------- VRAM drift


def test_running_service_drifts_from_the_plan(v: Validated) -> None:
    live = dataclasses.replace(
        healthy(), nvml=nvml(gpu0(XORG, GRANDPA0, WORKER0), gpu1(proc(1003, "llama-server", 14000)))
    )
    assert lines(v, live) == [
        "spec.yaml:29:3: warning: services.grandpa: on gpu1 its server 1003 (llama-server) "
        "holds 14,000 MiB, the plan says 12,571 MiB (+1,429 MiB, beyond ±5 % or 512 MiB): "
        "measure it: podman logs grandpa > grandpa.log 2>&1; layoutgen calibrate grandpa.log "
        "spec.yaml --service grandpa"
    ]


def test_drift_within_tolerance_is_quiet(v: Validated) -> None:
    live = dataclasses.replace(
        healthy(),
        nvml=nvml(gpu0(XORG, GRANDPA0, WORKER0), gpu1(proc(1003, "llama-server", 12571 + 600))),
    )
    assert lines(v, live) == []  # 600 MiB is within max(5 % of 12,571, 512) = 628 MiB


def test_services_sharing_a_gpu_are_measured_together(v: Validated) -> None:
    live = dataclasses.replace(
        healthy(),
        nvml=nvml(gpu0(XORG, GRANDPA0, proc(1002, "llama-server", 45000)), gpu1(GRANDPA1)),
    )
    assert lines(v, live) == [
        "spec.yaml:37:3: warning: services worker0, grandpa: on gpu0 the servers 1001 "
        "(llama-server), 1002 (llama-server) hold 79,001 MiB, the plan says 83,228 MiB "
        "(-4,227 MiB, beyond ±5 % or 512 MiB): measure it: podman logs worker0 > worker0.log "
        "2>&1; layoutgen calibrate worker0.log spec.yaml --service worker0; podman logs "
        "grandpa > grandpa.log 2>&1; layoutgen calibrate grandpa.log spec.yaml --service grandpa"
    ]


# ------------------------------------------------------------- RAM, memlock


def test_ram_short_for_services_not_running(v: Validated) -> None:
    live = dataclasses.replace(
        healthy(),
        nvml=nvml(gpu0(XORG, GRANDPA0), gpu1(GRANDPA1)),
        sockets=listen(("127.0.0.1", 8000)),
        mem_available=200 * MiB,
    )
    assert lines(v, live) == [
        "spec.yaml:4:8: error: host.ram: the services not running (worker0) need 427 MiB of "
        "host RAM (the plan's 738 MiB less the 311 MiB running services hold); MemAvailable "
        "is 200 MiB, 227 MiB short: stop what holds the memory, or move weights to the GPUs"
    ]


def test_memlock_below_what_a_service_pins(v: Validated) -> None:
    live = dataclasses.replace(
        healthy(),
        nvml=nvml(gpu0(XORG, WORKER0), gpu1()),
        sockets=listen(("127.0.0.1", 8001)),
        memlock=64 * 1024,
    )
    assert lines(v, live) == [  # not known who runs it
        "spec.yaml:36:12: warning: services.grandpa: pins 311 MiB of host memory (--mlock), "
        "but this user's memlock limit is 64 KiB (hard RLIMIT_MEMLOCK): a rootless "
        "service cannot raise it to the unlimited its unit asks for; run it rootful (as "
        "root), or set memlock unlimited for this user in /etc/security/limits.conf"
    ]
    # issue 36: a run that is not as root says it is rootless ...
    assert lines(v, dataclasses.replace(live, rootful=False)) == [
        "spec.yaml:36:12: warning: services.grandpa: pins 311 MiB of host memory (--mlock), "
        "but this user's memlock limit is 64 KiB (hard RLIMIT_MEMLOCK) and doctor runs "
        "rootless (not as root): a rootless service cannot raise it to the unlimited its unit "
        "asks for; run it rootful (as root), or set memlock unlimited for this user in "
        "/etc/security/limits.conf"
    ]
    # ... and a root run is rootful: root raises its own limit, as the unit asks
    assert lines(v, dataclasses.replace(live, rootful=True)) == []


# ------------------------------------------------------ host name, cores, threads


def test_a_host_with_another_name_cores_or_threads_is_named(v: Validated) -> None:
    """Issue 36: doctor compares the host's name, cores and threads with the spec's."""
    assert lines(v, dataclasses.replace(healthy(), hostname="compute.home.arpa")) == []
    live = dataclasses.replace(
        healthy(),
        hostname="tower",
        hostname_how="/proc/sys/kernel/hostname",
        cpu_cores=8,
        cpu_cores_how="/proc/cpuinfo (unique physical id, core id pairs)",
        cpu_threads=32,
        cpu_threads_how="/sys/devices/system/cpu/online: 0-31",
    )
    assert lines(v, live) == [
        "spec.yaml:2:9: warning: host.name: this host is tower (/proc/sys/kernel/hostname), "
        "the spec is for compute: run doctor on compute, or give this host's spec (name: tower)",
        "spec.yaml:3:16: warning: host.cpu.cores: the spec says 16, this host has 8 "
        "(/proc/cpuinfo (unique physical id, core id pairs)): the services' threads are "
        "checked against the spec's; write cores: 8 (layoutgen probe reads it)",
    ]
    threads = dataclasses.replace(healthy(), cpu_threads=16, cpu_threads_how="/proc/cpuinfo")
    (line,) = lines(v, threads)
    assert line.startswith("spec.yaml:3:29: warning: host.cpu.threads: the spec says 32, ")


def test_a_host_of_other_sockets_or_numa_nodes_is_named(v: Validated) -> None:
    """The spec's NUMA layout (one socket, one node: not written) against the host's:
    the plan's speed reads host RAM by it, and a BIOS NPS/SNC change moves it."""
    same = dataclasses.replace(healthy(), cpu_sockets=1, cpu_numa_nodes=1)
    assert lines(v, same) == []
    nps4 = dataclasses.replace(healthy(), cpu_sockets=2, cpu_numa_nodes=8)
    sockets, nodes = sorted(lines(v, nps4), key=lambda line: "numa_nodes" in line)
    # neither key is written: both point at host.cpu, line 3
    assert sockets.startswith(
        "spec.yaml:3:3: warning: host.cpu.sockets: the spec says 1, this host has 2 "
        "(distinct physical ids)"
    )
    assert nodes.startswith(
        "spec.yaml:3:3: warning: host.cpu.numa_nodes: the spec says 1, this host has 8 "
        "(/sys/devices/system/node): the plan's speed reads host RAM by the spec's NUMA layout"
    )
    assert nodes.endswith("write numa_nodes: 8 (layoutgen probe reads it)")


def test_gather_reads_the_name_and_cpu_under_root_and_who_runs(
    v: Validated, tmp_path: Path
) -> None:
    root = tmp_path / "root"
    fake_proc(root)
    (root / "proc/sys/kernel").mkdir(parents=True)
    (root / "proc/sys/kernel/hostname").write_text("tower\n")
    (root / "proc/cpuinfo").write_text(
        "".join(f"processor\t: {i}\nphysical id\t: 0\ncore id\t: {i % 4}\n\n" for i in range(8))
    )

    def gather(uid: int) -> LiveHost:
        return doctor.gather(
            v,
            nvml(gpu0(XORG, GRANDPA0, WORKER0), gpu1(GRANDPA1)),
            out=tmp_path / "out",
            root=root,
            install_dirs=[],
            read_memlock=lambda: hostfacts.Memlock(None, None, ""),
            read_podman=lambda: hostfacts.PodmanFacts("5.4.2", "podman version 5.4.2", ""),
            unit_states=lambda units: {},
            euid=lambda: uid,
        )

    live = gather(1000)
    assert (live.hostname, live.cpu_cores, live.cpu_threads) == ("tower", 4, 8)
    assert live.rootful is False and gather(0).rootful is True
    checks = {f.check for f in findings.diagnose(v, live)}
    assert {"host", "cpu"} <= checks
    # a root without /proc/sys/kernel/hostname is not this machine's name
    (root / "proc/sys/kernel/hostname").unlink()
    assert gather(0).hostname is None


def test_memlock_unlimited_or_large_enough_is_fine(v: Validated) -> None:
    stopped = dataclasses.replace(
        healthy(), nvml=nvml(gpu0(XORG, WORKER0), gpu1()), sockets=listen(("127.0.0.1", 8001))
    )
    assert lines(v, stopped) == []
    assert lines(v, dataclasses.replace(stopped, memlock=1 * GiB)) == []


# -------------------------------------------------------------------- ports


def test_port_open_to_the_network_without_expose(v: Validated) -> None:
    live = dataclasses.replace(healthy(), sockets=listen(("127.0.0.1", 8000), ("0.0.0.0", 8001)))
    assert lines(v, live) == [
        "spec.yaml:42:11: error: services.worker0.port: port 8001 listens on 0.0.0.0 (all "
        "interfaces: reachable from the network), but the service does not say expose: true; "
        "start it from its rendered unit, which binds 127.0.0.1, or write expose: true if it "
        "is meant to be reachable"
    ]


def test_ipv6_wildcard_counts_too(v: Validated) -> None:
    live = dataclasses.replace(healthy(), sockets=listen(("::", 8000), ("127.0.0.1", 8001)))
    (line,) = lines(v, live)
    assert line.startswith(
        "spec.yaml:33:11: error: services.grandpa.port: port 8000 listens on :: (all"
    )


def test_port_held_while_the_unit_is_inactive(v: Validated) -> None:
    live = dataclasses.replace(
        healthy(),
        nvml=nvml(gpu0(XORG, GRANDPA0), gpu1(GRANDPA1)),
        unit_states={"grandpa.service": "active", "worker0.service": "inactive"},
    )
    assert lines(v, live) == [
        "spec.yaml:42:11: error: services.worker0.port: port 8001 is in use (listening on "
        "127.0.0.1) while worker0.service is inactive: something else holds it and the "
        "service cannot bind it; stop that (ss -ltnp 'sport = :8001' names it), or give the "
        "service another port"
    ]


def test_unreadable_socket_tables(v: Validated) -> None:
    live = dataclasses.replace(
        healthy(),
        nvml=nvml(gpu0(XORG), gpu1()),
        sockets=ports.Sockets((), ("/proc/net/tcp does not exist",)),
    )
    assert lines(v, live) == [
        "spec.yaml:28:1: warning: services: cannot read the socket tables (/proc/net/tcp does "
        "not exist): which services run, and their ports, are unknown"
    ]


# ------------------------------------------------------- model files, podman


def test_missing_model_file(v: Validated) -> None:
    live = dataclasses.replace(healthy(), model_files={MODEL: FileState(None, "does not exist")})
    assert lines(v, live) == [
        f"spec.yaml:21:11: error: models.coder.path: {MODEL} does not exist: download the "
        "model there, or correct the path"
    ]


def test_a_profile_without_file_sizes_checks_existence_only(v: Validated) -> None:
    assert v.profiles["coder"].files == ()
    live = dataclasses.replace(healthy(), model_files={MODEL: FileState(12345)})
    assert lines(v, live) == []


def test_podman_older_than_the_spec(v: Validated) -> None:
    live = dataclasses.replace(healthy(), podman="5.2.1")
    assert lines(v, live) == [
        "spec.yaml:6:11: error: host.podman: this host runs podman 5.2.1, older than the "
        "spec's 5.4: the units may use keys it does not know; upgrade podman, or write "
        "podman: '5.2' and render again"
    ]
    assert lines(v, dataclasses.replace(healthy(), podman="5.4")) == []
    assert lines(v, dataclasses.replace(healthy(), podman="6.0.0")) == []


def test_no_podman(v: Validated) -> None:
    live = dataclasses.replace(healthy(), podman=None, podman_reason="podman is not on PATH")
    assert lines(v, live) == [
        "spec.yaml:6:11: error: host.podman: podman is not usable here (podman is not on "
        "PATH); the container services need it"
    ]


def test_stale_installed_unit(v: Validated) -> None:
    stale = InstalledUnit(
        "grandpa.container", "/home/u/.config/containers/systemd/grandpa.container", b"old\n"
    )
    live = dataclasses.replace(healthy(), installed=(stale,))
    assert lines(v, live) == [
        "spec.yaml:29:3: error: services.grandpa: "
        "/home/u/.config/containers/systemd/grandpa.container differs from "
        "out/compute/quadlet/grandpa.container: it was installed before the last render; copy "
        "it again, run 'systemctl --user daemon-reload' and restart grandpa.service"
    ]


# ------------------------------------------------------------------ formats


def test_formats(v: Validated) -> None:
    live = dataclasses.replace(
        healthy(), podman="5.2.1", model_files={MODEL: FileState(None, "does not exist")}
    )
    found = findings.diagnose(v, live)
    assert findings.exit_code(found) == 1
    assert [f.check for f in found] == ["podman", "model-file"]
    text = findings.format_findings(found, "text").splitlines()
    assert [t.split(": ")[0] for t in text] == ["spec.yaml:6:11", "spec.yaml:21:11"]
    doc = json.loads(findings.format_findings(found, "json"))
    assert doc[1] == {
        "file": "spec.yaml",
        "line": 21,
        "col": 11,
        "severity": "error",
        "check": "model-file",
        "message": f"models.coder.path: {MODEL} does not exist: download the model there, "
        "or correct the path",
    }
    github = findings.format_findings(found, "github").splitlines()
    assert github[1] == (
        f"::error file=spec.yaml,line=21,col=11::models.coder.path: {MODEL} does not exist: "
        "download the model there, or correct the path"
    )
    with pytest.raises(ValueError, match="unknown format 'xml'"):
        findings.format_findings(found, "xml")


# ---------------------------------------------------------- readers, gather


def row(sl: int, local: str, remote: str, st: str, uid: int, inode: int) -> str:
    """One line of /proc/net/tcp{,6} in the kernel's layout (proc(5))."""
    rest = f"00000000:00000000 00:00000000 00000000 {uid:>5} {0:>8} {inode} 1 0000000000000000"
    return f"{sl:>4}: {local} {remote} {st} {rest} 100 0 0 10 0"


HEAD = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout"
V4_ANY, V6_ANY = "00000000:0000", "00000000000000000000000000000000:0000"
#: /proc/net/tcp: 127.0.0.1:8000 and 0.0.0.0:8001 listening, one established
#: connection (st 01), one line the kernel never writes
TCP = "\n".join(
    [
        HEAD + " inode",
        row(0, "0100007F:1F40", V4_ANY, "0A", 1000, 51234),
        row(1, "00000000:1F41", V4_ANY, "0A", 1000, 51235),
        row(2, "0100007F:1F40", "0100007F:D2F0", "01", 1000, 51299),
        "   3: garbage",
    ]
)
#: /proc/net/tcp6: [::]:22 and [::1]:8002 listening
TCP6 = "\n".join(
    [
        HEAD + " inode",
        row(0, "00000000000000000000000000000000:0016", V6_ANY, "0A", 0, 20811),
        row(1, "00000000000000000000000001000000:1F42", V6_ANY, "0A", 1000, 61000),
    ]
)


def fake_proc(root: Path) -> None:
    net = root / "proc" / "net"
    net.mkdir(parents=True)
    (net / "tcp").write_text(TCP)
    (net / "tcp6").write_text(TCP6)
    (root / "proc" / "meminfo").write_text("MemTotal:  792723456 kB\nMemAvailable:  629145600 kB\n")


def test_socket_tables(tmp_path: Path) -> None:
    fake_proc(tmp_path)
    found = ports.read(tmp_path)
    assert found.problems == ()
    assert found.listeners == (
        ports.Listener(22, "::", 20811),
        ports.Listener(8000, "127.0.0.1", 51234),
        ports.Listener(8001, "0.0.0.0", 51235),
        ports.Listener(8002, "::1", 61000),
    )
    assert [s.wildcard for s in found.listeners] == [True, False, True, False]
    assert ports.read(tmp_path / "nowhere").problems == ("/proc/net/tcp does not exist",)


def test_systemctl_show_output() -> None:
    text = "LoadState=loaded\nActiveState=active\n\nLoadState=not-found\nActiveState=inactive\n"
    assert doctor.parse_show(text, ["a.service", "b.service"]) == {"a.service": "active"}
    assert doctor.parse_show(text, ["a.service"]) == {}  # blocks do not match: say nothing


def test_gather_and_diagnose_a_host_tree(tmp_path: Path) -> None:
    """The whole path: a fake /proc, a model file of another size than its profile says,
    out/ rendered by layoutgen, an install dir with a stale unit, old podman."""
    from layoutgen.render.artifacts import render

    profile = tmp_path / "coder.yaml"
    profile.write_text(
        PROFILE.read_text() + "files:\n  - {name: Qwen3-Coder-Next-Q4_0.gguf, size: 1234}\n"
    )
    v = load(tmp_path, profile)
    root = tmp_path / "root"
    fake_proc(root)
    model = root / MODEL.lstrip("/")
    model.parent.mkdir(parents=True)
    model.write_bytes(b"GGUF" * 250)
    out = tmp_path / "out"
    for rel, text in render(v, "spec.yaml").items():
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text(text)
    system, user = tmp_path / "etc-containers-systemd", tmp_path / "user-systemd"
    system.mkdir()
    user.mkdir()
    (system / "grandpa.container").write_bytes(
        (out / "compute/quadlet/grandpa.container").read_bytes()
    )
    (system / "worker0.container").write_text("[Container]\nImage=old\n")
    asked: list[Sequence[str]] = []

    def states(units: Sequence[str]) -> dict[str, str]:
        asked.append(units)
        return {"grandpa.service": "active", "worker0.service": "active"}

    live = doctor.gather(
        v,
        nvml(gpu0(XORG, GRANDPA0, WORKER0), gpu1(GRANDPA1)),
        out=out,
        root=root,
        install_dirs=[system, user],
        read_memlock=lambda: hostfacts.Memlock(None, None, ""),
        read_podman=lambda: hostfacts.PodmanFacts("5.2.1", "podman version 5.2.1", ""),
        unit_states=states,
    )
    assert asked == [["grandpa.service", "worker0.service"]]
    assert live.mem_available == 629145600 * 1024
    assert live.model_files == {MODEL: FileState(1000)}
    assert sorted(live.rendered) == [
        "quadlet/grandpa.container",
        "quadlet/worker0.container",
        "systemd/grandpa.service",
        "systemd/worker0.service",
    ]
    assert [u.name for u in live.installed] == ["grandpa.container", "worker0.container"]
    assert lines(v, live) == [
        "spec.yaml:6:11: error: host.podman: this host runs podman 5.2.1, older than the "
        "spec's 5.4: the units may use keys it does not know; upgrade podman, or write "
        "podman: '5.2' and render again",
        f"spec.yaml:21:11: error: models.coder.path: {MODEL} is 1,000 bytes, the profile "
        f"{profile} says 1,234: another quantization or an unfinished download; fetch it "
        f"again, or write the profile anew with 'layoutgen inspect {MODEL} -o {profile}'",
        f"spec.yaml:37:3: error: services.worker0: {system}/worker0.container differs from "
        f"{out}/compute/quadlet/worker0.container: it was installed before the last render; "
        "copy it again, run 'systemctl daemon-reload' and restart worker0.service",
        "spec.yaml:42:11: error: services.worker0.port: port 8001 listens on 0.0.0.0 (all "
        "interfaces: reachable from the network), but the service does not say expose: true; "
        "start it from its rendered unit, which binds 127.0.0.1, or write expose: true if it "
        "is meant to be reachable",
    ]


def test_nothing_installed_is_no_finding(tmp_path: Path) -> None:
    v = load(tmp_path)
    live = dataclasses.replace(healthy(), installed=())
    assert lines(v, live) == []


@pytest.mark.parametrize("layout", sorted((ROOT / "layouts").glob("*.yaml")), ids=lambda p: p.name)
def test_a_host_as_each_example_plans_it_is_healthy(layout: Path) -> None:
    """No false alarms: every example layout, on a host that is exactly its plan."""
    (result,) = validate_files([(layout, layout.name)])
    assert result.validated is not None
    v = result.validated
    by_name = {rs.name: rs for rs in v.services}
    pids = iter(range(1000, 2000))
    gpus = []
    for g in v.spec.host.gpus:
        if g.index is None:
            continue
        procs = [
            GpuProcess(next(pids), findings.server_names(v, by_name[sp.name])[0], use, "compute")
            for sp in v.plan.services
            if (use := findings.on_device(sp, g.id))
        ]
        uuid = g.uuid or f"GPU-{g.index:08x}-0000-0000-0000-000000000000"
        gpus.append(
            Gpu(g.index, g.name or "GPU", uuid, "", g.vram, 0, g.vram, (12, 0), tuple(procs))
        )
    files = {}
    for mid, model in v.spec.models.items():
        files[model.path] = FileState(1)
        for f in v.profiles[mid].files:
            files[str(Path(model.path).parent / f.name)] = FileState(f.size)
    live = LiveHost(
        nvml=nvml(*gpus),
        mem_available=v.spec.host.ram,
        memlock=None,
        sockets=listen(*(("127.0.0.1", s.port) for s in v.spec.services.values())),
        podman=v.spec.host.podman or "5.4",
        model_files=files,
    )
    assert lines(v, live) == []


CPU_ONLY = """\
host:
  name: box
  cpu: {cores: 8, threads: 16%(isa)s}
  ram: 256GiB
  ram_reserve: 8GiB
  gpus: []
models:
  m: {path: /srv/models/qwen3-coder-next-q4_0.gguf, profile: %(profile)s}
runtimes:
  llama: {kind: llama.cpp, binary: /usr/local/bin/llama-server, version: b8175}
services:
  cpu: {model: m, runtime: llama, role: batch, port: 8000, ctx: 4096%(args)s}
"""


def _cpu_only(tmp_path: Path, isa: str = "", args: str = "") -> Validated:
    path = tmp_path / "cpu.yaml"
    profile = ROOT / "layouts" / "models" / "qwen3-coder-next-q4_0.yaml"
    path.write_text(CPU_ONLY % {"isa": isa, "profile": profile, "args": args})
    (result,) = validate_files([(path, "cpu.yaml")])
    assert result.validated is not None, result.diagnostics
    return result.validated


def _host(isa: str | None) -> LiveHost:
    return LiveHost(
        nvml=NvmlReport(False, "no driver", None, None, ()),
        mem_available=None,
        memlock=None,
        sockets=ports.Sockets(()),
        podman="5.4.2",
        cpu_isa=isa,
        cpu_isa_how="flags ..." if isa else "",
    )


def _cpu_findings(v: Validated, live: LiveHost) -> list[str]:
    return [f.diagnostic.gcc() for f in findings.diagnose(v, live) if f.check == "cpu"]


def test_an_instruction_set_that_repacks_otherwise_is_a_finding(tmp_path: Path) -> None:
    """A q4_0 model on a CPU-only llama.cpp service: AVX2 (the default x86-64-v3)
    repacks its matrices, an ARM host without the dot product repacks none: the host
    buffers are not the plan's.  Said at host.cpu.isa when written, else host.cpu."""
    v = _cpu_only(tmp_path)
    (got,) = _cpu_findings(v, _host("aarch64-v8.0"))
    assert got.startswith("cpu.yaml:3:3: warning: host.cpu.isa: this host is aarch64-v8.0")
    assert "the plan follows x86-64-v3" in got and "for cpu (" in got
    assert "MiB here)" in got and "0 MiB here" in got
    assert got.endswith("write isa: aarch64-v8.0 (layoutgen probe reads it)")
    written = _cpu_only(tmp_path, ", isa: x86-64-v3")
    line = (tmp_path / "cpu.yaml").read_text().splitlines()[2]
    (at,) = _cpu_findings(written, _host("aarch64-v8.0"))
    assert at.startswith(f"cpu.yaml:3:{line.index('x86-64-v3') + 1}: warning: host.cpu.isa:")


def test_an_instruction_set_that_changes_nothing_is_quiet(tmp_path: Path) -> None:
    """The same level, no reading, or a level that repacks the same (-nr turns
    repacking off: no level moves anything)."""
    v = _cpu_only(tmp_path)
    assert _cpu_findings(v, _host("x86-64-v3")) == []
    assert _cpu_findings(v, _host(None)) == []
    off = _cpu_only(tmp_path, args=", args: [-nr]")
    assert _cpu_findings(off, _host("aarch64-v8.0")) == []
