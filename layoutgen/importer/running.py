"""Import what runs: a container (``podman inspect``), a process (``/proc/PID``).

Why: a command in a script is not what the server got when the shell built
part of it (seed 001's ``$OT_ARGS`` loop stands for 66 ``-ot`` flags).  A
running container or process holds the argv after every expansion.  Each is
turned into the one command line it amounts to, written with POSIX quoting,
and read like a pasted one; messages locate words in that line, which the
YAML's header shows.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from layoutgen.errors import Diagnostic, Severity
from layoutgen.importer.cmdline import UnreadableCommand

#: environment variables a container image or a login sets for everyone: not the
#: server's settings, never listed
_AMBIENT = re.compile(
    r"PATH|HOME|HOSTNAME|TERM|container|LANG|LANGUAGE|LC_\w+|LD_LIBRARY_PATH|PWD|OLDPWD|"
    r"SHLVL|_|USER|LOGNAME|SHELL|MAIL|SSH_\w+|XDG_\w+|DBUS_\w+|DISPLAY|NVIDIA_\w+|NV_\w+|"
    r"NVARCH|CUDA_VERSION|CUDA_HOME|NCCL_VERSION|CUDNN_VERSION|GPG_KEY|PYTHON_\w+|"
    r"PIP_\w+|DEBIAN_FRONTEND|UV_\w+|VIRTUAL_ENV|TZ|LIBRARY_PATH|INVOCATION_ID|"
    r"JOURNAL_STREAM|SYSTEMD_EXEC_PID|MANAGERPID|NOTIFY_SOCKET|LS_COLORS|MOTD_SHOWN|"
    r"SUDO_\w+|COLORTERM|TERM_\w+|LESS\w*|EDITOR|PAGER|HIST\w+"
)
#: the most of /proc/PID/cmdline or a podman inspect record import reads
MAX_BYTES = 1 << 22


def _fail(source: str, message: str) -> UnreadableCommand:
    return UnreadableCommand([Diagnostic(source, 0, 0, Severity.ERROR, message)])


def env_prefix(env: Mapping[str, str]) -> list[str]:
    """``NAME=value`` words for the variables that are the server's own settings."""
    return [f"{k}={v}" for k, v in env.items() if not _AMBIENT.fullmatch(k)]


def as_text(words: Sequence[str]) -> str:
    """One command line that a POSIX shell splits back into ``words`` exactly."""
    return shlex.join(words) + "\n"


# ------------------------------------------------------------------ process


def process_text(pid: int, proc: Path = Path("/proc")) -> str:
    """The command line of process ``pid`` (after every shell expansion), with the
    environment variables that are its settings before it."""
    source = f"pid {pid}"
    base = proc / str(pid)
    try:
        raw = (base / "cmdline").read_bytes()[: MAX_BYTES + 1]
    except FileNotFoundError:
        raise _fail(source, f"no process {pid} (/proc/{pid} does not exist)") from None
    except OSError as exc:
        raise _fail(source, f"cannot read /proc/{pid}/cmdline: {exc.strerror}") from None
    if len(raw) > MAX_BYTES:
        raise _fail(source, f"/proc/{pid}/cmdline holds more than {MAX_BYTES} bytes")
    if not raw:
        raise _fail(source, f"process {pid} has no command line (a kernel thread or a zombie)")
    argv = [a.decode("utf-8", "surrogateescape") for a in raw.rstrip(b"\0").split(b"\0")]
    env: dict[str, str] = {}
    try:
        data = (base / "environ").read_bytes()[:MAX_BYTES]
    except OSError:
        data = b""  # another user's process: its environment is not readable
    for item in data.split(b"\0"):
        name, eq, value = item.decode("utf-8", "surrogateescape").partition("=")
        if eq and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            env[name] = value
    return as_text([*env_prefix(env), *argv])


def in_container(pid: int, proc: Path = Path("/proc")) -> bool:
    """Whether process ``pid`` runs in a container (its cgroup names podman's, docker's
    or containerd's): then its paths are the container's, not the host's."""
    try:
        cgroup = (proc / str(pid) / "cgroup").read_text(errors="replace")[:65536]
    except OSError:
        return False
    return bool(re.search(r"libpod|docker|containerd|crio", cgroup))


# ---------------------------------------------------------------- container


