"""A spec made ready for apply: validated, its GPUs checked against this host's
(``render --probe``), rendered, and described as a generation's records."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from layoutgen.deploy import gitops, installer
from layoutgen.deploy.generations import ServiceRecord
from layoutgen.errors import LayoutgenError, Severity
from layoutgen.render.validate import Validated

Say = Callable[[str], None]


class Refused(LayoutgenError):
    """The spec is invalid, or names GPUs this host does not have (diagnostics said)."""


@dataclass(frozen=True)
class Prepared:
    validated: Validated
    spec: str  # the spec's absolute path
    files: Mapping[str, str]  # relative to the host folder
    install: Mapping[str, str]
    services: tuple[ServiceRecord, ...]
    start_order: tuple[str, ...]

    @property
    def scope(self) -> str:
        return self.validated.spec.host.deploy.scope

    def meta(self, commit: str = "") -> dict[str, Any]:
        import datetime

        g = self.validated.spec.host.gitops
        return {
            "schema": 1,
            "spec": self.spec,
            "host": self.validated.spec.host.name,
            "scope": self.scope,
            "commit": commit,
            "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "start_order": list(self.start_order),
            "install": dict(self.install),
            "services": {s.name: s.as_json() for s in self.services},
            "gitops": None if g is None else {"repo": g.repo, "branch": g.branch, "spec": g.spec},
        }


def validated(spec: Path, say: Say, *, probe: bool = True) -> Validated:
    from layoutgen.render.validate import validate_files

    (result,) = validate_files([(spec, str(spec))])
    for diag in result.diagnostics:
        say(diag.gcc())
    if result.validated is None:
        raise Refused(f"{spec}: invalid; apply changes nothing")
    if probe:
        _gpus_are_here(result.validated, str(spec), say)
    return result.validated


def _gpus_are_here(v: Validated, shown: str, say: Say) -> None:
    """As ``render --probe``: the spec's GPUs are this host's (NVML)."""
    from layoutgen.live import findings, nvml
    from layoutgen.live.doctor import LiveHost
    from layoutgen.live.ports import Sockets

    if not v.spec.host.gpus:
        return
    report = nvml.read()
    live = LiveHost(report, mem_available=None, memlock=None, sockets=Sockets(()), podman=None)
    found = findings.diagnose(v, live, only_gpus=True)
    for f in found:
        say(dataclasses.replace(f.diagnostic, file=shown).gcc())
    if any(f.diagnostic.severity is Severity.ERROR for f in found):
        raise Refused(f"{shown}: its GPUs are not this host's; apply changes nothing")


def prepare(v: Validated, spec: Path) -> Prepared:
    from layoutgen.render.artifacts import render

    host = v.spec.host.name
    rendered = render(v, str(spec.absolute()))
    files = {
        path[len(host) + 1 :]: text
        for path, text in rendered.items()
        if path.startswith(f"{host}/")
    }
    files.update(gitops.units(v, spec.absolute()))
    endpoints = json.loads(files["endpoints.json"])
    plan = json.loads(files["plan.json"])
    prefer_quadlet = "quadlet" in v.spec.host.targets
    install = installer.plan_install(
        files, list(v.spec.services), v.spec.host.deploy.scope, prefer_quadlet
    )
    index = {g.id: g.index for g in v.spec.host.gpus}
    records: list[ServiceRecord] = []
    for name, svc in sorted(v.spec.services.items()):
        ep = endpoints["services"][name]
        unit_file = next((rel for rel in install if PurePosixPath(rel).stem == name), None)
        text = files[unit_file] if unit_file else ""
        planned: dict[str, int] = {}
        for buf in plan["services"].get(name, {}).get("buffers", {}).values():
            gpu = index.get(buf.get("device"))
            if gpu is None:
                continue
            total = sum(
                int(buf.get(k, 0)) for k in ("weights", "kv", "compute", "overhead", "created")
            )
            planned[str(gpu)] = planned.get(str(gpu), 0) + total
        container = v.spec.runtimes[svc.runtime].image is not None
        secret = svc.api_key.secret if svc.api_key is not None else None
        records.append(
            ServiceRecord(
                name=name,
                unit=f"{name}.service",
                health=str(ep["health"]),
                port=int(svc.port),
                bind="0.0.0.0" if svc.expose else "127.0.0.1",
                at_boot="\nWantedBy=" in text,
                planned=planned,
                secrets=(secret,) if secret and container else (),
            )
        )
    return Prepared(
        validated=v,
        spec=str(spec.absolute()),
        files=files,
        install=install,
        services=tuple(records),
        start_order=tuple(endpoints["start_order"]),
    )
