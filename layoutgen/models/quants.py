"""ggml tensor types: block size, bytes per block, per-row metadata; exact tensor sizes.

Why a table of our own: the memory model needs the exact byte size of every
tensor, and ik_llama.cpp's quant types (IQ3_KS, IQ4_KSS, IQ5_KS, the ``_R4``
interleaved ones, ...) are not in mainline's ``gguf`` package.  Several of them
store a float scale per row (``row_meta_size``), so their size is not simply
``elements / block_size * type_size``.  Two *flavours* exist: mainline ggml
(``gguf.GGML_QUANT_SIZES``, written out below) and ik_llama.cpp (below).
Their type ids mostly agree; where they disagree (ids 9 and 15 differ in size,
34/35/40 are mainline-only, 31-33/36 and 97+ ik-only) the flavour decides.

The ik table is ``type_traits[]`` of ik_llama.cpp's ``ggml/src/ggml.c``
(``type_name``, ``blck_size``, ``type_size`` = ``sizeof(block_*)`` from
``ggml/src/ggml-common.h``, ``row_meta_size``), with the ids of ``enum
ggml_type`` in ``ggml/include/ggml.h``, as vendored in the PyPI sdist
``ik-llama-cpp-python`` 0.1.5 (``vendor/ik_llama.cpp``; the sdist records no
commit hash).  The sizes were obtained by compiling the ``sizeof`` expressions
against those headers, not by hand.  Size formula, from ik's ``ggml_row_size``
and ``ggml_nbytes``: ``nbytes = nrows * (row_meta_size + ne0 / blck_size *
type_size)``, with ``nrows = ne1 * ne2 * ne3``; I2_S is special-cased there as
``elements / 4 + 32``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from layoutgen.errors import LayoutgenError

Flavour = Literal["mainline", "ik"]


class UnknownType(LayoutgenError):
    """A tensor type that layoutgen cannot size: refusing beats a wrong size."""


@dataclass(frozen=True)
class QuantType:
    """One ggml tensor type as one runtime flavour defines it."""

    id: int
    name: str  # lower-case ggml type name: q4_0, q6_k, iq3_ks
    block_size: int  # elements per block along ne0
    type_size: int  # bytes per block
    row_meta: int = 0  # bytes of per-row metadata (ik KS/KSS/KT types: a float scale)

    def row_bytes(self, ne0: int) -> int:
        if ne0 % self.block_size:
            raise UnknownType(
                f"a row of {ne0} elements is not a whole number of {self.name} blocks "
                f"({self.block_size} elements each)"
            )
        return self.row_meta + ne0 // self.block_size * self.type_size


# (id, name, blck_size, type_size, row_meta_size) from ik_llama.cpp, see the module docstring.
_IK_ROWS: tuple[tuple[int, str, int, int, int], ...] = (
    (0, "f32", 1, 4, 0),
    (1, "f16", 1, 2, 0),
    (2, "q4_0", 32, 18, 0),
    (3, "q4_1", 32, 20, 0),
    (6, "q5_0", 32, 22, 0),
    (7, "q5_1", 32, 24, 0),
    (8, "q8_0", 32, 34, 0),
    (9, "q8_1", 32, 36, 0),
    (10, "q2_k", 256, 84, 0),
    (11, "q3_k", 256, 110, 0),
    (12, "q4_k", 256, 144, 0),
    (13, "q5_k", 256, 176, 0),
    (14, "q6_k", 256, 210, 0),
    (15, "q8_k", 256, 296, 0),
    (16, "iq2_xxs", 256, 66, 0),
    (17, "iq2_xs", 256, 74, 0),
    (18, "iq3_xxs", 256, 98, 0),
    (19, "iq1_s", 256, 50, 0),
    (20, "iq4_nl", 32, 18, 0),
    (21, "iq3_s", 256, 110, 0),
    (22, "iq2_s", 256, 82, 0),
    (23, "iq4_xs", 256, 136, 0),
    (24, "i8", 1, 1, 0),
    (25, "i16", 1, 2, 0),
    (26, "i32", 1, 4, 0),
    (27, "i64", 1, 8, 0),
    (28, "f64", 1, 8, 0),
    (29, "iq1_m", 256, 56, 0),
    (30, "bf16", 1, 2, 0),
    (31, "q4_0_4x4", 32, 18, 0),
    (32, "q4_0_4x8", 32, 18, 0),
    (33, "q4_0_8x8", 32, 18, 0),
    (36, "i2_s", 1, 1, 0),
    (39, "mxfp4", 32, 17, 0),
    (41, "q1_0_g128", 128, 18, 0),
    (97, "q8_0_x4", 32, 34, 0),
    (98, "q8_1_x4", 32, 36, 0),
    (99, "q8_2_x4", 32, 36, 0),
    (133, "q6_0", 32, 26, 0),
    (134, "iq1_bn", 64, 13, 2),
    (135, "iq2_bn", 64, 16, 4),
    (136, "q8_k64", 64, 68, 0),
    (137, "iq2_k", 256, 76, 0),
    (138, "iq3_k", 256, 110, 0),
    (139, "iq4_k", 256, 144, 0),
    (140, "iq5_k", 256, 176, 0),
    (141, "iq6_k", 256, 212, 0),
    (144, "iq4_ks", 256, 136, 4),
    (145, "iq2_ks", 256, 70, 2),
    (146, "iq4_kss", 256, 128, 4),
    (147, "q8_k16", 64, 64, 20),
    (148, "q8_k32", 256, 296, 0),
    (149, "q8_kr8", 256, 296, 0),
    (150, "q8_k128", 128, 140, 0),
    (151, "q8_kv", 32, 32, 8),
    (152, "iq5_ks", 256, 168, 4),
    (153, "iq2_kt", 256, 68, 4),
    (154, "iq3_kt", 256, 100, 4),
    (155, "iq4_kt", 256, 128, 4),
    (156, "iq3_ks", 256, 102, 2),
    (157, "iq2_kl", 256, 86, 2),
    (158, "iq1_kt", 256, 56, 4),
    (202, "q4_0_r8", 32, 18, 0),
    (206, "q5_0_r4", 32, 22, 0),
    (208, "q8_0_r8", 32, 34, 0),
    (210, "q2_k_r4", 256, 84, 0),
    (211, "q3_k_r4", 256, 110, 0),
    (212, "q4_k_r4", 256, 144, 0),
    (213, "q5_k_r4", 256, 176, 0),
    (214, "q6_k_r4", 256, 210, 0),
    (216, "iq2_xxs_r4", 256, 66, 0),
    (217, "iq2_xs_r4", 256, 74, 0),
    (218, "iq3_xxs_r4", 256, 98, 0),
    (219, "iq1_s_r4", 32, 6, 2),
    (220, "iq4_nl_r4", 32, 18, 0),
    (221, "iq3_s_r4", 256, 110, 0),
    (222, "iq2_s_r4", 256, 82, 0),
    (223, "iq4_xs_r8", 256, 136, 0),
    (229, "iq1_m_r4", 32, 7, 2),
    (230, "bf16_r16", 1, 2, 0),
    (233, "q6_0_r4", 32, 26, 0),
    (335, "iq2_bn_r4", 64, 16, 4),
    (337, "iq2_k_r4", 256, 76, 0),
    (338, "iq3_k_r4", 256, 110, 0),
    (339, "iq4_k_r4", 256, 144, 0),
    (340, "iq5_k_r4", 256, 176, 0),
    (344, "iq4_ks_r4", 256, 136, 4),
    (352, "iq5_ks_r4", 256, 168, 4),
    (397, "q8_k_r16", 256, 258, 0),
    (398, "q8_kv_r8", 32, 32, 4),
    (399, "q8_k_r8", 256, 258, 0),
)

IK: dict[int, QuantType] = {row[0]: QuantType(*row) for row in _IK_ROWS}


# (id, name, blck_size, type_size) of mainline ggml, as the gguf package 0.19.0
# (GGML_QUANT_SIZES, GGMLQuantizationType) defines them.  Written out rather
# than imported so that validating a spec does not import gguf and numpy
# (~100 ms); tests/test_quants.py checks this table against the installed
# gguf package, so a new mainline type is noticed.
_MAINLINE_ROWS: tuple[tuple[int, str, int, int], ...] = (
    (0, "f32", 1, 4),
    (1, "f16", 1, 2),
    (2, "q4_0", 32, 18),
    (3, "q4_1", 32, 20),
    (6, "q5_0", 32, 22),
    (7, "q5_1", 32, 24),
    (8, "q8_0", 32, 34),
    (9, "q8_1", 32, 40),
    (10, "q2_k", 256, 84),
    (11, "q3_k", 256, 110),
    (12, "q4_k", 256, 144),
    (13, "q5_k", 256, 176),
    (14, "q6_k", 256, 210),
    (15, "q8_k", 256, 292),
    (16, "iq2_xxs", 256, 66),
    (17, "iq2_xs", 256, 74),
    (18, "iq3_xxs", 256, 98),
    (19, "iq1_s", 256, 50),
    (20, "iq4_nl", 32, 18),
    (21, "iq3_s", 256, 110),
    (22, "iq2_s", 256, 82),
    (23, "iq4_xs", 256, 136),
    (24, "i8", 1, 1),
    (25, "i16", 1, 2),
    (26, "i32", 1, 4),
    (27, "i64", 1, 8),
    (28, "f64", 1, 8),
    (29, "iq1_m", 256, 56),
    (30, "bf16", 1, 2),
    (34, "tq1_0", 256, 54),
    (35, "tq2_0", 256, 66),
    (39, "mxfp4", 32, 17),
    (40, "nvfp4", 64, 36),
    (41, "q1_0", 128, 18),
)

MAINLINE: dict[int, QuantType] = {row[0]: QuantType(*row) for row in _MAINLINE_ROWS}


def mainline() -> dict[int, QuantType]:
    """Mainline ggml's types (id -> type)."""
    return MAINLINE


