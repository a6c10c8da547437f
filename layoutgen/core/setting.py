"""One service as the memory model sees it: the questions a runtime answers are about this.

:class:`Setting` is what the solver resolves once per service (its runtime at
its version, profile, devices, KV settings, passthrough args); the runtimes
read it (:mod:`layoutgen.core.runtime`), the solver builds it
(:mod:`layoutgen.solve.footprint`).  Moved here from ``solve/footprint.py`` so
that runtimes need not import the solver.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from layoutgen.core.kvcache import KVSettings
from layoutgen.core.placement import expert_layer, loaded
from layoutgen.core.rules import remembering
from layoutgen.core.runtime import Runtime
from layoutgen.models.profile import Profile

#: exact: from the profile and the runtime's rules; estimated: the compute model;
#: upper-bound: an estimate with a term layoutgen bounds from above because the
#: runtime's exact use is not known (e.g. host experts staged through a GPU);
#: measured: from a start-up log (calibrate)
Basis = Literal["exact", "estimated", "upper-bound", "measured"]


@dataclass(frozen=True)
class Setting:
    """What the solver needs to know about one service, resolved once."""

    name: str
    rt: Runtime  # the runtime at the spec's version: everything it decides
    profile: Profile
    #: host GPU ids in the runtime's device order: rpc devices first (llama.cpp puts
    #: them at the front of its list), in spec order, then local GPUs by NVML index
    gpus: tuple[str, ...]
    #: each GPU's buffer name, aligned with ``gpus``: RPC0[HOST:PORT], ..., CUDA0, ...
    devices: tuple[str, ...]
    #: buffers whose allocations follow ggml-cuda's rules (row padding, alignment)
    cuda: frozenset[str]
    kv: KVSettings
    mmap: bool
    measured: Mapping[str, Mapping[str, int]]  # buffer -> {"compute": bytes, ...}
    #: bytes per GPU buffer the process takes beyond its buffers (CUDA context, ...):
    #: host.gpu_overhead, or its default by GPU class (solve.overhead)
    overhead: Mapping[str, int]
    #: an MLA model's qk_nope + rope (compute.mla_q_head), read from its tensors once
    mla_q_head: int = 0
    #: the passthrough args, for flags only one runtime reads (its module parses them)
    args: tuple[str, ...] = ()
    #: the host CPU's instruction set level (host.cpu.isa)
    isa: str = "x86-64-v3"
    #: -ngl N: layers on GPUs counted from the end, the output layer as one (None: all)
    gpu_layers: int | None = None
    #: the spec's tensor_overrides as (pattern, buffer or "host"), in order
    user_rules: tuple[tuple[str, str], ...] = ()
    #: tensor -> buffer or "host" for every loaded tensor a user rule matches (first wins)
    user_pins: Mapping[str, str] = field(default_factory=dict)
    #: -sm row: each GPU's share of every matrix's rows (None: -sm layer)
    row_shares: tuple[float, ...] | None = None

    @property
    def local_gpus(self) -> bool:
        """Whether the process drives a GPU itself (then host buffers are CUDA_Host)."""
        return any(name.startswith("CUDA") for name in self.devices)

    def device_of(self, buffer: str) -> str:
        if buffer in self.devices:
            return self.gpus[self.devices.index(buffer)]
        if m := _SPLIT_PART.match(buffer):
            return self.gpus[int(m["i"])]
        return "host"

    def buffer_of(self, gpu: str) -> str:
        return self.devices[self.gpus.index(gpu)]


#: -sm row: GPU i's part of the split buffer (llama.cpp logs one CUDA_Split, the total)
_SPLIT_PART = re.compile(r"^CUDA_Split\[(?P<i>[0-9]+)\]$")


def output_device(s: Setting) -> str | None:
    """Where the output layer goes: the last device, unless ``-ngl N`` keeps it on
    the CPU (then None: the host)."""
    if not s.devices:
        return None
    if s.row_shares is not None:
        return s.devices[0]  # -sm row: the main GPU's (its matrix in the split buffer)
    if s.gpu_layers is None or s.rt.gpu_layers(s.profile.hparams.n_layer, s.gpu_layers)[1]:
        return s.devices[-1]
    return None


def expert_bytes(profile: Profile, runtime: Runtime) -> dict[int, int]:
    """Bytes of routed experts per expert layer (what one placement decision moves)."""
    return dict(_expert_bytes(profile, runtime))


@remembering(64)
def expert_tensor_bytes(profile: Profile, runtime: Runtime) -> dict[int, tuple[int, ...]]:
    """Each expert layer's routed-expert tensors' bytes, largest first."""
    out: dict[int, list[int]] = {}
    for t in loaded(profile, runtime):
        layer = expert_layer(t.name)
        if layer is not None:
            out.setdefault(layer, []).append(t.nbytes)
    return {layer: tuple(sorted(sizes, reverse=True)) for layer, sizes in sorted(out.items())}


@remembering(64)
def _expert_bytes(profile: Profile, runtime: Runtime) -> tuple[tuple[int, int], ...]:
    out: dict[int, int] = {}
    for t in loaded(profile, runtime):
        layer = expert_layer(t.name)
        if layer is not None:
            out[layer] = out.get(layer, 0) + t.nbytes
    return tuple(sorted(out.items()))


def dense_staged(s: Setting, layers: Mapping[int, str], output: str | None) -> int:
    """The largest matrix weight of a layer left on the CPU (the output's too when it
    stays there) with the activations its offloaded matmul writes: what one split
    copies into the first GPU's compute buffer when the CUDA backend takes a
    host-weight matmul of a big batch (``ggml_backend_cuda_offload_op``: 32 tokens
    or more; ggml's scheduler, in llama.cpp and ik_llama.cpp alike).  Routed
    experts are the runtimes' own (staged one tensor per split); token embeddings
    are read by get_rows, never offloaded."""
    from layoutgen.core.placement import expert_layer, loaded

    best = 0
    for t in loaded(s.profile, s.rt):
        if len(t.shape) < 2 or expert_layer(t.name) is not None or t.name == "token_embd.weight":
            continue
        on_cpu = t.layer not in layers if t.layer is not None else output is None
        if on_cpu:
            best = max(best, t.nbytes + t.shape[1] * s.kv.ubatch * 4)
    return best
