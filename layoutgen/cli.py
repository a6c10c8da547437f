"""Command line: maps flags onto one function per command, and errors onto exit codes.

Exit codes (documented in docs/reference/cli.md):
  0  success (valid / up to date)
  1  invalid input, a layout that does not fit, or any other user-facing error
  2  usage error (unknown option, missing argument)

Only this module prints.  Each command imports what it needs when it runs,
so ``layoutgen validate`` does not pay for rendering or GGUF code.
"""

from __future__ import annotations

import dataclasses
import enum
import gc
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from layoutgen.render.validate import Validated

app = typer.Typer(
    name="layoutgen",
    help="Declarative deployment generator for local LLM inference.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


class Format(enum.StrEnum):
    gcc = "gcc"
    github = "github"


class DiffFormat(enum.StrEnum):
    text = "text"
    json = "json"


def _print_version(value: bool) -> None:
    if value:
        from layoutgen import __version__

        print(f"layoutgen {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="print the version and exit"
        ),
    ] = False,
) -> None:
    """Declarative deployment generator for local LLM inference."""


#: issue 31: a pull request's links must not make CI read or write outside the repository
AllowOutside = Annotated[
    bool,
    typer.Option(
        "--allow-outside",
        help="read specs, profiles and heat files (and write --out) even where they resolve "
        "outside the repository (a symbolic link, a ../ path); also LAYOUTGEN_ALLOW_OUTSIDE=1. "
        "Never in CI on pull requests",
    ),
]


def _allow_outside(on: bool) -> None:
    """Set for this command (tests run several in one process): on only when given."""
    from layoutgen.inputs import source

    source.allow_outside(on)


@app.command()
def validate(
    specs: Annotated[
        list[Path], typer.Argument(help="spec files (layouts/*.yaml)", metavar="SPEC")
    ],
    fmt: Annotated[
        Format, typer.Option("--format", help="gcc: path:line:col lines; github: annotations")
    ] = Format.gcc,
    explain: Annotated[
        bool, typer.Option("--explain", help="show each service's settings and their origin")
    ] = False,
    allow_outside: AllowOutside = False,
) -> None:
    """Check specs: schema, references, consistency. Exit 0 valid, 1 invalid."""
    _allow_outside(allow_outside)
    from layoutgen.errors import Severity
    from layoutgen.render.validate import validate_files
    from layoutgen.spec.roles import explain as explain_service

    results = validate_files([(path, str(path)) for path in specs])
    for result in results:
        for diag in result.diagnostics:
            print(diag.github() if fmt is Format.github else diag.gcc())
        if result.profile:
            print(f"{result.name}: valid (model profile)", file=sys.stderr)
            continue
        if result.validated is None:
            errors = sum(1 for d in result.diagnostics if d.severity is Severity.ERROR)
            print(f"{result.name}: invalid ({_count(errors, 'error')})", file=sys.stderr)
            continue
        if explain:
            for rs in result.validated.services:
                print("\n".join(explain_service(rs)))
        summary = f"{result.name}: valid ({_count(len(result.validated.services), 'service')}"
        if result.diagnostics:
            summary += f", {_count(len(result.diagnostics), 'warning')}"
        print(summary + ")", file=sys.stderr)
    failed = sum(1 for r in results if not r.ok)
    raise typer.Exit(1 if failed else 0)