_BY_NAME: dict[str, dict[str, QuantType]] = {
    "mainline": {q.name: q for q in MAINLINE.values()},
    "ik": {q.name: q for q in IK.values()},
}


def table(flavour: Flavour) -> dict[int, QuantType]:
    return IK if flavour == "ik" else mainline()


def by_id(type_id: int, flavour: Flavour, *, tensor: str = "") -> QuantType:
    """The type with ``type_id`` in ``flavour``; unknown ids are an error naming the tensor."""
    qtype = table(flavour).get(type_id)
    if qtype is None:
        other: Flavour = "mainline" if flavour == "ik" else "ik"
        known = table(other).get(type_id)
        hint = f" ({known.name} in {other} ggml)" if known is not None else ""
        where = f"tensor {tensor!r}: " if tensor else ""
        raise UnknownType(f"{where}unknown {flavour} ggml type id {type_id}{hint}")
    return qtype


def by_name(name: str, flavour: Flavour | None = None) -> QuantType:
    """Look a type up by name (case-insensitive).

    Without a flavour, mainline's definition wins where both define the name
    (only q8_1 and q8_K, activation types, differ), else ik's.
    """
    key = name.lower()
    flavours: tuple[Flavour, ...] = (flavour,) if flavour else ("mainline", "ik")
    for fl in flavours:
        qtype = _BY_NAME[fl].get(key)
        if qtype is not None:
            return qtype
    raise UnknownType(f"unknown ggml type {name!r}")


