"""The real tools the renderer's tests run (DESIGN.md §9), and a systemd
command-line parser written independently of the renderer.

Tools live in a cache outside the clone, filled by ``make tools``
(``tests/tools/fetch_tools.sh``)::

    ${LAYOUTGEN_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/layoutgen/tools}/bin/{quadlet,shellcheck}

``systemd-analyze`` is the system's (Debian's ``systemd`` package). A missing
tool raises ``RuntimeError`` naming the command that installs it: tests never
skip for want of a tool.

``systemd_argv`` follows systemd.service(5) "Command lines" and systemd's own
code (``config_parse_exec``, ``extract_first_word``, ``cunescape_one``,
``replace_env_argv``) step by step:

1. The value is split into words: whitespace separates words, single and
   double quotes group (and may start or end mid-word: ``a"b c"d`` is one word
   ``ab cd``), and backslash escapes are C escapes, inside quotes too:
   ``\\a \\b \\f \\n \\r \\t \\v \\\\ \\" \\' \\s`` (space), ``\\xHH``,
   ``\\NNN`` (octal), ``\\uHHHH``, ``\\UHHHHHHHH``; NUL is refused. systemd
   keeps an unknown escape such as ``\\.`` verbatim *with a warning*; here it is
   a ``ValueError`` unless ``relaxed=True``. Unbalanced quotes are always an
   error (systemd drops the whole command line).
2. The first word may start with the prefixes ``-``, ``@``, ``:``, ``+``,
   ``!``, ``!!`` (in any order, each at most once); with ``@`` the second word
   is ``argv[0]``. An unquoted lone ``;`` separates commands (``\\;`` is a
   literal ``;`` argument).
3. ``%`` specifiers are resolved per word after unquoting: ``%%`` becomes
   ``%``; a known specifier (``%n``, ``%N``, ``%t``, ...) is *kept verbatim*
   (we do not know the unit it would be resolved for); an unknown one is an
   error, as in systemd.
4. Environment variables are substituted when the command runs, per argv
   element, unless the ``:`` prefix is given: ``$$`` becomes ``$``,
   ``${VAR}`` anywhere in a word is replaced by the value, and a word that is
   exactly ``$VAR`` is replaced by the value split at whitespace (zero or more
   words). With ``env=None`` (the default) references are *kept verbatim* and
   only ``$$`` is reduced; pass ``env={}`` (or a mapping) to get exactly the
   argv systemd would exec with that environment.

So for an argument that must reach the program literally, a unit file writes
``%%`` for ``%`` and ``$$`` for ``$``, escapes ``\\`` as ``\\\\`` and quotes
words with whitespace or quotes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FETCH_SCRIPT = ROOT / "tests" / "tools" / "fetch_tools.sh"
INSTALL_HINT = f"make -C {ROOT} tools"

#: The quadlet generator the tests pin (Debian trixie's podman 5.4.x).
QUADLET_VERSION_PREFIX = "5.4."

#: ``[Container]`` keys of podman's quadlet and the podman version that
#: introduced each (4.4 = the first release with quadlet). Evidence: the 5.4.2
#: man page podman-systemd.unit(5) lists every key below; the version of each
#: comes from podlet's per-version downgrade tables (4.4 … 5.0) and podman's
#: release notes (5.1 GroupAdd; 5.3 AddHost, CgroupsMode, StartWithPod). Keys
#: marked "<=5.4" are accepted by 5.4.2 but their first release was not pinned
#: down. HealthCmd and PodmanArgs are not version-gated by podlet (i.e. 4.4),
#: but the other Health* keys are 4.5; they are listed as 4.5 to err on the
#: safe side (rendering a key one release late costs nothing, one early breaks).
QUADLET_CONTAINER_KEYS_SINCE: dict[str, str] = {
    "AddCapability": "4.4",
    "AddDevice": "4.4",
    "Annotation": "4.4",
    "ContainerName": "4.4",
    "DropCapability": "4.4",
    "Environment": "4.4",
    "EnvironmentFile": "4.4",
    "EnvironmentHost": "4.4",
    "Exec": "4.4",
    "ExposeHostPort": "4.4",
    "Group": "4.4",
    "Image": "4.4",
    "Label": "4.4",
    "Network": "4.4",
    "NoNewPrivileges": "4.4",
    "Notify": "4.4",  # Notify=healthy: 5.0
    "PublishPort": "4.4",
    "ReadOnly": "4.4",
    "RunInit": "4.4",
    "SeccompProfile": "4.4",
    "SecurityLabelDisable": "4.4",
    "SecurityLabelFileType": "4.4",
    "SecurityLabelLevel": "4.4",
    "SecurityLabelType": "4.4",
    "Timezone": "4.4",
    "User": "4.4",
    "Volume": "4.4",
    "HealthCmd": "4.5",  # podlet: 4.4
    "PodmanArgs": "4.5",  # podlet: 4.4
    "HealthInterval": "4.5",
    "HealthOnFailure": "4.5",
    "HealthRetries": "4.5",
    "HealthStartPeriod": "4.5",
    "HealthStartupCmd": "4.5",
    "HealthStartupInterval": "4.5",
    "HealthStartupRetries": "4.5",
    "HealthStartupSuccess": "4.5",
    "HealthStartupTimeout": "4.5",
    "HealthTimeout": "4.5",
    "IP": "4.5",
    "IP6": "4.5",
    "LogDriver": "4.5",
    "Mount": "4.5",
    "Rootfs": "4.5",
    "Secret": "4.5",
    "Tmpfs": "4.5",
    "UserNS": "4.5",
    "AutoUpdate": "4.6",
    "HostName": "4.6",
    "Mask": "4.6",
    "Pull": "4.6",
    "SecurityLabelNested": "4.6",
    "Sysctl": "4.6",
    "Unmask": "4.6",
    "WorkingDir": "4.6",
    "DNS": "4.7",
    "DNSOption": "4.7",
    "DNSSearch": "4.7",
    "PidsLimit": "4.7",
    "ShmSize": "4.7",
    "Ulimit": "4.7",
    "GIDMap": "4.8",
    "ReadOnlyTmpfs": "4.8",
    "SubGIDMap": "4.8",
    "SubUIDMap": "4.8",
    "UIDMap": "4.8",
    "Entrypoint": "5.0",
    "StopTimeout": "5.0",
    "GroupAdd": "5.1",
    "AddHost": "5.3",
    "CgroupsMode": "5.3",
    "StartWithPod": "5.3",
    "ContainersConfModule": "<=5.4",
    "GlobalArgs": "<=5.4",
    "HealthLogDestination": "<=5.4",
    "HealthMaxLogCount": "<=5.4",
    "HealthMaxLogSize": "<=5.4",
    "LogOpt": "<=5.4",
    "NetworkAlias": "<=5.4",
    "Pod": "<=5.4",
    "StopSignal": "<=5.4",
}


# --------------------------------------------------------------------------
# Finding the tools


def tools_dir() -> Path:
    """The cache directory, computed exactly as fetch_tools.sh does."""
    explicit = os.environ.get("LAYOUTGEN_TOOLS")
    if explicit:
        return Path(explicit)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "layoutgen" / "tools"


_CACHED_ONLY = {"quadlet"}
_KNOWN = ("quadlet", "systemd-analyze", "shellcheck")


def tool(name: str) -> Path:
    """Path of a real tool, or ``RuntimeError`` saying how to install it.

    ``quadlet`` is only taken from the cache (the pinned 5.4 generator, never
    whatever podman the machine has); ``shellcheck`` and ``systemd-analyze``
    from the cache, else from ``PATH``.
    """
    if name not in _KNOWN:
        raise ValueError(f"unknown tool {name!r}; known: {', '.join(_KNOWN)}")
    cached = tools_dir() / "bin" / name
    if cached.is_file() and os.access(cached, os.X_OK):
        return cached
    if name not in _CACHED_ONLY:
        found = shutil.which(name)
        if found:
            return Path(found)
    raise RuntimeError(
        f"{name} not found (looked in {cached.parent}"
        + ("" if name in _CACHED_ONLY else " and PATH")
        + f"); install the test tools with: {INSTALL_HINT}"
    )


# --------------------------------------------------------------------------
# Unit files


Unit = dict[str, list[tuple[str, str]]]


def parse_unit(text: str) -> Unit:
    """Parse a systemd unit file into ``{section: [(key, value), ...]}``.

    Follows systemd.syntax(7): ``#``/``;`` comments, whitespace around ``=``
    stripped, a trailing backslash continues the line (replaced by a space).
    Repeated keys and sections keep their order.
    """
    unit: Unit = {}
    section: str | None = None
    pending = ""
    for raw in text.splitlines():
        line = raw.strip() if not pending else raw.rstrip()
        if not pending and (not line or line[0] in "#;"):
            continue
        if pending and line.lstrip()[:1] in ("#", ";"):
            continue  # comment lines inside a continuation are skipped
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = (pending + line).strip()
        pending = ""
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            unit.setdefault(section, [])
            continue
        if section is None or "=" not in line:
            raise ValueError(f"not a unit file line: {raw!r}")
        key, _, value = line.partition("=")
        unit[section].append((key.strip(), value.strip()))
    if pending:
        raise ValueError("unit file ends in a line continuation")
    return unit


def unit_values(unit: Unit, section: str, key: str) -> list[str]:
    """All values of ``key`` in ``section``, in order."""
    return [v for k, v in unit.get(section, []) if k == key]


# --------------------------------------------------------------------------
# quadlet


@dataclass(frozen=True)
class QuadletResult:
    rc: int
    stdout: str
    stderr: str
    units: dict[str, Unit] = field(default_factory=dict)

    @property
    def warnings(self) -> list[str]:
        """stderr lines other than quadlet's "Loading source unit file" chatter."""
        lines = []
        for line in self.stderr.splitlines():
            text = line.split("]: ", 1)[1] if line.startswith("quadlet-generator[") else line
            if text.strip() and not text.startswith("Loading source unit file"):
                lines.append(text)
        return lines

    @property
    def ok(self) -> bool:
        """Exit 0 and nothing to say: what DESIGN.md §9 requires."""
        return self.rc == 0 and not self.warnings

    def exec_start(self, unit_name: str) -> str:
        """The (last) ``ExecStart=`` of a generated unit."""
        values = unit_values(self.units[unit_name], "Service", "ExecStart")
        if not values:
            raise KeyError(f"{unit_name} has no ExecStart")
        return values[-1]


