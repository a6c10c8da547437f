"""-sm row (``split_mode: row``): every matrix split by rows over the GPUs.

The row arithmetic is ggml-cuda's ``get_row_split`` (cumulative shares, rounded
down to 128 rows); the model is the truth table's Qwen3-32B from its -sm row log
on two T4s (tests/truth/records/ghx-ik-qwen3-d397-...), whose norms, KV and
compute buffers the table checks against that log.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from layoutgen.models.profile import dump_profile
from layoutgen.models.quants import by_name
from layoutgen.render.validate import validate_file, validate_files
from tests.truth import synth, table

RECORD = table.RECORDS / "ghx-ik-qwen3-d397-pt13762104-2xt4-smrow.yaml"


def _spec(tmp_path: Path, service: str, runtime: str = "ik", gpus: int = 2) -> Path:
    profile = tmp_path / "qwen3-32b.yaml"
    profile.write_text(dump_profile(synth.profile(table.load(RECORD))))
    cards = "".join(
        f"    - {{id: gpu{i}, index: {i}, vram: 15360MiB, reserve: 0}}\n" for i in range(gpus)
    )
    path = tmp_path / "spec.yaml"
    path.write_text(
        f"""\
host:
  name: t4s
  cpu: {{cores: 16, threads: 32}}
  ram: 128GiB
  ram_reserve: 8GiB
  podman: "5.4"
  gpu_overhead: 0
  gpus:
{cards}models:
  q: {{path: /m/q.gguf, profile: {profile}}}
runtimes:
  ik: {{kind: ik_llama.cpp, image: "registry.home.arpa/ik_llama.cpp:3673", version: "3673"}}
  ik_new: {{kind: ik_llama.cpp, image: "registry.home.arpa/ik_llama.cpp:4035", version: "4035"}}
  llama: {{kind: llama.cpp, image: "ghcr.io/ggml-org/llama.cpp:server-cuda-b6123", version: b6123}}
services:
  w:
    model: q
    runtime: {runtime}
    role: worker
    port: 8080
    ctx: 8192
    gpus: [{", ".join(f"gpu{i}" for i in range(gpus))}]
    experts: gpu
{service}"""
    )
    return path


def _rows(nrows: int, share: float) -> tuple[int, int]:
    """GPU 0 and GPU 1 rows of an equal two-way split, rounded down to 128."""
    first = int(nrows * share) // 128 * 128
    return first, nrows - first


@pytest.mark.parametrize("runtime", ["ik", "llama"])
def test_row_split_puts_each_gpus_rows_in_the_split_buffer(tmp_path: Path, runtime: str) -> None:
    v = validate_file(_spec(tmp_path, "    split_mode: row\n", runtime))
    sp = v.plan.service("w")
    assert " -sm row -ts 15360,15360 " in " ".join(sp.argv)
    # KV and compute on the main GPU; the other holds only its rows
    assert set(sp.layer_buffer.values()) == {"CUDA0"}
    assert sp.buffers["CUDA0"].kv > 0 and sp.buffers["CUDA0"].compute > 0
    assert "CUDA1" not in sp.buffers or sp.buffers["CUDA1"].compute == 0
    assert sp.device_of["CUDA_Split[0]"] == "gpu0" and sp.device_of["CUDA_Split[1]"] == "gpu1"
    profile = v.profiles["q"]
    flavour = v.spec.runtimes[runtime].rules().FLAVOUR
    parts = [0, 0]
    for t in profile.tensors():
        if len(t.shape) == 2 and t.name != "token_embd.weight":
            row = by_name(t.type, flavour).row_bytes(t.shape[0])
            for i, n in enumerate(_rows(t.shape[1], 0.5)):
                parts[i] += n * row  # every width here is a multiple of 512: no padding
    assert [sp.buffers[f"CUDA_Split[{i}]"].weights for i in (0, 1)] == parts
    # the output's 151,936 rows: 75,904 on the first GPU (75,968 rounded down), the rest
    assert _rows(151936, 0.5) == (75904, 76032)
    # everything but the matrices (norms) on the main GPU, the embeddings on the host
    norms = sum(t.nbytes for t in profile.tensors() if len(t.shape) == 1)
    assert sp.buffers["CUDA0"].weights == norms


def test_layer_split_is_the_default(tmp_path: Path) -> None:
    sp = validate_file(_spec(tmp_path, "")).plan.service("w")
    assert " -sm layer " in " ".join(sp.argv)
    assert set(sp.layer_buffer.values()) == {"CUDA0", "CUDA1"}
    assert not any(b.startswith("CUDA_Split") for b in sp.buffers)


@pytest.mark.parametrize(
    ("service", "runtime", "gpus", "said"),
    [
        ("    split_mode: row\n", "ik", 1, "two GPUs or more"),
        ("    split_mode: row\n", "ik_new", 2, "build 4035, PR #1022"),
        ("    split_mode: row\n    gpu_layers: 20\n", "ik", 2, "not planned"),
    ],
)
def test_row_split_is_refused_where_it_is_not_planned(
    tmp_path: Path, service: str, runtime: str, gpus: int, said: str
) -> None:
    path = _spec(tmp_path, service, runtime, gpus)
    (result,) = validate_files([(path, str(path))])
    found = [d for d in result.diagnostics if "split_mode" in d.message]
    line = path.read_text().splitlines().index("    split_mode: row") + 1
    assert found and said in found[0].message and found[0].line == line, found