def known(name: str) -> bool:
    try:
        by_name(name)
    except UnknownType:
        return False
    return True


def nbytes(qtype: QuantType, shape: Sequence[int]) -> int:
    """Exact bytes of a tensor of ``qtype`` with ``shape`` (ggml order, ne0 first)."""
    if not shape or any(d <= 0 for d in shape):
        return 0
    if qtype.name == "i2_s":  # ik's ggml_nbytes special case
        elements = 1
        for d in shape:
            elements *= d
        return elements // 4 + 32
    rows = 1
    for d in shape[1:]:
        rows *= d
    return rows * qtype.row_bytes(shape[0])


def tensor_nbytes(type_name: str, shape: Sequence[int], flavour: Flavour | None = None) -> int:
    """Exact bytes of a tensor given its type name and shape."""
    return nbytes(by_name(type_name, flavour), shape)


# ---------------------------------------------------------------- safetensors
# The dtypes of a safetensors header (``dtype``, lower-cased in profiles) and
# their bits per element: the ``Dtype`` enum of the safetensors crate that the
# installed ``safetensors`` package (0.8.0) is built on, including its
# sub-byte floats (F4, two per byte; F6, four per three bytes) and the FNUZ
# fp8 variants.  tests/test_inspect_hf.py checks every row against that
# package's own reader (it accepts exactly these bytes for a shape).  Packed
# quantizations (NVFP4/MXFP4 blocks and scales, AWQ/GPTQ int4 packs,
# compressed-tensors) are stored as tensors of these dtypes in their packed
# shape, so their bytes need nothing more.  The crate's rule: a tensor's
# elements times the dtype's bits must be a whole number of bytes.
SAFETENSORS_BITS: dict[str, int] = {
    "bool": 8,
    "f4": 4,
    "f6_e2m3": 6,
    "f6_e3m2": 6,
    "u8": 8,
    "i8": 8,
    "f8_e5m2": 8,
    "f8_e4m3": 8,
    "f8_e4m3fnuz": 8,
    "f8_e5m2fnuz": 8,
    "f8_e8m0": 8,
    "i16": 16,
    "u16": 16,
    "f16": 16,
    "bf16": 16,
    "i32": 32,
    "u32": 32,
    "f32": 32,
    "c64": 64,
    "f64": 64,
    "i64": 64,
    "u64": 64,
}


def safetensors_known(dtype: str) -> bool:
    return dtype.lower() in SAFETENSORS_BITS


def safetensors_nbytes(dtype: str, shape: Sequence[int]) -> int:
    """Exact bytes of a safetensors tensor: elements x bits / 8 (a scalar has 1 element)."""
    bits = SAFETENSORS_BITS.get(dtype.lower())
    if bits is None:
        raise UnknownType(f"unknown safetensors dtype {dtype!r}")
    elements = 1
    for d in shape:
        elements *= d
    if elements * bits % 8:
        raise UnknownType(
            f"{elements} elements of {dtype.lower()} ({bits} bits each) are not a whole "
            "number of bytes"
        )
    return elements * bits // 8
