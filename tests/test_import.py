"""``layoutgen import``'s parsing half: real command lines in, spec fragments out.

Each file under tests/import/ is a command line copied verbatim from a seed
document or a public log (its first line names the source).  The placement
flags are checked against an independent reading of the same text with
:func:`shlex.split`, not against the importer's own tokens.
"""

from __future__ import annotations

import re
import shlex
import time
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from layoutgen.errors import LayoutgenError, Severity
from layoutgen.importer.cmdline import read_command
from layoutgen.importer.tospec import to_spec
from layoutgen.spec.schema import Service

DATA = Path(__file__).parent / "import"
ROOT_LAYOUTS = Path(__file__).parent.parent / "layouts"
FILES = sorted(
    p for p in DATA.iterdir() if p.suffix in (".sh", ".podman", ".container", ".service")
)

#: placement flags by every spelling, as llama.cpp's arg.cpp and ik's common.cpp spell them
PLACEMENT = {
    "-ngl": "ngl",
    "--n-gpu-layers": "ngl",
    "--gpu-layers": "ngl",
    "-ts": "ts",
    "--tensor-split": "ts",
    "-ot": "ot",
    "--override-tensor": "ot",
    "--cpu-moe": "cpu-moe",
    "-cmoe": "cpu-moe",
    "--n-cpu-moe": "n-cpu-moe",
    "-ncmoe": "n-cpu-moe",
    "-c": "c",
    "--ctx-size": "c",
    "-ub": "ub",
    "--ubatch-size": "ub",
    "-ctk": "ctk",
    "--cache-type-k": "ctk",
    "-ctv": "ctv",
    "--cache-type-v": "ctv",
    "-mg": "mg",
    "--main-gpu": "mg",
    "-sm": "sm",
    "--split-mode": "sm",
}
NO_VALUE = {"cpu-moe"}


def _shell_value(word: str) -> str:
    """What sh makes of ``$((N))``; anything else as shlex gave it."""
    m = re.fullmatch(r"\$\(\((\d+)\)\)", word)
    return m.group(1) if m else word


def independent(text: str) -> dict[str, list[str | None]]:
    """Placement flags and their values, in order, by shlex alone.

    sh drops a backslash-newline before splitting; shlex keeps the newline.
    """
    words = shlex.split(text.replace("\\\n", ""), comments=True)
    found: dict[str, list[str | None]] = {}
    for i, w in enumerate(words):
        key = PLACEMENT.get(w)
        if key is None:
            continue
        value = None if key in NO_VALUE else _shell_value(words[i + 1])
        found.setdefault(key, []).append(value)
    return found


def load(text: str) -> Any:
    return YAML(typ="safe").load(text)


#: data files whose command holds a shell expansion: where import refuses it
EXPANDS = {
    "pr616-kimik2-arith-subst.sh": '16:15: error: "$(grep ',
    "seed001-glm51-2gpu-ot-args-loop.podman": "23:13: error: '$OT_ARGS' holds the shell",
    "seed003-glm51-64k-launch.podman": "12:1: error: '$OT_ARGS' holds the shell",
}


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_real_command_lines(path: Path) -> None:
    text = path.read_text()
    assert text.startswith("# source: ")
    if path.name in EXPANDS:
        assert f"{path.name}:{EXPANDS[path.name]}" in error_of(text, path.name)
        return
    imported = to_spec(read_command(text, path.name))
    doc = load(imported.yaml)
    (name,) = doc["services"]
    svc = doc["services"][name]
    assert set(svc) <= set(Service.model_fields), set(svc) - set(Service.model_fields)
    assert all(w.severity is Severity.WARNING and w.line >= 0 for w in imported.warnings)
    assert doc["models"][svc["model"]]["path"]
    assert svc["runtime"] in doc["runtimes"]

    want = independent(text)
    gpus = svc["gpus"]
    ngl = want.get("ngl", [None])[-1]
    if ngl is not None and int(ngl) == 0:
        assert gpus == []
    elif ngl is not None and 0 < int(ngl) < 999:
        assert svc["gpu_layers"] == int(ngl)
    else:
        assert "gpu_layers" not in svc
    for key, field in (
        ("c", "ctx"),
        ("ub", "ubatch"),
        ("ctk", "cache_type_k"),
        ("ctv", "cache_type_v"),
    ):
        if key in want:
            value = want[key][-1]
            assert str(svc[field]) == value, (field, svc.get(field), value)
    if "ts" in want:
        shares = [float(s) for s in re.split(r"[,/]+", str(want["ts"][-1])) if s]
        got = svc["tensor_split"]
        assert list(got) == gpus
        assert [float(v) for v in got.values()][: len(shares)] == shares
    if "mg" in want and want.get("sm", ["layer"])[-1] == "none":
        assert len(gpus) == 1  # -sm none runs on the main GPU alone
    assert "main_gpu" not in svc  # -mg is gpus: with -sm none, and nothing with a layer split
    rules = [r.split("=", 1) for v in want.get("ot", []) for r in str(v).split(",")]
    got_rules = svc.get("tensor_overrides", [])
    assert [o["pattern"] for o in got_rules] == [p for p, _ in rules]
    for o, (_, buffer) in zip(got_rules, rules, strict=True):
        if buffer == "CPU":
            assert o["device"] == "host"
        else:
            assert o["device"] == gpus[int(buffer.removeprefix("CUDA"))]
    moe = [k for k in ("cpu-moe", "n-cpu-moe") if k in want]
    if moe == ["cpu-moe"]:
        assert svc["experts"] == "host"
    elif moe == ["n-cpu-moe"]:
        assert svc["experts"] == {"mode": "n-cpu-moe", "n": int(str(want["n-cpu-moe"][-1]))}
    elif not moe and gpus:
        assert svc["experts"] == "gpu"  # experts stay with their layers, as in the command


