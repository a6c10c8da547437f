"""``layoutgen calibrate``: start-up logs into ``measured:``, and the plan that follows.

The logs under tests/cases/calibrate/ are verbatim excerpts of seed 001
(ik_llama.cpp) and lines written in mainline llama.cpp's format strings; the
numbers the tests expect are copied from those logs by hand, never computed
by layoutgen.  One test runs the real llama.cpp (``make runtime``) and
calibrates with its own log.
"""

from __future__ import annotations

import json
import os
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from layoutgen.calibrate.startlog import read_log
from layoutgen.errors import InvalidInput

from conftest import ROOT, run_cli

CASES = Path(__file__).parent / "cases" / "calibrate"
LOG_1GPU = CASES / "seed001-1gpu.log"  # seed 001 lines 733-741
LOG_2GPU = CASES / "seed001-2gpu.log"  # seed 001 lines 669-703
LOG_MAINLINE = CASES / "mainline-qwen3next.log"

# Seed 001, appendix B (1 GPU): what the log says, copied from the seed's text.
SEED_1GPU = {
    "CUDA0": {"weights": "14498.95MiB", "kv": "1491.79MiB", "compute": "5418.03MiB"},
    "CUDA_Host": {"weights": "307110.47MiB", "compute": "704.09MiB"},
}
# Seed 001, appendix A (2 GPUs).
SEED_2GPU = {
    "CUDA0": {"weights": "7378.05MiB", "kv": "784.15MiB", "compute": "5418.03MiB"},
    "CUDA1": {"weights": "7120.90MiB", "kv": "707.64MiB", "compute": "5032.00MiB"},
    "CUDA_Host": {"weights": "307110.47MiB", "compute": "704.09MiB"},
}


def mib(text: str) -> int:
    """Bytes of a logged 'N MiB' figure: round(N * 2^20), exactly."""
    return round(Decimal(text.removesuffix("MiB")) * 1048576)


def copy_spec(tmp: Path, name: str) -> Path:
    """A case spec in tmp, with models/ pointing at the committed profiles."""
    (tmp / "models").symlink_to(ROOT / "layouts" / "models")
    spec = tmp / name
    spec.write_bytes((CASES / name).read_bytes())
    return spec


def load(spec: Path) -> Any:
    return YAML(typ="safe").load(spec.read_text())


def line_of(text: str, needle: str, start: int = 1) -> int:
    return next(i for i, ln in enumerate(text.splitlines(), 1) if i >= start and needle in ln)


def plan_buffers(spec: Path, service: str) -> dict[str, Any]:
    result = run_cli(["plan", "--json", str(spec)])
    assert result.code == 0, result.stderr
    buffers: dict[str, Any] = json.loads(result.stdout)["services"][service]["buffers"]
    return buffers


def assert_measured_in_plan(spec: Path, service: str, logged: dict[str, dict[str, str]]) -> None:
    buffers = plan_buffers(spec, service)
    for buf, fields in logged.items():
        for field, size in fields.items():
            assert buffers[buf][field] == mib(size), (buf, field)
            assert buffers[buf]["basis"][field] == "measured", (buf, field)
        for field in {"weights", "kv", "compute"} - set(fields):
            assert buffers[buf]["basis"][field] != "measured", (buf, field)