@app.command()
def inspect(
    model: Annotated[
        Path,
        typer.Argument(
            help="a GGUF file (any shard of a split model), or a Hugging Face model "
            "directory (config.json and safetensors)",
            metavar="MODEL.gguf | DIR",
        ),
    ],
    output: Annotated[
        Path | None, typer.Option("-o", "--output", help="write the profile here, not stdout")
    ] = None,
    header_only: Annotated[
        bool,
        typer.Option(
            "--header-only",
            help="each shard file holds only the first bytes of the real one (a range "
            "request), enough for its header; GGUF only",
        ),
    ] = False,
) -> None:
    """Write a model profile from GGUF headers, or from a Hugging Face directory's
    config.json and safetensors headers (all shards; tensor data is not read)."""
    from layoutgen.errors import LayoutgenError
    from layoutgen.models.profile import dump_profile

    try:
        if model.is_dir():
            from layoutgen.models.hf_checkpoint import inspect_dir

            if header_only:
                print(
                    f"error: {model}: --header-only is for GGUF shards; a Hugging Face "
                    "directory's safetensors headers are read from the files as they are",
                    file=sys.stderr,
                )
                raise typer.Exit(1)
            profile = inspect_dir(model)
        else:
            from layoutgen.models.inventory import inspect_model

            profile = inspect_model(model, header_only=header_only)
        text = dump_profile(profile)
        if output is None:
            sys.stdout.write(text)
        else:
            _write_text(output, text)
    except LayoutgenError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise typer.Exit(1) from None
    except OSError as exc:
        print(f"error: {output}: cannot write: {exc.strerror}", file=sys.stderr)
        raise typer.Exit(1) from None
    raise typer.Exit(0)


@app.command()
def plan(
    spec: Annotated[Path, typer.Argument(help="a spec file", metavar="SPEC")],
    as_json: Annotated[bool, typer.Option("--json", help="print the plan JSON (schema 1)")] = False,
    depth: Annotated[
        int,
        typer.Option(
            "--depth",
            min=0,
            max=10_000_000,
            help="context tokens the predicted decode speed is for (default 0: llama-bench "
            "tg128's); the plan then gives depth 0's too",
        ),
    ] = 0,
    allow_outside: AllowOutside = False,
) -> None:
    """Show the budget: per device and service, weights/KV/compute/overhead, expert layers."""
    _allow_outside(allow_outside)
    from layoutgen.errors import Severity
    from layoutgen.render.validate import validate_files
    from layoutgen.solve.plan import to_json

    (result,) = validate_files([(spec, str(spec))])
    if result.validated is None:
        for diag in result.diagnostics:
            print(diag.gcc(), file=sys.stderr)
        raise typer.Exit(1)
    for diag in result.diagnostics:
        print(diag.gcc(), file=sys.stderr)
    planned = result.validated.plan
    if depth:
        from layoutgen.solve.plan_speed import plan_at_depth

        planned = plan_at_depth(planned, depth)
    if as_json:
        # the JSON carries every warning printed above: validate's and the plan's
        warned = [d.message for d in result.diagnostics if d.severity is Severity.WARNING]
        print(to_json(planned, warned), end="")
    else:
        from layoutgen.render.plantext import plan_text

        print(plan_text(result.validated, planned), end="")


