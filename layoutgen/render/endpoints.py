"""``out/<host>/endpoints.json``: what a client needs to reach each service.

Seed 000's clients (a Dagster pipeline, Aider, Zed) each need the same few
facts per server: where it answers, which model name to ask for, how to
authenticate, how much context a request gets and how many run at once, and
which services never run together.  They are in the spec and the plan, but
spread over them; this file puts them in one place, written with the units
so that a client's configuration can follow a layout change in review.

The API key itself is never written: only where it lives (a podman secret's
name, a host file's path), as the units reference it.
"""

from __future__ import annotations

import json
from typing import Any

from layoutgen.render.validate import Validated
from layoutgen.solve.plan import ServicePlan
from layoutgen.spec.roles import ResolvedService

SCHEMA = 1
#: the flags that name the model a server answers to, by how its runtimes spell them
_NAME_FLAGS = ("--served-model-name", "--alias", "-a")
_MODEL_FLAGS = ("--model", "-m")


def _flag(argv: tuple[str, ...], names: tuple[str, ...]) -> str | None:
    for i, word in enumerate(argv[:-1]):
        if word in names:
            return argv[i + 1]
    return None


def served_name(argv: tuple[str, ...]) -> str | None:
    """The model name the server reports in /v1/models: its alias (llama.cpp ``-a``,
    vLLM ``--served-model-name``), else the model path as the server was given it."""
    return _flag(argv, _NAME_FLAGS) or _flag(argv, _MODEL_FLAGS)


def _api_key(rs: ResolvedService) -> dict[str, str] | None:
    key = rs.service.api_key
    if key is None:
        return None
    if key.secret is not None:
        return {"secret": key.secret}
    if key.file is not None:
        return {"file": key.file}
    return {"env_file": key.env_file or ""}


def _endpoint(v: Validated, rs: ResolvedService, sp: ServicePlan) -> dict[str, Any]:
    svc = rs.service
    local = f"http://127.0.0.1:{svc.port}"
    runtime = v.spec.runtimes[svc.runtime]
    profile = v.profiles.get(svc.model)
    # ctx: 0 is the model's trained context, as the runtime resolves it
    ctx = svc.ctx or (profile.hparams.n_ctx_train or 0 if profile is not None else 0)
    return {
        "base_url": f"{local}/v1",
        "health": f"{local}/health",
        "exposed": svc.expose,  # bound on every interface, not only 127.0.0.1
        "model": served_name(sp.argv),
        "role": svc.role,
        "runtime": runtime.kind,
        "api_key": _api_key(rs),
        # a request's context: llama.cpp splits ctx over its slots, vLLM's ctx is one
        # request's (--max-model-len)
        "ctx_per_request": ctx // rs.parallel if runtime.rules().CTX_IS_TOTAL else ctx,
        "slots": rs.parallel,
        "unit": f"{rs.name}.service",
        "conflicts": sorted(svc.conflicts),
    }


def endpoints_json(v: Validated, spec_name: str) -> str:
    """The file's text: one object per service, keys sorted, deterministic."""
    by_name = {rs.name: rs for rs in v.services}
    doc = {
        "schema": SCHEMA,
        "spec": spec_name,
        "host": v.spec.host.name,
        "start_order": list(v.plan.order),
        "services": {
            sp.name: _endpoint(v, by_name[sp.name], sp)
            for sp in sorted(v.plan.services, key=lambda s: s.name)
        },
    }
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"