def test_one_gpu_seed_log_adds_a_measured_block_and_nothing_else(tmp_path: Path) -> None:
    spec = copy_spec(tmp_path, "glm51.yaml")
    before = spec.read_text()
    result = run_cli(["calibrate", str(LOG_1GPU), str(spec), "--service", "grandpa-1gpu"])
    assert result.code == 0, result.stderr
    assert result.stdout == ""
    assert result.stderr == (
        f"{spec}: services.grandpa-1gpu.measured: 2 buffers from {LOG_1GPU}\n"
        "  CUDA0: weights 14498.95MiB, kv 1491.79MiB, compute 5418.03MiB\n"
        "  CUDA_Host: weights 307110.47MiB, compute 704.09MiB\n"
    )
    # The block goes right after the service's last line (its three-line args),
    # in the service's indentation; every other line is untouched.
    lines = before.splitlines(keepends=True)
    at = line_of(before, '--temp, "0.7"')
    assert spec.read_text() == "".join(
        [
            *lines[:at],
            "    measured:\n",
            "      CUDA0: {weights: 14498.95MiB, kv: 1491.79MiB, compute: 5418.03MiB}\n",
            "      CUDA_Host: {weights: 307110.47MiB, compute: 704.09MiB}\n",
            *lines[at:],
        ]
    )
    data = load(spec)
    assert data["services"]["grandpa-1gpu"]["measured"] == SEED_1GPU
    assert "measured" in data["services"]["grandpa"]  # the other service keeps its own
    assert_measured_in_plan(spec, "grandpa-1gpu", SEED_1GPU)
    buffers = plan_buffers(spec, "grandpa-1gpu")
    assert buffers["CUDA0"]["weights"] == 15203250995  # 14498.95 MiB = 15203250995.2 bytes
    assert buffers["CUDA_Host"]["compute"] == 738291876  # 704.09 MiB = 738291875.84 bytes
    assert buffers["CUDA_Host"]["basis"]["kv"] == "exact"


def test_two_gpu_seed_log_replaces_the_hand_written_entries(tmp_path: Path) -> None:
    spec = copy_spec(tmp_path, "glm51.yaml")
    before = spec.read_text()
    result = run_cli(["calibrate", str(LOG_2GPU), str(spec), "--service", "grandpa"])
    assert result.code == 0, result.stderr
    # Each entry is replaced in place; its comment, the comment lines around
    # the block and everything else stay byte for byte.
    expected = (
        before.replace(
            "      CUDA0: {compute: 5418.03MiB}     #",
            "      CUDA0: {weights: 7378.05MiB, kv: 784.15MiB, compute: 5418.03MiB}     #",
        )
        .replace(
            "      CUDA1: {compute: 5032.00MiB}     #",
            "      CUDA1: {weights: 7120.90MiB, kv: 707.64MiB, compute: 5032.00MiB}     #",
        )
        .replace(
            "      CUDA_Host: {compute: 704.09MiB}  #",
            "      CUDA_Host: {weights: 307110.47MiB, compute: 704.09MiB}  #",
        )
    )
    assert expected != before
    assert spec.read_text() == expected
    assert load(spec)["services"]["grandpa"]["measured"] == SEED_2GPU
    assert_measured_in_plan(spec, "grandpa", SEED_2GPU)


def test_calibrating_twice_changes_nothing_the_second_time(tmp_path: Path) -> None:
    spec = copy_spec(tmp_path, "glm51.yaml")
    args = ["calibrate", str(LOG_1GPU), str(spec), "--service", "grandpa-1gpu"]
    assert run_cli(args).code == 0
    once = spec.read_text()
    assert run_cli(args).code == 0
    assert spec.read_text() == once


def test_entries_of_buffers_not_in_the_log_are_kept(tmp_path: Path) -> None:
    spec = copy_spec(tmp_path, "glm51.yaml")
    before = spec.read_text()
    log = tmp_path / "cuda1.log"  # seed 001 lines 698 and 702, after a made-up CPU buffer
    log.write_text(
        "llm_load_tensors:        CPU buffer size =   832.50 MiB\n"
        "llama_kv_cache_init:      CUDA1 KV buffer size =   707.64 MiB\n"
        "llama_init_from_model:      CUDA1 compute buffer size =  5032.00 MiB\n"
    )
    result = run_cli(["calibrate", str(log), str(spec), "--service", "grandpa"])
    assert result.code == 0, result.stderr
    # CUDA1 is replaced in place, CUDA0 and CUDA_Host stay, CPU is appended
    # after the last entry (before the comment that follows the block).
    host = (
        '      CUDA_Host: {compute: 704.09MiB}  # "CUDA_Host compute buffer size =   704.09 MiB"\n'
    )
    assert spec.read_text() == before.replace(
        "      CUDA1: {compute: 5032.00MiB}     #",
        "      CUDA1: {kv: 707.64MiB, compute: 5032.00MiB}     #",
    ).replace(host, host + "      CPU: {weights: 832.50MiB}\n")
    assert "the plan has no buffer CPU" in result.stderr