@app.command()
def render(
    specs: Annotated[
        list[Path] | None,
        typer.Argument(help="spec files (default: layouts/*.yaml)", metavar="SPEC"),
    ] = None,
    out: Annotated[Path, typer.Option("-o", "--out", help="output root")] = Path("out"),
    check: Annotated[
        bool, typer.Option("--check", help="write nothing; show the diff; exit 2 if stale")
    ] = False,
    templates: Annotated[
        Path | None, typer.Option("--templates", help="use templates from this directory")
    ] = None,
    forget: Annotated[
        list[str] | None,
        typer.Option(
            "--forget",
            help="remove the files this spec generated (it was deleted or renamed)",
            metavar="SPEC",
        ),
    ] = None,
    lock_timeout: Annotated[
        float,
        typer.Option("--lock-timeout", help="seconds to wait for another render of the same out/"),
    ] = 60.0,
    probe: Annotated[
        bool,
        typer.Option(
            "--probe",
            help="on the target host: refuse a spec whose GPUs are not this host's (NVML)",
        ),
    ] = False,
    allow_outside: AllowOutside = False,
) -> None:
    """Render podman scripts, quadlet and systemd units, layout.md and plan.json per host.

    Each out/<host>/ is replaced whole (a killed render leaves the old tree or
    the new one); files layoutgen did not generate, and files of other specs,
    are kept.
    """
    from layoutgen.errors import LayoutgenError
    from layoutgen.render.artifacts import render as render_files
    from layoutgen.render.hostcheck import name_per_spec
    from layoutgen.render.validate import validate_files

    _allow_outside(allow_outside)

    if not specs and not forget:
        specs = sorted(Path("layouts").glob("*.yaml"))
        if not specs:
            print("error: no SPEC given and no layouts/*.yaml here", file=sys.stderr)
            raise typer.Exit(2)
    specs = specs or []
    # A spec is named (in headers, plan.json and the manifest) by its path from the
    # out/ root's parent, not as typed: the same spec renders the same bytes from
    # any working directory.
    typed = {spec_label(spec, out): str(spec) for spec in specs}
    results = validate_files([(spec, spec_label(spec, out)) for spec in specs])
    forget = [spec_label(Path(f), out) for f in forget or []]
    rendered: dict[str, dict[str, str]] = {}
    failed = False
    for result in results:
        for diag in result.diagnostics:
            # located in the file as typed, so editors and CI annotations find it
            shown = dataclasses.replace(diag, file=typed.get(diag.file, diag.file))
            print(shown.gcc(), file=sys.stderr)
        if result.validated is None:
            failed = True
            continue
        if probe and not _gpus_are_here(result.validated, typed.get(result.name, result.name)):
            failed = True
            continue
        try:
            rendered[result.name] = render_files(result.validated, result.name, templates)
        except LayoutgenError as exc:
            print(f"{typed.get(result.name, result.name)}: error: {exc}", file=sys.stderr)
            failed = True
    hosts = {r.name: r.validated.spec.host.name for r in results if r.validated is not None}
    try:
        rendered = name_per_spec(rendered, hosts)
    except LayoutgenError as exc:
        print(f"error: {exc}", file=sys.stderr)
        failed = True
    owners: dict[str, str] = {}
    for name, files in rendered.items():
        for path in files:
            if path in owners:
                print(
                    f"{name}: error: {out / path} is also rendered by {owners[path]}; give "
                    "the two specs different host names or service names",
                    file=sys.stderr,
                )
                failed = True
            owners.setdefault(path, name)
    if failed:
        raise typer.Exit(1)
    what = " ".join(["layoutgen render", *(str(s) for s in specs)])
    raise typer.Exit(_write_out(out, rendered, check, forget or [], lock_timeout, what))


def _gpus_are_here(validated: Validated, shown: str) -> bool:
    """``render --probe``: the spec's local GPUs are this host's, as doctor checks
    them (by UUID, else index; memory; name); errors refuse the spec, warnings print."""
    from layoutgen.errors import LayoutgenError, Severity
    from layoutgen.live import findings, nvml
    from layoutgen.live.doctor import LiveHost
    from layoutgen.live.ports import Sockets

    try:
        report = nvml.read()
    except LayoutgenError as exc:
        print(f"{shown}: error: --probe: {exc}", file=sys.stderr)
        return False
    live = LiveHost(report, mem_available=None, memlock=None, sockets=Sockets(()), podman=None)
    found = findings.diagnose(validated, live, only_gpus=True)
    for f in found:
        print(dataclasses.replace(f.diagnostic, file=shown).gcc(), file=sys.stderr)
    return not any(f.diagnostic.severity is Severity.ERROR for f in found)


def spec_label(spec: Path, out: Path) -> str:
    """``spec`` as rendered files name it: relative to the parent of ``out`` (the
    repository root in the usual layout: out/ beside layouts/), else absolute."""
    path = spec.absolute()
    base = out.absolute().parent
    try:
        return _normal(path).relative_to(_normal(base)).as_posix()
    except ValueError:
        return _normal(path).as_posix()


def _normal(path: Path) -> Path:
    """``path`` with ``.`` and ``..`` folded, symlinks kept (what the user wrote)."""
    import os

    return Path(os.path.normpath(path))


