"""Shell and systemd expansions: an error on import from text, refused by validate.

Seed 001's configuration 5 and seed 003 build their ``-ot`` flags in a shell
loop (``$OT_ARGS``); read from text, that word is not what the server got.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from layoutgen.errors import LayoutgenError
from layoutgen.importer import import_text
from layoutgen.render.validate import validate_files
from layoutgen.spec import expansions

from specs import VALID, write

DATA = Path(__file__).parent / "import"
WAYS = (
    "import what really runs: a running container (layoutgen import CONTAINER, or the JSON "
    "'podman inspect CONTAINER' prints), a running process (layoutgen import PID), or the "
    "script itself (layoutgen import --shell FILE: the script runs with podman, docker, "
    "llama-server and vllm replaced by recorders, so nothing starts)"
)


def import_error(text: str, source: str = "cmd.sh") -> str:
    with pytest.raises(LayoutgenError) as info:
        import_text(text, source)
    return str(info.value)


def test_seed_loops_are_refused_naming_the_variable_and_the_ways() -> None:
    path = DATA / "seed001-glm51-2gpu-ot-args-loop.podman"
    message = import_error(path.read_text(), path.name)
    assert message == (
        f"{path.name}:23:13: error: '$OT_ARGS' holds the shell variable '$OT_ARGS', which "
        "import cannot evaluate from text (the shell replaces it before the program starts, "
        f"possibly by several arguments); {WAYS}"
    )
    path = DATA / "seed003-glm51-64k-launch.podman"
    assert import_error(path.read_text(), path.name).startswith(
        f"{path.name}:12:1: error: '$OT_ARGS' holds the shell variable '$OT_ARGS'"
    )


@pytest.mark.parametrize(
    ("word", "col", "what"),
    [
        ("${N}", 35, "variable '${N}'"),
        ("$(nproc)", 35, "command substitution '$(nproc)'"),
        ("`nproc`", 35, "command substitution '`nproc`'"),
        ('"x$HOME"', 35, "variable '$HOME'"),
        ("$1", 35, "variable '$1'"),
    ],
)
def test_every_kind_of_expansion_is_an_error(word: str, col: int, what: str) -> None:
    message = import_error(f"llama-server -m /m/a.gguf -t 4 -a {word} -c 8")
    assert message.startswith(f"cmd.sh:1:{col}: error: ")
    assert f"holds the shell {what}, which import cannot evaluate" in message


def test_every_word_with_an_expansion_is_located() -> None:
    message = import_error("llama-server -m $M\n  -c 8 -ot $OT -ngl 99\n")
    assert [line.split(" error")[0] for line in message.splitlines()] == [
        "cmd.sh:1:17:",
        "cmd.sh:2:12:",
    ]


def test_assigned_values_and_arithmetic_are_evaluated() -> None:
    imported = import_text("M=/m/a.gguf\nllama-server -m $M -c $((4096*2))\n")
    assert "path: /m/a.gguf" in imported.yaml and "ctx: 8192" in imported.yaml


def test_a_unit_expands_the_specifiers_its_file_name_decides() -> None:
    unit = "[Service]\nExecStart=/usr/bin/llama-server -m /m/a.gguf -c 8 --log-file /l/%n.%i.log\n"
    imported = import_text(unit, "/etc/systemd/system/llm@coder.service")
    assert "- /l/llm@coder.service.coder.log" in imported.yaml
    message = import_error(unit.replace("%i", "%h"), "llm.service")
    assert message.startswith(
        "llm.service:2:62: error: '/l/%n.%h.log' holds the systemd specifier %h, which "
        "depends on the host systemd runs it on; import what really runs: "
    )


def _spec_with_args(tmp: Path, *args: str) -> str:
    """validate's diagnostics for the test spec with these args, each item's line
    written as ``@N`` (item N's line) so the expectations do not move with the spec."""
    items = "".join(f"\n      - {a!r}" for a in args)
    text = VALID.replace("    threads: 15\n", f"    threads: 15\n    args:{items}\n", 1)
    first = text.splitlines().index(f"      - {args[0]!r}") + 1
    path = write(tmp, text)
    (result,) = validate_files([(path, "spec.yaml")])
    out = "\n".join(d.gcc() for d in result.diagnostics)
    for n in range(len(args)):
        out = out.replace(f"spec.yaml:{first + n}:", f"spec.yaml:@{n}:")
    return out


def test_validate_refuses_expansions_in_args_located(tmp_path: Path) -> None:
    out = _spec_with_args(tmp_path, "--jinja", "$OT_ARGS", "--alias", "$(hostname)", "-a", "%h")
    assert (
        "spec.yaml:@1:9: error: services.grandpa.args[1]: '$OT_ARGS' holds the shell "
        "variable '$OT_ARGS'; layoutgen passes every args item to the server as written, so "
        "it would receive '$OT_ARGS' itself: write the arguments it stands for (tensor "
        f"placement goes in tensor_overrides:), or {WAYS}"
    ) in out.splitlines()
    assert (
        "spec.yaml:@3:9: error: services.grandpa.args[3]: '$(hostname)' holds the shell "
        "command substitution '$(hostname)'" in out
    )
    assert (
        "spec.yaml:@5:9: error: services.grandpa.args[5]: '%h' holds the systemd specifier "
        "%h; layoutgen writes args so that systemd expands nothing, so the server would "
        "receive %h itself: write the value it stands for"
    ) in out.splitlines()
    assert out.count(" holds the ") == 3  # one per item (closed-world flag checks may add more)


@pytest.mark.parametrize("arg", ["`id`", "${HOME}", "x$Y", "$@"])
def test_validate_refuses_each_shell_form(tmp_path: Path, arg: str) -> None:
    assert "holds the shell" in _spec_with_args(tmp_path, "--alias", arg)


@pytest.mark.parametrize("arg", ["100%", "50%%", "a$", "exps$=CPU", "US$", "x=$"])
def test_what_expands_nothing_is_not_an_expansion(arg: str) -> None:
    assert expansions.shell_expansion(arg) is None and expansions.specifier(arg) is None
