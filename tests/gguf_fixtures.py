"""Real GGUF headers written by ``gguf.GGUFWriter``; data regions sparse (never written).

Tensor shapes are given in ggml order (ne0 first), as profiles write them;
``type_id`` may be any integer, including ik_llama.cpp ids mainline's enum
lacks (the writer packs it as a plain u32).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGUFValueType, GGUFWriter


@dataclass(frozen=True)
class Spec:
    name: str
    shape: tuple[int, ...]  # ggml order
    type_id: int
    nbytes: int


def pad(n: int, align: int = 32) -> int:
    return -(-n // align) * align


def write_model(
    path: Path,
    arch: str,
    kv: dict[str, tuple[Any, GGUFValueType]],
    tensors: list[Spec],
    *,
    split_max_tensors: int = 0,
) -> list[Path]:
    """Write header(s); each file is then extended to its full size without writing data."""
    writer = GGUFWriter(path, arch, split_max_tensors=split_max_tensors)
    for key, (value, vtype) in kv.items():
        sub = None
        if vtype is GGUFValueType.ARRAY:
            sub = (
                GGUFValueType.STRING
                if isinstance(value[0], str)
                else (GGUFValueType.BOOL if isinstance(value[0], bool) else GGUFValueType.INT32)
            )
        writer.add_key_value(key, value, vtype, sub_type=sub)
    for t in tensors:
        writer.add_tensor_info(
            t.name, tuple(reversed(t.shape)), np.dtype(np.float32), t.nbytes, raw_dtype=t.type_id
        )  # type: ignore[arg-type]
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    assert writer.fout is not None and writer.path is not None
    paths = writer.format_shard_names(writer.path)
    for fout, shard in zip(writer.fout, writer.tensors, strict=True):
        start = pad(fout.tell())
        fout.truncate(start + sum(pad(ti.nbytes) for ti in shard.values()))
        fout.close()
    writer.fout = None
    return paths