def _write_out(
    out: Path,
    rendered: dict[str, dict[str, str]],
    check: bool,
    forget: list[str],
    lock_timeout: float,
    what: str,
) -> int:
    """render's output half: write out/ (or compare it, for --check); the exit code."""
    from layoutgen.errors import LayoutgenError
    from layoutgen.inputs import source
    from layoutgen.render import outdir

    why = source.outside(
        out,
        source.boundary(out),
        str(out),
        "writes its output",
        "point --out at a directory inside the repository",
    )
    if why is not None:
        print(f"error: {why}", file=sys.stderr)
        return 1
    try:
        if check:
            outcome = outdir.check(out, rendered, forget=forget, lock_timeout=lock_timeout)
        else:
            outcome = outdir.apply(
                out, rendered, forget=forget, lock_timeout=lock_timeout, what=what
            )
    except outdir.OwnershipError as exc:
        for message in exc.messages:
            print(message, file=sys.stderr)
        return 1
    except LayoutgenError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        verb = "read" if check else "write"
        print(f"error: cannot {verb} {exc.filename or out}: {exc.strerror}", file=sys.stderr)
        return 1
    changes = outcome.changes
    if check:
        print(outdir.unified_diff(out, changes), end="")
    for finding in outcome.findings:
        if finding.kind != "manifest" or not changes:
            print(finding.message(out, check), file=sys.stderr)
    if not check:
        total = sum(len(files) for files in rendered.values())
        removed = sum(1 for c in changes if c.new is None)
        print(
            f"{out}: {len(changes) - removed} written, {total - len(changes) + removed} "
            f"unchanged, {removed} removed",
            file=sys.stderr,
        )
        return 0
    kinds = [f.kind for f in outcome.findings]
    lines = [f"{len(changes)} file(s) would change"] if changes else []
    if kinds.count("leftover"):
        lines.append(f"{_count(kinds.count('leftover'), 'leftover')} of interrupted renders")
    if kinds.count("stray"):
        lines.append(f"{_count(kinds.count('stray'), 'stray file')} in no manifest")
    if not lines and "manifest" in kinds:
        lines.append("the manifest would change")
    print("\n".join(lines) if lines else "up to date", file=sys.stderr)
    return 2 if lines else 0


@app.command()
def diff(
    old: Annotated[str, typer.Argument(help="a spec path or REV:path", metavar="OLD")],
    new: Annotated[str, typer.Argument(help="a spec path or REV:path", metavar="NEW")],
    fmt: Annotated[
        DiffFormat, typer.Option("--format", help="text: summary and diffs; json: the summary")
    ] = DiffFormat.text,
    files_mode: Annotated[
        str,
        typer.Option(
            "--files",
            help="file diffs after the summary: summary (plan.json by key path), units "
            "(only podman/, quadlet/, systemd/), full, none",
        ),
    ] = "summary",
    allow_outside: AllowOutside = False,
) -> None:
    """Compare two versions of a layout: semantic summary, then file diffs. Exit 2 if changed."""
    _allow_outside(allow_outside)
    import json

    from layoutgen.errors import InvalidInput, LayoutgenError
    from layoutgen.render import diff as d

    try:
        a, b = d.load(old), d.load(new)
    except InvalidInput as exc:
        for diag in exc.diagnostics:
            print(diag.gcc(), file=sys.stderr)
        raise typer.Exit(1) from None
    except LayoutgenError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise typer.Exit(1) from None
    # each side under its own name as a render would write it (REV:path -> path): the
    # same spec at two revisions compares equal, two specs keep their own headers
    a, b = d.renamed(a, d.display_name(old)), d.renamed(b, d.display_name(new))
    if files_mode not in d.FILE_MODES:
        print(
            f"error: --files {files_mode}: write one of {', '.join(d.FILE_MODES)}", file=sys.stderr
        )
        raise typer.Exit(2)
    summary = d.summarise(a, b)
    compared = d.compare_files(a, b)
    is_changed = d.changed(summary) or bool(compared.changed)
    if fmt == "json":
        doc = {
            "schema": 1,
            "old": old,
            "new": new,
            "changed": is_changed,
            "changes": summary,
            "files": sorted(compared.changed),
        }
        print(json.dumps(doc, indent=2, sort_keys=True))
    else:
        files = d.file_diff(a, b, files_mode)
        for change in summary:
            print(change["text"])
        if files:
            print("" if not summary else "\n", end="")
            print(files, end="")
        if not is_changed:
            print("no changes", file=sys.stderr)
    raise typer.Exit(2 if is_changed else 0)


