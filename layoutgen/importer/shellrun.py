"""``layoutgen import --shell FILE``: run the user's script with recorders in place
of the programs it starts, and import the command it would have run.

Why run it: a script that builds its flags in a loop (seed 001's ``$OT_ARGS``)
only says what the server gets once a shell has run it.  The script RUNS, as
the user's own shell would run it, with ``podman``, ``docker``,
``llama-server`` and ``vllm`` (and ``python -m vllm``) found first on PATH as
recorders: each records its argv and environment and exits 0, so no container
or server starts.  Everything else in the script runs for real; a script that
calls one of those programs by an absolute path is refused before it runs,
since a recorder on PATH cannot stand in for it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from layoutgen.errors import Diagnostic, Severity
from layoutgen.importer.cmdline import UnreadableCommand
from layoutgen.importer.running import as_text, env_prefix

#: programs the recorders stand in for
RECORDED = ("podman", "docker", "llama-server", "vllm")
#: the seconds a script may run
TIMEOUT = 120
_BY_PATH = re.compile(
    r"(?:^|[\s;&|(`])((?:/[^\s;&|()`'\"]*)?/(?:podman|docker|llama-server|vllm))(?=[\s;&|)`]|$)",
    re.M,
)

_RECORDER = """#!/bin/sh
# layoutgen import --shell: records this call instead of running it
f="{dir}/call-$(date +%s%N)-$$"
printf '%s\\0' "$(basename "$0")" "$@" > "$f.argv"
env -0 > "$f.env" 2>/dev/null || env > "$f.env"
exit 0
"""
_PYTHON = """#!/bin/sh
# layoutgen import --shell: records 'python -m vllm ...', runs any other python
case "$1 $2" in
  "-m vllm"*)
    f="{dir}/call-$(date +%s%N)-$$"
    printf '%s\\0' "$(basename "$0")" "$@" > "$f.argv"
    env -0 > "$f.env" 2>/dev/null || env > "$f.env"
    exit 0;;
esac
exec {real} "$@"
"""


@dataclass(frozen=True)
class Call:
    argv: tuple[str, ...]
    env: dict[str, str]


def _fail(source: str, line: int, col: int, message: str) -> UnreadableCommand:
    return UnreadableCommand([Diagnostic(source, line, col, Severity.ERROR, message)])


def _check_paths(script: str, source: str) -> None:
    for m in _BY_PATH.finditer(script):
        if not m.group(1).startswith("/"):
            continue
        line = script.count("\n", 0, m.start(1)) + 1
        col = m.start(1) - (script.rfind("\n", 0, m.start(1)) + 1) + 1
        name = m.group(1).rsplit("/", 1)[-1]
        raise _fail(
            source,
            line,
            col,
            f"the script calls {m.group(1)} by its path, so the recorder on PATH cannot "
            f"stand in for it and running the script would start it: write {name} "
            "(found on PATH) and import again",
        )


def record(path: Path, source: str) -> list[Call]:
    """Run the script at ``path`` with recorders on PATH; the calls they recorded, in order."""
    try:
        script = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise _fail(source, 0, 0, f"cannot read the script: {exc}") from None
    _check_paths(script, source)
    first = script.split("\n", 1)[0]
    shell = first[2:].strip().split() if first.startswith("#!") else []
    if not shell or Path(shell[0]).name not in ("sh", "bash", "dash", "zsh", "ksh", "env"):
        shell = [shutil.which("bash") or "/bin/sh"]
    with tempfile.TemporaryDirectory(prefix="layoutgen-shell-") as tmp:
        bin_dir, calls = Path(tmp) / "bin", Path(tmp) / "calls"
        bin_dir.mkdir()
        calls.mkdir()
        for name in RECORDED:
            (bin_dir / name).write_text(_RECORDER.format(dir=calls))
            (bin_dir / name).chmod(0o755)
        for name in ("python", "python3"):
            real = shutil.which(name) or sys.executable
            (bin_dir / name).write_text(_PYTHON.format(dir=calls, real=real))
            (bin_dir / name).chmod(0o755)
        env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
        try:
            done = subprocess.run(
                [*shell, str(path)],
                env=env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=TIMEOUT,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise _fail(source, 0, 0, f"the script ran for more than {TIMEOUT} s") from None
        except OSError as exc:
            raise _fail(source, 0, 0, f"cannot run the script with {shell[0]}: {exc}") from None
        found = []
        for argv_file in sorted(calls.glob("*.argv"), key=_order):
            argv = argv_file.read_bytes().decode("utf-8", "surrogateescape").split("\0")[:-1]
            raw = argv_file.with_suffix(".env").read_bytes().decode("utf-8", "surrogateescape")
            items = raw.split("\0") if "\0" in raw else raw.splitlines()
            call_env = dict(i.partition("=")[::2] for i in items if "=" in i)
            found.append(Call(tuple(argv), call_env))
    if not found:
        said = done.stderr.decode("utf-8", "replace").strip().splitlines()[-3:]
        raise _fail(
            source,
            0,
            0,
            "the script ran (exit status "
            f"{done.returncode}) and called none of {', '.join(RECORDED)}"
            + (": " + " | ".join(said) if said else ""),
        )
    return found


def _order(p: Path) -> tuple[int, int]:
    """Calls in the order they were made: by the time stamp in the name, then pid (a
    ``date`` without %N leaves letters in the stamp: those count as 0)."""
    _, stamp, pid = [*p.stem.split("-"), "", ""][:3]
    return int(re.sub(r"\D", "", stamp) or 0), int(re.sub(r"\D", "", pid) or 0)


def _starts(call: Call) -> bool:
    """Whether the call starts a server: ``podman run``, llama-server, ``vllm serve``."""
    name, args = call.argv[0], call.argv[1:]
    if name in ("podman", "docker"):
        words = [a for a in args if not a.startswith("-")]
        return bool(words) and (words[0] == "run" or words[:2] == ["container", "run"])
    if name == "vllm":
        return bool(args) and args[0] == "serve"
    return True


def shell_text(path: Path, source: str) -> str:
    """The command line the script's first server start would have run, expanded."""
    calls = [c for c in record(path, source) if _starts(c)]
    if not calls:
        raise _fail(
            source,
            0,
            0,
            "the script ran and called podman/docker/llama-server/vllm, but none of the "
            "calls starts a server (podman run, llama-server, vllm serve)",
        )
    call = calls[0]
    argv = list(call.argv)
    if argv[0] in ("llama-server", "vllm"):
        # the recorder stood in for the program PATH finds without it: name that one
        argv[0] = shutil.which(argv[0], path=os.environ.get("PATH", "")) or argv[0]
    call = Call(tuple(argv), call.env)
    base = os.environ
    own = {k: v for k, v in call.env.items() if base.get(k) != v}
    prefix = [] if call.argv[0] in ("podman", "docker") else env_prefix(own)
    return as_text([*prefix, *call.argv])
