"""``layoutgen probe``: host facts from fake /proc and /sys trees, NVML reports built by hand.

Every number the block states must be the number read (cores, threads, MemTotal,
NVML's total to the byte), and the block must pass the real spec validator
exactly as printed.
"""

from __future__ import annotations

import os
import resource
import shutil
from pathlib import Path

import pytest

from layoutgen.errors import InvalidInput
from layoutgen.inputs import source
from layoutgen.live import hostfacts, probe
from layoutgen.live.hostfacts import HostFacts, read_cdi, read_cpu, read_host, read_memory
from layoutgen.live.nvml import Gpu, GpuProcess, NvmlReport
from layoutgen.render.validate import validate_document
from layoutgen.spec.schema import Spec

DATA = Path(__file__).parent / "probe_data"
SLEEP = shutil.which("sleep", path=os.defpath) or "/bin/sleep"
MiB, GiB = 1024**2, 1024**3

# ------------------------------------------------------------- fake machines

XEON_FLAGS = (
    "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush dts acpi "
    "mmx fxsr sse sse2 ss ht tm pbe syscall nx pdpe1gb rdtscp lm constant_tsc art arch_perfmon "
    "pebs bts rep_good nopl xtopology nonstop_tsc cpuid aperfmperf pni pclmulqdq dtes64 monitor "
    "ds_cpl vmx smx est tm2 ssse3 sdbg fma cx16 xtpr pdcm pcid dca sse4_1 sse4_2 x2apic movbe "
    "popcnt tsc_deadline_timer aes xsave avx f16c rdrand lahf_lm abm 3dnowprefetch cpuid_fault "
    "epb cat_l3 invpcid_single intel_ppin ssbd mba ibrs ibpb stibp ibrs_enhanced tpr_shadow "
    "flexpriority ept vpid ept_ad fsgsbase tsc_adjust bmi1 avx2 smep bmi2 erms invpcid cqm "
    "rdt_a avx512f avx512dq rdseed adx smap avx512ifma clflushopt clwb intel_pt avx512cd sha_ni "
    "avx512bw avx512vl xsaveopt xsavec xgetbv1 xsaves cqm_llc cqm_occup_llc cqm_mbm_total "
    "cqm_mbm_local split_lock_detect wbnoinvd dtherm ida arat pln pts hwp hwp_act_window hwp_epp "
    "hwp_pkg_req avx512vbmi umip pku ospke avx512_vbmi2 gfni vaes vpclmulqdq avx512_vnni "
    "avx512_bitalg tme avx512_vpopcntdq la57 rdpid fsrm md_clear pconfig flush_l1d "
    "arch_capabilities"
)
ALDER_FLAGS = (
    "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush dts acpi "
    "mmx fxsr sse sse2 ss ht tm pbe syscall nx pdpe1gb rdtscp lm constant_tsc art arch_perfmon "
    "pebs bts rep_good nopl xtopology nonstop_tsc cpuid aperfmperf tsc_known_freq pni pclmulqdq "
    "dtes64 monitor ds_cpl vmx est tm2 ssse3 sdbg fma cx16 xtpr pdcm sse4_1 sse4_2 x2apic movbe "
    "popcnt tsc_deadline_timer aes xsave avx f16c rdrand lahf_lm abm 3dnowprefetch cpuid_fault "
    "epb ssbd ibrs ibpb stibp ibrs_enhanced tpr_shadow flexpriority ept vpid ept_ad fsgsbase "
    "tsc_adjust bmi1 avx2 smep bmi2 erms invpcid rdseed adx smap clflushopt clwb intel_pt sha_ni "
    "xsaveopt xsavec xgetbv1 xsaves split_lock_detect avx_vnni dtherm ida arat pln pts hwp "
    "hwp_notify hwp_act_window hwp_epp hwp_pkg_req hfi umip pku ospke waitpkg gfni vaes "
    "vpclmulqdq rdpid movdiri movdir64b fsrm md_clear serialize arch_lbr ibt flush_l1d "
    "arch_capabilities"
)
NEOVERSE_FEATURES = (
    "fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop "
    "asimddp ssbs"
)