def fragment(text: str, **kw: Any) -> tuple[dict[str, Any], list[str]]:
    imported = to_spec(read_command(text), **kw)
    doc = load(imported.yaml)
    return doc, [w.gcc() for w in imported.warnings]


def test_podman_run_maps_volume_image_and_entrypoint() -> None:
    text = (DATA / "seed001-glm51-base-cpu-moe.podman").read_text()
    cmd = read_command(text, "x.podman")
    assert cmd.kind == "podman" and cmd.program_word is None
    assert cmd.image is not None and cmd.image.text == "registry.home.arpa/ik_llama.cpp:latest"
    assert (cmd.image.line, cmd.image.col) == (7, 3)
    assert [(v.host, v.container, v.read_only) for v in cmd.volumes] == [
        ("/mnt/data/models/models--ubergarm--GLM-5.1-GGUF", "/models", True)
    ]
    doc, _ = fragment(text)
    (model,) = doc["models"].values()
    assert model["path"] == (
        "/mnt/data/models/models--ubergarm--GLM-5.1-GGUF/snapshots/.../IQ3_KS/"
        "GLM-5.1-IQ3_KS-00001-of-00008.gguf"
    )
    assert doc["runtimes"]["ik"] == {
        "kind": "ik_llama.cpp",
        "image": "registry.home.arpa/ik_llama.cpp:latest",
    }
    (svc,) = doc["services"].values()
    assert svc["gpus"] == ["gpu1"]  # --device nvidia.com/gpu=1
    assert svc["capabilities"] == ["SYS_NICE"]
    assert svc["role"] == "orchestrator"


def test_quadlet_and_service_units() -> None:
    quadlet = read_command((DATA / "seed001-glm51-quadlet.container").read_text(), "a.container")
    assert quadlet.kind == "quadlet" and quadlet.container_name == "grandpa"
    assert [(p.host_ip, p.host_port, p.container_port) for p in quadlet.ports] == [
        ("127.0.0.1", "8000", "8000")
    ]
    assert quadlet.args[0].text == "-m" and (quadlet.args[0].line, quadlet.args[0].col) == (13, 6)
    unit = read_command((DATA / "seed001-glm51-podman.service").read_text(), "a.service")
    assert unit.kind == "systemd" and unit.image is not None
    assert any("specifier %n" in w.message for w in unit.warnings)
    native = read_command((DATA / "native-llama-server.service").read_text(), "b.service")
    assert native.program == "llama-server" and native.image is None
    assert [(e.name, e.value) for e in native.env] == [("CUDA_VISIBLE_DEVICES", "0,1,2,3,4")]


