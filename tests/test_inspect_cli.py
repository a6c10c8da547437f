"""``layoutgen inspect``: GGUF headers in, a profile that lists exactly the writer's tensors."""

from __future__ import annotations

from pathlib import Path

import pytest
from gguf import GGUFValueType
from typer.testing import CliRunner

from layoutgen.cli import app
from layoutgen.models.inventory import inspect_model
from layoutgen.models.profile import load_profile

from gguf_fixtures import Spec, write_model

U32, ARR = GGUFValueType.UINT32, GGUFValueType.ARRAY

# Expected bytes are computed from block sizes read in the sources, not by layoutgen:
# q4_0 (id 2): 18 B per 32; q6_K (14): 210 B per 256; ik iq3_ks (156): 102 B per 256 + 2 B
# per row; ik iq4_ks (144): 136 B per 256 + 4 B per row; f32 (0): 4 B.
LLAMA = [
    Spec("token_embd.weight", (256, 1000), 14, 1000 * 210),
    Spec("blk.0.attn_norm.weight", (256,), 0, 1024),
    Spec("blk.0.attn_q.weight", (256, 256), 2, 256 * 8 * 18),
    Spec("blk.1.attn_norm.weight", (256,), 0, 1024),
    Spec("blk.1.attn_q.weight", (256, 256), 2, 256 * 8 * 18),
    Spec("blk.2.attn_norm.weight", (256,), 0, 1024),
    Spec("blk.2.attn_q.weight", (256, 256), 14, 256 * 210),
    Spec("output.weight", (256, 1000), 14, 1000 * 210),
]


def _kv(arch: str, layers: int, **extra: tuple[object, GGUFValueType]) -> dict:
    kv = {
        f"{arch}.block_count": (layers, U32),
        f"{arch}.embedding_length": (256, U32),
        "general.name": ("test model", GGUFValueType.STRING),
    }
    kv.update(extra)
    return kv


def test_inspect_lists_the_writers_tensors_byte_for_byte(tmp_path: Path) -> None:
    (path,) = write_model(tmp_path / "m.gguf", "llama", _kv("llama", 3), LLAMA)
    out = tmp_path / "m.yaml"
    result = CliRunner().invoke(app, ["inspect", str(path), "-o", str(out)])
    assert result.exit_code == 0, result.output
    profile = load_profile(out)
    got = sorted((t.name, t.shape, t.nbytes) for t in profile.tensors())
    assert got == sorted((s.name, s.shape, s.nbytes) for s in LLAMA)
    assert profile.arch == "llama" and profile.hparams.n_layer == 3
    assert profile.files[0].size == path.stat().st_size


def test_inspect_prints_to_stdout(tmp_path: Path) -> None:
    (path,) = write_model(tmp_path / "m.gguf", "llama", _kv("llama", 3), LLAMA)
    result = CliRunner().invoke(app, ["inspect", str(path)])
    assert result.exit_code == 0
    assert '"blk.{0..1}.attn_q.weight", type: "q4_0"' in result.stdout


def test_ik_types_and_hparams_of_a_split_glm_like_model(tmp_path: Path) -> None:
    tensors = [
        Spec(f"blk.{i}.ffn_gate_exps.weight", (512, 64, 8), 156, 64 * 8 * (2 * 102 + 2))
        for i in range(4)
    ]
    tensors += [
        Spec(f"blk.{i}.ffn_down_exps.weight", (512, 512, 8), 144, 4096 * (276)) for i in range(4)
    ]
    kv = _kv(
        "glm-dsa",
        4,
        **{
            "glm-dsa.attention.kv_lora_rank": (512, U32),
            "glm-dsa.rope.dimension_count": (64, U32),
            "glm-dsa.leading_dense_block_count": (3, U32),
        },
    )
    paths = write_model(tmp_path / "glm.gguf", "glm-dsa", kv, tensors, split_max_tensors=3)
    assert [p.name for p in paths][-1] == "glm-00003-of-00003.gguf"
    profile = inspect_model(paths[1])  # any shard finds the others
    assert [f.name for f in profile.files] == [p.name for p in paths]
    assert sorted((t.name, t.type, t.nbytes) for t in profile.tensors()) == sorted(
        (s.name, "iq3_ks" if s.type_id == 156 else "iq4_ks", s.nbytes) for s in tensors
    )
    hp = profile.hparams
    assert (hp.kv_lora_rank, hp.rope_dim, hp.leading_dense) == (512, 64, 3)


def test_gemma4_bool_pattern_and_qwen3next_interval(tmp_path: Path) -> None:
    pattern = [True, True, True, True, True, False] * 2
    kv = _kv(
        "gemma4",
        12,
        **{
            "gemma4.attention.sliding_window": (1024, U32),
            "gemma4.attention.sliding_window_pattern": (pattern, ARR),
            "gemma4.attention.head_count_kv": ([8] * 5 + [2], ARR),
        },
    )
    (g,) = write_model(tmp_path / "g.gguf", "gemma4", kv, LLAMA[:2])
    hp = inspect_model(g).hparams
    assert hp.swa_layers == (0, 1, 2, 3, 4, 6, 7, 8, 9, 10)
    assert hp.n_head_kv == (8, 8, 8, 8, 8, 2)
    kv = _kv("qwen3next", 8, **{"qwen3next.full_attention_interval": (4, U32)})
    (q,) = write_model(tmp_path / "q.gguf", "qwen3next", kv, LLAMA[:2])
    assert inspect_model(q).hparams.recurrent_layers == (0, 1, 2, 4, 5, 6)


