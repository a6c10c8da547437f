"""Property: no mutated Hugging Face checkpoint makes ``inspect DIR`` crash, and the
answer does not depend on how many processes read the shards.

Each case starts from one small sharded checkpoint (written by the ``safetensors``
package, as in test_inspect_hf.py) and mutates what breaks such a directory in
practice and in the hands of an attacker: bytes of a shard's JSON header flipped,
cut out or repeated, its length field rewritten, a shard truncated or padded,
numbers in the header replaced by huge, negative or fractional ones, dtypes and
names swapped, the index's weight_map edited, config.json broken.  Every case must
end in a profile or in one :class:`SafetensorsError` line naming a file in the
directory, and the same one when the shards are read by one process, by three
forked workers and by one per shard (layoutgen/models/forked.py).

The normal run draws a seeded sample (``LAYOUTGEN_FUZZ_CASES``, default 300, the
same variable as test_fuzz.py; ``make fuzz`` runs 10,000).
"""

from __future__ import annotations

import json
import os
import random
import re
import struct
from collections.abc import Callable
from pathlib import Path

import pytest
from test_inspect_hf import LLAMA, attention, checkpoint, dense_mlp, ends, experts

from layoutgen.models.hf_checkpoint import inspect_dir
from layoutgen.models.profile import dump_profile
from layoutgen.models.safetensors_header import SafetensorsError

CASES = int(os.environ.get("LAYOUTGEN_FUZZ_CASES", "300"))
SHARDS = 5
Mutation = Callable[[random.Random, Path], str]


def pristine(d: Path) -> dict[str, bytes]:
    tensors = ends(64, 128)
    for i in range(3):
        p = f"model.layers.{i}"
        tensors |= attention(p, 4, 2, 16, 64) | (
            experts(p, 4, 64, 32) if i else dense_mlp(p, 64, 160)
        )
    checkpoint(d, LLAMA, tensors, shards=SHARDS)
    return {p.name: p.read_bytes() for p in sorted(d.iterdir())}


def shard(rng: random.Random, d: Path) -> Path:
    return rng.choice(sorted(d.glob("*.safetensors")))


def header_bytes(path: Path) -> tuple[int, bytes, bytes]:
    """The length field, the header and the rest; a file already cut below its
    length field (an earlier mutation) has a header of one space."""
    raw = path.read_bytes()
    if len(raw) < 8:
        return 1, b" ", raw
    (length,) = struct.unpack("<Q", raw[:8])
    return length, raw[8 : 8 + length] or b" ", raw[8 + length :]


def flip(rng: random.Random, d: Path) -> str:
    path = shard(rng, d)
    length, head, data = header_bytes(path)
    b = bytearray(head)
    for _ in range(rng.randint(1, 4)):
        b[rng.randrange(len(b))] = rng.randrange(256)
    path.write_bytes(struct.pack("<Q", length) + bytes(b) + data)
    return f"flip bytes in {path.name}"


def splice(rng: random.Random, d: Path) -> str:
    """Header bytes cut out, or repeated; the length field kept honest half the time
    (so that the JSON is what breaks), else left as it was."""
    path = shard(rng, d)
    length, head, data = header_bytes(path)
    at = rng.randrange(len(head))
    span = rng.randint(1, 80)
    repeated = rng.random() < 0.5
    piece = head[at : at + span] * 2 if repeated else b""
    new = head[:at] + piece + head[at + span :]
    if rng.random() < 0.5:
        length = len(new)
    path.write_bytes(struct.pack("<Q", length) + new + data)
    return f"{'repeat' if repeated else 'cut'} {span} header bytes at {at} in {path.name}"


def length_field(rng: random.Random, d: Path) -> str:
    path = shard(rng, d)
    length, head, data = header_bytes(path)
    new = rng.choice([0, 1, 7, length - 1, length + 1, len(head) + len(data), 2**63, 2**64 - 1])
    # a field an earlier mutation set to 0 or 2**64 - 1 stays a u64 (the file format's)
    new = min(max(new, 0), 2**64 - 1)
    path.write_bytes(struct.pack("<Q", new) + head + data)
    return f"header length {new} in {path.name}"


def size(rng: random.Random, d: Path) -> str:
    path = shard(rng, d)
    raw = path.read_bytes()
    new = rng.choice([0, 3, 8, len(raw) - 1, len(raw) + 1, len(raw) + 4096])
    path.write_bytes(raw[:new] + b"\0" * max(new - len(raw), 0))
    return f"{path.name} resized to {new} bytes"


NUMBER = re.compile(rb"(?<=[\[,])-?[0-9]+(?=[\],])")


