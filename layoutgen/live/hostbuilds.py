"""The build of each runtime on this host: what ``doctor`` checks against ``version:``
and what ``probe`` lists.

Why a build is read here and not trusted from the spec: without ``version:`` a layout
is planned for every build, and a written version that is not what runs plans the
wrong rules (seed 001: build 4357 places experts the other way round from newer
builds).  Where the build is found, in order:

- an image's labels, but only an ``org.opencontainers.image.version`` that the
  image's own labels tie to the runtime (``org.opencontainers.image.source``,
  ``.title`` or ``.url`` naming llama.cpp, ik_llama.cpp or vllm).  The official
  images set no labels of their own (ggml-org/llama.cpp's ``docker.yml`` passes none
  to ``docker/build-push-action``; vLLM's ``docker/Dockerfile`` has no ``LABEL``),
  and both are built ``FROM nvidia/cuda:…-ubuntu24.04`` / ``ubuntu22.04``, whose
  Ubuntu base labels ``org.opencontainers.image.version=24.04``: read bare, that is
  a vLLM release 24.4;
- the image tag (:func:`layoutgen.importer.build.from_image`: ``server-cuda-b6123``,
  ``b6123``, ``4327``; vLLM ``v0.10.2``);
- the program itself, run with ``--version`` and no GPU: a native ``binary:``
  directly, in a clean environment with ``CUDA_VISIBLE_DEVICES=`` (llama.cpp and
  ik_llama.cpp print ``version: 6123 (a1b2c3d)`` on stderr; ``vllm --version``
  prints ``0.10.2``); an image through ``podman run --rm --pull=never
  --network=none`` with no device, ``NVIDIA_VISIBLE_DEVICES=void`` (the NVIDIA
  hook's "no GPU") and the image's entrypoint (vLLM: its Python asks
  ``importlib.metadata`` for the installed release, which loads no CUDA).

Every run is bounded: its process group is killed after the timeout (a ``--version``
that hangs, or a script whose child holds the pipe), and a container that outlives
its client is removed by name.  Nothing from a file reaches a shell: argv lists only,
``--`` before the image.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Any

from layoutgen.importer import build as tagged

#: a native server's --version (llama-server prints before touching a GPU; vllm
#: imports its CLI first, a few seconds)
BINARY_TIMEOUT_S = 20.0
#: podman image inspect / images: local metadata only
INSPECT_TIMEOUT_S = 20.0
#: a container started only to print its version (image already local)
RUN_TIMEOUT_S = 60.0
#: what is kept of a program's output (a --version is a few lines)
MAX_OUTPUT = 64 << 10
#: what is kept of podman's JSON (an image record with a long history is tens of KiB;
#: a store of hundreds of images, a few MiB); a longer answer is no JSON
MAX_JSON = 16 << 20
#: what probe runs at most (each image may cost a container start)
MAX_PROBED = 12
SERVER_NAMES = ("llama-server", "vllm")
KINDS = ("llama.cpp", "ik_llama.cpp", "vllm")
#: labels that say whose image it is (the version label counts only beside one of them)
OWNER_LABELS = (
    "org.opencontainers.image.source",
    "org.opencontainers.image.title",
    "org.opencontainers.image.url",
)
VERSION_LABEL = "org.opencontainers.image.version"
_PLAIN_PATH = re.compile(r"/?[A-Za-z0-9_.+-]+(?:/[A-Za-z0-9_.+-]+)*")
_VLLM_VERSION_PY = "import importlib.metadata as m; print(m.version('vllm'))"


@dataclass(frozen=True)
class HostBuild:
    """The build of one image or binary as found on this host."""

    kind: str  # llama.cpp, ik_llama.cpp, vllm; "llama.cpp or ik_llama.cpp" when unsure
    what: str  # "image ghcr.io/ggml-org/llama.cpp:server-cuda", "binary /usr/bin/llama-server"
    version: str | None  # "6123", "0.10.2"; None when not found
    how: str  # where it was read, or why not
    missing: bool = False  # a native binary that is not there: nothing can start


@dataclass(frozen=True)
class Ran:
    returncode: int | None  # None: not run, or stopped at the timeout
    stdout: str  # clipped to the run's limit
    stderr: str
    reason: str  # why it did not run to the end; "" when it did

    @property
    def output(self) -> str:
        """Both streams, each starting on a line of its own (a version line on stderr
        after a stdout without a final newline is still at the start of a line)."""
        return "\n".join(t for t in (self.stdout, self.stderr) if t)


# ---------------------------------------------------------------- running


def run_bounded(
    argv: Sequence[str],
    *,
    timeout: float,
    env: Mapping[str, str] | None = None,
    on_timeout: Sequence[str] | None = None,
    limit: int = MAX_OUTPUT,
) -> Ran:
    """Run ``argv`` (no shell) for at most ``timeout`` seconds, in its own process
    group, which is killed whole at the timeout (a child holding the pipe open would
    otherwise keep the read waiting).  Of each stream the first ``limit`` bytes are
    kept and the rest read and dropped, so a program that floods its output costs
    no memory.  ``on_timeout``: a command run after the kill (``podman rm -f NAME``:
    a container outlives its killed client)."""
    shown = PurePosixPath(argv[0]).name
    try:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(env) if env is not None else None,
            start_new_session=True,
        )
    except FileNotFoundError:
        where = "there" if "/" in argv[0] else "on PATH"
        return Ran(None, "", "", f"{shown} is not {where}")
    except OSError as exc:
        return Ran(None, "", "", f"{shown} could not run: {exc.strerror or exc}")
    assert proc.stdout is not None and proc.stderr is not None
    kept: dict[int, bytearray] = {1: bytearray(), 2: bytearray()}
    readers = [
        threading.Thread(target=_drain, args=(stream, kept[fd], limit), daemon=True)
        for fd, stream in ((1, proc.stdout), (2, proc.stderr))
    ]
    for r in readers:
        r.start()
    deadline = time.monotonic() + timeout
    try:
        proc.wait(timeout=timeout)
        for r in readers:  # the pipes close when the last holder exits
            r.join(timeout=max(0.0, deadline - time.monotonic()))
        stopped = any(r.is_alive() for r in readers)
    except subprocess.TimeoutExpired:
        stopped = True
    if stopped:
        _kill_group(proc)
        for r in readers:
            r.join(timeout=2.0)
        if on_timeout is not None:
            run_bounded(on_timeout, timeout=INSPECT_TIMEOUT_S)
        return Ran(None, "", "", f"did not answer within {timeout:g} s (stopped)")
    out, err = (bytes(kept[fd]).decode("utf-8", "replace") for fd in (1, 2))
    return Ran(proc.returncode, out, err, "")


def _drain(stream: IO[bytes], into: bytearray, limit: int) -> None:
    with stream:
        while chunk := stream.read1(65536) if hasattr(stream, "read1") else stream.read(65536):
            if len(into) < limit:
                into += chunk[: limit - len(into)]


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """TERM first (podman passes it to the container, which then stops and is removed),
    then KILL for whatever of the group is left, the leader waited for (no zombie)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=2.0)


