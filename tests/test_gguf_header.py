"""Header-only GGUF reading: one-line errors naming the file, for each way a model breaks."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest
from gguf import GGUFValueType

from layoutgen.models.gguf_header import GGUFError, SkippedArray, read_header, read_model
from layoutgen.models.inventory import inspect_model

from gguf_fixtures import Spec, write_model

U32 = GGUFValueType.UINT32
TENSORS = [Spec(f"blk.{i}.w", (32, 4), 8, 4 * 34) for i in range(4)]  # q8_0: 34 B per 32


def _model(tmp_path: Path, name: str = "m.gguf", **kw: int) -> list[Path]:
    kv = {"llama.block_count": (4, U32), "general.name": (name, GGUFValueType.STRING)}
    return write_model(tmp_path / name, "llama", kv, TENSORS, **kw)


def test_reads_keys_and_tensor_infos(tmp_path: Path) -> None:
    (path,) = _model(tmp_path)
    header = read_header(path)
    assert header.version == 3
    assert header.kv["general.architecture"] == "llama" and header.kv["llama.block_count"] == 4
    assert [(t.name, t.shape, t.type_id) for t in header.tensors] == [
        (s.name, s.shape, 8) for s in TENSORS
    ]
    assert [t.offset for t in header.tensors] == [0, 160, 320, 480]  # 136 padded to 32


def test_long_arrays_are_skipped_but_counted(tmp_path: Path) -> None:
    kv = {"tokenizer.ggml.tokens": ([f"t{i}" for i in range(5000)], GGUFValueType.ARRAY)}
    (path,) = write_model(tmp_path / "v.gguf", "llama", kv, TENSORS)
    assert read_header(path).kv["tokenizer.ggml.tokens"] == SkippedArray(5000)


def test_wrong_magic(tmp_path: Path) -> None:
    path = tmp_path / "x.gguf"
    path.write_bytes(b"FUGG" + bytes(60))
    with pytest.raises(GGUFError, match=r"x\.gguf: not a GGUF file \(no 'GGUF' magic"):
        read_header(path)


def test_version_1_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "v1.gguf"
    path.write_bytes(b"GGUF" + struct.pack("<I", 1) + bytes(16))
    with pytest.raises(GGUFError, match=r"v1\.gguf: GGUF version 1 is not supported"):
        read_header(path)


def test_truncated_header(tmp_path: Path) -> None:
    (path,) = _model(tmp_path)
    os.truncate(path, 300)
    with pytest.raises(
        GGUFError,
        match=r"m\.gguf: truncated GGUF header \(file ends at byte 300\) in tensor 'blk\.3\.w'$",
    ):
        read_header(path)
    os.truncate(path, 40)  # the counts promise more than the 24 bytes left
    with pytest.raises(
        GGUFError,
        match=r"m\.gguf: truncated or corrupt GGUF header: the header says 4 tensors, more "
        r"than the rest of the file can hold \(24 bytes, at least 33 per item\)$",
    ):
        read_header(path)


def test_truncated_data(tmp_path: Path) -> None:
    (path,) = _model(tmp_path)
    os.truncate(path, path.stat().st_size - 100)
    with pytest.raises(GGUFError, match=r"m\.gguf: truncated: tensor 'blk\.3\.w' ends at byte"):
        inspect_model(path)


def test_unknown_type_id_names_the_tensor(tmp_path: Path) -> None:
    kv = {"llama.block_count": (1, U32)}
    (path,) = write_model(tmp_path / "u.gguf", "llama", kv, [Spec("blk.0.w", (32,), 77, 32)])
    with pytest.raises(
        GGUFError,
        match=r"u\.gguf: tensor 'blk\.0\.w' has unknown ggml type id "
        r"77 \(neither mainline nor ik_llama\.cpp defines it\)",
    ):
        inspect_model(path)


def test_missing_shard(tmp_path: Path) -> None:
    paths = _model(tmp_path, split_max_tensors=1)
    paths[2].unlink()
    with pytest.raises(
        GGUFError,
        match=r"m-00003-of-00004\.gguf: missing shard 3 of 4 "
        r"\(given m-00001-of-00004\.gguf\)",
    ):
        read_model(paths[0])


def test_shard_of_another_model(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    mine = _model(tmp_path / "a", split_max_tensors=2)
    extra = [*TENSORS, *(Spec(f"blk.{i}.v", (32,), 0, 128) for i in range(2))]
    other = write_model(tmp_path / "b" / "m.gguf", "llama", {}, extra, split_max_tensors=3)
    other[1].replace(mine[1])  # same file name and split.no, but 6 tensors in all, not 4
    with pytest.raises(
        GGUFError,
        match=r"m-00002-of-00002\.gguf: belongs to another model than "
        r"m-00001-of-00002\.gguf \(split\.tensors\.count 6, expected 4\)",
    ):
        read_model(mine[0])


def test_unsplit_file_with_split_count_but_odd_name(tmp_path: Path) -> None:
    paths = _model(tmp_path, split_max_tensors=2)
    odd = tmp_path / "renamed.gguf"
    paths[0].rename(odd)
    with pytest.raises(
        GGUFError,
        match=r"renamed\.gguf: has split\.count 2 but its name is "
        r"not NAME-0000N-of-0000M\.gguf",
    ):
        read_model(odd)


def test_not_a_file(tmp_path: Path) -> None:
    with pytest.raises(GGUFError, match=r"nope\.gguf: no such file"):
        read_header(tmp_path / "nope.gguf")


def test_key_names_are_the_gguf_packages() -> None:
    """hparams reads gguf's constants module on its own; it is the same table."""
    import gguf

    from layoutgen.models.hparams import gguf_keys

    keys = gguf_keys()
    assert keys.LLM.BLOCK_COUNT == gguf.Keys.LLM.BLOCK_COUNT == "{arch}.block_count"
    assert keys.Attention.SLIDING_WINDOW == gguf.Keys.Attention.SLIDING_WINDOW
