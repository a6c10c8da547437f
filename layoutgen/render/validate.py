"""Load → schema → role defaults → cross-checks, for one spec file.

The result is a :class:`Validated` (the frozen spec, its resolved services and
any warnings) or an :class:`InvalidInput` carrying every diagnostic found.
Schema errors are all reported together; the cross-checks need a spec that
passed the schema, so they run once it does (as a compiler reports syntax
errors before type errors).
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from layoutgen.errors import Diagnostic, InvalidInput, Problem, Severity, SpecPath, printable
from layoutgen.inputs import source
from layoutgen.inputs.yamlbounds import MAX_PROFILE_BYTES
from layoutgen.models.profile import Profile, load_profile, profile_from_document
from layoutgen.solve.plan import Plan
from layoutgen.solve.solver import DoesNotFit, solve
from layoutgen.spec.checks import check, check_drafts
from layoutgen.spec.model_checks import check_models
from layoutgen.spec.roles import ResolvedService, resolve
from layoutgen.spec.schema import Spec

if TYPE_CHECKING:
    from layoutgen.render.units import Unit
    from layoutgen.speed.heat import HeatProfile


@dataclass(frozen=True)
class Validated:
    doc: source.Document
    spec: Spec
    services: tuple[ResolvedService, ...]
    profiles: dict[str, Profile]  # by model id
    warnings: tuple[Diagnostic, ...]
    plan: Plan
    #: the service units render writes (built here: validate refuses what render would)
    units: tuple[Unit, ...] = ()


def validate_file(path: Path, name: str | None = None) -> Validated:
    return validate_document(source.load(path, name))


def validate_document(doc: source.Document, *, one_argv: bool = True) -> Validated:
    """ONE_ARGV=False: a runtime without 'version:' whose builds take different flags
    is planned all the same (the truth table compares memory, not flags)."""
    from layoutgen.inputs.schema_errors import validate_mapping

    spec = validate_mapping(
        doc, Spec, "a spec is a mapping with keys host, models, runtimes and services"
    )
    services = resolve(spec)
    profiles, profile_problems, elsewhere = _profiles(spec, doc)
    heats, heat_problems = _heats(spec, doc)
    problems = [
        *check(spec, services),
        *profile_problems,
        *heat_problems,
        *check_models(spec, services, profiles),
        *check_drafts(spec, services, profiles),
    ]
    diagnostics = [doc.diagnostic(p) for p in problems] + elsewhere
    if any(d.severity is Severity.ERROR for d in diagnostics):
        raise InvalidInput(diagnostics)
    try:
        plan = solve(spec, services, profiles, doc.name, heats, one_argv=one_argv)
    except DoesNotFit as exc:
        raise InvalidInput(diagnostics + [doc.diagnostic(p) for p in exc.problems]) from None
    units, unrenderable = _render_checks(spec, plan, services)
    if unrenderable:
        raise InvalidInput(diagnostics + [doc.diagnostic(p) for p in unrenderable])
    paths = plan.warning_paths or (("host", "cpu", "threads"),) * len(plan.warnings)
    located = [
        doc.diagnostic(Problem(where, w, Severity.WARNING))
        for where, w in zip(paths, plan.warnings, strict=True)
    ]
    warnings = tuple(sorted(diagnostics + located))
    return Validated(doc, spec, services, profiles, warnings, plan, units)


def _render_checks(
    spec: Spec, plan: Plan, services: tuple[ResolvedService, ...]
) -> tuple[tuple[Unit, ...], list[Problem]]:
    """What render would refuse, refused here too, located: validate accepts exactly
    what render accepts (the units are built in memory; nothing is written)."""
    from layoutgen.render.units import RenderError, build

    try:
        return tuple(build(spec, plan, services)), []
    except RenderError as exc:
        where: SpecPath = ("host", "podman") if spec.host.podman is not None else ("host",)
        return (), [Problem(where, str(exc))]


#: parsed profiles by (name, sha256 of the file's bytes): specs of one run that
#: share a profile parse it once (12 layouts named 5 files 15 times)
_PARSED: dict[tuple[str, str], Profile] = {}


def _load_profile(path: Path, name: str) -> Profile:
    """:func:`load_profile`, once per content: the bytes are read and hashed each
    time (cheap), the YAML parsed and checked only for content not seen before,
    in this run or an earlier one (:mod:`layoutgen.models.profile_cache`)."""
    import hashlib

    from layoutgen.models import profile_cache

    try:
        with path.open("rb") as f:
            data = f.read(MAX_PROFILE_BYTES + 1)
    except OSError:
        return load_profile(path, name)  # load_profile reports it, located
    key = (name, hashlib.sha256(data).hexdigest())
    if key not in _PARSED:
        if len(_PARSED) >= 64:
            _PARSED.clear()
        profile = profile_cache.get(data)
        if profile is None:
            profile = profile_from_document(source.parse_bytes(data, name, path))
            profile_cache.put(data, profile)
        _PARSED[key] = profile
    return _PARSED[key]


def _profiles(
    spec: Spec, doc: source.Document
) -> tuple[dict[str, Profile], list[Problem], list[Diagnostic]]:
    """Load each referenced profile once; its own errors are located in its own file."""
    profiles: dict[str, Profile] = {}
    problems: list[Problem] = []
    elsewhere: list[Diagnostic] = []
    loaded: dict[Path, Profile | None] = {}
    for mid in sorted(spec.models):
        ref = spec.models[mid].profile
        path = doc.path.parent / ref
        why = source.outside(path, doc.within, repr(ref))  # issue 31: no link out of the repo
        if why is not None:
            problems.append(Problem(("models", mid, "profile"), f"models.{mid}.profile: {why}"))
            continue
        try:
            found = path.is_file()
        except OSError:  # a name too long for the file system, say
            found = False
        if not found:
            looked = f" (looked for {path})" if str(path) != ref else ""
            problems.append(
                Problem(
                    ("models", mid, "profile"),
                    f"models.{mid}.profile: no "
                    f"profile file {ref!r}{looked}; write one with "
                    "'layoutgen inspect MODEL.gguf -o FILE'",
                )
            )
            continue
        key = path.resolve()
        if key not in loaded:
            try:
                loaded[key] = _load_profile(path, os.path.normpath(path))
            except InvalidInput as exc:
                loaded[key] = None
                elsewhere.extend(exc.diagnostics)
        profile = loaded[key]
        if profile is None:
            problems.append(
                Problem(
                    ("models", mid, "profile"),
                    f"models.{mid}.profile: {ref!r} is not a valid profile (see its errors)",
                )
            )
        else:
            profiles[mid] = profile
    return profiles, problems, elsewhere


def _heats(spec: Spec, doc: source.Document) -> tuple[dict[str, HeatProfile], list[Problem]]:
    """Each model's expert heat file (``models.<id>.heat``), read when given."""
    wanted = {mid: m.heat for mid, m in spec.models.items() if m.heat is not None}
    if not wanted:
        return {}, []  # the speed package stays unimported
    from ruamel.yaml.error import YAMLError

    from layoutgen.speed.heat import HeatError, load_imatrix_gguf, load_yaml

    heats: dict[str, HeatProfile] = {}
    problems: list[Problem] = []
    for mid, ref in sorted(wanted.items()):
        path = doc.path.parent / ref
        where = ("models", mid, "heat")
        why = source.outside(path, doc.within, repr(ref))  # issue 31: no link out of the repo
        if why is not None:
            problems.append(Problem(where, f"models.{mid}.heat: {why}"))
            continue
        try:
            if not path.is_file():
                problems.append(
                    Problem(
                        where,
                        f"models.{mid}.heat: no file {ref!r} (looked for {path}); write a "
                        "heat YAML (schema: 1, source, layers) or give a llama-imatrix GGUF",
                    )
                )
                continue
            if path.suffix == ".gguf":
                heats[mid] = load_imatrix_gguf(path)[0]
            elif path.stat().st_size > MAX_PROFILE_BYTES:
                problems.append(
                    Problem(where, f"models.{mid}.heat: {ref!r} is larger than a heat file can be")
                )
            else:
                heats[mid] = load_yaml(path)
        except HeatError as exc:
            problems.append(Problem(where, f"models.{mid}.heat: {exc}"))
        except (OSError, ValueError, YAMLError, struct.error, IndexError, KeyError) as exc:
            # unreadable, or not YAML / GGUF at all
            problems.append(
                Problem(where, f"models.{mid}.heat: cannot read {ref!r}: {printable(str(exc))}")
            )
    return heats, problems