def parse_dryrun(stdout: str) -> dict[str, Unit]:
    """Split ``quadlet -dryrun`` output (``---name.service---`` blocks)."""
    units: dict[str, Unit] = {}
    name: str | None = None
    body: list[str] = []
    for line in [*stdout.splitlines(), "---\x00---"]:
        if line.startswith("---") and line.endswith("---") and len(line) > 6:
            if name is not None:
                units[name] = parse_unit("\n".join(body))
            name, body = line[3:-3], []
        elif name is not None:
            body.append(line)
        elif line.strip():
            raise ValueError(f"unexpected quadlet output before the first unit: {line!r}")
    return units


_quadlet_version: dict[Path, str] = {}


def quadlet_version() -> str:
    exe = tool("quadlet")
    if exe not in _quadlet_version:
        out = subprocess.run([exe, "-version"], capture_output=True, text=True, check=True)
        _quadlet_version[exe] = out.stdout.strip()
    return _quadlet_version[exe]


def quadlet_dryrun(
    unit_dir: Path, *, version_check: bool = True, user: bool = False
) -> QuadletResult:
    """Run ``QUADLET_UNIT_DIRS=<unit_dir> quadlet -dryrun -no-kmsg-log [-user]``.

    podman 5.4's generator flags: ``-dryrun`` (print the units to stdout and
    log to stderr, implies ``-v``), ``-no-kmsg-log`` (never write to
    /dev/kmsg, which root in a container may be able to), ``-user`` (generate
    user units), ``-version``. Any conversion error gives exit 1 and no unit
    at all; warnings (e.g. a short image name) leave exit 0 and only show on
    stderr, hence ``QuadletResult.warnings``.
    """
    exe = tool("quadlet")
    if version_check:
        version = quadlet_version()
        if not version.startswith(QUADLET_VERSION_PREFIX):
            raise RuntimeError(
                f"{exe} is podman {version}, tests pin {QUADLET_VERSION_PREFIX}x: {INSTALL_HINT}"
            )
    argv = [str(exe), "-dryrun", "-no-kmsg-log"]
    if user:
        argv.append("-user")
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LC_ALL": "C.UTF-8",
        "QUADLET_UNIT_DIRS": str(unit_dir),
    }
    if user:
        env["HOME"] = os.environ.get("HOME", "/root")
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
    units = parse_dryrun(proc.stdout) if proc.returncode == 0 else {}
    return QuadletResult(proc.returncode, proc.stdout, proc.stderr, units)


