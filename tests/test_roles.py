"""Role defaults: filled in, overridable, and explained with their source."""

from __future__ import annotations

from typing import Any

from ruamel.yaml import YAML

from layoutgen.spec.roles import DEFAULTED, ROLES, explain, resolve
from layoutgen.spec.schema import ExpertsAuto, ExpertsGpu, ExpertsHost, Spec

from specs import VALID


def _spec(**service_overrides: Any) -> Spec:
    data = YAML(typ="safe").load(VALID)
    data["services"]["worker0"].update(service_overrides)
    return Spec.model_validate(data)


def _by_name(spec: Spec) -> dict[str, Any]:
    return {rs.name: rs for rs in resolve(spec)}


def test_orchestrator_defaults_come_from_seed_001() -> None:
    grandpa = _by_name(_spec())["grandpa"]
    assert grandpa.parallel == 1
    assert grandpa.reasoning is False
    assert grandpa.experts == ExpertsAuto(policy="head-tail")
    assert grandpa.gpus == ("gpu0", "gpu1")  # every GPU of the host
    assert "4.6 s reply into 19.1 s" in grandpa.origins["reasoning"].why


def test_worker_defaults_and_spec_wins() -> None:
    worker = _by_name(_spec())["worker0"]
    assert worker.parallel == 2
    assert worker.experts == ExpertsGpu()
    assert worker.cache_type_k == "q8_0" and worker.origins["cache_type_k"].source == "spec"
    assert worker.cache_type_v == "f16" and worker.origins["cache_type_v"].source == "default"
    overridden = _by_name(_spec(parallel=4, experts="host"))["worker0"]
    assert overridden.parallel == 4 and overridden.origins["parallel"].source == "spec"
    assert overridden.experts == ExpertsHost()


def test_batch_role_is_the_cpu_lane() -> None:
    batch = _by_name(_spec(role="batch", gpus=None))["worker0"]
    # gpus: null counts as "not written", so the role default applies.
    assert batch.gpus == ()
    assert batch.mlock is True
    assert batch.experts == ExpertsHost()


def test_every_role_default_names_a_defaultable_field_and_a_reason() -> None:
    for role, defaults in ROLES.items():
        for key, default in defaults.items():
            assert key in DEFAULTED, (role, key)
            assert default.why.startswith(f"role {role}"), (role, key)


def test_explain_lists_every_setting_with_its_origin() -> None:
    lines = explain(_by_name(_spec())["grandpa"])
    assert lines[0] == "service grandpa (role orchestrator):"
    assert len(lines) == 1 + len(DEFAULTED)
    assert "  threads = 15  (spec)" in lines
    assert any(
        line.startswith("  experts = auto (policy: head-tail)  (role orchestrator:")
        for line in lines
    )
    assert "  batch = 2048  (default: llama.cpp default)" in lines
