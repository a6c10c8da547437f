"""Reading GGUF headers (v2, v3) without touching tensor data, across split shards.

Why our own reader: ``gguf.GGUFReader`` memory-maps the whole file and builds
numpy views of every tensor, and it refuses ik_llama.cpp's type ids.  A
profile needs only the key/values and the tensor infos, which sit at the
start of each file: this reader reads them with plain ``read`` calls, and
skips long arrays (tokenizer vocabularies) and long strings by their lengths
without keeping them.  Every problem (wrong magic, truncation, a missing or
foreign shard, an unknown type id) is a one-line :class:`GGUFError` naming the
file.

Bounded input.  A header is untrusted: every length and count is checked
against the bytes left in the file *before* anything is allocated or read,
and against the limits below, which are far above any real model and keep a
hostile file within a few MB of memory and well under a second:

- regular files only: a FIFO, a device (``/dev/zero``) or a directory is
  refused after ``stat``, and the file is opened with ``O_NONBLOCK`` and
  checked again, so that nothing can block a read (:mod:`layoutgen.models.inputs`);
- at most 65,536 key/values and 65,536 tensors per file (real models have
  ~50 keys and a few thousand tensors: GLM-5.1 ~1,800; Snowflake Arctic with
  per-expert tensors ~13,500); each also needs its minimum encoded size in
  the bytes that are left;
- keys are at most 65,535 bytes of printable ASCII (the GGUF spec,
  ggml/docs/gguf.md: "It must be at most 2^16-1 bytes long"), tensor names at
  most 63 (ggml's ``GGML_MAX_NAME`` 64 with its NUL; ``gguf_init_from_file_impl``
  refuses longer ones), neither empty nor repeated (ggml refuses both);
- string values longer than 64 KiB are stepped over, like arrays of more than
  4,096 items, and kept values (keys, short strings and arrays) may total
  16 MiB; the string arrays of a file may hold 2^22 items in all (a
  vocabulary's tokens and merges are well under a million);
- 1 to 4 dimensions per tensor, each at least 1, their product below 2^63
  (ggml's ``int64_t`` element count); ``general.alignment`` a ``uint32`` and
  a power of two (below).
"""

from __future__ import annotations

import os
import re
import struct
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, BinaryIO

from layoutgen.errors import LayoutgenError
from layoutgen.models.inputs import NotRegularFile, open_regular

MAGIC = b"GGUF"
_CHUNK = 1 << 20
_KEEP_ARRAY = 4096  # arrays longer than this are skipped (only their length is kept)
_KEEP_STRING = 1 << 16  # string values longer than this are skipped likewise
_KEPT_MAX = 16 << 20  # bytes of kept keys and values (estimated, see _Cursor.keep)
_MAX_KV = 1 << 16
_MAX_TENSORS = 1 << 16
_MAX_STRINGS = 1 << 22  # items of all string arrays of a file, each stepped over one by one
_KEY_MAX = (1 << 16) - 1  # GGUF spec (ggml/docs/gguf.md, gguf_metadata_kv_t.key)
_NAME_MAX = 63  # GGML_MAX_NAME (64) less the NUL (ggml/src/gguf.cpp)
_MAX_DIMS = 4  # GGML_MAX_DIMS
_MIN_KV = 8 + 1 + 4 + 1  # key length, a 1-byte key, value type, a 1-byte value
_MIN_TENSOR = 8 + 1 + 4 + 8 + 4 + 8  # name length, name, n_dims, one dim, type, offset
_ALIGNMENT_TYPE = 4  # GGUF_TYPE_UINT32
_DEFAULT_ALIGNMENT = 32  # GGUF_DEFAULT_ALIGNMENT
_ALIGNMENT = "it must be a uint32 power of two (ggml's rule), e.g. 32"
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
_PRINTABLE = re.compile(rb"^[\x21-\x7e]+$")


class GGUFError(LayoutgenError):
    """A GGUF file (or set of shards) that cannot be read as a model."""


