"""Several specs describing one host: checked together, rendered together.

Why: specs with the same ``host.name`` run on the same machine at the same
time (alternative layouts of one machine take their own names, as layouts/
does: ``compute``, ``compute-glm51-1``, ...).  Each spec's own fit check
sees only its services, so the specs are checked together here: ports,
each GPU by its NVML index, and host RAM, summed over the specs, against
the hardware they must agree on.

Rendered together, their units sit side by side in ``out/<host>/`` and each
spec's per-host files are named after it (``layout.<stem>.md``,
``plan.<stem>.json``) so neither overwrites the other; the output directory
refuses to render one of them without the others (:mod:`layoutgen.render.outdir`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import PurePath
from typing import TYPE_CHECKING

from layoutgen.errors import Diagnostic, LayoutgenError, Problem, SpecPath
from layoutgen.spec.sizes import format_size

if TYPE_CHECKING:
    from layoutgen.render.validate import Validated


class SharedHostError(LayoutgenError):
    """Specs of one host whose per-host files would get the same name."""


def check_together(specs: Sequence[tuple[str, Validated]]) -> dict[str, list[Diagnostic]]:
    """Diagnostics, by spec name, of specs that do not fit their host together."""
    found: dict[str, list[Diagnostic]] = {}
    unique: dict[str, Validated] = {}
    for name, v in specs:
        unique.setdefault(name, v)  # a spec given twice is one spec
    specs = list(unique.items())
    by_host: dict[str, list[tuple[str, Validated]]] = {}
    for name, v in specs:
        by_host.setdefault(v.spec.host.name, []).append((name, v))
    for name, v, problem in _names_and_ports(specs):
        found.setdefault(name, []).append(v.doc.diagnostic(problem))
    for group in by_host.values():
        if len(group) > 1:
            for name, v, problem in _hardware(group):
                found.setdefault(name, []).append(v.doc.diagnostic(problem))
    return found


Found = list[tuple[str, "Validated", Problem]]


def _names_and_ports(specs: Sequence[tuple[str, Validated]]) -> Found:
    owner: dict[tuple[str, int], tuple[str, str]] = {}
    named: dict[tuple[str, str], str] = {}
    out: Found = []
    for file, v in specs:
        for name in sorted(v.spec.services):
            unit = (v.spec.host.name, name)
            if named.setdefault(unit, file) != file:
                message = (
                    f"services.{name}: host {unit[0]!r} already runs a service {name!r}, from "
                    f"{named[unit]}; their unit files would be the same: rename one of them"
                )
                out.append((file, v, Problem(("services", name), message, at_key=True)))
            key = (v.spec.host.name, v.spec.services[name].port)
            if key in owner and owner[key][0] != file:
                other_file, other = owner[key]
                message = (
                    f"services.{name}.port: port {key[1]} is already used by service "
                    f"{other!r} of host {key[0]!r} in {other_file}"
                )
                out.append((file, v, Problem(("services", name, "port"), message)))
            owner.setdefault(key, (file, name))
    return out


def _hardware(group: list[tuple[str, Validated]]) -> Found:
    """The specs agree on the hardware, and their plans fit it summed."""
    out: Found = []
    # device key -> [(spec file, validated, path of its declaration, device id in that spec)]
    devices: dict[str, list[tuple[str, Validated, SpecPath, str]]] = {}
    for file, v in group:
        devices.setdefault("host", []).append((file, v, ("host", "ram"), "host"))
        for i, gpu in enumerate(v.spec.host.gpus):
            if gpu.index is not None:  # rpc devices are another host's (not summed here)
                devices.setdefault(f"index {gpu.index}", []).append(
                    (file, v, ("host", "gpus", i), gpu.id)
                )
    for key, users in devices.items():
        first_file, first_v, _, first_id = users[0]
        cap, res = _limits(first_v, first_id)
        agree = True
        for file, v, path, dev in users[1:]:
            c, r = _limits(v, dev)
            for field, mine, theirs in (("vram", c, cap), ("reserve", r, res)):
                if mine != theirs:
                    agree = False
                    if key == "host":
                        field = "ram" if field == "vram" else "ram_reserve"
                        where: SpecPath = ("host", field)
                    else:
                        where = (*path, field)
                    message = (
                        f"{_dotted(where)}: {_mib(mine)} for {_device(key, v, dev)}, but "
                        f"{first_file} says {_mib(theirs)}; specs of one host describe the same "
                        "machine: write the same value in both"
                    )
                    out.append((file, v, Problem(where, message)))
        need = sum(v.plan.device(dev).used for _, v, _, dev in users)
        if agree and len(users) > 1 and need > cap - res:
            file, v, path, dev = users[-1]
            message = _overcommit(path, key, v, dev, need, cap, res, users)
            out.append((file, v, Problem(path, message)))
    return out


def _limits(v: Validated, dev: str) -> tuple[int, int]:
    plan = v.plan.device(dev)
    return plan.capacity, plan.reserve


def _mib(n: int) -> str:
    return f"{n / 2**20:,.0f} MiB" if abs(n) < 2**40 else format_size(n)


def _dotted(path: SpecPath) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")


def _device(key: str, v: Validated, dev: str) -> str:
    host = v.spec.host.name
    return f"the RAM of host {host!r}" if key == "host" else f"GPU {dev} ({key}) of host {host!r}"


def _overcommit(
    path: SpecPath,
    key: str,
    v: Validated,
    dev: str,
    need: int,
    cap: int,
    res: int,
    users: list[tuple[str, Validated, SpecPath, str]],
) -> str:
    parts = []
    for file, u, _, d in users:
        services = [
            (sp.name, sum(p.total for b, p in sp.buffers.items() if sp.device_of[b] == d))
            for sp in u.plan.services
        ]
        named = ", ".join(f"{s} {_mib(n)}" for s, n in services if n)
        parts.append(f"{file} {_mib(u.plan.device(d).used)}" + (f" ({named})" if named else ""))
    return (
        f"{_dotted(path)}: {_device(key, v, dev)} is shared by {len(users)} specs and does "
        f"not fit them: needs {_mib(need)}, has {_mib(cap)} - reserve {_mib(res)} "
        f"= {_mib(cap - res)}, short by {_mib(need - cap + res)}; {'; '.join(parts)}. "
        + (
            "Run fewer or smaller services in one of the specs"
            if key == "host"
            else "Move a service to another GPU, or make one smaller, in one of the specs"
        )
    )


def name_per_spec(
    rendered: Mapping[str, Mapping[str, str]], hosts: Mapping[str, str]
) -> dict[str, dict[str, str]]:
    """Name each spec's per-host files after the spec where several specs describe one host.

    ``hosts``: spec name -> its ``host.name``.  A host described by one spec
    keeps ``layout.md``, ``plan.json`` and ``endpoints.json``.
    """
    specs_of: dict[str, list[str]] = {}
    for spec in rendered:
        specs_of.setdefault(hosts[spec], []).append(spec)
    out: dict[str, dict[str, str]] = {}
    for spec, files in rendered.items():
        host = hosts[spec]
        if len(specs_of[host]) == 1:
            out[spec] = dict(files)
            continue
        stem = PurePath(spec).stem
        same = [s for s in specs_of[host] if s != spec and PurePath(s).stem == stem]
        if same:
            raise SharedHostError(
                f"{spec} and {same[0]} both describe host {host!r}, so their layout and plan "
                f"files are named after them, and both would be layout.{stem}.md: rename "
                "one of the files"
            )
        renamed = {
            f"{host}/layout.md": f"{host}/layout.{stem}.md",
            f"{host}/plan.json": f"{host}/plan.{stem}.json",
            f"{host}/endpoints.json": f"{host}/endpoints.{stem}.json",
        }
        out[spec] = {renamed.get(p, p): text for p, text in files.items()}
    return out
