"""Solver properties over generated hosts and services (hypothesis).

- every loaded tensor's bytes are placed exactly once (weights are conserved);
- no device is over capacity in an accepted plan;
- the order GPUs are listed in does not change the plan;
- the same spec gives byte-identical plan JSON.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML

from layoutgen.core.placement import loaded
from layoutgen.errors import InvalidInput
from layoutgen.inputs.source import parse
from layoutgen.models.profile import load_profile
from layoutgen.render.validate import Validated, validate_document
from layoutgen.runtimes.ik_llama_cpp import IkLlamaCpp
from layoutgen.solve.plan import to_json

from conftest import ROOT

MODELS = ROOT / "layouts" / "models"
GLM = MODELS / "glm-5.1-iq3_ks.yaml"
CODER = MODELS / "qwen3-coder-next-q4_0.yaml"
LOADED = {p: sum(t.nbytes for t in loaded(load_profile(p), IkLlamaCpp())) for p in (GLM, CODER)}


@st.composite
def specs(draw: st.DrawFn) -> dict[str, Any]:
    n_gpus = draw(st.integers(min_value=1, max_value=3))
    gpus = [
        {
            "id": f"gpu{i}",
            "index": i,
            "vram": f"{draw(st.sampled_from([48, 80, 96]))}GiB",
            "reserve": "512MiB",
        }
        for i in range(n_gpus)
    ]
    services: dict[str, Any] = {}
    n_workers = draw(st.integers(min_value=0, max_value=n_gpus))
    for i in range(n_workers):
        services[f"worker{i}"] = {
            "model": "coder",
            "runtime": "ik",
            "role": "worker",
            "port": 8001 + i,
            "gpus": [f"gpu{i}"],
            "ctx": draw(st.sampled_from([32768, 131072, 262144])),
            "cache_type_k": "q8_0",
            "cache_type_v": "q8_0",
        }
    services["grandpa"] = {
        "model": "glm",
        "runtime": "ik",
        "role": "orchestrator",
        "port": 8000,
        "ctx": draw(st.sampled_from([8192, 32768])),
        "cache_type_k": "q8_0",
        "cache_type_v": "q8_0",
        "args": ["-mla", "3"],
        "experts": {
            "mode": "auto",
            "policy": draw(st.sampled_from(["head-tail", "head", "tail", "even"])),
        },
    }
    return {
        "host": {
            "name": "h",
            "cpu": {"cores": 16, "threads": 32},
            "ram": "768GiB",
            "ram_reserve": "32GiB",
            "podman": "5.4",
            "gpus": gpus,
        },
        "models": {
            "glm": {"path": "/m/glm.gguf", "profile": str(GLM)},
            "coder": {"path": "/m/coder.gguf", "profile": str(CODER)},
        },
        "runtimes": {
            "ik": {"kind": "ik_llama.cpp", "image": "localhost/ik:4840", "version": "4840"}
        },
        "services": services,
    }


def _validate(data: dict[str, Any]) -> Validated | None:
    buf = __import__("io").StringIO()
    YAML(typ="safe").dump(data, buf)
    try:
        return validate_document(parse(buf.getvalue(), "gen.yaml", Path("gen.yaml")))
    except InvalidInput as exc:
        # Refusals are fine (the layout may not fit); anything else is not.
        assert all("does not fit" in d.message for d in exc.diagnostics), exc.diagnostics
        return None


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs(), st.randoms(use_true_random=False))
def test_solver_properties(data: dict[str, Any], rnd: random.Random) -> None:
    v = _validate(data)
    event("refused" if v is None else "accepted")
    if v is None:
        return
    plan = v.plan
    for device in plan.devices:
        assert device.free >= 0, device
    for sp in plan.services:
        model = v.spec.services[sp.name].model
        total = sum(part.weights for part in sp.buffers.values())
        assert total == LOADED[GLM if model == "glm" else CODER], sp.name
    assert to_json(plan) == to_json(_validate(data).plan)  # type: ignore[union-attr]
    shuffled = dict(
        data,
        host=dict(data["host"], gpus=rnd.sample(data["host"]["gpus"], len(data["host"]["gpus"]))),
    )
    again = _validate(shuffled)
    assert again is not None and to_json(again.plan) == to_json(plan)
