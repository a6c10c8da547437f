"""doctor and probe read the build each runtime runs on this host (issue 30 item 2).

Real processes throughout: a ``llama-server`` script printing the version line
ik_llama.cpp's ``--version`` prints (``version: 3772 (5236c98b)``, copied from the
truth record ghx-ik-qwen3moe-i629-sousekd-5090-4090-win-ub2048), and a ``podman``
script answering ``image inspect``/``images``/``run`` as podman 5 does
(:mod:`tests.fakepodman`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from layoutgen.live import findings, hostbuilds, ports
from layoutgen.live.doctor import LiveHost
from layoutgen.live.nvml import NvmlReport
from layoutgen.render.validate import Validated, validate_files
from tests.fakepodman import UBUNTU_LABELS, FakePodman, images_entry, inspect_record

ROOT = Path(__file__).resolve().parent.parent
PROFILE = ROOT / "layouts" / "models" / "qwen3-coder-next-q4_0.yaml"
IK_VERSION = "version: 3772 (5236c98b)"  # as the truth record's log block prints it
BUILT_WITH = "built with cc (Ubuntu 13.3.0-6ubuntu2~24.04) 13.3.0 for x86_64-linux-gnu"

SPEC = """\
host:
  name: box
  cpu: {cores: 8, threads: 16}
  ram: 256GiB
  ram_reserve: 8GiB
  podman: "5.4"
  gpus: []
models:
  m: {path: /srv/models/qwen3-coder-next-q4_0.gguf, profile: %(profile)s}
runtimes:
  srv: {kind: %(kind)s, %(where)s%(version)s}
services:
  cpu: {model: m, runtime: srv, role: batch, port: 8000, ctx: 4096}
"""


def spec(
    tmp: Path, *, kind: str = "ik_llama.cpp", where: str = "", version: str | None = None
) -> Validated:
    path = tmp / "spec.yaml"
    path.write_text(
        SPEC
        % {
            "profile": PROFILE,
            "kind": kind,
            "where": where,
            "version": "" if version is None else f", version: {json.dumps(version)}",
        }
    )
    (result,) = validate_files([(path, "spec.yaml")])
    assert result.validated is not None, result.diagnostics
    return result.validated


def at_version(tmp: Path) -> str:
    """``spec.yaml:10:COL``: where the runtime's version value sits (after a tmp path)."""
    line = (tmp / "spec.yaml").read_text().splitlines()[10]
    return f"spec.yaml:11:{line.index('version: ') + len('version: ') + 1}"


