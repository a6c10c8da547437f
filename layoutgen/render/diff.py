"""What a layout change means: a semantic summary a reviewer reads first, then file diffs.

Two versions of a spec (files, or ``REV:path`` git references resolved with
the model profiles they name *at that revision*, so a profile change shows
its consequences even when the spec did not change) are validated, solved
and rendered in memory; :func:`summarise` compares the results.
"""

from __future__ import annotations

import difflib
import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from layoutgen.errors import LayoutgenError
from layoutgen.models.tensors import format_layers
from layoutgen.render.validate import Validated
from layoutgen.solve.plan import Plan, ServicePlan


class GitError(LayoutgenError):
    """A ``REV:path`` that git cannot resolve."""


@dataclass(frozen=True)
class Version:
    name: str  # as given: a path or REV:path
    validated: Validated
    files: dict[str, str]


def _git(cwd: Path, *args: str) -> str:
    try:
        proc = subprocess.run(
            ["git", *args], cwd=cwd, capture_output=True, text=True, check=False, errors="replace"
        )
    except OSError as exc:  # no git installed
        raise GitError(f"git {' '.join(args)}: {exc.strerror}") from None
    if proc.returncode != 0:
        raise GitError(f"git {' '.join(args)}: {proc.stderr.strip() or 'failed'}")
    return proc.stdout


def is_git_ref(arg: str) -> bool:
    rev, sep, path = arg.partition(":")
    return bool(sep) and bool(rev) and bool(path) and not Path(arg).exists()


def _blob(top: Path, rev: str, path: str) -> str:
    """The file ``path`` (relative to the repository's top) at ``rev``: ``git cat-file
    blob --end-of-options REV:path`` (REV was checked not to start with ``-`` too)."""
    return _git(top, "cat-file", "blob", "--end-of-options", f"{rev}:{path}")


def _inside(rel: str) -> bool:
    return not (rel == ".." or rel.startswith("../") or PurePosixPath(rel).is_absolute())


def materialise(arg: str, into: Path) -> Path:
    """Write ``REV:path`` and the profiles it names (at REV) under ``into``; return the spec.

    Issue 31: in CI the arguments may be built from a pull request's file names, so
    REV may not start with ``-`` (git would read an option: ``--output=FILE`` wrote a
    file), and ``path`` must lie inside the repository.
    """
    from layoutgen.errors import InvalidInput
    from layoutgen.inputs import source

    rev, _, path = arg.partition(":")
    if rev.startswith("-"):
        raise GitError(
            f"{arg}: a revision cannot start with '-' (git would read it as an option); "
            "give REV:path, e.g. origin/main:layouts/x.yaml"
        )
    cwd = Path.cwd()
    top = Path(_git(cwd, "rev-parse", "--show-toplevel").strip())
    rel = os.path.relpath(os.path.normpath(cwd.resolve() / path), top.resolve())
    rel = PurePosixPath(Path(rel).as_posix()).as_posix()
    if not _inside(rel) or rel == ".":
        raise GitError(
            f"{arg}: {path} is outside the repository ({top}); give REV:path with the path of "
            "a spec in the repository"
        )
    text = _blob(top, rev, rel)
    spec = into / rel
    spec.parent.mkdir(parents=True, exist_ok=True)
    spec.write_text(text)
    try:  # bounded like every spec read; validate reports what is wrong, located
        data = source.parse(text, arg).plain()
    except InvalidInput:
        data = None
    models = data.get("models", {}) if isinstance(data, dict) else {}
    for model in models.values() if isinstance(models, dict) else ():
        ref = model.get("profile") if isinstance(model, dict) else None
        if not isinstance(ref, str) or "\0" in ref:
            continue
        normal = os.path.normpath((PurePosixPath(rel).parent / ref).as_posix())
        if not _inside(normal):
            continue  # validate refuses it, located in the spec
        try:
            content = _blob(top, rev, normal)
        except GitError:
            continue  # validate reports the missing profile, located in the spec
        out = into / normal
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(content)
    return spec


