"""The VRAM-race refusal names the other tenant and how to keep them apart (issue 30 item 7).

Two services that each fit a GPU alone but not together race for its memory
only when they run at the same time.  The refusal names the other service and
suggests making them alternatives (``conflicts:`` on one, ``default: true``
on the one that boots; docs/reference/spec.md "Alternatives"), never ``ctx: 0`` (the model's
trained context: longer, not shorter).  Following the suggestion validates.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from layoutgen.errors import InvalidInput
from layoutgen.inputs.source import parse
from layoutgen.render.validate import validate_document

import specs
from conftest import ROOT

SEED004 = ROOT / "layouts" / "vllm-tower-seed004.yaml"


def _refusals(text: str, name: str, path: Path) -> list[str]:
    with pytest.raises(InvalidInput) as exc:
        validate_document(parse(text, name, path))
    return [d.gcc() for d in exc.value.diagnostics if d.severity.name == "ERROR"]


def _llama_pair() -> str:
    """grandpa and worker0 on gpu0, both with every expert on the GPU: each fits alone."""
    text = specs.VALID.replace(
        "    role: orchestrator\n", "    role: orchestrator\n    gpus: [gpu0]\n    experts: gpu\n"
    ).replace("ctx: 32768", "ctx: 262144")
    assert text.count("gpus: [gpu0]") == 2
    return text


def test_llama_services_racing_for_a_gpu_are_told_to_be_alternatives(tmp_path: Path) -> None:
    path = specs.write(tmp_path, _llama_pair())
    (message,) = _refusals(path.read_text(), "spec.yaml", path)
    assert "spec.yaml:21:5: error: services.grandpa: does not fit GPU gpu0" in message
    assert "shares: grandpa " in message and ", worker0 " in message
    assert "If grandpa never needs to run at the same time as worker0" in message
    assert "'conflicts: [worker0]' on grandpa" in message
    assert "'default: true' on the one that starts at boot" in message
    assert "ctx: 0" not in message
    # the suggestion holds
    fixed = path.read_text().replace(
        "    role: orchestrator\n",
        "    role: orchestrator\n    conflicts: [worker0]\n    default: true\n",
    )
    validate_document(parse(fixed, "spec.yaml", path))


def test_vllm_services_racing_for_their_gpus_are_told_to_be_alternatives() -> None:
    """Seed 004's two vLLM services without their conflicts: the refusal said 'about 0
    tokens fit: write ctx: 0 or less', located at ctx (ctx: 0 is the trained context)."""
    text = SEED004.read_text()
    apart = "    default: true                    # the one that starts at boot (May 3, May 5)\n"
    apart += "    conflicts: [aeon]\n"
    assert apart in text
    (message,) = _refusals(text.replace(apart, ""), "layouts/vllm-tower-seed004.yaml", SEED004)
    assert ": error: services.genesis: vLLM would refuse to start beside aeon:" in message
    assert "If genesis never needs to run at the same time as aeon" in message
    assert "'conflicts: [aeon]' on genesis" in message
    assert "'default: true' on the one that starts at boot" in message
    assert "ctx: 0" not in message
    # located at the service (its first key, the line after its name), not at its ctx
    line = text.replace(apart, "").splitlines().index("  genesis:") + 2
    assert f"vllm-tower-seed004.yaml:{line}:5: error" in message
    # the layout as committed, with the conflicts, validates
    validate_document(parse(text, "layouts/vllm-tower-seed004.yaml", SEED004))