@dataclass(frozen=True)
class FileResult:
    """One file's outcome: a validated spec, or the diagnostics that refuse it."""

    name: str
    validated: Validated | None
    diagnostics: tuple[Diagnostic, ...]
    #: a valid model profile (validate accepts profiles as well as specs)
    profile: bool = False

    @property
    def ok(self) -> bool:
        return self.validated is not None or self.profile


def is_profile(doc: source.Document) -> bool:
    """A profile has ``tensors``; a spec never does (so pre-commit can pass both kinds)."""
    data = doc.plain()
    return isinstance(data, dict) and "tensors" in data and "services" not in data


def validate_files(paths: list[tuple[Path, str]]) -> list[FileResult]:
    """Validate several specs; specs describing the same host are checked together.

    They share its ports, its GPUs (by NVML index) and its RAM
    (:mod:`layoutgen.render.hostcheck`); a spec that does not fit beside the others
    is invalid, with the diagnostics located in it.
    """
    results: list[FileResult] = []
    for path, name in paths:
        try:
            doc = source.load(path, name)
            if is_profile(doc):
                profile_from_document(doc)
                results.append(FileResult(name, None, (), profile=True))
                continue
            validated = validate_document(doc)
        except InvalidInput as exc:
            results.append(FileResult(name, None, tuple(exc.diagnostics)))
        else:
            results.append(FileResult(name, validated, validated.warnings))
    return _shared_hosts(results)


def _shared_hosts(results: list[FileResult]) -> list[FileResult]:
    from layoutgen.render.hostcheck import check_together

    found = check_together([(r.name, r.validated) for r in results if r.validated is not None])
    out: list[FileResult] = []
    for result in results:
        if result.validated is not None and result.name in found:
            diagnostics = tuple(sorted([*found[result.name], *result.validated.warnings]))
            out.append(FileResult(result.name, None, diagnostics))
        else:
            out.append(result)
    return out
