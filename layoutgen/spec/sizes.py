"""Byte sizes as people write them: ``96GiB``, ``97247MiB``, ``8GB`` or bytes.

Binary units (KiB, MiB, GiB, TiB) are powers of 1024 and decimal units (KB,
MB, GB, TB) powers of 1000, as in the IEC/SI standards; ``nvidia-smi`` and
llama.cpp logs print MiB, disk vendors print GB.  A bare ``96G`` is refused
because it is ambiguous: the error says which forms are accepted.  Fractions
are allowed (a log's ``5418.03 MiB``) and rounded to whole bytes.  A size
above 1 PiB is refused: no memory or model file is that large, and such a
number would only overflow the arithmetic of later stages.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

UNITS: dict[str, int] = {
    "B": 1,
    "KB": 1000,
    "MB": 1000**2,
    "GB": 1000**3,
    "TB": 1000**4,
    "KiB": 1024,
    "MiB": 1024**2,
    "GiB": 1024**3,
    "TiB": 1024**4,
}

#: 1 PiB = 1024 TiB: a thousand times the RAM of the largest hosts layoutgen plans for
#: (seed 001: 768 GiB), and far below where float arithmetic on sums of sizes overflows.
MAX_SIZE = 1024**5

ACCEPTED = "a whole number of bytes, or a number with a unit: 96GiB, 97247MiB, 8GB, 512KiB"
SIZE_PATTERN = r"^\s*[0-9]+(\.[0-9]+)?\s*(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)\s*$"
_SIZE = re.compile(r"^\s*(?P<num>[0-9]+(?:\.[0-9]+)?)\s*(?P<unit>[A-Za-z]+)?\s*$")


class SizeError(ValueError):
    """A size that cannot be read; the message lists the accepted forms."""


def parse_size(value: object) -> int:
    """Return a size in bytes, or raise :class:`SizeError` saying what to write."""
    if isinstance(value, bool):
        raise SizeError(f"expected a size ({ACCEPTED}), got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise SizeError(f"a size cannot be negative, got {_short(value)}")
        if value > MAX_SIZE:
            raise SizeError(_too_large(value))
        return value
    if isinstance(value, float):
        raise SizeError(f"a size needs a unit or whole bytes ({ACCEPTED}), got {value!r}")
    if not isinstance(value, str):
        raise SizeError(f"expected a size ({ACCEPTED}), got {type(value).__name__}")
    m = _SIZE.match(value)
    if m is None:
        raise SizeError(f"cannot read {_short(value)!r} as a size; write {ACCEPTED}")
    unit = m.group("unit") or "B"
    factor = UNITS.get(unit)
    if factor is None:
        hint = _unit_hint(unit)
        raise SizeError(
            f"unknown unit {_short(unit)!r} in {_short(value)!r}{hint}; write {ACCEPTED}"
        )
    if len(m.group("num").split(".")[0].lstrip("0")) > 20:  # beyond any size: skip the arithmetic
        raise SizeError(_too_large(value))
    try:
        number = Decimal(m.group("num"))
    except InvalidOperation:  # pragma: no cover - the regex admits only digits
        raise SizeError(f"cannot read {value!r} as a size; write {ACCEPTED}") from None
    if unit == "B" and number != number.to_integral_value():
        raise SizeError(f"bytes must be whole, got {_short(value)!r}")
    size = int((number * factor).to_integral_value())
    if size > MAX_SIZE:
        raise SizeError(_too_large(value))
    return size


def _too_large(value: int | str) -> str:
    shown = repr(_short(value)) if isinstance(value, str) else _short(value)
    return (
        f"size {shown} is more than 1 PiB (1024 TiB), larger than any memory or model file; "
        "write the real size"
    )


def _short(value: int | str, limit: int = 40) -> str:
    """A value for a message, at most ``limit`` characters: a size may have 1000 digits."""
    if isinstance(value, int) and abs(value).bit_length() > 4 * limit:
        # str() of an int beyond 4300 digits raises; the length is what matters here.
        return f"a number of {abs(value).bit_length() * 30103 // 100000 + 1} digits"
    text = value if isinstance(value, str) else str(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _unit_hint(unit: str) -> str:
    upper = unit.upper()
    for ambiguous, binary, decimal in (
        ("K", "KiB", "KB"),
        ("M", "MiB", "MB"),
        ("G", "GiB", "GB"),
        ("T", "TiB", "TB"),
    ):
        if upper in (ambiguous, ambiguous + "I"):
            return f" (ambiguous: {binary} is 1024-based, {decimal} 1000-based)"
    for known in UNITS:
        if known.upper() == upper:
            return f" (units are case-sensitive: did you mean {known!r}?)"
    return ""


def format_size(n: int) -> str:
    """Human-readable binary size, for messages: ``1.50 GiB``, ``512.00 MiB``."""
    if abs(n) >= 1 << 1000:  # beyond a float; never a real size, but never an OverflowError
        return f"{'-' if n < 0 else ''}2^{abs(n).bit_length() - 1} B or more"
    for unit, factor in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if abs(n) >= factor:
            return f"{n / factor:.2f} {unit}"
    return f"{n} B"