def test_mainline_log_sums_shards_and_recurrent_state(tmp_path: Path) -> None:
    spec = copy_spec(tmp_path, "qwen3-coder-next-llama.yaml")
    before = spec.read_text()
    result = run_cli(["calibrate", str(LOG_MAINLINE), str(spec)])  # one service: no --service
    assert result.code == 0, result.stderr
    logged = {
        "CPU_Mapped": {"weights": "41831.16MiB"},  # 20915.55 + 20915.61, one line per file
        "CUDA0": {"weights": "1347.93MiB", "kv": "6294.75MiB", "compute": "412.51MiB"},
        "CUDA_Host": {"compute": "24.02MiB"},  # the 1.16 MiB output buffer is not counted
    }  # CUDA0 kv: KV 6144.00 + RS 150.75
    assert load(spec)["services"]["worker"]["measured"] == logged
    assert spec.read_text() == before.replace(
        "    args: [--jinja]\n",
        "    args: [--jinja]\n"
        "    measured:\n"
        "      CPU_Mapped: {weights: 41831.16MiB}\n"
        "      CUDA0: {weights: 1347.93MiB, kv: 6294.75MiB, compute: 412.51MiB}\n"
        "      CUDA_Host: {compute: 24.02MiB}\n",
    )
    assert_measured_in_plan(spec, "worker", logged)


def test_a_log_with_two_start_ups_is_refused(tmp_path: Path) -> None:
    spec = copy_spec(tmp_path, "glm51.yaml")
    before = spec.read_bytes()
    log = tmp_path / "two.log"
    log.write_text(LOG_2GPU.read_text() + "\nrestarted on one GPU:\n" + LOG_1GPU.read_text())
    result = run_cli(["calibrate", str(log), str(spec), "--service", "grandpa"])
    assert result.code == 1
    text = log.read_text()
    again = line_of(text, "CUDA_Host buffer size", line_of(text, "restarted"))
    kv = line_of(text, "CUDA0 KV buffer size")
    assert result.stderr == (
        f"{log}:{again}:20: error: CUDA_Host's model buffer is logged again (first at line "
        f"{line_of(text, 'CUDA_Host buffer size')}): the log holds more than one start-up "
        "(a restarted server, or a second model such as a speculative draft); calibrate "
        "measures one: pass the log of a single start-up (podman logs --since TIME NAME, or "
        "keep only the lines of the start you want)\n"
    )
    assert kv < again
    assert spec.read_bytes() == before


def test_weights_logged_twice_without_kv_lines_are_two_start_ups() -> None:
    # Seed 001 quotes configuration 1's weights twice (lines 233-235 and 284-286).
    weights = (
        "llm_load_tensors:  CUDA_Host buffer size = 307110.47 MiB\n"
        "llm_load_tensors:      CUDA0 buffer size =  7378.05 MiB\n"
        "llm_load_tensors:      CUDA1 buffer size =  7120.90 MiB\n"
    )
    with pytest.raises(InvalidInput) as exc:
        read_log(weights + "\nThe measured values were effectively identical:\n\n" + weights, "x")
    (diag,) = exc.value.diagnostics
    assert (diag.line, diag.col) == (7, 20)
    assert diag.message.startswith("CUDA_Host's model buffer is logged again (first at line 1)")


def test_kv_lines_before_weights_mean_a_second_start_up() -> None:
    log = (
        "llama_kv_cache_init:      CUDA0 KV buffer size =  1491.79 MiB\n"
        "llm_load_tensors:      CUDA0 buffer size = 14498.95 MiB\n"
    )
    with pytest.raises(InvalidInput) as exc:
        read_log(log, "x")
    assert exc.value.diagnostics[0].message.startswith(
        "a model buffer is logged after the KV or compute buffers (line 1)"
    )


