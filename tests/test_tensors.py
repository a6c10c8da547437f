"""Folded tensor names: syntax, errors, and lossless fold/unfold."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from layoutgen.models.tensors import (
    LayerSetError,
    Tensor,
    expand_name,
    fold,
    format_layers,
    parse_layers,
    unfold,
)


def test_syntax() -> None:
    assert parse_layers("0..2,5,7..8") == (0, 1, 2, 5, 7, 8)
    assert format_layers([8, 7, 5, 0, 1, 2]) == "0..2,5,7..8"
    assert expand_name("blk.{3..5}.ffn_up_exps.weight") == (
        "blk.3.ffn_up_exps.weight",
        "blk.4.ffn_up_exps.weight",
        "blk.5.ffn_up_exps.weight",
    )
    assert expand_name("output.weight") == ("output.weight",)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("blk.{}.x", "empty layer set '{}'"),
        ("blk.{3..1}.x", "range 3..1 in {3..1} must go upwards (write 1..3)"),
        ("blk.{4,2}.x", "layer set {4,2} must list layers in ascending order without overlaps"),
        ("blk.{a}.x", "cannot read 'a' in layer set {a}"),
        ("x.{1..2}.y", "cannot read folded name 'x.{1..2}.y'"),
    ],
)
def test_errors(name: str, message: str) -> None:
    with pytest.raises(LayerSetError) as info:
        expand_name(name)
    assert message in str(info.value)


def test_fold_groups_identical_layers_only() -> None:
    ts = [Tensor("token_embd.weight", "q8_0", (32, 4), 136)]
    ts += [
        Tensor(f"blk.{i}.w", "q4_0" if i != 2 else "q8_0", (32,), 18 if i != 2 else 34)
        for i in range(5)
    ]
    assert [f.name for f in fold(ts)] == ["token_embd.weight", "blk.{0..1,3..4}.w", "blk.2.w"]


_tensor = st.builds(
    lambda layer, suffix, qtype: Tensor(
        f"blk.{layer}.{suffix}" if layer is not None else suffix,
        qtype,
        (32,),
        18 if qtype == "q4_0" else 34,
    ),
    st.one_of(st.none(), st.integers(0, 40)),
    st.sampled_from(["a.weight", "b.weight", "c.bias"]),
    st.sampled_from(["q4_0", "q8_0"]),
)


@given(st.lists(_tensor, unique_by=lambda t: t.name, max_size=60))
def test_fold_unfold_round_trip(tensors: list[Tensor]) -> None:
    folded = fold(tensors)
    assert sorted(unfold(folded), key=lambda t: t.name) == sorted(tensors, key=lambda t: t.name)
    assert fold(unfold(folded)) == folded
    assert len(folded) <= len(tensors)
