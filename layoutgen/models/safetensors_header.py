"""Reading one safetensors file's header (8-byte length + JSON) without touching its data.

Why our own reader: a profile needs each tensor's name, dtype and shape, which
sit in the JSON header at the start of the file; ``safetensors.safe_open``
maps the whole file and is a test dependency only.  This reader reads the
8-byte little-endian header length and the header with plain ``read`` calls,
and checks the header the way the safetensors crate does before a loader
trusts it (``Metadata::validate``), so a profile never describes a file that
vLLM would refuse.  Every problem is one :class:`SafetensorsError` line naming
the file (and the tensor).

Bounded input.  A header is untrusted:

- regular files only (:mod:`layoutgen.models.inputs`): a FIFO or a device is
  refused unread;
- the header length is at most 100,000,000 bytes (the crate's
  ``MAX_HEADER_SIZE``) and at most what follows it in the file, checked
  before it is read; it must be UTF-8 JSON (nesting too deep for the parser
  is refused, never a traceback);
- the JSON is an object of at most 100,000 tensors (a profile's bound, for
  all shards together; real checkpoints have up to ~100,000 in all), each an
  object of exactly ``dtype``,
  ``shape`` and ``data_offsets``, besides an optional ``__metadata__`` object
  of strings;
- names are 1 to 512 bytes of printable ASCII without spaces or braces (braces
  are the profile's folding syntax); dtypes are the crate's (upper case);
  shapes have at most 8 dimensions (checkpoints have up to 5), each a whole
  number >= 0, their product below 2^63;
- ``data_offsets`` ``[begin, end]`` cover exactly the bytes the dtype and shape
  give, the tensors are contiguous from 0 without overlaps (in offset order),
  and the last one ends where the file ends: a longer claim is a truncated
  file, bytes beyond it a file the loaders refuse.

Bounded memory.  Parsed JSON costs ~700 bytes a tensor (a 1,000,031-tensor
header took 692 MB), so the tensors are counted before the JSON is parsed:
every tensor has two lists (``shape``, ``data_offsets``) and a ``[`` cannot be
escaped, so a header whose bytes hold more than 2 x :data:`MAX_TENSORS` of
them is refused while it is read, in chunks, at the chunk where the count
passes the limit.  A header is then held at most once as bytes (up to the
crate's 100 MB, of which a real one uses ~200 bytes a tensor) and parsed only
when it has at most :data:`MAX_TENSORS` tensors (~70 MB).
"""

from __future__ import annotations

import json
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from layoutgen.errors import LayoutgenError
from layoutgen.models import quants
from layoutgen.models.inputs import NotRegularFile, open_regular

MAX_HEADER = 100_000_000  # safetensors' MAX_HEADER_SIZE (safetensors/src/tensor.rs)
MAX_TENSORS = 100_000  # layoutgen.models.profile.MAX_TENSORS: a profile holds no more
_CHUNK = 1 << 20
MAX_DIMS = 8
NAME_MAX = 512
_NAME = re.compile(rf"[!-z|~]{{1,{NAME_MAX}}}\Z")  # printable ASCII less space and braces
_NAMES = re.compile(r"[!-z|~]+(?:\n[!-z|~]+)*")  # the same, names joined by newlines
_BIG = 1 << 63


class SafetensorsError(LayoutgenError):
    """A safetensors file or Hugging Face model directory that cannot be read as a model."""


#: What a tensor is: lower-case dtype, shape (outermost first), bytes; one tuple shared
#: by every tensor of the same dtype and shape in a header (experts repeat a few).
TensorKind = tuple[str, tuple[int, ...], int]
#: One tensor of a header: its name and kind.  A plain pair: a checkpoint has up to
#: ~100,000 of them, and a class (or a flat 4-tuple built per tensor) costs more each.
STensor = tuple[str, TensorKind]


@dataclass(frozen=True)
class SafetensorsHeader:
    path: Path
    tensors: tuple[STensor, ...]  # in data order
    file_size: int


