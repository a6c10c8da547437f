"""The real tools the renderer's tests rely on work here (DESIGN.md §9).

Also pins down, with podman 5.4's own quadlet generator, how ``Exec=`` (and
``PodmanArgs=``/``Environment=``) must be escaped so that the generated
``ExecStart=`` carries exactly the intended argv. A missing tool fails these
tests (``make tools`` installs them); nothing is skipped.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import realtools
from realtools import (
    ExecSyntaxError,
    parse_exec,
    quadlet_dryrun,
    shellcheck,
    systemd_argv,
    systemd_verify,
    tool,
)

IMAGE = "ghcr.io/ggml-org/llama.cpp:server-cuda"

# What `podman run` gets before the image in a minimal unit (podman 5.4.2, rootful).
PODMAN_PREFIX = [
    "/usr/bin/podman",
    "run",
    "--name",
    "systemd-%N",
    "--cidfile=%t/%N.cid",
    "--replace",
    "--rm",
    "--cgroups=split",
    "--sdnotify=conmon",
    "-d",
]


def quadlet_quote(arg: str) -> str:
    """Reference escaping of one argument for quadlet ``Exec=`` (podman 5.4).

    ``%`` -> ``%%`` and ``$`` -> ``$$`` (quadlet passes both through to
    ``ExecStart=``, where systemd resolves them), ``\\`` -> ``\\\\`` and
    ``"`` -> ``\\"`` (quadlet C-unescapes; any other backslash sequence drops
    the whole argument list), and double quotes around anything with
    whitespace or quotes. An empty argument or a lone ``;`` cannot be passed.
    """
    if arg == "" or arg == ";":
        raise ValueError(f"{arg!r} cannot pass through quadlet Exec=")
    out = arg.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("$", "$$")
    out = out.replace("\t", "\\t").replace("\n", "\\n")
    return f'"{out}"' if any(c in out for c in " '\"\\;") else out


def write_container(unit_dir: Path, name: str, body: str) -> Path:
    unit_dir.mkdir(parents=True, exist_ok=True)
    path = unit_dir / f"{name}.container"
    path.write_text(f"[Unit]\nDescription=test\n\n[Container]\nImage={IMAGE}\n{body}\n")
    return path


# ---------------------------------------------------------------------------
# the tools are there


@pytest.mark.parametrize("name", ["quadlet", "systemd-analyze", "shellcheck"])
def test_tool_is_installed(name: str) -> None:
    path = tool(name)  # raises with the `make tools` command if missing
    assert path.is_file()


def test_missing_tool_names_the_install_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAYOUTGEN_TOOLS", str(tmp_path / "empty"))
    with pytest.raises(RuntimeError, match=r"make -C \S+ tools"):
        tool("quadlet")
    with pytest.raises(ValueError):
        tool("podman")


def test_tools_dir_follows_the_script(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LAYOUTGEN_TOOLS", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", "/x/cache")
    assert realtools.tools_dir() == Path("/x/cache/layoutgen/tools")
    monkeypatch.setenv("LAYOUTGEN_TOOLS", "/y")
    assert realtools.tools_dir() == Path("/y")


def test_quadlet_is_podman_5_4() -> None:
    assert realtools.quadlet_version().startswith("5.4.")


# ---------------------------------------------------------------------------
# systemd_argv against systemd.service(5) and systemd's test-load-fragment.c


@pytest.mark.parametrize(
    ("value", "argv"),
    [
        ("/RValue r1", ["/RValue", "r1"]),
        ("/RValue///slashes r1///", ["/RValue///slashes", "r1///"]),
        ("@/RValue///slashes2 ///argv0 r1", ["///argv0", "r1"]),
        ("-@/RValue///slashes3 argv0a r1", ["argv0a", "r1"]),
        ("@-/RValue///slashes4 argv0b r1", ["argv0b", "r1"]),
        ("-/bin/true", ["/bin/true"]),
        ("+/bin/true x", ["/bin/true", "x"]),
        ("!!/bin/true x", ["/bin/true", "x"]),
        ("/bin/find \\;", ["/bin/find", ";"]),
        ("/sbin/find \\; /x", ["/sbin/find", ";", "/x"]),
        ("/bin/find \\073", ["/bin/find", ";"]),
        ('/bin/find ";"', ["/bin/find", ";"]),
        ('/sbin/find ";" /x', ["/sbin/find", ";", "/x"]),
        ('"/PATH WITH SPACES/daemon" -1 -2', ["/PATH WITH SPACES/daemon", "-1", "-2"]),
        ('"/PATH WITH SPACES/daemon -1 -2"', ["/PATH WITH SPACES/daemon -1 -2"]),
        ('"/PATH WITH SPACES/daemon" "-1" \'-2\'', ["/PATH WITH SPACES/daemon", "-1", "-2"]),
        ("\"/PATH\\sWITH\\sSPACES/daemon\" '-1 -2'", ["/PATH WITH SPACES/daemon", "-1 -2"]),
        ('"/PATH\\x20WITH\\x20SPACES/daemon" "-1 -2"', ["/PATH WITH SPACES/daemon", "-1 -2"]),
        ("/path\\s", ["/path "]),
        # systemd.service(5) "Command lines" examples
        ('/bin/echo "one" "two three"', ["/bin/echo", "one", "two three"]),
        ("/bin/echo one\\ttwo", ["/bin/echo", "one\ttwo"]),
        ("/bin/echo a\"b c\"d 'e f'g", ["/bin/echo", "ab cd", "e fg"]),
        ('/bin/echo "a\\\\b" \'c\\"d\'', ["/bin/echo", "a\\b", 'c"d']),
        ("/bin/echo \\u00e9 \\U0001F600 \\101", ["/bin/echo", "é", "😀", "A"]),
        ("/bin/echo 100%% %n %N", ["/bin/echo", "100%", "%n", "%N"]),
        ("/bin/echo $$HOME ${FOO} $FOO x$FOO", ["/bin/echo", "$HOME", "${FOO}", "$FOO", "x$FOO"]),
        (":/bin/echo $$HOME ${FOO}", ["/bin/echo", "$$HOME", "${FOO}"]),
        ("/bin/echo \\;x", None),  # unknown escape \; inside a word: systemd warns
    ],
)
def test_systemd_argv(value: str, argv: list[str] | None) -> None:
    if argv is None:
        with pytest.raises(ExecSyntaxError, match="unknown escape"):
            systemd_argv(value)
        assert systemd_argv(value, relaxed=True) == ["/bin/echo", "\\;x"]
    else:
        assert systemd_argv(value) == argv


def test_systemd_argv_environment() -> None:
    env = {"ONE": "one", "TWO": "'two a' two\\ b", "EMPTY": ""}
    argv = systemd_argv(
        "/bin/echo $ONE $TWO ${TWO} x${ONE}y $EMPTY $UNSET ${UNSET}z $$ONE", env=env
    )
    assert argv == [
        "/bin/echo",
        "one",
        "two a",
        "two b",
        "'two a' two\\ b",
        "xoney",
        "z",
        "$ONE",
    ]


@pytest.mark.parametrize(
    "value",
    [
        "",
        "   ",
        "-",
        "- /path",
        "@/RValue",
        "/RValue/ argv0 r1",
        "/path 'foo",
        "/path 'foo\\",
        "/path\\",
        "/bin/grep \\w",
        "/bin/echo %Z",
        "+!/bin/true",
        "relative/path x",
        "/a ; /b",
    ],
)
def test_systemd_argv_rejects(value: str) -> None:
    with pytest.raises(ExecSyntaxError):
        systemd_argv(value)


def test_parse_exec_multiple_commands() -> None:
    commands = parse_exec("-@/RValue argv0 r1 ; ; /goo/goo boo")
    assert [(c.path, c.argv, c.ignore_failure) for c in commands] == [
        ("/RValue", ("argv0", "r1"), True),
        ("/goo/goo", ("/goo/goo", "boo"), False),
    ]


# ---------------------------------------------------------------------------
# quadlet Exec= escaping, with the real podman 5.4 generator

INTENDED = [
    "/app/llama-server",
    "-ot",
    r"blk\.(3|4)\.ffn_up_exps=CUDA0",
    "-ot",
    r"blk\.(1[0-2]|[5-9])\.ffn_(up|gate|down)_exps=CUDA1",
    "--alias",
    "model with spaces",
    "--chat-template",
    'say "hi" it\'s {{ x }}',
    "--literal",
    "100% $HOME ${X} %n",
    "--sep",
    "a;b",
    "--tab",
    "a\tb",
    "--unicode",
    "é",
]


def test_quadlet_exec_roundtrip(tmp_path: Path) -> None:
    exec_line = " ".join(quadlet_quote(a) for a in INTENDED)
    write_container(tmp_path, "llm", f"Exec={exec_line}")
    result = quadlet_dryrun(tmp_path)
    assert result.ok, result.stderr
    assert list(result.units) == ["llm.service"]
    # env={}: any $VAR left unescaped would vanish instead of staying literal
    argv = systemd_argv(result.exec_start("llm.service"), env={})
    assert argv[: len(PODMAN_PREFIX)] == PODMAN_PREFIX
    assert argv[-len(INTENDED) - 1 :] == [IMAGE, *INTENDED]
    # and systemd itself accepts the generated unit without a word
    unit = tmp_path / "out" / "llm.service"
    unit.parent.mkdir()
    unit.write_text(result.stdout.split("---llm.service---\n", 1)[1])
    assert systemd_verify([unit]) == (0, "")


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("Exec", r"/app/llama-server -ot blk\.3\.ffn_up_exps=CUDA0 --port 8080"),
        ("Exec", r"/app/llama-server -ot 'blk\.3'"),  # quotes do not help
        ("Exec", r"/app/llama-server --re \d+"),
        ("Exec", r"/app/llama-server \;"),  # valid for systemd, not for quadlet
        ("PodmanArgs", r"--label=a\.b --pids-limit=100"),
        ("Environment", r"A=1 B=x\.y"),
    ],
)
def test_quadlet_silently_drops_a_line_with_an_unknown_escape(
    tmp_path: Path, key: str, value: str
) -> None:
    """DESIGN.md §7: a lone ``\\.`` makes podman 5.4 drop the whole line, exit 0."""
    write_container(tmp_path, "drop", f"{key}={value}")
    result = quadlet_dryrun(tmp_path)
    assert result.ok, result.stderr  # no error, no warning...
    argv = systemd_argv(result.exec_start("drop.service"))
    assert argv == [*PODMAN_PREFIX, IMAGE]  # ...and nothing of the line is left


def test_quadlet_keeps_the_escaped_line(tmp_path: Path) -> None:
    write_container(
        tmp_path,
        "kept",
        "Exec=/app/llama-server -ot blk\\\\.3=CUDA0 -ot blk[.]4=CUDA0\n"
        "PodmanArgs=--label=a\\\\.b --pids-limit=100\n"
        'Environment=A=1 "B=x\\\\.y z"',
    )
    result = quadlet_dryrun(tmp_path)
    assert result.ok, result.stderr
    argv = systemd_argv(result.exec_start("kept.service"), env={})
    assert argv[argv.index(IMAGE) :] == [
        IMAGE,
        "/app/llama-server",
        "-ot",
        "blk\\.3=CUDA0",
        "-ot",
        "blk[.]4=CUDA0",
    ]
    assert argv[10:14] == ["--env", "A=1", "--env", "B=x\\.y z"]
    assert "--label=a\\.b" in argv and "--pids-limit=100" in argv


@pytest.mark.parametrize(("arg", "why"), [('""', "truncates"), ('";"', "splits the command")])
def test_quadlet_cannot_pass_empty_or_semicolon(tmp_path: Path, arg: str, why: str) -> None:
    write_container(tmp_path, "odd", f"Exec=/app/x {arg} y")
    result = quadlet_dryrun(tmp_path)
    assert result.ok, result.stderr
    exec_start = result.exec_start("odd.service")
    if why == "truncates":  # an empty word ends quadlet's argument list, silently
        assert systemd_argv(exec_start)[-2:] == [IMAGE, "/app/x"]
    else:  # quadlet writes a bare `;`: systemd reads two commands
        assert exec_start.endswith("/app/x ; y")
        with pytest.raises(ExecSyntaxError, match="2 commands"):
            systemd_argv(exec_start)
    with pytest.raises(ValueError):
        quadlet_quote(arg.strip('"'))


def test_quadlet_reports_errors_and_warnings(tmp_path: Path) -> None:
    write_container(tmp_path, "bad", "Bogus=1")
    result = quadlet_dryrun(tmp_path)
    assert result.rc == 1 and result.units == {}
    assert any("unsupported key 'Bogus'" in w for w in result.warnings)

    short = tmp_path / "short"
    short.mkdir()
    (short / "s.container").write_text("[Container]\nImage=busybox\n")
    result = quadlet_dryrun(short)
    assert result.rc == 0 and not result.ok
    assert any("not a fully qualified image name" in w for w in result.warnings)


@pytest.mark.parametrize(
    "key",
    [
        "AddCapability=IPC_LOCK",
        "DropCapability=ALL",
        "NoNewPrivileges=true",
        "ContainerName=llm-a",
        "AddDevice=nvidia.com/gpu=0",
        "PublishPort=127.0.0.1:8080:8080",
        "Volume=/srv/models:/models:ro,z",
        "Environment=LLAMA_ARG_X=1",
        "Secret=hf-token,type=env,target=HF_TOKEN",
        "Ulimit=memlock=-1:-1",
        "PodmanArgs=--shm-size=1g",
        "HealthCmd=curl -fsS http://127.0.0.1:8080/health",
        "Notify=healthy",
        "GroupAdd=keep-groups",
        "AddHost=example:127.0.0.1",
    ],
)
def test_quadlet_5_4_accepts_the_keys_we_render(tmp_path: Path, key: str) -> None:
    write_container(tmp_path, "k", key)
    result = quadlet_dryrun(tmp_path)
    assert result.ok, result.stderr
    assert realtools.QUADLET_CONTAINER_KEYS_SINCE[key.split("=", 1)[0]]


# ---------------------------------------------------------------------------
# systemd-analyze verify and shellcheck

GOOD_SERVICE = """\
[Unit]
Description=llama-server a
After=network-online.target
Wants=network-online.target

