"""Reading GGUF headers (v2, v3) without touching tensor data, across split shards.

Why our own reader: ``gguf.GGUFReader`` memory-maps the whole file and builds
numpy views of every tensor, and it refuses ik_llama.cpp's type ids.  A
profile needs only the key/values and the tensor infos, which sit at the
start of each file: this reader reads them with plain ``read`` calls, and
skips long arrays (tokenizer vocabularies) by their lengths without keeping
them.  Every problem (wrong magic, truncation, a missing or foreign shard, an
unknown type id) is a one-line :class:`GGUFError` naming the file.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from layoutgen.errors import LayoutgenError

MAGIC = b"GGUF"
_CHUNK = 1 << 20
_KEEP_ARRAY = 4096  # arrays longer than this are skipped (only their length is kept)
_SCALARS = {
    0: "<B",
    1: "<b",
    2: "<H",
    3: "<h",
    4: "<I",
    5: "<i",
    6: "<f",
    7: "<?",
    10: "<Q",
    11: "<q",
    12: "<d",
}
_U64 = struct.Struct("<Q")
_SPLIT = re.compile(r"^(?P<stem>.*)-(?P<no>[0-9]{5})-of-(?P<count>[0-9]{5})\.gguf$")


class GGUFError(LayoutgenError):
    """A GGUF file (or set of shards) that cannot be read as a model."""


@dataclass(frozen=True)
class SkippedArray:
    """A long array whose values were not kept (tokenizer tokens, merges, scores)."""

    length: int


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]  # ggml order, ne0 first
    type_id: int
    offset: int  # from the start of the file's data section


@dataclass(frozen=True)
class Header:
    path: Path
    version: int
    kv: dict[str, Any]
    tensors: tuple[TensorInfo, ...]
    alignment: int
    data_offset: int
    file_size: int


class _Cursor:
    """Sequential little-endian reads from a file, fetched in chunks."""

    def __init__(self, f: BinaryIO, path: Path) -> None:
        self.f, self.path = f, path
        self.buf = b""
        self.pos = 0  # within buf
        self.base = 0  # file offset of buf[0]

    def need(self, n: int) -> None:
        if self.pos + n <= len(self.buf):
            return
        more = self.f.read(max(_CHUNK, n))
        self.buf = self.buf[self.pos :] + more
        self.base += self.pos
        self.pos = 0
        if len(self.buf) < n:
            raise GGUFError(
                f"{self.path}: truncated GGUF header (file ends at byte "
                f"{self.base + len(self.buf)})"
            )

    def unpack(self, fmt: str) -> Any:
        size = struct.calcsize(fmt)
        self.need(size)
        value = struct.unpack_from(fmt, self.buf, self.pos)[0]
        self.pos += size
        return value

    def string(self) -> str:
        n = self.unpack("<Q")
        self.need(n)
        raw = self.buf[self.pos : self.pos + n]
        self.pos += n
        return raw.decode("utf-8", errors="replace")

    def skip_strings(self, count: int) -> None:
        """Step over ``count`` length-prefixed strings without slicing or decoding them.

        A vocabulary has ~150k of them: the inner loop walks every string that
        lies wholly in the buffer with local names only (one ``unpack_from``
        per string); a string across the buffer's end refills it first.
        """
        u64 = _U64.unpack_from
        left = count
        while left:
            self.need(8)
            self.need(8 + u64(self.buf, self.pos)[0])  # the next string is now buffered
            buf, pos, limit = self.buf, self.pos, len(self.buf)
            while left and pos + 8 <= limit:
                end = pos + 8 + u64(buf, pos)[0]
                if end > limit:
                    break
                pos = end
                left -= 1
            self.pos = pos

    @property
    def offset(self) -> int:
        return self.base + self.pos


def read_header(path: Path) -> Header:
    """Key/values and tensor infos of one GGUF file."""
    try:
        with path.open("rb") as f:
            size = path.stat().st_size
            return _parse(_Cursor(f, path), path, size)
    except FileNotFoundError:
        raise GGUFError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise GGUFError(f"{path}: is a directory, not a GGUF file") from None
    except OSError as exc:
        raise GGUFError(f"{path}: cannot read: {exc.strerror}") from None


def _parse(cur: _Cursor, path: Path, size: int) -> Header:
    if size >= 4:
        cur.need(4)
    if size < 4 or cur.buf[:4] != MAGIC:
        raise GGUFError(f"{path}: not a GGUF file (no 'GGUF' magic at the start)")
    cur.pos = 4
    version = cur.unpack("<I")
    if version not in (2, 3):
        raise GGUFError(f"{path}: GGUF version {version} is not supported (only 2 and 3)")
    n_tensors, n_kv = cur.unpack("<Q"), cur.unpack("<Q")
    kv: dict[str, Any] = {}
    for _ in range(n_kv):
        key = cur.string()
        kv[key] = _value(cur, cur.unpack("<I"), path, key)
    tensors = []
    for _ in range(n_tensors):
        name = cur.string()
        n_dims = cur.unpack("<I")
        if n_dims > 4:
            raise GGUFError(f"{path}: tensor {name!r} has {n_dims} dimensions (at most 4)")
        shape = tuple(cur.unpack("<Q") for _ in range(n_dims))
        tensors.append(TensorInfo(name, shape, cur.unpack("<I"), cur.unpack("<Q")))
    alignment = int(kv.get("general.alignment", 32))
    data_offset = -(-cur.offset // alignment) * alignment
    return Header(path, version, kv, tuple(tensors), alignment, data_offset, size)


def _value(cur: _Cursor, vtype: int, path: Path, key: str) -> Any:
    if vtype in _SCALARS:
        return cur.unpack(_SCALARS[vtype])
    if vtype == 8:
        return cur.string()
    if vtype != 9:
        raise GGUFError(f"{path}: key {key!r} has unknown value type {vtype}")
    item, count = cur.unpack("<I"), cur.unpack("<Q")
    if item == 8:
        if count > _KEEP_ARRAY:
            cur.skip_strings(count)
            return SkippedArray(count)
        return [cur.string() for _ in range(count)]
    if item not in _SCALARS:
        raise GGUFError(f"{path}: key {key!r} is an array of unsupported type {item}")
    fmt = _SCALARS[item]
    width = struct.calcsize(fmt)
    cur.need(width * count)
    if count > _KEEP_ARRAY:
        cur.pos += width * count
        return SkippedArray(count)
    values = list(struct.unpack_from(f"<{count}{fmt[1]}", cur.buf, cur.pos))
    cur.pos += width * count
    return values


def shard_paths(path: Path, count: int) -> list[Path]:
    """The paths of all shards of a split model, from any shard's file name."""
    m = _SPLIT.match(path.name)
    if m is None:
        raise GGUFError(
            f"{path}: has split.count {count} but its name is not "
            "NAME-0000N-of-0000M.gguf, so the other shards cannot be found"
        )
    return [
        path.with_name(f"{m.group('stem')}-{i:05d}-of-{count:05d}.gguf")
        for i in range(1, count + 1)
    ]


