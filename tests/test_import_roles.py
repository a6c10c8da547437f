"""A guessed role changes nothing; what render adds and what import drops is listed.

Issue 30: the orchestrator role import guessed for seed 001's command added
``--reasoning-budget 0`` to a server that never had it, and a unit's
``Restart=`` vanished without a word.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from layoutgen.importer import import_text
from layoutgen.render.validate import validate_file
from tests.specs import PROFILE

DATA = Path(__file__).parent / "import"


def _doc(text: str, source: str = "cmd.sh") -> tuple[dict[str, Any], list[str], str]:
    imported = import_text(text, source)
    return YAML(typ="safe").load(imported.yaml), [w.gcc() for w in imported.warnings], imported.yaml


def test_the_orchestrator_guess_adds_no_reasoning_flag() -> None:
    doc, _, yaml = _doc((DATA / "seed001-glm51-base-cpu-moe.podman").read_text())
    (svc,) = doc["services"].values()
    assert svc["role"] == "orchestrator"
    assert svc["reasoning"] is True and svc["parallel"] == 1
    assert (
        "reasoning: true  # the command sets no reasoning flag; role orchestrator alone "
        "would add --reasoning-budget 0"
    ) in yaml


def test_a_reasoning_flag_the_command_has_is_kept() -> None:
    doc, _, _ = _doc("llama-server -m /m/a.gguf -c 8 -ngl 99 --cpu-moe --reasoning-budget 0")
    assert doc["services"]["a"]["reasoning"] is False


def test_render_of_the_guess_has_no_flag_the_role_added(tmp_path: Path) -> None:
    doc, _, _ = _doc("/opt/bin/llama-server -m /m/a.gguf -c 4096 -ngl 99 --cpu-moe --jinja")
    (svc,) = doc["services"].values()
    assert svc["role"] == "orchestrator"
    (model,) = doc["models"].values()
    model["profile"] = str(PROFILE)  # Qwen3-Coder-Next Q4_0, a MoE
    (runtime,) = doc["runtimes"].values()
    runtime["version"] = "6123"
    doc["host"] = {
        "name": "t",
        "cpu": {"cores": 8, "threads": 16},
        "ram": "256GiB",
        "ram_reserve": "1GiB",
        "gpus": [{"id": g, "index": i, "vram": "96GiB", "reserve": "0MiB"}
                 for i, g in enumerate(svc["gpus"])],
    }  # fmt: skip
    spec = tmp_path / "spec.yaml"
    with spec.open("w") as fh:
        YAML().dump(doc, fh)
    (sp,) = validate_file(spec).plan.services
    argv = list(sp.argv)
    assert "-rea" not in argv and "--reasoning-budget" not in argv
    assert argv[argv.index("-np") + 1] == "1"


def test_settings_import_drops_are_listed() -> None:
    _, warnings, yaml = _doc(
        "podman run -d --rm --restart=always --shm-size 16g --device nvidia.com/gpu=0 "
        "-v /m:/m img:b6123 -m /m/a.gguf -c 8 -ngl 99"
    )
    assert warnings[:2] == [
        "cmd.sh:1:20: warning: dropped --restart=always: layoutgen renders "
        "Restart=on-failure with a start limit",
        "cmd.sh:1:37: warning: dropped --shm-size 16g: the spec has no key for it",
    ]
    assert "# dropped --restart=always: layoutgen renders Restart=on-failure" in yaml
    unit = DATA / "seed001-glm51-podman.service"
    _, warnings, yaml = _doc(unit.read_text(), unit.name)
    assert (
        f"{unit.name}:20:1: warning: dropped Restart=on-failure: layoutgen renders "
        "Restart=on-failure with a start limit"
    ) in warnings
    assert "# dropped Restart=on-failure: layoutgen renders" in yaml


def test_what_render_adds_is_listed_with_its_reason() -> None:
    _, warnings, yaml = _doc("llama-server -m /m/a.gguf -c 8 -ngl 99 -ts 1,1")
    assert warnings[-1] == (
        "cmd.sh: warning: rendered, the service adds flags the command left to the runtime: "
        "-np 1; -b 2048; -ub 512; -ctk f16; -ctv f16; -sm layer; -fit off; -fa on (listed "
        "with their reasons at the top of the YAML)"
    )
    assert "#   adds -b 2048: llama.cpp's default batch, written out (no change)" in yaml
    assert "#   adds -fa on: flash attention on pinned; the command left it to" in yaml


def test_slots_are_the_runtime_default_of_the_build() -> None:
    """No -np: ik_llama.cpp starts 1 slot; llama.cpp from the builds read '-np auto', 4."""
    doc, _, yaml = _doc("podman run -v /m:/m ghcr.io/ggml-org/llama.cpp:server-b9500 -m /m/a.gguf")
    (svc,) = doc["services"].values()
    assert svc["parallel"] == 4
    assert "#   adds -np 4: llama-server's '-np auto' (4 slots) in build 9500" in yaml
    doc, _, _ = _doc("podman run -v /m:/m reg/ik_llama.cpp:4357 -m /m/a.gguf -mla 3")
    assert next(iter(doc["services"].values()))["parallel"] == 1