# --------------------------------------------------------------------------
# systemd command lines


_WHITESPACE = " \t\n\r"
_SIMPLE_ESCAPES = {
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    "\\": "\\",
    '"': '"',
    "'": "'",
    "s": " ",
}
_HEX = "0123456789abcdefABCDEF"
#: Specifiers systemd.unit(5) knows (current systemd; a superset of 252's).
SPECIFIERS = frozenset("aAbBCdDEfgGhHiIjJlLmMnNopPqsStTuUvVwWyY")


class ExecSyntaxError(ValueError):
    """A command line systemd would reject, or warn about (unless relaxed)."""


def _cunescape_one(s: str, i: int) -> tuple[bytes, int]:
    """Decode the escape whose letter is at ``s[i]`` (after the backslash).

    Returns the bytes and how many characters were consumed; raises
    ``ExecSyntaxError`` for an escape systemd does not know.
    """
    c = s[i]
    if c in _SIMPLE_ESCAPES:
        return _SIMPLE_ESCAPES[c].encode(), 1
    if c == "x":
        digits = s[i + 1 : i + 3]
        if len(digits) == 2 and all(d in _HEX for d in digits):
            value = int(digits, 16)
            if value:
                return bytes([value]), 3  # a raw byte, as systemd ("eight bit")
    elif c in "uU":
        n = 4 if c == "u" else 8
        digits = s[i + 1 : i + 1 + n]
        if len(digits) == n and all(d in _HEX for d in digits):
            value = int(digits, 16)
            if 0 < value <= 0x10FFFF and not 0xD800 <= value <= 0xDFFF:
                return chr(value).encode(), 1 + n
    elif c in "01234567":
        digits = s[i : i + 3]
        if len(digits) == 3 and all(d in "01234567" for d in digits):
            value = int(digits, 8)
            if 0 < value <= 255:
                return bytes([value]), 3
    raise ExecSyntaxError(f"unknown escape sequence \\{c} in {s!r}")