def test_log_lines_are_read_wherever_they_are() -> None:
    log = (
        "  llm_load_tensors:  CUDA_Host buffer size = 307110.47 MiB\n"  # seed 001 line 317
        "0.00.021.857 I load_tensors:   CPU_Mapped model buffer size =    62.05 MiB\n"
        "Nov 22 15:46:01 compute podman[812]: load_tensors: RPC0[127.0.0.1:50052] model buffer "
        "size =     4.12 MiB\n"
        # sliding-window models: two caches on one buffer
        "llama_kv_cache_iswa: creating non-SWA KV cache, size = 65536 cells\n"
        "llama_kv_cache:      CUDA0 KV buffer size =  1280.00 MiB\n"
        "llama_kv_cache_iswa: creating     SWA KV cache, size = 2048 cells\n"
        "llama_kv_cache:      CUDA0 KV buffer size =   200.00 MiB\n"
        "llama_init_from_model: KV self size  = 1491.75 MiB\n"  # a total, not a buffer
        "llama_context:        CPU  output buffer size =     0.58 MiB\n"
        # llama.cpp re-reserves: the buffer grew, the larger size is the one allocated
        "sched_reserve:      CUDA0 compute buffer size =   300.50 MiB\n"
        "sched_reserve:      CUDA0 compute buffer size =   310.25 MiB\n"
        # the multimodal projector's compute buffer is not the model's
        "reserve_compute_meta:      CUDA0 compute buffer size =    99.00 MiB\n"
        "~llama_context:      CUDA0 compute buffer size is 310.2500 MiB, matches expectation\n"
    )
    assert read_log(log, "x") == {
        "CPU_Mapped": {"weights": "62.05MiB"},
        "CUDA0": {"kv": "1480.00MiB", "compute": "310.25MiB"},
        "CUDA_Host": {"weights": "307110.47MiB"},
        "RPC0[127.0.0.1:50052]": {"weights": "4.12MiB"},
    }


@pytest.mark.parametrize(
    "content",
    [
        b"just some prose about GPUs\nllama_init_from_model: KV self size  = 1491.75 MiB\n",
        b"llama_context:        CPU  output buffer size =     0.58 MiB\n",
        bytes(range(256)) * 4,
        b"",
    ],
    ids=["prose", "output-only", "binary", "empty"],
)
def test_a_log_without_buffer_sizes_is_an_error(tmp_path: Path, content: bytes) -> None:
    spec = copy_spec(tmp_path, "glm51.yaml")
    before = spec.read_bytes()
    log = tmp_path / "server.log"
    log.write_bytes(content)
    result = run_cli(["calibrate", str(log), str(spec), "--service", "grandpa"])
    assert result.code == 1
    assert result.stderr == (
        f"{log}: error: no buffer sizes found in {log} (is it a llama.cpp/ik_llama.cpp start-up "
        "log? the server prints '... buffer size = N MiB' lines at its default log level: on "
        "llama.cpp keep -lv at 3 or more; capture stdout and stderr, e.g. podman logs NAME > "
        "LOG 2>&1)\n"
    )
    assert spec.read_bytes() == before


def test_service_must_be_named_when_there_are_several(tmp_path: Path) -> None:
    spec = copy_spec(tmp_path, "glm51.yaml")
    before = spec.read_bytes()
    at = line_of(spec.read_text(), "services:")
    result = run_cli(["calibrate", str(LOG_1GPU), str(spec)])
    assert result.code == 1
    assert result.stderr == (
        f"{spec}:{at}:1: error: 2 services (grandpa, grandpa-1gpu): say which one the log is "
        "from with --service NAME\n"
    )
    result = run_cli(["calibrate", str(LOG_1GPU), str(spec), "--service", "grandpa-2gpu"])
    assert result.code == 1
    assert result.stderr == (
        f"{spec}:{at}:1: error: no service 'grandpa-2gpu' in this spec; its services are: "
        "grandpa, grandpa-1gpu\n"
    )
    assert spec.read_bytes() == before