def x86_block(
    n: int, model: str, phys: int, core: int, siblings: int, cores: int, flags: str
) -> str:
    return (
        f"processor\t: {n}\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 143\n"
        f"model name\t: {model}\nstepping\t: 8\nmicrocode\t: 0x2b000181\n"
        f"cpu MHz\t\t: 2100.000\ncache size\t: 61440 KB\nphysical id\t: {phys}\n"
        f"siblings\t: {siblings}\ncore id\t\t: {core}\ncpu cores\t: {cores}\n"
        f"apicid\t\t: {n}\ninitial apicid\t: {n}\nfpu\t\t: yes\nfpu_exception\t: yes\n"
        f"cpuid level\t: 32\nwp\t\t: yes\nflags\t\t: {flags}\nbogomips\t: 4200.00\n"
        "clflush size\t: 64\ncache_alignment\t: 64\n"
        "address sizes\t: 46 bits physical, 57 bits virtual\npower management:\n\n"
    )


def meminfo(total_kb: int, available_kb: int, huge: tuple[int, int] | None) -> str:
    text = (
        f"MemTotal:       {total_kb} kB\nMemFree:        {available_kb - 4096} kB\n"
        f"MemAvailable:   {available_kb} kB\nBuffers:          123456 kB\n"
        "Cached:         9876544 kB\nSwapCached:            0 kB\nUnevictable:       12660 kB\n"
        "Mlocked:           11748 kB\nSwapTotal:       8388604 kB\nSwapFree:        8388604 kB\n"
        "DirectMap4k:      486144 kB\nDirectMap2M:    13023232 kB\n"
    )
    if huge is not None:
        pages, size_kb = huge
        text += (
            f"HugePages_Total:    {pages}\nHugePages_Free:     {pages}\nHugePages_Rsvd:        0\n"
            f"HugePages_Surp:        0\nHugepagesize:       {size_kb} kB\n"
            f"Hugetlb:         {pages * size_kb} kB\n"
        )
    return text


def write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


XEON = "Intel(R) Xeon(R) Gold 6430"
XEON_TOTAL_KB = 527_927_256  # not a whole MiB: written as KiB


def xeon_box(root: Path) -> None:
    """2 sockets x 8 cores x 2 threads; core ids skip numbers and repeat across sockets."""
    core_ids = [0, 1, 2, 3, 8, 9, 10, 11]
    blocks = []
    n = 0
    for _thread in range(2):
        for phys in range(2):
            for core in core_ids:
                blocks.append(x86_block(n, XEON, phys, core, 16, 8, XEON_FLAGS))
                n += 1
    write(root, "proc/cpuinfo", "".join(blocks))
    write(root, "proc/meminfo", meminfo(XEON_TOTAL_KB, 500_000_000, (1024, 2048)))
    write(root, "proc/sys/kernel/hostname", "Compute-01.lab.example\n")
    write(root, "sys/devices/system/cpu/online", "0-31\n")
    for node in range(2):
        (root / f"sys/devices/system/node/node{node}").mkdir(parents=True)
    (root / "sys/devices/system/node/possible").parent.mkdir(parents=True, exist_ok=True)
    write(root, "sys/devices/system/node/possible", "0-1\n")


def arm_box(root: Path) -> None:
    """Ampere Altra-like: 8 cores, no SMT, no physical id / core id in cpuinfo."""
    blocks = [
        f"processor\t: {n}\nBogoMIPS\t: 50.00\nFeatures\t: {NEOVERSE_FEATURES}\n"
        "CPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x3\nCPU part\t: 0xd0c\n"
        "CPU revision\t: 1\n\n"
        for n in range(8)
    ]
    write(root, "proc/cpuinfo", "".join(blocks))
    write(root, "proc/meminfo", meminfo(131_899_768, 120_000_000, (0, 2048)))
    write(root, "proc/sys/kernel/hostname", "altra\n")
    write(root, "sys/devices/system/cpu/online", "0-7\n")
    for n in range(8):
        write(root, f"sys/devices/system/cpu/cpu{n}/topology/core_cpus_list", f"{n}\n")