def clean_env() -> dict[str, str]:
    """What a native ``--version`` runs with: no GPU visible, nothing of this shell but
    the paths a server needs to start (PATH, HOME, LD_LIBRARY_PATH)."""
    env = {
        "PATH": os.environ.get("PATH", os.defpath),
        "LANG": "C.UTF-8",
        "CUDA_VISIBLE_DEVICES": "",
        "HIP_VISIBLE_DEVICES": "",
        "ROCR_VISIBLE_DEVICES": "",
        "NVIDIA_VISIBLE_DEVICES": "void",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
    }
    for key in ("HOME", "LD_LIBRARY_PATH"):
        if key in os.environ:
            env[key] = os.environ[key]
    return env


# ---------------------------------------------------------------- parsing


def version_in(text: str, kind: str) -> str | None:
    """The build a ``--version`` printed: llama.cpp/ik ``version: 6123 (a1b2c3d)`` (also
    ``build: …`` as a start-up log has it), vLLM a release alone on its line."""
    if kind == "vllm":
        for line in reversed(text.strip().splitlines()):
            m = tagged._VLLM_TAG.fullmatch(line.strip())
            if m is not None and tagged._known("vllm", m.group(1)):
                return m.group(1)
        return None
    found = tagged.from_log(text, kind if kind in KINDS else "llama.cpp")
    return found[0].version if found is not None else None


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    hit = next((line for line in lines if re.search(r"\bversion\b|\bbuild\b", line)), None)
    return (hit or (lines[0] if lines else ""))[:160]


