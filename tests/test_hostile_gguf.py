"""Hostile GGUF headers: each is one line on stderr and exit 1, in bounded time and memory.

The corpus is generated, not committed: every case corrupts the small valid
model of :func:`gguf_fixtures.raw_model` in one way (a length or count that
lies, a value of the wrong type or out of range, a file that is not a file)
and says the exact message ``layoutgen inspect`` must print.  Each case runs
the real CLI in a child process under a 1 GiB address-space limit and a
generous timeout (:func:`gguf_fixtures.run_bounded`), so a hang or a blow-up
fails the test rather than the machine; nothing here asserts a duration.
``tests/test_hostile_logs.py`` does the same for ``layoutgen calibrate``.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from gguf_fixtures import (
    ARRAY,
    BOOL,
    FLOAT32,
    INT16,
    INT32,
    STRING,
    UINT8,
    UINT16,
    UINT32,
    UINT64,
    RawGGUF,
    RawKV,
    RawTensor,
    pad,
    raw_model,
    run_bounded,
    u32,
    u64,
    value,
)

NAMES = "(keys and tensor names are printable ASCII without spaces, e.g. llama.block_count)"
ALIGN = "it must be a uint32 power of two (ggml's rule), e.g. 32"
SHARDS = (
    "a shard count is a whole number from 1 to 99999 (shards are named NAME-0000N-of-0000M.gguf)"
)
ARCH = "is not an architecture name (letters, digits, '-', '_' or '.', e.g. llama or glm-dsa)"
NAME = "general.name is not a model name (a string of at most 256 printable characters)"
BUDGET = (
    "more than 16 MiB of metadata besides long arrays and strings; not a model header "
    "layoutgen reads"
)
E40, E61, E63, U64MAX = 1 << 40, 1 << 61, 1 << 63, (1 << 64) - 1


@dataclass(frozen=True)
class Made:
    """A written case: the file to inspect, and numbers its message needs."""

    path: Path
    size: int  # of the file
    kv_end: int  # where the tensor infos begin
    data: int  # where the data section begins


def first(g: RawGGUF, key: str, vtype: int, payload: bytes, key_len: int | None = None) -> None:
    """Put a (hostile) key first, where its offsets are easy to state: it starts at byte 24."""
    g.kv.insert(0, RawKV(key.encode(), vtype, payload, key_len))


def at_24_value(key: str) -> int:
    """The offset of the value of the first key (its length prefix, type before it)."""
    return 24 + 8 + len(key) + 4


def name(g: RawGGUF, index: int = 0) -> str:
    return g.tensors[index].name.decode()


#: id -> (corrupt the valid model, the message after "error: PATH: ")
Corrupt = Callable[[RawGGUF], object]
Message = Callable[[Made], str]
CASES: dict[str, tuple[Corrupt, Message]] = {}


def case(case_id: str, corrupt: Corrupt, message: str | Message) -> None:
    assert case_id not in CASES
    CASES[case_id] = (corrupt, message if callable(message) else (lambda _m, s=message: s))


def _set(attr: str, v: object) -> Corrupt:
    return lambda g: setattr(g, attr, v)


def _kv(key: str, vtype: int, v: object, item: int | None = None) -> Corrupt:
    return lambda g: g.set(key, vtype, v, item)


def _tensor(index: int, **changes: object) -> Corrupt:
    def corrupt(g: RawGGUF) -> None:
        for attr, v in changes.items():
            setattr(g.tensors[index], attr, v)

    return corrupt


def _both(*steps: Corrupt) -> Corrupt:
    return lambda g: [step(g) for step in steps]


# ---- magic, version, counts
NOT_GGUF = "not a GGUF file (no 'GGUF' magic at the start)"
case("magic", _set("magic", b"GGUG"), NOT_GGUF)
case("magic-lowercase", _set("magic", b"gguf"), NOT_GGUF)
case("version-1", _set("version", 1), "GGUF version 1 is not supported (only 2 and 3)")
case("version-4", _set("version", 4), "GGUF version 4 is not supported (only 2 and 3)")
case(
    "version-max",
    _set("version", 0xFFFFFFFF),
    "GGUF version 4294967295 is not supported (only 2 and 3)",
)
for n in (E63, U64MAX, 65537):
    case(
        f"tensor-count-{n}",
        _set("n_tensors", n),
        f"the header says {n} tensors; layoutgen reads at most 65536",
    )
    case(
        f"kv-count-{n}",
        _set("n_kv", n),
        f"the header says {n} key/values; layoutgen reads at most 65536",
    )
case(
    "tensor-count-room",
    _set("n_tensors", 65536),
    lambda m: (
        "truncated or corrupt GGUF header: the header says 65536 tensors, more than "
        f"the rest of the file can hold ({m.size - 16} bytes, at least 33 per item)"
    ),
)
case(
    "kv-count-room",
    _set("n_kv", 65536),
    lambda m: (
        "truncated or corrupt GGUF header: the header says 65536 key/values, more than "
        f"the rest of the file can hold ({m.size - 24} bytes, at least 14 per item)"
    ),
)
case(
    "tensor-count-room-after-keys",
    lambda g: setattr(g, "n_tensors", (g.size() - 16) // 33),
    lambda m: (
        "truncated or corrupt GGUF header: the header says "
        f"{(m.size - 16) // 33} tensors, more than the rest of the file can hold "
        f"({m.size - m.kv_end} bytes after the key/values, at least 33 per tensor)"
    ),
)
case(
    "tensor-count-one-more",
    _set("n_tensors", 6),  # the sixth is read from the zero padding
    f"the name of tensor 5 is empty {NAMES}",
)
case(
    "kv-count-one-more",
    _both(lambda g: g.tensors.clear(), _set("n_kv", 6)),
    f"key 5 is empty {NAMES}",
)

# ---- keys
for n in (E40, U64MAX):
    case(
        f"key-length-{n}",
        lambda g, n=n: first(g, "x", UINT8, b"\0", key_len=n),
        lambda m, n=n: (
            f"key 0 is a string of {n} bytes at byte 24, longer than the rest of "
            f"the file ({m.size - 32} bytes)"
        ),
    )
case(
    "key-70000-bytes",
    lambda g: first(g, "k" * 70000, UINT8, b"\0"),
    "key 0 is 70000 bytes long; at most 65535 are allowed",
)
case("key-empty", lambda g: first(g, "", UINT8, b"\0"), f"key 0 is empty {NAMES}")
case(
    "key-newline",
    lambda g: first(g, "general.name\nPodmanArgs=--privileged", UINT8, b"\0"),
    f"key 0 'general.name\\nPodmanArgs=--privileged' is not printable ASCII {NAMES}",
)
case(
    "key-space",
    lambda g: first(g, "general name", UINT8, b"\0"),
    f"key 0 'general name' is not printable ASCII {NAMES}",
)
case(
    "key-utf8",
    lambda g: first(g, "général.name", UINT8, b"\0"),
    f"key 0 'g\\xe9n\\xe9ral.name' is not printable ASCII {NAMES}",
)
case(
    "key-twice",
    lambda g: g.kv.append(RawKV(b"general.name", STRING, value(STRING, "again"))),
    "key 'general.name' appears twice",
)

# ---- value types, strings, arrays
for vtype in (13, 0xFFFFFFFF):
    case(
        f"value-type-{vtype}",
        lambda g, t=vtype: first(g, "general.name", t, b""),
        f"key 'general.name' has unknown value type {vtype}",
    )
for item in (9, 13):
    case(
        f"array-of-type-{item}",
        lambda g, t=item: first(g, "x.list", ARRAY, u32(t) + u64(1)),
        f"key 'x.list' is an array of unsupported type {item}",
    )
for n in (E40, U64MAX):
    case(
        f"string-length-{n}",
        lambda g, n=n: first(g, "general.name", STRING, u64(n)),
        lambda m, n=n: (
            f"the value of key 'general.name' is a string of {n} bytes at byte "
            f"{at_24_value('general.name')}, longer than the rest of the file "
            f"({m.size - at_24_value('general.name') - 8} bytes)"
        ),
    )


def _one_past(g: RawGGUF) -> None:
    first(g, "general.name", STRING, u64(0))
    g.kv[0].payload = u64(g.size() - at_24_value("general.name") - 7)


case(
    "string-one-byte-past-the-end",
    _one_past,
    lambda m: (
        "the value of key 'general.name' is a string of "
        f"{m.size - at_24_value('general.name') - 7} bytes at byte {at_24_value('general.name')}, "
        f"longer than the rest of the file ({m.size - at_24_value('general.name') - 8} bytes)"
    ),
)
for n in (E61, 1 << 22 | 1):
    case(
        f"string-array-{n}",
        lambda g, n=n: first(g, "tokenizer.ggml.tokens", ARRAY, u32(STRING) + u64(n)),
        f"key 'tokenizer.ggml.tokens' holds {n} strings; layoutgen reads at most 4194304",
    )
case(
    "string-array-room",
    lambda g: first(g, "tokenizer.ggml.tokens", ARRAY, u32(STRING) + u64(1 << 20)),
    lambda m: (
        "truncated or corrupt GGUF header: key 'tokenizer.ggml.tokens' holds 1048576 "
        "strings, more than the rest of the file can hold "
        f"({m.size - at_24_value('tokenizer.ggml.tokens') - 12} bytes, at least 8 per item)"
    ),
)
for item, width, n in ((UINT8, 1, E61), (UINT64, 8, E61), (FLOAT32, 4, E40), (UINT32, 4, U64MAX)):
    case(
        f"array-{item}-{n}",
        lambda g, i=item, n=n: first(g, "x.list", ARRAY, u32(i) + u64(n)),
        lambda m, n=n, w=width: (
            "truncated or corrupt GGUF header: key 'x.list' holds "
            f"{n} items, more than the rest of the file can hold "
            f"({m.size - at_24_value('x.list') - 12} bytes, at least {w} per item)"
        ),
    )
case(
    "string-in-short-array-2^40",
    lambda g: first(g, "x.list", ARRAY, u32(STRING) + u64(3) + u64(E40)),
    lambda m: (
        f"string 0 of key 'x.list' is a string of {E40} bytes at byte "
        f"{at_24_value('x.list') + 12}, longer than the rest of the file "
        f"({m.size - at_24_value('x.list') - 20} bytes)"
    ),
)
case(
    "string-in-long-array-2^40",  # stepped over (not read) until the file ends
    lambda g: first(
        g,
        "tokenizer.ggml.tokens",
        ARRAY,
        u32(STRING) + u64(5000) + value(STRING, "a") * 4000 + u64(E40),
    ),
    lambda m: (
        f"truncated GGUF header (file ends at byte {m.size}) in the value of key "
        "'tokenizer.ggml.tokens'"
    ),
)
case(
    "long-strings-over-budget",  # 150 chat templates of 60 KiB are kept: too much
    lambda g: [g.set(f"x.template_{i}", STRING, "t" * 61440) for i in range(150)],
    BUDGET,
)
case(
    "short-arrays-over-budget",  # 120 arrays of 4096 bytes are kept: too much
    lambda g: [g.set(f"x.list_{i}", ARRAY, [1] * 4096, UINT8) for i in range(120)],
    BUDGET,
)

# ---- general.alignment: ggml/src/gguf.cpp (a UINT32, a non-zero power of two)
for bad in (0, 3, 7, 48):
    case(
        f"alignment-{bad}",
        _kv("general.alignment", UINT32, bad),
        f"general.alignment is {bad}; {ALIGN}",
    )
for vtype, v in ((INT32, -32), (UINT64, 32), (STRING, "32"), (FLOAT32, 32.0), (BOOL, True)):
    case(
        f"alignment-type-{vtype}",
        _kv("general.alignment", vtype, v),
        f"key 'general.alignment' has value type {vtype}; {ALIGN}",
    )
case(
    "alignment-2^31",  # a power of two, but the data section would start past the end
    _kv("general.alignment", UINT32, 1 << 31),
    lambda m: (
        "truncated: tensor 'token_embd.weight' ends at byte "
        f"{(1 << 31) + 256 * 16 * 4}, the file has {m.size}"
    ),
)

# ---- tensor infos
for n in (E40, U64MAX):
    case(
        f"tensor-name-length-{n}",
        _tensor(0, name_len=n),
        lambda m, n=n: (
            f"the name of tensor 0 is a string of {n} bytes at byte {m.kv_end}, "
            f"longer than the rest of the file ({m.size - m.kv_end - 8} bytes)"
        ),
    )
case(
    "tensor-name-64-bytes",
    _tensor(0, name=b"t" * 64),
    "the name of tensor 0 is 64 bytes long; at most 63 are allowed",
)
case("tensor-name-empty", _tensor(0, name=b""), f"the name of tensor 0 is empty {NAMES}")
case(
    "tensor-name-escape",
    _tensor(1, name=b"blk.0.\x1b[2J"),
    f"the name of tensor 1 'blk.0.\\x1b[2J' is not printable ASCII {NAMES}",
)
case(
    "tensor-twice",
    lambda g: setattr(g.tensors[2], "name", g.tensors[1].name),
    "tensor 'blk.0.attn_norm.weight' appears twice",
)
for n_dims in (0, 5, 0xFFFFFFFF):
    case(
        f"tensor-{n_dims}-dims",
        _tensor(0, n_dims=n_dims, dims=[256, 16][:n_dims]),
        f"tensor 'token_embd.weight' has {n_dims} dimensions (1 to 4)",
    )
for dims in ([256, 0], [E63], [U64MAX, 1], [1 << 32, 1 << 31]):
    case(
        f"tensor-shape-{'x'.join(map(str, dims))}",
        _tensor(0, dims=dims),
        f"tensor 'token_embd.weight' has shape {dims}: each dimension must be at least 1 "
        "and their product below 2^63",
    )
case(
    "tensor-shape-2^31x2^31",  # a legal shape of 16 EiB of f32: no file holds it
    _tensor(0, dims=[1 << 31, 1 << 31]),
    lambda m: (
        f"truncated: tensor 'token_embd.weight' ends at byte {m.data + (1 << 64)}, "
        f"the file has {m.size}"
    ),
)
case(
    "tensor-type-max",
    _tensor(0, type_id=0xFFFFFFFF),
    "tensor 'token_embd.weight' has unknown ggml type id 4294967295 (neither mainline nor "
    "ik_llama.cpp defines it)",
)
case(
    "tensor-offset-max",
    _tensor(4, offset=U64MAX),
    lambda m: (
        f"truncated: tensor 'blk.3.attn_norm.weight' ends at byte {m.data + U64MAX + 1024}, "
        f"the file has {m.size}"
    ),
)
case(
    "tensor-offset-past-the-end",
    lambda g: setattr(g.tensors[4], "offset", g.data_size),
    lambda m: (
        "truncated: tensor 'blk.3.attn_norm.weight' ends at byte "
        f"{m.size + 1024}, the file has {m.size}"
    ),
)
case(
    "tensor-layer-at-block-count",
    _kv("llama.block_count", UINT32, 3),
    "tensor 'blk.3.attn_norm.weight' is in layer 3, but the model has 3 (block_count)",
)
case(
    "tensor-layer-huge",
    _tensor(4, name=b"blk.99999999999999999999999.attn_norm.weight"),
    "tensor 'blk.99999999999999999999999.attn_norm.weight' is in layer "
    "99999999999999999999999, but the model has 4 (block_count)",
)

# ---- architecture, name, hyperparameters
WHOLE = "expected a whole number from"
case(
    "arch-missing",
    lambda g: g.drop("general.architecture"),
    "no general.architecture key; not a model file",
)
case("arch-number", _kv("general.architecture", UINT32, 5), f"general.architecture 5 {ARCH}")
case(
    "arch-newline",
    _kv("general.architecture", STRING, "llama\n[Service]"),
    f"general.architecture 'llama\\n[Service]' {ARCH}",
)
case(
    "arch-long",
    _kv("general.architecture", STRING, "a" * 65),
    f"general.architecture '{'a' * 65}' {ARCH}",
)
case(
    "arch-70-kib",
    _kv("general.architecture", STRING, "a" * 71680),
    f"general.architecture a string of 71680 bytes {ARCH}",
)
case("name-escape", _kv("general.name", STRING, "model\x1b]0;owned\x07"), NAME)
case("name-long", _kv("general.name", STRING, "m" * 1000), NAME)
case("name-number", _kv("general.name", UINT32, 7), NAME)
case(
    "block-count-missing",
    lambda g: g.drop("llama.block_count"),
    "no key 'llama.block_count' (the number of layers); is it a model? (a projector or "
    "vocabulary-only GGUF has no layers to place)",
)
for vtype, v, shown in (
    (UINT32, 0, "0"),
    (UINT64, E40, str(E40)),
    (INT32, -1, "-1"),
    (STRING, "4", "a str ('4')"),
    (FLOAT32, 4.0, "a float (4.0)"),
    (BOOL, True, "a boolean (True)"),
):
    case(
        f"block-count-{vtype}-{shown.split()[-1].strip('()')}",
        _kv("llama.block_count", vtype, v),
        f"key 'llama.block_count' is {shown}; {WHOLE} 1 to 4096",
    )
case(
    "block-count-per-layer",
    _kv("llama.block_count", ARRAY, [4, 5], UINT32),
    "key 'llama.block_count' has different values per layer; expected one number",
)
for key, vtype, v, shown, bounds in (
    ("llama.embedding_length", INT32, -5, "-5", "0 to 16777215"),
    ("llama.embedding_length", UINT64, E40, str(E40), "0 to 16777215"),
    ("llama.context_length", UINT64, E40, str(E40), "0 to 1073741824"),
    ("llama.expert_count", UINT32, 1 << 20, "1048576", "0 to 65536"),
    ("llama.leading_dense_block_count", UINT32, 5, "5", "0 to 4"),
    ("llama.nextn_predict_layers", UINT32, 9, "9", "0 to 4"),
    ("llama.vocab_size", UINT64, 1 << 32, str(1 << 32), "0 to 16777215"),
    ("llama.attention.head_count", ARRAY, [8, -1, 8, 8], "-1", "0 to 65536"),
    ("llama.feed_forward_length", ARRAY, ["a"], "a str ('a')", "0 to 16777215"),
):
    item = (INT32 if isinstance(v[0], int) else STRING) if isinstance(v, list) else None
    case(
        f"hparam-{key.split('.')[-1]}-{shown.split()[-1].strip('()')}",
        _kv(key, vtype, v, item),
        f"key {key!r} is {shown}; {WHOLE} {bounds}",
    )
for n in (0, 5):
    case(
        f"hparam-head-count-kv-{n}-values",
        _kv("llama.attention.head_count_kv", ARRAY, [2] * n, UINT32),
        f"key 'llama.attention.head_count_kv' has {n} values; expected 1 to 4",
    )
case(
    "hparam-expert-used-above-count",
    _both(_kv("llama.expert_count", UINT32, 8), _kv("llama.expert_used_count", UINT32, 9)),
    f"key 'llama.expert_used_count' is 9; {WHOLE} 0 to 8",
)
case(
    "qwen3next-interval-0",
    lambda g: _rename_arch(g, "qwen3next", ("qwen3next.full_attention_interval", UINT32, 0)),
    f"key 'qwen3next.full_attention_interval' is 0; {WHOLE} 1 to 4096",
)
case(
    "gemma3-pattern-negative",
    lambda g: _rename_arch(g, "gemma3", ("gemma3.attention.sliding_window_pattern", INT32, -1)),
    f"key 'gemma3.attention.sliding_window_pattern' is -1; {WHOLE} 0 to 4096",
)
case(
    "gemma4-pattern-too-long",
    lambda g: _rename_arch(
        g, "gemma4", ("gemma4.attention.sliding_window_pattern", ARRAY, [True] * 5, BOOL)
    ),
    "key 'gemma4.attention.sliding_window_pattern' is not a list of at most 4 booleans "
    "(one per layer)",
)

# ---- split models
for vtype, v, shown in (
    (UINT64, E40, str(E40)),
    (UINT16, 0, "0"),
    (INT16, -1, "-1"),
    (STRING, "2", "'2'"),
    (BOOL, True, "True"),
):
    case(
        f"split-count-{vtype}-{shown.strip(chr(39))}",
        _kv("split.count", vtype, v),
        f"split.count is {shown}; {SHARDS}",
    )


def _rename_arch(
    g: RawGGUF, arch: str, extra: tuple[str, int, object] | tuple[str, int, object, int]
) -> None:
    for entry in g.kv:
        if entry.key.startswith(b"llama."):
            entry.key = arch.encode() + entry.key[len(b"llama") :]
    g.set("general.architecture", STRING, arch)
    g.set(*extra)


def write(g: RawGGUF, path: Path) -> Made:
    g.write(path)
    return Made(path, path.stat().st_size, g.kv_end(), pad(len(g.encode()), g.alignment))


def assert_one_line_error(args: list[str], message: str) -> None:
    result = run_bounded(args)
    assert (result.code, result.stdout) == (1, ""), result
    assert result.stderr == f"error: {message}\n"


@pytest.mark.parametrize("case_id", sorted(CASES))
def test_hostile_header(tmp_path: Path, case_id: str) -> None:
    corrupt, message = CASES[case_id]
    g = raw_model()
    corrupt(g)
    made = write(g, tmp_path / "m.gguf")
    assert_one_line_error(["inspect", str(made.path)], f"{made.path}: {message(made)}")


@pytest.mark.parametrize("case_id", sorted(CASES))
def test_hostile_header_read_as_a_prefix(tmp_path: Path, case_id: str) -> None:
    """--header-only trusts no more: the same bounds, one line, never a traceback.
    A case about tensor data past the end of the file is no error there (a prefix
    has no data); every other case fails as without the flag."""
    corrupt, message = CASES[case_id]
    g = raw_model()
    corrupt(g)
    made = write(g, tmp_path / "m.gguf")
    result = run_bounded(["inspect", "--header-only", str(made.path)])
    if result.code == 0:
        assert "truncated: tensor" in message(made), case_id
        return
    assert (result.code, result.stdout) == (1, ""), result
    assert result.stderr.startswith(f"error: {made.path}: ") and result.stderr.count("\n") == 1
    assert "Traceback" not in result.stderr


def test_the_uncorrupted_model_inspects(tmp_path: Path) -> None:
    """The base of every case is valid: each message comes from its corruption alone."""
    made = write(raw_model(), tmp_path / "m.gguf")
    result = run_bounded(["inspect", str(made.path)])
    assert (result.code, result.stderr) == (0, "")
    assert "blk.{0..3}.attn_norm.weight" in result.stdout


# ---- files that are not GGUF files, big sparse ones, split sets


def _fifo(d: Path) -> Path:
    os.mkfifo(d / "m.gguf")
    return d / "m.gguf"


def _socket(d: Path) -> Path:
    path = d / "m.gguf"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(path))
    return path


def _link_to_fifo(d: Path) -> Path:
    os.mkfifo(d / "fifo")
    (d / "m.gguf").symlink_to(d / "fifo")
    return d / "m.gguf"


def _bytes(content: bytes) -> Callable[[Path], Path]:
    def make(d: Path) -> Path:
        (d / "m.gguf").write_bytes(content)
        return d / "m.gguf"

    return make


def _sparse_zero_tensors(d: Path) -> Path:
    """65536 tensors promised, 8 GiB of holes: the first tensor's name is empty."""
    path = d / "m.gguf"
    with path.open("wb") as f:
        f.write(b"GGUF" + u32(3) + u64(65536) + u64(0))
        f.truncate(8 << 30)
    return path