def test_missing_files(tmp_path: Path) -> None:
    spec = copy_spec(tmp_path, "glm51.yaml")
    result = run_cli(["calibrate", str(tmp_path / "nope.log"), str(spec)])
    assert (result.code, result.stderr) == (1, f"{tmp_path / 'nope.log'}: error: no such file\n")
    result = run_cli(["calibrate", str(LOG_1GPU), str(tmp_path / "nope.yaml")])
    assert (result.code, result.stderr) == (1, f"{tmp_path / 'nope.yaml'}: error: no such file\n")


def test_sizes_that_do_not_fit_are_written_and_reported(tmp_path: Path) -> None:
    spec = copy_spec(tmp_path, "glm51.yaml")
    log = tmp_path / "huge.log"
    log.write_text("llama_init_from_model:      CUDA0 compute buffer size = 99999.00 MiB\n")
    result = run_cli(["calibrate", str(log), str(spec), "--service", "grandpa-1gpu"])
    assert result.code == 1
    assert load(spec)["services"]["grandpa-1gpu"]["measured"] == {
        "CUDA0": {"compute": "99999.00MiB"}
    }
    assert "error: services.grandpa-1gpu: does not fit GPU gpu1 (its CUDA0)" in result.stderr
    assert result.stderr.endswith(
        f"{spec}: error: the measured sizes are written, but the spec does not validate with "
        "them (see above); fix the layout, or undo the change with your version control\n"
    )


def test_a_log_of_other_gpus_is_refused_and_force_writes_it_with_a_warning(
    tmp_path: Path,
) -> None:
    spec = copy_spec(tmp_path, "glm51.yaml")
    before = spec.read_bytes()
    args = ["calibrate", str(LOG_2GPU), str(spec), "--service", "grandpa-1gpu"]
    result = run_cli(args)
    differences = (
        "log says 2 CUDA devices (line 4), service grandpa-1gpu uses 1 (gpu1); log has GPU "
        "buffer CUDA1 (line 18), service grandpa-1gpu's GPU buffers are CUDA0"
    )
    assert (result.code, result.stderr) == (
        1,
        f"{LOG_2GPU}: error: the log is not from a start-up of service grandpa-1gpu: "
        f"{differences}; calibrate the service it is from (--service NAME), or pass --force "
        "to write its sizes anyway\n",
    )
    assert spec.read_bytes() == before
    result = run_cli([*args, "--force"])
    assert result.code == 0
    assert result.stderr.startswith(
        f"{LOG_2GPU}: warning: --force: calibrating service grandpa-1gpu although "
        f"{differences}\n{spec}: services.grandpa-1gpu.measured: 3 buffers from {LOG_2GPU}\n"
    )
    assert result.stderr.endswith(
        f"{spec}: warning: services.grandpa-1gpu: the plan has no buffer CUDA1, so its measured "
        "sizes are not used; is the log from another layout of this service?\n"
    )


def test_a_flow_or_empty_measured_block_becomes_a_block(tmp_path: Path) -> None:
    spec = copy_spec(tmp_path, "qwen3-coder-next-llama.yaml")
    text = spec.read_text().replace(
        "    args: [--jinja]\n",
        "    measured: {CPU: {compute: 1MiB}}   # by hand\n    args: [--jinja]\n",
    )
    spec.write_text(text)
    log = tmp_path / "kv.log"
    log.write_text("llama_kv_cache:      CUDA0 KV buffer size =  6144.00 MiB\n")
    assert run_cli(["calibrate", str(log), str(spec)]).code == 0
    assert spec.read_text() == text.replace(
        "    measured: {CPU: {compute: 1MiB}}   # by hand\n",
        "    measured:   # by hand\n      CPU: {compute: 1MiB}\n      CUDA0: {kv: 6144.00MiB}\n",
    )
    spec.write_text(text.replace("{CPU: {compute: 1MiB}}", "{}"))
    assert run_cli(["calibrate", str(log), str(spec)]).code == 0
    assert load(spec)["services"]["worker"]["measured"] == {"CUDA0": {"kv": "6144.00MiB"}}


