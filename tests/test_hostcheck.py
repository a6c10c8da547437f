"""Specs describing one host: checked together for GPUs, RAM, ports and names; rendered together."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from layoutgen.render.hostcheck import SharedHostError, name_per_spec

from conftest import run_cli
from specs import VALID, write

ROOT = Path(__file__).resolve().parent.parent
GEMMA = ROOT / "layouts" / "models" / "gemma-4-26b-a4b-q5_k_m.yaml"

#: VALID's host with one more worker: on gpu1 it fits beside VALID's services
WORKER1 = VALID.split("services:\n")[0] + (
    "services:\n"
    "  worker1:\n"
    "    model: coder\n"
    "    runtime: ik\n"
    "    role: worker\n"
    "    gpus: [gpu1]\n"
    "    port: 8002\n"
    "    ctx: 262144\n"
    "    cache_type_k: q8_0\n"
)


def lab(services: dict[str, int], ram: str = "48GiB") -> str:
    """A CPU host (RAM only); each service takes about 19 GiB."""
    text = (
        "version: 1\nhost:\n  name: lab\n  cpu: {cores: 8, threads: 16}\n"
        f"  ram: {ram}\n  ram_reserve: 4GiB\n"
        f'  podman: "5.4"\nmodels:\n  gemma:\n    path: /srv/models/gemma.gguf\n'
        f"    profile: {GEMMA}\n"
        "runtimes:\n  llama:\n    kind: llama.cpp\n    image: ghcr.io/ggml-org/llama.cpp:server\n"
        "services:\n"
    )
    for name, port in services.items():
        text += (
            f"  {name}:\n    role: batch\n    model: gemma\n    runtime: llama\n"
            f"    port: {port}\n    ctx: 4096\n    threads: 4\n"
        )
    return text


def test_specs_that_fit_the_host_together_render_side_by_side(tmp_path: Path) -> None:
    a = write(tmp_path, name="a.yaml")
    b = write(tmp_path, WORKER1, "b.yaml")
    assert run_cli(["validate", str(a), str(b)]).code == 0
    out = tmp_path / "out"
    result = run_cli(["render", "-o", str(out), str(a), str(b)])
    assert result.code == 0, result.stderr
    host = out / "compute"
    assert sorted(p.name for p in host.iterdir() if p.is_file()) == [
        ".layoutgen-manifest",
        "endpoints.a.json",
        "endpoints.b.json",
        "layout.a.md",
        "layout.b.md",
        "plan.a.json",
        "plan.b.json",
    ]
    assert sorted(p.name for p in (host / "systemd").iterdir()) == [
        "grandpa.service",
        "worker0.service",
        "worker1.service",
    ]
    assert f"\t{a}\t" not in (host / ".layoutgen-manifest").read_text()
    assert run_cli(["render", "--check", "-o", str(out), str(a), str(b)]).code == 0
    # One of them alone would skip the check of the two together: refused.
    alone = run_cli(["render", "-o", str(out), str(a)])
    assert alone.code == 1
    # specs are named from out/'s parent (here tmp_path), as in every rendered header
    a, b = a.relative_to(out.parent), b.relative_to(out.parent)
    assert alone.stderr.splitlines()[-1] == (
        f"{host}: error: host 'compute' is also described by {b} (see "
        f"{host}/.layoutgen-manifest); specs of one host are checked together for GPUs, RAM "
        f"and ports, so render them in one call: layoutgen render {b} {a}; or give {a} "
        f"another host.name; or, if {b} is gone, render with --forget {b}"
    )


def test_gpus_are_summed_over_the_specs_of_a_host(tmp_path: Path) -> None:
    a = write(tmp_path, name="a.yaml")
    b = write(tmp_path, WORKER1.replace("gpus: [gpu1]", "gpus: [gpu0]"), "b.yaml")
    assert run_cli(["validate", str(b)]).code == 0  # alone it fits
    result = run_cli(["validate", str(a), str(b)])
    assert result.code == 1
    m = re.fullmatch(
        rf"{re.escape(str(b))}:8:7: error: host\.gpus\[0\]: GPU gpu0 \(index 0\) of host "
        r"'compute' is shared by 2 specs and does not fit them: needs (?P<need>[0-9,]+) MiB, "
        r"has 97,247 MiB - reserve 1,024 MiB = 96,223 MiB, short by (?P<short>[0-9,]+) MiB; "
        rf"{re.escape(str(a))} (?P<a>[0-9,]+) MiB \(grandpa (?P<g>[0-9,]+) MiB, worker0 "
        rf"(?P<w0>[0-9,]+) MiB\); {re.escape(str(b))} (?P<b>[0-9,]+) MiB \(worker1 "
        r"(?P<w1>[0-9,]+) MiB\)\. Move a service to another GPU, or make one smaller, in one "
        r"of the specs\n",
        result.stdout,
    )
    assert m, result.stdout
    n = {k: int(v.replace(",", "")) for k, v in m.groupdict().items()}
    # the GPU is charged with every service of both specs, and the message adds up
    # (each figure is rounded to the MiB on its own)
    assert abs(n["a"] - (n["g"] + n["w0"])) <= 1 and n["b"] == n["w1"]
    assert abs(n["need"] - (n["a"] + n["b"])) <= 1
    assert abs(n["short"] - (n["need"] - 96_223)) <= 1
    assert n["w0"] == n["w1"]  # the same worker on the same model
    assert run_cli(["render", "-o", str(tmp_path / "out"), str(a), str(b)]).code == 1
    assert not (tmp_path / "out").exists()


def test_host_ram_is_summed_over_the_specs_of_a_host(tmp_path: Path) -> None:
    c = write(tmp_path, lab({"chat": 8080, "code": 8081}), "c.yaml")
    d = write(tmp_path, lab({"night": 8090}), "d.yaml")
    result = run_cli(["validate", str(c), str(d)])
    assert result.code == 1
    # The figures follow the memory model (they move when compute estimates do);
    # what this test holds is the message's shape and its arithmetic.
    m = re.fullmatch(
        rf"{re.escape(str(d))}:5:8: error: host\.ram: the RAM of host 'lab' is shared by 2 "
        r"specs and does not fit them: needs (?P<need>[\d,]+) MiB, has 49,152 MiB - reserve "
        r"4,096 MiB = 45,056 MiB, short by (?P<short>[\d,]+) MiB; "
        rf"{re.escape(str(c))} (?P<c>[\d,]+) MiB \(chat (?P<chat>[\d,]+) MiB, code "
        rf"(?P<code>[\d,]+) MiB\); {re.escape(str(d))} (?P<d>[\d,]+) MiB \(night "
        r"(?P<night>[\d,]+) MiB\)\. Run fewer or smaller services in one of the specs\n",
        result.stdout,
    )
    assert m is not None, result.stdout
    n = {k: int(v.replace(",", "")) for k, v in m.groupdict().items()}
    assert n["chat"] == n["code"] == n["night"] == n["d"]  # three identical services
    assert abs(n["c"] - (n["chat"] + n["code"])) <= 1  # MiB rounding
    assert abs(n["need"] - (n["c"] + n["d"])) <= 1
    assert n["short"] == n["need"] - 45_056
    bigger = write(tmp_path, lab({"chat": 8080, "code": 8081}, ram="64GiB"), "c.yaml")
    d = write(tmp_path, lab({"night": 8090}, ram="64GiB"), "d.yaml")
    assert run_cli(["validate", str(bigger), str(d)]).code == 0


def test_specs_of_a_host_agree_on_its_hardware(tmp_path: Path) -> None:
    a = write(tmp_path, name="a.yaml")
    b = write(
        tmp_path,
        WORKER1.replace("vram: 97247MiB, reserve: 1GiB}\n", "vram: 24GiB, reserve: 1GiB}\n", 1),
        "b.yaml",
    )
    result = run_cli(["validate", str(a), str(b)])
    assert result.code == 1
    assert result.stdout == (
        f"{b}:8:34: error: host.gpus[0].vram: 24,576 MiB for GPU gpu0 (index 0) of host "
        f"'compute', but {a} says 97,247 MiB; specs of one host describe the same machine: "
        "write the same value in both\n"
    )


def test_ports_and_service_names_are_shared_by_the_specs_of_a_host(tmp_path: Path) -> None:
    c = write(tmp_path, lab({"chat": 8080}, ram="64GiB"), "c.yaml")
    d = write(tmp_path, lab({"chat": 8090, "night": 8080}, ram="64GiB"), "d.yaml")
    result = run_cli(["validate", str(c), str(d)])
    assert result.code == 1
    assert result.stdout == (
        f"{d}:17:3: error: services.chat: host 'lab' already runs a service 'chat', from "
        f"{c}; their unit files would be the same: rename one of them\n"
        f"{d}:28:11: error: services.night.port: port 8080 is already used by service 'chat' "
        f"of host 'lab' in {c}\n"
    )
    # another host may use the same names and ports
    e = write(
        tmp_path, lab({"chat": 8080}, ram="64GiB").replace("name: lab", "name: den"), "e.yaml"
    )
    assert run_cli(["validate", str(c), str(e)]).code == 0


def test_per_host_files_of_two_specs_with_one_stem_would_collide() -> None:
    rendered = {
        "a/x.yaml": {"h/layout.md": "a\n", "h/plan.json": "{}\n"},
        "b/x.yaml": {"h/layout.md": "b\n", "h/plan.json": "{}\n"},
    }
    with pytest.raises(SharedHostError) as exc:
        name_per_spec(rendered, {"a/x.yaml": "h", "b/x.yaml": "h"})
    assert str(exc.value) == (
        "a/x.yaml and b/x.yaml both describe host 'h', so their layout and plan files are "
        "named after them, and both would be layout.x.md: rename one of the files"
    )
    alone = name_per_spec({"a/x.yaml": rendered["a/x.yaml"]}, {"a/x.yaml": "h"})
    assert alone == {"a/x.yaml": rendered["a/x.yaml"]}