def _extract_word(s: str, i: int, relaxed: bool) -> tuple[str | None, int]:
    """systemd's ``extract_first_word(EXTRACT_UNQUOTE|EXTRACT_CUNESCAPE)``.

    Returns ``(word, next_index)``; ``word`` is None when only whitespace
    was left.
    """
    n = len(s)
    while i < n and s[i] in _WHITESPACE:
        i += 1
    if i >= n:
        return None, n
    out = bytearray()
    quote = ""
    while i < n:
        c = s[i]
        if c == "\\":
            if i + 1 >= n:
                if relaxed and not quote:
                    out += b"\\"
                    i += 1
                    break
                raise ExecSyntaxError(f"trailing backslash in {s!r}")
            try:
                decoded, used = _cunescape_one(s, i + 1)
            except ExecSyntaxError:
                if not relaxed:
                    raise
                decoded, used = ("\\" + s[i + 1]).encode(), 1
            out += decoded
            i += 1 + used
        elif quote:
            if c == quote:
                quote = ""
            else:
                out += c.encode()
            i += 1
        elif c in "'\"":
            quote = c
            i += 1
        elif c in _WHITESPACE:
            break
        else:
            out += c.encode()
            i += 1
    if quote:
        raise ExecSyntaxError(f"unbalanced quoting in {s!r}")
    while i < n and s[i] in _WHITESPACE:
        i += 1
    return out.decode("utf-8", "surrogateescape"), i


#: What ``mark_specifiers=True`` turns a known specifier into: a private-use
#: character around it, so that a test can tell ``%%n`` (a literal ``%n``)
#: from a ``%n`` systemd would expand.
SPECIFIER_MARK = "\ue000"