@app.command()
def calibrate(
    log: Annotated[
        Path,
        typer.Argument(help="a llama.cpp or ik_llama.cpp start-up or timing log", metavar="LOG"),
    ],
    spec: Annotated[Path, typer.Argument(help="the spec to write into", metavar="SPEC")],
    service: Annotated[
        str | None,
        typer.Option("--service", help="the service the log is from (if the spec has several)"),
    ] = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="write the sizes even if the log shows another model, runtime or GPUs",
        ),
    ] = False,
    allow_outside: AllowOutside = False,
) -> None:
    """Write the buffer sizes a start-up log printed into the spec's 'measured' block,
    and fit host.efficiency to the decode speeds a timing log printed."""
    _allow_outside(allow_outside)
    from layoutgen.calibrate import command as cal
    from layoutgen.calibrate import speed
    from layoutgen.errors import InvalidInput, LayoutgenError

    try:
        try:
            timed = bool(speed.read_timings(speed._read_log(log)))
        except LayoutgenError:  # unreadable: the start-up reader below says why
            timed = False
        if timed:
            fitted = speed.fit_efficiency(log, spec, service)
            print(
                f"{spec}: host.{fitted.key}: {fitted.efficiency:g}, fitted to "
                f"{_count(len(fitted.rows), 'decode timing')} of {fitted.service} in {log} ("
                + ", ".join(f"{m:.2f} measured, {p:.2f} predicted" for _w, p, m in fitted.rows[:3])
                + (" ..." if len(fitted.rows) > 3 else "")
                + " tok/s)",
                file=sys.stderr,
            )
        try:
            done = cal.calibrate(log, spec, service, force=force)
        except InvalidInput as exc:
            if timed and all("no buffer sizes found" in d.message for d in exc.diagnostics):
                return  # a timing log alone: the efficiency was the job
            raise
    except InvalidInput as exc:
        for diag in exc.diagnostics:
            print(diag.gcc(), file=sys.stderr)
        raise typer.Exit(1) from None
    except LayoutgenError as exc:
        print(f"{spec}: error: {exc}", file=sys.stderr)
        raise typer.Exit(1) from None
    if done.overridden:
        print(
            f"{log}: warning: --force: calibrating service {done.service} although "
            + "; ".join(done.overridden),
            file=sys.stderr,
        )
    print(
        f"{spec}: services.{done.service}.measured: {_count(len(done.entries), 'buffer')} "
        f"from {log}",
        file=sys.stderr,
    )
    for buf, fields in done.entries.items():
        sizes = ", ".join(f"{field} {size}" for field, size in fields.items())
        print(f"  {buf}: {sizes}", file=sys.stderr)
    # The sizes stay written even when the spec no longer validates: they are
    # what the runtime allocated, and the failure is what the user must see.
    from layoutgen.render.validate import validate_files

    (result,) = validate_files([(spec, str(spec))])
    for diag in result.diagnostics:
        print(diag.gcc(), file=sys.stderr)
    if result.validated is None:
        print(
            f"{spec}: error: the measured sizes are written, but the spec does not validate "
            "with them (see above); fix the layout, or undo the change with your version control",
            file=sys.stderr,
        )
        raise typer.Exit(1)
    for buf in cal.unplanned(result.validated.plan, done.service, done.entries):
        print(
            f"{spec}: warning: services.{done.service}: the plan has no buffer {buf}, so its "
            "measured sizes are not used; is the log from another layout of this service?",
            file=sys.stderr,
        )
    raise typer.Exit(0)


