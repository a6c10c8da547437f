"""GPU memory a llama.cpp / ik_llama.cpp server process takes beyond its logged buffers.

Each process that drives a GPU holds, on that GPU, memory no start-up log
prints: the CUDA context (the driver's per-SM local-memory reservation, the
loaded kernels; with CUDA 12's lazy loading only those used), cuBLAS's handle
and workspace, and ggml-cuda's memory pool (temporary buffers its kernels
take while a batch runs).  ``host.gpu_overhead`` states it for every GPU;
when it is not written, this module's default for the GPU's class applies,
an upper bound on what public runs of that class show.

The GPU's class comes from ``host.gpus[].name`` (the NVML name, which
``layoutgen probe`` writes); the spec carries no compute capability.  Public
figures (per process, per GPU; MiB):

- Ada, 3 x RTX 4090, llama.cpp PR #15860 (2025-09-07): the memory breakdown
  printed on exit, after serving, puts 451, 456 and 456 MiB per GPU outside the
  model, context and compute buffers ("unaccounted": driver, CUDA context,
  cuBLAS, ggml-cuda's pool).
- Ada, RTX 2000 Ada Laptop GPU (an 8 GB card), llama.cpp PR #22673: 7,807 MiB
  total, 7,627 free once the process's context exists: 180 MiB.
- Ampere, RTX 3090, ollama issue #17482: 24,124 total, 23,860 free once the
  process's context exists: 264 MiB.
- Hopper, H100: about 600 MiB (issue 30, measured on a lent H100).
- Blackwell, RTX 5060 Ti 16 GB (seed 004, Windows with a desktop): 15,223 MiB
  available of 16,311: 1,088 MiB, the display's share included; seed 001 (two
  RTX PRO 6000 Blackwell, GLM-5.1 at ``-ub 8192``) saw 1.2-2.2 GiB per GPU
  beyond its logged buffers, the computed ``attn_kv_b`` tensors (planned as
  ``created`` since) included.
- ollama keeps 1 GiB per GPU as its minimum CUDA overhead (ollama PR #2114),
  for every GPU it does not know better.

Defaults: consumer and workstation cards up to Ada (compute capability 8.9 and
below: GeForce 10-40, TITAN, Quadro, RTX A-series, RTX Ada, T4, A2-A40, L4,
L20, L40) 512 MiB, above the 451-456 MiB of the 4090s (the largest of these
chips, 128 SMs) after serving; data-centre Ampere and Hopper (A100, A800,
A30, H100, H200, H800, H20, GH200; 2048 threads per SM, up to 132 SMs)
768 MiB, above the 600 MiB seen on an H100; Blackwell and every GPU not named
or not recognised 1 GiB, as before.  A default only: a host whose driver or
display takes more writes ``gpu_overhead`` (``layoutgen doctor`` reports
what NVML shows beyond the plan).

Limits: the figures are of CUDA 12 builds on Linux, where kernels load lazily
(the default since CUDA 12.2; an eager load takes more); memory the driver
holds with no process (NVML's used on an idle card) and a desktop's belong in
the GPU's ``reserve`` (``layoutgen probe`` suggests it), not here; ggml-cuda's
pool grows with the batch where weights go through cuBLAS (f16/bf16 weights
at a large ``-ub``), beyond these defaults.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from layoutgen.spec.schema import Gpu, Host

MiB = 1 << 20


@dataclass(frozen=True)
class GpuClass:
    name: str  # the class, as plans and refusals name it
    overhead: int  # bytes per server process
    pattern: re.Pattern[str]


#: first match wins: Blackwell names before the generic ones (an 'RTX PRO 6000
#: Blackwell' is not an 'RTX 6000 Ada')
CLASSES: tuple[GpuClass, ...] = (
    GpuClass(
        "Blackwell",
        1024 * MiB,
        re.compile(r"Blackwell|RTX 50\d\d|\bG?B[123]00\b|\bGB20\d|Thor|\bDGX Spark\b", re.I),
    ),
    GpuClass(
        "Hopper or data-centre Ampere",
        768 * MiB,
        re.compile(r"\bG?H(100|200|800|20)\b|\bA(100|800|30)\b", re.I),
    ),
    GpuClass(
        "Pascal to Ada (consumer, workstation, inference cards)",
        512 * MiB,
        re.compile(
            r"GeForce (GTX|RTX) ?(10|16|20|30|40)\d\d|TITAN|Quadro|RTX A\d{3,4}|"
            r"RTX \d{4} Ada|\bRTX \d000\b|\bTesla (T4|P4|P40|P100|V100)\b|\bT4\b|\bV100\b|"
            r"\bP(4|40|100)\b|\bA(2|10|10G|16|40)\b|\bL(4|20|40S?)\b",
            re.I,
        ),
    ),
)
#: a GPU not named, or of no class above: ollama's constant, layoutgen's default before
FALLBACK = GpuClass("unknown class", 1024 * MiB, re.compile(r"(?!)"))


def gpu_class(name: str | None) -> GpuClass:
    """The class of the GPU NVML names NAME (FALLBACK when none is known)."""
    if name:
        for c in CLASSES:
            if c.pattern.search(name):
                return c
    return FALLBACK


def default_overhead(name: str | None) -> int:
    """Bytes per server process on the GPU named NAME when gpu_overhead is not written."""
    return gpu_class(name).overhead


def per_gpu(host: Host, gpu: Gpu) -> int:
    """Bytes a server process takes on GPU beyond its buffers: ``host.gpu_overhead``
    where the spec writes it, else the default of the GPU's class."""
    if "gpu_overhead" in host.model_fields_set:
        return host.gpu_overhead
    return default_overhead(gpu.name)