def _resolve_specifiers(word: str, mark: bool = False) -> str:
    """``%%`` -> ``%``; known specifiers kept verbatim (or marked); unknown ones refused."""
    out: list[str] = []
    i = 0
    while i < len(word):
        c = word[i]
        if c != "%":
            out.append(c)
            i += 1
            continue
        if i + 1 >= len(word):  # a trailing % stays, as in specifier_printf()
            out.append("%")
            break
        nxt = word[i + 1]
        if nxt == "%":
            out.append("%")
        elif nxt in SPECIFIERS:
            out.append(f"{SPECIFIER_MARK}%{nxt}{SPECIFIER_MARK}" if mark else "%" + nxt)
        else:
            raise ExecSyntaxError(f"unknown specifier %{nxt} in {word!r}")
        i += 2
    return "".join(out)


def _replace_env(word: str, env: Mapping[str, str] | None) -> str:
    """systemd's ``replace_env(word, env, 0)``: ``$$`` and ``${VAR}``."""
    out: list[str] = []
    i, n = 0, len(word)
    while i < n:
        c = word[i]
        if c != "$" or i + 1 >= n:
            out.append(c)
            i += 1
            continue
        nxt = word[i + 1]
        if nxt == "$":
            out.append("$")
            i += 2
        elif nxt == "{":
            end = word.find("}", i + 2)
            name = word[i + 2 : end] if end >= 0 else ""
            if end < 0 or ":" in name:  # unterminated / ${A:-b}: left alone
                out.append(word[i:] if end < 0 else word[i : end + 1])
                i = n if end < 0 else end + 1
            else:
                out.append(word[i : end + 1] if env is None else env.get(name, ""))
                i = end + 1
        else:
            out.append("$")
            i += 1
    return "".join(out)


def _expand_env_argv(argv: list[str], env: Mapping[str, str] | None) -> list[str]:
    """systemd's ``replace_env_argv``."""
    result: list[str] = []
    for word in argv:
        if word.startswith("$") and word[1:2] not in ("{", "$"):
            if env is None:
                result.append(word)
            else:
                value = env.get(word[1:])
                if value is not None:
                    result.extend(_split_relaxed(value))
            continue
        result.append(_replace_env(word, env))
    return result


def _split_relaxed(value: str) -> list[str]:
    """``strv_split_full(WHITESPACE, EXTRACT_RELAX|EXTRACT_UNQUOTE)`` (no escapes)."""
    words: list[str] = []
    i, n = 0, len(value)
    while True:
        while i < n and value[i] in _WHITESPACE:
            i += 1
        if i >= n:
            return words
        cur: list[str] = []
        quote = ""
        while i < n:
            c = value[i]
            if c == "\\" and i + 1 < n:
                cur.append(value[i + 1])
                i += 2
                continue
            if quote:
                if c == quote:
                    quote = ""
                else:
                    cur.append(c)
            elif c in "'\"":
                quote = c
            elif c in _WHITESPACE:
                break
            else:
                cur.append(c)
            i += 1
        words.append("".join(cur))


@dataclass(frozen=True)
class ExecCommand:
    """One command of an ``Exec*=`` value."""

    path: str  # the executable (specifiers kept)
    argv: tuple[str, ...]  # as systemd passes it to execve()
    prefixes: str = ""  # e.g. "-@"

    @property
    def ignore_failure(self) -> bool:
        return "-" in self.prefixes


def _split_prefixes(first: str) -> tuple[str, str]:
    """Strip the ``-@:+!`` prefixes exactly as ``config_parse_exec`` does."""
    ignore = argv0 = no_env = privileged = no_setuid = ambient = False
    for i, c in enumerate(first):
        if c == "-" and not ignore:
            ignore = True
        elif c == "@" and not argv0:
            argv0 = True
        elif c == ":" and not no_env:
            no_env = True
        elif c == "+" and not (privileged or no_setuid or ambient):
            privileged = True
        elif c == "!" and not (privileged or no_setuid or ambient):
            no_setuid = True
        elif c == "!" and not (privileged or ambient):
            no_setuid, ambient = False, True
        else:
            return first[:i], first[i:]
    return first, ""