def test_shell_forms() -> None:
    cmd = read_command(
        "CUDA_VISIBLE_DEVICES=2,3 numactl --interleave=all taskset -c 0-15 nice -n 5 \\\n"
        "  ./build/bin/llama-server -m '/m/a b.gguf' --ctx-size=8192 -ngl 99 -ts 3,1 2>&1 | tee log"
    )
    assert cmd.program == "llama-server"
    assert [w.text for w in cmd.args] == [
        "-m",
        "/m/a b.gguf",
        "--ctx-size=8192",
        "-ngl",
        "99",
        "-ts",
        "3,1",
    ]
    assert [w.text for w in cmd.prefix][:2] == ["numactl", "--interleave=all"]
    doc, _ = fragment(
        "CUDA_VISIBLE_DEVICES=2,3 llama-server -m /m/a.gguf --ctx-size=8192 -ngl 99 -ts 3,1 "
        "-ot 'blk\\.1\\.=CUDA1,exps=CPU' -mg 1"
    )
    (svc,) = doc["services"].values()
    assert svc["ctx"] == 8192 and svc["gpus"] == ["gpu2", "gpu3"]
    assert svc["tensor_split"] == {"gpu2": 3, "gpu3": 1}
    assert "main_gpu" not in svc
    assert any("with a layer split it changes nothing" in w for w in _)
    assert svc["tensor_overrides"] == [
        {"pattern": "blk\\.1\\.", "device": "gpu3"},
        {"pattern": "exps", "device": "host"},
    ]
    doc, _ = fragment("llama-server -m /m/a.gguf -ngl 2 -ot x=CUDA1", gpu_ids=["a", "b"], name="w1")
    assert doc["services"]["w1"]["gpus"] == ["a", "b"]
    assert doc["services"]["w1"]["tensor_overrides"] == [{"pattern": "x", "device": "b"}]


def test_flash_attention_alone_or_with_a_value() -> None:
    doc, _ = fragment("llama-server -m /m/a.gguf -fa -c 4096 --jinja")
    assert doc["services"]["a"]["args"] == ["-fa", "--jinja"]
    doc, _ = fragment("llama-server -m /m/a.gguf -fa on -c 4096")
    assert doc["services"]["a"]["args"] == ["-fa", "on"]


def test_consumed_and_mapped_flags() -> None:
    doc, warnings = fragment(
        "llama-server -m /m/a.gguf -c 0 -ngl 0 --host 127.0.0.1 --port 9000 --mlock "
        "--reasoning-budget 0 -np 2 -b 512 -t 8 -tb 16 --n-cpu-moe 30"
    )
    svc = doc["services"]["a"]
    assert svc["ctx"] == 0 and svc["gpus"] == [] and svc["port"] == 9000
    assert svc["mlock"] is True and svc["reasoning"] is False
    assert (svc["parallel"], svc["batch"], svc["threads"], svc["threads_batch"]) == (2, 512, 8, 16)
    assert "args" not in svc and "expose" not in svc
    doc, warnings = fragment("llama-server -m /m/a.gguf -c 4096 --host 0.0.0.0")
    assert doc["services"]["a"]["expose"] is True
    assert any("--host '0.0.0.0'" in w for w in warnings)


def test_unknown_flags_pass_through_with_a_warning() -> None:
    doc, warnings = fragment("llama-server -m /m/a.gguf -c 4096 --frobnicate 3 -ngl 5")
    assert doc["services"]["a"]["args"] == ["--frobnicate", "3"]
    assert (
        "<stdin>:1:35: warning: unknown flag '--frobnicate': passed through in args"
        in (warnings[0])
    )


def test_api_key_literal_is_never_written() -> None:
    imported = to_spec(read_command("llama-server -m /m/a.gguf -c 1 --api-key sk-secret123"))
    assert "sk-secret123" not in imported.yaml
    assert all("sk-secret123" not in w.message for w in imported.warnings)
    assert any("api_key: {secret: NAME}" in w.message for w in imported.warnings)
    imported = to_spec(read_command("llama-server -m /m/a.gguf -c 1 --api-key=sk-secret123"))
    assert "sk-secret123" not in imported.yaml


# ---------------------------------------------------------------- hostile