def load(arg: str, workdir: Path | None = None) -> Version:
    """Validate, solve and render one side; raises InvalidInput/LayoutgenError."""
    from layoutgen.inputs import source
    from layoutgen.render.artifacts import render
    from layoutgen.render.validate import validate_document, validate_file

    if is_git_ref(arg):
        with tempfile.TemporaryDirectory() as tmp:
            spec = materialise(arg, Path(tmp))
            # the tree at REV is the repository: its files resolve inside it or nowhere
            doc = source.load(spec, arg, within=(Path(tmp).resolve(),))
            validated = validate_document(doc)
            return Version(arg, validated, render(validated, arg))
    validated = validate_file(Path(arg), arg)
    return Version(arg, validated, render(validated, arg))


def _expert_device(sp: ServicePlan) -> dict[int, str]:
    return {n: dev for dev, layers in sp.expert_layers.items() for n in layers}


def _mib(n: int) -> str:
    return f"{n / 2**20:,.0f} MiB"


def summarise(old: Version, new: Version) -> list[dict[str, Any]]:
    """Semantic changes, each {"kind", "text", ...}, in reviewing order."""
    a, b = old.validated, new.validated
    out: list[dict[str, Any]] = []

    def add(kind: str, text: str, **extra: Any) -> None:
        out.append({"kind": kind, "text": text, **extra})

    a_names, b_names = set(a.spec.services), set(b.spec.services)
    for n in sorted(b_names - a_names):
        add("service_added", f"service added: {n}", service=n)
    for n in sorted(a_names - b_names):
        add("service_removed", f"service removed: {n}", service=n)
    for n in sorted(a_names & b_names):
        _service(n, a, b, add)
    if a.plan.order != b.plan.order:
        add(
            "start_order",
            f"start order: {', '.join(a.plan.order)} -> {', '.join(b.plan.order)}",
            old=list(a.plan.order),
            new=list(b.plan.order),
        )
    _devices(a.plan, b.plan, add)
    for w in sorted(set(b.plan.warnings) - set(a.plan.warnings)):
        add("warning_added", f"new warning: {w}")
    for d in sorted({d.message for d in b.warnings} - {d.message for d in a.warnings}):
        add("warning_added", f"new warning: {d}")
    return out


def _service(n: str, a: Validated, b: Validated, add: Any) -> None:
    sa, sb = a.spec.services[n], b.spec.services[n]
    ra = next(r for r in a.services if r.name == n)
    rb = next(r for r in b.services if r.name == n)
    for key, va, vb in (
        ("model", sa.model, sb.model),
        ("ctx", sa.ctx, sb.ctx),
        ("parallel", ra.parallel, rb.parallel),
        ("cache_type_k", ra.cache_type_k, rb.cache_type_k),
        ("cache_type_v", ra.cache_type_v, rb.cache_type_v),
        ("gpus", list(ra.gpus), list(rb.gpus)),
        ("port", sa.port, sb.port),
        ("threads", ra.threads, rb.threads),
        ("capabilities", list(sa.capabilities), list(sb.capabilities)),
        ("api_key", _key(sa.api_key), _key(sb.api_key)),
        ("args", list(sa.args), list(sb.args)),
    ):
        if va != vb:
            add(
                "setting",
                f"{n}: {key} {_show(va)} -> {_show(vb)}",
                service=n,
                key=key,
                old=va,
                new=vb,
            )
    bind_a = "0.0.0.0" if sa.expose else "127.0.0.1"
    bind_b = "0.0.0.0" if sb.expose else "127.0.0.1"
    if bind_a != bind_b:
        note = " (leaves 127.0.0.1: reachable from the network)" if sb.expose else ""
        add("bind", f"{n}: bind {bind_a} -> {bind_b}{note}", service=n, old=bind_a, new=bind_b)
    if n in {s.name for s in a.plan.services} and n in {s.name for s in b.plan.services}:
        da, db = _expert_device(a.plan.service(n)), _expert_device(b.plan.service(n))
        moves: dict[tuple[str, str], list[int]] = {}
        for layer in sorted(set(da) | set(db)):
            pair = (da.get(layer, "-"), db.get(layer, "-"))
            if pair[0] != pair[1]:
                moves.setdefault(pair, []).append(layer)
        for (src, dst), layers in sorted(moves.items()):
            named = (
                ", ".join(f"blk.{x}" for x in layers)
                if len(layers) <= 6
                else (f"blk.{{{format_layers(layers)}}} ({len(layers)} layers)")
            )
            add(
                "experts_moved",
                f"{n}: experts {named} {src} -> {dst}",
                service=n,
                layers=layers,
                old=src,
                new=dst,
            )