def alder_box(root: Path) -> None:
    """Beelink EQI12 (i5-1235U): 2 P-cores with SMT and 8 E-cores; no hugepage lines."""
    model = "12th Gen Intel(R) Core(TM) i5-1235U"
    cores = [0, 0, 4, 4, 8, 9, 10, 11, 12, 13, 14, 15]
    blocks = [x86_block(n, model, 0, c, 12, 10, ALDER_FLAGS) for n, c in enumerate(cores)]
    write(root, "proc/cpuinfo", "".join(blocks))
    write(root, "proc/meminfo", meminfo(32_532_480, 28_000_000, None))
    write(root, "proc/sys/kernel/hostname", "beelink\n")
    write(root, "sys/devices/system/cpu/online", "0-11\n")


CDI_YAML = """\
---
cdiVersion: 0.5.0
kind: nvidia.com/gpu
devices:
- name: "0"
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
- name: "1"
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia1
- name: GPU-5a2c1f3e-8d4b-4c6a-9e7f-0123456789ab
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
- name: all
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
    - path: /dev/nvidia1
containerEdits:
  env:
  - NVIDIA_VISIBLE_DEVICES=void
"""
CDI_JSON = '{"cdiVersion": "0.6.0", "kind": "vendor.example/fpga", "devices": [{"name": "x0"}]}'

UUID0 = "GPU-5a2c1f3e-8d4b-4c6a-9e7f-0123456789ab"
UUID1 = "GPU-0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9"
BIG = 97247 * MiB
SMALL = 16311 * MiB + 4096  # not a whole MiB: written as bytes


def two_gpus(*, reversed_order: bool = False) -> NvmlReport:
    gpus = (
        Gpu(
            0,
            "NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
            UUID0,
            "00000000:41:00.0",
            BIG,
            600 * MiB,
            BIG - 600 * MiB,
            (12, 0),
            (
                GpuProcess(4242, "llama-server", 512 * MiB, "compute"),
                GpuProcess(1201, "Xorg", 70 * MiB, "graphics"),
                GpuProcess(1460, "gnome-shell", 18 * MiB, "graphics"),
            ),
        ),
        Gpu(
            1, "NVIDIA GeForce RTX 5060 Ti", UUID1, "00000000:C1:00.0", SMALL, 0, SMALL, (12, 0), ()
        ),
    )
    return NvmlReport(True, "", "570.124.06", "12.8", gpus[::-1] if reversed_order else gpus)


CPU_ONLY = NvmlReport(False, "NVML Shared Library Not Found", "", "", ())


@pytest.fixture
def fake_podman(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty directory alone on PATH; tests drop a `podman` script there."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    return bin_dir


def podman_script(bin_dir: Path, body: str) -> None:
    script = bin_dir / "podman"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)


def fixed_memlock(monkeypatch: pytest.MonkeyPatch, soft: int, hard: int) -> None:
    monkeypatch.setattr(hostfacts.resource, "getrlimit", lambda _which: (soft, hard))


def xeon_facts(tmp_path: Path, fake_podman: Path, monkeypatch: pytest.MonkeyPatch) -> HostFacts:
    root = tmp_path / "root"
    xeon_box(root)
    write(root, "etc/cdi/nvidia.yaml", CDI_YAML)
    write(root, "var/run/cdi/fpga.json", CDI_JSON)
    # as podman answers: its version, and an empty image store
    podman_script(
        fake_podman, 'case "$1" in images) echo "[]";; *) echo "podman version 5.4.2";; esac'
    )
    fixed_memlock(monkeypatch, 8 * MiB, resource.RLIM_INFINITY)
    return read_host(root)


def validated(block: str) -> Spec:
    """The block pasted, unchanged, under ``version: 1`` and run through the real validator."""
    doc = source.parse("version: 1\n" + block, "probe.yaml")
    return validate_document(doc).spec


# ------------------------------------------------------------- the readers


def test_two_socket_xeon_counts_cores_by_socket_and_core_id(tmp_path: Path) -> None:
    xeon_box(tmp_path)
    cpu = read_cpu(tmp_path)
    assert (cpu.cores, cpu.threads, cpu.sockets, cpu.numa_nodes) == (16, 32, 2, 2)
    assert (cpu.model, cpu.isa) == (XEON, "x86-64-v4")
    mem = read_memory(tmp_path)
    assert (mem.total, mem.hugepages, mem.hugepage_size) == (XEON_TOTAL_KB * 1024, 1024, 2 * MiB)
    assert mem.mlocked == 11748 * 1024


