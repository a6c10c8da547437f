"""The oracle cases: a layout per case, its plan, and llama.cpp's own account of it.

Each case is a spec on a host whose "GPUs" are ``ggml-rpc-server``
processes on 127.0.0.1 (CPU-backed; this llama.cpp cannot advertise a
memory size, so the capacity lives in the spec).  The test renders the
plan with the real CLI, runs llama-completion with the plan's argv and
compares every buffer and every tensor's device.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.oracle import harness

#: tolerances of issue 6: weights 0.5 %, KV 1 %, compute 15 %
TOLERANCE = {"weights": 0.005, "kv": 0.01, "compute": 0.15}
#: how far above the log an estimate marked upper-bound may be (as on the H100:
#: tests/test_compute_gpu.py)
UPPER_BOUND_SLACK = 1.15


@dataclass(frozen=True)
class Case:
    name: str
    arch: str  # a builder in tests/oracle/models.py
    experts: str  # the spec's 'experts:' value, as YAML flow
    devices: int = 2
    ctx: int = 4096
    parallel: int = 1
    ctk: str = "f16"
    ctv: str = "f16"
    ubatch: int = 512
    vram: str = "256MiB"
    args: tuple[str, ...] = ()
    mlock: bool = False
    gpu_layers: int | None = None  # -ngl N: the first layers on the CPU
    tensor_split: str | None = None  # the spec's tensor_split, as YAML flow
    tensor_overrides: str | None = None  # the spec's tensor_overrides, as YAML flow


#: host weights in a plain CPU buffer instead of a mapping of the file (whose
#: logged size is the span of the file it maps, not the bytes of its tensors)
NO_MMAP = ("-lm", "none")

CASES = (
    Case("llama-2rpc-f16", "llama", "gpu"),
    Case("llama-1rpc-q8-np2", "llama", "gpu", devices=1, parallel=2, ctk="q8_0", ctv="q8_0"),
    Case("llama-ub128-np4", "llama", "gpu", parallel=4, ubatch=128, ctx=8192),
    # mlock renders -lm mlock on llama.cpp: host weights read into a CPU buffer, not mapped
    Case("qwen3moe-cpu-moe-mlock", "qwen3moe", "host", mlock=True),
    Case("qwen3moe-resident", "qwen3moe", "gpu"),
    Case(
        "qwen3moe-cpu-moe",
        "qwen3moe",
        "host",
        ctk="q8_0",
        ctv="q8_0",
        ubatch=1024,
        args=NO_MMAP,
    ),
    Case("qwen3moe-cpu-moe-mmap", "qwen3moe", "host"),
    Case("qwen3moe-n-cpu-moe-5", "qwen3moe", "{mode: n-cpu-moe, n: 5}", parallel=2, args=NO_MMAP),
    Case(
        "qwen3moe-ot-cross",
        "qwen3moe",
        "{mode: explicit, layers: {rpc1: [0, 1], rpc0: [6, 7]}}",
        ubatch=256,
        args=NO_MMAP,
    ),
    Case("qwen3moe-auto-tight", "qwen3moe", "auto", vram="40MiB", ctk="q8_0", ctv="f16"),
    # a partial -ngl: the first layers, their KV and their compute on the CPU
    Case("llama-2rpc-ngl4", "llama", "gpu", gpu_layers=4, args=NO_MMAP),
    Case("llama-1rpc-ngl2-np2", "llama", "gpu", devices=1, gpu_layers=2, parallel=2, args=NO_MMAP),
    Case("qwen3moe-2rpc-ngl6", "qwen3moe", "gpu", gpu_layers=6, ubatch=256, args=NO_MMAP),
    # -ngl 0 with devices present: every layer, its KV and the output on the CPU
    Case("qwen3moe-2rpc-ngl0", "qwen3moe", "gpu", gpu_layers=0, args=NO_MMAP),
    # -ts as written: 1 share of 4.5 on the first device, 3.5 on the second
    Case("qwen3moe-ts-1-3.5", "qwen3moe", "gpu", tensor_split="{rpc0: 1, rpc1: 3.5}", args=NO_MMAP),
    # -c 0: the model's trained context (4096 here), from the profile
    Case("llama-2rpc-ctx0-np2", "llama", "gpu", ctx=0, parallel=2, args=NO_MMAP),
    # -ot rules of the user's own, first match wins: layers 1-2's whole FFN (norm,
    # router, experts) to the host, one down tensor across to the other device
    Case(
        "qwen3moe-user-ot",
        "qwen3moe",
        "gpu",
        tensor_overrides=(
            r"[{pattern: 'blk\.(1|2)\.ffn', device: host}, "
            r"{pattern: 'blk\.6\.ffn_down_exps', device: rpc0}]"
        ),
        args=NO_MMAP,
    ),
    # single expert tensors: one layer's down on one device, another's up+gate on the other
    Case(
        "qwen3moe-explicit-tensors",
        "qwen3moe",
        "{mode: explicit, tensors: {rpc0: [blk.6.ffn_down_exps], "
        "rpc1: [blk.1.ffn_gate_exps, blk.1.ffn_up_exps]}}",
        args=NO_MMAP,
    ),
    Case("deepseek2-resident", "deepseek2", "gpu"),
    Case(
        "deepseek2-cpu-moe-q8",
        "deepseek2",
        "host",
        ctk="q8_0",
        ctv="q8_0",
        ubatch=256,
        args=NO_MMAP,
    ),
    Case(
        "deepseek2-n-cpu-moe-4",
        "deepseek2",
        "{mode: n-cpu-moe, n: 4}",
        parallel=2,
        ubatch=1024,
        args=NO_MMAP,
    ),
    Case(
        "deepseek2-ot",
        "deepseek2",
        "{mode: explicit, layers: {rpc0: [1, 2], rpc1: [7]}}",
        args=NO_MMAP,
    ),
)


def spec_text(case: Case, model: Path, profile: Path, endpoints: list[str], runtime: Path) -> str:
    """The case on rpc devices (ggml-rpc-server on 127.0.0.1) standing in for GPUs."""
    gpus = "\n".join(
        f"    - {{id: rpc{i}, vram: {case.vram}, reserve: 0, "
        f"rpc: {{endpoint: '{ep}', binary: /usr/local/bin/ggml-rpc-server, device: CPU}}}}"
        for i, ep in enumerate(endpoints)
    )
    host = "  name: oracle\n  cpu: {cores: 2, threads: 2}\n  ram: 8GiB\n  ram_reserve: 1GiB"
    return layout_text(case, model, profile, runtime, host=host, gpus=gpus, threads=2)


def layout_text(
    case: Case, model: Path, profile: Path, runtime: Path, *, host: str, gpus: str, threads: int
) -> str:
    """One llama.cpp service running ``case`` on the given host lines and GPU list items."""
    args = "" if not case.args else f"\n    args: [{', '.join(map(repr, case.args))}]"
    if case.gpu_layers is not None:
        args += f"\n    gpu_layers: {case.gpu_layers}"
    if case.tensor_split is not None:
        args += f"\n    tensor_split: {case.tensor_split}"
    if case.tensor_overrides is not None:
        args += f"\n    tensor_overrides: {case.tensor_overrides}"
    return f"""\
