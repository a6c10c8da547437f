"""Hostile start-up logs: ``layoutgen calibrate`` prints one line, exits 1, changes nothing.

Small logs are committed under tests/cases/hostile-logs/ (``NAME.log``), each
with the exact stderr it must give (``NAME.err``, ``{log}`` standing for the
log's path); ``pytest --update-golden`` rewrites the ``.err`` files, and
review of that diff is what keeps them honest.  Every case calibrates
service ``grandpa`` of tests/cases/calibrate/glm51.yaml (GLM-5.1 on
ik_llama.cpp, two GPUs).  Big and special inputs (a FIFO, /dev/zero, a
200 MB log, a line of 16 MiB) are made by the tests.  Each run is the real
CLI in a child under a 1 GiB address-space limit and a generous timeout
(:func:`gguf_fixtures.run_bounded`); no test asserts a duration.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from conftest import ROOT
from gguf_fixtures import Bounded, run_bounded

CASES = Path(__file__).parent / "cases" / "hostile-logs"
SPEC = Path(__file__).parent / "cases" / "calibrate" / "glm51.yaml"
LOGS = sorted(p.name for p in CASES.glob("*.log"))


def spec_copy(tmp: Path) -> Path:
    """glm51.yaml in ``tmp``, its models/ linked to the committed profiles."""
    (tmp / "models").symlink_to(ROOT / "layouts" / "models")
    spec = tmp / SPEC.name
    spec.write_bytes(SPEC.read_bytes())
    return spec


def calibrate(log: Path | str, spec: Path, *more: str) -> Bounded:
    return run_bounded(["calibrate", str(log), str(spec), "--service", "grandpa", *more])


def assert_refused(result: Bounded, line: str, spec: Path) -> None:
    assert (result.code, result.stdout) == (1, ""), result
    assert result.stderr == line + "\n"
    assert spec.read_bytes() == SPEC.read_bytes()


@pytest.mark.parametrize("name", LOGS)
def test_hostile_log(tmp_path: Path, name: str, update_golden: bool) -> None:
    spec = spec_copy(tmp_path)
    log = CASES / name
    result = calibrate(log, spec)
    golden = log.with_suffix(".err")
    if update_golden:
        golden.write_text(result.stderr.replace(str(log), "{log}"), encoding="utf-8")
    expected = golden.read_text(encoding="utf-8").rstrip("\n").replace("{log}", str(log))
    assert_refused(result, expected, spec)


def test_every_case_has_its_message() -> None:
    assert LOGS and sorted(p.name for p in CASES.glob("*.err")) == [
        n.replace(".log", ".err") for n in LOGS
    ]


def test_force_writes_another_models_log_and_rewrites_the_stale_comment(tmp_path: Path) -> None:
    """Issue 12's case: --force overwrites 5418.03 MiB with 300.50 MiB, and says so."""
    spec = spec_copy(tmp_path)
    log = CASES / "other-model-and-runtime.log"
    result = calibrate(log, spec, "--force")
    refusal = (CASES / "other-model-and-runtime.err").read_text().replace("{log}", str(log))
    overridden = refusal.split("service grandpa: ", 1)[1].split("; calibrate the service")[0]
    assert result.stderr.startswith(
        f"{log}: warning: --force: calibrating service grandpa although {overridden}\n"
    )
    text = spec.read_text()
    assert (
        "      CUDA0: {weights: 1347.93MiB, kv: 6144.00MiB, compute: 300.50MiB}     "
        "# from other-model-and-runtime.log (was compute 5418.03MiB)\n" in text
    )
    assert "5418.03 MiB" not in text.split("CUDA1:")[0].split("measured:")[-1]
    # an entry whose values all stay keeps its comment
    assert '      CUDA1: {compute: 5032.00MiB}     # "CUDA1 compute buffer size' in text
    measured = YAML(typ="safe").load(text)["services"]["grandpa"]["measured"]
    assert measured["CUDA0"] == {
        "weights": "1347.93MiB",
        "kv": "6144.00MiB",
        "compute": "300.50MiB",
    }