def test_aarch64_counts_cores_from_sys_topology(tmp_path: Path) -> None:
    arm_box(tmp_path)
    cpu = read_cpu(tmp_path)
    assert (cpu.cores, cpu.threads, cpu.sockets, cpu.model, cpu.isa) == (
        8,
        8,
        None,
        None,
        "aarch64",
    )
    assert cpu.cores_how == "/sys/devices/system/cpu/cpu*/topology/core_cpus_list (distinct lists)"
    assert "with asimddp" in cpu.isa_how


def test_aarch64_without_the_dot_product_is_its_own_level(tmp_path: Path) -> None:
    """A Cortex-A72 (Raspberry Pi 4, Graviton 1) has NEON but no asimddp: llama.cpp
    repacks nothing there, so the probe must not write the dot-product level."""
    arm_box(tmp_path)
    text = (tmp_path / "proc/cpuinfo").read_text().replace(" asimddp", "")
    write(tmp_path, "proc/cpuinfo", text)
    cpu = read_cpu(tmp_path)
    assert cpu.isa == "aarch64-v8.0"
    assert "WITHOUT asimddp" in cpu.isa_how


@pytest.mark.parametrize(
    ("extra", "isa"), [("", "x86-64-v4"), (" amx_tile amx_int8", "x86-64-v4-amx")]
)
def test_amx_needs_its_tile_and_int8_flags(tmp_path: Path, extra: str, isa: str) -> None:
    """ggml-cpu's AMX buffer needs AMX-INT8 with AVX512-VNNI (Sapphire Rapids and later);
    XEON_FLAGS is an Ice Lake: AVX-512 and VNNI, no AMX."""
    write(tmp_path, "proc/cpuinfo", x86_block(0, XEON, 0, 0, 1, 1, XEON_FLAGS + extra))
    assert read_cpu(tmp_path).isa == isa
    only_tile = XEON_FLAGS + " amx_tile"
    write(tmp_path, "proc/cpuinfo", x86_block(0, XEON, 0, 0, 1, 1, only_tile))
    assert read_cpu(tmp_path).isa == "x86-64-v4"


def test_thread_siblings_list_when_core_cpus_list_is_missing(tmp_path: Path) -> None:
    arm_box(tmp_path)
    for n in range(8):
        (tmp_path / f"sys/devices/system/cpu/cpu{n}/topology/core_cpus_list").unlink()
        pair = f"{n // 2 * 2}-{n // 2 * 2 + 1}\n"
        write(tmp_path, f"sys/devices/system/cpu/cpu{n}/topology/thread_siblings_list", pair)
    assert read_cpu(tmp_path).cores == 4


def test_hybrid_laptop_chip_without_hugepages(tmp_path: Path) -> None:
    alder_box(tmp_path)
    cpu = read_cpu(tmp_path)
    assert (cpu.cores, cpu.threads, cpu.sockets, cpu.isa) == (10, 12, 1, "x86-64-v3")
    mem = read_memory(tmp_path)
    assert (mem.total, mem.hugepages, mem.hugepage_size) == (32_532_480 * 1024, None, None)


@pytest.mark.parametrize(
    ("drop", "isa"),
    [("avx512vl", "x86-64-v3"), ("movbe", "x86-64"), ("abm", "x86-64"), ("avx2", "x86-64")],
)
def test_isa_levels_need_every_psabi_feature(tmp_path: Path, drop: str, isa: str) -> None:
    flags = " ".join(f for f in XEON_FLAGS.split() if f != drop)
    write(tmp_path, "proc/cpuinfo", x86_block(0, XEON, 0, 0, 1, 1, flags))
    got = read_cpu(tmp_path)
    assert got.isa == isa
    if isa == "x86-64":
        assert got.isa_how == f"flags lack x86-64-v3's {drop}"


def test_other_architectures_get_the_generic_level(tmp_path: Path) -> None:
    write(tmp_path, "proc/cpuinfo", "processor\t: 0\nhart\t\t: 0\nisa\t\t: rv64imafdc\n\n")
    assert read_cpu(tmp_path).isa == "x86-64"
    arm32 = "processor\t: 0\nFeatures\t: half thumb fastmult vfp edsp neon vfpv3\n\n"
    write(tmp_path, "proc/cpuinfo", arm32)
    assert read_cpu(tmp_path).isa == "x86-64"


