"""Real GGUF headers written by ``gguf.GGUFWriter``; data regions sparse (never written).

Tensor shapes are given in ggml order (ne0 first), as profiles write them;
``type_id`` may be any integer, including ik_llama.cpp ids mainline's enum
lacks (the writer packs it as a plain u32).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGUFValueType, GGUFWriter


@dataclass(frozen=True)
class Spec:
    name: str
    shape: tuple[int, ...]  # ggml order
    type_id: int
    nbytes: int


def pad(n: int, align: int = 32) -> int:
    return -(-n // align) * align


def write_model(
    path: Path,
    arch: str,
    kv: dict[str, tuple[Any, GGUFValueType]],
    tensors: list[Spec],
    *,
    split_max_tensors: int = 0,
) -> list[Path]:
    """Write header(s); each file is then extended to its full size without writing data."""
    writer = GGUFWriter(path, arch, split_max_tensors=split_max_tensors)
    for key, (value, vtype) in kv.items():
        sub = None
        if vtype is GGUFValueType.ARRAY:
            sub = (
                GGUFValueType.STRING
                if isinstance(value[0], str)
                else (GGUFValueType.BOOL if isinstance(value[0], bool) else GGUFValueType.INT32)
            )
        writer.add_key_value(key, value, vtype, sub_type=sub)
    for t in tensors:
        writer.add_tensor_info(
            t.name, tuple(reversed(t.shape)), np.dtype(np.float32), t.nbytes, raw_dtype=t.type_id
        )  # type: ignore[arg-type]
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    assert writer.fout is not None and writer.path is not None
    paths = writer.format_shard_names(writer.path)
    for fout, shard in zip(writer.fout, writer.tensors, strict=True):
        start = pad(fout.tell())
        fout.truncate(start + sum(pad(ti.nbytes) for ti in shard.values()))
        fout.close()
    writer.fout = None
    return paths


# ---------------------------------------------------------------- raw headers
# GGUFWriter refuses to write most broken headers; the hostile corpus
# (tests/test_hostile_gguf.py) builds them byte by byte from a valid one.

UINT8, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY = range(10)
UINT64, INT64, FLOAT64 = 10, 11, 12
_FORMATS = {
    UINT8: "<B",
    INT8: "<b",
    UINT16: "<H",
    INT16: "<h",
    UINT32: "<I",
    INT32: "<i",
    FLOAT32: "<f",
    BOOL: "<?",
    UINT64: "<Q",
    INT64: "<q",
    FLOAT64: "<d",
}


def u32(n: int) -> bytes:
    return struct.pack("<I", n)


def u64(n: int) -> bytes:
    return struct.pack("<Q", n)


def gstring(text: str | bytes, length: int | None = None) -> bytes:
    """A GGUF string: u64 length (``length`` if given), then the bytes."""
    raw = text.encode() if isinstance(text, str) else text
    return u64(len(raw) if length is None else length) + raw


def value(vtype: int, v: Any, item: int | None = None) -> bytes:
    """The encoded value of a key (without its type): scalars, strings, arrays."""
    if vtype == STRING:
        return gstring(v)
    if vtype == ARRAY:
        assert item is not None
        return u32(item) + u64(len(v)) + b"".join(value(item, x) for x in v)
    return struct.pack(_FORMATS[vtype], v)


@dataclass
class RawKV:
    key: bytes
    vtype: int
    payload: bytes  # the encoded value
    key_len: int | None = None  # a length prefix that lies; None: the true length


@dataclass
class RawTensor:
    name: bytes
    dims: list[int]  # ggml order
    type_id: int
    offset: int
    name_len: int | None = None  # a length prefix that lies; None: the true length
    n_dims: int | None = None  # likewise for the dimension count


@dataclass
class RawGGUF:
    """A GGUF header as plain fields; ``encode`` writes exactly what they say."""

    kv: list[RawKV] = field(default_factory=list)
    tensors: list[RawTensor] = field(default_factory=list)
    magic: bytes = b"GGUF"
    version: int = 3
    n_tensors: int | None = None  # None: the true count
    n_kv: int | None = None
    data_size: int = 0  # bytes after the aligned header (sparse)
    alignment: int = 32

    def set(self, key: str, vtype: int, v: Any, item: int | None = None) -> None:
        self.set_raw(key.encode(), vtype, value(vtype, v, item))

    def set_raw(self, key: bytes, vtype: int, payload: bytes) -> None:
        for entry in self.kv:
            if entry.key == key:
                entry.vtype, entry.payload = vtype, payload
                return
        self.kv.append(RawKV(key, vtype, payload))

    def drop(self, key: str) -> None:
        self.kv = [e for e in self.kv if e.key != key.encode()]

    def encode(self) -> bytes:
        out = [self.magic, u32(self.version)]
        out.append(u64(len(self.tensors) if self.n_tensors is None else self.n_tensors))
        out.append(u64(len(self.kv) if self.n_kv is None else self.n_kv))
        out += [gstring(e.key, e.key_len) + u32(e.vtype) + e.payload for e in self.kv]
        for t in self.tensors:
            n_dims = len(t.dims) if t.n_dims is None else t.n_dims
            out.append(gstring(t.name, t.name_len) + u32(n_dims))
            out.append(b"".join(u64(d) for d in t.dims) + u32(t.type_id) + u64(t.offset))
        return b"".join(out)

    def kv_end(self) -> int:
        """The offset where the tensor infos begin."""
        return len(RawGGUF(kv=self.kv, n_tensors=0).encode())

    def size(self) -> int:
        return pad(len(self.encode()), self.alignment) + self.data_size

    def write(self, path: Path) -> Path:
        header = self.encode()
        with path.open("wb") as f:
            f.write(header)
            f.truncate(pad(len(header), self.alignment) + self.data_size)
        return path


def raw_model(layers: int = 4, arch: str = "llama") -> RawGGUF:
    """A small valid model: f32 embeddings and one f32 norm per layer, data sparse."""
    g = RawGGUF()
    g.set("general.architecture", STRING, arch)
    g.set("general.name", STRING, "hostile test model")
    g.set(f"{arch}.block_count", UINT32, layers)
    g.set(f"{arch}.embedding_length", UINT32, 256)
    g.set(f"{arch}.attention.head_count", UINT32, 8)
    offset = 0
    for name, dims in [("token_embd.weight", [256, 16])] + [
        (f"blk.{i}.attn_norm.weight", [256]) for i in range(layers)
    ]:
        g.tensors.append(RawTensor(name.encode(), dims, 0, offset))
        size = 4
        for d in dims:
            size *= d
        offset += pad(size)
    g.data_size = offset
    return g


# ---------------------------------------------------------------- bounded runs
MEMORY_LIMIT = 1 << 30  # RLIMIT_AS of a child: a blow-up fails instead of swapping
TIME_LIMIT = 60  # seconds before a child counts as hung (generous: never a timing test)


@dataclass(frozen=True)
class Bounded:
    """A finished CLI run: exit code, output, and what it cost (for the reports)."""

    code: int
    stdout: str
    stderr: str
    seconds: float
    max_rss_mb: float


# The child is started by a small launcher that forks it, sets its limit and
# reaps it with wait4: a child forked straight from pytest would count pytest's
# own resident memory in its peak (Linux keeps the pre-exec high-water mark).
_LAUNCHER = """
import os, resource, sys, time
report, memory, argv = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
start = time.perf_counter()
pid = os.fork()
if pid == 0:
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    os.execv(argv[0], argv)
_, status, usage = os.wait4(pid, 0)
with open(report, "w") as f:
    f.write(f"{time.perf_counter() - start} {usage.ru_maxrss}")
code = os.waitstatus_to_exitcode(status)
sys.exit(code if code >= 0 else 128 - code)
"""


def run_bounded(args: list[str], *, memory: int = MEMORY_LIMIT) -> Bounded:
    """``layoutgen ARGS`` in a child process under RLIMIT_AS and a time limit.

    Its wall time and peak RSS are its own (see ``_LAUNCHER``); a child still
    running after ``TIME_LIMIT`` seconds is killed, with its launcher, and the
    run fails.
    """
    import os
    import signal
    import subprocess
    import sys
    import tempfile

    exe = str(Path(sys.executable).with_name("layoutgen"))
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "usage"
        launcher = [sys.executable, "-c", _LAUNCHER, str(report), str(memory), exe, *args]
        proc = subprocess.Popen(
            launcher,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        try:
            out, err = proc.communicate(timeout=TIME_LIMIT)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise AssertionError(
                f"layoutgen {args} ran past {TIME_LIMIT} s and was killed"
            ) from None
        seconds, rss = report.read_text().split()
    return Bounded(
        proc.returncode,
        out.decode(errors="replace"),
        err.decode(errors="replace"),
        float(seconds),
        int(rss) / 1024,
    )