def _sparse(path: Path, size: int) -> Path:
    with path.open("wb") as f:
        f.truncate(size)
    return path


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def _long_line(path: Path) -> Path:
    """16 MiB without a newline (the limit): read in 4 KiB pieces, never whole."""
    with path.open("wb") as f:
        for _ in range(16):
            f.write(b"x" * (1 << 20))
    return path


def _many_lines(path: Path) -> Path:
    """16 MiB of short journal lines: the most a log may be, streamed line by line."""
    line = b"Nov 22 15:46:01 compute podman[812]: slot update_slots: id  0 | task 7 | n_past = 9\n"
    with path.open("wb") as f:
        f.write(line * ((16 << 20) // len(line)))
    return path


def _costly_lines(path: Path) -> Path:
    """16 MiB of 4000-byte lines made to be slow to match: every needle, colons, digits."""
    needles = (
        "buffer size general.architecture str = x .block_count u32 = 1 print_info: arch = x "
        "n_layer n_layer_all loaded meta data CUDA devices attn_max_b fused_moe pinned host "
        "load_tensors: llama_context: sched_reserve: llama_kv_cache: llama_memory_recurrent: "
    )
    line = (("a: " * 600 + needles) * 2 + "f: CUDA0 buffer size = " + "9" * 2000)[:3999] + "\n"
    with path.open("w") as f:
        f.write(line * ((16 << 20) // len(line)))
    return path


def _log_link(path: Path) -> Path:
    path.symlink_to("/dev/zero")
    return path


NO_SIZES = (
    "no buffer sizes found in {log} (is it a llama.cpp/ik_llama.cpp start-up log? the server "
    "prints '... buffer size = N MiB' lines at its default log level: on llama.cpp keep -lv at "
    "3 or more; capture stdout and stderr, e.g. podman logs NAME > LOG 2>&1)"
)
TOO_BIG = (
    "larger than the 16 MiB calibrate reads; it has {mib} MiB; a start-up log is a few MiB at "
    "most: pass only the start-up"
)
NOT_A_FILE = "save the log to a file first (podman logs NAME > LOG 2>&1)"
SPECIAL = {
    "fifo": (_fifo, f"is a FIFO (named pipe), not a regular file; {NOT_A_FILE}"),
    "link-to-dev-zero": (_log_link, f"is a character device, not a regular file; {NOT_A_FILE}"),
    "directory": (lambda p: (p.mkdir(), p)[1], "is a directory, not a file"),
    "200-mb": (lambda p: _sparse(p, 200_000_000), TOO_BIG.format(mib="190.7")),
    "16-mib-and-a-byte": (lambda p: _sparse(p, (16 << 20) + 1), TOO_BIG.format(mib="16.0")),
    "16-mib-line": (_long_line, NO_SIZES),
    "16-mib-of-lines": (_many_lines, NO_SIZES),
    "16-mib-of-costly-lines": (_costly_lines, NO_SIZES),
}


@pytest.mark.parametrize("case_id", sorted(SPECIAL))
def test_special_log(tmp_path: Path, case_id: str) -> None:
    spec = spec_copy(tmp_path)
    make, message = SPECIAL[case_id]
    log = make(tmp_path / "server.log")
    result = calibrate(log, spec)
    assert_refused(result, f"{log}: error: {message.replace('{log}', str(log))}", spec)


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom", "/dev/stdin"])
def test_devices_are_refused_unread(tmp_path: Path, device: str) -> None:
    spec = spec_copy(tmp_path)
    result = calibrate(device, spec)
    kind = "a character device"
    assert_refused(result, f"{device}: error: is {kind}, not a regular file; {NOT_A_FILE}", spec)


def test_a_spec_that_is_not_a_file_is_refused(tmp_path: Path) -> None:
    fifo = _fifo(tmp_path / "layout.yaml")
    result = run_bounded(
        ["calibrate", str(CASES.parent / "calibrate" / "seed001-2gpu.log"), str(fifo)]
    )
    assert (result.code, result.stdout) == (1, "")
    assert result.stderr == (
        f"{fifo}: error: is a FIFO (named pipe), not a regular file; give the spec file itself\n"
    )