@app.command("import")
def import_(
    source: Annotated[
        str | None,
        typer.Argument(
            help="a file with a llama-server or vllm command line, a podman run line, a "
            "quadlet .container, a systemd .service or the JSON 'podman inspect' prints; - "
            "for stdin; a process id (what it runs, from /proc); a container's name "
            "(podman inspect)",
            metavar="SOURCE",
        ),
    ] = None,
    shell: Annotated[
        Path | None,
        typer.Option(
            "--shell",
            help="RUN this script, with podman, docker, llama-server and vllm replaced on "
            "PATH by recorders (nothing starts; everything else in it runs), and import "
            "the command it would have started, after every shell expansion",
            metavar="FILE",
        ),
    ] = None,
    log: Annotated[
        Path | None,
        typer.Option(
            "--log",
            help="the server's start-up log: its build line becomes the runtime's version:",
            metavar="FILE",
        ),
    ] = None,
    spec: Annotated[
        Path | None,
        typer.Option(
            "--spec", help="name GPUs by this spec's host.gpus (CDI index or UUID, CUDA order)"
        ),
    ] = None,
    name: Annotated[str | None, typer.Option("--name", help="the service's name")] = None,
    fmt: Annotated[
        Format, typer.Option("--format", help="gcc: path:line:col lines; github: annotations")
    ] = Format.gcc,
) -> None:
    """Write the spec service that reproduces a working command line (YAML on stdout).

    Text that still holds shell expansions ($VAR, $(...)) is refused: import the
    running container or process, or the script with --shell (which runs it)."""
    from layoutgen.errors import LayoutgenError
    from layoutgen.importer import SpecGpu, import_text, sources, spec_gpus

    def fail(exc: LayoutgenError) -> typer.Exit:
        for diag in getattr(exc, "diagnostics", []) or []:
            print(diag.github() if fmt is Format.github else diag.gcc(), file=sys.stderr)
        if not getattr(exc, "diagnostics", None):
            print(f"error: {exc}", file=sys.stderr)
        return typer.Exit(1)

    try:
        gpus: list[SpecGpu] | None = None if spec is None else spec_gpus(spec)
        if shell is not None:
            print(f"note: running {shell} with recorders in place of podman, docker, "
                  "llama-server and vllm", file=sys.stderr)  # fmt: skip
        given = sources.read(source, shell=shell, stdin=sys.stdin.buffer)
        logged = None
        if log is not None:
            logged = (sources.read_log(str(log)), str(log))
        imported = import_text(
            given.text, given.label, gpus=gpus, name=name, log=logged, made=given.made
        )
    except LayoutgenError as exc:
        raise fail(exc) from None
    for diag in imported.warnings:
        print(diag.github() if fmt is Format.github else diag.gcc(), file=sys.stderr)
    sys.stdout.write(imported.yaml)


@app.command()
def schema(
    profile: Annotated[
        bool, typer.Option("--profile", help="the model profile's schema instead of the spec's")
    ] = False,
) -> None:
    """Print the JSON Schema of the spec, or of a model profile (for editors and
    yaml-language-server, e.g. for a profile kept outside this repository)."""
    import json

    if profile:
        from layoutgen.models.profile import json_schema as profile_schema

        print(json.dumps(profile_schema(), indent=2, sort_keys=True))
        return
    from layoutgen.spec.schema import json_schema

    print(json.dumps(json_schema(), indent=2, sort_keys=True))