def _many_strings(d: Path) -> Path:
    """The most strings a file may hold (2^22, all empty: 32 MiB of holes), then a key."""
    g = raw_model()
    g.tensors = []
    g.set_raw(b"tokenizer.ggml.tokens", ARRAY, u32(STRING) + u64(1 << 22))
    g.n_kv = len(g.kv) + 1
    g.data_size = (1 << 22) * 8 + 64
    return g.write(d / "m.gguf")


def _strings_over_budget(d: Path) -> Path:
    """Two string arrays of 2^21 (empty) strings and one more: over the 2^22 of a file."""
    g = raw_model()
    g.tensors = []
    empty = u64(0) * (1 << 21)
    g.set_raw(b"x.first", ARRAY, u32(STRING) + u64(1 << 21) + empty)
    g.set_raw(b"x.second", ARRAY, u32(STRING) + u64((1 << 21) + 1))
    g.data_size = 17 << 20
    return g.write(d / "m.gguf")


def _huge_string(d: Path) -> Path:
    """A 16 GiB string value inside a 17 GiB sparse file: stepped over, never read."""
    g = raw_model()
    g.tensors = []
    g.set_raw(b"general.name", STRING, u64(16 << 30))
    g.data_size = 17 << 30
    return g.write(d / "m.gguf")