def error_of(text: str, source: str = "<stdin>") -> str:
    with pytest.raises(LayoutgenError) as info:
        to_spec(read_command(text, source))
    return str(info.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            'llama-server -m "x.gguf -c 4',
            '<stdin>:1:17: error: unbalanced quote: this " is never closed; close it',
        ),
        (
            "llama-server -m x.gguf -c 'oops",
            "<stdin>:1:27: error: unbalanced quote: this ' is never closed; close it",
        ),
        (
            "podman run --rm -p 8000:8000 -v /a:/b",
            "<stdin>:1:8: error: podman run without an image: every option was read and no "
            "IMAGE word follows; write the image after the run options",
        ),
        (
            "llama-server -m /x.gguf -c 4096 -ngl",
            "<stdin>:1:33: error: -ngl needs a value, but the command ends: write -ngl VALUE",
        ),
        (
            "llama-server -m /x.gguf -ot --port 8",
            "<stdin>:1:25: error: -ot needs a value, but '--port' follows: write -ot VALUE",
        ),
        (
            "echo hello",
            "<stdin>:1:1: error: no llama.cpp program in the input: expected a llama-server "
            "command line (llama-cli, llama-sweep-bench, ... also work), vllm serve, "
            "podman/docker run IMAGE ..., a quadlet .container or a systemd .service; the first "
            "command is 'echo'",
        ),
        (
            "podman run --rm img:1 /bin/sh -c 'llama-server'",
            "<stdin>:1:23: error: the command after the image, '/bin/sh', is not a llama.cpp "
            "program: give llama-server and its arguments (or only the arguments when the "
            "image's entrypoint is llama-server)",
        ),
        (
            "llama-server -m $(cat x",
            "<stdin>:1:17: error: unbalanced $(: it is never closed with )",
        ),
        (
            "llama-server --mlock=1",
            "<stdin>:1:14: error: --mlock takes no value: write --mlock alone",
        ),
    ],
)
def test_hostile_inputs_give_located_errors(text: str, message: str) -> None:
    assert error_of(text) == message


@pytest.mark.parametrize("bad", ["\n", "\x1b[31m", "\x00", "\r"])
def test_control_characters_in_a_word_are_refused(bad: str) -> None:
    message = error_of(f"llama-server -m '/m/a{bad}b.gguf' -c 1", "cmd.sh")
    assert message.startswith("cmd.sh:1:17: error: word '")
    assert "control character" in message and "\n" not in message and "\x1b" not in message


def test_empty_input() -> None:
    assert error_of("", "e.sh").startswith("e.sh:1:1: error: no llama.cpp program")


def test_a_megabyte_line_is_answered_quickly() -> None:
    start = time.monotonic()
    message = error_of("llama-server -m /m/a.gguf --alias " + "a" * 1_000_000)
    assert message.startswith("<stdin>:1:35: error: word of 1000000 characters")
    message = error_of("x" * 1_000_000)
    assert message.startswith("<stdin>:1:1: error: no llama.cpp program")
    message = error_of("llama-server -m /m/a.gguf " + "-fa " * 3000)
    assert message.startswith("<stdin>:1:4123: error: more than 1024 arguments pass through")
    assert time.monotonic() - start < 10


def test_known_expansions_are_evaluated() -> None:
    text = 'M=/m/a.gguf\nN=$(nproc)\nllama-server -m "$M" -c $((1024*32)) --alias "${M}"'
    cmd = read_command(text)
    assert [w.text for w in cmd.args] == ["-m", "/m/a.gguf", "-c", "32768", "--alias", "/m/a.gguf"]


def test_cli_import_writes_yaml_and_locates_errors(tmp_path: Path) -> None:
    from conftest import run_cli

    good = DATA / "d357-qwen3-2gpu-ot.sh"
    result = run_cli(["import", str(good), "--name", "qwen"])
    assert result.code == 0, result.stderr
    doc = load(result.stdout)
    assert list(doc["services"]) == ["qwen"]
    # --spec names the GPUs by the spec's host.gpus, in CUDA (index) order
    spec = ROOT_LAYOUTS / "familiar-final.yaml"
    result = run_cli(["import", str(good), "--spec", str(spec)])
    assert result.code == 0, result.stderr
    (svc,) = load(result.stdout)["services"].values()
    assert svc["gpus"] == ["gpu0", "gpu1"]
    assert set(svc) <= set(Service.model_fields)
    bad = tmp_path / "bad.sh"
    bad.write_text("llama-server -m /m/a.gguf -ngl\n")
    result = run_cli(["import", str(bad)])
    assert result.code == 1
    assert result.stderr.startswith(f"{bad}:1:27: error: -ngl needs a value")
    assert result.stdout == ""
    missing = run_cli(["import", str(tmp_path / "nope.sh")])
    assert missing.code == 1 and "cannot read" in missing.stderr