def number(rng: random.Random, d: Path) -> str:
    path = shard(rng, d)
    _, head, data = header_bytes(path)
    spots = list(NUMBER.finditer(head))
    if not spots:
        return f"no number left in {path.name}"
    m = rng.choice(spots)
    new = rng.choice(
        [b"-1", b"0", b"1.0", b"1e3", b"18446744073709551616", b"true", b"null", b'"8"']
    )
    text = head[: m.start()] + new + head[m.end() :]
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)
    return f"number {m.group().decode()} -> {new.decode()} in {path.name}"


def word(rng: random.Random, d: Path) -> str:
    path = shard(rng, d)
    _, head, data = header_bytes(path)
    swaps = [
        (b'"BF16"', rng.choice([b'"bf16"', b'"F8_E4M3"', b'"Q4_K"', b'""', b"[]", b'"F32"'])),
        (b'"dtype"', rng.choice([b'"dtypes"', b'"shape"', b'"DTYPE"'])),
        (b'"shape"', rng.choice([b'"Shape"', b'"dtype"'])),
        (b'"data_offsets"', b'"offsets"'),
        (b"model.layers.", rng.choice([b"blk.", b"model.layers.x", b"model.layers.00", b""])),
        (b"__metadata__", b"metadata"),
    ]
    old, new = rng.choice(swaps)
    text = head.replace(old, new, rng.choice([1, 2, -1]))
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)
    return f"{old.decode()} -> {new.decode()} in {path.name}"


def index(rng: random.Random, d: Path) -> str:
    path = d / "model.safetensors.index.json"
    try:  # a case's first mutation may have broken it already
        doc = json.loads(path.read_text())
        weight_map = doc["weight_map"]
        names = sorted(weight_map)
    except (ValueError, KeyError, TypeError):
        return "index already broken"
    files = sorted(p.name for p in d.glob("*.safetensors"))
    kind = rng.choice(["move", "drop", "add", "file", "type", "text"])
    if kind == "move":
        weight_map[rng.choice(names)] = rng.choice(files)
    elif kind == "drop":
        del weight_map[rng.choice(names)]
    elif kind == "add":
        weight_map[rng.choice(["model.extra.weight", "blk.0.x", "a" * 600])] = rng.choice(files)
    elif kind == "file":
        weight_map[rng.choice(names)] = rng.choice(["../x", "missing.safetensors", "", "a/b"])
    elif kind == "type":
        weight_map[rng.choice(names)] = rng.choice([1, None, ["x"], {"a": 1}])
    else:
        text = path.read_text()
        at = rng.randrange(len(text))
        path.write_text(text[:at] + text[at + rng.randint(1, 30) :])
        return f"index text cut at {at}"
    path.write_text(json.dumps(doc))
    return f"index: {kind}"


def config(rng: random.Random, d: Path) -> str:
    path = d / "config.json"
    doc = json.loads(path.read_text())  # only json.dumps below writes it: still JSON
    key = rng.choice(sorted(doc))
    doc[key] = rng.choice([None, -1, 0, 2**70, "3", [], {}, 1.5, True])
    path.write_text(json.dumps(doc))
    return f"config: {key} = {doc[key]!r}"


MUTATIONS: tuple[Mutation, ...] = (flip, splice, length_field, size, number, word, index, config)


def outcome(d: Path, jobs: int) -> str:
    try:
        return dump_profile(inspect_dir(d, jobs))
    except SafetensorsError as exc:
        message = str(exc)
        assert "\n" not in message, message
        assert message.startswith(str(d)), message  # names the directory or a file in it
        return f"error: {message}"


def test_mutated_checkpoints_never_crash_and_do_not_depend_on_the_workers(
    tmp_path: Path,
) -> None:
    d = tmp_path / "m"
    files = pristine(d)
    clean = outcome(d, 1)
    assert not clean.startswith("error")
    rng = random.Random(17)
    ended = {"profile": 0, "error": 0}
    for case in range(CASES):
        for _ in range(rng.choice([1, 1, 1, 2])):
            what = rng.choice(MUTATIONS)(rng, d)
        try:
            one = outcome(d, 1)
            assert outcome(d, 3) == one and outcome(d, SHARDS) == one
        except Exception as exc:  # a traceback or a difference: say which case
            raise AssertionError(f"case {case} ({what}): {exc!r}") from exc
        ended["error" if one.startswith("error") else "profile"] += 1
        for name, raw in files.items():  # back to the pristine checkpoint
            (d / name).write_bytes(raw)
    # the mutations reach the checks: most cases end in an error, some still read
    assert ended["error"] > CASES // 2, ended


@pytest.mark.parametrize("jobs", [1, 3])
def test_the_pristine_checkpoint_reads_the_same_way(tmp_path: Path, jobs: int) -> None:
    d = tmp_path / "m"
    pristine(d)
    assert outcome(d, jobs) == outcome(d, 1)