def read_header(path: Path, shown: str | None = None) -> SafetensorsHeader:
    """Every tensor of the safetensors file ``path``; errors name it as ``shown``."""
    where = shown or str(path)
    try:
        with open_regular(path) as f:
            size = os.fstat(f.fileno()).st_size
            if size < 8:
                raise SafetensorsError(
                    f"{where}: truncated safetensors file: {size} bytes, fewer than the 8 "
                    "of its header length"
                )
            (length,) = struct.unpack("<Q", f.read(8))
            if length > MAX_HEADER:
                raise SafetensorsError(
                    f"{where}: the header length is {length} bytes; safetensors allows at most "
                    f"{MAX_HEADER}"
                )
            if length > size - 8:
                raise SafetensorsError(
                    f"{where}: truncated safetensors header: its length says {length} bytes, "
                    f"the file holds {size - 8} after the length"
                )
            raw = _read_counted(f, length, where)
    except FileNotFoundError:
        raise SafetensorsError(f"{where}: no such file") from None
    except IsADirectoryError:
        raise SafetensorsError(f"{where}: is a directory, not a safetensors file") from None
    except NotRegularFile as exc:
        raise SafetensorsError(f"{where}: is {exc.kind}, not a regular file") from None
    except OSError as exc:
        raise SafetensorsError(f"{where}: cannot read: {exc.strerror or exc}") from None
    # With no JSON true/false in the header and floats kept as text, a shape's tuple
    # is a safe cache key (True == 1 and 1.0 == 1 would alias a valid shape)
    exact = b"true" not in raw and b"false" not in raw
    tensors = _tensors(where, _document(where, raw), exact)
    end = 8 + length + sum(kind[2] for _, kind in tensors)
    if end != size:
        last = f"tensor {tensors[-1][0]!r}" if tensors else "the header"
        if end > size:
            raise SafetensorsError(
                f"{where}: truncated: {last} ends at byte {end}, the file has {size}"
            )
        raise SafetensorsError(
            f"{where}: {size - end} bytes after the end of the tensor data (byte {end}); "
            "the safetensors loaders refuse such a file"
        )
    return SafetensorsHeader(path, tensors, size)


def _read_counted(f: Any, length: int, where: str) -> bytearray:
    """The header's ``length`` bytes, read in chunks; refused as soon as they hold more
    lists than :data:`MAX_TENSORS` tensors can (each has two), before any is parsed."""
    raw = bytearray()  # grown in place: the header is held once, not as chunks and a copy
    lists = got = 0
    while got < length:
        chunk = f.read(min(_CHUNK, length - got))
        if not chunk:  # the file shrank while being read
            raise SafetensorsError(f"{where}: truncated safetensors header")
        lists += chunk.count(b"[")
        if lists > 2 * MAX_TENSORS:
            raise SafetensorsError(
                f"{where}: the header lists more than {MAX_TENSORS} tensors (more than "
                f"{2 * MAX_TENSORS} '[' in its first {got + len(chunk)} bytes); a profile "
                f"holds at most {MAX_TENSORS}"
            )
        raw += chunk
        got += len(chunk)
    return raw


class _FloatText(str):
    """A JSON number with a fraction or exponent, kept as its text: never a dimension
    (and shown as the number it was written as)."""

    def __repr__(self) -> str:
        return str.__str__(self)


