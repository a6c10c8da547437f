"""Load → schema → role defaults → cross-checks, for one spec file.

The result is a :class:`Validated` (the frozen spec, its resolved services and
any warnings) or an :class:`InvalidInput` carrying every diagnostic found.
Schema errors are all reported together; the cross-checks need a spec that
passed the schema, so they run once it does (as a compiler reports syntax
errors before type errors).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from layoutgen import source
from layoutgen.checks import check
from layoutgen.errors import Diagnostic, InvalidInput, Problem, Severity
from layoutgen.models import check_models
from layoutgen.plan import Plan
from layoutgen.profile import Profile, load_profile, profile_from_document
from layoutgen.roles import ResolvedService, resolve
from layoutgen.solve import DoesNotFit, solve
from layoutgen.spec import Spec


@dataclass(frozen=True)
class Validated:
    doc: source.Document
    spec: Spec
    services: tuple[ResolvedService, ...]
    profiles: dict[str, Profile]  # by model id
    warnings: tuple[Diagnostic, ...]
    plan: Plan


def validate_file(path: Path, name: str | None = None) -> Validated:
    return validate_document(source.load(path, name))


def validate_document(doc: source.Document) -> Validated:
    from layoutgen.schema_errors import validate_mapping

    spec = validate_mapping(
        doc, Spec, "a spec is a mapping with keys host, models, runtimes and services"
    )
    services = resolve(spec)
    profiles, profile_problems, elsewhere = _profiles(spec, doc)
    problems = [
        *check(spec, services),
        *_paths(spec),
        *profile_problems,
        *check_models(spec, services, profiles),
    ]
    diagnostics = [doc.diagnostic(p) for p in problems] + elsewhere
    if any(d.severity is Severity.ERROR for d in diagnostics):
        raise InvalidInput(diagnostics)
    try:
        plan = solve(spec, services, profiles, doc.name)
    except DoesNotFit as exc:
        raise InvalidInput(diagnostics + [doc.diagnostic(p) for p in exc.problems]) from None
    located = [
        doc.diagnostic(Problem(("host", "cpu", "threads"), w, Severity.WARNING))
        for w in plan.warnings
    ]
    warnings = tuple(sorted(diagnostics + located))
    return Validated(doc, spec, services, profiles, warnings, plan)


def _paths(spec: Spec) -> list[Problem]:
    """Host paths (model files, native binaries) must be absolute."""
    problems: list[Problem] = []
    for mid in sorted(spec.models):
        path = spec.models[mid].path
        if not PurePosixPath(path).is_absolute():
            problems.append(
                Problem(
                    ("models", mid, "path"),
                    f"models.{mid}.path: {path!r} is "
                    "not absolute; write the full path of the GGUF on the host",
                )
            )
    for rid in sorted(spec.runtimes):
        binary = spec.runtimes[rid].binary
        if binary is not None and not PurePosixPath(binary).is_absolute():
            problems.append(
                Problem(
                    ("runtimes", rid, "binary"),
                    f"runtimes.{rid}.binary: "
                    f"{binary!r} is not absolute; write the full path of the "
                    "server binary on the host",
                )
            )
    return problems


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
        if not path.is_file():
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
                loaded[key] = load_profile(path, os.path.normpath(path))
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
    """Validate several specs; specs describing the same host share its ports."""
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
    owner: dict[tuple[str, int], tuple[str, str]] = {}
    out: list[FileResult] = []
    for result in results:
        v = result.validated
        if v is None:
            out.append(result)
            continue
        clashes: list[Diagnostic] = []
        for name in sorted(v.spec.services):
            key = (v.spec.host.name, v.spec.services[name].port)
            if key in owner and owner[key][0] != result.name:
                other_file, other = owner[key]
                clashes.append(
                    v.doc.diagnostic(
                        Problem(
                            ("services", name, "port"),
                            f"services.{name}.port: port {key[1]} is already used by service "
                            f"{other!r} of host {key[0]!r} in {other_file}",
                        )
                    )
                )
            owner.setdefault(key, (result.name, name))
        if clashes:
            out.append(FileResult(result.name, None, tuple(sorted([*clashes, *v.warnings]))))
        else:
            out.append(result)
    return out