def test_cdi_names_from_yaml_and_json_in_both_directories(tmp_path: Path) -> None:
    write(tmp_path, "etc/cdi/nvidia.yaml", CDI_YAML)
    write(tmp_path, "var/run/cdi/fpga.json", CDI_JSON)
    write(tmp_path, "etc/cdi/README.txt", "not a spec")
    cdi = read_cdi(tmp_path)
    assert cdi.names == (
        "nvidia.com/gpu=0",
        "nvidia.com/gpu=1",
        f"nvidia.com/gpu={UUID0}",
        "nvidia.com/gpu=all",
        "vendor.example/fpga=x0",
    )
    assert cdi.files == ("/etc/cdi/nvidia.yaml", "/var/run/cdi/fpga.json")
    assert cdi.problems == ()


def test_broken_cdi_files_are_reported_one_line_each(tmp_path: Path) -> None:
    write(tmp_path, "etc/cdi/a-good.yaml", CDI_YAML)
    write(tmp_path, "etc/cdi/b-unclosed.yaml", "kind: nvidia.com/gpu\ndevices: [{name: '0'}\n")
    write(tmp_path, "etc/cdi/c-list.json", "[1, 2]")
    write(tmp_path, "etc/cdi/d-python.yaml", "!!python/object/apply:os.system ['true']\n")
    write(tmp_path, "etc/cdi/e-nameless.yaml", "kind: nvidia.com/gpu\ndevices: [{}]\n")
    write(tmp_path, "etc/cdi/f-kind.yaml", "kind: gpu\ndevices: []\n")
    (tmp_path / "etc/cdi/g-dangling.yaml").symlink_to(tmp_path / "nowhere")
    os.mkfifo(tmp_path / "etc/cdi/h-fifo.yaml")
    write(tmp_path, "etc/cdi/i-binary.yaml", "")
    (tmp_path / "etc/cdi/i-binary.yaml").write_bytes(b"\xff\xfe\x00kind")
    cdi = read_cdi(tmp_path)
    assert "nvidia.com/gpu=0" in cdi.names
    problems = {p.split(":", 1)[0].removeprefix("/etc/cdi/"): p for p in cdi.problems}
    assert sorted(problems) == [
        "b-unclosed.yaml",
        "c-list.json",
        "d-python.yaml",
        "e-nameless.yaml",
        "f-kind.yaml",
        "g-dangling.yaml does not exist",
        "h-fifo.yaml is not a regular file",
        "i-binary.yaml",
    ]
    assert problems["c-list.json"] == (
        "/etc/cdi/c-list.json: not a CDI spec (a mapping with kind and devices)"
    )
    assert problems["e-nameless.yaml"] == "/etc/cdi/e-nameless.yaml: devices[0] has no valid 'name'"
    assert problems["b-unclosed.yaml"].startswith("/etc/cdi/b-unclosed.yaml: not YAML or JSON: ")
    assert all("\n" not in p for p in cdi.problems)


