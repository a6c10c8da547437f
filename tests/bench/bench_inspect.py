"""Benchmark: ``layoutgen inspect`` on a sparse "320 GiB", 8-shard model vs gguf.GGUFReader.

Builds the model in a temporary directory (real headers by GGUFWriter, data
regions sparse), then runs each reader in its own subprocess and reports wall
time and peak RSS (``ru_maxrss`` of that subprocess).  Two variants: the
GLM-5.1-like model with ik_llama.cpp types (iq3_ks/iq4_ks), which GGUFReader
cannot read, and the same layout with mainline q4_0 experts, which it can.
Target for inspect: <= 0.3 s and <= 64 MB.  Run: ``.venv/bin/python
tests/bench/bench_inspect.py``.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from gguf import GGUFValueType  # noqa: E402

from gguf_fixtures import Spec, write_model  # noqa: E402

_MEASURE = """
import resource, subprocess, sys, time
t = time.perf_counter()
r = subprocess.run(sys.argv[1:], capture_output=True, text=True)
dt = time.perf_counter() - t
rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
err = (r.stderr.strip().splitlines() or [''])[-1][:90]
print(f"{r.returncode}\\t{dt:.2f}\\t{rss:.0f}\\t{err}")
"""
_READER = """
import sys
from gguf import GGUFReader
for p in sys.argv[1:]:
    GGUFReader(p)
"""


def build(directory: Path, ik: bool) -> list[Path]:
    """GLM-5.1's expert shapes (blk.3-78) and a 154880-token vocabulary, over 8 shards."""
    specs = []
    for i in range(79):
        if i < 3:
            specs.append(Spec(f"blk.{i}.ffn_up.weight", (6144, 12288), 8, 6144 * 12288 * 34 // 32))
            continue
        for part, shape in (
            ("gate", (6144, 2048, 256)),
            ("up", (6144, 2048, 256)),
            ("down", (2048, 6144, 256)),
        ):
            rows = shape[1] * shape[2]
            if ik:
                tid, row = (144, 8 * 136 + 4) if part == "down" else (156, 24 * 102 + 2)
            else:
                tid, row = 2, shape[0] // 32 * 18
            specs.append(Spec(f"blk.{i}.ffn_{part}_exps.weight", shape, tid, rows * row))
    kv = {
        "glm-dsa.block_count": (79, GGUFValueType.UINT32),
        # a vocabulary as large as GLM-5.1's: headers carry it, readers must skip it
        "tokenizer.ggml.tokens": ([f"tok{i}" for i in range(154880)], GGUFValueType.ARRAY),
    }
    return write_model(directory / "GLM.gguf", "glm-dsa", kv, specs, split_max_tensors=29)


def measure(argv: list[str]) -> tuple[int, float, float, str]:
    out = (
        subprocess.run(
            [sys.executable, "-c", _MEASURE, *argv], capture_output=True, text=True, check=True
        )
        .stdout.rstrip("\n")
        .split("\t", 3)
    )
    return int(out[0]), float(out[1]), float(out[2]), out[3] if len(out) > 3 else ""


def main() -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    from bytecode import cached

    cached()  # bytecode written, as issue 15 measures (tests/bench/bytecode.py)
    cli = [str(Path(sys.executable).parent / "layoutgen"), "inspect"]
    for ik in (True, False):
        with tempfile.TemporaryDirectory() as tmp:
            paths = build(Path(tmp), ik)
            size = sum(p.stat().st_size for p in paths) / 2**30
            label = f"{size:.0f}GiB/{len(paths)} shards, {'ik' if ik else 'mainline'} types"
            rc, dt, rss, err = measure([*cli, str(paths[0]), "-o", str(Path(tmp) / "p.yaml")])
            rrc, rdt, rrss, rerr = measure([sys.executable, "-c", _READER, *map(str, paths)])
            reader = (
                f"{rdt:.2f} s, {rrss:.0f} MB" if rrc == 0 else f"fails after {rdt:.2f} s: {rerr}"
            )
            status = "" if rc == 0 else f" [exit {rc}: {err}]"
            print(
                f"inspect {label}: {dt:.2f} s, {rss:.0f} MB peak RSS{status} (GGUFReader: {reader})"
            )


if __name__ == "__main__":
    main()