[Service]
ExecStart=/usr/bin/podman run --rm --name llm-a "blk\\\\.3=CUDA0"
ExecStartPost=/usr/local/bin/wait-healthy 127.0.0.1:8080
TimeoutStartSec=600
Restart=on-failure
LimitMEMLOCK=infinity

[Install]
WantedBy=multi-user.target
"""


def test_systemd_verify_passes_a_valid_service(tmp_path: Path) -> None:
    unit = tmp_path / "llm-a.service"
    unit.write_text(GOOD_SERVICE)
    assert systemd_verify([unit]) == (0, "")


@pytest.mark.parametrize(
    ("replace", "message"),
    [
        ("Restart=on-failure", "Unknown key 'Restartt'"),
        ("LimitMEMLOCK=infinity", "Failed to parse resource value"),
        ('"blk\\\\.3=CUDA0"', "Ignoring unknown escape sequences"),
    ],
)
def test_systemd_verify_warns_on_a_broken_service(
    tmp_path: Path, replace: str, message: str
) -> None:
    broken = {
        "Restart=on-failure": "Restartt=on-failure",
        "LimitMEMLOCK=infinity": "LimitMEMLOCK=lots",
        '"blk\\\\.3=CUDA0"': '"blk\\.3=CUDA0"',
    }[replace]
    unit = tmp_path / "llm-a.service"
    unit.write_text(GOOD_SERVICE.replace(replace, broken))
    _, stderr = systemd_verify([unit])
    assert message in stderr
    assert str(unit) in stderr  # paths point at the caller's file


def test_shellcheck(tmp_path: Path) -> None:
    clean = tmp_path / "clean.sh"
    clean.write_text('#!/usr/bin/env bash\nset -euo pipefail\necho "$1"\n')
    assert shellcheck([clean]) == (0, "")
    bad = tmp_path / "bad.sh"
    bad.write_text("#!/usr/bin/env bash\necho $1\n")
    rc, out = shellcheck([bad])
    assert rc != 0 and "SC2086" in out


def test_fetch_script_is_shellcheck_clean() -> None:
    assert shellcheck([realtools.FETCH_SCRIPT]) == (0, "")