def test_podman_version_missing_slow_and_failing(
    fake_podman: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert hostfacts.read_podman().reason == "podman is not on PATH"
    podman_script(fake_podman, 'echo "podman version 5.4.0-dev"')
    assert hostfacts.read_podman().version == "5.4.0"
    podman_script(fake_podman, "echo oops >&2; exit 3")
    assert hostfacts.read_podman().reason == "podman --version exited with status 3"
    podman_script(fake_podman, "echo 'podman, a container engine'")
    assert hostfacts.read_podman().reason == "podman --version printed no version number"
    podman_script(fake_podman, f"exec {SLEEP} 30")
    assert hostfacts.read_podman(0.3).reason == "podman --version did not answer in 0.3 s"


def test_memlock_unlimited_and_limited() -> None:
    inf = resource.RLIM_INFINITY
    assert hostfacts.read_memlock(lambda _w: (inf, inf)) == hostfacts.Memlock(None, None, "")
    assert hostfacts.read_memlock(lambda _w: (65536, inf)) == hostfacts.Memlock(65536, None, "")


def test_hostname_falls_back_to_gethostname(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hostfacts.socket, "gethostname", lambda: "fallback")
    assert hostfacts.read_hostname(tmp_path) == hostfacts.HostName(
        "fallback", "socket.gethostname()", ""
    )


def test_an_empty_tree_gives_reasons_not_tracebacks(
    tmp_path: Path, fake_podman: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "proc/cpuinfo").mkdir(parents=True)  # a directory where a file should be
    monkeypatch.setattr(hostfacts.socket, "gethostname", lambda: "x")
    facts = read_host(tmp_path)
    assert facts.cpu.reason == "/proc/cpuinfo is not a regular file"
    assert facts.memory.reason == "/proc/meminfo does not exist"
    assert (facts.cpu.cores, facts.cpu.threads, facts.memory.total) == (None, None, None)
    text = probe.probe_text(facts, CPU_ONLY)
    assert (
        "    cores: 0  # UNKNOWN: no core ids in /proc/cpuinfo, /sys/devices/system/cpu unreadable"
        in text
    )
    assert "  ram: 0  # UNKNOWN: /proc/meminfo does not exist; write the installed RAM" in text
    with pytest.raises(InvalidInput, match="cores"):
        validated(text)  # the unknowns are refused until someone writes them


# ------------------------------------------------------------- the block


def test_probe_states_each_number_as_read_and_validates_unchanged(
    tmp_path: Path, fake_podman: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = probe.probe_text(xeon_facts(tmp_path, fake_podman, monkeypatch), two_gpus())
    assert text.startswith("host:")
    assert "    cores: 16  # 16 cores by /proc/cpuinfo (unique physical id, core id pairs)" in text
    assert f"  ram: {XEON_TOTAL_KB}KiB  # /proc/meminfo MemTotal {XEON_TOTAL_KB} kB" in text
    assert "      vram: 97247MiB  # NVML nvmlDeviceGetMemoryInfo total, exactly" in text
    assert f"      vram: {SMALL}  # NVML nvmlDeviceGetMemoryInfo total, exactly" in text
    assert f"uuid: {UUID0}  # NVML uuid, PCI 00000000:41:00.0, compute capability 12.0" in text
    spec = validated(text)
    host = spec.host
    assert (host.name, host.cpu.cores, host.cpu.threads, host.cpu.isa) == (
        "compute-01",
        16,
        32,
        "x86-64-v4",
    )
    assert host.ram == XEON_TOTAL_KB * 1024
    # two physical ids, two /sys nodes: the speed model's NUMA layout (one node a socket)
    assert (host.cpu.sockets, host.cpu.numa_nodes, host.cpu.nodes) == (2, None, 2)
    assert host.podman == "5.4"
    assert [(g.id, g.index, g.uuid, g.vram) for g in host.gpus] == [
        ("gpu0", 0, UUID0, BIG),
        ("gpu1", 1, UUID1, SMALL),
    ]
    assert host.gpus[0].name == "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"
    # what no spec service will get: the 88 MiB of graphics (the card's other 512 MiB
    # in use are a compute process's) rounds up to 256 MiB; the idle headless card
    # holds nothing
    assert [g.reserve for g in host.gpus] == [256 * MiB, 0]
    # max(8 GiB, 5 % of 503 GiB = 26 GiB) + the 2 GiB hugepage pool
    assert host.ram_reserve == 28 * GiB


def test_the_whole_block_for_the_xeon(
    tmp_path: Path, fake_podman: Path, monkeypatch: pytest.MonkeyPatch, update_golden: bool
) -> None:
    text = probe.probe_text(xeon_facts(tmp_path, fake_podman, monkeypatch), two_gpus())
    golden = DATA / "xeon-two-gpus.yaml"
    if update_golden:
        golden.write_text(text)
    assert text == golden.read_text()


def test_cdi_warning_names_the_gpu_podman_cannot_pass(
    tmp_path: Path, fake_podman: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = probe.probe_text(xeon_facts(tmp_path, fake_podman, monkeypatch), two_gpus())
    warnings = [line for line in text.splitlines() if "WARNING" in line]
    assert warnings == [
        f"      # WARNING: no CDI device nvidia.com/gpu={UUID1}: podman cannot pass this GPU "
        "to a container; create it: sudo nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml"
    ]
    assert "# CDI devices (/etc/cdi/nvidia.yaml, /var/run/cdi/fpga.json): " in text


def test_probe_is_deterministic_whatever_the_report_order(
    tmp_path: Path, fake_podman: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    facts = xeon_facts(tmp_path, fake_podman, monkeypatch)
    first = probe.probe_text(facts, two_gpus())
    assert probe.probe_text(facts, two_gpus(reversed_order=True)) == first
    assert probe.probe_text(read_host(tmp_path / "root"), two_gpus()) == first


def test_cpu_only_arm_host(
    tmp_path: Path, fake_podman: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    arm_box(tmp_path)
    fixed_memlock(monkeypatch, resource.RLIM_INFINITY, resource.RLIM_INFINITY)
    text = probe.probe_text(read_host(tmp_path), CPU_ONLY)
    assert (
        "  gpus: []  # NVML was not available (NVML Shared Library Not Found): no GPUs listed\n"
    ) in text
    assert '  # podman: not written (podman is not on PATH); add podman: "MAJOR.MINOR"' in text
    assert "memlock limit: soft unlimited, hard unlimited (RLIMIT_MEMLOCK of this user's" in text
    host = validated(text).host
    assert (host.name, host.cpu.cores, host.cpu.threads, host.cpu.isa) == ("altra", 8, 8, "aarch64")
    assert (host.gpus, host.podman, host.ram) == ((), None, 131_899_768 * 1024)
    assert host.ram_reserve == 8 * GiB


def test_laptop_without_hugepages_or_cdi(
    tmp_path: Path, fake_podman: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    alder_box(tmp_path)
    podman_script(fake_podman, 'echo "podman version 4.9.3"')
    facts = read_host(tmp_path)
    one = NvmlReport(True, "", "570.124.06", "12.8", two_gpus().gpus[1:])
    text = probe.probe_text(facts, one)
    assert "HugePages" not in text
    assert "  # CDI devices: none in /etc/cdi or /var/run/cdi; create them: sudo nvidia-ctk" in text
    assert "# WARNING: no CDI device nvidia.com/gpu=GPU-0f1e2d3c" in text
    host = validated(text).host
    assert (host.cpu.cores, host.cpu.threads, host.cpu.isa, host.podman) == (
        10,
        12,
        "x86-64-v3",
        "4.9",
    )
    assert [(g.index, g.vram) for g in host.gpus] == [(1, SMALL)]


def test_hostile_values_stay_in_their_comments(
    tmp_path: Path, fake_podman: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    alder_box(tmp_path)
    cpuinfo = (tmp_path / "proc/cpuinfo").read_text()
    write(tmp_path, "proc/cpuinfo", cpuinfo.replace("i5-1235U", "i5\x1b[31m\rx: 1"))
    write(tmp_path, "proc/sys/kernel/hostname", "---\n")
    evil = GpuProcess(7, "evil\nhost: x", None, "graphics")
    odd = Gpu(0, 'Bad\n"name"', "gpu-NOT-A-UUID", "0:1", 3, 0, 3, (8, 6), (evil,))
    text = probe.probe_text(read_host(tmp_path), NvmlReport(True, "", "1", "2", (odd,)))
    assert '      # name: not written, not plain text: Bad\\n"name"\n' in text
    assert "      # uuid: not written, not GPU-<hex>: gpu-NOT-A-UUID; PCI 0:1" in text
    assert "\x1b" not in text and "\r" not in text
    assert "  name: host  # /proc/sys/kernel/hostname: ---" in text
    host = validated(text).host
    assert host.gpus[0].vram == 3 and host.gpus[0].name is None and host.gpus[0].reserve == 0
    assert "reserve: 0  # suggestion, review: NVML used 0 B now" in text
    assert "(some usage unknown: at least 1GiB)" in text and "capped at half the VRAM" in text


def test_vram_and_ram_sizes_are_exact() -> None:
    assert probe.vram_size(97247 * MiB) == "97247MiB"
    assert probe.vram_size(96 * GiB) == "98304MiB"
    assert probe.vram_size(SMALL) == str(SMALL)
    assert probe.exact_size(768 * GiB) == "768GiB"
    assert probe.exact_size(XEON_TOTAL_KB * 1024) == f"{XEON_TOTAL_KB}KiB"
    assert probe.spec_name("Compute_01.lab") == "compute-01"
