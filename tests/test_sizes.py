"""Sizes: the forms the spec accepts, and the message for everything else."""

from __future__ import annotations

import pytest

from layoutgen.spec.sizes import ACCEPTED, SizeError, format_size, parse_size


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("96GiB", 96 * 2**30),
        # ggml_cuda_init logs an RTX PRO 6000 as "VRAM: 97247 MiB" (seed 001).
        ("97247MiB", 97247 * 2**20),
        ("8GB", 8 * 10**9),
        ("512KiB", 512 * 1024),
        ("1TB", 10**12),
        ("2TiB", 2 * 2**40),
        ("96 GiB", 96 * 2**30),
        ("123B", 123),
        (123, 123),
        (0, 0),
        # A log prints "5418.03 MiB"; fractions round to whole bytes.
        ("5418.03MiB", round(5418.03 * 2**20)),
    ],
)
def test_accepted_forms(text: object, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("96G", "ambiguous: GiB is 1024-based, GB 1000-based"),
        ("96gib", "did you mean 'GiB'?"),
        ("lots", "cannot read 'lots' as a size"),
        ("1.5B", "bytes must be whole"),
        (-1, "cannot be negative"),
        (1.5, "needs a unit"),
        (True, "expected a size"),
        ([1], "expected a size"),
        ("12 parsecs", "unknown unit 'parsecs'"),
    ],
)
def test_refused_forms_say_what_is_accepted(text: object, fragment: str) -> None:
    with pytest.raises(SizeError) as info:
        parse_size(text)
    assert fragment in str(info.value)
    if isinstance(text, str) and fragment != "bytes must be whole":
        assert ACCEPTED in str(info.value)


def test_format_size_is_binary() -> None:
    assert format_size(768 * 2**30) == "768.00 GiB"
    assert format_size(1536 * 2**20) == "1.50 GiB"
    assert format_size(100) == "100 B"
