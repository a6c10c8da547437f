"""The validate and schema commands: output forms and exit codes (docs/reference/cli.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import run_cli
from specs import VALID, write


def line_of(text: str, needle: str) -> int:
    """1-based line of the first line containing needle: where a diagnostic must point."""
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def test_valid_spec_exits_0_and_summarises(tmp_path: Path) -> None:
    spec = write(tmp_path)
    result = run_cli(["validate", str(spec)])
    assert result.code == 0
    assert result.stdout == ""
    assert result.stderr == f"{spec}: valid (2 services)\n"


def test_every_file_is_checked_and_any_failure_exits_1(tmp_path: Path) -> None:
    good = write(tmp_path)
    bad = write(tmp_path, VALID.replace("ctx: 32768", "ctx: many"), "bad.yaml")
    result = run_cli(["validate", str(bad), str(good)])
    assert result.code == 1
    assert result.stdout == (
        f"{bad}:{line_of(VALID, 'ctx: 32768')}:10: error: services.grandpa.ctx: "
        "expected a whole number, got 'many'\n"
    )
    assert result.stderr == f"{bad}: invalid (1 error)\n{good}: valid (2 services)\n"


def test_github_format(tmp_path: Path) -> None:
    bad = write(tmp_path, VALID.replace("port: 8001", "port: 8000"))
    result = run_cli(["validate", "--format", "github", str(bad)])
    assert result.code == 1
    assert result.stdout == (
        f"::error file={bad},line={line_of(VALID, 'port: 8001')},col=11::services.worker0.port: "
        "port 8000 is already used "
        "by service 'grandpa'; ports must be unique on host 'compute'\n"
    )


def test_warnings_do_not_fail(tmp_path: Path) -> None:
    spec = write(
        tmp_path, VALID.replace("    threads: 15\n", "    threads: 15\n    expose: true\n")
    )
    result = run_cli(["validate", str(spec)])
    assert result.code == 0
    line = line_of(spec.read_text(), "expose: true")
    assert result.stdout.startswith(f"{spec}:{line}:13: warning: services.grandpa.expose:")
    assert result.stderr == f"{spec}: valid (2 services, 1 warning)\n"


def test_explain(tmp_path: Path) -> None:
    result = run_cli(["validate", "--explain", str(write(tmp_path))])
    assert result.code == 0
    assert "service worker0 (role worker):" in result.stdout
    assert "  parallel = 2  (role worker: seed 001 found" in result.stdout


def test_missing_file_is_an_error_not_a_traceback(tmp_path: Path) -> None:
    result = run_cli(["validate", str(tmp_path / "nope.yaml")])
    assert result.code == 1
    assert result.stdout == f"{tmp_path / 'nope.yaml'}: error: no such file\n"


def test_usage_errors_exit_2() -> None:
    assert run_cli(["validate"]).code == 2
    assert run_cli(["validate", "--bogus", "x.yaml"]).code == 2
    assert run_cli(["validate", "--format", "xml", "x.yaml"]).code == 2


def test_schema_is_json_schema_of_the_spec() -> None:
    result = run_cli(["schema"])
    assert result.code == 0
    schema = json.loads(result.stdout)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert set(schema["required"]) == {"host"}
    assert schema["additionalProperties"] is False
    service = schema["$defs"]["Service"]
    assert {"model", "runtime", "role", "port", "ctx"} <= set(service["required"])


def test_console_script_runs(tmp_path: Path) -> None:
    """The installed entry point, as users run it (a real process)."""
    exe = Path(sys.executable).parent / "layoutgen"
    proc = subprocess.run(
        [str(exe), "validate", str(write(tmp_path))], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr


def test_specs_of_one_host_share_its_ports(tmp_path: Path) -> None:
    first = write(tmp_path, name="a.yaml")
    # The same host, another file, a different service on a port already taken
    # (on gpu1, so that the two specs fit the host together).
    head, _, services = VALID.partition("  grandpa:\n")
    worker = services.partition("  worker0:\n")[2].replace("gpus: [gpu0]", "gpus: [gpu1]")
    text = head + "  worker9:\n" + worker
    second = write(tmp_path, text, "b.yaml")
    result = run_cli(["validate", str(first), str(second)])
    assert result.code == 1
    assert result.stdout == (
        f"{second}:{line_of(text, 'port: 8001')}:11: error: services.worker9.port: "
        "port 8001 is already used by service "
        f"'worker0' of host 'compute' in {first}\n"
    )
    # Another host may use the same ports.
    third = write(tmp_path, VALID.replace("name: compute", "name: tower"), "c.yaml")
    assert run_cli(["validate", str(first), str(third)]).code == 0


def test_validate_accepts_model_profiles_too() -> None:
    from conftest import ROOT

    profile = ROOT / "layouts" / "models" / "qwen3-coder-next-q4_0.yaml"
    result = run_cli(["validate", str(profile)])
    assert result.code == 0
    assert result.stderr == f"{profile}: valid (model profile)\n"
    broken = ROOT / "tests" / "cases" / "profiles" / "broken.yaml"
    result = run_cli(["validate", str(broken)])
    assert result.code == 1 and "tensors[0].bytes: 1 does not match q8_0" in result.stdout


def test_render_defaults_to_the_layouts_here(tmp_path: Path, monkeypatch: object) -> None:
    import pytest

    assert isinstance(monkeypatch, pytest.MonkeyPatch)
    monkeypatch.chdir(tmp_path)
    assert run_cli(["render", "--check"]).code == 2  # usage: nothing to render here
    (tmp_path / "layouts").mkdir()
    write(tmp_path / "layouts", name="one.yaml")
    assert run_cli(["render"]).code == 0
    assert (tmp_path / "out" / "compute" / "plan.json").is_file()
    assert run_cli(["render", "--check"]).code == 0


def test_schema_profile_prints_the_committed_profile_schema() -> None:
    """Issue 15 item 5: a profile kept outside the repository gets its schema from
    the tool: `layoutgen schema --profile > profile.schema.json`."""
    from conftest import ROOT

    result = run_cli(["schema", "--profile"])
    assert result.code == 0
    committed = (ROOT / "layouts" / "schema" / "profile.schema.json").read_text()
    assert json.loads(result.stdout) == json.loads(committed)
    assert json.loads(run_cli(["schema"]).stdout)["title"] == "layoutgen spec"
