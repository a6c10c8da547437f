"""``layoutgen inspect``: a model profile from GGUF headers (all shards, no data read).

Type ids are resolved per tensor: an id both ggml flavours define alike is
unambiguous; one only mainline or only ik_llama.cpp defines is taken from that
flavour; where the flavours disagree on an id's size, the tensor's span in the
file (up to the next tensor, or the end of the data) decides.  Every tensor
must fit inside its file: a data region shorter than the header promises is a
truncated file, reported by name.
"""

from __future__ import annotations

import itertools
from pathlib import Path

from layoutgen import quants
from layoutgen.gguf_header import GGUFError, Header, read_model
from layoutgen.hparams import normalise
from layoutgen.profile import ModelFile, Profile
from layoutgen.tensors import Tensor, fold


def inspect_model(path: Path) -> Profile:
    headers = read_model(path)
    tensors: list[Tensor] = []
    for header in headers:
        tensors.extend(_tensors(header))
    kv = headers[0].kv
    arch = str(kv.get("general.architecture", ""))
    if not arch:
        raise GGUFError(f"{path}: no general.architecture key; not a model file")
    names = ", ".join(h.path.name for h in headers)
    version = headers[0].version
    source = (
        f"layoutgen inspect of {names} (GGUF v{version} headers only; tensor bytes from "
        "ggml type sizes, layoutgen/quants.py)\n"
    )
    return Profile(
        name=str(kv.get("general.name") or path.name.removesuffix(".gguf")),
        arch=arch,
        source=source,
        hparams=normalise(arch, kv),
        entries=tuple(fold(tensors)),
        files=tuple(ModelFile(h.path.name, h.file_size) for h in headers),
    )


def _tensors(header: Header) -> list[Tensor]:
    data_size = header.file_size - header.data_offset
    order = sorted(header.tensors, key=lambda t: t.offset)
    span_end = {t.name: nxt.offset for t, nxt in itertools.pairwise(order)}
    out = []
    for info in header.tensors:
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
