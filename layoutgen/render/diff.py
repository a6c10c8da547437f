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


def summarise(old: Version, new: Version) -> list[dict[str, Any]]:
    """Semantic changes, each {"kind", "text", ...}, in reviewing order
    (:mod:`layoutgen.render.review`); notes (a spec change with no effect, the check
    that every byte is accounted for) have kinds in ``review.NOTES``."""
    from layoutgen.render import review

    files = compare_files(old, new)
    out = review.summarise(old.validated, new.validated, same_files=not files.changed)
    if files.renamed_only and not files.changed:
        same = "the same layout" if not out else "the same plan and files"
        out.append(
            {
                "kind": "note",
                "text": f"no change: {same} as {files.old_name}, named "
                f"{files.new_name} (only the generated headers name it)",
            }
        )
    elif files.renamed_only:
        out.append(
            {
                "kind": "note",
                "text": f"{len(files.renamed_only)} file(s) differ only in the spec's name in "
                f"their generated headers ({files.old_name} -> {files.new_name}): not shown",
            }
        )
    return out


def changed(summary: list[dict[str, Any]]) -> bool:
    from layoutgen.render.review import NOTES

    return any(c["kind"] not in NOTES for c in summary)


@dataclass(frozen=True)
class FileChanges:
    old_name: str
    new_name: str
    #: path -> (old text or None, new text or None), the old side under the new name
    changed: dict[str, tuple[str | None, str | None]]
    renamed_only: tuple[str, ...]  #: files that differ only in the spec's name


def compare_files(old: Version, new: Version) -> FileChanges:
    """The rendered files that differ once both sides name the spec alike: a header
    that names another path is not a change."""
    out: dict[str, tuple[str | None, str | None]] = {}
    renamed_only = []
    for path in sorted(set(old.files) | set(new.files)):
        a, b = old.files.get(path), new.files.get(path)
        if a == b:
            continue
        same = a.replace(old.name, new.name) if a is not None else None
        if same == b:
            renamed_only.append(path)
            continue
        out[path] = (same, b)
    return FileChanges(old.name, new.name, out, tuple(renamed_only))


#: --files: summary (plan.json by key path, the rest as diffs), units (only the
#: service files: podman/, quadlet/, systemd/), full (every file as a diff), none
FILE_MODES = ("summary", "units", "full", "none")
_UNIT_DIRS = ("podman", "quadlet", "systemd")


def file_diff(old: Version, new: Version, mode: str = "summary") -> str:
    """The file diffs a reviewer reads after the summary."""
    if mode == "none":
        return ""
    out: list[str] = []
    for path, (a, b) in compare_files(old, new).changed.items():
        parts = PurePosixPath(path).parts
        if mode == "units" and not (len(parts) > 1 and parts[-2] in _UNIT_DIRS):
            continue
        if mode == "summary" and parts[-1] == "plan.json" and a is not None and b is not None:
            out += [f"--- a/{path}\n", f"+++ b/{path}\n"]
            out += [line + "\n" for line in json_changes(a, b)]
            continue
        out += difflib.unified_diff(
            (a or "").splitlines(keepends=True),
            (b or "").splitlines(keepends=True),
            fromfile=f"a/{path}" if a is not None else "/dev/null",
            tofile=f"b/{path}" if b is not None else "/dev/null",
        )
    return "".join(out)


def json_changes(a: str, b: str) -> list[str]:
    """A JSON file's changes by key path, one line each: ``path: old -> new``; many
    keys of one mapping changed alike (a layer's experts to CUDA_Host) in one line."""
    import json

    try:
        da, db = json.loads(a), json.loads(b)
    except ValueError:
        return ["(not JSON: compare the files)"]
    leaves = _leaves(da, db, ())
    alike: dict[tuple[tuple[str, ...], str, str], list[str]] = {}
    for path, x, y in leaves:
        alike.setdefault((path[:-1], _value_or(x), _value_or(y)), []).append(path[-1])
    lines = []
    done = set()
    for path, x, y in leaves:
        key = (path[:-1], _value_or(x), _value_or(y))
        if len(alike[key]) > 3:
            if key not in done:
                done.add(key)
                vx, vy = key[1], key[2]
                what = (
                    f"added {vy}"
                    if x is _ABSENT
                    else f"removed (was {vx})"
                    if y is _ABSENT
                    else f"{vx} -> {vy}"
                )
                keys = alike[key]
                lines.append(f"{_dotted(path[:-1])}: {len(keys)} keys {what}: {', '.join(keys)}")
            continue
        if x is _ABSENT:
            lines.append(f"{_dotted(path)}: added {_value(y)}")
        elif y is _ABSENT:
            lines.append(f"{_dotted(path)}: removed (was {_value(x)})")
        elif _strings(x) and _strings(y):
            lines.append(f"{_dotted(path)}: {_tokens(x, y)}")
        else:
            lines.append(f"{_dotted(path)}: {_value(x)} -> {_value(y)}")
    return lines


_ABSENT = object()


def _dotted(path: tuple[str, ...]) -> str:
    return ".".join(path).replace(".[", "[")


def _value_or(v: Any) -> str:
    return "-" if v is _ABSENT else _value(v)


def _strings(v: Any) -> bool:
    return isinstance(v, list) and bool(v) and all(isinstance(x, str) for x in v)


def _leaves(a: Any, b: Any, path: tuple[str, ...]) -> list[tuple[tuple[str, ...], Any, Any]]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            out += _leaves(a.get(k, _ABSENT), b.get(k, _ABSENT), (*path, str(k)))
        return out
    if (
        isinstance(a, list)
        and isinstance(b, list)
        and len(a) == len(b)
        and any(isinstance(x, dict | list) for x in a + b)
    ):
        return [
            t
            for i, (x, y) in enumerate(zip(a, b, strict=True))
            for t in _leaves(x, y, (*path, f"[{i}]"))
        ]
    return [] if a == b else [(path, a, b)]


def _tokens(a: list[str], b: list[str]) -> str:
    """Two argument lists as what was taken out and put in, by position."""
    parts = []
    ops = difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes()
    for op, i1, i2, j1, j2 in ops:
        if op == "equal":
            continue
        at = f"at {i1}: " if len(ops) > 1 else ""
        out = " ".join(a[i1:i2])
        put = " ".join(b[j1:j2])
        if op == "replace":
            parts.append(f"{at}{out} -> {put}")
        elif op == "delete":
            parts.append(f"{at}-{out}")
        else:
            parts.append(f"{at}+{put}")
    return "; ".join(parts)


def _value(v: Any) -> str:
    if isinstance(v, bool) or v is None:
        return json_dumps(v)
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, list) and v and all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        return (
            f"[{format_layers(sorted(v), sep='-', join=', ')}]" if v == sorted(set(v)) else str(v)
        )
    text = json_dumps(v)
    return text if len(text) <= 200 else text[:197] + "..."


def json_dumps(v: Any) -> str:
    import json

    return json.dumps(v, sort_keys=True)


def display_name(arg: str) -> str:
    """``HEAD~1:layouts/x.yaml`` -> ``layouts/x.yaml``: how rendered files name the spec."""
    return arg.partition(":")[2] if is_git_ref(arg) else arg


def renamed(version: Version, name: str) -> Version:
    """Rendered files name their spec (headers, plan.json): compare both under one name."""
    if version.name == name:
        return version
    files = {p: t.replace(version.name, name) for p, t in version.files.items()}
    return Version(version.name, version.validated, files)