def kind_of_image(image: str) -> str | None:
    """Which runtime an image's repository names (ik first: its names hold "llama")."""
    repo = image.split("@", 1)[0]
    tag = tagged.tag_of(repo)
    repo = (repo[: -len(tag) - 1] if tag is not None else repo).lower()
    if "ik_llama" in repo or "ik-llama" in repo:
        return "ik_llama.cpp"
    if "vllm" in repo:
        return "vllm"
    if any(n in repo for n in ("llama.cpp", "llama-cpp", "llama_cpp", "llamacpp")):
        return "llama.cpp"
    return None


def label_version(labels: Mapping[str, Any], kind: str) -> str | None:
    """``org.opencontainers.image.version`` where the labels tie it to the runtime."""
    words = {"llama.cpp": ("llama.cpp", "llama-cpp"), "vllm": ("vllm",)}.get(
        kind, ("ik_llama", "ik-llama")
    )
    owner = " ".join(str(labels.get(k, "")) for k in OWNER_LABELS).lower()
    value = labels.get(VERSION_LABEL)
    if not isinstance(value, str) or not any(w in owner for w in words):
        return None
    if kind == "vllm":
        m = tagged._VLLM_TAG.fullmatch(value)
        found = m.group(1) if m is not None else None
    else:
        m2 = re.fullmatch(r"b?(\d{3,6})", value)
        found = m2.group(1) if m2 is not None else None
    return found if found is not None and tagged._known(kind, found) else None


# ---------------------------------------------------------------- binaries


def binary_build(path: str, kind: str, *, timeout: float = BINARY_TIMEOUT_S) -> HostBuild:
    """``BINARY --version`` run directly, without a GPU."""
    what = f"binary {path}"
    p = Path(path)
    if not p.is_file():
        return HostBuild(kind, what, None, f"{path} is not there", missing=True)
    if not os.access(p, os.X_OK):
        return HostBuild(kind, what, None, f"{path} is not executable")
    ran = run_bounded([path, "--version"], timeout=timeout, env=clean_env())
    return _reported(kind, what, f"'{p.name} --version'", ran)


def _reported(kind: str, what: str, asked: str, ran: Ran) -> HostBuild:
    """The build a version run printed, or why none was read (ASKED: what was run)."""
    if ran.reason:
        return HostBuild(kind, what, None, f"{asked} {ran.reason}")
    found = version_in(ran.output, kind)
    said = _first_line(ran.output)
    if found is None:
        status = f" (exit status {ran.returncode})" if ran.returncode else ""
        return HostBuild(kind, what, None, f"{asked} printed no build{status}: {said!r}")
    return HostBuild(kind, what, found, f"{asked} printed {said!r}")


# ---------------------------------------------------------------- images


def inspect_image(image: str, *, timeout: float = INSPECT_TIMEOUT_S) -> tuple[dict[str, Any], str]:
    """``podman image inspect`` of a local image: (record, "") or ({}, why)."""
    ran = run_bounded(["podman", "image", "inspect", "--", image], timeout=timeout, limit=MAX_JSON)
    if ran.reason:
        return {}, ran.reason if ran.reason.endswith(
            "on PATH"
        ) else f"podman image inspect {ran.reason}"
    if ran.returncode != 0:
        return {}, "the image is not on this host (podman pull it)"
    try:
        doc = json.loads(ran.stdout)
    except ValueError:
        return {}, "podman image inspect printed no JSON"
    record = doc[0] if isinstance(doc, list) and doc and isinstance(doc[0], dict) else None
    if record is None:
        return {}, "podman image inspect printed no image record"
    return record, ""


def _config(record: Mapping[str, Any]) -> Mapping[str, Any]:
    config = record.get("Config")
    return config if isinstance(config, dict) else {}


def labels_of(record: Mapping[str, Any]) -> Mapping[str, Any]:
    labels = _config(record).get("Labels") or record.get("Labels")
    return labels if isinstance(labels, dict) else {}


def version_argv(image: str, kind: str, record: Mapping[str, Any], name: str) -> list[str]:
    """The ``podman run`` that prints the image's build without a GPU or network."""
    entry = _config(record).get("Entrypoint")
    first = entry[0] if isinstance(entry, list) and entry and isinstance(entry[0], str) else ""
    plain = _PLAIN_PATH.fullmatch(first) is not None and not first.startswith("-")
    if kind == "vllm":
        python = first if plain and PurePosixPath(first).name.startswith("python") else "python3"
        program, args = python, ["-c", _VLLM_VERSION_PY]
    else:
        program, args = (first if plain else "llama-server"), ["--version"]
    return [
        "podman",
        "run",
        "--rm",
        f"--name={name}",
        "--pull=never",
        "--network=none",
        "--cap-drop=all",
        "--security-opt=no-new-privileges",
        "--env=NVIDIA_VISIBLE_DEVICES=void",
        "--env=CUDA_VISIBLE_DEVICES=",
        "--env=VLLM_NO_USAGE_STATS=1",
        f"--entrypoint={program}",
        "--",
        image,
        *args,
    ]