@pytest.mark.slow
def test_sparse_320_gib_eight_shard_model_inspects_from_headers_only(tmp_path: Path) -> None:
    # 76 expert layers x 4088 MiB (seed 001's per-layer experts), spread over 8 shards
    gate = 6144 // 256 * 102 + 2
    tensors = []
    for i in range(3, 79):
        tensors += [
            Spec(f"blk.{i}.ffn_gate_exps.weight", (6144, 2048, 256), 156, gate * 2048 * 256),
            Spec(f"blk.{i}.ffn_up_exps.weight", (6144, 2048, 256), 156, gate * 2048 * 256),
            Spec(
                f"blk.{i}.ffn_down_exps.weight", (2048, 6144, 256), 144, (8 * 136 + 4) * 6144 * 256
            ),
        ]
    paths = write_model(
        tmp_path / "GLM.gguf", "glm-dsa", _kv("glm-dsa", 79), tensors, split_max_tensors=29
    )
    assert len(paths) == 8
    # Speed and memory are measured by `make bench` (tests/bench/bench_inspect.py).
    profile = inspect_model(paths[0])
    assert profile.total_bytes == 76 * 4088 * 2**20
    assert sum(p.stat().st_blocks for p in paths) * 512 < 2**20  # nothing was written


def test_broken_models_are_one_line_errors_with_exit_1(tmp_path: Path) -> None:
    from conftest import run_cli

    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"FUGG" + bytes(60))
    kv = _kv("llama", 4)
    shards = write_model(tmp_path / "s.gguf", "llama", kv, LLAMA, split_max_tensors=2)
    shards[-1].unlink()
    for target, name in ((bad, "bad.gguf"), (shards[0], shards[-1].name)):
        result = run_cli(["inspect", str(target)])
        assert result.code == 1
        assert result.stdout == ""
        assert result.stderr.count("\n") == 1 and name in result.stderr
        assert result.stderr.startswith("error: ") and "Traceback" not in result.stderr


def _prefixes(shards: list[Path], into: Path, length: int) -> list[Path]:
    """What `curl -r 0-(length-1)` of each shard leaves: its first bytes, same name."""
    into.mkdir()
    out = []
    for shard in shards:
        with shard.open("rb") as f:
            (into / shard.name).write_bytes(f.read(length))
        out.append(into / shard.name)
    return out


def test_header_only_reads_prefixes_of_shards_as_the_whole_files(tmp_path: Path) -> None:
    """Issue 15 item 5: a model not yet downloaded, profiled from the first bytes of
    each shard.  The profile equals the one of the full files, sizes included."""
    kv = _kv("llama", 3, **{"tokenizer.ggml.tokens": (["tok"] * 3000, ARR)})
    big = [  # each shard far longer than its prefix (the files are sparse)
        Spec(t.name, (t.shape[0], t.shape[-1] * 1000), t.type_id, t.nbytes * 1000)
        if len(t.shape) == 2
        else t
        for t in LLAMA
    ]
    shards = write_model(tmp_path / "m.gguf", "llama", kv, big, split_max_tensors=3)
    assert len(shards) == 3
    full = inspect_model(shards[0])
    heads = _prefixes(shards, tmp_path / "heads", 64 << 10)
    assert all(p.stat().st_size < s.stat().st_size for p, s in zip(heads, shards, strict=True))
    out = tmp_path / "m.yaml"
    result = CliRunner().invoke(app, ["inspect", "--header-only", str(heads[1]), "-o", str(out)])
    assert result.exit_code == 0, result.output
    got = load_profile(out)
    assert list(got.tensors()) == list(full.tensors()) and got.hparams == full.hparams
    assert [(f.name, f.size) for f in got.files] == [(s.name, s.stat().st_size) for s in shards]
    assert "--header-only" in got.source

    # without the flag, a prefix is what it looks like: a truncated file
    result = CliRunner().invoke(app, ["inspect", str(heads[0])])
    assert result.exit_code == 1 and "truncated" in result.output


def test_header_only_asks_for_a_longer_prefix_when_the_header_does_not_fit(
    tmp_path: Path,
) -> None:
    kv = _kv("llama", 3, **{"tokenizer.ggml.tokens": (["token"] * 20000, ARR)})
    (path,) = write_model(tmp_path / "m.gguf", "llama", kv, LLAMA)
    (head,) = _prefixes([path], tmp_path / "heads", 100_000)
    result = CliRunner().invoke(app, ["inspect", "--header-only", str(head)])
    assert result.exit_code == 1
    assert result.output.startswith(f"error: {head}: the header continues past the 100,000 bytes")
    assert "fetch a longer prefix, e.g. the first 16,777,216 bytes" in result.output
    assert "Traceback" not in result.output