def _many_keys(d: Path) -> Path:
    """65535 keys, the most a file may have, and one more promised."""
    g = raw_model()
    g.tensors = []
    g.kv += [RawKV(f"x.k{i}".encode(), UINT8, b"\1") for i in range(65535 - len(g.kv))]
    g.n_kv = 65536
    return g.write(d / "m.gguf")


def _many_tensors(d: Path) -> Path:
    """65536 tensors, the most a file may have; the last one ends past the file."""
    g = raw_model()
    g.tensors = [RawTensor(f"t{i}.weight".encode(), [8], 0, 32 * i) for i in range(65536)]
    g.data_size = 32 * 65535
    return g.write(d / "m.gguf")


FILES: dict[str, tuple[Callable[[Path], Path], str]] = {
    "fifo": (_fifo, "is a FIFO (named pipe), not a regular file; give a GGUF file"),
    "socket": (_socket, "is a socket, not a regular file; give a GGUF file"),
    "link-to-fifo": (_link_to_fifo, "is a FIFO (named pipe), not a regular file; give a GGUF file"),
    # a directory is read as a Hugging Face checkpoint (inspect DIR): config.json first
    "directory": (
        lambda d: d,
        "/config.json: no such file; a Hugging Face model directory has config.json beside "
        "its safetensors",
    ),
    "missing": (lambda d: d / "m.gguf", "no such file"),
    "empty": (_bytes(b""), NOT_GGUF),
    "three-bytes": (_bytes(b"GGU"), NOT_GGUF),
    "counts-cut-short": (
        _bytes(b"GGUF" + u32(3) + u64(0) + b"\0\0\0\0"),
        "truncated GGUF header (file ends at byte 20) in the tensor and key counts",
    ),
    "sparse-8-gib-of-zeros": (_sparse_zero_tensors, f"the name of tensor 0 is empty {NAMES}"),
    "most-strings-then-nothing": (_many_strings, f"key 6 is empty {NAMES}"),
    "16-gib-string": (_huge_string, f"key 2 is empty {NAMES}"),
    "strings-over-the-budget-of-a-file": (
        _strings_over_budget,
        "key 'x.second' holds 2097153 strings, 4194305 with the string arrays before it; "
        "layoutgen reads at most 4194304 in all",
    ),
    "most-keys-then-nothing": (_many_keys, f"key 65535 is empty {NAMES}"),
    "most-tensors-last-past-the-end": (
        _many_tensors,
        "truncated: tensor 't65535.weight' ends at byte {end}, the file has {size}",
    ),
}