def json_object(
    where: str,
    raw: bytes | bytearray,
    *,
    what: str = "",
    noun: str = "a JSON object",
    floats_as_text: bool = False,
) -> Any:
    """``raw`` as a JSON object, or a one-line error naming ``where``: ``what`` leads
    each complaint ("the header is "), ``noun`` says what the object should be;
    ``floats_as_text``: numbers with a fraction stay text (a header has none)."""
    try:
        text = raw.decode("utf-8")
        doc = json.loads(text, parse_float=_FloatText) if floats_as_text else json.loads(text)
    except UnicodeDecodeError:
        raise SafetensorsError(f"{where}: {what}not UTF-8 text") from None
    except RecursionError:
        raise SafetensorsError(f"{where}: {what}JSON nested too deeply") from None
    except ValueError as exc:
        raise SafetensorsError(f"{where}: {what}not JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise SafetensorsError(f"{where}: {what}not {noun}")
    return doc


def _document(where: str, raw: bytes | bytearray) -> dict[str, Any]:
    doc: dict[str, Any] = json_object(
        where, raw, what="the header is ", noun="a JSON object of tensors", floats_as_text=True
    )
    meta = doc.pop("__metadata__", None)
    if meta is not None and not (
        isinstance(meta, dict) and all(isinstance(v, str) for v in meta.values())
    ):
        raise SafetensorsError(f"{where}: __metadata__ is not an object of strings")
    if len(doc) > MAX_TENSORS:
        raise SafetensorsError(
            f"{where}: the header lists {len(doc)} tensors; layoutgen reads at most {MAX_TENSORS}"
        )
    return doc


def _tensors(where: str, doc: dict[str, Any], exact: bool = False) -> tuple[STensor, ...]:
    """The tensors in data order, each checked; offsets contiguous from 0.

    Hot: a checkpoint has up to ~100,000 tensors, so names are checked in one
    regex scan, and dtype/shape pairs (experts repeat a few) are checked and
    sized once each.
    """
    names = "\n".join(doc)
    whole = _NAMES.fullmatch(names) and names.count("\n") == len(doc) - 1
    if doc and not (whole and max(map(len, doc)) <= NAME_MAX):
        for name in doc:
            if not _NAME.match(name):
                raise SafetensorsError(
                    f"{where}: tensor name {name[:80]!a} is not 1 to {NAME_MAX} printable "
                    "ASCII characters without spaces or braces"
                )
    # (dtype, shape as a tuple, or its str() where the header has true/false) -> (dtype,
    # shape, bytes): floats are text here, so neither 1.0 nor true can alias a valid 1
    sized: dict[tuple[Any, Any], TensorKind] = {}
    out: list[STensor] = []
    at = 0  # where the data so far ends, in header order
    in_order = True
    for name, info in doc.items():
        try:  # three keys, all of them these: exactly these
            if len(info) != 3 or type(info) is not dict:
                raise KeyError
            dtype = info["dtype"]
            shape = info["shape"]
            offsets = info["data_offsets"]
        except (KeyError, TypeError):
            raise SafetensorsError(
                f"{where}: tensor {name!r} is not an object of dtype, shape and data_offsets"
            ) from None
        try:
            key = (dtype, (tuple(shape) if exact else str(shape)) if type(shape) is list else "")
            known = sized.get(key) if type(dtype) is str else None
        except TypeError:  # a list inside the shape: not hashable, and not a shape
            key, known = (dtype, str(shape)), None
        if known is None:
            known = sized[key] = _size(where, name, dtype, shape)
        begin, end = offsets if type(offsets) is list and len(offsets) == 2 else (None, None)
        if type(begin) is not int or type(end) is not int or not 0 <= begin <= end < _BIG:
            raise SafetensorsError(
                f"{where}: tensor {name!r} has data_offsets {ascii(offsets)[:60]}: expected "
                "[begin, end], whole numbers with 0 <= begin <= end"
            )
        if end - begin != known[2]:
            raise SafetensorsError(
                f"{where}: tensor {name!r}: data_offsets [{begin}, {end}] hold {end - begin} "
                f"bytes, but {dtype} {shape} is {known[2]}"
            )
        if begin != at:
            in_order = False
        at = end
        out.append((name, known))
    if in_order:  # writers put the data in header order
        return tuple(out)
    spans = sorted(
        (info["data_offsets"][0], info["data_offsets"][1], i) for i, info in enumerate(doc.values())
    )
    at = 0
    for begin, end, i in spans:
        if begin != at:
            raise SafetensorsError(
                f"{where}: tensor {out[i][0]!r} starts at data byte {begin}, but the data "
                f"before it ends at {at}; tensors must be contiguous and not overlap"
            )
        at = end
    return tuple(out[i] for _, _, i in spans)


def _size(where: str, name: str, dtype: Any, shape: Any) -> tuple[str, tuple[int, ...], int]:
    """The shape and bytes of a dtype and shape, both checked (once per distinct pair)."""
    if (
        type(dtype) is not str
        or dtype.lower() not in quants.SAFETENSORS_BITS
        or (dtype != dtype.upper())
    ):
        shown = ascii(dtype)[:40] if isinstance(dtype, str) else type(dtype).__name__
        raise SafetensorsError(
            f"{where}: tensor {name!r} has dtype {shown}, not a safetensors dtype "
            "(BF16, F16, F32, F8_E4M3, U8, I32, ...)"
        )
    dims = _shape(where, name, shape)
    try:
        return dtype.lower(), dims, quants.safetensors_nbytes(dtype, dims)
    except quants.UnknownType as exc:
        raise SafetensorsError(f"{where}: tensor {name!r}: {exc}") from None


def _shape(where: str, name: str, shape: Any) -> tuple[int, ...]:
    ok = type(shape) is list and len(shape) <= MAX_DIMS
    elements = 1
    if ok:
        for d in shape:
            if type(d) is not int or d < 0:
                ok = False
                break
            elements *= d
    if not ok or elements >= _BIG:
        raise SafetensorsError(
            f"{where}: tensor {name!r} has shape {ascii(shape)[:60]}: a list of at most "
            f"{MAX_DIMS} whole numbers >= 0 whose product is below 2^63"
        )
    return tuple(shape)
