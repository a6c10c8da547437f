"""host.gpu_overhead: what a server process takes on each GPU beyond its logged buffers.

Not written, it is the default of the GPU's class (layoutgen.solve.overhead, each
figure sourced there); written, it applies to every GPU.  The truth table plans
its records with ``gpu_overhead: "0"`` on roomy GPUs; here the same records are
planned as their users would write them: each card at its real memory (NVML's
total, as nvidia-smi prints it), the overhead not written, and no public run
that started may be refused.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path
from typing import Any

import pytest

from layoutgen.errors import InvalidInput
from layoutgen.render.validate import validate_file
from layoutgen.solve import overhead
from tests.truth import table

MiB = 1 << 20

#: NVML totals (nvidia-smi's "MiB" column) of the cards the records name
NVML_TOTAL_MIB = {
    "NVIDIA GeForce RTX 2060": 6144,
    "NVIDIA GeForce RTX 3060": 12288,
    "NVIDIA GeForce RTX 3090": 24576,
    "NVIDIA GeForce RTX 3090 Ti": 24564,
    "NVIDIA GeForce RTX 4080": 16376,
    "NVIDIA GeForce RTX 4090": 24564,
    "NVIDIA GeForce RTX 5090": 32607,
    "NVIDIA RTX A4000": 16376,
    "NVIDIA RTX A6000": 49140,
    "Tesla T4": 15360,
}


@pytest.mark.parametrize(
    ("name", "mib"),
    [
        ("NVIDIA GeForce RTX 3090", 512),
        ("NVIDIA GeForce RTX 4060 Laptop GPU", 512),
        ("NVIDIA RTX 2000 Ada Generation Laptop GPU", 512),
        ("NVIDIA RTX 4000 SFF Ada Generation", 512),
        ("NVIDIA RTX A6000", 512),
        ("NVIDIA GeForce GTX 1080 Ti", 512),
        ("Tesla T4", 512),
        ("Tesla V100-SXM2-32GB", 512),
        ("NVIDIA L40S", 512),
        ("Quadro RTX 8000", 512),
        ("NVIDIA A100-SXM4-80GB", 768),
        ("NVIDIA H100 80GB HBM3", 768),
        ("NVIDIA GH200 480GB", 768),
        ("NVIDIA H200", 768),
        # Blackwell before the generic names: an RTX PRO 6000 Blackwell is no RTX 6000 Ada
        ("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", 1024),
        ("NVIDIA GeForce RTX 5060 Ti", 1024),
        ("NVIDIA B200", 1024),
        # not named, or not known: the 1 GiB default of before
        (None, 1024),
        ("NVIDIA GeForce GTX 980", 1024),
    ],
)
def test_the_default_is_the_upper_bound_of_the_gpus_class(name: str | None, mib: int) -> None:
    assert overhead.default_overhead(name) == mib * MiB


def _spec(tmp_path: Path, gpus: str, written: str = "", use: str = "[gpu0, gpu1]") -> Path:
    profile = Path(__file__).resolve().parents[1] / "layouts/models/qwen3-coder-next-q4_0.yaml"
    path = tmp_path / "spec.yaml"
    head = textwrap.dedent(
        """\
        host:
          name: h
          cpu: {cores: 16, threads: 32}
          ram: 256GiB
          ram_reserve: 8GiB
        """
    )
    tail = textwrap.dedent(
        f"""\
        models:
          m: {{path: /models/m/m.gguf, profile: {profile}}}
        runtimes:
          r: {{kind: llama.cpp, binary: /opt/llama/llama-server, version: "6000"}}
        services:
          s:
            model: m
            runtime: r
            role: worker
            gpus: {use}
            port: 8000
            ctx: 8192
            experts: {{mode: host}}
        """
    )
    extra = f"  gpu_overhead: {written}\n" if written else ""
    path.write_text(head + extra + "  gpus:\n" + gpus + tail)
    return path


GPUS = """\
    - {id: gpu0, index: 0, vram: 24564MiB, reserve: 0, name: "NVIDIA GeForce RTX 4090"}
    - {id: gpu1, index: 1, vram: 81559MiB, reserve: 0, name: "NVIDIA H100 80GB HBM3"}