def inspect_text(data: str, source: str) -> str:
    """The ``podman run`` line a ``podman inspect`` record amounts to."""
    try:
        doc: Any = json.loads(data)
    except json.JSONDecodeError as exc:
        raise UnreadableCommand(
            [
                Diagnostic(
                    source,
                    exc.lineno,
                    exc.colno,
                    Severity.ERROR,
                    f"not podman inspect JSON: {exc.msg}",
                )
            ]
        ) from None
    if isinstance(doc, list):
        if len(doc) != 1:
            raise _fail(
                source,
                f"podman inspect printed {len(doc)} records: import one container at a time",
            )
        doc = doc[0]
    if not isinstance(doc, dict) or not isinstance(doc.get("Config"), dict):
        raise _fail(source, "not a podman inspect record of a container: no Config object")
    config: dict[str, Any] = doc["Config"]
    host = _obj(doc.get("HostConfig"))
    words = ["podman", "run"]
    name = doc.get("Name")
    if isinstance(name, str) and name:
        words += ["--name", name.lstrip("/")]
    words += _devices(host)
    for port, binds in sorted(_obj(host.get("PortBindings")).items()):
        for b in _objs(binds):
            ip, hp = _str(b.get("HostIp")), _str(b.get("HostPort"))
            words += ["-p", ":".join(p for p in (ip, hp, str(port).split("/")[0]) if p)]
    for m in _objs(doc.get("Mounts")):
        dst = _str(m.get("Destination"))
        if m.get("Type") not in ("bind", "volume") or not dst:
            continue
        src = _str(m.get("Source")) or _str(m.get("Name"))
        words += ["-v", f"{src}:{dst}" + ("" if m.get("RW", True) else ":ro")]
    for cap in _strs(host.get("CapAdd")):
        words += ["--cap-add", cap]
    restart = _str(_obj(host.get("RestartPolicy")).get("Name"))
    if restart and restart != "no":
        words += ["--restart", restart]
    env = dict(e.partition("=")[::2] for e in _strs(config.get("Env")) if "=" in e)
    for item in env_prefix(env):
        words += ["-e", item]
    entry = _strs(config.get("Entrypoint"))
    cmd = _strs(config.get("Cmd"))
    image = _str(doc.get("ImageName")) or _str(config.get("Image"))
    if not image:
        raise _fail(source, "the record names no image (ImageName, Config.Image)")
    if len(entry) == 1:
        words += ["--entrypoint", entry[0], image, *cmd]
    else:
        words += [image, *entry, *cmd]
    return as_text(words)


def _obj(value: object) -> dict[str, Any]:
    """A JSON object, or an empty one for anything else (a record is untrusted)."""
    return value if isinstance(value, dict) else {}


def _objs(value: object) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _str(value: object) -> str:
    return value if isinstance(value, str) else ""


def _strs(value: object) -> list[str]:
    """A string or a list of strings (podman wrote Entrypoint both ways), else none."""
    if isinstance(value, str):
        return [value]
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _devices(host: Mapping[str, Any]) -> list[str]:
    """``--device`` words: CDI names as given, /dev/nvidiaN as the CDI index N."""
    out: list[str] = []
    for d in _objs(host.get("Devices")):
        path = _str(d.get("PathOnHost"))
        m = re.fullmatch(r"/dev/nvidia(\d{1,3})", path)
        if "=" in path:
            out += ["--device", path]
        elif m:
            out += ["--device", f"nvidia.com/gpu={int(m.group(1))}"]
    return out


def container_text(name: str) -> str:
    """``podman inspect NAME`` of a container on this host, as a ``podman run`` line."""
    import shutil
    import subprocess

    podman = shutil.which("podman")
    if podman is None:
        raise _fail(
            name,
            f"{name!r} is no file and no process id, and podman is not installed to look "
            "up a container by that name",
        )
    try:
        done = subprocess.run(
            [podman, "inspect", "--type", "container", "--", name],
            capture_output=True,
            timeout=60,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise _fail(name, "podman inspect did not answer within 60 s") from None
    if done.returncode != 0:
        said = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise _fail(
            name,
            f"{name!r} is no file, no process id and no container podman knows"
            + (f" (podman: {said[-1][:200]})" if said else ""),
        )
    return inspect_text(done.stdout.decode("utf-8", "replace"), name)