class _PastEnd(GGUFError):
    """The header runs past the bytes there are: a truncated file, or a short prefix."""


@dataclass(frozen=True)
class SkippedArray:
    """A long array whose values were not kept (tokenizer tokens, merges, scores)."""

    length: int


@dataclass(frozen=True)
class SkippedString:
    """A long string value that was not kept (a chat template, an embedded tokenizer)."""

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
    file_size: int  # bytes on disk; with ``prefix``, the bytes of the prefix only
    prefix: bool = False  # read from the first bytes of the file only (--header-only)


class _Cursor:
    """Sequential little-endian reads from a file of known size, fetched in chunks.

    Invariant: ``buf`` holds the file's bytes from ``base``; nothing past
    ``size`` is ever requested, so a length beyond the end is an error before
    any read or allocation.
    """

    def __init__(self, f: BinaryIO, path: Path, size: int) -> None:
        self.f, self.path, self.size = f, path, size
        self.buf = b""
        self.pos = 0  # within buf
        self.base = 0  # file offset of buf[0]
        self.what = "the header"  # what is being read, for messages
        self.kept = 0
        self.strings = 0  # items of string arrays so far

    @property
    def offset(self) -> int:
        return self.base + self.pos

    @property
    def left(self) -> int:
        return self.size - self.offset

    def error(self, message: str) -> GGUFError:
        return GGUFError(f"{self.path}: {message}")

    def truncated(self) -> GGUFError:
        return _PastEnd(
            f"{self.path}: truncated GGUF header (file ends at byte {self.size}) in {self.what}"
        )

    def need(self, n: int) -> None:
        """Make ``n`` (at most about ``_CHUNK``) bytes from ``offset`` available in ``buf``."""
        if self.pos + n <= len(self.buf):
            return
        if n > self.left:
            raise self.truncated()
        more = self.f.read(max(_CHUNK, n - (len(self.buf) - self.pos)))
        self.buf = self.buf[self.pos :] + more
        self.base += self.pos
        self.pos = 0
        if len(self.buf) < n:  # the file shrank while being read
            raise self.truncated()

    def skip(self, n: int) -> None:
        """Step over ``n`` bytes, reading none of them if they are not buffered."""
        if n > self.left:
            raise self.truncated()
        if self.pos + n <= len(self.buf):
            self.pos += n
            return
        target = self.offset + n
        self.f.seek(target)
        self.buf, self.pos, self.base = b"", 0, target

    def unpack(self, fmt: str) -> Any:
        size = struct.calcsize(fmt)
        self.need(size)
        value = struct.unpack_from(fmt, self.buf, self.pos)[0]
        self.pos += size
        return value

    def raw(self, limit: int, what: str) -> bytes | int:
        """A length-prefixed string's bytes, or its length (stepped over) if above ``limit``."""
        n: int = self.unpack("<Q")
        if n > self.left:
            raise _PastEnd(
                f"{self.path}: {what} is a string of {n} bytes at byte {self.offset - 8}, "
                f"longer than the rest of the file ({self.left} bytes)"
            )
        if n > limit:
            self.skip(n)
            return n
        self.need(n)
        data = self.buf[self.pos : self.pos + n]
        self.pos += n
        return data

    def name(self, limit: int, what: str) -> str:
        """A key or tensor name: 1 to ``limit`` bytes of printable ASCII."""
        data = self.raw(limit, what)
        if isinstance(data, int):
            raise self.error(f"{what} is {data} bytes long; at most {limit} are allowed")
        if not _PRINTABLE.match(data):
            shown = ascii(data[:80].decode("utf-8", errors="replace"))
            empty = "is empty" if not data else f"{shown} is not printable ASCII"
            raise self.error(
                f"{what} {empty} (keys and tensor names are printable ASCII without spaces, "
                "e.g. llama.block_count)"
            )
        return data.decode("ascii")

    def keep(self, cost: int) -> None:
        """Count ``cost`` bytes (a generous estimate of Python's) against ``_KEPT_MAX``."""
        self.kept += cost
        if self.kept > _KEPT_MAX:
            raise self.error(
                f"more than {_KEPT_MAX >> 20} MiB of metadata besides long arrays and "
                "strings; not a model header layoutgen reads"
            )

    def skip_strings(self, count: int) -> None:
        """Step over ``count`` length-prefixed strings without slicing or decoding them.

        A vocabulary has ~150k of them: the inner loop walks the buffer with
        local names only (one ``unpack_from`` per string); a string that runs
        past the buffer's end is stepped over by :meth:`skip` (which seeks
        when it is long, and stops at the end of the file).
        """
        u64 = _U64.unpack_from
        left = count
        while left:
            self.need(8)
            buf, pos = self.buf, self.pos
            stop = len(buf) - 8
            steps = min(left, (len(buf) - pos) // 8)  # each string takes 8 bytes or more
            for i in range(steps):
                if pos > stop:
                    steps = i
                    break
                pos += 8 + u64(buf, pos)[0]
            left -= steps
            if pos > len(buf):
                self.pos = len(buf)
                self.skip(pos - len(buf))
            else:
                self.pos = pos


def read_header(path: Path, *, prefix: bool = False) -> Header:
    """Key/values and tensor infos of one GGUF file.

    ``prefix``: the file holds only the first bytes of the real one (fetched
    with a range request), which must contain the whole header; its tensor
    data, and so its real size, are not there.
    """
    try:
        with open_regular(path) as f:
            size = os.fstat(f.fileno()).st_size
            try:
                header = _parse(_Cursor(f, path, size), path, size)
            except _PastEnd as exc:
                if not prefix:
                    raise
                why = str(exc).removeprefix(f"{path}: ")
                raise GGUFError(
                    f"{path}: the header continues past the {size:,} bytes of this prefix "
                    f"({why}); --header-only needs the whole header: fetch a longer prefix, "
                    f"e.g. the first {_longer(size):,} bytes"
                ) from None
            return replace(header, prefix=True) if prefix else header
    except FileNotFoundError:
        raise GGUFError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise GGUFError(f"{path}: is a directory, not a GGUF file") from None
    except NotRegularFile as exc:
        raise GGUFError(f"{path}: is {exc.kind}, not a regular file; give a GGUF file") from None
    except OSError as exc:
        raise GGUFError(f"{path}: cannot read: {exc.strerror or exc}") from None


def _count(cur: _Cursor, says: str, what: str, maximum: int, least: int) -> int:
    """A count read from the file, at most ``maximum`` and ``least`` bytes each in what is left."""
    n: int = cur.unpack("<Q")
    if n > maximum:
        raise cur.error(f"{says} {n} {what}; layoutgen reads at most {maximum}")
    if n * least > cur.left:
        raise _PastEnd(
            f"{cur.path}: truncated or corrupt GGUF header: {says} {n} {what}, more than "
            f"the rest of the file can hold ({cur.left} bytes, at least {least} per item)"
        )
    return n


def _parse(cur: _Cursor, path: Path, size: int) -> Header:
    if size >= 4:
        cur.need(4)
    if size < 4 or cur.buf[:4] != MAGIC:
        raise GGUFError(f"{path}: not a GGUF file (no 'GGUF' magic at the start)")
    cur.pos = 4
    version = cur.unpack("<I")
    if version not in (2, 3):
        raise GGUFError(f"{path}: GGUF version {version} is not supported (only 2 and 3)")
    cur.what = "the tensor and key counts"
    n_tensors = _count(cur, "the header says", "tensors", _MAX_TENSORS, _MIN_TENSOR)
    n_kv = _count(cur, "the header says", "key/values", _MAX_KV, _MIN_KV)
    kv: dict[str, Any] = {}
    for i in range(n_kv):
        cur.what = f"key {i}"
        key = cur.name(_KEY_MAX, f"key {i}")
        if key in kv:
            raise cur.error(f"key {key!r} appears twice")
        cur.what = f"the value of key {key!r}"
        vtype = cur.unpack("<I")
        if key == "general.alignment" and vtype != _ALIGNMENT_TYPE:
            raise cur.error(f"key 'general.alignment' has value type {vtype}; {_ALIGNMENT}")
        cur.keep(len(key) + 64)
        kv[key] = _value(cur, vtype, key)
    _room_for_tensors(cur, n_tensors)
    tensors = []
    seen: set[str] = set()
    for i in range(n_tensors):
        cur.what = f"tensor {i}"
        tensors.append(_tensor(cur, i, seen))
    alignment = kv.get("general.alignment", _DEFAULT_ALIGNMENT)
    # ggml/src/gguf.cpp (gguf_init_from_file_impl) refuses an alignment that is
    # not a UINT32 or not a non-zero power of two; gguf-py's GGUFReader checks
    # the same ("must be a non-zero power of two").  The GGUF spec's "a
    # multiple of 8" is not what the loaders enforce.
    if alignment == 0 or alignment & (alignment - 1):
        raise GGUFError(f"{path}: general.alignment is {alignment}; {_ALIGNMENT}")
    data_offset = -(-cur.offset // alignment) * alignment
    return Header(path, version, kv, tuple(tensors), alignment, data_offset, size)


def _room_for_tensors(cur: _Cursor, n_tensors: int) -> None:
    """The tensor count, checked again against the bytes left after the key/values."""
    if n_tensors * _MIN_TENSOR > cur.left:
        raise _PastEnd(
            f"{cur.path}: truncated or corrupt GGUF header: the header says {n_tensors} "
            f"tensors, more than the rest of the file can hold ({cur.left} bytes after the "
            f"key/values, at least {_MIN_TENSOR} per tensor)"
        )


#: the rest of a tensor info after ``n_dims``: the dimensions, the type id, the offset
_DIMS = {n: struct.Struct(f"<{n}QIQ") for n in range(1, _MAX_DIMS + 1)}


def _tensor(cur: _Cursor, index: int, seen: set[str]) -> TensorInfo:
    name = cur.name(_NAME_MAX, f"the name of tensor {index}")
    if name in seen:
        raise cur.error(f"tensor {name!r} appears twice")
    seen.add(name)
    cur.what = f"tensor {name!r}"
    n_dims = cur.unpack("<I")
    if not 1 <= n_dims <= _MAX_DIMS:
        raise cur.error(f"tensor {name!r} has {n_dims} dimensions (1 to {_MAX_DIMS})")
    rest = _DIMS[n_dims]
    cur.need(rest.size)
    *shape, type_id, offset = rest.unpack_from(cur.buf, cur.pos)
    cur.pos += rest.size
    elements = 1
    for dim in shape:
        elements *= dim
    if min(shape) == 0 or elements >= 1 << 63:
        raise cur.error(
            f"tensor {name!r} has shape {shape}: each dimension must be at least 1 "
            "and their product below 2^63"
        )
    return TensorInfo(name, tuple(shape), type_id, offset)


def _value(cur: _Cursor, vtype: int, key: str) -> Any:
    if vtype in _SCALARS:
        cur.keep(32)
        return cur.unpack(_SCALARS[vtype])
    if vtype == 8:
        return _string(cur, f"the value of key {key!r}")
    if vtype != 9:
        raise cur.error(f"key {key!r} has unknown value type {vtype}")
    item = cur.unpack("<I")
    if item == 8:
        count = _count(cur, f"key {key!r} holds", "strings", _MAX_STRINGS, 8)
        cur.strings += count
        if cur.strings > _MAX_STRINGS:
            raise cur.error(
                f"key {key!r} holds {count} strings, {cur.strings} with the string arrays "
                f"before it; layoutgen reads at most {_MAX_STRINGS} in all"
            )
        if count > _KEEP_ARRAY:
            cur.skip_strings(count)
            return SkippedArray(count)
        cur.keep(56 + 8 * count)
        values = [_string(cur, f"string {i} of key {key!r}") for i in range(count)]
        if any(isinstance(v, SkippedString) for v in values):
            return SkippedArray(count)
        return values
    if item not in _SCALARS:
        raise cur.error(f"key {key!r} is an array of unsupported type {item}")
    fmt = _SCALARS[item]
    width = struct.calcsize(fmt)
    count = _count(cur, f"key {key!r} holds", "items", (1 << 64) - 1, width)
    if count > _KEEP_ARRAY:
        cur.skip(width * count)
        return SkippedArray(count)
    cur.keep(56 + 40 * count)
    cur.need(width * count)
    values = list(struct.unpack_from(f"<{count}{fmt[1]}", cur.buf, cur.pos))
    cur.pos += width * count
    return values


def _string(cur: _Cursor, what: str) -> str | SkippedString:
    data = cur.raw(_KEEP_STRING, what)
    if isinstance(data, int):
        return SkippedString(data)
    cur.keep(len(data) * 2 + 64)
    return data.decode("utf-8", errors="replace")


def split_count(header: Header) -> int:
    """The file's ``split.count`` (1 if absent), checked: 1 to 99999, as shard names allow."""
    value = header.kv.get("split.count", 1)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 99999:
        raise GGUFError(
            f"{header.path}: split.count is {_shown(value)}; a shard count is a whole "
            "number from 1 to 99999 (shards are named NAME-0000N-of-0000M.gguf)"
        )
    return value


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def shard_paths(path: Path, count: int) -> list[Path]:
    """The paths of all shards of a split model, from any shard's file name."""
    m = _SPLIT.match(path.name)
    if m is None:
        raise GGUFError(
            f"{path}: has split.count {count} but its name is not "
            "NAME-0000N-of-0000M.gguf, so the other shards cannot be found"
        )
    if int(m.group("count")) != count:
        raise GGUFError(
            f"{path}: has split.count {count} but its name says {int(m.group('count'))} shards"
        )
    return [
        path.with_name(f"{m.group('stem')}-{i:05d}-of-{count:05d}.gguf")
        for i in range(1, count + 1)
    ]


def _longer(size: int) -> int:
    """A prefix length worth asking for next: the next power of two, 16 MiB at least."""
    return max(16 << 20, 1 << (2 * size - 1).bit_length()) if size else 16 << 20


def read_model(path: Path, *, prefix: bool = False) -> list[Header]:
    """Headers of every shard of the model ``path`` belongs to, in shard order.

    ``prefix``: each shard file holds only its first bytes (``read_header``).
    """
    first = read_header(path, prefix=prefix)
    count = split_count(first)
    if count <= 1:
        return [first]
    headers = []
    for i, shard in enumerate(shard_paths(path, count)):
        if shard == path:
            header = first
        elif not shard.exists():
            raise GGUFError(f"{shard}: missing shard {i + 1} of {count} (given {path.name})")
        else:
            header = read_header(shard, prefix=prefix)
        _check_shard(header, first, i, count)
        headers.append(header)
    return headers


def _check_shard(header: Header, ref: Header, index: int, count: int) -> None:
    kv, name = header.kv, header.path
    if kv.get("split.count", 1) != count or kv.get("split.no", -1) != index:
        raise GGUFError(
            f"{name}: is not shard {index + 1} of {count} of {ref.path.name} "
            f"(split.no {_shown(kv.get('split.no'))}, split.count {_shown(kv.get('split.count'))})"
        )
    for key in ("split.tensors.count", "general.architecture", "general.name"):
        if key in kv and key in ref.kv and kv[key] != ref.kv[key]:
            raise GGUFError(
                f"{name}: belongs to another model than {ref.path.name} "
                f"({key} {_shown(kv[key])}, expected {_shown(ref.kv[key])})"
            )
