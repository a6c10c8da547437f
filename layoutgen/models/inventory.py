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


def inspect_model(path: Path) -> Profile:
    headers = read_model(path)
    kv = headers[0].kv
    arch = _arch(path, kv.get("general.architecture"))
    hparams = normalise(arch, kv, str(headers[0].path))
    tensors: list[Tensor] = []
    for header in headers:
        tensors.extend(_tensors(header, hparams.n_layer))
    names = ", ".join(h.path.name for h in headers)
    version = headers[0].version
    source = (
        f"layoutgen inspect of {names} (GGUF v{version} headers only; tensor bytes from "
        "ggml type sizes, layoutgen/models/quants.py)\n"
    )
    return Profile(
        name=_name(headers[0].path, kv.get("general.name")) or path.name.removesuffix(".gguf"),
        arch=arch,
        source=source,
        hparams=hparams,
        entries=tuple(fold(tensors)),
        files=tuple(ModelFile(h.path.name, h.file_size) for h in headers),
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


def _tensors(header: Header, n_layer: int) -> list[Tensor]:
    data_size = header.file_size - header.data_offset
    order = sorted(header.tensors, key=lambda t: t.offset)
    span_end = {t.name: nxt.offset for t, nxt in itertools.pairwise(order)}
    out = []
    for info in header.tensors:
        tensor = Tensor(info.name, "", info.shape, 0)
        if tensor.layer is not None and tensor.layer >= n_layer:
            raise GGUFError(
                f"{header.path}: tensor {info.name!r} is in layer {tensor.layer}, but the "
                f"model has {n_layer} (block_count)"
            )
        span = span_end.get(info.name, data_size) - info.offset
        qtype = _resolve(info.type_id, info.shape, span, header, info.name)
        try:
            size = quants.nbytes(qtype, info.shape)
        except quants.UnknownType as exc:
            raise GGUFError(f"{header.path}: tensor {info.name!r}: {exc}") from None
        if info.offset + size > data_size:
            raise GGUFError(
                f"{header.path}: truncated: tensor {info.name!r} ends at byte "
                f"{header.data_offset + info.offset + size}, the file has "
                f"{header.file_size}"
            )
        out.append(Tensor(info.name, qtype.name, info.shape, size))
    return out


def _resolve(
    type_id: int, shape: tuple[int, ...], span: int, header: Header, name: str
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
        if size <= span < size + header.alignment:
            return qtype
    return found[0]


def _same(a: quants.QuantType, b: quants.QuantType) -> bool:
    return (a.block_size, a.type_size, a.row_meta) == (b.block_size, b.type_size, b.row_meta)
