"""``layoutgen inspect``: a model profile from GGUF headers (all shards, no data read).

Type ids are resolved per tensor: an id both ggml flavours define alike is
unambiguous; one only mainline or only ik_llama.cpp defines is taken from that
flavour; where the flavours disagree on an id's size, the tensor's span in the
file (up to the next tensor, or the end of the data) decides.  Every tensor
must fit inside its file: a data region shorter than the header promises is a
truncated file, reported by name.

The header reader bounds every length and count (see
:mod:`layoutgen.models.gguf_header`) and :func:`~layoutgen.models.hparams.normalise` every
hyperparameter; here the names that reach the profile are checked too: the
architecture is a plain name (``glm-dsa``), the model name has no control
characters and every ``blk.N`` tensor lies below ``block_count``.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

from layoutgen.models import quants
from layoutgen.models.gguf_header import GGUFError, Header, SkippedString, read_model
from layoutgen.models.hparams import normalise
from layoutgen.models.profile import ModelFile, Profile
from layoutgen.models.tensors import Tensor, fold

_ARCH = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_NAME_MAX = 256


def inspect_model(path: Path, *, header_only: bool = False) -> Profile:
    """The profile of the model ``path`` belongs to (every shard's header).

    ``header_only``: each shard file holds only the first bytes of the real one
    (a range request's answer); a shard's size is then where its last tensor's
    data ends, padded to the alignment, as GGUF writers lay files out.
    """
    headers = read_model(path, prefix=header_only)
    kv = headers[0].kv
    arch = _arch(path, kv.get("general.architecture"))
    hparams = normalise(arch, kv, str(headers[0].path))
    tensors: list[Tensor] = []
    sizes: list[int] = []
    for header in headers:
        found = _tensors(header, hparams.n_layer)
        tensors.extend(found)
        sizes.append(_file_size(header, found))
    names = ", ".join(h.path.name for h in headers)
    version = headers[0].version
    source = (
        f"layoutgen inspect of {names} (GGUF v{version} headers only; tensor bytes from "
        "ggml type sizes, layoutgen/models/quants.py)\n"
    )
    if header_only:
        source += (
            "Read from prefixes of the shards (--header-only): file sizes are where each "
            "shard's tensor data ends.\n"
        )
    return Profile(
        name=_name(headers[0].path, kv.get("general.name")) or path.name.removesuffix(".gguf"),
        arch=arch,
        source=source,
        hparams=hparams,
        entries=tuple(fold(tensors)),
        files=tuple(ModelFile(h.path.name, size) for h, size in zip(headers, sizes, strict=True)),
    )


def _arch(path: Path, value: Any) -> str:
    if value is None or value == "":
        raise GGUFError(f"{path}: no general.architecture key; not a model file")
    if not isinstance(value, str) or not _ARCH.match(value):
        shown = repr(value) if isinstance(value, str | int | float) else type(value).__name__
        if isinstance(value, SkippedString):
            shown = f"a string of {value.length} bytes"
        raise GGUFError(
            f"{path}: general.architecture {shown[:70]} is not an architecture name "
            "(letters, digits, '-', '_' or '.', e.g. llama or glm-dsa)"
        )
    return value


def _name(path: Path, value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > _NAME_MAX or not value.isprintable():
        raise GGUFError(
            f"{path}: general.name is not a model name (a string of at most {_NAME_MAX} "
            "printable characters)"
        )
    return value


def _file_size(header: Header, tensors: list[Tensor]) -> int:
    """The shard's size: on disk, or for a prefix where its last tensor's data ends.

    Both GGUF writers pad every tensor's data to the alignment, the last one too
    (ggml/src/gguf.cpp, ``gguf_write_to_buf``; gguf-py, ``write_tensor_data``).
    """
    if not header.prefix:
        return header.file_size
    offsets = {t.name: t.offset for t in header.tensors}
    end = max((offsets[t.name] + t.nbytes for t in tensors), default=0)
    return header.data_offset + -(-end // header.alignment) * header.alignment


def _tensors(header: Header, n_layer: int) -> list[Tensor]:
    # a prefix has no data section, so the last tensor's span is unknown: an id both
    # flavours define resolves there as it did where the spans are known
    data_size = None if header.prefix else header.file_size - header.data_offset
    order = sorted(header.tensors, key=lambda t: t.offset)
    span_end = {t.name: nxt.offset for t, nxt in itertools.pairwise(order)}
    if data_size is not None and order:
        span_end[order[-1].name] = data_size
    qtypes: dict[str, quants.QuantType] = {}
    by_id: dict[int, quants.QuantType] = {}
    for info in sorted(header.tensors, key=lambda t: t.name not in span_end):
        end = span_end.get(info.name)
        span = None if end is None else end - info.offset
        qtype = by_id.get(info.type_id) if span is None else None
        qtypes[info.name] = qtype or _resolve(info.type_id, info.shape, span, header, info.name)
        by_id.setdefault(info.type_id, qtypes[info.name])
    out = []
    for info in header.tensors:
        tensor = Tensor(info.name, "", info.shape, 0)
        if tensor.layer is not None and tensor.layer >= n_layer:
            raise GGUFError(
                f"{header.path}: tensor {info.name!r} is in layer {tensor.layer}, but the "
                f"model has {n_layer} (block_count)"
            )
        qtype = qtypes[info.name]
        try:
            size = quants.nbytes(qtype, info.shape)
        except quants.UnknownType as exc:
            raise GGUFError(f"{header.path}: tensor {info.name!r}: {exc}") from None
        if data_size is not None and info.offset + size > data_size:
            raise GGUFError(
                f"{header.path}: truncated: tensor {info.name!r} ends at byte "
                f"{header.data_offset + info.offset + size}, the file has "
                f"{header.file_size}"
            )
        out.append(Tensor(info.name, qtype.name, info.shape, size))
    return out


def _resolve(
    type_id: int, shape: tuple[int, ...], span: int | None, header: Header, name: str
) -> quants.QuantType:
    found = [q for q in (quants.mainline().get(type_id), quants.IK.get(type_id)) if q]
    if not found:
        raise GGUFError(
            f"{header.path}: tensor {name!r} has unknown ggml type id {type_id} "
            "(neither mainline nor ik_llama.cpp defines it)"
        )
    if len(found) == 1 or _same(found[0], found[1]):
        return found[0]
    for qtype in found:  # the flavours disagree: the one whose size fills the span wins
        try:
            size = quants.nbytes(qtype, shape)
        except quants.UnknownType:
            continue
        if span is not None and size <= span < size + header.alignment:
            return qtype
    return found[0]


def _same(a: quants.QuantType, b: quants.QuantType) -> bool:
    return (a.block_size, a.type_size, a.row_meta) == (b.block_size, b.type_size, b.row_meta)
