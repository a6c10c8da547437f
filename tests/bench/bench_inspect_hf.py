"""Benchmark: ``layoutgen inspect DIR`` on a sparse ~440 GiB, 10-shard Hugging Face checkpoint.

The checkpoint is Qwen3-235B-A22B's layout in bf16 (94 layers of 128 experts
with their own gate/up/down tensors: ~37,000 tensors, 438 GiB) written as
real safetensors headers with sparse data regions, beside a config.json and
an index.  The baseline is ``inspect`` of the same model as an 8-shard GGUF
of the same size (experts fused per layer, as GGUF stores them; real headers
by GGUFWriter, data sparse).  Each runs in its own subprocess, the two
interleaved 11 times (a slow moment of the machine falls on both); reported
are the median wall time and the peak RSS (``ru_maxrss`` of that subprocess).
Target (issue 17): HF <= 1.5x the GGUF time and <= 64 MB.  Run:
``.venv/bin/python tests/bench/bench_inspect_hf.py``.
"""

from __future__ import annotations

import json
import statistics
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from gguf import GGUFValueType  # noqa: E402

from gguf_fixtures import Spec, write_model  # noqa: E402

RUNS = 11
LAYERS, EXPERTS, HIDDEN, FF, HEADS, KV, HEAD, VOCAB = 94, 128, 4096, 1536, 64, 4, 128, 151936
CONFIG = {
    "architectures": ["Qwen3MoeForCausalLM"],
    "model_type": "qwen3_moe",
    "hidden_size": HIDDEN,
    "intermediate_size": 12288,
    "moe_intermediate_size": FF,
    "num_hidden_layers": LAYERS,
    "num_attention_heads": HEADS,
    "num_key_value_heads": KV,
    "head_dim": HEAD,
    "num_experts": EXPERTS,
    "num_experts_per_tok": 8,
    "vocab_size": VOCAB,
    "max_position_embeddings": 40960,
    "torch_dtype": "bfloat16",
}
_MEASURE = """
import resource, subprocess, sys, time
t = time.perf_counter()
r = subprocess.run(sys.argv[1:], capture_output=True, text=True)
dt = time.perf_counter() - t
rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
err = (r.stderr.strip().splitlines() or [''])[-1][:90]
print(f"{r.returncode}\\t{dt:.3f}\\t{rss:.0f}\\t{err}")
"""


def hf_tensors() -> list[tuple[str, tuple[int, ...]]]:
    """(name, shape) of every bf16 tensor, in Qwen3-MoE's Hugging Face names."""
    out: list[tuple[str, tuple[int, ...]]] = [
        ("model.embed_tokens.weight", (VOCAB, HIDDEN)),
        ("lm_head.weight", (VOCAB, HIDDEN)),
        ("model.norm.weight", (HIDDEN,)),
    ]
    for i in range(LAYERS):
        p = f"model.layers.{i}"
        out += [
            (f"{p}.input_layernorm.weight", (HIDDEN,)),
            (f"{p}.post_attention_layernorm.weight", (HIDDEN,)),
            (f"{p}.self_attn.q_proj.weight", (HEADS * HEAD, HIDDEN)),
            (f"{p}.self_attn.k_proj.weight", (KV * HEAD, HIDDEN)),
            (f"{p}.self_attn.v_proj.weight", (KV * HEAD, HIDDEN)),
            (f"{p}.self_attn.o_proj.weight", (HIDDEN, HEADS * HEAD)),
            (f"{p}.self_attn.q_norm.weight", (HEAD,)),
            (f"{p}.self_attn.k_norm.weight", (HEAD,)),
            (f"{p}.mlp.gate.weight", (EXPERTS, HIDDEN)),
        ]
        for e in range(EXPERTS):
            for part, shape in (
                ("gate", (FF, HIDDEN)),
                ("up", (FF, HIDDEN)),
                ("down", (HIDDEN, FF)),
            ):
                out.append((f"{p}.mlp.experts.{e}.{part}_proj.weight", shape))
    return out