@app.command()
def probe(
    output: Annotated[
        Path | None, typer.Option("-o", "--output", help="write the host block here, not stdout")
    ] = None,
) -> None:
    """Print this machine's host: block for a spec (CPU, RAM, NVIDIA GPUs through NVML,
    CDI names, podman), each value with a comment naming its source."""
    from layoutgen.errors import LayoutgenError
    from layoutgen.live import nvml
    from layoutgen.live.hostfacts import read_host
    from layoutgen.live.probe import probe_text

    try:
        report = nvml.read()
    except LayoutgenError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise typer.Exit(1) from None
    text = probe_text(read_host(), report)
    if not report.available:
        print(f"probe: no NVIDIA GPU read ({report.reason}): a CPU-only host", file=sys.stderr)
    if output is None:
        sys.stdout.write(text)
        return
    try:
        _write_text(output, text)
    except OSError as exc:
        print(f"error: {output}: cannot write: {exc.strerror}", file=sys.stderr)
        raise typer.Exit(1) from None


class DoctorFormat(enum.StrEnum):
    text = "text"
    json = "json"
    github = "github"


@app.command()
def doctor(
    spec: Annotated[Path, typer.Argument(help="the spec this host runs", metavar="SPEC")],
    fmt: Annotated[
        DoctorFormat,
        typer.Option("--format", help="text: path:line:col lines; json; github: annotations"),
    ] = DoctorFormat.text,
    out: Annotated[
        Path, typer.Option("-o", "--out", help="the output root render wrote (for stale units)")
    ] = Path("out"),
    allow_outside: AllowOutside = False,
) -> None:
    """Compare a spec and its plan with this host: GPUs (NVML), foreign VRAM users, running
    services' VRAM, RAM and memlock, ports, model files, installed units, podman, and the
    build each runtime's image or binary reports against its 'version:'.
    Exit 0 healthy, 1 findings (or an invalid spec), 2 usage."""
    _allow_outside(allow_outside)
    from layoutgen.errors import LayoutgenError
    from layoutgen.live import doctor as live_doctor
    from layoutgen.live import findings as live_findings
    from layoutgen.live import nvml
    from layoutgen.render.validate import validate_files

    (result,) = validate_files([(spec, str(spec))])
    if result.validated is None:
        # a spec refused for naming no build still learns which build this host runs
        found = live_doctor.builds_of_refused(spec, str(spec))
        for diag in [*result.diagnostics, *found]:
            print(diag.github() if fmt is DoctorFormat.github else diag.gcc(), file=sys.stderr)
        raise typer.Exit(1)
    try:
        report = nvml.read()
    except LayoutgenError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise typer.Exit(1) from None
    live = live_doctor.gather(result.validated, report, out=out)
    findings = live_findings.diagnose(result.validated, live)
    sys.stdout.write(live_findings.format_findings(findings, fmt.value))
    if not report.available:
        print(f"doctor: no NVIDIA GPU read ({report.reason})", file=sys.stderr)
    print(f"{spec}: {_count(len(findings), 'finding')}", file=sys.stderr)
    raise typer.Exit(live_findings.exit_code(findings))


# ------------------------------------------------ apply / status / rollback (issue 34)


class StatusFormat(enum.StrEnum):
    text = "text"
    json = "json"


@app.command()
def apply(
    spec: Annotated[
        Path | None,
        typer.Argument(help="the spec this host runs (none with --pull)", metavar="SPEC"),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="render the generation, show what changes, stop")
    ] = False,
    pull: Annotated[
        bool,
        typer.Option(
            "--pull",
            help="(the git-ops pull service) fetch the branch the running generation's "
            "host.gitops names and apply its spec, if a fast-forward of the deployed commit",
        ),
    ] = False,
    user: Annotated[
        bool, typer.Option("--user", help="with --pull: the rootless units' generations")
    ] = False,
    health_timeout: Annotated[
        float, typer.Option("--health-timeout", help="seconds a service has to become healthy")
    ] = 600.0,
    release_timeout: Annotated[
        float,
        typer.Option("--release-timeout", help="seconds a stopped service has to free its VRAM"),
    ] = 60.0,
    allow_outside: AllowOutside = False,
) -> None:
    """On the target host: render a new generation, install its units, stop what changes
    (waiting for its GPU memory), start in order gated on health, check as doctor does,
    roll back on failure. Exit 0 applied, 1 refused or rolled back, 3 rollback failed too."""
    _allow_outside(allow_outside)
    from layoutgen.deploy import commands
    from layoutgen.deploy.apply import Bounds

    if (spec is None) != pull:
        print("error: give SPEC, or --pull without one", file=sys.stderr)
        raise typer.Exit(2)
    bounds = Bounds(health=health_timeout, release=release_timeout)
    scope = "user" if user else "system"
    raise typer.Exit(
        commands.apply(spec, dry_run=dry_run, say=_say, bounds=bounds, pull=pull, scope=scope)
    )