"""


def test_each_gpu_gets_its_class_default_unless_the_host_writes_one(tmp_path: Path) -> None:
    plan = validate_file(_spec(tmp_path, GPUS)).plan.services[0]
    per_gpu = {plan.device_of[b]: p.overhead for b, p in plan.buffers.items() if p.overhead}
    assert per_gpu == {"gpu0": 512 * MiB, "gpu1": 768 * MiB}
    written = _spec(tmp_path, GPUS, "300MiB")
    plan = validate_file(written).plan.services[0]
    per_gpu = {plan.device_of[b]: p.overhead for b, p in plan.buffers.items() if p.overhead}
    assert per_gpu == {"gpu0": 300 * MiB, "gpu1": 300 * MiB}


def _real_gpus(
    monkeypatch: pytest.MonkeyPatch, record: dict[str, Any], gpu_overhead: str | None
) -> None:
    """Plan RECORD's final spec (not the truth table's first pass) on its real cards."""
    solve = table._solve
    names = [re.sub(r",.*$", "", str(g)) for g in record.get("gpus") or []]

    def on_real_cards(spec: dict[str, Any], tmp: Path, name: str) -> Any:
        if not name.endswith(".pass1"):
            host = spec["host"]
            host.pop("gpu_overhead", None)
            if gpu_overhead is not None:
                host["gpu_overhead"] = gpu_overhead
            # the truth table writes the split it found as each GPU's size: keep it as -ts
            mib = {g["id"]: int(g["vram"].removesuffix("MiB")) for g in host["gpus"]}
            split = {g: round(v / min(mib.values()), 6) for g, v in mib.items()}
            if len(split) > 1:
                spec["services"]["s"].setdefault("tensor_split", split)
            for gpu in host["gpus"]:
                card = names[gpu["index"]]
                gpu.update(name=card, vram=f"{NVML_TOTAL_MIB[card]}MiB")
        return solve(spec, tmp, name)

    monkeypatch.setattr(table, "_solve", on_real_cards)


#: records of runs that started whose log names every card
ON_NAMED_CARDS = [
    p
    for p in table.records()
    if (gpus := table.load(p).get("gpus"))
    and all(re.sub(r",.*$", "", str(g)) in NVML_TOTAL_MIB for g in gpus)
]


def _failed(record: dict[str, Any]) -> bool:
    """Whether the record's log is of a run that failed to allocate its buffers."""
    return "failed to allocate" in str(record.get("logged") or "")


@pytest.mark.parametrize("path", ON_NAMED_CARDS, ids=[p.stem for p in ON_NAMED_CARDS])
def test_no_public_run_that_started_is_refused_on_its_own_cards(
    path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every record on the cards it names, planned with the default overhead and no
    reserve: a run that started is refused only where the truth table refuses it for
    a reason of its own (a type with no CUDA kernel in that build), never for memory;
    a run whose log shows the allocation failing is refused for memory."""
    record = table.load(path)
    (tmp_path / "roomy").mkdir()
    (tmp_path / "real").mkdir()
    roomy = table.evaluate(path, tmp_path / "roomy")
    _real_gpus(monkeypatch, record, None)
    outcome = table.evaluate(path, tmp_path / "real")
    if _failed(record):
        assert outcome.reason is not None and "does not fit GPU" in outcome.reason
    else:
        assert outcome.reason == roomy.reason
        assert outcome.reason is None or "does not fit" not in outcome.reason


def test_the_records_hold_runs_that_started_and_one_that_did_not() -> None:
    assert sum(_failed(table.load(p)) for p in ON_NAMED_CARDS) == 1
    assert len(ON_NAMED_CARDS) >= 25


ADA = """\
    - {id: gpu0, index: 0, vram: VRAM, reserve: 0, name: "NVIDIA RTX 2000 Ada Generation"}
"""


def test_a_1gib_overhead_refuses_a_run_the_class_default_admits(tmp_path: Path) -> None:
    """A layout that leaves 700 MiB of an Ada card beside its buffers: the 1 GiB of
    before refused it, the class default (512 MiB) admits it; the refusal names the
    margins its figures hold."""
    probe = _spec(tmp_path, ADA.replace("VRAM", "1TiB"), "0", use="[gpu0]")
    used = next(d.used for d in validate_file(probe).plan.devices if d.id == "gpu0")
    vram = f"{used // MiB + 700}MiB"
    plan = validate_file(_spec(tmp_path, ADA.replace("VRAM", vram), use="[gpu0]")).plan
    assert next(d.used for d in plan.devices if d.id == "gpu0") == used + 512 * MiB
    with pytest.raises(InvalidInput) as err:
        validate_file(_spec(tmp_path, ADA.replace("VRAM", vram), "1GiB", use="[gpu0]"))
    text = str(err.value)
    assert re.search(r"short by 32[45] MiB", text), text  # 1,024 - 700, to the MiB
    assert "margins in these figures: reserve 0 MiB kept free, per-process overhead" in text
    assert "(CUDA context: host.gpu_overhead, else the GPU class's default) s 1,024 MiB" in text


def test_a_refusal_names_the_reserve_and_each_services_overhead(tmp_path: Path) -> None:
    small = """\
    - {id: gpu0, index: 0, vram: 2GiB, reserve: 256MiB, name: "NVIDIA GeForce RTX 3090"}
    - {id: gpu1, index: 1, vram: 2GiB, reserve: 0, name: "NVIDIA H100 80GB HBM3"}
"""
    with pytest.raises(InvalidInput) as err:
        validate_file(_spec(tmp_path, small))
    first, second = str(err.value).splitlines()[:2]
    assert "GPU gpu0" in first and "GPU gpu1" in second
    assert first.endswith(
        "; margins in these figures: reserve 256 MiB kept free, per-process overhead (CUDA "
        "context: host.gpu_overhead, else the GPU class's default) s 512 MiB, compute "
        "estimated high (measured: replaces it)"
    )
    assert "reserve 0 MiB kept free" in second and "default) s 768 MiB" in second
