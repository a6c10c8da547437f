"""ik_llama.cpp's compute buffers: an estimate from what dominates them.

ik_llama.cpp's graph differs from mainline's (fused MoE, its own MLA
kernels, ``-amb``), and its allocator was not instrumented here, so this is
an estimate built from the terms its logs show, checked against seed 001
and the truth table (tests/truth):

- a GPU: the larger of the routed experts' activations and the logits
  (n_vocab x ubatch x 4 B, on the output device), plus 10 %;
- the first GPU, since build 3745 (rule ``host-expert-copy``): at least the
  largest host expert tensor it copies in to run a big batch's MoE matmul,
  plus the activations (seed 001's GLM-5.1 at -ub 8192 logged 5418 MiB
  where this gives 5394);
- the host side with a GPU (``CUDA_Host``): n_embd x ubatch x 16 B (seed
  001: 704 MiB logged, 768 here);
- CPU only: the GPU formula, on the CPU.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from layoutgen.runtimes.ik_llama_cpp.placement import expert_activations, offload_copy

if TYPE_CHECKING:
    from layoutgen.runtimes.ik_llama_cpp import IkLlamaCpp
    from layoutgen.solve.footprint import Setting
    from layoutgen.solve.plan import Basis


def estimate(
    rt: IkLlamaCpp, s: Setting, buffer: str, output: str | None, experts: Mapping[int, str]
) -> tuple[int, Basis]:
    hp, ub = s.profile.hparams, s.kv.ubatch
    if buffer in ("CUDA_Host", "CPU_Mapped") or (buffer == "CPU" and s.devices):
        return (hp.n_embd or 0) * ub * 16 if buffer == "CUDA_Host" else 0, "estimated"
    activations = expert_activations(s.profile, ub)
    logits = (hp.vocab or 0) * ub * 4 if buffer == output or output is None else 0
    total = int(max(activations, logits) * 1.1)
    first_gpu = next((d for d in s.devices if d.startswith("CUDA")), None)
    if buffer == first_gpu and rt.follows("host-expert-copy"):
        copy = offload_copy(s.profile, ub, experts, merge_up_gate=s.merge_up_gate)
        if copy:
            total = max(total, copy + activations)
    return total, "estimated"