@app.command()
def status(
    spec: Annotated[
        Path | None, typer.Argument(help="the spec (default: the running generation)")
    ] = None,
    fmt: Annotated[StatusFormat, typer.Option("--format", help="text or json")] = (
        StatusFormat.text
    ),
    user: Annotated[
        bool, typer.Option("--user", help="rootless units (without SPEC; default: rootful)")
    ] = False,
    allow_outside: AllowOutside = False,
) -> None:
    """One row per service: unit state, health, port and bind, VRAM used against planned,
    generation. Exit 0 all started services healthy, 1 otherwise."""
    _allow_outside(allow_outside)
    from layoutgen.deploy import status as deploy_status
    from layoutgen.errors import LayoutgenError

    try:
        rows, notes, code = deploy_status.status(spec, "user" if user else None)
    except LayoutgenError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise typer.Exit(1) from None
    if fmt is StatusFormat.json:
        sys.stdout.write(deploy_status.as_json(rows, notes))
    else:
        sys.stdout.write(deploy_status.text(rows))
        for note in notes:
            print(note, file=sys.stderr)
    raise typer.Exit(code)


@app.command()
def rollback(
    generation: Annotated[
        int | None, typer.Argument(help="the generation (default: the one before)")
    ] = None,
    list_: Annotated[bool, typer.Option("--list", help="list the generations")] = False,
    user: Annotated[bool, typer.Option("--user", help="rootless units")] = False,
    health_timeout: Annotated[float, typer.Option("--health-timeout")] = 600.0,
    release_timeout: Annotated[float, typer.Option("--release-timeout")] = 60.0,
) -> None:
    """Switch back to an earlier generation (as apply switches), or list them.
    Exit 0 switched, 1 failed (the current generation runs again)."""
    from layoutgen.deploy import commands
    from layoutgen.deploy.apply import Bounds

    scope = "user" if user else "system"
    if list_:
        lines = commands.generations(scope)
        print("\n".join(lines) if lines else "no generations", file=sys.stdout)
        raise typer.Exit(0)
    bounds = Bounds(health=health_timeout, release=release_timeout)
    raise typer.Exit(commands.rollback(generation, scope=scope, say=_say, bounds=bounds))


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _write_text(path: Path, text: str) -> None:
    """``-o FILE``: never through a symbolic link (issue 31: in a pull request's
    checkout, ``layouts/models/x.yaml`` may be a link to any file CI can write)."""
    import errno

    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(path, flags, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            exc.strerror = "a symbolic link; layoutgen does not write through links: remove it"
        raise
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def main() -> None:
    """The console script: the app, without the costs of a long-lived process.

    A run lasts a fraction of a second, so the cycle collector is off (it would
    walk the thousands of objects imports and the plan create, again and again)
    and the interpreter is left with ``os._exit`` once the output is flushed,
    instead of tearing every module down (~25 ms of each ``validate``; mypy
    leaves the same way).  Files are written and closed by the commands
    themselves, and layoutgen registers no atexit handler.
    """
    gc.disable()
    try:
        app()
        code = 0
    except SystemExit as exc:
        code = _status(exc.code)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:  # `layoutgen plan | head`: the reader left
        pass
    os._exit(code)


def _status(code: object) -> int:
    """What ``sys.exit(code)`` would make the exit status (a message: 1, printed)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1