@pytest.mark.parametrize("case_id", sorted(FILES))
def test_hostile_file(tmp_path: Path, case_id: str) -> None:
    make, message = FILES[case_id]
    path = make(tmp_path)
    if "{" in message:
        size = path.stat().st_size
        message = message.format(size=size, end=size + 32)
    where = f"{path}{message}" if message.startswith("/") else f"{path}: {message}"
    assert_one_line_error(["inspect", str(path)], where)


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/null", "/dev/urandom"])
def test_devices_are_refused_unread(device: str) -> None:
    assert_one_line_error(
        ["inspect", device],
        f"{device}: is a character device, not a regular file; give a GGUF file",
    )


def _split(d: Path, count: int, name_count: int) -> list[Path]:
    paths = []
    for i in range(name_count):
        g = raw_model()
        g.set("split.count", UINT16, count)
        g.set("split.no", UINT16, i)
        paths.append(g.write(d / f"m-{i + 1:05d}-of-{name_count:05d}.gguf"))
    return paths


def test_split_sets(tmp_path: Path) -> None:
    odd = tmp_path / "odd"
    odd.mkdir()
    g = raw_model()
    g.set("split.count", UINT16, 2)
    lone = g.write(odd / "m.gguf")
    assert_one_line_error(
        ["inspect", str(lone)],
        f"{lone}: has split.count 2 but its name is not NAME-0000N-of-0000M.gguf, so the other "
        "shards cannot be found",
    )
    disagree = tmp_path / "disagree"
    disagree.mkdir()
    first_shard = _split(disagree, 3, 2)[0]
    assert_one_line_error(
        ["inspect", str(first_shard)],
        f"{first_shard}: has split.count 3 but its name says 2 shards",
    )
    for kind in ("missing", "fifo", "directory", "copy-of-the-first"):
        d = tmp_path / kind
        d.mkdir()
        one, two = _split(d, 2, 2)
        two.unlink()
        if kind == "fifo":
            os.mkfifo(two)
            message = f"{two}: is a FIFO (named pipe), not a regular file; give a GGUF file"
        elif kind == "directory":
            two.mkdir()
            message = f"{two}: is a directory, not a GGUF file"
        elif kind == "copy-of-the-first":
            two.write_bytes(one.read_bytes())
            message = f"{two}: is not shard 2 of 2 of {one.name} (split.no 0, split.count 2)"
        else:
            message = f"{two}: missing shard 2 of 2 (given {one.name})"
        assert_one_line_error(["inspect", str(one)], message)