def parse_exec(
    value: str,
    *,
    env: Mapping[str, str] | None = None,
    relaxed: bool = False,
    mark_specifiers: bool = False,
) -> list[ExecCommand]:
    """Parse an ``Exec*=`` value into its commands (``;``-separated)."""
    commands: list[ExecCommand] = []
    i, n = 0, len(value)
    while True:
        first, i = _extract_word(value, i, relaxed)
        if first is None:
            break
        if first == ";":  # a lone ";" where a command starts: an empty command
            continue
        prefixes, path = _split_prefixes(first)
        path = _resolve_specifiers(path, mark_specifiers)
        if not path:
            raise ExecSyntaxError(f"empty executable path in {value!r}")
        if any(ord(ch) < 32 or ch in "\"'\\\x7f" for ch in path):
            raise ExecSyntaxError(f"executable name contains special characters: {path!r}")
        if path.endswith("/"):
            raise ExecSyntaxError(f"executable path is a directory: {path!r}")
        if not path.startswith("/") and "/" in path:
            raise ExecSyntaxError(f"neither a valid executable name nor an absolute path: {path}")
        words: list[str] = []
        more = False
        while i < n:
            if value[i] == ";" and (i + 1 >= n or value[i + 1] in _WHITESPACE):
                i += 1
                while i < n and value[i] in _WHITESPACE:
                    i += 1
                more = True
                break
            if value.startswith("\\;", i) and (i + 2 >= n or value[i + 2] in _WHITESPACE):
                words.append(";")
                i += 2
                while i < n and value[i] in _WHITESPACE:
                    i += 1
                continue
            word, i = _extract_word(value, i, relaxed)
            if word is None:
                break
            words.append(_resolve_specifiers(word, mark_specifiers))
        argv = words if "@" in prefixes else [path, *words]
        if not argv:
            raise ExecSyntaxError(f"empty argv[0] in {value!r}")
        if ":" not in prefixes:
            argv = _expand_env_argv(argv, env)
        commands.append(ExecCommand(path, tuple(argv), prefixes))
        if not more:
            break
    if not commands:
        raise ExecSyntaxError(f"no command in {value!r}")
    return commands


def systemd_argv(
    exec_start: str,
    *,
    env: Mapping[str, str] | None = None,
    relaxed: bool = False,
    mark_specifiers: bool = False,
) -> list[str]:
    """The argv systemd would execute for a single-command ``ExecStart=`` value.

    See the module docstring for what is resolved and what is kept verbatim.
    Raises ``ExecSyntaxError`` (a ``ValueError``) for anything systemd would
    refuse, for an unknown escape (systemd: a warning) unless ``relaxed``,
    and for more than one command.
    """
    commands = parse_exec(exec_start, env=env, relaxed=relaxed, mark_specifiers=mark_specifiers)
    if len(commands) != 1:
        raise ExecSyntaxError(f"{len(commands)} commands in {exec_start!r}, expected one")
    return list(commands[0].argv)


# --------------------------------------------------------------------------
# systemd-analyze verify

_EXEC_KEYS = (
    "ExecCondition",
    "ExecStartPre",
    "ExecStart",
    "ExecStartPost",
    "ExecReload",
    "ExecStop",
    "ExecStopPost",
)


def _stub_executables(unit_file: Path, root: Path) -> None:
    """Put an executable stub in ``root`` for every absolute Exec path."""
    try:
        unit = parse_unit(unit_file.read_text())
    except (ValueError, UnicodeDecodeError):
        return  # systemd-analyze will say what is wrong
    for section in unit.values():
        for key, value in section:
            if key not in _EXEC_KEYS or not value:
                continue
            try:
                commands = parse_exec(value, relaxed=True)
            except ValueError:
                continue
            for command in commands:
                if not command.path.startswith("/") or "%" in command.path:
                    continue
                stub = root / command.path.lstrip("/")
                if stub.exists() or stub.is_symlink():
                    continue
                stub.parent.mkdir(parents=True, exist_ok=True)
                stub.write_text("#!/bin/sh\nexit 0\n")
                stub.chmod(0o755)


def _systemd_unit_dir(analyze: Path) -> Path:
    for candidate in (
        analyze.resolve().parent.parent / "lib" / "systemd" / "system",
        Path("/usr/lib/systemd/system"),
        Path("/lib/systemd/system"),
    ):
        if (candidate / "sysinit.target").exists():
            return candidate
    raise RuntimeError(f"no systemd unit directory next to {analyze}: {INSTALL_HINT}")