def _key(key: Any) -> str:
    if key is None:
        return "none"
    return ", ".join(f"{k} {v}" for k, v in key.model_dump().items() if v is not None)


def _show(value: Any) -> str:
    return "[" + ", ".join(value) + "]" if isinstance(value, list) else str(value)


def _devices(a: Plan, b: Plan, add: Any) -> None:
    before = {d.id: d for d in a.devices}
    after = {d.id: d for d in b.devices}
    for gone in sorted(set(before) - set(after)):
        d = before[gone]
        add(
            "device_removed",
            f"{gone}: removed (was {_mib(d.capacity)}, {_mib(d.used)} used)",
            device=gone,
            capacity=d.capacity,
        )
    for new in sorted(set(after) - set(before)):
        d = after[new]
        add(
            "device_added",
            f"{new}: added ({_mib(d.capacity)}, reserve {_mib(d.reserve)}, {_mib(d.used)} used)",
            device=new,
            capacity=d.capacity,
        )
    for d in b.devices:
        old = before.get(d.id)
        if old is not None and (old.capacity, old.reserve) != (d.capacity, d.reserve):
            add(
                "device_resized",
                f"{d.id}: capacity {_mib(old.capacity)} -> {_mib(d.capacity)}, reserve "
                f"{_mib(old.reserve)} -> {_mib(d.reserve)}",
                device=d.id,
                capacity=[old.capacity, d.capacity],
                reserve=[old.reserve, d.reserve],
            )
        if old is None or (old.used, old.free) == (d.used, d.free):
            continue
        delta = d.used - old.used
        add(
            "device",
            f"{d.id}: used {_mib(old.used)} -> {_mib(d.used)} "
            f"({'+' if delta >= 0 else '-'}{_mib(abs(delta))}), free {_mib(old.free)} -> "
            f"{_mib(d.free)}",
            device=d.id,
            used=[old.used, d.used],
            free=[old.free, d.free],
        )


def file_diff(old: Version, new: Version) -> str:
    out: list[str] = []
    for path in sorted(set(old.files) | set(new.files)):
        a, b = old.files.get(path), new.files.get(path)
        if a == b:
            continue
        out += difflib.unified_diff(
            (a or "").splitlines(keepends=True),
            (b or "").splitlines(keepends=True),
            fromfile=f"a/{path}" if a is not None else "/dev/null",
            tofile=f"b/{path}" if b is not None else "/dev/null",
        )
    return "".join(out)


def display_name(arg: str) -> str:
    """``HEAD~1:layouts/x.yaml`` -> ``layouts/x.yaml``: how rendered files name the spec."""
    return arg.partition(":")[2] if is_git_ref(arg) else arg


def renamed(version: Version, name: str) -> Version:
    """Rendered files name their spec (headers, plan.json): compare both under one name."""
    if version.name == name:
        return version
    files = {p: t.replace(version.name, name) for p, t in version.files.items()}
    return Version(version.name, version.validated, files)