def test_a_row_split_is_imported_and_tensor_parallel_kept_in_args() -> None:
    """-sm row maps to split_mode: row; ik's -sm graph is not planned: kept, said."""
    doc, warnings = fragment("llama-server -m /m/a.gguf -c 4096 -ngl 99 -sm row -ts 1,1")
    svc = doc["services"]["a"]
    assert svc["split_mode"] == "row" and "args" not in svc
    assert not any("-sm" in w for w in warnings)
    doc, warnings = fragment("llama-server -m /m/a.gguf -c 4096 -ngl 99 -sm graph -ts 1,1")
    assert doc["services"]["a"]["args"] == ["-sm", "graph"]
    assert any("-sm 'graph'" in w for w in warnings)


def test_a_podman_secret_read_as_the_api_key_file_is_the_secret() -> None:
    doc, _ = fragment(
        "podman run --secret k,type=mount,target=/run/secrets/api-key -v /m:/m img:b1 "
        "-m /m/a.gguf -c 8 --api-key-file /run/secrets/api-key"
    )
    (svc,) = doc["services"].values()
    assert svc["api_key"] == {"secret": "k"}


def test_a_native_units_environment_file_is_the_api_key_env_file() -> None:
    unit = (
        "[Service]\nEnvironmentFile=-/etc/llm/key.env\nEnvironmentFile=/etc/llm/other.env\n"
        "ExecStart=/opt/llama/llama-server -m /m/a.gguf -c 8\n"
    )
    imported = to_spec(read_command(unit, "llm.service"))
    (svc,) = load(imported.yaml)["services"].values()
    assert svc["api_key"] == {"env_file": "/etc/llm/key.env"}
    assert [w.gcc() for w in imported.warnings if "EnvironmentFile" in w.message] == [
        "llm.service:3:17: warning: dropped EnvironmentFile=/etc/llm/other.env: the spec "
        "has no key for it"
    ]


def test_an_ot_pattern_that_backtracks_is_said_at_import() -> None:
    """Issue 31: a pattern validate refuses (nested quantifiers: llama.cpp's std::regex
    backtracks through them) is imported as written and said at the pattern."""
    imported = to_spec(
        read_command("llama-server -m /m/a.gguf -c 1 -ot '(.*)*X=CPU' -ot 'blk\\.3\\.=CPU'")
    )
    said = [w.message for w in imported.warnings if "-ot pattern" in w.message]
    assert len(said) == 1 and "(.*)*X" in said[0] and "validate refuses it" in said[0], said


@pytest.mark.parametrize(
    ("prefix", "numa"),
    [
        ("numactl -N 0 -m 0", {"policy": "bind", "nodes": [0]}),
        ("numactl --cpunodebind=1,2 --membind=1-2", {"policy": "bind", "nodes": [1, 2]}),
        ("numactl --interleave=all", {"policy": "interleave"}),
        ("/usr/bin/numactl -i 0-3", {"policy": "interleave", "nodes": [0, 1, 2, 3]}),
    ],
)
def test_numactl_becomes_the_services_numa(prefix: str, numa: dict[str, object]) -> None:
    """numactl(8)'s node options the spec's numa: says the same as (issue 33: the NUMA
    policy is the speed model's and the units'): interleave, and a bind of memory and
    CPUs to the same nodes."""
    doc, warnings = fragment(f"{prefix} llama-server -m /m/a.gguf -c 4096 --numa numactl")
    (svc,) = doc["services"].values()
    assert svc["numa"] == numa
    assert not any("not reproduced" in w for w in warnings), warnings


@pytest.mark.parametrize(
    "prefix",
    [
        "numactl -m 0",  # memory bound, threads anywhere: the spec's bind binds both
        "numactl -N 0 -m 1",
        "numactl --physcpubind=0-55,112-167 --membind=0",
        "numactl --cpunodebind=0 --interleave=all",  # ik_llama.cpp issue 756's
        "numactl --preferred=0",
        "numactl -i +1",
        "taskset -c 0-15 numactl -i all",
    ],
)
def test_other_numactl_forms_stay_not_reproduced(prefix: str) -> None:
    doc, warnings = fragment(f"{prefix} llama-server -m /m/a.gguf -c 4096")
    (svc,) = doc["services"].values()
    assert "numa" not in svc
    assert any("is not reproduced: the spec has no key for it" in w for w in warnings)