def image_build(image: str, kind: str, *, timeout: float = RUN_TIMEOUT_S) -> HostBuild:
    """Labels tied to the runtime, else the tag, else the program in the image."""
    what = f"image {image}"
    record, why = inspect_image(image)
    if record:
        found = label_version(labels_of(record), kind)
        if found is not None:
            return HostBuild(kind, what, found, f"from the image label {VERSION_LABEL}")
    by_tag = tagged.from_image(image, kind)
    if by_tag is not None:
        return HostBuild(kind, what, by_tag.version, by_tag.where)
    if not record:
        tag = tagged.tag_of(image)
        named = f"the tag {tag} names no build" if tag else "no tag"
        return HostBuild(kind, what, None, f"{named}, and {why}")
    name = f"layoutgen-version-{secrets.token_hex(6)}"
    argv = version_argv(image, kind, record, name)
    ran = run_bounded(
        argv, timeout=timeout, on_timeout=["podman", "rm", "--force", "--time=0", "--", name]
    )
    program = argv[argv.index("--") - 1].removeprefix("--entrypoint=")
    asked = f"'{PurePosixPath(program).name} --version' in the image"
    if kind == "vllm":
        asked = "importlib.metadata.version('vllm') in the image"
    return _reported(kind, what, asked, ran)


def runtime_build(kind: str, image: str | None, binary: str | None) -> HostBuild:
    """The build of a spec runtime's image or binary on this host."""
    if image is not None:
        return image_build(image, kind)
    assert binary is not None  # the schema asks for exactly one
    return binary_build(binary, kind)


# ---------------------------------------------------------------- probe


def _path_binaries(path: str) -> list[tuple[str, str]]:
    """(name, absolute path) of each server program on PATH, first hit per name."""
    out: list[tuple[str, str]] = []
    for name in SERVER_NAMES:
        hit = shutil.which(name, path=path)
        if hit is not None:
            out.append((name, os.path.abspath(hit)))
    return out


def local_images(*, timeout: float = INSPECT_TIMEOUT_S) -> tuple[list[tuple[str, str]], str]:
    """([(image name, kind)], problem): ``podman images`` whose repository names a runtime."""
    ran = run_bounded(["podman", "images", "--format", "json"], timeout=timeout, limit=MAX_JSON)
    if ran.reason or ran.returncode != 0:
        return [], f"podman images {ran.reason or f'exited with status {ran.returncode}'}"
    try:
        doc = json.loads(ran.stdout)
    except ValueError:
        return [], "podman images printed no JSON"
    names: set[tuple[str, str]] = set()
    for entry in doc if isinstance(doc, list) else []:
        listed = entry.get("Names") or entry.get("RepoTags") if isinstance(entry, dict) else None
        for name in listed if isinstance(listed, list) else []:
            kind = kind_of_image(name) if isinstance(name, str) else None
            if kind is not None and isinstance(name, str):
                names.add((name, kind))
    return sorted(names), ""


def found_on_host(path: str | None = None) -> tuple[list[HostBuild], list[str]]:
    """Server binaries on PATH and runtime images podman has, each with its build;
    and what could not be looked at."""
    found: list[HostBuild] = []
    for name, where in _path_binaries(path if path is not None else os.environ.get("PATH", "")):
        if name == "vllm":
            kind = "vllm"
        elif "ik_llama" in where or "ik-llama" in where:
            kind = "ik_llama.cpp"
        else:
            kind = "llama.cpp or ik_llama.cpp"
        found.append(binary_build(where, kind))
    problems: list[str] = []
    if shutil.which("podman", path=path) is None:
        return found, problems
    images, problem = local_images()
    if problem:
        problems.append(problem)
    for image, kind in images[:MAX_PROBED]:
        found.append(image_build(image, kind))
    if len(images) > MAX_PROBED:
        problems.append(f"{len(images) - MAX_PROBED} more runtime images not looked at")
    return found, problems
