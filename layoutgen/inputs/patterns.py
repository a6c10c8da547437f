"""Tensor-override patterns: the regex language layoutgen accepts, matched in bounded time.

A spec's ``tensor_overrides`` patterns come from whoever wrote the spec (in CI,
whoever opened the pull request) and are searched in every tensor name of a
profile, by layoutgen while it validates and plans, and by llama.cpp at start-up
(``std::regex_search``, ECMAScript syntax, a backtracking matcher).  Python's
``re`` backtracks too: ``(.*)*X`` against a 40-character name takes longer than
any CI job.  So:

* **The language** is a subset of ECMAScript that Python's ``re`` reads the same
  way: literals and escapes, ``.``, classes, groups ``(...)`` and ``(?:...)``,
  ``|``, ``* + ? {m} {m,} {m,n}`` (lazy or not), ``^`` at the start and ``$``
  at the end.  Everything else (back-references, look-arounds, ``\\b``, named
  groups, inline flags, possessive quantifiers, POSIX classes, ``{,n}``) is
  refused with what to write instead: what layoutgen accepts, llama.cpp
  accepts and means the same by.
* **Matching** never backtracks: the pattern becomes a position automaton
  (Glushkov) and a name is read once, left to right, with the set of live
  positions as the state (cached as a lazy DFA).  The time is linear in the
  name for every accepted pattern; the pattern's size is capped
  (:data:`MAX_POSITIONS` after counts are expanded, :data:`MAX_DEPTH` groups
  deep).
* **Shapes that make a backtracking matcher exponential** are refused as well,
  since llama.cpp would still hang on them at start-up: a quantifier over
  something that itself repeats or can match nothing (``(.*)*``, ``(a+)+``,
  ``(a?)*``), and alternatives under a quantifier that can begin with the same
  character (``(.|.)*``, ``(a|ab)*``).  The check is conservative: it refuses
  a few harmless patterns too, never one of the forms layoutgen writes.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from dataclasses import dataclass, field

MAX_POSITIONS = 2000
MAX_DEPTH = 32
MAX_COUNT = 1000  # ECMAScript engines and RE2 cap {m,n} near here too
_UNICODE_MAX = 0x10FFFF
_BOS, _EOS = -1, -2  # the symbols ^ and $ read: the name is read as BOS name EOS


class PatternError(ValueError):
    """A pattern outside the accepted language; ``pos`` is its 0-based offset."""

    def __init__(self, pos: int, message: str) -> None:
        super().__init__(message)
        self.pos = pos
        self.message = message


# -- character sets ---------------------------------------------------------------

Ranges = tuple[tuple[int, int], ...]


def _norm(ranges: list[tuple[int, int]]) -> Ranges:
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return tuple(out)


def _complement(ranges: Ranges) -> Ranges:
    out: list[tuple[int, int]] = []
    at = 0
    for lo, hi in ranges:
        if lo > at:
            out.append((at, lo - 1))
        at = hi + 1
    if at <= _UNICODE_MAX:
        out.append((at, _UNICODE_MAX))
    return tuple(out)


def _overlap(a: Ranges, b: Ranges) -> bool:
    i = j = 0
    while i < len(a) and j < len(b):
        if a[i][1] < b[j][0]:
            i += 1
        elif b[j][1] < a[i][0]:
            j += 1
        else:
            return True
    return False


def _contains(ranges: Ranges, code: int) -> bool:
    i = bisect.bisect_right(ranges, (code, _UNICODE_MAX + 1)) - 1
    return i >= 0 and ranges[i][0] <= code <= ranges[i][1]


def _chars(text: str) -> list[tuple[int, int]]:
    return [(ord(c), ord(c)) for c in text]


# ECMAScript's classes as llama.cpp's std::regex reads them over the bytes of a name
# (ASCII \d, \w and \s; '.' stops at line ends)
_DIGIT = _norm([(0x30, 0x39)])
_WORD = _norm([(0x30, 0x39), (0x41, 0x5A), (0x61, 0x7A), (0x5F, 0x5F)])
_SPACE = _norm(_chars(" \t\n\r\x0b\x0c"))
_DOT = _complement(_norm(_chars("\n\r\u2028\u2029")))
_CLASS_ESCAPES = {
    "d": _DIGIT,
    "D": _complement(_DIGIT),
    "w": _WORD,
    "W": _complement(_WORD),
    "s": _SPACE,
    "S": _complement(_SPACE),
}
_CONTROL_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "v": "\x0b", "f": "\x0c"}
_SYNTAX = set("^$\\.*+?()[]{}|/-")


# -- the syntax tree --------------------------------------------------------------


@dataclass(frozen=True)
class Atom:
    """One character from ``ranges``; or an anchor (``^``: BOS, ``$``: EOS)."""

    ranges: Ranges
    anchor: int = 0
    pos: int = 0  # where an anchor is written


@dataclass(frozen=True)
class Seq:
    items: tuple[Node, ...]


@dataclass(frozen=True)
class Alt:
    branches: tuple[Node, ...]


@dataclass(frozen=True)
class Repeat:
    body: Node
    lo: int
    hi: int | None  # None: unbounded
    pos: int  # where the quantifier is written
    q: str  # the quantifier as written


Node = Atom | Seq | Alt | Repeat


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.i = 0
        self.depth = 0

    def fail(self, message: str, pos: int | None = None) -> PatternError:
        return PatternError(self.i if pos is None else pos, message)

    def peek(self) -> str:
        return self.text[self.i] if self.i < len(self.text) else ""

    def parse(self) -> Node:
        node = self.alternation()
        if self.i < len(self.text):  # only an unmatched ')' stops the top level
            raise self.fail("unmatched ')'; escape it as '\\)' or remove it")
        return node

    def alternation(self) -> Node:
        branches = [self.sequence()]
        while self.peek() == "|":
            self.i += 1
            branches.append(self.sequence())
        return branches[0] if len(branches) == 1 else Alt(tuple(branches))

    def sequence(self) -> Node:
        items: list[Node] = []
        while self.peek() not in ("", "|", ")"):
            atom = self.atom()
            items.append(self.quantified(atom))
        return items[0] if len(items) == 1 else Seq(tuple(items))

    def quantified(self, atom: Node) -> Node:
        start = self.i
        ch = self.peek()
        if ch == "*":
            lo, hi = 0, None
            self.i += 1
        elif ch == "+":
            lo, hi = 1, None
            self.i += 1
        elif ch == "?":
            lo, hi = 0, 1
            self.i += 1
        elif ch == "{":
            lo, hi = self.braces()
        else:
            return atom
        if isinstance(atom, Atom) and atom.anchor:
            raise self.fail("an anchor ('^', '$') cannot be repeated; remove the quantifier", start)
        if self.peek() == "?":
            self.i += 1  # lazy: the same tensors match, only the captured text differs
        if self.peek() == "+":
            raise self.fail("possessive quantifiers ('*+', '++') are not ECMAScript; drop the '+'")
        if self.peek() in ("*", "?", "{") or (self.peek() == "+"):
            raise self.fail("a quantifier cannot follow a quantifier; write one, e.g. '.*'")
        return Repeat(atom, lo, hi, start, self.text[start : self.i])

    def braces(self) -> tuple[int, int | None]:
        start = self.i
        end = self.text.find("}", start)
        body = self.text[start + 1 : end] if end > 0 else ""
        lo_s, comma, hi_s = body.partition(",")
        if end < 0 or not lo_s.isdigit() or not (hi_s.isdigit() or hi_s == ""):
            if end >= 0 and lo_s == "" and comma and hi_s.isdigit():
                raise self.fail(f"ECMAScript has no '{{,{hi_s}}}'; write '{{0,{hi_s}}}'", start)
            raise self.fail("a literal '{' must be escaped as '\\{' (or write {m}, {m,}, {m,n})")
        if not (lo_s.isascii() and hi_s.isascii()):
            raise self.fail("counts are written in ASCII digits", start)
        lo = int(lo_s)
        hi = lo if not comma else (int(hi_s) if hi_s else None)
        if hi is not None and hi < lo:
            raise self.fail(f"'{{{body}}}' counts down; write '{{{hi},{lo}}}'", start)
        if max(lo, hi or 0) > MAX_COUNT:
            raise self.fail(f"a count above {MAX_COUNT}; write a shorter pattern", start)
        self.i = end + 1
        return lo, hi

    def atom(self) -> Node:
        start = self.i
        ch = self.peek()
        self.i += 1
        if ch == "(":
            return self.group(start)
        if ch == "[":
            return Atom(self.klass(start))
        if ch == ".":
            return Atom(_DOT)
        if ch == "^":
            return Atom((), _BOS, start)
        if ch == "$":
            return Atom((), _EOS, start)
        if ch == "\\":
            return Atom(self.escape(in_class=False))
        if ch in "*+?":
            raise self.fail(f"'{ch}' has nothing to repeat; escape it as '\\{ch}'", start)
        if ch == "{":
            raise self.fail("'{' has nothing to repeat; escape it as '\\{'", start)
        if ch in "]}":
            raise self.fail(f"escape a literal '{ch}' as '\\{ch}'", start)
        return Atom(((ord(ch), ord(ch)),))

    def group(self, start: int) -> Node:
        if self.text.startswith("?:", self.i):
            self.i += 2
        elif self.peek() == "?":
            what = self.text[self.i : self.i + 3]
            kind = {
                "?=": "a look-ahead",
                "?!": "a negative look-ahead",
                "?<": "a look-behind or a named group",
                "?P": "a named group",
                "?>": "an atomic group",
                "?#": "a comment",
            }.get(what[:2], "an inline flag or extension")
            raise self.fail(
                f"'({what}' is {kind}, which layoutgen does not accept; "
                "write a plain group '(...)' or '(?:...)' and list the tensors it should match",
                start,
            )
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.fail(f"groups nested more than {MAX_DEPTH} deep; flatten the pattern", start)
        node = self.alternation()
        self.depth -= 1
        if self.peek() != ")":
            raise self.fail("'(' is not closed; add ')' or escape it as '\\('", start)
        self.i += 1
        return node

    def escape(self, in_class: bool) -> Ranges:
        start = self.i - 1
        ch = self.peek()
        self.i += 1
        if ch == "":
            raise self.fail("a pattern cannot end in '\\'; write '\\\\' for a backslash", start)
        if ch in _CLASS_ESCAPES:
            return _CLASS_ESCAPES[ch]
        if ch in _CONTROL_ESCAPES:
            return _norm(_chars(_CONTROL_ESCAPES[ch]))
        if ch in "xu":
            width = 2 if ch == "x" else 4
            digits = self.text[self.i : self.i + width]
            if len(digits) != width or any(c not in "0123456789abcdefABCDEF" for c in digits):
                raise self.fail(f"'\\{ch}' takes {width} hex digits", start)
            self.i += width
            code = int(digits, 16)
            if code > 0x7F:
                raise self.fail(
                    f"'\\{ch}{digits}' is not ASCII; tensor names are ASCII (llama.cpp "
                    "matches bytes)",
                    start,
                )
            return ((code, code),)
        if ch in _SYNTAX:
            return ((ord(ch), ord(ch)),)
        if ch in "bB" and not in_class:
            raise self.fail(
                f"'\\{ch}' (a word boundary) is not accepted; write the characters around "
                "the name, e.g. '\\.' or '^'",
                start,
            )
        if ch.isdigit():
            raise self.fail(
                f"'\\{ch}' is a back-reference (or an octal escape); repeat the text instead",
                start,
            )
        raise self.fail(
            f"'\\{ch}' means different things to llama.cpp and to Python (or nothing); "
            f"write the character itself{', escaped' if ch in _SYNTAX else ''}",
            start,
        )

    def klass(self, start: int) -> Ranges:
        negated = self.peek() == "^"
        if negated:
            self.i += 1
        ranges: list[tuple[int, int]] = []
        first = True
        while True:
            ch = self.peek()
            if ch == "":
                raise self.fail("'[' is not closed; add ']' or escape it as '\\['", start)
            if ch == "]":
                if first:
                    raise self.fail("a class cannot start with ']'; escape it as '\\]'")
                self.i += 1
                break
            if ch == "[":
                raise self.fail("escape '[' inside a class as '\\[' ('[:' is a POSIX class)")
            first = False
            lo_pos = self.i
            lo = self.class_item()
            if self.peek() == "-" and self.text[self.i + 1 : self.i + 2] not in ("]", ""):
                self.i += 1
                hi = self.class_item()
                if len(lo) != 1 or len(hi) != 1 or lo[0][0] != lo[0][1] or hi[0][0] != hi[0][1]:
                    raise self.fail("a range's ends are single characters; escape '-' as '\\-'")
                if hi[0][0] < lo[0][0]:
                    raise self.fail("a range runs from the lower character up", lo_pos)
                ranges.append((lo[0][0], hi[0][0]))
            else:
                ranges.extend(lo)
        out = _norm(ranges)
        return _complement(out) if negated else out

    def class_item(self) -> Ranges:
        ch = self.peek()
        self.i += 1
        if ch == "\\":
            return self.escape(in_class=True)
        return ((ord(ch), ord(ch)),)


# -- what is refused for llama.cpp's sake -------------------------------------------


def _nullable(node: Node) -> bool:
    if isinstance(node, Atom):
        return bool(node.anchor)
    if isinstance(node, Seq):
        return all(_nullable(n) for n in node.items)
    if isinstance(node, Alt):
        return any(_nullable(n) for n in node.branches)
    return node.lo == 0 or _nullable(node.body)


def _first(node: Node) -> Ranges:
    """Every character a match of ``node`` can begin with."""
    if isinstance(node, Atom):
        return node.ranges
    if isinstance(node, Repeat):
        return _first(node.body)
    if isinstance(node, Alt):
        return _norm([r for b in node.branches for r in _first(b)])
    out: list[tuple[int, int]] = []
    for item in node.items:
        out.extend(_first(item))
        if not _nullable(item):
            break
    return _norm(out)


def _varies(node: Node) -> Repeat | None:
    """A quantifier inside ``node`` whose count varies, if any."""
    if isinstance(node, Repeat):
        if node.hi != node.lo:
            return node
        return _varies(node.body)
    return next((r for c in _children(node) if (r := _varies(c)) is not None), None)


def _children(node: Node) -> tuple[Node, ...]:
    if isinstance(node, Seq):
        return node.items
    if isinstance(node, Alt):
        return node.branches
    if isinstance(node, Repeat):
        return (node.body,)
    return ()


def _alternations(node: Node) -> Iterator[Alt]:
    if isinstance(node, Alt):
        yield node
    for c in _children(node):
        yield from _alternations(c)


def _backtracking(node: Node, text: str) -> PatternError | None:
    """The first shape that sends a backtracking matcher exponential, or None."""
    if isinstance(node, Atom):
        return None
    if isinstance(node, Repeat):
        if node.hi is None or node.hi > 1:
            q = node.q
            inner = _varies(node.body)
            if inner is not None:
                return PatternError(
                    node.pos,
                    f"nested quantifiers: '{inner.q}' at offset {inner.pos} inside "
                    f"'{q}' at offset {node.pos} can split the same text in exponentially "
                    "many ways (llama.cpp's std::regex tries each); write one quantifier, "
                    "e.g. '.*' instead of '(.*)*', '[a-z]+' instead of '([a-z]+)+'",
                )
            if _nullable(node.body):
                return PatternError(
                    node.pos,
                    f"'{q}' repeats something that can match nothing, so a backtracking "
                    "matcher (llama.cpp's std::regex) tries exponentially many ways; make "
                    "the repeated part match at least one character",
                )
            for alt in _alternations(node.body):
                firsts = [_first(b) for b in alt.branches]
                for a in range(len(firsts)):
                    for b in range(a + 1, len(firsts)):
                        if _overlap(firsts[a], firsts[b]) or not firsts[a] or not firsts[b]:
                            return PatternError(
                                node.pos,
                                f"alternatives under '{q}' at offset {node.pos} can begin "
                                "with the same character, so a backtracking matcher "
                                "(llama.cpp's std::regex) tries exponentially many ways; "
                                "make them start differently (e.g. '(up|gate|down)'), or use "
                                "one class ('[ab]' for '(a|b)')",
                            )
        return _backtracking(node.body, text)
    children = node.items if isinstance(node, Seq) else node.branches
    return next((e for c in children if (e := _backtracking(c, text)) is not None), None)


# -- the automaton ----------------------------------------------------------------


@dataclass
class _Glushkov:
    ranges: list[Ranges] = field(default_factory=list)
    anchors: list[int] = field(default_factory=list)
    follow: list[int] = field(default_factory=list)
    written: list[int] = field(default_factory=list)  # an anchor's offset in the text

    def build(self, node: Node) -> tuple[bool, int, int]:
        """(nullable, first positions, last positions) of a fresh copy of ``node``."""
        if isinstance(node, Atom):
            p = len(self.ranges)
            if p >= MAX_POSITIONS:
                raise PatternError(0, "")
            self.ranges.append(node.ranges)
            self.anchors.append(node.anchor)
            self.written.append(node.pos)
            self.follow.append(0)
            return False, 1 << p, 1 << p
        if isinstance(node, Alt):
            parts = [self.build(b) for b in node.branches]
            return (
                any(n for n, _, _ in parts),
                _union(f for _, f, _ in parts),
                _union(la for _, _, la in parts),
            )
        if isinstance(node, Seq):
            return self.concat([self.build(item) for item in node.items])
        copies = [self.build(node.body) for _ in range(node.lo)]
        if node.hi is None:
            tail = self.build(node.body)
            self.link(tail[2], tail[1])
            copies.append((True, tail[1], tail[2]))
        else:
            # a{2,4} = a a (a (a)?)?: the optional copies nest, one way to match each count
            optional: tuple[bool, int, int] | None = None
            for _ in range(node.hi - node.lo):
                part = self.build(node.body)
                if optional is not None:
                    part = self.concat([part, optional])
                optional = (True, part[1], part[2])
            if optional is not None:
                copies.append(optional)
        return self.concat(copies)

    def concat(self, parts: list[tuple[bool, int, int]]) -> tuple[bool, int, int]:
        nullable, first, last = True, 0, 0
        for n, f, la in parts:
            self.link(last, f)
            first = first | f if nullable else first
            last = last | la if n else la
            nullable = nullable and n
        return nullable, first, last

    def link(self, sources: int, targets: int) -> None:
        while sources:
            low = sources & -sources
            self.follow[low.bit_length() - 1] |= targets
            sources ^= low


def _union(masks: Iterator[int]) -> int:
    out = 0
    for m in masks:
        out |= m
    return out


class Pattern:
    """An accepted pattern, matched as llama.cpp's ``regex_search`` would, in linear time."""

    def __init__(self, text: str, g: _Glushkov, nullable: bool, first: int, last: int) -> None:
        self.text = text
        self._g = g
        self._nullable = nullable
        self._first = first
        self._last = last
        self._masks: dict[int, int] = {}
        self._next: dict[tuple[int, int], int] = {}

    def _mask(self, symbol: int) -> int:
        mask = self._masks.get(symbol)
        if mask is None:
            mask = 0
            for p, (ranges, anchor) in enumerate(zip(self._g.ranges, self._g.anchors, strict=True)):
                if (anchor == symbol) if symbol < 0 else (not anchor and _contains(ranges, symbol)):
                    mask |= 1 << p
            if len(self._masks) > 4096:
                self._masks.clear()
            self._masks[symbol] = mask
        return mask

    def _step(self, state: int, symbol: int) -> int:
        key = (state, symbol)
        out = self._next.get(key)
        if out is None:
            reach = self._first
            rest = state
            follow = self._g.follow
            while rest:
                low = rest & -rest
                reach |= follow[low.bit_length() - 1]
                rest ^= low
            out = reach & self._mask(symbol)
            if len(self._next) > 65536:
                self._next.clear()
            self._next[key] = out
        return out

    def search(self, name: str) -> bool:
        """Whether the pattern is found anywhere in ``name``."""
        if self._nullable:
            return True
        state = self._step(0, _BOS)
        if state & self._last:
            return True
        for ch in name:
            state = self._step(state, ord(ch))
            if state & self._last:
                return True
        return bool(self._step(state, _EOS) & self._last)