def test_line_endings_mode_and_links_are_kept(tmp_path: Path) -> None:
    spec = copy_spec(tmp_path, "glm51.yaml")
    spec.write_bytes(spec.read_bytes().replace(b"\n", b"\r\n"))
    spec.chmod(0o640)
    link = tmp_path / "link.yaml"
    link.symlink_to(spec.name)
    assert run_cli(["calibrate", str(LOG_1GPU), str(link), "--service", "grandpa-1gpu"]).code == 0
    assert link.is_symlink()
    data = spec.read_bytes()
    assert b"CUDA0: {weights: 14498.95MiB, kv: 1491.79MiB, compute: 5418.03MiB}\r\n" in data
    assert data.count(b"\n") == data.count(b"\r\n")
    assert spec.stat().st_mode & 0o777 == 0o640
    assert sorted(os.listdir(tmp_path)) == ["glm51.yaml", "link.yaml", "models"]  # no temp left


def test_real_llama_cpp_log(tmp_path: Path) -> None:
    """llama.cpp's own start-up log (RPC devices, a mapped file) calibrates its spec."""
    from tests.oracle import cases, harness, models

    case = next(c for c in cases.CASES if c.name == "qwen3moe-cpu-moe-mmap")
    gguf = models.BUILDERS[case.arch](tmp_path / "m.gguf")
    profile = tmp_path / "m.profile.yaml"
    assert run_cli(["inspect", str(gguf), "-o", str(profile)]).code == 0
    with harness.rpc_servers(case.devices) as endpoints:
        spec = tmp_path / "layout.yaml"
        runtime = harness.binary("llama-completion")
        spec.write_text(cases.spec_text(case, gguf, Path(profile.name), endpoints, runtime))
        run = harness.run(harness.completion_argv(cases.plan(spec)["services"]["oracle"]["argv"]))
    log = tmp_path / "llama.log"
    log.write_text(run.log)
    result = run_cli(["calibrate", str(log), str(spec)])
    assert result.code == 0, result.stderr
    measured = load(spec)["services"]["oracle"]["measured"]
    assert {f"RPC0[{ep}]" for ep in endpoints} <= set(measured)  # names with ':' and '['
    buffers = plan_buffers(spec, "oracle")
    checked = 0
    for buf, fields in run.buffers.items():  # the harness's own reading of the log
        for field, size in fields.items():
            assert mib(measured[buf][field]) == size, (buf, field)
            if buf in buffers:
                assert buffers[buf][field] == size, (buf, field)
                assert buffers[buf]["basis"][field] == "measured"
                checked += 1
    assert checked >= 7  # weights, KV and compute on both devices, the mapped weights


def test_specs_calibrate_cannot_edit_are_refused_and_left_alone(tmp_path: Path) -> None:
    spec = copy_spec(tmp_path, "qwen3-coder-next-llama.yaml")
    text = spec.read_text()
    cases = {
        # a service written as a flow mapping has no line to add 'measured:' to
        "flow": (
            text + "  batch: {model: coder, runtime: llama, role: batch, port: 8002, ctx: 4096}\n",
            f"{spec}:{len(text.splitlines()) + 1}:3: error: services.batch: write it as a "
            "block mapping (one key per line) so that calibrate can add its measured sizes\n",
            "batch",
        ),
        # one block shared by two services through an alias: editing it would change both
        "alias": (
            text.replace("    args: [--jinja]\n", "    args: [--jinja]\n    measured: &m {}\n")
            + "  batch:\n    model: coder\n    runtime: llama\n    role: batch\n    port: 8002\n"
            "    ctx: 4096\n    measured: *m\n",
            f"{spec}: error: cannot edit services.batch.measured in place (anchors, aliases or "
            "unusual layout?); the spec is unchanged: add these entries by hand: CUDA0: {kv: "
            "6144.00MiB}\n",
            "batch",
        ),
        "yaml": (
            text + "  broken: [\n",
            f"{spec}:{len(text.splitlines()) + 2}:1: error: invalid YAML: while parsing a flow "
            "node, expected the node content, but found '<stream end>'\n",
            "worker",
        ),
    }
    log = tmp_path / "kv.log"
    log.write_text("llama_kv_cache:      CUDA0 KV buffer size =  6144.00 MiB\n")
    for name, (content, message, service) in cases.items():
        spec.write_text(content)
        result = run_cli(["calibrate", str(log), str(spec), "--service", service])
        assert (result.code, result.stderr) == (1, message), name
        assert spec.read_text() == content, name


