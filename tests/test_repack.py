"""llama.cpp's CPU_REPACK buffer, planned and then seen in llama.cpp's own log.

On a host without a GPU's pinned buffer, llama.cpp's CPU backend keeps matrices of
the types it has interleaved kernels for (on AVX2: q4_0, q4_K, iq4_nl, mxfp4 with
rows in multiples of 8) in a buffer of their own, CPU_REPACK, read from the file
even when the rest is memory-mapped.  A small q4_0 llama is planned for this
machine's instruction set (read from /proc/cpuinfo, as host.cpu.isa would say it)
and run with the real llama.cpp: the weights must land where the plan put them,
to the MiB's hundredth the log prints.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from gguf import GGMLQuantizationType

from layoutgen import runtimes
from layoutgen.live.hostfacts import read_cpu
from layoutgen.models.profile import load_profile
from tests.oracle import harness, models

MiB = 2**20


def _isa() -> str:
    """This machine's level as ``layoutgen probe`` reads it (/proc/cpuinfo): the run
    below checks the probe's reading and the plan against the real llama.cpp."""
    isa = read_cpu().isa
    assert isa is not None
    return isa


def _spec(tmp: Path, model: Path, profile: Path, args: list[str]) -> Path:
    spec = tmp / f"spec{len(args)}.yaml"
    spec.write_text(
        f"""\
host:
  name: repack
  cpu: {{cores: 2, threads: 2, isa: {_isa()}}}
  ram: 8GiB
  ram_reserve: 1GiB
  gpus: []
models:
  m: {{path: {model}, profile: {profile}}}
runtimes:
  llama: {{kind: llama.cpp, binary: {harness.binary("llama-completion")}}}
services:
  cpu:
    model: m
    runtime: llama
    role: batch
    port: 18090
    ctx: 512
    threads: 2
    mlock: false
    args: {json.dumps(args)}
"""
    )
    return spec


def _plan(spec: Path) -> dict:
    layoutgen = Path(sys.executable).parent / "layoutgen"
    out = subprocess.run(
        [str(layoutgen), "plan", "--json", str(spec)], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)["services"]["cpu"]


@pytest.fixture(scope="module")
def q4(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    tmp = tmp_path_factory.mktemp("repack")
    dims = models.Dims(n_layer=2, n_embd=512, n_head=8, n_head_kv=2, head_dim=64, n_ff=1024)
    model = models.llama(tmp / "q4.gguf", dims, matrices=GGMLQuantizationType.Q4_0)
    profile = tmp / "q4.profile.yaml"
    layoutgen = Path(sys.executable).parent / "layoutgen"
    subprocess.run([str(layoutgen), "inspect", str(model), "-o", str(profile)], check=True)
    return tmp, model, profile


@pytest.mark.parametrize("args", [["-lm", "none"], ["-lm", "none", "-nr"]], ids=["repack", "-nr"])
def test_llama_cpp_repacks_what_the_plan_says(q4: tuple[Path, Path, Path], args: list[str]) -> None:
    tmp, model, profile = q4
    planned = _plan(_spec(tmp, model, profile, args))
    run = harness.run(harness.completion_argv(planned["argv"]))
    logged = {b: p["weights"] for b, p in run.buffers.items() if "weights" in p}
    weights = {b: p["weights"] for b, p in planned["buffers"].items() if p["weights"]}
    assert set(weights) == set(logged), (weights, logged)
    for buf, size in logged.items():
        assert abs(weights[buf] - size) <= 0.005 * MiB, (buf, weights[buf], size)
    if "-nr" in args or _isa() in ("x86-64", "aarch64-v8.0"):
        assert "CPU_REPACK" not in logged
    else:
        assert logged["CPU_REPACK"] > logged["CPU"]  # the matrices, not the norms


def test_what_repacks_depends_on_the_instruction_set(q4: tuple[Path, Path, Path]) -> None:
    _, _, path = q4
    profile = load_profile(path)
    llama = runtimes.get("llama.cpp")
    matrices = {t.name for t in profile.tensors() if len(t.shape) > 1} - {"token_embd.weight"}
    sizes = {t.name: t.nbytes for t in profile.tensors()}
    repacked = llama.repacked(profile, "x86-64-v3", [])
    assert set(repacked) == matrices  # rows all multiples of 8
    assert all(repacked[n] == ("CPU_REPACK", sizes[n]) for n in matrices)
    assert llama.repacked(profile, "x86-64", []) == {}  # no AVX2: nothing
    assert llama.repacked(profile, "aarch64-v8.0", []) == {}  # no dot product: nothing
    assert llama.repacked(profile, "x86-64-v3", ["-nr"]) == {}
    assert runtimes.get("ik_llama.cpp").repacked(profile, "x86-64-v3", []) == {}
    # an AMX host: the AMX buffer type comes first and takes the q4_0 matrices whose
    # rows divide by 32, at their size (q4_0 packs without extra bytes)
    amx = llama.repacked(profile, "x86-64-v4-amx", [])
    taken = {n for n, (buf, _) in amx.items() if buf == "AMX"}
    assert taken and taken <= matrices
    assert all(amx[n][1] == sizes[n] for n in taken)
