"""Tensors of a model and the folded notation that keeps profiles reviewable.

A 744B MoE model has ~1800 tensors, but most layers repeat the same ~20
tensors with the same type and shape.  A profile therefore writes a run of
identical layers once: ``blk.{3..77}.ffn_gate_exps.weight`` stands for
``blk.3.ffn_gate_exps.weight`` ... ``blk.77.ffn_gate_exps.weight``, each with
the entry's type, shape and bytes (bytes are per tensor, not summed).

The layer-set syntax, inside one pair of braces right after ``blk.``:
comma-separated items, each a layer number ``N`` or an inclusive range
``A..B`` (A < B), strictly ascending and not overlapping, e.g.
``blk.{0..4,6..10,12}.attn_v.weight``.  A set of one layer is written plainly
(``blk.78.nextn.eh_proj.weight``).  Folding writes every run of two or more
consecutive layers as a range; unfolding accepts any valid set.  Names that do
not start with ``blk.N.`` (``token_embd.weight``) are never folded.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

_BLOCK = re.compile(r"^blk\.(?P<layer>0|[1-9][0-9]*)\.(?P<rest>.+)$")
_FOLDED = re.compile(r"^blk\.\{(?P<set>[^{}]*)\}\.(?P<rest>[^{}]+)$")
_ITEM = re.compile(r"^\s*(?P<a>[0-9]+)\s*(?:\.\.\s*(?P<b>[0-9]+)\s*)?$")


class LayerSetError(ValueError):
    """A malformed ``{...}`` layer set; the message says what to write."""


@dataclass(frozen=True)
class Tensor:
    """One tensor: type name, shape, exact bytes.  GGUF profiles: ggml type and ggml
    order (ne0 first); safetensors profiles: dtype and the header's order (outermost first)."""

    name: str
    type: str
    shape: tuple[int, ...]
    nbytes: int

    @functools.cached_property
    def layer(self) -> int | None:
        """The block index of ``blk.N.*`` tensors, else None (parsed once per tensor)."""
        m = _BLOCK.match(self.name)
        return int(m.group("layer")) if m else None


@dataclass(frozen=True)
class Folded:
    """A profile entry: one tensor, or the same tensor in a set of layers."""

    name: str
    type: str
    shape: tuple[int, ...]
    nbytes: int


def parse_layers(text: str) -> tuple[int, ...]:
    """``"0..4,6"`` -> (0, 1, 2, 3, 4, 6); raises :class:`LayerSetError`."""
    layers: list[int] = []
    if not text.strip():
        raise LayerSetError("empty layer set '{}'; write layers like {3..77} or {0..2,78}")
    for item in text.split(","):
        m = _ITEM.match(item)
        if m is None:
            raise LayerSetError(
                f"cannot read {item.strip()!r} in layer set {{{text}}}; "
                "write a layer number (5) or a range (3..77)"
            )
        a = int(m.group("a"))
        b = int(m.group("b")) if m.group("b") is not None else a
        if b <= a and m.group("b") is not None:
            raise LayerSetError(f"range {a}..{b} in {{{text}}} must go upwards (write {b}..{a})")
        if layers and a <= layers[-1]:
            raise LayerSetError(
                f"layer set {{{text}}} must list layers in ascending order without overlaps"
            )
        layers.extend(range(a, b + 1))
    return tuple(layers)


def runs(layers: Iterable[int]) -> list[tuple[int, int]]:
    """(0, 1, 2, 3, 4, 6) -> [(0, 4), (6, 6)]: sorted runs of consecutive layers."""
    ordered = sorted(set(layers))
    if ordered and ordered[-1] - ordered[0] + 1 == len(ordered):  # one run (every layer)
        return [(ordered[0], ordered[-1])]
    out: list[tuple[int, int]] = []
    for n in ordered:
        if out and out[-1][1] == n - 1:
            out[-1] = (out[-1][0], n)
        else:
            out.append((n, n))
    return out


def format_layers(layers: Iterable[int], *, sep: str = "..", join: str = ",") -> str:
    """(0, 1, 2, 3, 4, 6) -> ``"0..4,6"``: runs of two or more become ranges.

    ``sep="-", join=", "`` gives the spec's own form, ``3-10, 20``.
    """
    return join.join(str(a) if a == b else f"{a}{sep}{b}" for a, b in runs(layers))


def expand_name(name: str) -> tuple[str, ...]:
    """The tensor names a (possibly folded) entry name stands for."""
    if "{" not in name and "}" not in name:
        return (name,)
    m = _FOLDED.match(name)
    if m is None:
        raise LayerSetError(
            f"cannot read folded name {name!r}; write blk.{{A..B}}.rest, "
            "with one layer set right after 'blk.'"
        )
    rest = m.group("rest")
    return tuple(f"blk.{n}.{rest}" for n in parse_layers(m.group("set")))


def unfold(entries: Iterable[Folded]) -> list[Tensor]:
    """Every tensor, entries in order, each entry's layers ascending."""
    out: list[Tensor] = []
    for e in entries:
        out.extend(Tensor(n, e.type, e.shape, e.nbytes) for n in expand_name(e.name))
    return out


def fold(tensors: Sequence[Tensor]) -> list[Folded]:
    """Group layers whose tensor has the same suffix, type, shape and bytes.

    Entries appear in the order of their first tensor in ``tensors``, so
    ``fold(unfold(fold(ts))) == fold(ts)`` and ``unfold`` of the result holds
    exactly the input tensors.
    """
    groups: dict[tuple[str, str, tuple[int, ...], int], list[int]] = {}
    singles: dict[str, Tensor] = {}
    order: list[tuple[str, str, tuple[int, ...], int] | str] = []
    for t in tensors:
        m = _BLOCK.match(t.name)
        if m is None:
            singles[t.name] = t
            order.append(t.name)
            continue
        key = (m.group("rest"), t.type, t.shape, t.nbytes)
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append(int(m.group("layer")))
    out: list[Folded] = []
    for item in order:
        if isinstance(item, str):
            t = singles[item]
            out.append(Folded(t.name, t.type, t.shape, t.nbytes))
            continue
        rest, qtype, shape, size = item
        layers = groups[item]
        name = (
            f"blk.{layers[0]}.{rest}"
            if len(set(layers)) == 1
            else (f"blk.{{{format_layers(layers)}}}.{rest}")
        )
        out.append(Folded(name, qtype, shape, size))
    return out