def build_hf(directory: Path, shards: int = 10) -> int:
    """config.json, the index and ``shards`` sparse safetensors files; returns total bytes."""
    tensors = hf_tensors()
    (directory / "config.json").write_text(json.dumps(CONFIG))
    per = -(-len(tensors) // shards)
    weight_map = {}
    total = 0
    for s in range(shards):
        name = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        header: dict[str, object] = {"__metadata__": {"format": "pt"}}
        offset = 0
        for tname, shape in tensors[s * per : (s + 1) * per]:
            size = 2
            for d in shape:
                size *= d
            header[tname] = {
                "dtype": "BF16",
                "shape": list(shape),
                "data_offsets": [offset, offset + size],
            }
            offset += size
            weight_map[tname] = name
        raw = json.dumps(header, separators=(",", ":")).encode()
        raw += b" " * (-len(raw) % 8)
        with (directory / name).open("wb") as f:
            f.write(struct.pack("<Q", len(raw)) + raw)
            f.truncate(8 + len(raw) + offset)
        total += 8 + len(raw) + offset
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (directory / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    return total


def build_gguf(directory: Path) -> list[Path]:
    """The same model as GGUF (bf16, type 30; experts fused per layer), over 8 shards."""

    def bf16(name: str, shape: tuple[int, ...]) -> Spec:
        size = 2
        for d in shape:
            size *= d
        return Spec(name, shape, 30, size)

    specs = [bf16("token_embd.weight", (HIDDEN, VOCAB)), bf16("output.weight", (HIDDEN, VOCAB))]
    specs.append(bf16("output_norm.weight", (HIDDEN,)))
    for i in range(LAYERS):
        p = f"blk.{i}"
        specs += [
            bf16(f"{p}.attn_norm.weight", (HIDDEN,)),
            bf16(f"{p}.ffn_norm.weight", (HIDDEN,)),
            bf16(f"{p}.attn_q.weight", (HIDDEN, HEADS * HEAD)),
            bf16(f"{p}.attn_k.weight", (HIDDEN, KV * HEAD)),
            bf16(f"{p}.attn_v.weight", (HIDDEN, KV * HEAD)),
            bf16(f"{p}.attn_output.weight", (HEADS * HEAD, HIDDEN)),
            bf16(f"{p}.attn_q_norm.weight", (HEAD,)),
            bf16(f"{p}.attn_k_norm.weight", (HEAD,)),
            bf16(f"{p}.ffn_gate_inp.weight", (HIDDEN, EXPERTS)),
            bf16(f"{p}.ffn_gate_exps.weight", (HIDDEN, FF, EXPERTS)),
            bf16(f"{p}.ffn_up_exps.weight", (HIDDEN, FF, EXPERTS)),
            bf16(f"{p}.ffn_down_exps.weight", (FF, HIDDEN, EXPERTS)),
        ]
    kv = {
        "qwen3moe.block_count": (LAYERS, GGUFValueType.UINT32),
        "qwen3moe.embedding_length": (HIDDEN, GGUFValueType.UINT32),
        "qwen3moe.attention.head_count": (HEADS, GGUFValueType.UINT32),
        "tokenizer.ggml.tokens": ([f"tok{i}" for i in range(VOCAB)], GGUFValueType.ARRAY),
    }
    per = -(-len(specs) // 8)
    return write_model(directory / "Q.gguf", "qwen3moe", kv, specs, split_max_tensors=per)


def _once(argv: list[str]) -> tuple[int, float, float, str]:
    out = subprocess.run(
        [sys.executable, "-c", _MEASURE, *argv], capture_output=True, text=True, check=True
    ).stdout.rstrip("\n")
    rc, dt, rss, *err = out.split("\t", 3)
    return int(rc), float(dt), float(rss), err[0] if err else ""


def measure(*argvs: list[str]) -> list[tuple[int, float, float, str]]:
    """Each command RUNS times, interleaved (a, b, a, b, ...) so that a slow moment of
    the machine falls on both: per command, the worst exit code, the median time, the
    peak RSS and the last error."""
    runs: list[list[tuple[int, float, float, str]]] = [[] for _ in argvs]
    for _ in range(RUNS):
        for i, argv in enumerate(argvs):
            runs[i].append(_once(argv))
    return [
        (
            max(r[0] for r in rs),
            statistics.median(r[1] for r in rs),
            max(r[2] for r in rs),
            rs[-1][3],
        )
        for rs in runs
    ]


def main() -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    from bytecode import cached

    cached()  # bytecode written, as issue 15 measures (tests/bench/bytecode.py)
    cli = [str(Path(sys.executable).parent / "layoutgen"), "inspect"]
    with tempfile.TemporaryDirectory() as tmp:
        hf, gg = Path(tmp) / "hf", Path(tmp) / "gguf"
        hf.mkdir()
        gg.mkdir()
        hf_size = build_hf(hf) / 2**30
        paths = build_gguf(gg)
        gguf_size = sum(p.stat().st_size for p in paths) / 2**30
        (rc, dt, rss, err), (grc, gdt, grss, gerr) = measure(
            [*cli, str(hf), "-o", str(Path(tmp) / "hf.yaml")],
            [*cli, str(paths[0]), "-o", str(Path(tmp) / "g.yaml")],
        )
        status = "" if rc == 0 else f" [exit {rc}: {err}]"
        gstatus = "" if grc == 0 else f" [exit {grc}: {gerr}]"
        print(
            f"inspect DIR {hf_size:.0f}GiB/10 safetensors shards, {len(hf_tensors())} tensors: "
            f"{dt:.2f} s, {rss:.0f} MB peak RSS{status}; GGUF {gguf_size:.0f}GiB/{len(paths)} "
            f"shards: {gdt:.2f} s, {grss:.0f} MB{gstatus}; ratio {dt / gdt:.2f}x "
            "(target <= 1.5x, <= 64 MB)"
        )


if __name__ == "__main__":
    main()
