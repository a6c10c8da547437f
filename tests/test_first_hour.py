"""Defaults and wording a new user meets first (issue 15 item 8)."""

from __future__ import annotations

import re
from pathlib import Path

from layoutgen.render.validate import validate_file

from conftest import ROOT, run_cli
from specs import VALID


def _spec(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    return path


EMBED = """\
  embed:
    model: coder
    runtime: ik
    role: embedding
    port: 8002
    ctx: 8192
"""


def test_an_embedding_service_defaults_to_one_gpu_the_roomiest(tmp_path: Path) -> None:
    text = VALID.replace("reserve: 1GiB}\n    - {id: gpu1", "reserve: 9GiB}\n    - {id: gpu1")
    assert text != VALID
    v = validate_file(_spec(tmp_path, text + EMBED))
    embed = next(r for r in v.services if r.name == "embed")
    assert embed.gpus == ("gpu1",)  # gpu0 keeps 9 GiB back, gpu1 1 GiB
    assert "role embedding: one GPU" in embed.origins["gpus"].why


def test_help_shows_each_argument_once_without_nested_brackets() -> None:
    for command in ("validate", "render", "plan", "diff", "calibrate", "import"):
        text = run_cli([command, "--help"]).stdout
        usage = text.splitlines()[0]
        assert "...]" not in usage and "[[" not in usage and "{SPEC...}" not in usage, usage
        assert not re.search(r"SPEC\.\.\. <", text), text


def test_format_errors_are_worded_one_way(tmp_path: Path) -> None:
    spec = _spec(tmp_path, VALID)
    bad = [
        run_cli([c, "--format", "x", str(spec), *extra])
        for c, extra in (
            ("validate", []),
            ("diff", [str(spec)]),
        )
    ]
    assert [r.code for r in bad] == [2, 2]
    lines = [r.stderr.strip().splitlines()[-1] for r in bad]
    assert all(
        re.fullmatch(r"Error: Invalid value for '--format': .*'x' is not one of .*", x)
        for x in lines
    ), lines


def test_explain_names_the_role_once(tmp_path: Path) -> None:
    result = run_cli(["validate", "--explain", str(ROOT / "layouts" / "beelink-cpu-only.yaml")])
    text = result.stdout + result.stderr
    assert "(role batch: the CPU lane" in text
    assert "role: role" not in text


def test_expert_layers_list_gpus_before_host_ram(tmp_path: Path) -> None:
    # GPU ids that sort after "host" must still come first
    text = VALID.replace("gpu0", "rtx0").replace("gpu1", "rtx1")
    text = text.replace(
        "    role: orchestrator\n",
        "    role: orchestrator\n    experts: {mode: explicit, layers: {rtx0: [6], rtx1: [0-5]}}\n",
    )
    result = run_cli(["plan", str(_spec(tmp_path, text))])
    assert result.code == 0, result.stderr
    block = result.stdout.split("grandpa: expert layers\n", 1)[1].split("\n\n", 1)[0]
    where = [line.split()[0] for line in block.splitlines()]  # "host RAM" -> "host"
    assert where[-1] == "host" and where.count("host") == 1 and "rtx0" in where, block


def test_a_missing_templates_directory_is_named_as_such(tmp_path: Path) -> None:
    result = run_cli(
        [
            "render",
            "--templates",
            str(tmp_path / "nope"),
            "-o",
            str(tmp_path / "out"),
            str(_spec(tmp_path, VALID)),
        ]
    )
    assert result.code == 1
    assert f"{tmp_path / 'nope'}: no such directory (--templates)" in result.stderr
