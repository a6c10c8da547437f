"""Roles and their defaults, with where each default comes from.

A service's role says how it is used, and that decides sensible defaults:
the numbers come from the source documents (shared/seeds), and each default
carries the reason so ``layoutgen validate --explain`` can show it.  Anything
written in the spec wins over a role default, which wins over the runtime's
own default.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from layoutgen.core.runtime import Runtime
from layoutgen.models.tensors import format_layers
from layoutgen.spec.schema import ExpertsAuto, ExpertsGpu, ExpertsHost, Service, Spec


@dataclass(frozen=True)
class Default:
    value: Any
    why: str


# Fields a role may default, in the order --explain prints them.
DEFAULTED = (
    "gpus",
    "parallel",
    "cache_type_k",
    "cache_type_v",
    "batch",
    "ubatch",
    "threads",
    "threads_batch",
    "experts",
    "reasoning",
    "mlock",
)

ALL_GPUS = object()  # placeholder: "every GPU of the host", resolved per spec
ROOMIEST_GPU = object()  # placeholder: "the GPU with the most usable VRAM", resolved per spec

#: Defaults every role shares: llama.cpp's own defaults, written down so that
#: the plan does not depend on a runtime version's choice.
BASE: dict[str, Default] = {
    "gpus": Default(ALL_GPUS, "every GPU of the host"),
    "parallel": Default(1, "one slot"),
    "cache_type_k": Default("f16", "llama.cpp default"),
    "cache_type_v": Default("f16", "llama.cpp default"),
    "batch": Default(2048, "llama.cpp default"),
    "ubatch": Default(512, "llama.cpp default"),
    "threads": Default(None, "runtime decides (physical cores)"),
    "threads_batch": Default(None, "runtime decides (same as threads)"),
    "experts": Default(ExpertsGpu(), "experts stay with their layers on the GPUs"),
    "reasoning": Default(None, "runtime and chat template decide"),
    "mlock": Default(False, "weights may be paged"),
}

ROLES: MappingProxyType[str, dict[str, Default]] = MappingProxyType(
    {
        "orchestrator": {
            "parallel": Default(1, "role orchestrator: answers short and often, one slot"),
            "reasoning": Default(
                False,
                "role orchestrator: seed 001 measured thinking turning a 4.6 s reply "
                "into 19.1 s (61 answer + 294 reasoning tokens)",
            ),
            "experts": Default(
                ExpertsAuto(policy="head-tail"),
                "role orchestrator: experts fill the GPUs after the workers are placed, "
                "head and tail layers first (seed 001: 18.84 -> 21.75 tok/s)",
            ),
        },
        "worker": {
            "parallel": Default(
                2, "role worker: seed 001 found --parallel 2 (128k x 2) the practical floor"
            ),
            "experts": Default(
                ExpertsGpu(), "role worker: placed first and fully resident on its GPUs"
            ),
        },
        "batch": {
            "gpus": Default((), "role batch: the CPU lane, no GPU (seed 000)"),
            "experts": Default(ExpertsHost(), "role batch: the CPU lane holds every weight"),
            "mlock": Default(
                True,
                "role batch: seed 004 found --mlock mandatory on a CPU-only host "
                "(without it the model pages out)",
            ),
        },
        "embedding": {
            "gpus": Default(
                ROOMIEST_GPU,
                "role embedding: one GPU, the one with the most usable VRAM (each GPU a "
                "server touches costs it a process's overhead)",
            ),
            "parallel": Default(1, "role embedding: one slot"),
            "experts": Default(
                ExpertsGpu(), "role embedding: small and resident, placed with the workers"
            ),
        },
    }
)


@dataclass(frozen=True)
class Origin:
    source: str  # "spec", "role" or "default"
    why: str = ""


@dataclass(frozen=True)
class ResolvedService:
    """A service with every role default filled in (plain frozen data)."""

    name: str
    service: Service
    gpus: tuple[str, ...]
    parallel: int
    cache_type_k: str
    cache_type_v: str
    batch: int
    ubatch: int
    threads: int | None
    threads_batch: int | None
    experts: Any
    reasoning: bool | None
    mlock: bool
    origins: dict[str, Origin] = field(default_factory=dict)


def resolve_service(spec: Spec, name: str) -> ResolvedService:
    svc = spec.services[name]
    role = ROLES[svc.role]
    values: dict[str, Any] = {}
    origins: dict[str, Origin] = {}
    for key in DEFAULTED:
        written = getattr(svc, key)
        if key in svc.model_fields_set and written is not None:
            values[key], origins[key] = written, Origin("spec")
            continue
        default = role.get(key)
        origin = Origin("role", default.why) if default else Origin("default", BASE[key].why)
        chosen = default or BASE[key]
        value = chosen.value
        if value is ALL_GPUS:
            value = tuple(g.id for g in spec.host.gpus)
        elif value is ROOMIEST_GPU:
            value = _roomiest(spec)
        values[key], origins[key] = value, origin
    return ResolvedService(name=name, service=svc, origins=origins, **values)


def _roomiest(spec: Spec) -> tuple[str, ...]:
    """The GPU with the most usable VRAM (capacity - reserve), the first in spec order
    among equals; none on a CPU-only host."""
    if not spec.host.gpus:
        return ()
    best = max(spec.host.gpus, key=lambda g: (g.vram - g.reserve, -spec.host.gpus.index(g)))
    return (best.id,)


def resolve(spec: Spec) -> tuple[ResolvedService, ...]:
    """Every service of the spec, resolved, in name order."""
    return tuple(resolve_service(spec, name) for name in sorted(spec.services))


def explain(resolved: ResolvedService) -> list[str]:
    """Lines for ``validate --explain``: each defaultable setting and its origin."""
    lines = [f"service {resolved.name} (role {resolved.service.role}):"]
    for key in DEFAULTED:
        origin = resolved.origins[key]
        shown = _show(getattr(resolved, key))
        if origin.source == "spec":
            lines.append(f"  {key} = {shown}  (spec)")
        elif origin.source == "role":  # the reason names the role: "role batch: ..."
            lines.append(f"  {key} = {shown}  ({origin.why})")
        else:
            lines.append(f"  {key} = {shown}  ({origin.source}: {origin.why})")
    return lines


def _show(value: Any) -> str:
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return "[" + ", ".join(str(v) for v in value) + "]"
    if hasattr(value, "mode"):
        extra = {k: v for k, v in value.model_dump().items() if k != "mode" and v is not None}
        inner = ", ".join(f"{k}: {_show_value(v)}" for k, v in sorted(extra.items()))
        return f"{value.mode}" + (f" ({inner})" if inner else "")
    return str(value)


def _show_value(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_show_value(v)}" for k, v in sorted(value.items())) + "}"
    if isinstance(value, tuple | list) and all(isinstance(v, int) for v in value):
        return "[" + format_layers(value, sep="-", join=", ") + "]"
    return str(value)


def flash_attn_arg(rs: ResolvedService, rt: Runtime | None = None) -> str | None:
    """RS's ``-fa`` value as RT's build reads it (:meth:`Runtime.flash_attn_arg`; no
    build: the newest reading, the value after the last -fa)."""
    return (rt or Runtime()).flash_attn_arg(rs.service.args)


def flash_attn(rs: ResolvedService, rt: Runtime | None = None) -> bool:
    """Whether RS runs with flash attention, as its runtime decides
    (:meth:`Runtime.flash_attn`: its ``flash_attn:``, else its ``-fa``, else on with
    GPUs): the one answer argv and sizing share."""
    return (rt or Runtime()).flash_attn(rs.service.args, bool(rs.gpus), rs.service.flash_attn)