def read_model(path: Path) -> list[Header]:
    """Headers of every shard of the model ``path`` belongs to, in shard order."""
    first = read_header(path)
    count = int(first.kv.get("split.count", 1))
    if count <= 1:
        return [first]
    headers = []
    for i, shard in enumerate(shard_paths(path, count)):
        if shard == path:
            header = first
        elif not shard.exists():
            raise GGUFError(f"{shard}: missing shard {i + 1} of {count} (given {path.name})")
        else:
            header = read_header(shard)
        _check_shard(header, first, i, count)
        headers.append(header)
    return headers


def _check_shard(header: Header, ref: Header, index: int, count: int) -> None:
    kv, name = header.kv, header.path
    if int(kv.get("split.count", 1)) != count or int(kv.get("split.no", -1)) != index:
        raise GGUFError(
            f"{name}: is not shard {index + 1} of {count} of {ref.path.name} "
            f"(split.no {kv.get('split.no')}, split.count {kv.get('split.count')})"
        )
    for key in ("split.tensors.count", "general.architecture", "general.name"):
        if key in kv and key in ref.kv and kv[key] != ref.kv[key]:
            raise GGUFError(
                f"{name}: belongs to another model than {ref.path.name} "
                f"({key} {kv[key]!r}, expected {ref.kv[key]!r})"
            )
