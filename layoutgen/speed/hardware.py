"""Known GPUs and CPUs with sourced peak figures: the defaults a spec may override.

Peak memory bandwidth is the datasheet figure; the speed model multiplies it by the
memory's efficiency (a prior fitted on tests/speed_data, or the machine's own from
``layoutgen calibrate``), so an entry here never carries a guessed "effective"
bandwidth. Host bandwidth is channels x MT/s x 8 bytes (one 64-bit
channel per DIMM slot group; DDR5 counts its two 32-bit subchannels as one channel here).
CPU FLOPs are peak FP32 FMA throughput (cores x base GHz x FLOPs/cycle): the speed model
uses them only as a floor on time, so a peak (an upper bound on speed) can never make a
prediction too fast.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

GB = 1e9


@dataclass(frozen=True)
class GpuFacts:
    name: str
    bandwidth: float  # bytes/s, datasheet peak
    fp16_flops: float  # dense FP16 tensor FLOP/s, datasheet peak
    pcie: float  # host link bytes/s per direction (x16)
    source: str


@dataclass(frozen=True)
class CpuFacts:
    name: str
    cores: int
    base_ghz: float
    flops_per_cycle: int  # FP32 FLOPs per core per cycle (FMA = 2)
    channels: int  # memory channels of the platform
    mts: int  # the platform's rated DDR speed in MT/s
    source: str
    #: the vector instruction set the runtimes' CPU kernels use on it
    #: (layoutgen.speed.cpu_compute.ISAS): "avx2", "zen4" (AVX-512 on 256-bit
    #: datapaths), "zen5" (AVX-512 on full 512-bit datapaths), "avx512" (Intel's
    #: AVX-512 cores), "neon" (ARM)
    isa: str = "avx2"
    #: bytes/s one way between two sockets of it (xGMI, UPI), where sourced; None: not
    #: known (layoutgen.speed.numa then does not limit what crosses)
    link: float | None = None

    @property
    def memory_bandwidth(self) -> float:
        return self.channels * self.mts * 1e6 * 8

    def flops(self, threads: int) -> float:
        return min(threads, self.cores) * self.base_ghz * 1e9 * self.flops_per_cycle


#: four xGMI x16 links at 32 Gbps between two SP5 sockets (EPYC 9004 and 9005), one
#: way: Lenovo Press LP1852, "Four xGMI links can support a maximum theoretical
#: bandwidth of 512 GB/s between sockets" (both ways); boards that take a link for PCIe
#: run three (384 GB/s): write host.cpu.socket_link
XGMI4 = 256 * GB
PCIE4 = 32 * GB  # PCIe 4.0 x16, 16 GT/s x 16 lanes, 128b/130b: 31.5 GB/s
PCIE5 = 64 * GB  # PCIe 5.0 x16: 63 GB/s
PCIE3 = 16 * GB

GPUS: dict[str, GpuFacts] = {
    g.name: g
    for g in (
        GpuFacts(
            "RTX PRO 6000 Blackwell",
            1792 * GB,
            503.8e12,
            PCIE5,
            "NVIDIA RTX PRO 6000 Blackwell datasheet: 96 GB GDDR7, 512-bit, 1792 GB/s "
            "(Workstation and Max-Q editions share the memory system)",
        ),
        GpuFacts(
            "H100 SXM",
            3350 * GB,
            989.4e12,
            PCIE5,
            "NVIDIA H100 Tensor Core GPU datasheet: H100 SXM 3.35 TB/s HBM3",
        ),
        GpuFacts(
            "H100 PCIe",
            2000 * GB,
            756.5e12,
            PCIE5,
            "NVIDIA H100 Tensor Core GPU datasheet: H100 NVL/PCIe 2 TB/s HBM2e",
        ),
        GpuFacts(
            "RTX 5090",
            1792 * GB,
            209.5e12,
            PCIE5,
            "NVIDIA GeForce RTX 5090 specifications: 32 GB GDDR7, 512-bit, 1792 GB/s",
        ),
        GpuFacts(
            "RTX 4090",
            1008 * GB,
            165.2e12,
            PCIE4,
            "NVIDIA Ada Lovelace whitepaper (RTX 4090): 24 GB GDDR6X, 384-bit, 1008 GB/s",
        ),
        GpuFacts(
            "RTX 4080",
            716.8 * GB,
            97.5e12,
            PCIE4,
            "NVIDIA Ada Lovelace whitepaper (RTX 4080): 16 GB GDDR6X, 256-bit, 716.8 GB/s",
        ),
        GpuFacts(
            "RTX 3090 Ti",
            1008 * GB,
            80e12,
            PCIE4,
            "NVIDIA GeForce RTX 3090 Ti specifications: 24 GB GDDR6X, 384-bit, 21 Gbps "
            "(1008 GB/s); 84 SMs at 1.86 GHz boost, dense FP16 tensor about 80 TFLOPS",
        ),
        GpuFacts(
            "RTX 3090",
            936 * GB,
            71e12,
            PCIE4,
            "NVIDIA Ampere GA102 whitepaper (RTX 3090): 24 GB GDDR6X, 384-bit, 936 GB/s",
        ),
        GpuFacts(
            "RTX 2080",
            448 * GB,
            40.3e12,
            PCIE3,
            "NVIDIA Turing TU104 whitepaper (RTX 2080): 8 GB GDDR6, 256-bit, 448 GB/s",
        ),
        GpuFacts(
            "Tesla P40",
            345.6 * GB,
            11.76e12,
            PCIE3,
            "NVIDIA Tesla P40 datasheet: 24 GB GDDR5, 384-bit, 346 GB/s; 11.76 TFLOPS FP32 "
            "(no fast FP16: the FP32 peak is its compute floor)",
        ),
        GpuFacts(
            "RTX A6000",
            768 * GB,
            154.8e12,
            PCIE4,
            "NVIDIA RTX A6000 datasheet: 48 GB GDDR6, 384-bit, 768 GB/s",
        ),
        GpuFacts(
            "RTX 2080 Ti",
            616 * GB,
            53.8e12,
            PCIE3,
            "NVIDIA Turing TU102 whitepaper (RTX 2080 Ti): 11 GB GDDR6, 352-bit, 616 GB/s; "
            "FP16 tensor with FP32 accumulate 53.8 TFLOPS",
        ),
        GpuFacts(
            "RTX 3060 12GB",
            360 * GB,
            51.2e12,
            PCIE4,
            "NVIDIA GeForce RTX 3060 specifications: 12 GB GDDR6, 192-bit, 15 Gbps (360 GB/s); "
            "28 SMs, FP16 tensor with FP32 accumulate about 51 TFLOPS",
        ),
        GpuFacts(
            "Apple M1 Ultra GPU",
            800 * GB,
            21.2e12,
            0.0,
            "Apple M1 Ultra: 800 GB/s unified LPDDR5 memory; 64-core GPU, 21 TFLOPS FP32 (FP16 "
            "at the same rate); no host link: the CPU shares the memory",
        ),
        GpuFacts(
            "Apple M3 Ultra GPU",
            819 * GB,
            28.4e12,
            0.0,
            "Apple M3 Ultra: 819 GB/s unified LPDDR5 memory; 80-core GPU about 28 TFLOPS FP32; "
            "no host link",
        ),
        GpuFacts(
            "Instinct MI50",
            1024 * GB,
            26.5e12,
            PCIE4,
            "AMD Radeon Instinct MI50 (32 GB) datasheet: 4096-bit HBM2, 1024 GB/s; 26.5 TFLOPS "
            "FP16 (the MI60 shares its memory system)",
        ),
        GpuFacts(
            "RTX 5060 Ti",
            448 * GB,
            47e12,
            PCIE5,
            "NVIDIA GeForce RTX 5060 Ti specifications: 16 GB or 8 GB GDDR7, 128-bit, 28 Gbps: "
            "448 GB/s either way (the name NVML prints carries no size)",
        ),
    )
}

# FLOPs/cycle: Zen 4 runs AVX-512 on 256-bit units (2 FMA x 8 lanes x 2 = 32); Zen 5 (server
# and Threadripper 9000) has full 512-bit datapaths (64); Zen 3 AVX2 (32); Granite Rapids
# 2 x AVX-512 FMA (64); Cascade Lake-X 2 x AVX-512 FMA (64).
CPUS: dict[str, CpuFacts] = {
    c.name: c
    for c in (
        CpuFacts(
            "EPYC 9175F",
            16,
            4.2,
            64,
            12,
            6400,
            "AMD EPYC 9175F product page: 16 cores, 4.2 GHz base, 12 channels DDR5-6400 (9005)",
            isa="zen5",
            link=XGMI4,
        ),
        CpuFacts(
            "EPYC 9355",
            32,
            3.55,
            64,
            12,
            6400,
            "AMD EPYC 9355 product page: 32 cores, 3.55 GHz base, 12 channels DDR5-6400 (9005)",
            isa="zen5",
            link=XGMI4,
        ),
        CpuFacts(
            "EPYC 9965",
            192,
            2.25,
            64,
            12,
            6400,
            "AMD EPYC 9965 product page: 192 cores, 2.25 GHz base, 12 channels DDR5-6400 (9005)",
            isa="zen5",
            link=XGMI4,
        ),
        CpuFacts(
            "EPYC 9654",
            96,
            2.4,
            32,
            12,
            4800,
            "AMD EPYC 9654 product page: 96 cores, 2.4 GHz base, 12 channels DDR5-4800 (9004)",
            isa="zen4",
            link=XGMI4,
        ),
        CpuFacts(
            "EPYC 9374F",
            32,
            3.85,
            32,
            12,
            4800,
            "AMD EPYC 9374F product page: 32 cores, 3.85 GHz base, 12 channels DDR5-4800 (9004)",
            isa="zen4",
            link=XGMI4,
        ),
        CpuFacts(
            "Threadripper PRO 5975WX",
            32,
            3.6,
            32,
            8,
            3200,
            "AMD Threadripper PRO 5975WX product page: 32 cores, 3.6 GHz, 8 channels DDR4-3200",
            isa="avx2",
        ),
        CpuFacts(
            "Threadripper PRO 7965WX",
            24,
            4.2,
            32,
            8,
            5200,
            "AMD Threadripper PRO 7965WX product page: 24 cores, 4.2 GHz, 8 channels DDR5-5200",
            isa="zen4",
        ),
        CpuFacts(
            "Ryzen 9 9950X",
            16,
            4.3,
            64,
            2,
            5600,
            "AMD Ryzen 9 9950X product page: 16 cores, 4.3 GHz base, 2 channels DDR5-5600 "
            "(Zen 5 desktop: full 512-bit AVX-512 datapaths)",
            isa="zen5",
        ),
        CpuFacts(
            "Ryzen 9 7950X",
            16,
            4.5,
            32,
            2,
            5200,
            "AMD Ryzen 9 7950X product page: 16 cores, 4.5 GHz, 2 channels, DDR5-5200 (2x1R)",
            isa="zen4",
        ),
        CpuFacts(
            "Xeon Platinum 8480+",
            56,
            2.0,
            64,
            8,
            4800,
            "Intel Xeon Platinum 8480+ (Sapphire Rapids) ark: 56 cores, 2.0 GHz base, 8 "
            "channels DDR5-4800, 4 UPI links at 16 GT/s",
            isa="avx512",
            link=4 * 35.8 * GB,  # intel/pcm issue 550: "Max UPI link 0 speed: 35.8 GBytes/second"
        ),
        CpuFacts(
            "Xeon 6980P",
            128,
            2.0,
            64,
            12,
            6400,
            "Intel Xeon 6980P (Granite Rapids) ark: 128 cores, 2.0 GHz, 12 channels DDR5-6400 "
            "(MRDIMM-8800 also supported)",
            isa="avx512",
        ),
        CpuFacts(
            "Core i5-1235U",
            10,
            1.3,
            32,
            2,
            3200,
            "Intel Core i5-1235U ark: 2 P-cores (1.3 GHz base) + 8 E-cores, 12 threads, AVX2 "
            "(2 x FMA); with DDR4-3200 two channels (the Beelink EQI12 of seed 004)",
            isa="avx2",
        ),
        CpuFacts(
            "Core i5-4278U",
            2,
            2.6,
            32,
            2,
            1600,
            "Intel Core i5-4278U ark: 2 cores (Haswell, AVX2 2 x FMA), 2.6 GHz, 2 channels "
            "DDR3L-1600",
            isa="avx2",
        ),
        CpuFacts(
            "Core i9-13900K",
            24,
            3.0,
            32,
            2,
            5600,
            "Intel Core i9-13900K ark: 8 P-cores (3.0 GHz base) + 16 E-cores, 32 threads, 2 "
            "channels DDR5-5600 (AVX2: 2 FMA x 8 lanes x 2)",
            isa="avx2",
        ),
        CpuFacts(
            "Core i9-10900X",
            10,
            3.7,
            64,
            4,
            2933,
            "Intel Core i9-10900X ark: 10 cores, 3.7 GHz, 4 channels DDR4-2933",
            isa="avx512",
        ),
    )
}


def gpu(name: str) -> GpuFacts:
    """The table entry for NAME; a KeyError names the known GPUs."""
    try:
        return GPUS[name]
    except KeyError:
        raise KeyError(f"unknown GPU {name!r}; known: {', '.join(sorted(GPUS))}") from None


def cpu(name: str, sockets: int = 1) -> CpuFacts:
    """The table entry for NAME (one socket's figures), or a host of SOCKETS of them:
    every socket's cores and memory channels."""
    try:
        one = CPUS[name]
    except KeyError:
        raise KeyError(f"unknown CPU {name!r}; known: {', '.join(sorted(CPUS))}") from None
    if sockets == 1:
        return one
    return replace(one, cores=one.cores * sockets, channels=one.channels * sockets)


def ddr_bandwidth(channels: int, mts: int) -> float:
    """Peak bytes/s of CHANNELS 64-bit channels at MTS mega-transfers per second."""
    return channels * mts * 1e6 * 8


#: words a GPU's marketing or NVML name adds to its table name without changing its
#: memory system: the vendor, the consumer brand, and the RTX PRO 6000's editions
#: (the Workstation and Max-Q editions share it; the Server edition is not dropped)
_NAME_NOISE = frozenset({"nvidia", "geforce", "max-q", "workstation", "edition"})


def gpu_by_name(name: str) -> GpuFacts | None:
    """The table entry a GPU's NAME (as NVML or a person writes it) stands for, or None.

    The rule: drop the words in ``_NAME_NOISE`` (case-insensitive), and the rest must
    equal a table name word for word, case-insensitively. "NVIDIA RTX PRO 6000 Blackwell
    Max-Q Workstation Edition" is "RTX PRO 6000 Blackwell"; "NVIDIA GeForce RTX 4090" is
    "RTX 4090"; "NVIDIA GeForce RTX 4080 SUPER" is nothing (a different card): no guess.
    """
    words = [w for w in name.lower().split() if w not in _NAME_NOISE]
    for key, facts in GPUS.items():
        if key.lower().split() == words:
            return facts
    return None
