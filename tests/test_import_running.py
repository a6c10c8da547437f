"""Import what runs: ``--shell`` (the script run with recorders), a ``podman inspect``
record, a process.  Seed 001's configuration 5 and seed 003 build their ``-ot``
flags in a shell loop: the expanded rules must come back, and the plan must
put the expert layers where the seeds did.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from layoutgen.errors import LayoutgenError
from layoutgen.importer import import_text, sources
from layoutgen.render.validate import validate_file

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = Path(__file__).parent / "import_scripts"
RUNNING = Path(__file__).parent / "import_running"
GLM_51 = ROOT / "layouts" / "models" / "glm-5.1-iq3_ks.yaml"
#: the experts the seeds' loops put on each GPU: seed 001 configuration 5 head 12 +
#: tail 10, seed 003 head 15 + tail 4
SEED001 = {"gpu0": list(range(3, 15)), "gpu1": list(range(68, 78))}
SEED003 = {"gpu0": list(range(3, 18)), "gpu1": list(range(74, 78))}


def _rules(placed: dict[str, list[int]]) -> list[dict[str, str]]:
    return [
        {"pattern": f"blk.{i}.ffn_{k}_exps", "device": gpu}
        for gpu, layers in placed.items()
        for i in layers
        for k in ("gate", "down", "up")
    ]


def _imported(given: sources.Input) -> dict[str, Any]:
    imported = import_text(given.text, given.label, made=given.made)
    return dict(YAML(typ="safe").load(imported.yaml))


def _expert_layers(doc: dict[str, Any], tmp: Path) -> dict[str, list[int]]:
    """The plan's expert layers per device for the imported service, on the seeds' host."""
    (model,) = doc["models"].values()
    model["profile"] = str(GLM_51)
    (runtime,) = doc["runtimes"].values()
    runtime["version"] = "4357"  # the seeds' ik_llama.cpp build
    host = YAML(typ="safe").load((ROOT / "layouts" / "glm51-head15-tail4-ctx65k.yaml").read_text())
    doc["host"] = host["host"]
    spec = tmp / "spec.yaml"
    with spec.open("w") as fh:
        YAML().dump(doc, fh)
    (sp,) = validate_file(spec).plan.services
    placed: dict[str, set[int]] = {}
    for layer in range(3, 78):  # GLM-5.1's MoE layers
        for kind in ("gate", "up", "down"):
            tensor = f"blk.{layer}.ffn_{kind}_exps.weight"
            device = sp.device_of[sp.moved.get(tensor, sp.layer_buffer[layer])]
            if device != "host":
                placed.setdefault(device, set()).add(layer)
    host_weights = sp.buffers["CUDA_Host"].weights if "CUDA_Host" in sp.buffers else 0
    WEIGHTS[id(doc)] = (host_weights, {b: p.weights for b, p in sp.buffers.items()})
    return {dev: sorted(layers) for dev, layers in sorted(placed.items())}


#: the last plan's buffer weights, by the document planned (for the seed-003 check)
WEIGHTS: dict[int, tuple[int, dict[str, int]]] = {}


@pytest.mark.parametrize(
    ("script", "placed"),
    [("seed001-config5-head12-tail10.sh", SEED001), ("seed003-head15-tail4.sh", SEED003)],
)
def test_shell_runs_the_seed_loop_and_imports_every_rule(
    script: str, placed: dict[str, list[int]], tmp_path: Path
) -> None:
    given = sources.read(None, shell=SCRIPTS / script)
    assert given.label == f"{SCRIPTS / script} (as run)"
    doc = _imported(given)
    (svc,) = doc["services"].values()
    assert svc["gpus"] == ["gpu0", "gpu1"]
    assert svc["experts"] == "host"
    assert svc["tensor_overrides"] == _rules(placed)
    assert "args" not in svc or not any("$" in a for a in svc["args"])
    assert _expert_layers(doc, tmp_path) == placed
    if script.startswith("seed003"):
        # seed 003's log (MiB): CUDA0 68,698, CUDA1 23,473, CUDA_Host 229,438 (weights)
        _, weights = WEIGHTS[id(doc)]
        for buffer, logged in (("CUDA0", 68698), ("CUDA1", 23473), ("CUDA_Host", 229438)):
            assert abs(weights[buffer] / 2**20 - logged) / logged < 0.01, buffer


def test_shell_names_the_program_path_would_have_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    marker = tmp_path / "started"
    (bin_dir / "llama-server").write_text(f"#!/bin/sh\ntouch {marker}\n")
    (bin_dir / "llama-server").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    script = tmp_path / "start.sh"
    script.write_text("export CUDA_VISIBLE_DEVICES=1\nllama-server -m /m/a.gguf -c 8 -ngl 99\n")
    doc = _imported(sources.read(None, shell=script))
    assert doc["runtimes"]["llamacpp"]["binary"] == str(bin_dir / "llama-server")
    assert doc["services"]["a"]["gpus"] == ["gpu1"]  # the script's exported variable
    assert not marker.exists()  # the recorder ran in its place


def test_shell_never_starts_what_it_records(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    script = tmp_path / "start.sh"
    script.write_text(
        f"N=2\npodman rm -f old\nllama-server -m /m/a.gguf -c 8 -np $N -ngl 99 && "
        f"touch {marker}.server\ntouch {marker}\n"
    )
    doc = _imported(sources.read(None, shell=script))
    assert doc["services"]["a"]["parallel"] == 2
    assert marker.exists()  # the script itself ran ...
    assert Path(f"{marker}.server").exists()  # ... and the recorder answered 0


def test_a_program_called_by_its_path_is_refused_before_the_script_runs(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    script = tmp_path / "start.sh"
    script.write_text(f"touch {marker}\n  /usr/bin/podman run img -m /m/a.gguf\n")
    with pytest.raises(LayoutgenError) as info:
        sources.read(None, shell=script)
    assert str(info.value) == (
        f"{script} (as run):2:3: error: the script calls /usr/bin/podman by its path, so the "
        "recorder on PATH cannot stand in for it and running the script would start it: "
        "write podman (found on PATH) and import again"
    )
    assert not marker.exists()


def test_podman_inspect_record_gives_the_expanded_rules(tmp_path: Path) -> None:
    record = RUNNING / "seed001-config5-grandpa.inspect.json"
    given = sources.read(str(record))
    assert given.label == f"{record} (podman inspect)"
    doc = _imported(given)
    (name,) = doc["services"]
    svc = doc["services"][name]
    assert name == "grandpa" and svc["gpus"] == ["gpu0", "gpu1"]
    assert svc["capabilities"] == ["SYS_NICE"]
    assert svc["tensor_overrides"] == _rules(SEED001)
    (model,) = doc["models"].values()
    assert model["path"].startswith("/mnt/data/models/models--ubergarm--GLM-5.1-GGUF/snapshots/")
    assert _expert_layers(doc, tmp_path) == SEED001


def test_a_process_is_imported_from_proc(tmp_path: Path) -> None:
    """A real process named llama-server with the seed's expanded argv."""
    program = tmp_path / "llama-server"
    program.write_text(f"#!{sys.executable}\nimport time\ntime.sleep(60)\n")
    program.chmod(0o755)
    rules = [w for r in _rules(SEED003) for w in ("-ot", f"{r['pattern']}={r['device']}")]
    rules = [w.replace("=gpu0", "=CUDA0").replace("=gpu1", "=CUDA1") for w in rules]
    argv = [str(program), "-m", "/m/GLM.gguf", "-c", "65536", "-ngl", "99", "--cpu-moe", *rules]
    env = {"PATH": "/usr/bin:/bin", "CUDA_VISIBLE_DEVICES": "1,0", "GGML_SCHED_MAX_COPIES": "1"}
    proc = subprocess.Popen(argv, env=env)
    try:
        deadline = time.monotonic() + 30
        cmdline = Path(f"/proc/{proc.pid}/cmdline")
        while str(program).encode() not in cmdline.read_bytes() and time.monotonic() < deadline:
            time.sleep(0.05)  # until the interpreter has exec'd with the script's argv
        given = sources.read(str(proc.pid))
    finally:
        proc.kill()
        proc.wait()
    assert given.label == f"pid {proc.pid}"
    doc = _imported(given)
    (svc,) = doc["services"].values()
    assert svc["gpus"] == ["gpu1", "gpu0"]  # CUDA_VISIBLE_DEVICES=1,0
    assert [o["pattern"] for o in svc["tensor_overrides"]] == [
        r["pattern"] for r in _rules(SEED003)
    ]
    assert doc["runtimes"]["llamacpp"]["binary"] == str(program)


def test_no_such_process_or_container() -> None:
    with pytest.raises(LayoutgenError, match="no process 999999999"):
        sources.read("999999999")
    # looked up with podman where it is installed, else said
    with pytest.raises(LayoutgenError, match=r"podman is not installed|no container podman knows"):
        sources.read("no-such-container")


def test_a_process_in_a_container_is_said_to_be(tmp_path: Path) -> None:
    """Its paths are the container's: the header says so (cgroup as podman 5 writes it)."""
    from layoutgen.importer import running

    (tmp_path / "7").mkdir()
    (tmp_path / "7" / "cgroup").write_text(
        "0::/machine.slice/libpod-5f0c3a0e9b7d4e2f8a1c6b3d9e0f1a2b.scope/container\n"
    )
    assert running.in_container(7, tmp_path)
    (tmp_path / "7" / "cgroup").write_text("0::/user.slice/user-1000.slice/session-3.scope\n")
    assert not running.in_container(7, tmp_path)
    assert not running.in_container(8, tmp_path)  # gone: nothing said
