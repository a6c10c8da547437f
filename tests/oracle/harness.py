"""Run the real llama.cpp with a plan's argv and read back what it allocated.

The llama.cpp binaries come from ``make runtime`` (tests/tools/build_llama.sh),
cached outside the clone.  ``ggml-rpc-server`` processes on 127.0.0.1 act
as the devices; they are started with a bounded wait for their port and
always stopped (terminate, then kill) when the test is done.

``llama-completion -n 1 -no-cnv -lv 5`` loads the model, allocates the
context and logs, per buffer name, the model, KV and compute buffer sizes,
each layer's device and every tensor override; :func:`read_log` turns that
into numbers.  Sizes in the log are MiB with two decimals, so a logged size
is within 0.005 MiB of the real one.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

VERSION = "11434.0.0"
#: flags of llama-server that llama-completion does not take (they only serve HTTP)
SERVER_ONLY = {"--host": 1, "--port": 1, "--api-key-file": 1, "-rea": 1}
LOAD_TIMEOUT = 120  # seconds for one llama-completion run
RPC_START_TIMEOUT = 20


def tools_dir() -> Path:
    default = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "layoutgen/tools"
    return Path(os.environ.get("LAYOUTGEN_TOOLS", default))


def binary(name: str) -> Path:
    path = tools_dir() / f"llama.cpp-{VERSION}" / "bin" / name
    if not path.is_file():
        raise RuntimeError(f"{path} is missing: run `make runtime` (tests/tools/build_llama.sh)")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextlib.contextmanager
def rpc_servers(count: int) -> Iterator[list[str]]:
    """``count`` CPU-backed ggml-rpc-server processes on 127.0.0.1; yields their endpoints."""
    procs: list[subprocess.Popen[bytes]] = []
    endpoints: list[str] = []
    try:
        for _ in range(count):
            port = free_port()
            procs.append(
                subprocess.Popen(
                    [
                        str(binary("ggml-rpc-server")),
                        "-H",
                        "127.0.0.1",
                        "-p",
                        str(port),
                        "-d",
                        "CPU",
                        "-t",
                        "1",
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
            endpoints.append(f"127.0.0.1:{port}")
        for proc, endpoint in zip(procs, endpoints, strict=True):
            _wait_listening(proc, endpoint)
        yield endpoints
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _wait_listening(proc: subprocess.Popen[bytes], endpoint: str) -> None:
    host, _, port = endpoint.rpartition(":")
    deadline = time.monotonic() + RPC_START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"ggml-rpc-server for {endpoint} exited with {proc.returncode}")
        with socket.socket() as s:
            if s.connect_ex((host, int(port))) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"ggml-rpc-server did not listen on {endpoint} in {RPC_START_TIMEOUT} s")


def completion_argv(server_argv: Sequence[str], *, extra: Sequence[str] = ()) -> list[str]:
    """A plan's llama-server argv as a llama-completion run that loads, allocates, logs, exits."""
    out = [str(binary("llama-completion"))]
    args = list(server_argv[1:])
    i = 0
    while i < len(args):
        skip = SERVER_ONLY.get(args[i])
        if skip is not None:
            i += 1 + skip
            continue
        out.append(args[i])
        i += 1
    return [*out, "-n", "1", "-no-cnv", "-lv", "5", "-p", "hello", "--no-warmup", *extra]


@dataclass
class Run:
    argv: list[str]
    log: str
    #: buffer -> {"weights"|"kv"|"compute": bytes} (as logged, MiB with 2 decimals)
    buffers: dict[str, dict[str, int]] = field(default_factory=dict)
    #: layer -> device name as logged (RPC0, RPC1, CPU; the output layer is n_layer)
    layer_device: dict[int, str] = field(default_factory=dict)
    #: tensor -> buffer type it was overridden to (-ot, --cpu-moe, --n-cpu-moe)
    overrides: dict[str, str] = field(default_factory=dict)
    #: device name (RPC0, ...) -> its buffer name (RPC0[127.0.0.1:PORT])
    device_buffer: dict[str, str] = field(default_factory=dict)


# Read here with a regex of its own, not layoutgen.calibrate.command's reader, so the
# oracle stays an independent check of calibrate too (tests/test_calibrate.py).
_SIZE = re.compile(r"(\S+) +(model|KV|compute) buffer size = +([0-9.]+) MiB")
_LAYER = re.compile(r"load_tensors: layer +(\d+) assigned to device (\S+?),")
_OVERRIDE = re.compile(r"tensor (\S+) \([^)]*\) buffer type overridden to (\S+)")
_DEVICE = re.compile(r"using device (RPC\d+) \(([^)]+)\)")


def run(argv: Sequence[str], *, timeout: int = LOAD_TIMEOUT) -> Run:
    proc = subprocess.run(
        list(argv),
        capture_output=True,
        text=True,
        errors="replace",
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    log = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise AssertionError(f"llama-completion exited {proc.returncode}:\n{log[-4000:]}")
    result = Run(list(argv), log)
    for line in log.splitlines():
        if m := _SIZE.search(line):
            part = {"model": "weights", "KV": "kv", "compute": "compute"}[m.group(2)]
            sizes = result.buffers.setdefault(m.group(1), {})
            sizes[part] = sizes.get(part, 0) + round(float(m.group(3)) * 2**20)
        elif m := _LAYER.search(line):
            result.layer_device[int(m.group(1))] = m.group(2)
        elif m := _OVERRIDE.search(line):
            result.overrides[m.group(1)] = m.group(2)
        elif m := _DEVICE.search(line):
            result.device_buffer[m.group(1)] = f"RPC0[{m.group(2)}]"
    return result
