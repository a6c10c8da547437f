"""What import reads besides text: broken and hostile podman inspect records,
processes, scripts; each gives one error, located where it can be, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from layoutgen.errors import LayoutgenError
from layoutgen.importer import import_text, sources
from layoutgen.spec import expansions

RUNNING = Path(__file__).parent / "import_running"


def error(source: str | None = None, **kw: object) -> str:
    with pytest.raises(LayoutgenError) as info:
        sources.read(source, **kw)  # type: ignore[arg-type]
    return str(info.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[{"Config": ', "x.json:1:13: error: not podman inspect JSON: Expecting value"),
        ("[]", "x.json: error: podman inspect printed 0 records: import one container at a time"),
        (
            '[{"Config": {}}, {"Config": {}}]',
            "x.json: error: podman inspect printed 2 records: import one container at a time",
        ),
        ('{"Name": "x"}', "x.json: error: not a podman inspect record of a container: no Config"),
        (
            '{"Config": {"Cmd": ["-m", "/m/a.gguf"]}}',
            "x.json: error: the record names no image (ImageName, Config.Image)",
        ),
    ],
)
def test_broken_inspect_records(
    text: str, message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "x.json"
    path.write_text(text)
    monkeypatch.chdir(tmp_path)
    assert error("x.json").startswith(message)


def test_an_inspect_record_keeps_what_the_server_received(tmp_path: Path) -> None:
    """podman passes Cmd to the server without a shell: a Cmd holding '$OT_ARGS' gave
    the server that text, which import keeps (and validate then refuses, located)."""
    record = json.loads((RUNNING / "seed001-config5-grandpa.inspect.json").read_text())
    record[0]["Config"]["Cmd"] = ["-m", "/models/a.gguf", "--alias", "$OT_ARGS"]
    (tmp_path / "x.json").write_text(json.dumps(record))
    given = sources.read(str(tmp_path / "x.json"))
    imported = import_text(given.text, given.label)
    assert "- $OT_ARGS" in imported.yaml
    assert expansions.shell_expansion("$OT_ARGS") == "$OT_ARGS"


def test_a_script_that_starts_nothing(tmp_path: Path) -> None:
    script = tmp_path / "s.sh"
    script.write_text("echo hello >&2\nexit 3\n")
    assert error(shell=script) == (
        f"{script} (as run): error: the script ran (exit status 3) and called none of "
        "podman, docker, llama-server, vllm: hello"
    )


def test_a_script_that_only_stops_containers(tmp_path: Path) -> None:
    script = tmp_path / "s.sh"
    script.write_text("podman stop grandpa\npodman rm grandpa\n")
    assert "none of the calls starts a server" in error(shell=script)


def test_both_a_source_and_a_script(tmp_path: Path) -> None:
    script = tmp_path / "s.sh"
    script.write_text("llama-server -m /m/a.gguf\n")
    assert "give either --shell FILE or a SOURCE, not both" in error("x.sh", shell=script)


def test_an_odd_name_is_no_container(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert error("../no such thing") == (
        "../no such thing: error: cannot read: no such file, process id or container name"
    )


def test_cli_says_the_script_runs(tmp_path: Path) -> None:
    from conftest import run_cli

    script = tmp_path / "start.sh"
    script.write_text("for n in 1 2; do A=\"$A -ot blk.$n.ffn_up_exps=CPU\"; done\n"
                      "llama-server -m /m/a.gguf -c 8 -ngl 99 $A\n")  # fmt: skip
    result = run_cli(["import", "--shell", str(script)])
    assert result.code == 0, result.stderr
    assert result.stderr.startswith(
        f"note: running {script} with recorders in place of podman, docker, llama-server and vllm\n"
    )
    assert "- {pattern: blk.2.ffn_up_exps, device: host}" in result.stdout
    assert f"# read from {script}, run with recorders: what it would have started:" in (
        result.stdout
    )


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("Config", "Env"), {"A": 1}),
        (("Config", "Cmd"), [1, "-m", None, "/models/a.gguf"]),
        (("HostConfig", "Devices"), [{"PathOnHost": 5}, "x"]),
        (("HostConfig", "PortBindings"), {"8000/tcp": "8000"}),
        (("Mounts",), [{"Type": "bind", "Destination": 7}]),
        (("HostConfig",), "none"),
    ],
)
def test_an_inspect_record_of_the_wrong_shape_is_read_without_a_traceback(
    path: tuple[str, ...], value: object, tmp_path: Path
) -> None:
    record = json.loads((RUNNING / "seed001-config5-grandpa.inspect.json").read_text())
    target = record[0]
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    (tmp_path / "x.json").write_text(json.dumps(record))
    try:
        given = sources.read(str(tmp_path / "x.json"))
        import_text(given.text, given.label)
    except LayoutgenError as exc:  # refused, with a message, is fine
        assert str(exc)
