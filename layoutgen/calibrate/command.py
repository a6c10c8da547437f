"""``layoutgen calibrate``: the buffer sizes a start-up log printed, written into the spec.

Why: compute buffers have no closed form (DESIGN §5), and a runtime build can
allocate weights or KV differently from what the plan computes.  A start-up
log prints every buffer's size; calibrate copies those numbers, exactly as
printed, into ``services.<name>.measured``, and the plan uses them (marked
measured).

Reading the log is :mod:`layoutgen.calibrate.startlog`'s job (what counts, what is
summed, what makes two start-ups); writing into the spec is
:mod:`layoutgen.calibrate.measured`'s.  This module joins them, and checks that the log
is the service's.

Whose start-up.  Sizes from another model or host would silently replace
measured ones, so the log must match the service: its model file name
(``loaded meta data ... from PATH``), ``general.architecture`` and layer count
(``block_count``; ``n_layer`` also without nextn layers, as llama.cpp prints
it) against the service's model and profile; the runtime, recognised by lines
only one runtime prints (:mod:`layoutgen.calibrate.startlog` lists them), against the
service's runtime kind; the CUDA device count and the GPU buffers it names
against the service's GPUs (a container sees exactly its GPUs).  A fact the
log does not show is not checked.  A mismatch refuses the log with one line
naming each difference; ``--force`` writes the sizes anyway and returns the
differences to be shown.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from layoutgen.calibrate.measured import choose_service, edit_spec, write_spec
from layoutgen.calibrate.startlog import Entries, Log, Seen, read_log_file, shown
from layoutgen.errors import Diagnostic, InvalidInput, LayoutgenError, Severity
from layoutgen.inputs import source
from layoutgen.models.inputs import read_bounded
from layoutgen.solve.plan import Plan

SPEC_MAX = 1 << 20  # as yamlbounds.MAX_SPEC_BYTES: a spec is a few KiB


@dataclass(frozen=True)
class Calibrated:
    service: str
    entries: Entries  # what was written, by buffer
    #: what --force let through: the mismatches between the log and the service
    overridden: tuple[str, ...] = ()


def calibrate(log: Path, spec: Path, service: str | None, *, force: bool = False) -> Calibrated:
    """Read ``log``, write its sizes into ``spec`` (atomically); raise on any user error.

    A log whose model, layer count, runtime or devices differ from the
    service's is refused (one line naming each difference), or with ``force``
    written anyway, the differences returned in ``overridden``.
    """
    read = read_log_file(log, str(log))
    text = _read_spec(spec, str(spec))
    doc = source.parse(text, str(spec), spec)
    chosen = choose_service(doc, service)
    new_text, chosen = edit_spec(text, str(spec), chosen, read.entries, log_name=log.name)
    problems = mismatches(read, expected(doc, chosen))
    if problems and not force:
        message = (
            f"the log is not from a start-up of service {chosen}: {'; '.join(problems)}; "
            "calibrate the service it is from (--service NAME), or pass --force to write "
            "its sizes anyway"
        )
        raise InvalidInput([Diagnostic(str(log), 0, 0, Severity.ERROR, message)])
    target = Path(os.path.realpath(spec))  # a link keeps pointing at the updated file
    try:
        write_spec(target, new_text)
    except OSError as exc:
        raise LayoutgenError(f"cannot write {spec}: {exc.strerror}") from None
    return Calibrated(chosen, read.entries, tuple(problems))


def _read_spec(spec: Path, name: str) -> str:
    raw = read_bounded(spec, name, SPEC_MAX, "a spec is a few KiB", "give the spec file itself")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInput(
            [Diagnostic(name, 0, 0, Severity.ERROR, f"not UTF-8 text ({exc.reason})")]
        ) from None


@dataclass(frozen=True)
class Expected:
    """What a start-up log of one service must show; None or empty where the spec cannot say."""

    service: str
    model: str | None = None
    file: str | None = None  # the model's file name (the first shard's)
    arch: str | None = None
    layers: frozenset[int] = frozenset()  # block_count; without nextn layers too
    runtime: str | None = None  # kind
    runtime_id: str | None = None
    container: bool = True
    #: the service's GPU buffers in the runtime's names, and their host GPU ids
    gpu_buffers: tuple[str, ...] = ()
    gpus: tuple[str, ...] = ()
    cuda: int = 0  # local CUDA GPUs


def expected(doc: source.Document, service: str) -> Expected:
    """The model, runtime and devices of ``service``; the spec must pass its schema."""
    from layoutgen.inputs.schema_errors import validate_mapping
    from layoutgen.models.profile import load_profile
    from layoutgen.solve.footprint import device_order
    from layoutgen.spec.roles import resolve_service
    from layoutgen.spec.schema import Spec

    spec = validate_mapping(
        doc, Spec, "a spec is a mapping with keys host, models, runtimes and services"
    )
    rs = resolve_service(spec, service)
    svc = rs.service
    gpus, buffers, _ = device_order(spec, rs.gpus)
    found: dict[str, Any] = {
        "service": service,
        "gpu_buffers": buffers,
        "gpus": gpus,
        "cuda": sum(1 for b in buffers if b.startswith("CUDA")),
    }
    runtime = spec.runtimes.get(svc.runtime)
    if runtime is not None:
        found.update(runtime=runtime.kind, runtime_id=svc.runtime, container=bool(runtime.image))
    model = spec.models.get(svc.model)
    if model is not None:
        found.update(model=svc.model, file=PurePosixPath(model.path).name)
        try:
            profile = load_profile(doc.path.parent / model.profile)
        except (InvalidInput, OSError):
            profile = None  # validate reports it; the other checks still run
        if profile is not None:
            hp = profile.hparams
            found.update(
                arch=profile.arch, layers={hp.n_layer, hp.n_layer - (hp.nextn_layers or 0)}
            )
    found["layers"] = frozenset(found.get("layers", ()))
    return Expected(**found)


def mismatches(log: Log, want: Expected) -> list[str]:
    """Each way the log shows another model, runtime or device set than ``want``'s."""
    out: list[str] = []
    who = f"service {want.service}"
    facts = log.facts
    if want.file and (seen := facts.get("file")):
        name = PurePosixPath(seen.value).name
        if name != want.file:
            out.append(
                f"log says model file {shown(name)} (line {seen.line}), {who}'s model "
                f"{want.model} is {want.file}"
            )
    if want.arch and (seen := facts.get("arch")) and seen.value != want.arch:
        out.append(
            f"log says arch {seen.value} (line {seen.line}), {who}'s model {want.model} "
            f"is {want.arch}"
        )
    layers = facts.get("block_count")
    if want.layers and layers and int(layers.value) not in want.layers:
        out.append(_layers(layers, want, who))
    elif (
        want.layers
        and not layers
        and (n := facts.get("n_layer"))
        and int(n.value) not in want.layers
    ):
        out.append(_layers(n, want, who))
    if want.runtime:
        for kind, seen in sorted(log.runtimes.items(), key=lambda kv: kv[1].line):
            if kind != want.runtime:
                out.append(
                    f"log is from {kind} (line {seen.line}: {shown(seen.value)}), {who} "
                    f"runs {want.runtime} (runtime {want.runtime_id})"
                )
                break
    cuda = facts.get("cuda")
    if cuda and (int(cuda.value) < want.cuda or (want.container and int(cuda.value) != want.cuda)):
        out.append(
            f"log says {_count(int(cuda.value), 'CUDA device')} (line {cuda.line}), {who} "
            f"uses {want.cuda} ({', '.join(want.gpus) or 'no GPU'})"
        )
    extra = [(b, n) for b, n in log.gpu_buffers.items() if b not in want.gpu_buffers]
    if extra:
        names = ", ".join(shown(b) for b, _ in extra)
        out.append(
            f"log has GPU buffer{'s' if len(extra) > 1 else ''} {names} (line {extra[0][1]}), "
            f"{who}'s GPU buffers are {', '.join(want.gpu_buffers) or 'none'}"
        )
    return out


def _layers(seen: Seen, want: Expected, who: str) -> str:
    return (
        f"log says {seen.value} layers (line {seen.line}), {who}'s model {want.model} "
        f"has {max(want.layers)}"
    )


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def unplanned(plan: Plan, service: str, buffers: Iterable[str]) -> list[str]:
    """Buffers the log has and the plan does not: their measured values go unused."""
    planned = plan.service(service).buffers
    return [b for b in buffers if b not in planned]
