"""The build an imported command ran: from its image tag or its start-up log.

The log lines are copied from the truth records' logs (tests/truth/records),
where each runtime prints its build.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from ruamel.yaml import YAML

from layoutgen.importer import build, import_text

RECORDS = Path(__file__).parent / "truth" / "records"


@pytest.mark.parametrize(
    ("image", "kind", "version"),
    [
        ("ghcr.io/ggml-org/llama.cpp:server-cuda-b6123", "llama.cpp", "6123"),
        ("ghcr.io/ggml-org/llama.cpp:full-b6123", "llama.cpp", "6123"),
        ("ghcr.io/ggml-org/llama.cpp:b6123@sha256:" + "0" * 64, "llama.cpp", "6123"),
        ("registry.home.arpa/ik_llama.cpp:4327", "ik_llama.cpp", "4327"),
        ("vllm/vllm-openai:v0.10.2", "vllm", "0.10.2"),
        ("ghcr.io/ggml-org/llama.cpp:server-cuda", "llama.cpp", None),
        ("registry.home.arpa/ik_llama.cpp:latest", "ik_llama.cpp", None),
        ("localhost:5000/llama.cpp", "llama.cpp", None),
        ("vllm/vllm-openai:latest", "vllm", None),
    ],
)
def test_image_tags(image: str, kind: str, version: str | None) -> None:
    found = build.from_image(image, kind)
    assert (found.version if found else None) == version


@pytest.mark.parametrize(
    ("record", "kind", "version"),
    [
        ("misc-gptneox-ci-pythia-cpu-b4343.yaml", "llama.cpp", "4343"),
        ("ghx-ik-deepseek2-pr616-magikrukkola-kimik2-2x3090-amb512.yaml", "ik_llama.cpp", None),
    ],
)
def test_build_lines_of_real_logs(record: str, kind: str, version: str | None) -> None:
    logged = YAML(typ="safe").load((RECORDS / record).read_text())["logged"]
    found = build.from_log(logged, kind)
    if version is None:  # the record's own build line, whatever it is
        assert found is not None and found[0].version.isdigit()
    else:
        assert found is not None and found[0].version == version


def test_log_forms() -> None:
    assert build.from_log("x\nmain: build = 3808 (38012f72)\n", "ik_llama.cpp") == (
        build.Found("3808", "from the start-up log, line 2"),
        2,
    )
    assert build.from_log("version: 3772 (5236c98b)\n", "ik_llama.cpp") is not None
    line = "INFO 09-12 [api_server.py:1880] vLLM API server version 0.10.2\n"
    found = build.from_log(line, "vllm")
    assert found is not None and found[0].version == "0.10.2"
    assert build.from_log("no build here\n", "llama.cpp") is None


def _runtime(text: str, **kw: object) -> tuple[dict[str, object], str, list[str]]:
    imported = import_text(text, "cmd.sh", **kw)  # type: ignore[arg-type]
    (runtime,) = YAML(typ="safe").load(imported.yaml)["runtimes"].values()
    return runtime, imported.yaml, [w.gcc() for w in imported.warnings]


def test_import_writes_the_tag_build() -> None:
    runtime, yaml, _ = _runtime(
        "podman run -v /m:/m ghcr.io/ggml-org/llama.cpp:server-cuda-b6123 -m /m/a.gguf -c 8"
    )
    assert runtime["version"] == "6123"
    assert "version: '6123' # from the image tag server-cuda-b6123" in yaml


def test_the_log_wins_over_the_tag_and_says_so() -> None:
    log = ("llama_model_loader: ...\nbuild: 6200 (a1b2c3d4) with cc 13\n", "run.log")
    runtime, yaml, warnings = _runtime(
        "podman run -v /m:/m ghcr.io/ggml-org/llama.cpp:server-cuda-b6123 -m /m/a.gguf -c 8",
        log=log,
    )
    assert runtime["version"] == "6200"
    assert "# from the start-up log run.log:2" in yaml
    assert (
        "cmd.sh:1:21: warning: the image tag names build 6123 but the start-up log run.log:2 "
        "printed 6200: wrote the log's"
    ) in warnings


def test_no_build_found_is_said_with_what_to_write() -> None:
    runtime, yaml, warnings = _runtime("/opt/llama/llama-server -m /m/a.gguf -c 8")
    assert "version" not in runtime
    message = (
        "build unknown (no image): the layout is planned for every build; write version: as "
        "the build number 'llama-server --version' prints (e.g. 6123), or give the start-up "
        "log with --log FILE"
    )
    assert f"cmd.sh:1:1: warning: {message}" in warnings
    assert f"# {message}" in yaml


def test_no_build_found_names_the_builds_its_flags_allow() -> None:
    """A bare -fa and -fmoe are ik builds up to 3927, -mla with a value from 3575: the
    import says the plan covers those, not every build."""
    runtime, _yaml, warnings = _runtime(
        "/opt/ik/llama-server -m /m/a.gguf -c 8 -ngl 99 -fa -mla 2 -fmoe"
    )
    assert "version" not in runtime
    said = "\n".join(warnings)
    assert (
        "the layout is planned for builds 3575-3927, those that read its flags as written" in said
    )


def test_cli_log_option(tmp_path: Path) -> None:
    from conftest import run_cli

    cmd = tmp_path / "cmd.sh"
    cmd.write_text("/opt/ik/llama-server -m /m/a.gguf -c 8 -mla 3\n")
    log = tmp_path / "start.log"
    log.write_text("INFO [main] build info | tid=1 build=4357 commit=abc\nbuild: 4357 (b0c7ea1)\n")
    result = run_cli(["import", str(cmd), "--log", str(log)])
    assert result.code == 0, result.stderr
    (runtime,) = YAML(typ="safe").load(result.stdout)["runtimes"].values()
    assert runtime == {"kind": "ik_llama.cpp", "binary": "/opt/ik/llama-server", "version": "4357"}