host:
{host}
  gpu_overhead: 0
  gpus:
{gpus}
models:
  m: {{path: {model}, profile: {profile}}}
runtimes:
  llama: {{kind: llama.cpp, binary: {runtime}, version: "b11434"}}
services:
  oracle:
    model: m
    runtime: llama
    role: worker
    port: 18080
    ctx: {case.ctx}
    parallel: {case.parallel}
    cache_type_k: {case.ctk}
    cache_type_v: {case.ctv}
    ubatch: {case.ubatch}
    batch: {max(case.ubatch, 2048)}
    threads: {threads}
    experts: {case.experts}
    mlock: {str(case.mlock).lower()}{args}
"""


def plan(spec: Path) -> dict[str, Any]:
    """``layoutgen plan --json`` through the real CLI."""
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "layoutgen"), "plan", "--json", str(spec)],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise AssertionError(f"layoutgen plan failed ({proc.returncode}):\n{proc.stderr}")
    doc: dict[str, Any] = json.loads(proc.stdout)
    return doc


@dataclass(frozen=True)
class Row:
    case: str
    buffer: str
    part: str
    predicted: int
    logged: int
    basis: str

    @property
    def error(self) -> float:
        return (self.predicted - self.logged) / self.logged if self.logged else 0.0


def compare(case: Case, service: dict[str, Any], run: harness.Run) -> list[Row]:
    """One row per (buffer, part) that the plan or the log has."""
    rows: list[Row] = []
    names = set(service["buffers"]) | set(run.buffers)
    for buf in sorted(names):
        planned = service["buffers"].get(buf, {})
        logged = run.buffers.get(buf, {})
        for part in ("weights", "kv", "compute"):
            p = planned.get(part, 0) + (planned.get("created", 0) if part == "weights" else 0)
            q = logged.get(part, 0)
            if p or q:
                basis = planned.get("basis", {}).get(part, "exact")
                rows.append(Row(case.name, buf, part, p, q, basis))
    return rows
