"""Load → schema → role defaults → cross-checks, for one spec file.

The result is a :class:`Validated` (the frozen spec, its resolved services and
any warnings) or an :class:`InvalidInput` carrying every diagnostic found.
Schema errors are all reported together; the cross-checks need a spec that
passed the schema, so they run once it does (as a compiler reports syntax
errors before type errors).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from layoutgen import source
from layoutgen.checks import check
from layoutgen.errors import Diagnostic, InvalidInput, Problem, Severity
from layoutgen.roles import ResolvedService, resolve
from layoutgen.spec import Spec


@dataclass(frozen=True)
class Validated:
    doc: source.Document
    spec: Spec
    services: tuple[ResolvedService, ...]
    warnings: tuple[Diagnostic, ...]


def validate_file(path: Path, name: str | None = None) -> Validated:
    return validate_document(source.load(path, name))


def validate_document(doc: source.Document) -> Validated:
    from pydantic import ValidationError

    from layoutgen.schema_errors import problems_from

    data = doc.plain()
    if data is None:
        raise InvalidInput(
            [
                Diagnostic(
                    doc.name,
                    1,
                    1,
                    Severity.ERROR,
                    "empty spec: write at least 'host:' and 'services:'",
                )
            ]
        )
    if not isinstance(data, dict):
        raise InvalidInput(
            [
                Diagnostic(
                    doc.name,
                    1,
                    1,
                    Severity.ERROR,
                    "a spec is a mapping with keys host, models, runtimes and services",
                )
            ]
        )
    try:
        spec = Spec.model_validate(data)
    except ValidationError as exc:
        problems = problems_from(exc.errors(), data, Spec)
        raise InvalidInput([doc.diagnostic(p) for p in problems]) from None
    services = resolve(spec)
    problems = [*check(spec, services), *_files(spec, doc.path)]
    diagnostics = [doc.diagnostic(p) for p in problems]
    errors = [d for d in diagnostics if d.severity is Severity.ERROR]
    if errors:
        raise InvalidInput(diagnostics)
    warnings = tuple(sorted(d for d in diagnostics if d.severity is Severity.WARNING))
    return Validated(doc, spec, services, warnings)


def _files(spec: Spec, spec_path: Path) -> list[Problem]:
    """Paths: host paths must be absolute; profiles must exist beside the spec."""
    problems: list[Problem] = []
    for mid in sorted(spec.models):
        model = spec.models[mid]
        if not PurePosixPath(model.path).is_absolute():
            problems.append(
                Problem(
                    ("models", mid, "path"),
                    f"models.{mid}.path: "
                    f"{model.path!r} is not absolute; write the full path "
                    "of the GGUF on the host",
                )
            )
        profile = spec_path.parent / model.profile
        if not profile.is_file():
            problems.append(
                Problem(
                    ("models", mid, "profile"),
                    f"models.{mid}.profile: no profile file {model.profile!r}"
                    + (f" (looked for {profile})" if str(profile) != model.profile else "")
                    + "; write one with 'layoutgen inspect MODEL.gguf -o FILE'",
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


@dataclass(frozen=True)
class FileResult:
    """One file's outcome: a validated spec, or the diagnostics that refuse it."""

    name: str
    validated: Validated | None
    diagnostics: tuple[Diagnostic, ...]

    @property
    def ok(self) -> bool:
        return self.validated is not None


def validate_files(paths: list[tuple[Path, str]]) -> list[FileResult]:
    """Validate several specs; specs describing the same host share its ports."""
    results: list[FileResult] = []
    for path, name in paths:
        try:
            validated = validate_file(path, name)
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