def compile_pattern(text: str) -> Pattern:
    """The pattern, or a :class:`PatternError` saying where and what to write instead."""
    if not text:
        raise PatternError(0, "an empty pattern matches every tensor; name the tensors to move")
    if "\x00" in text:
        raise PatternError(text.index("\x00"), "a NUL character ends the pattern in llama.cpp")
    odd = next((i for i, ch in enumerate(text) if not ch.isascii()), None)
    if odd is not None:
        raise PatternError(
            odd,
            f"{text[odd]!a} is not ASCII: llama.cpp matches a name's bytes, one at a time, "
            "and tensor names are ASCII; write the ASCII characters the names have",
        )
    tree = _Parser(text).parse()
    problem = _backtracking(tree, text)
    if problem is not None:
        raise problem
    g = _Glushkov()
    try:
        nullable, first, last = g.build(tree)
    except PatternError:
        raise PatternError(
            0,
            f"the pattern expands to more than {MAX_POSITIONS} characters once its counts are "
            "written out; write a shorter one",
        ) from None
    for p, anchor in enumerate(g.anchors):
        bit = 1 << p
        followed = any(f & bit for f in g.follow)
        if anchor == _BOS and (not first & bit or followed):
            raise PatternError(
                g.written[p], "'^' only at the start of the pattern (or of an alternative)"
            )
        if anchor == _EOS and (not last & bit or g.follow[p]):
            raise PatternError(
                g.written[p], "'$' only at the end of the pattern (or of an alternative)"
            )
    return Pattern(text, g, nullable, first, last)


def refusal(text: str) -> str | None:
    """Why ``text`` is refused as a tensor-override pattern, or None when it is accepted."""
    try:
        compile_pattern(text)
    except PatternError as exc:
        where = f" (at offset {exc.pos}: {text[exc.pos : exc.pos + 12]!r})" if text else ""
        return f"{exc.message}{where}"
    return None