def systemd_verify(paths: Sequence[Path]) -> tuple[int, str]:
    """``systemd-analyze verify`` the unit files; returns ``(rc, stderr)``.

    Callers treat any stderr as a failure: systemd-analyze exits 0 on
    warnings such as an unknown key or an unparsable value.

    How it runs without a running systemd (a container, as root or not):
    a throw-away root directory gets a copy of the system's unit directory
    (``sysinit.target`` & co., which every service depends on), the merged-usr
    symlinks, the given files under ``/etc/systemd/system/``, and an
    executable stub for every absolute path named by an ``Exec*=`` key (the
    podman or llama.cpp binaries a unit runs are not on the test machine:
    verify would otherwise fail with "Command ... is not executable").
    Then ``systemd-analyze verify --root=DIR --man=no --generators=no
    --recursive-errors=no /etc/systemd/system/NAME...`` with
    ``SYSTEMD_LOG_LEVEL=notice`` and no colour/pager; paths in stderr are
    mapped back to the caller's.
    """
    if not paths:
        raise ValueError("no unit files to verify")
    names = [p.name for p in paths]
    if len(set(names)) != len(names):
        raise ValueError(f"unit file names must be unique: {names}")
    analyze = tool("systemd-analyze")
    with tempfile.TemporaryDirectory(prefix="layoutgen-verify-") as tmp:
        root = Path(tmp)
        (root / "usr" / "lib" / "systemd").mkdir(parents=True)
        shutil.copytree(_systemd_unit_dir(analyze), root / "usr/lib/systemd/system", symlinks=True)
        for sub in ("bin", "sbin", "lib", "lib64"):
            (root / "usr" / sub).mkdir(parents=True, exist_ok=True)
            (root / sub).symlink_to(f"usr/{sub}")
        etc = root / "etc" / "systemd" / "system"
        etc.mkdir(parents=True)
        for path in paths:
            shutil.copyfile(path, etc / path.name)
            _stub_executables(path, root)
        argv = [
            str(analyze),
            "verify",
            f"--root={root}",
            "--man=no",
            "--generators=no",
            "--recursive-errors=no",
            *(f"/etc/systemd/system/{name}" for name in names),
        ]
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "LC_ALL": "C.UTF-8",
            "SYSTEMD_LOG_LEVEL": "notice",
            "SYSTEMD_LOG_COLOR": "0",
            "SYSTEMD_PAGER": "cat",
        }
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
        stderr = proc.stderr
        for path in paths:
            stderr = stderr.replace(str(etc / path.name), str(path))
        stderr = stderr.replace(str(root), "<root>")
        return proc.returncode, stderr


# --------------------------------------------------------------------------
# shellcheck


def shellcheck(paths: Sequence[Path]) -> tuple[int, str]:
    """``shellcheck --norc --format=gcc PATH...``; returns ``(rc, stdout+stderr)``."""
    if not paths:
        raise ValueError("no scripts to check")
    exe = tool("shellcheck")
    proc = subprocess.run(
        [str(exe), "--norc", "--format=gcc", *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return proc.returncode, proc.stdout + proc.stderr


# --------------------------------------------------------------------------
# systemd-analyze security


def systemd_security(path: Path) -> tuple[float, str]:
    """``systemd-analyze security --offline=true FILE``: (overall exposure, full report).

    Offline mode (systemd >= 250) scores the unit file itself, without a
    running manager; 0.0 is fully sandboxed, 10.0 fully exposed, and systemd
    calls up to 4.9 "OK".  The file is copied to a name ending in
    ``.service`` as systemd requires.
    """
    analyze = tool("systemd-analyze")
    with tempfile.TemporaryDirectory(prefix="layoutgen-security-") as tmp:
        unit = Path(tmp) / path.name
        shutil.copyfile(path, unit)
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "LC_ALL": "C.UTF-8",
            "SYSTEMD_LOG_COLOR": "0",
            "SYSTEMD_PAGER": "cat",
            "SYSTEMD_COLORS": "0",
        }
        proc = subprocess.run(
            [str(analyze), "security", "--offline=true", "--no-pager", str(unit)],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
    report = proc.stdout + proc.stderr
    marker = "Overall exposure level for"
    line = next((ln for ln in report.splitlines() if marker in ln), None)
    if line is None:
        raise RuntimeError(f"systemd-analyze security gave no score for {path}:\n{report}")
    return float(line.split(":", 1)[1].split()[0]), report
