"""Find the server command a user pasted: a shell line, ``podman run``, a quadlet or a unit
(llama.cpp's programs, ``vllm serve``, ``python -m vllm.entrypoints.openai.api_server``).

Why a tokenizer of our own rather than :func:`shlex.split`: an error must say
where (``file:line:col`` of the word), and pasted commands carry what shlex
splits wrongly: ``$(...)`` with quotes and pipes inside, ``2>&1 | tee``,
earlier ``model=...`` lines whose ``"$model"`` the command uses.  Words follow
POSIX ``sh`` quoting (what :func:`shlex.split` does in posix mode); shell
expansions are never run: a ``$NAME`` assigned earlier in the same text with a
plain value is substituted, ``$((512))`` is evaluated; a word that still holds an
expansion is refused (:func:`check_expanded`), since what the program received
is not in the text: :mod:`layoutgen.importer.sources` imports what runs instead.

The result is plain data (:class:`Command`); what the flags mean is
:mod:`layoutgen.importer.tospec`'s business.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field, replace
from pathlib import PurePath
from typing import Literal

from layoutgen.errors import Diagnostic, InvalidInput, Severity, printable
from layoutgen.inputs.literals import clip
from layoutgen.spec.expansions import WHAT_RUNS, describe


def _names(text: str) -> frozenset[str]:
    """A set of names written as one whitespace-separated string (tables stay compact)."""
    return frozenset(text.split())


SourceKind = Literal["shell", "podman", "quadlet", "systemd"]

#: Programs of llama.cpp and ik_llama.cpp (``./main``/``./server`` before the rename).
_LLAMA = re.compile(r"(?:ik_)?llama-[a-z0-9][a-z0-9_-]*")
_OLD_NAMES = ("main", "server")
_ENGINES = ("podman", "docker")
#: Programs that run another program given later on their line.
WRAPPERS = _names(
    """
    numactl taskset nice env sudo stdbuf chrt nohup time exec ionice systemd-run doas
    unbuffer setsid
    """
)
_ASSIGN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_WINDOWS_PATH = re.compile(r"(?:[A-Za-z]:|\.{1,2})\\")
_PLACEHOLDER = re.compile(r"<[^\s<>|;&'\"]+>(?=[\s]|$)")
_REDIRECT = re.compile(r"\d*(?:>>|>&|<&|&>|>\||<<|>|<)")
#: characters a word takes as they are (quotes, escapes, expansions and word ends aside)
_SHELL_RUN = re.compile(r"[^\s'\"\\$`|&;<>]+")
_UNIT_RUN = re.compile(r"[^\s'\"\\$`]+")
_ARITH = re.compile(r"\s*\d+(?:\s*[-+*]\s*\d+)*\s*")


class UnreadableCommand(InvalidInput):
    """The pasted text holds no llama.cpp command layoutgen can read.

    Raised with one located diagnostic (the word at fault), so the CLI prints
    it like any other input error.
    """


@dataclass(frozen=True)
class Word:
    """One shell word after quote removal, and where it starts in the pasted text (1-based)."""

    text: str
    line: int
    col: int
    #: why the word may not be what the shell would pass: expansions kept as written, ...
    notes: tuple[str, ...] = ()
    #: written as NAME=value with an unquoted name (a shell variable assignment)
    assigns: bool = False
    #: shell expansions left as written ($NAME, ${...}, $(...), backticks): the shell
    #: would have replaced them, so the text is not what the program received
    unexpanded: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Op:
    text: str
    line: int
    col: int


@dataclass(frozen=True)
class Env:
    name: str
    value: str
    word: Word


@dataclass(frozen=True)
class Port:
    """A published port: ``[HOST_IP:][HOST_PORT:]CONTAINER_PORT``."""

    host_ip: str
    host_port: str
    container_port: str
    word: Word


@dataclass(frozen=True)
class Volume:
    host: str
    container: str
    read_only: bool
    word: Word


@dataclass(frozen=True)
class Command:
    """The llama.cpp program found, its argument words, and the container around it, if any."""

    source: str
    kind: SourceKind
    program: str  # base name without .exe: llama-server, llama-sweep-bench, ...
    program_word: Word | None  # None: the image's entrypoint runs the server
    args: tuple[Word, ...]
    image: Word | None = None
    env: tuple[Env, ...] = ()
    ports: tuple[Port, ...] = ()
    volumes: tuple[Volume, ...] = ()
    devices: tuple[Word, ...] = ()
    capabilities: tuple[Word, ...] = ()
    container_name: str | None = None
    #: podman secrets: (name, where the container sees it)
    secrets: tuple[tuple[str, str], ...] = ()
    #: a unit's EnvironmentFile= paths (a leading '-': optional), where written
    env_files: tuple[Word, ...] = ()
    prefix: tuple[Word, ...] = ()  # wrappers before the program: numactl, taskset, ...
    warnings: tuple[Diagnostic, ...] = field(default=())
    #: settings of the container or unit the spec has no key for: (where, as written)
    dropped: tuple[tuple[Word, str], ...] = ()


# ------------------------------------------------------------------ lexer


class _Lexer:
    """POSIX sh words with positions; ``unit``: an ExecStart=/Exec= value (no operators)."""

    def __init__(
        self, text: str, source: str, *, unit: bool = False, env: dict[str, str] | None = None
    ) -> None:
        self.text = text
        self.source = source
        self.unit = unit
        self.vars: dict[str, str] = dict(env or {})
        self.starts = [0] + [m.end() for m in re.finditer("\n", text)]

    def where(self, i: int) -> tuple[int, int]:
        n = bisect.bisect_right(self.starts, i) - 1
        return n + 1, i - self.starts[n] + 1

    def fail(self, i: int, message: str) -> UnreadableCommand:
        line, col = self.where(i)
        return UnreadableCommand([Diagnostic(self.source, line, col, Severity.ERROR, message)])

    def tokens(self, start: int = 0, end: int | None = None) -> list[Word | _Op]:
        text, stop = self.text, len(self.text) if end is None else end
        out: list[Word | _Op] = []
        command: list[Word] = []
        i = start
        while i < stop:
            c = text[i]
            if c in " \t\r\f\v":
                i += 1
            elif c == "\\" and text.startswith("\n", i + 1):
                i += 2
            elif c == "\n":
                if self.unit:
                    break
                out.append(_Op("\n", *self.where(i)))
                self._assignments(command)
                command = []
                i += 1
            elif c == "#" and not self.unit:
                nl = text.find("\n", i)
                i = stop if nl < 0 or nl > stop else nl
            elif not self.unit and c in "|&;" and not _REDIRECT.match(text, i):
                op = text[i : i + 2] if text[i : i + 2] in ("||", "&&", ";;") else c
                out.append(_Op(op, *self.where(i)))
                self._assignments(command)
                command = []
                i += len(op)
            elif (
                not self.unit
                and (m := _REDIRECT.match(text, i))
                and not _PLACEHOLDER.match(text, i)
            ):
                out.append(_Op("redirect", *self.where(i)))
                i = m.end()
            else:
                word, i = self._word(i, stop)
                out.append(word)
                command.append(word)
        self._assignments(command)
        return out

    def _assignments(self, words: list[Word]) -> None:
        """Remember ``NAME=value`` lines; a value with an expansion left unevaluated is unknown."""
        if words and words[0].text in ("export", "readonly", "declare", "local"):
            words = words[1:]
        if not words or not all(w.assigns for w in words):
            return
        for w in words:
            name, _, value = w.text.partition("=")
            if w.notes:
                self.vars.pop(name, None)
            else:
                self.vars[name] = value

    def _word(self, i: int, stop: int) -> tuple[Word, int]:
        text, start = self.text, i
        ends = " \t\r\f\v\n" if self.unit else " \t\r\f\v\n|&;<>"
        windows = bool(_WINDOWS_PATH.match(text, i))
        placeholder = _PLACEHOLDER.match(text, i)
        if placeholder and not self.unit:
            line, col = self.where(i)
            return Word(placeholder.group(), line, col), placeholder.end()
        parts: list[str] = []
        notes: list[str] = []
        raws: list[str] = []
        if windows:
            notes.append("backslashes kept: a Windows path, which sh would have unescaped")
        run = _UNIT_RUN if self.unit else _SHELL_RUN
        while i < stop and text[i] not in ends:
            m = run.match(text, i, stop)
            if m is not None:  # a run of ordinary characters, taken at once
                parts.append(m.group())
                i = m.end()
                continue
            c = text[i]
            if c == "'":
                close = text.find("'", i + 1)
                if close < 0 or close >= stop:
                    raise self.fail(i, "unbalanced quote: this ' is never closed; close it")
                parts.append(text[i + 1 : close])
                i = close + 1
            elif c == '"':
                i = self._double(i, stop, parts, notes, raws)
            elif c == "\\":
                if i + 1 >= stop:
                    i += 1
                elif text[i + 1] == "\n":
                    i += 2
                elif windows:
                    parts.append("\\")
                    i += 1
                else:
                    parts.append(text[i + 1])
                    i += 2
            elif c == "$" or c == "`":
                i = self._expansion(i, stop, parts, notes, raws)
            else:
                parts.append(c)
                i += 1
        line, col = self.where(start)
        assigns = bool(_ASSIGN.match(text, start))
        return Word("".join(parts), line, col, tuple(notes), assigns, tuple(raws)), i

    def _double(
        self, i: int, stop: int, parts: list[str], notes: list[str], raws: list[str]
    ) -> int:
        text, open_at = self.text, i
        i += 1
        while i < stop:
            c = text[i]
            if c == '"':
                return i + 1
            if c == "\\" and i + 1 < stop and text[i + 1] in '$`"\\\n':
                if text[i + 1] != "\n":
                    parts.append(text[i + 1])
                i += 2
            elif c == "$" or c == "`":
                i = self._expansion(i, stop, parts, notes, raws)
            else:
                parts.append(c)
                i += 1
        raise self.fail(open_at, 'unbalanced quote: this " is never closed; close it')

    def _expansion(
        self, i: int, stop: int, parts: list[str], notes: list[str], raws: list[str]
    ) -> int:
        text = self.text
        if text[i] == "`":
            end = self._closing(i + 1, stop, "`", i)
        elif text.startswith("$((", i):
            end = self._closing(i + 2, stop, ")", i)
            inner = text[i + 3 : end - 2]
            if _ARITH.fullmatch(inner) and text.startswith("))", end - 2):
                parts.append(str(_arith(inner)))
                return end
        elif text.startswith("$(", i):
            end = self._closing(i + 2, stop, ")", i)
        elif text.startswith("${", i):
            close = text.find("}", i + 2)
            if close < 0 or close >= stop:
                raise self.fail(i, "unbalanced ${: this ${ is never closed with }")
            end = close + 1
            name = text[i + 2 : close]
            if name in self.vars:
                parts.append(self.vars[name])
                return end
        else:
            m = re.compile(r"\$(?:([A-Za-z_][A-Za-z0-9_]*)|[0-9@*#?$!-])").match(text, i)
            if m is None:
                parts.append("$")  # a lone $ is itself
                return i + 1
            end = m.end()
            if m.group(1) in self.vars:
                parts.append(self.vars[m.group(1)])
                return end
        raw = text[i:end]
        parts.append(raw)
        raws.append(raw)
        notes.append(f"shell expansion {clip(raw)} not evaluated: kept as written")
        return end

    def _closing(self, i: int, stop: int, close: str, open_at: int) -> int:
        """Index just past the ``close`` that ends an expansion opened at ``open_at``."""
        text, depth = self.text, 0
        while i < stop:
            c = text[i]
            if c == "\\":
                i += 2
                continue
            if c == "'" and close == ")":
                q = text.find("'", i + 1)
                i = stop if q < 0 else q + 1
                continue
            if c == "(" and close == ")":
                depth += 1
            elif c == close:
                if depth == 0:
                    return i + 1
                depth -= 1
            i += 1
        what = text[open_at : open_at + 2]
        raise self.fail(open_at, f"unbalanced {what}: it is never closed with {close}")


def _arith(expr: str) -> int:
    """``$((N))`` with + - * of integers, as sh computes it."""
    total, sign = 0, 1
    for term in re.split(r"([-+])", expr.replace(" ", "").replace("\t", "")):
        if term in "+-":
            sign = -1 if term == "-" else 1
            continue
        product = 1
        for factor in term.split("*"):
            product *= int(factor[:18])  # at most 18 digits per factor: no giant numbers
        total += sign * product
    return total


# ---------------------------------------------------------------- commands


def _commands(tokens: list[Word | _Op]) -> list[list[Word]]:
    """Simple commands, redirections dropped; ``-x`` lines continue the one before them.

    A line that starts with an option cannot be a command of its own: it is
    a command pasted without its trailing backslashes (a PowerShell or chat
    paste), so it is joined to the previous line (and said so).
    """
    commands: list[list[Word]] = [[]]
    after_newline = False
    skip = False
    joined = False  # the current command already took a line without a backslash
    for tok in tokens:
        if isinstance(tok, _Op):
            if tok.text == "redirect":
                skip = True
                continue
            if commands[-1]:
                commands.append([])
            after_newline = tok.text == "\n"
            continue
        if skip:
            skip = False
            continue
        cur = commands[-1]
        if (
            not cur
            and after_newline
            and tok.text.startswith("-")
            and len(commands) > 1
            and tok.text != "-"
        ):
            commands.pop()
            if not joined:
                note = "the line before has no trailing backslash; read as continuing it"
                tok = replace(tok, notes=(*tok.notes, note))
            joined = True
            cur = commands[-1]
        elif not cur:
            joined = False
        cur.append(tok)
        after_newline = False
    return [c for c in commands if c]


def program_name(word: str) -> str | None:
    """``llama-server`` for ``./build/bin/llama-server`` (``.exe`` dropped); None: not llama.cpp."""
    base = re.split(r"[/\\]", word)[-1]
    base = base[:-4] if base.lower().endswith(".exe") else base
    if _LLAMA.fullmatch(base) or (base in _OLD_NAMES and base != word):
        return base
    return None


def vllm_words(words: list[Word], i: int) -> int:
    """How many words starting at ``i`` name vLLM's server: 2 for ``vllm serve``, 3 for
    ``python -m vllm.entrypoints.openai.api_server``; 0: not vLLM."""
    base = re.split(r"[/\\]", words[i].text)[-1]
    nxt = [w.text for w in words[i + 1 : i + 3]]
    if base == "vllm" and nxt[:1] == ["serve"]:
        return 2
    if (
        re.fullmatch(r"python[0-9.]*", base)
        and nxt[:1] == ["-m"]
        and len(nxt) > 1
        and re.fullmatch(r"vllm\.entrypoints\.(?:openai\.)?api_server", nxt[1])
    ):
        return 3
    return 0


def _engine_at(words: list[Word], i: int) -> int | None:
    """Index of ``run`` if ``words[i]`` starts ``podman run`` / ``docker container run``."""
    if re.split(r"[/\\]", words[i].text)[-1] not in _ENGINES:
        return None
    j = i + 1
    while j < len(words) and words[j].text.startswith("-"):
        j += 1  # global options: --log-level=debug, --remote, ...
        if j < len(words) and words[j - 1].text in _ENGINE_GLOBAL_VALUE:
            j += 1
    if j < len(words) and words[j].text == "container":
        j += 1
    if j < len(words) and words[j].text == "run":
        return j
    return None


_ENGINE_GLOBAL_VALUE = _names(
    """
    --log-level --root --runroot --url --connection -c --identity --storage-driver
    --cgroup-manager --runtime -H --host --context --config
    """
)


def _find(commands: list[list[Word]], source: str) -> tuple[list[Word], int, bool, list[str]]:
    """The command to import, the index of its program (or of ``run``), and whether a container."""
    found: list[tuple[list[Word], int, bool, str]] = []
    for words in commands:
        for i, w in enumerate(words):
            run = _engine_at(words, i)
            if run is not None:
                found.append((words, run, True, "llama-server"))
                break
            name = program_name(w.text) or ("vllm" if vllm_words(words, i) else None)
            if name is not None:
                found.append((words, i, False, name))
                break
    if not found:
        first = commands[0][0] if commands else None
        message = (
            "no llama.cpp program in the input: expected a llama-server command line "
            "(llama-cli, llama-sweep-bench, ... also work), vllm serve, "
            "podman/docker run IMAGE ..., a quadlet .container or a systemd .service"
        )
        if first is None:
            raise UnreadableCommand([Diagnostic(source, 1, 1, Severity.ERROR, message)])
        message += f"; the first command is {clip(first.text)}"
        raise UnreadableCommand(
            [Diagnostic(source, first.line, first.col, Severity.ERROR, message)]
        )
    servers = [f for f in found if f[3] in ("llama-server", "vllm")]
    words, i, container, _ = (servers or found)[0]
    extra = []
    if len(found) > 1:
        w = words[i]
        extra.append(
            f"the input runs llama.cpp {len(found)} times; imported the command at "
            f"{w.line}:{w.col} ({clip(w.text)})"
        )
    return words, i, container, extra


def _note_warnings(source: str, words: tuple[Word, ...] | list[Word]) -> list[Diagnostic]:
    return [
        Diagnostic(source, w.line, w.col, Severity.WARNING, f"{clip(w.text)}: {note}")
        for w in words
        for note in w.notes
    ]


def _check_words(source: str, words: tuple[Word, ...] | list[Word]) -> None:
    """Control characters cannot reach a unit file or a spec string: refuse them here."""
    for w in words:
        bad = next((ch for ch in w.text if not ch.isprintable() and ch != " "), None)
        if bad is not None:
            message = (
                f"word {clip(printable(w.text))} holds the control character "
                f"{printable(bad)!s}; a server argument cannot carry it into a unit or "
                "script: remove it (a newline inside quotes splits nothing in a unit)"
            )
            raise UnreadableCommand([Diagnostic(source, w.line, w.col, Severity.ERROR, message)])


def _warn(source: str, w: Word, message: str) -> Diagnostic:
    return Diagnostic(source, w.line, w.col, Severity.WARNING, message)


def _from_words(
    words: list[Word], i: int, container: bool, source: str, kind: SourceKind
) -> Command:
    warnings: list[Diagnostic] = []
    env: list[Env] = []
    prefix: list[Word] = []
    wrapped = False
    for w in words[:i] if not container else _before_engine(words, i):
        if w.assigns:
            name, _, value = w.text.partition("=")
            env.append(Env(name, value, w))
        else:
            base = re.split(r"[/\\]", w.text)[-1]
            if not prefix and (base in WRAPPERS or re.fullmatch(r"python[0-9.]*", base)):
                wrapped = True  # python running vllm's script, as /proc shows it
            prefix.append(w)
    if prefix and not wrapped:
        shown = " ".join(p.text for p in prefix)
        warnings.append(
            _warn(
                source,
                prefix[0],
                f"ignored {clip(shown)} before the program: not a variable assignment "
                "or a known wrapper (a shell prompt?)",
            )
        )
        prefix = []
    if container:
        cmd = _container(words, i, source, kind)
        cmd = replace(cmd, env=(*env, *cmd.env), prefix=tuple(prefix))
    else:
        program = words[i]
        skip = vllm_words(words, i) or 1
        cmd = Command(
            source=source,
            kind=kind,
            program=program_name(program.text) or ("vllm" if skip > 1 else program.text),
            program_word=program,
            args=tuple(words[i + skip :]),
            env=tuple(env),
            prefix=tuple(prefix),
        )
    _check_words(source, cmd.args)
    check_expanded(cmd)
    warnings += _note_warnings(
        source, [*cmd.args, *([cmd.program_word] if cmd.program_word else [])]
    )
    return replace(cmd, warnings=(*cmd.warnings, *warnings))


def carried(cmd: Command) -> list[Word]:
    """The words whose text reaches the spec: the program, its arguments, the image,
    and the podman options layoutgen maps (volumes, devices, ports)."""
    words = [*cmd.args, *(w for w in (cmd.program_word, cmd.image) if w is not None)]
    words += [v.word for v in cmd.volumes] + [p.word for p in cmd.ports] + list(cmd.devices)
    return words


def check_expanded(cmd: Command) -> None:
    """Refuse a word that still holds a shell expansion: what the program received is
    not in the text (``$OT_ARGS`` may stand for 66 arguments), so importing the
    text as written would plan something other than what ran."""
    errors = [
        Diagnostic(
            cmd.source,
            w.line,
            w.col,
            Severity.ERROR,
            f"{clip(w.text)} holds the shell {describe(w.unexpanded[0])}, which import "
            "cannot evaluate from text (the shell replaces it before the program starts, "
            f"possibly by several arguments); import what really runs: {WHAT_RUNS}",
        )
        for w in carried(cmd)
        if w.unexpanded
    ]
    if errors:
        raise UnreadableCommand(errors)


def _before_engine(words: list[Word], run: int) -> list[Word]:
    engine = next(
        k for k in range(run, -1, -1) if re.split(r"[/\\]", words[k].text)[-1] in _ENGINES
    )
    return words[:engine]


# ------------------------------------------------------------ podman run

#: podman-run(1) / docker-run(1) options that take a value (the common ones).
RUN_VALUE = _names(
    """
    --name -p --publish -v --volume --device --gpus -e --env --env-file --security-opt --ipc
    --network --net --shm-size --cap-add --cap-drop --entrypoint -w --workdir -u --user -h
    --hostname -l --label --mount -m --memory --memory-swap --memory-reservation --cpus
    --cpuset-cpus --cpuset-mems --cpu-shares -c --cpu-period --cpu-quota --ulimit --restart
    --pull --platform --runtime --group-add --userns --annotation --pod --tmpfs --add-host
    --dns --dns-search --dns-option --log-driver --log-opt --stop-signal --stop-timeout
    --cidfile --secret --device-cgroup-rule --oom-score-adj --pids-limit --cgroupns
    --cgroups --sysctl --label-file --mac-address --ip --ip6 --uts --pid --arch --os
    --variant --expose --requires --sdnotify --timeout --umask --volumes-from --gidmap
    --uidmap --subuidname --subgidname --blkio-weight --health-cmd --health-interval
    --health-retries --health-start-period --health-timeout --init-path --log-level --attach
    -a --hooks-dir --chrootdirs --passwd-entry --group-entry --seccomp-policy --image-volume
    --decryption-key --conmon-pidfile --cgroup-parent --cgroup-conf --authfile --cert-dir
    --creds --device-read-bps --device-write-bps --gpus --workdir --stop-signal
    --detach-keys --tz --memory-swappiness --personality --preserve-fd --rdt-class --retry
    --retry-delay --shm-size-systemd
    """
)
#: options without a value; single letters combine (-it, -dit)
RUN_FLAGS = _names(
    """
    -d --detach --rm -i --interactive -t --tty --privileged --init --read-only --replace -P
    --publish-all --rmi -q --quiet --no-healthcheck --no-hosts --oom-kill-disable
    --read-only-tmpfs --sig-proxy --tls-verify --env-host --http-proxy --rootfs
    --preserve-fds --systemd --disable-content-trust
    """
)


#: run options that say how podman runs the container, not what it runs: not listed
_EPHEMERAL = _names("-d --detach --rm -i --interactive -t --tty --replace -q --quiet --name")
#: run options _from_options maps onto the spec
_MAPPED_OPTIONS = _names(
    "-p --publish -v --volume --mount -e --env --device --gpus --cap-add --name --entrypoint "
    "--secret"
)


def _container(words: list[Word], run: int, source: str, kind: SourceKind) -> Command:
    warnings: list[Diagnostic] = []
    opts: list[tuple[str, Word, Word]] = []  # (option, option word, value word)
    dropped: list[tuple[Word, str]] = []
    j = run + 1
    while j < len(words) and words[j].text.startswith("-") and words[j].text != "-":
        w = words[j]
        name, eq, value = w.text.partition("=")
        if eq and name.startswith("--"):
            opts.append((name, w, replace(w, text=value)))
            j += 1
        elif name in RUN_VALUE:
            if j + 1 >= len(words):
                raise _located(source, w, f"{name} needs a value, and the command ends here")
            opts.append((name, w, words[j + 1]))
            j += 2
        elif name in RUN_FLAGS or (
            re.fullmatch(r"-[a-zA-Z]+", name) and all(f"-{c}" in RUN_FLAGS for c in name[1:])
        ):
            flags = [name] if name in RUN_FLAGS else [f"-{c}" for c in name[1:]]
            if any(f not in _EPHEMERAL for f in flags):
                dropped.append((w, w.text))
            j += 1
        elif re.fullmatch(r"-[pvemhwlu].+", name):  # -p8000:8000, -eFOO=1
            opts.append((name[:2], w, replace(w, text=w.text[2:])))
            j += 1
        else:
            warnings.append(
                _warn(
                    source,
                    w,
                    f"unknown {words[run - 1].text} run option {clip(w.text)} ignored; "
                    "if it takes a value, write it as --option=value",
                )
            )
            j += 1
    if j >= len(words):
        at = words[run]
        raise _located(
            source,
            at,
            "podman run without an image: every option was read and no IMAGE word follows; "
            "write the image after the run options",
        )
    image = words[j]
    rest = words[j + 1 :]
    program: str
    program_word: Word | None
    for name, w, v in opts:
        if name not in _MAPPED_OPTIONS:
            dropped.append((w, w.text if w is v or w.text != name else f"{name} {v.text}"))
    base = _from_options(opts, source, warnings)
    entrypoint = next((v for o, _, v in reversed(opts) if o == "--entrypoint"), None)
    vllm_image = "vllm" in image.text.lower().split("@")[0]
    if rest and vllm_words(rest, 0):
        program, program_word, args = "vllm", rest[0], rest[vllm_words(rest, 0) :]
    elif vllm_image and (
        not rest or rest[0].text.startswith("-") or program_name(rest[0].text) is None
    ):
        # vLLM's images run the server as their entrypoint; a first word is the model
        program, program_word, args = "vllm", entrypoint, rest
    elif rest and not rest[0].text.startswith("-"):
        found = program_name(rest[0].text)
        if found is None:
            raise _located(
                source,
                rest[0],
                f"the command after the image, {clip(rest[0].text)}, is not a llama.cpp "
                "program: give llama-server and its arguments (or only the arguments when "
                "the image's entrypoint is llama-server)",
            )
        program = found
        program_word = rest[0]
        args = rest[1:]
    else:
        if not rest:
            warnings.append(
                _warn(
                    source,
                    image,
                    "no arguments after the image: the image's own command runs, which "
                    "layoutgen cannot see",
                )
            )
        program_word = entrypoint
        program = (program_name(entrypoint.text) if entrypoint else None) or "llama-server"
        args = rest
    return replace(
        base,
        source=source,
        kind=kind,
        program=program,
        program_word=program_word,
        args=tuple(args),
        image=image,
        warnings=tuple(warnings),
        dropped=tuple(sorted(dropped, key=lambda d: (d[0].line, d[0].col))),
    )


def _located(source: str, w: Word, message: str) -> UnreadableCommand:
    return UnreadableCommand([Diagnostic(source, w.line, w.col, Severity.ERROR, message)])


def _from_options(
    opts: list[tuple[str, Word, Word]], source: str, warnings: list[Diagnostic]
) -> Command:
    """Ports, volumes, devices, env and capabilities from run options (or quadlet keys)."""
    env: list[Env] = []
    ports: list[Port] = []
    volumes: list[Volume] = []
    devices: list[Word] = []
    caps: list[Word] = []
    secrets: list[tuple[str, str]] = []
    name = None
    for opt, _, v in opts:
        if opt in ("-p", "--publish"):
            parts = v.text.rsplit(":", 2)
            parts = ["", "", *parts][-3:]
            ports.append(Port(parts[0].strip("[]"), parts[1], parts[2].split("/")[0], v))
        elif opt in ("-v", "--volume"):
            src, _, rest = v.text.partition(":")
            dst, _, flags = rest.partition(":")
            volumes.append(Volume(src, dst or src, "ro" in flags.split(","), v))
        elif opt == "--mount":
            fields = dict(f.partition("=")[::2] for f in v.text.split(","))
            src = fields.get("source") or fields.get("src") or ""
            dst = fields.get("target") or fields.get("destination") or fields.get("dst") or ""
            ro = any(k in fields for k in ("readonly", "ro")) and fields.get(
                "readonly", fields.get("ro", "true")
            ) in ("", "true", "1")
            volumes.append(Volume(src, dst, ro, v))
        elif opt in ("-e", "--env"):
            key, eq, value = v.text.partition("=")
            if eq:
                env.append(Env(key, value, v))
            else:
                warnings.append(
                    _warn(source, v, f"-e {clip(key)} takes its value from the host: not known")
                )
        elif opt in ("--device", "--gpus"):
            devices.append(replace(v, text=v.text if opt == "--device" else f"gpus={v.text}"))
        elif opt == "--cap-add":
            caps += [replace(v, text=c.strip()) for c in v.text.split(",") if c.strip()]
        elif opt == "--name":
            name = v.text
        elif opt == "--secret":  # NAME[,type=mount][,target=PATH]
            secret, *parts = v.text.split(",")
            props = dict(f.partition("=")[::2] for f in parts)
            target = props.get("target") or f"/run/secrets/{secret}"
            if not target.startswith("/"):
                target = f"/run/secrets/{target}"
            secrets.append((secret, target))
    return Command(
        source=source,
        kind="podman",
        program="llama-server",
        program_word=None,
        args=(),
        env=tuple(env),
        ports=tuple(ports),
        volumes=tuple(volumes),
        devices=tuple(devices),
        capabilities=tuple(caps),
        container_name=name,
        secrets=tuple(secrets),
    )


# ------------------------------------------------------------- unit files

_QUADLET_OPTION = {
    "PublishPort": "--publish",
    "Volume": "--volume",
    "AddDevice": "--device",
    "ContainerName": "--name",
    "Entrypoint": "--entrypoint",
}


@dataclass(frozen=True)
class _Entry:
    section: str
    key: str
    start: int  # index of the value in the text
    end: int  # end of the logical line (continuations included)


def _entries(text: str) -> list[_Entry]:
    out: list[_Entry] = []
    section = ""
    i = 0
    while i < len(text):
        nl = text.find("\n", i)
        end = len(text) if nl < 0 else nl
        line = text[i:end].strip()
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
        elif line and line[0] not in "#;" and "=" in line:
            key = line.split("=", 1)[0].strip()
            start = text.index("=", i) + 1
            while end < len(text) and text[i:end].rstrip(" \t").endswith("\\"):
                nl = text.find("\n", end + 1)
                end = len(text) if nl < 0 else nl
            out.append(_Entry(section, key, start, end))
        i = end + 1
    return out


def _unit(text: str, source: str, kind: SourceKind) -> Command:
    entries = _entries(text)
    env: dict[str, str] = {}
    env_words: list[Env] = []
    warnings: list[Diagnostic] = []
    for e in entries:
        if e.key == "Environment" and e.section in ("Service", "Container"):
            lexer = _Lexer(text, source, unit=True)
            for w in lexer.tokens(e.start, e.end):
                if isinstance(w, Word) and "=" in w.text:
                    key, _, value = w.text.partition("=")
                    env[key] = value
                    env_words.append(Env(key, value, w))
    lexer = _Lexer(text, source, unit=True, env=env)

    def words(e: _Entry) -> list[Word]:
        return [w for w in lexer.tokens(e.start, e.end) if isinstance(w, Word)]

    if kind == "quadlet":
        container = [e for e in entries if e.section == "Container"]
        image = next((e for e in container if e.key == "Image"), None)
        if image is None or not words(image):
            raise UnreadableCommand(
                [
                    Diagnostic(
                        source,
                        1,
                        1,
                        Severity.ERROR,
                        "the [Container] section has no Image=: write Image=IMAGE",
                    )
                ]
            )
        image_word = words(image)[0]
        argv: list[Word] = [Word("podman", 0, 0), Word("run", image_word.line, image_word.col)]
        for e in container:
            if e.key in _QUADLET_OPTION:
                for w in words(e):
                    argv += [Word(_QUADLET_OPTION[e.key], w.line, w.col), w]
            elif e.key == "AddCapability":
                for w in words(e):
                    argv += [Word("--cap-add", w.line, w.col), w]
            elif e.key == "PodmanArgs":
                argv += words(e)
        argv.append(image_word)
        exec_ = next((e for e in reversed(container) if e.key == "Exec"), None)
        argv += words(exec_) if exec_ else []
        cmd = _from_words(argv, 1, True, source, kind)
    else:
        start = next((e for e in entries if e.section == "Service" and e.key == "ExecStart"), None)
        if start is None:
            raise UnreadableCommand(
                [
                    Diagnostic(
                        source,
                        1,
                        1,
                        Severity.ERROR,
                        "the unit has no [Service] ExecStart=: write the llama-server command "
                        "in ExecStart=",
                    )
                ]
            )
        prefix = re.match(r"\s*[-@+!:]*", text[start.start : start.end])
        start = replace(start, start=start.start + (prefix.end() if prefix else 0))
        found = words(start)
        words_, i, container_, extra = _find([found], source)
        cmd = _from_words(words_, i, container_, source, kind)
        warnings += [_warn(source, found[0], m) for m in extra]
    cmd, specifiers = _specifiers(cmd, source, kind)
    env_all = (*env_words, *cmd.env)
    dropped = list(cmd.dropped)
    env_files: list[Word] = []
    for e in entries:
        if (e.section, e.key) in (("Service", "EnvironmentFile"), ("Container", "EnvironmentFile")):
            value = text[e.start : e.end].strip()
            line, col = lexer.where(e.start)
            env_files.append(Word(value.removeprefix("-"), line, col))
            continue
        if (e.section, e.key) in _UNIT_READ or e.section in ("", "Install"):
            continue
        if e.section == "Unit" and e.key == "Description":
            continue
        value = text[e.start : e.end].replace("\\\n", " ").strip()
        line, col = lexer.where(e.start)
        at = Word(e.key, line, max(col - len(e.key) - 1, 1))
        shown = printable(value if len(value) <= 80 else value[:77] + "...")
        dropped.append((at, f"{e.key}={shown}"))
    return replace(
        cmd,
        env=env_all,
        warnings=(*cmd.warnings, *warnings, *specifiers),
        dropped=tuple(dropped),
        env_files=tuple(env_files),
    )


#: unit keys read into the command (everything else is listed as not carried over)
_UNIT_READ = frozenset(
    {
        ("Service", "ExecStart"),
        ("Service", "Environment"),
        ("Container", "Environment"),
        ("Container", "Image"),
        ("Container", "Exec"),
        ("Container", "PodmanArgs"),
        ("Container", "AddCapability"),
        *(("Container", k) for k in ("PublishPort", "Volume", "AddDevice", "ContainerName")),
        ("Container", "Entrypoint"),
    }
)


def _specifiers(cmd: Command, source: str, kind: SourceKind) -> tuple[Command, list[Diagnostic]]:
    """Expand the specifiers the unit's file name decides (%n %N %p %i %%), as systemd
    would; any other (%h, %t, %H, ...) depends on the host: an error."""
    name = PurePath(source).name
    if kind == "quadlet":
        name = PurePath(name).stem + ".service"
    stem = PurePath(name).stem
    prefix, at, instance = stem.partition("@")
    known = {"n": name, "N": stem, "p": prefix, "i": instance if at else "", "%": "%"}
    notes: list[Diagnostic] = []
    errors: list[Diagnostic] = []

    def expand(w: Word) -> Word:
        if "%" not in w.text:
            return w

        def one(m: re.Match[str]) -> str:
            letter = m.group(1)
            if letter in known:
                if letter != "%":
                    notes.append(
                        _warn(
                            source,
                            w,
                            f"{clip(w.text)}: systemd specifier %{letter} expanded to "
                            f"{clip(known[letter])}, from the unit's file name",
                        )
                    )
                return known[letter]
            errors.append(
                Diagnostic(
                    source,
                    w.line,
                    w.col,
                    Severity.ERROR,
                    f"{clip(w.text)} holds the systemd specifier %{letter}, which depends on "
                    f"the host systemd runs it on; import what really runs: {WHAT_RUNS}",
                )
            )
            return m.group()

        return replace(w, text=re.sub(r"%([A-Za-z%])", one, w.text))

    args = tuple(expand(w) for w in cmd.args)
    image = expand(cmd.image) if cmd.image is not None else None
    if errors:
        raise UnreadableCommand(errors)
    return replace(cmd, args=args, image=image), notes


# ------------------------------------------------------------------- entry


def read_command(text: str, source: str = "<stdin>", *, kind: SourceKind | None = None) -> Command:
    """The llama.cpp command in ``text``: a shell line, ``podman run``, a quadlet or a unit.

    ``kind`` is guessed from ``source``'s suffix (``.container``, ``.service``)
    or from a ``[Container]``/``[Service]`` section when not given.  Raises
    :class:`UnreadableCommand` with the line, column and word at fault.
    """
    text = text.replace("\r\n", "\n")
    if kind is None:
        kind = _guess_kind(text, source)
    if kind in ("quadlet", "systemd"):
        return _unit(text, source, kind)
    lexer = _Lexer(text, source)
    commands = _commands(lexer.tokens())
    words, i, container, extra = _find(commands, source)
    cmd = _from_words(words, i, container, source, "podman" if container else "shell")
    lead = cmd.program_word or cmd.image or words[0]
    return replace(cmd, warnings=(*cmd.warnings, *(_warn(source, lead, m) for m in extra)))


def _guess_kind(text: str, source: str) -> SourceKind:
    suffix = PurePath(source).suffix
    if suffix == ".container" or re.search(r"^\s*\[Container\]\s*$", text, re.M):
        return "quadlet"
    if suffix == ".service" or re.search(r"^\s*\[Service\]\s*$", text, re.M):
        return "systemd"
    return "shell"