def script(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


def llama_server(tmp: Path, line: str = IK_VERSION) -> Path:
    """A server that prints its version as llama-server does: on stderr, then exits 0;
    and writes the environment it was given beside itself."""
    return script(
        tmp / "bin" / "llama-server",
        f'env > "$(dirname "$0")/env.txt"\necho "{line}" >&2\necho "{BUILT_WITH}" >&2',
    )


def host(v: Validated) -> LiveHost:
    """This host, as gather reads it, for the runtimes alone."""
    builds = {
        rid: hostbuilds.runtime_build(r.kind, r.image, r.binary)
        for rid, r in v.spec.runtimes.items()
    }
    return LiveHost(
        nvml=NvmlReport(False, "no driver", None, None, ()),
        mem_available=None,
        memlock=None,
        sockets=ports.Sockets(()),
        podman="5.4.2",
        builds=builds,
    )


def build_lines(v: Validated) -> list[str]:
    return [f.diagnostic.gcc() for f in findings.diagnose(v, host(v)) if f.check == "build"]


# ------------------------------------------------------------ native binaries


def test_a_binary_of_another_build_than_version_is_an_error_naming_both(tmp_path: Path) -> None:
    binary = llama_server(tmp_path)
    v = spec(tmp_path, where=f"binary: {binary}", version="4840")
    assert build_lines(v) == [
        f'{at_version(tmp_path)}: error: runtimes.srv.version: the spec says "4840", but the '
        "binary "
        f"{binary} runs build 3772 ('llama-server --version' printed '{IK_VERSION}'): the "
        'plan follows another build\'s rules; write version: "3772", or run the build the '
        "spec names"
    ]


def test_a_binary_of_the_written_build_is_no_finding(tmp_path: Path) -> None:
    binary = llama_server(tmp_path)
    assert build_lines(spec(tmp_path, where=f"binary: {binary}", version="3772")) == []
    # b3772 and 3772 name one build
    assert build_lines(spec(tmp_path, where=f"binary: {binary}", version="b3772")) == []


def test_no_version_says_which_build_was_found_and_to_write_it(tmp_path: Path) -> None:
    binary = llama_server(tmp_path, "version: 6123 (a1b2c3d)")
    v = spec(tmp_path, kind="llama.cpp", where=f"binary: {binary}")
    assert build_lines(v) == [
        "spec.yaml:11:3: warning: runtimes.srv: no version:, the plan holds for every build; "
        f"the binary {binary} runs build 6123 ('llama-server --version' printed 'version: "
        '6123 (a1b2c3d)\'): write version: "6123" to plan for that build alone'
    ]


def test_a_build_that_cannot_be_read_is_a_warning_saying_why(tmp_path: Path) -> None:
    binary = script(tmp_path / "bin" / "llama-server", "echo 'usage: llama-server [options]'")
    v = spec(tmp_path, where=f"binary: {binary}", version="4840")
    assert build_lines(v) == [
        f"{at_version(tmp_path)}: warning: runtimes.srv.version: the build of the binary {binary} "
        "could not be read here ('llama-server --version' printed no build: 'usage: "
        'llama-server [options]\'): doctor cannot check version: "4840"'
    ]
    garbled = script(tmp_path / "bin" / "llama-server", "printf 'version: \\033[31m'")
    (line,) = build_lines(spec(tmp_path, kind="llama.cpp", where=f"binary: {garbled}"))
    assert line.endswith(
        "'llama-server --version' printed no build: 'version: \\x1b[31m'); the plan holds "
        "for every build: write version: as the build number 'llama-server --version' "
        "prints (e.g. 6123)"
    ), line


def test_a_binary_that_is_not_there_is_an_error_at_binary(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "llama-server"
    (line,) = build_lines(spec(tmp_path, kind="llama.cpp", where=f"binary: {missing}"))
    assert line == (
        f"spec.yaml:11:34: error: runtimes.srv.binary: {missing} is not there: the services "
        "that use it cannot start; install the server there, or correct the path"
    )


def test_version_runs_without_a_gpu_and_without_this_shells_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LLAMA_ARG_MODEL", "/srv/models/huge.gguf")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    binary = llama_server(tmp_path)
    assert hostbuilds.binary_build(str(binary), "ik_llama.cpp").version == "3772"
    env = dict(line.split("=", 1) for line in (binary.parent / "env.txt").read_text().splitlines())
    assert env["CUDA_VISIBLE_DEVICES"] == "" and env["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert "LLAMA_ARG_MODEL" not in env


def test_a_version_that_hangs_is_stopped_with_its_children(tmp_path: Path) -> None:
    """The script's child holds the output pipe: killing the script alone would leave
    the read waiting for the child; the whole process group goes."""
    pidfile = tmp_path / "child.pid"
    binary = script(tmp_path / "bin" / "llama-server", f"sleep 300 & echo $! > {pidfile}; wait")
    found = hostbuilds.binary_build(str(binary), "llama.cpp", timeout=0.5)
    assert found.version is None
    assert found.how == "'llama-server --version' did not answer within 0.5 s (stopped)"
    child = int(pidfile.read_text())
    for _ in range(100):  # reaped by init once its group is killed; bounded, not timed
        if not _alive(child):
            break
        time.sleep(0.05)
    assert not _alive(child)


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_vllm_version_is_the_release_it_prints(tmp_path: Path) -> None:
    binary = script(tmp_path / "venv" / "bin" / "vllm", "echo 0.10.2")
    found = hostbuilds.binary_build(str(binary), "vllm")
    assert (found.version, found.how) == ("0.10.2", "'vllm --version' printed '0.10.2'")


# ------------------------------------------------------------ images


@pytest.fixture
def podman(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakePodman:
    fake = FakePodman(tmp_path / "podman")
    monkeypatch.setenv("PATH", f"{fake.bin}{os.pathsep}{os.environ['PATH']}")
    return fake


LLAMA = "ghcr.io/ggml-org/llama.cpp:server-cuda"
VLLM = "docker.io/vllm/vllm-openai:latest"
IK = "registry.home.arpa/ik_llama.cpp:latest"


def test_an_image_whose_tag_names_no_build_is_asked_without_gpu_or_network(
    podman: FakePodman,
) -> None:
    """The official image's labels are its Ubuntu base's (version 24.04): not a build.
    Its entrypoint is run with --version, offline, with no device."""
    podman.images = {LLAMA: inspect_record(LLAMA, ["/app/llama-server"], UBUNTU_LABELS)}
    podman.run_stderr = f"version: 6123 (a1b2c3d)\n{BUILT_WITH}\n"
    podman.write()
    found = hostbuilds.image_build(LLAMA, "llama.cpp")
    assert (found.version, found.how) == (
        "6123",
        "'llama-server --version' in the image printed 'version: 6123 (a1b2c3d)'",
    )
    inspect, run = podman.calls()
    assert inspect == ["image", "inspect", "--", LLAMA]
    assert run[:2] == ["run", "--rm"] and run[2].startswith("--name=layoutgen-version-")
    assert run[3:] == [
        "--pull=never",
        "--network=none",
        "--cap-drop=all",
        "--security-opt=no-new-privileges",
        "--env=NVIDIA_VISIBLE_DEVICES=void",
        "--env=CUDA_VISIBLE_DEVICES=",
        "--env=VLLM_NO_USAGE_STATS=1",
        "--entrypoint=/app/llama-server",
        "--",
        LLAMA,
        "--version",
    ]
    assert not any(w.startswith("--device") or "gpu" in w for w in run)


def test_a_vllm_image_reports_its_installed_release_not_ubuntus(podman: FakePodman) -> None:
    """vllm/vllm-openai carries org.opencontainers.image.version=22.04 from its base: read
    bare, a vLLM release 22.4.  Its Python says which vllm is installed."""
    labels = dict(UBUNTU_LABELS, **{"org.opencontainers.image.version": "22.04"})
    entry = ["python3", "-m", "vllm.entrypoints.openai.api_server"]
    podman.images = {VLLM: inspect_record(VLLM, entry, labels)}
    podman.run_stdout = "0.10.2\n"
    podman.write()
    found = hostbuilds.image_build(VLLM, "vllm")
    assert found.version == "0.10.2"
    run = podman.calls()[1]
    assert run[-5:] == [
        "--entrypoint=python3",
        "--",
        VLLM,
        "-c",
        "import importlib.metadata as m; print(m.version('vllm'))",
    ]


def test_a_label_the_runtime_set_is_read_without_running_anything(podman: FakePodman) -> None:
    labels = {
        "org.opencontainers.image.source": "https://github.com/ikawrakow/ik_llama.cpp",
        "org.opencontainers.image.version": "4840",
    }
    podman.images = {IK: inspect_record(IK, ["/app/llama-server"], labels)}
    podman.write()
    found = hostbuilds.image_build(IK, "ik_llama.cpp")
    assert (found.version, found.how) == (
        "4840",
        "from the image label org.opencontainers.image.version",
    )
    assert [c[0] for c in podman.calls()] == ["image"]


def test_an_image_that_is_not_here_is_unknown_unless_its_tag_says(podman: FakePodman) -> None:
    podman.write()
    found = hostbuilds.image_build(LLAMA, "llama.cpp")
    assert found.version is None
    assert found.how == (
        "the tag server-cuda names no build, and the image is not on this host (podman pull it)"
    )
    tagged = hostbuilds.image_build(f"{LLAMA}-b6123", "llama.cpp")
    assert (tagged.version, tagged.how) == ("6123", "from the image tag server-cuda-b6123")


def test_a_container_that_hangs_is_stopped_and_removed(podman: FakePodman) -> None:
    podman.images = {LLAMA: inspect_record(LLAMA, ["/app/llama-server"], UBUNTU_LABELS)}
    podman.run_sleeps = 300
    podman.write()
    found = hostbuilds.image_build(LLAMA, "llama.cpp", timeout=0.5)
    assert found.version is None
    assert found.how == (
        "'llama-server --version' in the image did not answer within 0.5 s (stopped)"
    )
    _, run, rm = podman.calls()
    name = run[2].removeprefix("--name=")
    assert rm == ["rm", "--force", "--time=0", "--", name]


def test_doctor_finds_the_image_runs_another_build(podman: FakePodman, tmp_path: Path) -> None:
    podman.images = {IK: inspect_record(IK, ["/app/llama-server"], UBUNTU_LABELS)}
    podman.run_stderr = f"{IK_VERSION}\n"
    podman.write()
    v = spec(tmp_path, where=f"image: {IK}", version="4840")
    (line,) = build_lines(v)
    assert line.startswith(
        f'{at_version(tmp_path)}: error: runtimes.srv.version: the spec says "4840", but the image '
        f"{IK} runs build 3772 ('llama-server --version' in the image printed "
        f"'{IK_VERSION}')"
    ), line
    assert 'write version: "3772"' in line


# ------------------------------------------------------------ end to end


LAYOUTGEN = str(Path(sys.executable).with_name("layoutgen"))


def test_doctor_cli_reports_the_build_mismatch_as_json(podman: FakePodman, tmp_path: Path) -> None:
    podman.images = {IK: inspect_record(IK, ["/app/llama-server"], UBUNTU_LABELS)}
    podman.run_stderr = f"{IK_VERSION}\n{BUILT_WITH}\n"
    podman.write()
    v = spec(tmp_path, where=f"image: {IK}", version="4840")
    del v
    done = subprocess.run(
        [LAYOUTGEN, "doctor", str(tmp_path / "spec.yaml"), "--format", "json"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=dict(os.environ, LAYOUTGEN_ALLOW_OUTSIDE="1"),
    )
    assert done.returncode == 1, done.stderr
    (build,) = [f for f in json.loads(done.stdout) if f["check"] == "build"]
    assert (build["line"], build["severity"]) == (11, "error")
    assert "runs build 3772" in build["message"] and 'the spec says "4840"' in build["message"]


def test_probe_lists_the_runtimes_it_finds(podman: FakePodman, tmp_path: Path) -> None:
    binary = llama_server(tmp_path / "ik_llama.cpp" / "build")
    podman.listed = [
        images_entry([f"{LLAMA}-b6123"]),
        images_entry([VLLM]),
        images_entry(["docker.io/library/postgres:16"]),
    ]
    podman.images = {VLLM: inspect_record(VLLM, ["vllm", "serve"], UBUNTU_LABELS)}
    podman.run_stdout = "0.11.0\n"
    podman.write()
    path = f"{binary.parent}{os.pathsep}{podman.bin}{os.pathsep}{os.environ['PATH']}"
    found, problems = hostbuilds.found_on_host(path)
    assert problems == []
    shown = {(b.what, b.kind, b.version) for b in found}
    assert shown == {
        (f"binary {binary}", "ik_llama.cpp", "3772"),
        (f"image {LLAMA}-b6123", "llama.cpp", "6123"),
        (f"image {VLLM}", "vllm", "0.11.0"),
    }


def test_a_flood_of_output_is_read_and_dropped_past_the_limit(tmp_path: Path) -> None:
    """30 MB on stdout before the version line on stderr: the build is found, and only
    the first MAX_OUTPUT bytes of the flood are kept."""
    binary = script(
        tmp_path / "bin" / "llama-server",
        f"head -c 30000000 /dev/zero | tr '\\0' x; echo '{IK_VERSION}' >&2",
    )
    ran = hostbuilds.run_bounded([str(binary), "--version"], timeout=60)
    assert (ran.returncode, ran.reason) == (0, "")
    assert len(ran.stdout) == hostbuilds.MAX_OUTPUT and set(ran.stdout) == {"x"}
    assert hostbuilds.version_in(ran.output, "ik_llama.cpp") == "3772"


def test_which_versions_name_one_build() -> None:
    assert findings.same_build("llama.cpp", "b6123", "6123") is True
    assert findings.same_build("llama.cpp", "6123 (a1b2c3d)", "6124") is False
    assert findings.same_build("vllm", "v0.10.2", "0.10.2") is True
    assert findings.same_build("vllm", "0.10.1.1", "0.10.2") is False
    assert findings.same_build("ik_llama.cpp", "2026-03-20", "4840") is None


def test_a_date_written_as_version_is_compared_by_asking_for_the_number(tmp_path: Path) -> None:
    binary = llama_server(tmp_path)
    (line,) = build_lines(spec(tmp_path, where=f"binary: {binary}", version="2026-03-20"))
    assert line == (
        f'{at_version(tmp_path)}: warning: runtimes.srv.version: version: "2026-03-20" is a '
        f"date, the binary {binary} runs build 3772 ('llama-server --version' printed "
        f"'{IK_VERSION}'); a date and a build number cannot be compared here: write "
        'version: "3772"'
    )


def _refused_lab(podman: FakePodman, tmp_path: Path) -> Path:
    """doctor_cli's GPU spec on an image that reports build 3772, with no version and a
    flag no build has (validate refuses it)."""
    from tests.test_doctor_cli import SPEC as GPU_SPEC

    podman.images = {IK: inspect_record(IK, ["/app/llama-server"], UBUNTU_LABELS)}
    podman.run_stderr = f"{IK_VERSION}\n"
    podman.write()
    path = tmp_path / "lab.yaml"
    path.write_text(
        GPU_SPEC.replace(
            '"registry.home.arpa/ik_llama.cpp:4327", version: "4327"', f'"{IK}"'
        ).replace("    ctx: 131072\n", "    ctx: 131072\n    args: [--no-such-flag]\n")
    )
    return path


def test_a_refused_spec_without_a_version_still_learns_the_build(
    podman: FakePodman, tmp_path: Path
) -> None:
    """An unversioned spec that validate refuses (here a flag no build has): doctor can
    still say which build the image runs and what to write."""
    from layoutgen.live import doctor

    path = _refused_lab(podman, tmp_path)
    (result,) = validate_files([(path, "lab.yaml")])
    assert result.validated is None
    assert "'--no-such-flag' is not a ik_llama.cpp flag" in str(result.diagnostics)
    (note,) = doctor.builds_of_refused(path, "lab.yaml")
    assert note.gcc() == (
        f"lab.yaml:12:3: warning: runtimes.ik: no version:; the image {IK} runs build 3772 "
        f"('llama-server --version' in the image printed '{IK_VERSION}'): write "
        'version: "3772"'
    )


def test_doctor_on_a_refused_spec_without_a_version_prints_the_build(
    podman: FakePodman, tmp_path: Path
) -> None:
    """`layoutgen doctor` itself: the refusal, then the build the host runs (exit 1)."""
    from conftest import run_cli

    path = _refused_lab(podman, tmp_path)
    result = run_cli(["doctor", str(path)])
    assert result.code == 1
    assert "'--no-such-flag' is not a ik_llama.cpp flag" in result.stderr
    assert "runs build 3772" in result.stderr and 'write version: "3772"' in result.stderr