@pytest.mark.parametrize("odd", ["\r", "\x0b", "\x1c", "\x85", "\u2028", "\x0c"])
def test_log_lines_end_at_newline_alone(tmp_path: Path, odd: str) -> None:
    """A character str.splitlines() ends a line at is part of its line: after a
    function's colon it hides the line's buffer (a '\\r' there made a bogus 'true'
    buffer and exited 0); line numbers of later lines do not move."""
    log = tmp_path / "start.log"
    text = LOG_1GPU.read_text(encoding="utf-8")
    bogus = f"llm_load_tensors:{odd}true buffer size = 5 MiB\n"
    text = text.replace("llm_load_tensors:", bogus + "llm_load_tensors:", 1)
    log.write_text(text, encoding="utf-8", newline="")
    spec = copy_spec(tmp_path, "glm51.yaml")
    result = run_cli(["calibrate", str(log), str(spec), "--service", "grandpa-1gpu"])
    assert result.code == 0, result.stderr
    assert load(spec)["services"]["grandpa-1gpu"]["measured"] == SEED_1GPU
    assert read_log(log.read_text(encoding="utf-8"), "start.log") == SEED_1GPU


def test_every_buffer_name_calibrate_writes_is_one_validate_accepts() -> None:
    """One rule for both: what the log reader takes is what the spec schema takes."""
    from layoutgen.inputs.literals import buffer

    for name in ["CUDA0", "CUDA_Host", "CPU_Mapped", "RPC0[127.0.0.1:50052]", "Vulkan1"]:
        line = f"load_tensors: {name} model buffer size = 1.00 MiB"
        assert read_log(line, "log") == {name: {"weights": "1.00MiB"}}
        assert buffer(name) == name
    for name in ["&x", "!!python/object", "{CUDA0}", "*a", "'q'", "true]", "CUDA0\\x1b"]:
        line = f"load_tensors: {name} model buffer size = 1.00 MiB"
        with pytest.raises(InvalidInput, match="is not one a runtime prints"):
            read_log(line, "log")
        with pytest.raises(ValueError):
            buffer(name)


@pytest.mark.parametrize("size", ["nan", "NaN", "inf", "-inf", "+Infinity", "-3.00"])
def test_a_size_that_is_not_finite_is_an_error_at_its_line(size: str) -> None:
    text = f"one\nllama_init_from_model:  CUDA0 compute buffer size = {size} MiB\n"
    with pytest.raises(InvalidInput) as info:
        read_log(text, "start.log")
    (diag,) = info.value.diagnostics
    assert (diag.file, diag.line, diag.col) == ("start.log", 2, 53)
    assert "is not a size a runtime prints (a finite, non-negative number of MiB)" in diag.message


def test_timing_lines_with_no_number_are_stepped_over() -> None:
    """'...', '1.2.3' or 400 digits where a time is printed: not a timing (float() of them
    raised, or gave inf); lines end at '\\n' alone, so line numbers hold."""
    from layoutgen.calibrate.speed import read_timings

    odd = [
        "       eval time =  ... ms /     5 tokens",
        "       eval time = 1.2.3 ms /     5 tokens",
        "       eval time = " + "9" * 400 + " ms /     5 tokens",
        "| qwen3 | tg128 | ... ± 0.10 |",
        "x\x1cy\u2028z\rw",
    ]
    text = "\n".join([*odd, "       eval time =  2000.00 ms /    40 tokens"])
    (timing,) = read_timings(text)
    assert (timing.line, timing.tps) == (6, 20.0)
