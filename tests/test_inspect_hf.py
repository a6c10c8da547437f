"""``layoutgen inspect DIR``: Hugging Face checkpoints (config.json + safetensors) to profiles.

Checkpoints are written by the ``safetensors`` package itself (``serialize_file``
with zero-filled buffers: real headers, real layouts) beside config.json files
with the real key names of each architecture, at small sizes.  Expected names,
types, shapes and bytes are computed here from what was written (bytes per
element from this file's own table, not from layoutgen), and every written
profile is loaded back through ``load_profile``, which validates it.
"""

from __future__ import annotations

import ctypes
import json
import os
import struct
from pathlib import Path
from typing import Any

import pytest
from safetensors import TensorSpec, safe_open, serialize_file

from layoutgen.models import hf_checkpoint, quants
from layoutgen.models.hf_checkpoint import inspect_dir
from layoutgen.models.profile import Profile, dump_profile, load_profile
from layoutgen.models.safetensors_header import SafetensorsError

from conftest import run_cli

#: torch dtype name (what serialize_file takes) -> (profile type, bytes per element)
DTYPES = {
    "bfloat16": ("bf16", 2),
    "float16": ("f16", 2),
    "float32": ("f32", 4),
    "float8_e4m3fn": ("f8_e4m3", 1),
    "float8_e8m0fnu": ("f8_e8m0", 1),
    "uint8": ("u8", 1),
    "int8": ("i8", 1),
    "int32": ("i32", 4),
    "int64": ("i64", 8),
    "bool": ("bool", 1),
}
Tensors = dict[str, tuple[str, tuple[int, ...]]]


def nbytes(dtype: str, shape: tuple[int, ...]) -> int:
    n = DTYPES[dtype][1]
    for d in shape:
        n *= d
    return n


def save(path: Path, tensors: Tensors) -> None:
    """A real safetensors file of zeros, written by the safetensors package."""
    biggest = max([nbytes(dt, shape) for dt, shape in tensors.values()] + [1])
    buf = ctypes.create_string_buffer(biggest)
    specs = {
        name: TensorSpec(
            dtype=dt, shape=list(shape), data_ptr=ctypes.addressof(buf), data_len=nbytes(dt, shape)
        )
        for name, (dt, shape) in tensors.items()
    }
    serialize_file(specs, str(path), metadata={"format": "pt"})


def checkpoint(d: Path, config: dict[str, Any], tensors: Tensors, shards: int = 1) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(config, indent=2))
    if shards == 1:
        save(d / "model.safetensors", tensors)
        return d
    names = list(tensors)
    weight_map = {}
    for s in range(shards):
        file = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: tensors[n] for n in names[s::shards]}
        save(d / file, part)
        weight_map.update(dict.fromkeys(part, file))
    index = {"metadata": {"total_size": 0}, "weight_map": weight_map}
    (d / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    return d


def expected(tensors: Tensors, prefix: str = "model") -> set[tuple[str, str, tuple[int, ...], int]]:
    head = f"{prefix}.layers."
    out = set()
    for name, (dt, shape) in tensors.items():
        shown = "blk." + name[len(head) :] if name.startswith(head) else name
        out.add((shown, DTYPES[dt][0], shape, nbytes(dt, shape)))
    return out


def inspect(d: Path) -> Profile:
    out = d.parent / f"{d.name}.yaml"
    result = run_cli(["inspect", str(d), "-o", str(out)])
    assert (result.code, result.stderr) == (0, ""), result
    return load_profile(out)


def got(profile: Profile) -> set[tuple[str, str, tuple[int, ...], int]]:
    found = [(t.name, t.type, t.shape, t.nbytes) for t in profile.tensors()]
    assert len(found) == len(set(found))
    return set(found)


def hp(profile: Profile) -> dict[str, Any]:
    return profile.hparams.model_dump(exclude_none=True)


# ---------------------------------------------------------------- architectures


def attention(p: str, heads: int, kv: int, head: int, hidden: int, dt: str = "bfloat16") -> Tensors:
    return {
        f"{p}.input_layernorm.weight": (dt, (hidden,)),
        f"{p}.post_attention_layernorm.weight": (dt, (hidden,)),
        f"{p}.self_attn.q_proj.weight": (dt, (heads * head, hidden)),
        f"{p}.self_attn.k_proj.weight": (dt, (kv * head, hidden)),
        f"{p}.self_attn.v_proj.weight": (dt, (kv * head, hidden)),
        f"{p}.self_attn.o_proj.weight": (dt, (hidden, heads * head)),
    }


def dense_mlp(p: str, hidden: int, ff: int, dt: str = "bfloat16") -> Tensors:
    return {
        f"{p}.mlp.gate_proj.weight": (dt, (ff, hidden)),
        f"{p}.mlp.up_proj.weight": (dt, (ff, hidden)),
        f"{p}.mlp.down_proj.weight": (dt, (hidden, ff)),
    }


def experts(p: str, n: int, hidden: int, ff: int, dt: str = "bfloat16") -> Tensors:
    out: Tensors = {f"{p}.mlp.gate.weight": ("bfloat16", (n, hidden))}
    for e in range(n):
        out.update(dense_mlp(f"{p}.mlp.experts.{e}", hidden, ff, dt))
        out = {k.replace(f"experts.{e}.mlp.", f"experts.{e}."): v for k, v in out.items()}
    return out


def ends(hidden: int, vocab: int, prefix: str = "model") -> Tensors:
    return {
        f"{prefix}.embed_tokens.weight": ("bfloat16", (vocab, hidden)),
        f"{prefix}.norm.weight": ("bfloat16", (hidden,)),
        "lm_head.weight": ("bfloat16", (vocab, hidden)),
    }


LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 160,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 3,
    "vocab_size": 128,
    "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-05,
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}


def llama_tensors() -> Tensors:
    t = ends(64, 128)
    for i in range(3):
        t |= attention(f"model.layers.{i}", 4, 2, 16, 64) | dense_mlp(f"model.layers.{i}", 64, 160)
    return t


def test_llama_single_file(tmp_path: Path) -> None:
    tensors = llama_tensors()
    profile = inspect(checkpoint(tmp_path / "Llama-3-tiny", LLAMA, tensors))
    assert got(profile) == expected(tensors)
    assert profile.format == "safetensors" and profile.arch == "llama"
    assert profile.name == "Llama-3-tiny"
    assert hp(profile) == {
        "n_layer": 3,
        "n_embd": 64,
        "n_head": 4,
        "n_head_kv": 2,
        "key_length": 16,  # 64 / 4: no head_dim in a Llama config
        "value_length": 16,
        "n_ff": 160,
        "vocab": 128,
        "n_ctx_train": 8192,
        "rope_positions": 8192,  # rope_theta given: vLLM's rotary cache, one row a position
        "dtype": "bfloat16",
    }
    size = (tmp_path / "Llama-3-tiny" / "model.safetensors").stat().st_size
    assert [(f.name, f.size) for f in profile.files] == [("model.safetensors", size)]
    assert "blk.N.<rest> is the checkpoint's model.layers.N.<rest>" in profile.source
    assert "head_dim absent" in profile.source


def test_the_profile_folds_layers_and_reads_like_a_review(tmp_path: Path) -> None:
    d = checkpoint(tmp_path / "m", LLAMA, llama_tensors())
    result = run_cli(["inspect", str(d)])
    assert result.code == 0
    lines = result.stdout.splitlines()
    assert lines[:5] == [
        "# yaml-language-server: $schema=../schema/profile.schema.json",
        "schema: 1",
        'name: "m"',
        'arch: "llama"',
        "format: safetensors",
    ]
    assert (
        '  - {name: "blk.{0..2}.self_attn.q_proj.weight", type: "bf16", shape: [64, 64], '
        "bytes: 8192}" in lines
    )
    # natural order: blk.* by layer set, then the checkpoint's own names
    names = [line.split('"')[1] for line in lines if line.startswith("  - {name:")]
    assert names[-3:] == ["lm_head.weight", "model.embed_tokens.weight", "model.norm.weight"]
    assert run_cli(["inspect", str(d)]).stdout == result.stdout  # deterministic


QWEN3_MOE = {
    "architectures": ["Qwen3MoeForCausalLM"],
    "model_type": "qwen3_moe",
    "hidden_size": 64,
    "intermediate_size": 192,
    "moe_intermediate_size": 32,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "num_experts": 8,
    "num_experts_per_tok": 2,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "norm_topk_prob": True,
    "use_sliding_window": False,
    "sliding_window": None,
    "max_window_layers": 4,
    "vocab_size": 256,
    "max_position_embeddings": 40960,
    "torch_dtype": "bfloat16",
}


def test_qwen3_moe_sharded_with_an_index(tmp_path: Path) -> None:
    tensors = ends(64, 256)
    for i in range(4):
        p = f"model.layers.{i}"
        tensors |= attention(p, 4, 2, 32, 64) | experts(p, 8, 64, 32)
        tensors[f"{p}.self_attn.q_norm.weight"] = ("bfloat16", (32,))
    d = checkpoint(tmp_path / "Qwen3-tiny", QWEN3_MOE, tensors, shards=3)
    profile = inspect(d)
    assert got(profile) == expected(tensors)
    assert [f.name for f in profile.files] == [
        f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)
    ]
    assert [f.size for f in profile.files] == [(d / f.name).stat().st_size for f in profile.files]
    h = hp(profile)
    assert (h["n_layer"], h["n_expert"], h["n_expert_used"], h["expert_ff"]) == (4, 8, 2, 32)
    assert (h["key_length"], h["value_length"], h["n_ff"]) == (32, 32, 192)
    assert "swa_layers" not in h and "sliding_window" not in h
    assert any(e.name == "blk.{0..3}.mlp.experts.7.down_proj.weight" for e in profile.entries)


DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "deepseek_v3",
    "hidden_size": 128,
    "intermediate_size": 256,
    "moe_intermediate_size": 64,
    "num_hidden_layers": 3,
    "num_nextn_predict_layers": 1,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "n_routed_experts": 4,
    "n_shared_experts": 1,
    "num_experts_per_tok": 2,
    "first_k_dense_replace": 1,
    "q_lora_rank": 96,
    "kv_lora_rank": 64,
    "qk_nope_head_dim": 32,
    "qk_rope_head_dim": 16,
    "v_head_dim": 32,
    "vocab_size": 512,
    "max_position_embeddings": 163840,
    "quantization_config": {
        "activation_scheme": "dynamic",
        "fmt": "e4m3",
        "quant_method": "fp8",
        "weight_block_size": [128, 128],
    },
    "torch_dtype": "bfloat16",
}


def fp8(name: str, shape: tuple[int, int]) -> Tensors:
    """An fp8 weight and its f32 block scales (128 x 128 blocks), as DeepSeek-V3 stores them."""
    blocks = (-(-shape[0] // 128), -(-shape[1] // 128))
    return {
        f"{name}.weight": ("float8_e4m3fn", shape),
        f"{name}.weight_scale_inv": ("float32", blocks),
    }


def test_deepseek_v3_mla_fp8_and_its_mtp_layer(tmp_path: Path) -> None:
    tensors = ends(128, 512)
    for i in range(4):  # layer 3 is the MTP layer (num_nextn_predict_layers)
        p = f"model.layers.{i}"
        tensors[f"{p}.input_layernorm.weight"] = ("bfloat16", (128,))
        tensors[f"{p}.self_attn.kv_a_layernorm.weight"] = ("bfloat16", (64,))
        tensors |= fp8(f"{p}.self_attn.q_a_proj", (96, 128))
        tensors |= fp8(f"{p}.self_attn.q_b_proj", (4 * 48, 96))
        tensors |= fp8(f"{p}.self_attn.kv_a_proj_with_mqa", (64 + 16, 128))
        tensors |= fp8(f"{p}.self_attn.kv_b_proj", (4 * (32 + 32), 64))
        tensors |= fp8(f"{p}.self_attn.o_proj", (128, 4 * 32))
        if i == 0:
            for part in ("gate", "up"):
                tensors |= fp8(f"{p}.mlp.{part}_proj", (256, 128))
            tensors |= fp8(f"{p}.mlp.down_proj", (128, 256))
            continue
        tensors[f"{p}.mlp.gate.weight"] = ("bfloat16", (4, 128))
        tensors[f"{p}.mlp.gate.e_score_correction_bias"] = ("float32", (4,))
        for e in [*(f"experts.{k}" for k in range(4)), "shared_experts"]:
            for part in ("gate", "up"):
                tensors |= fp8(f"{p}.mlp.{e}.{part}_proj", (64, 128))
            tensors |= fp8(f"{p}.mlp.{e}.down_proj", (128, 64))
    tensors["model.layers.3.eh_proj.weight"] = ("bfloat16", (128, 256))
    tensors["model.layers.3.enorm.weight"] = ("bfloat16", (128,))
    tensors["model.layers.3.shared_head.head.weight"] = ("bfloat16", (512, 128))
    profile = inspect(checkpoint(tmp_path / "DeepSeek-V3-tiny", DEEPSEEK_V3, tensors, shards=2))
    assert got(profile) == expected(tensors)
    h = hp(profile)
    assert (h["n_layer"], h["nextn_layers"], h["leading_dense"]) == (4, 1, 1)
    assert (h["q_lora_rank"], h["kv_lora_rank"], h["rope_dim"]) == (96, 64, 16)
    assert (h["key_length"], h["value_length"]) == (48, 32)
    assert (h["n_expert"], h["n_expert_shared"], h["n_expert_used"], h["expert_ff"]) == (
        4,
        1,
        2,
        64,
    )
    assert (h["quantization"], h["dtype"]) == ("fp8", "bfloat16")
    by_name = {t.name: t for t in profile.tensors()}
    scale = by_name["blk.2.mlp.experts.3.down_proj.weight_scale_inv"]
    assert (scale.type, scale.shape, scale.nbytes) == ("f32", (1, 1), 4)


GLM45 = {
    "architectures": ["Glm4MoeForCausalLM"],
    "model_type": "glm4_moe",
    "hidden_size": 96,
    "intermediate_size": 192,
    "moe_intermediate_size": 48,
    "num_hidden_layers": 3,
    "num_nextn_predict_layers": 1,
    "num_attention_heads": 6,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "partial_rotary_factor": 0.5,
    "n_routed_experts": 4,
    "n_shared_experts": 1,
    "num_experts_per_tok": 2,
    "first_k_dense_replace": 1,
    "use_qk_norm": False,
    "vocab_size": 300,
    "max_position_embeddings": 131072,
    "torch_dtype": "bfloat16",
}


def test_glm45_without_its_mtp_layer(tmp_path: Path) -> None:
    """A checkpoint that dropped the MTP layer: nextn_layers 0, n_layer num_hidden_layers."""
    tensors = ends(96, 300)
    for i in range(3):
        p = f"model.layers.{i}"
        tensors |= attention(p, 6, 2, 32, 96)
        tensors |= dense_mlp(p, 96, 192) if i == 0 else experts(p, 4, 96, 48)
    profile = inspect(checkpoint(tmp_path / "GLM-4.5-tiny", GLM45, tensors))
    assert got(profile) == expected(tensors)
    h = hp(profile)
    assert (h["n_layer"], h["nextn_layers"], h["leading_dense"], h["n_expert_shared"]) == (
        3,
        0,
        1,
        1,
    )
    assert (h["n_head"], h["n_head_kv"], h["key_length"]) == (6, 2, 32)


GPT_OSS = {
    "architectures": ["GptOssForCausalLM"],
    "model_type": "gpt_oss",
    "hidden_size": 64,
    "intermediate_size": 64,
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "num_local_experts": 4,
    "num_experts_per_tok": 2,
    "experts_per_token": 2,
    "sliding_window": 128,
    "layer_types": ["sliding_attention", "full_attention"] * 2,
    "vocab_size": 400,
    "max_position_embeddings": 131072,
    "quantization_config": {
        "modules_to_not_convert": ["model.layers.*.self_attn"],
        "quant_method": "mxfp4",
    },
    "torch_dtype": "bfloat16",
}


def test_gpt_oss_mxfp4_blocks_and_alternating_windows(tmp_path: Path) -> None:
    tensors = ends(64, 400)
    for i in range(4):
        p = f"model.layers.{i}"
        tensors |= attention(p, 8, 2, 16, 64)
        tensors[f"{p}.self_attn.sinks"] = ("bfloat16", (8,))
        tensors[f"{p}.mlp.router.weight"] = ("bfloat16", (4, 64))
        tensors[f"{p}.mlp.router.bias"] = ("bfloat16", (4,))
        # MXFP4: 32 elements per block, 16 bytes of nibbles and one e8m0 scale each
        tensors[f"{p}.mlp.experts.gate_up_proj_blocks"] = ("uint8", (4, 128, 2, 16))
        tensors[f"{p}.mlp.experts.gate_up_proj_scales"] = ("uint8", (4, 128, 2))
        tensors[f"{p}.mlp.experts.gate_up_proj_bias"] = ("bfloat16", (4, 128))
        tensors[f"{p}.mlp.experts.down_proj_blocks"] = ("uint8", (4, 64, 2, 16))
        tensors[f"{p}.mlp.experts.down_proj_scales"] = ("uint8", (4, 64, 2))
        tensors[f"{p}.mlp.experts.down_proj_bias"] = ("bfloat16", (4, 64))
    profile = inspect(checkpoint(tmp_path / "gpt-oss-tiny", GPT_OSS, tensors))
    assert got(profile) == expected(tensors)
    h = hp(profile)
    assert (h["swa_layers"], h["sliding_window"]) == ((0, 2), 128)
    assert (h["n_expert"], h["n_expert_used"], h["expert_ff"]) == (4, 2, 64)
    assert h["quantization"] == "mxfp4"
    assert "moe_intermediate_size absent: expert_ff = intermediate_size" in profile.source


GEMMA3 = {
    "architectures": ["Gemma3ForConditionalGeneration"],
    "model_type": "gemma3",
    "boi_token_index": 255999,
    "mm_tokens_per_image": 256,
    "text_config": {
        "hidden_size": 64,
        "intermediate_size": 256,
        "model_type": "gemma3_text",
        "num_hidden_layers": 7,
        "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
        "sliding_window": 512,
    },
    "vision_config": {
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "model_type": "siglip_vision_model",
    },
    "torch_dtype": "bfloat16",
}


def test_gemma3_text_config_defaults_and_a_vision_tower(tmp_path: Path) -> None:
    """Layers of language_model.model fold; the vision tower's keep their names."""
    prefix = "language_model.model"
    tensors = ends(64, 1000, prefix)
    tensors["lm_head.weight"] = ("bfloat16", (1000, 64))
    for i in range(7):
        tensors |= attention(f"{prefix}.layers.{i}", 8, 4, 256, 64)
    for i in range(2):
        v = f"vision_tower.vision_model.encoder.layers.{i}"
        tensors[f"{v}.self_attn.q_proj.weight"] = ("bfloat16", (32, 32))
    tensors["vision_tower.vision_model.embeddings.patch_embedding.weight"] = (
        "bfloat16",
        (32, 3, 14, 14),
    )
    tensors["multi_modal_projector.mm_input_projection_weight"] = ("bfloat16", (32, 64))
    profile = inspect(checkpoint(tmp_path / "gemma-3-tiny", GEMMA3, tensors))
    assert got(profile) == expected(tensors, prefix)
    h = hp(profile)
    assert (h["n_layer"], h["n_head"], h["n_head_kv"], h["key_length"]) == (7, 8, 4, 256)
    assert (h["swa_layers"], h["sliding_window"]) == ((0, 1, 2, 3, 4, 6), 512)
    assert (h["vocab"], h["n_ctx_train"]) == (262208, 131072)
    assert "num_attention_heads 8 (transformers' default for gemma3_text)" in profile.source
    assert "blk.N.<rest> is the checkpoint's language_model.model.layers.N.<rest>" in profile.source
    assert profile.arch == "gemma3"


QWEN3_NEXT = {
    "architectures": ["Qwen3NextForCausalLM"],
    "model_type": "qwen3_next",
    "hidden_size": 64,
    "intermediate_size": 128,
    "moe_intermediate_size": 32,
    "shared_expert_intermediate_size": 32,
    "num_hidden_layers": 4,
    "full_attention_interval": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 16,
    "linear_value_head_dim": 16,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "num_experts": 4,
    "num_experts_per_tok": 2,
    "partial_rotary_factor": 0.25,
    "vocab_size": 500,
    "max_position_embeddings": 262144,
    "torch_dtype": "bfloat16",
}


def test_qwen3_next_linear_attention_and_mtp_names(tmp_path: Path) -> None:
    tensors = ends(64, 500)
    for i in range(4):
        p = f"model.layers.{i}"
        if i == 3:
            tensors |= attention(p, 4, 2, 64, 64)
        else:
            tensors[f"{p}.linear_attn.in_proj_qkvz.weight"] = (
                "bfloat16",
                (2 * 16 * 2 + 2 * 64, 64),
            )
            tensors[f"{p}.linear_attn.conv1d.weight"] = ("bfloat16", (2 * 16 * 2 + 64, 1, 4))
            tensors[f"{p}.linear_attn.A_log"] = ("float32", (4,))
        tensors |= experts(p, 4, 64, 32)
    tensors["mtp.fc.weight"] = ("bfloat16", (64, 128))
    tensors |= attention("mtp.layers.0", 4, 2, 64, 64)
    profile = inspect(checkpoint(tmp_path / "Qwen3-Next-tiny", QWEN3_NEXT, tensors, shards=2))
    assert got(profile) == expected(tensors)
    h = hp(profile)
    assert h["recurrent_layers"] == (0, 1, 2)
    assert (h["ssm_conv_kernel"], h["ssm_state_size"], h["ssm_inner_size"]) == (4, 16, 64)
    assert (h["ssm_group_count"], h["ssm_time_step_rank"], h["expert_shared_ff"]) == (2, 4, 32)
    assert "nextn_layers" not in h  # no num_nextn_predict_layers: mtp.* keep their names
    assert "mtp.layers.0.self_attn.q_proj.weight" in {t.name for t in profile.tensors()}


@pytest.mark.parametrize(
    ("extra", "swa"),
    [
        ({"model_type": "mistral", "sliding_window": 4096}, (0, 1, 2)),
        ({"model_type": "mistral", "sliding_window": None}, None),
        (
            {
                "model_type": "qwen2",
                "use_sliding_window": True,
                "sliding_window": 4096,
                "max_window_layers": 1,
            },
            (1, 2),
        ),
        ({"model_type": "qwen2", "use_sliding_window": False, "sliding_window": 4096}, None),
        (
            {
                "model_type": "llama",
                "sliding_window": 64,
                "layer_types": ["full_attention", "sliding_attention", "full_attention"],
            },
            (1,),
        ),
    ],
)
def test_sliding_window_rules(
    tmp_path: Path, extra: dict[str, Any], swa: tuple[int, ...] | None
) -> None:
    profile = inspect(checkpoint(tmp_path / "m", LLAMA | extra, llama_tensors()))
    assert profile.hparams.swa_layers == swa
    assert profile.hparams.sliding_window == (extra["sliding_window"] if swa else None)


def test_an_unknown_architecture_is_written_with_what_its_config_says(tmp_path: Path) -> None:
    """Deterministic output, no warnings: source says which keys were missing, and
    validate asks for what the memory model needs (here the attention heads)."""
    config = {"model_type": "futurenet", "num_hidden_layers": 3, "hidden_size": 64}
    d = checkpoint(tmp_path / "m", config, llama_tensors())
    result = run_cli(["inspect", str(d), "-o", str(tmp_path / "m.yaml")])
    assert (result.code, result.stderr) == (0, "")
    text = (tmp_path / "m.yaml").read_text()
    assert "hparams:\n  n_layer: 3\n  n_embd: 64\n  key_length: 0" not in text
    assert (
        "  Not in config.json: head_dim, intermediate_size, max_position_embeddings, "
        "num_attention_heads, vocab_size.\n"
    ) in text
    with pytest.raises(
        Exception,
        match="missing 'n_head': the attention heads "
        r"\(num_attention_heads in config.json\)",
    ):
        load_profile(tmp_path / "m.yaml")


def test_gguf_profiles_are_unchanged(tmp_path: Path) -> None:
    """No format key, no dtype: a GGUF profile loads as before and dumps byte for byte."""
    from layoutgen.models.profile import dump_profile

    every = sorted(Path(__file__).resolve().parents[1].glob("layouts/models/*.yaml"))
    committed = [p for p in every if "\nformat: safetensors\n" not in p.read_text()]
    assert committed
    for path in committed:
        profile = load_profile(path)
        assert profile.format == "gguf"
        assert "format:" not in path.read_text()
        assert dump_profile(profile) == path.read_text()


# ---------------------------------------------------------------- dtypes


@pytest.mark.parametrize("dtype", sorted(quants.SAFETENSORS_BITS))
def test_every_dtype_size_is_what_the_safetensors_package_accepts(
    tmp_path: Path, dtype: str
) -> None:
    """The table's bytes open with ``safe_open``; one byte fewer or more does not."""
    shape = [3, 8]
    size = quants.safetensors_nbytes(dtype, shape)
    for delta, ok in ((0, True), (-1, False), (1, False)):
        path = raw_file(
            tmp_path / f"{delta}.safetensors",
            {"t": {"dtype": dtype.upper(), "shape": shape, "data_offsets": [0, size + delta]}},
            size + delta,
        )
        try:
            with safe_open(str(path), "np") as f:
                opened = list(f.keys()) == ["t"]
        except Exception:
            opened = False
        assert opened is ok, (dtype, delta)


def test_sub_byte_dtypes_need_whole_bytes() -> None:
    assert quants.safetensors_nbytes("f4", (3, 2)) == 3
    assert quants.safetensors_nbytes("f6_e2m3", (4,)) == 3
    with pytest.raises(quants.UnknownType, match="not a whole number of bytes"):
        quants.safetensors_nbytes("f4", (3,))
    assert quants.safetensors_nbytes("bf16", ()) == 2  # a scalar
    assert quants.safetensors_nbytes("bf16", (0, 5)) == 0


# ---------------------------------------------------------------- hostile input


def raw_file(path: Path, header: Any, data: int, *, length: int | None = None) -> Path:
    """A safetensors file with exactly this header (JSON) and ``data`` sparse bytes."""
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    with path.open("wb") as f:
        f.write(struct.pack("<Q", len(raw) if length is None else length) + raw)
        f.truncate(8 + len(raw) + data)
    return path


def one_line_error(d: Path, *extra: str) -> str:
    result = run_cli(["inspect", *extra, str(d)])
    assert (result.code, result.stdout) == (1, ""), result
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: "), result.stderr
    assert "Traceback" not in result.stderr
    return result.stderr.removeprefix("error: ").rstrip("\n")


def single(tmp_path: Path, header: Any, data: int = 0, **kw: Any) -> tuple[Path, Path]:
    d = tmp_path / "m"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(LLAMA))
    return d, raw_file(d / "model.safetensors", header, data, **kw)


def t(dtype: str = "F32", shape: Any = (4,), offsets: Any = (0, 16)) -> dict[str, Any]:
    return {
        "dtype": dtype,
        "shape": list(shape) if isinstance(shape, tuple) else shape,
        "data_offsets": list(offsets) if isinstance(offsets, tuple) else offsets,
    }


NOT_OBJECT = "is not an object of dtype, shape and data_offsets"
SHAPE = "a list of at most 8 whole numbers >= 0 whose product is below 2^63"
OFFSETS = "expected [begin, end], whole numbers with 0 <= begin <= end"
DTYPE = "not a safetensors dtype (BF16, F16, F32, F8_E4M3, U8, I32, ...)"
CONTIGUOUS = "tensors must be contiguous and not overlap"
NAME = "is not 1 to 512 printable ASCII characters without spaces or braces"
HEADERS: dict[str, tuple[Any, int, str]] = {
    "not-json": (
        b"{nope",
        0,
        "the header is not JSON (Expecting property name enclosed in double quotes: "
        "line 1 column 2 (char 1))",
    ),
    "not-utf8": (b'{"\xff": 1}', 0, "the header is not UTF-8 text"),
    "array": (b"[1, 2]", 0, "the header is not a JSON object of tensors"),
    "nested-deep": (b"[" * 200_000 + b"]" * 200_000, 0, "the header is JSON nested too deeply"),
    "metadata-not-strings": (
        {"__metadata__": {"a": 1}},
        0,
        "__metadata__ is not an object of strings",
    ),
    "info-a-list": ({"w": [1]}, 0, f"tensor 'w' {NOT_OBJECT}"),
    "info-extra-key": ({"w": {**t(), "x": 1}}, 16, f"tensor 'w' {NOT_OBJECT}"),
    "info-missing-key": (
        {"w": {"dtype": "F32", "shape": [4], "offsets": [0, 16]}},
        16,
        f"tensor 'w' {NOT_OBJECT}",
    ),
    "dtype-unknown": ({"w": t("F7")}, 16, f"tensor 'w' has dtype 'F7', {DTYPE}"),
    "dtype-lowercase": ({"w": t("f32")}, 16, f"tensor 'w' has dtype 'f32', {DTYPE}"),
    "dtype-number": ({"w": t(4)}, 16, f"tensor 'w' has dtype int, {DTYPE}"),
    "shape-negative": ({"w": t(shape=[-4])}, 16, f"tensor 'w' has shape [-4]: {SHAPE}"),
    "shape-float": ({"w": t(shape=[4.0])}, 16, f"tensor 'w' has shape [4.0]: {SHAPE}"),
    "shape-bool": ({"w": t(shape=[True])}, 4, f"tensor 'w' has shape [True]: {SHAPE}"),
    "shape-string": ({"w": t(shape="[4]")}, 16, f"tensor 'w' has shape '[4]': {SHAPE}"),
    "shape-9-dims": (
        {"w": t(shape=[1] * 9)},
        4,
        f"tensor 'w' has shape [1, 1, 1, 1, 1, 1, 1, 1, 1]: {SHAPE}",
    ),
    "shape-2-63": (
        {"w": t(shape=[1 << 32, 1 << 31])},
        16,
        f"tensor 'w' has shape [4294967296, 2147483648]: {SHAPE}",
    ),
    "offsets-three": (
        {"w": t(offsets=[0, 8, 16])},
        16,
        f"tensor 'w' has data_offsets [0, 8, 16]: {OFFSETS}",
    ),
    "offsets-backwards": (
        {"w": t(offsets=[16, 0])},
        16,
        f"tensor 'w' has data_offsets [16, 0]: {OFFSETS}",
    ),
    "offsets-negative": (
        {"w": t(offsets=[-16, 0])},
        16,
        f"tensor 'w' has data_offsets [-16, 0]: {OFFSETS}",
    ),
    "offsets-size": (
        {"w": t(offsets=[0, 15])},
        16,
        "tensor 'w': data_offsets [0, 15] hold 15 bytes, but F32 [4] is 16",
    ),
    "offsets-gap": (
        {"a": t(), "b": t(offsets=[20, 36])},
        36,
        f"tensor 'b' starts at data byte 20, but the data before it ends at 16; {CONTIGUOUS}",
    ),
    "offsets-overlap": (
        {"a": t(), "b": t(offsets=[8, 24])},
        24,
        f"tensor 'b' starts at data byte 8, but the data before it ends at 16; {CONTIGUOUS}",
    ),
    "offsets-not-from-0": (
        {"a": t(offsets=[4, 20])},
        20,
        f"tensor 'a' starts at data byte 4, but the data before it ends at 0; {CONTIGUOUS}",
    ),
    "f4-half-byte": (
        {"w": t("F4", [3], [0, 1])},
        1,
        "tensor 'w': 3 elements of f4 (4 bits each) are not a whole number of bytes",
    ),
    "name-space": ({"a b": t()}, 16, f"tensor name 'a b' {NAME}"),
    "name-brace": ({"blk.{0..3}.w": t()}, 16, f"tensor name 'blk.{{0..3}}.w' {NAME}"),
    "name-newline": ({"a\nb": t()}, 16, f"tensor name 'a\\nb' {NAME}"),
    "name-empty": ({"": t()}, 16, f"tensor name '' {NAME}"),
    "name-long": ({"x" * 513: t()}, 16, f"tensor name '{'x' * 80}' {NAME}"),
}


@pytest.mark.parametrize("case", sorted(HEADERS))
def test_hostile_header(tmp_path: Path, case: str) -> None:
    header, data, message = HEADERS[case]
    d, path = single(tmp_path, header, data)
    assert one_line_error(d) == f"{path}: {message}"


def test_truncated_and_oversized_files(tmp_path: Path) -> None:
    d, path = single(tmp_path, {"w": t()}, 8)  # 16 bytes of data promised, 8 there
    size = path.stat().st_size
    assert (
        one_line_error(d)
        == f"{path}: truncated: tensor 'w' ends at byte {size + 8}, the file has {size}"
    )
    path.write_bytes(b"\1\0\0")
    assert (
        one_line_error(d)
        == f"{path}: truncated safetensors file: 3 bytes, fewer than the 8 of its header length"
    )
    raw_file(path, {"w": t()}, 16, length=1000)
    assert (
        one_line_error(d)
        == f"{path}: truncated safetensors header: its length says 1000 bytes, the file holds "
        f"{path.stat().st_size - 8} after the length"
    )
    raw_file(path, {"w": t()}, 16, length=100_000_001)
    assert (
        one_line_error(d)
        == f"{path}: the header length is 100000001 bytes; safetensors allows at most 100000000"
    )
    raw_file(path, {"w": t()}, 20)
    assert (
        one_line_error(d)
        == f"{path}: 4 bytes after the end of the tensor data (byte {path.stat().st_size - 4}); "
        "the safetensors loaders refuse such a file"
    )


def sharded(tmp_path: Path) -> Path:
    tensors = llama_tensors()
    return checkpoint(tmp_path / "m", LLAMA, tensors, shards=2)


def index(d: Path) -> dict[str, Any]:
    return json.loads((d / "model.safetensors.index.json").read_text())


def write_index(d: Path, doc: dict[str, Any]) -> None:
    (d / "model.safetensors.index.json").write_text(json.dumps(doc))


def test_directory_level_errors(tmp_path: Path) -> None:
    d = sharded(tmp_path)
    first, second = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
    good = index(d)

    (d / second).rename(d / "away")
    assert (
        one_line_error(d) == f"{d / second}: missing shard (named in model.safetensors.index.json)"
    )
    (d / "away").rename(d / second)

    doc = json.loads(json.dumps(good))
    doc["weight_map"]["model.extra.weight"] = first
    write_index(d, doc)
    assert (
        one_line_error(d)
        == f"{d / first}: tensor 'model.extra.weight' is listed in model.safetensors.index.json "
        "but not in this file"
    )

    doc = json.loads(json.dumps(good))
    doc["weight_map"]["lm_head.weight"] = (
        second if good["weight_map"]["lm_head.weight"] == first else first
    )
    write_index(d, doc)
    shard = good["weight_map"]["lm_head.weight"]
    assert (
        one_line_error(d)
        == f"{d / shard}: tensor 'lm_head.weight' is listed in model.safetensors.index.json in "
        f"{doc['weight_map']['lm_head.weight']}, not in this file"
    )

    for bad in ("../model-00001-of-00002.safetensors", "/etc/passwd", ".hidden", "a/b"):
        doc = json.loads(json.dumps(good))
        doc["weight_map"]["lm_head.weight"] = bad
        write_index(d, doc)
        assert one_line_error(d) == (
            f"{d / 'model.safetensors.index.json'}: weight_map names the file {bad!a}; "
            "expected a file name in this directory (no '/', no leading '.')"
        )
    write_index(d, {"weight_map": []})
    assert (
        one_line_error(d)
        == f"{d / 'model.safetensors.index.json'}: no weight_map object of tensor names and files"
    )
    write_index(d, good)

    outside = tmp_path / "elsewhere.safetensors"
    (d / first).rename(outside)
    (d / first).symlink_to(outside)
    assert (
        one_line_error(d)
        == f"{d / first}: is a symbolic link to {outside}, outside the model directory; "
        "layoutgen reads only files inside it"
    )

    (d / first).unlink()
    os.mkfifo(d / first)
    assert one_line_error(d) == f"{d / first}: is a FIFO (named pipe), not a regular file"
    (d / first).unlink()
    outside.rename(d / first)

    config = d / "config.json"
    config.write_text("[]")
    assert one_line_error(d) == f"{config}: not a JSON object"
    config.write_text("{")
    assert one_line_error(d).startswith(f"{config}: not JSON (")
    config.write_text(json.dumps(LLAMA | {"num_hidden_layers": "3"}))
    assert (
        one_line_error(d)
        == f"{config}: key 'num_hidden_layers' is '3'; expected a whole number from 1 to 4096"
    )
    config.write_text(json.dumps(LLAMA | {"torch_dtype": "bf16\n"}))
    assert (
        one_line_error(d) == f"{config}: key 'torch_dtype' is 'bf16\\n'; expected a plain name "
        "(letters, digits, '-', '_' or '.', e.g. bfloat16 or fp8)"
    )
    config.write_text(json.dumps(LLAMA | {"num_hidden_layers": 2}))
    message = one_line_error(d)
    assert message.startswith(f"{d}: tensor 'model.layers.2.")
    assert message.endswith(
        f"' is in layer 2, but {config} says 2 layers (num_hidden_layers) and 0 nextn/MTP layers"
    )
    config.unlink()
    assert (
        one_line_error(d)
        == f"{config}: no such file; a Hugging Face model directory has config.json "
        "beside its safetensors"
    )
    with config.open("wb") as f:
        f.truncate((16 << 20) + 1)
    assert one_line_error(d) == f"{config}: larger than the 16,777,216 bytes layoutgen reads"


def test_a_directory_without_safetensors(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(LLAMA))
    assert one_line_error(tmp_path) == (
        f"{tmp_path}: has no model.safetensors.index.json or model.safetensors; layoutgen reads "
        "Hugging Face checkpoints in safetensors"
    )


def test_header_only_is_for_gguf(tmp_path: Path) -> None:
    d = checkpoint(tmp_path / "m", LLAMA, llama_tensors())
    assert one_line_error(d, "--header-only") == (
        f"{d}: --header-only is for GGUF shards; a Hugging Face directory's safetensors "
        "headers are read from the files as they are"
    )


def test_names_profiles_keep_for_layers_are_refused(tmp_path: Path) -> None:
    tensors = llama_tensors() | {"blk.0.x": ("float32", (2,))}
    d = checkpoint(tmp_path / "m", LLAMA, tensors)
    assert (
        one_line_error(d)
        == f"{d / 'model.safetensors'}: tensor 'blk.0.x' starts with 'blk.', which profiles "
        "keep for the decoder's layers"
    )


def test_a_hand_edited_safetensors_profile_is_checked(tmp_path: Path) -> None:
    d = checkpoint(tmp_path / "m", LLAMA, llama_tensors())
    out = tmp_path / "m.yaml"
    assert run_cli(["inspect", str(d), "-o", str(out)]).code == 0
    text = out.read_text().replace("shape: [64, 64], bytes: 8192", "shape: [64, 64], bytes: 8000")
    out.write_text(text)
    with pytest.raises(
        Exception, match=r"bytes: 8000 does not match bf16 \[64, 64\], which is 8192 bytes"
    ):
        load_profile(out)
    out.write_text(text.replace("format: safetensors\n", ""))  # read as GGUF: bf16 sizes agree
    with pytest.raises(Exception, match="8000 does not match bf16"):
        load_profile(out)


def test_a_llama_cpp_service_on_a_checkpoint_profile_is_refused(tmp_path: Path) -> None:
    """A safetensors profile validates as a profile, but llama.cpp and ik_llama.cpp load
    GGUF files: a service of theirs on it is refused where its model is named."""
    from layoutgen.errors import InvalidInput
    from layoutgen.models.profile import dump_profile
    from layoutgen.render.validate import validate_file

    from specs import PROFILE, VALID, write

    profile = inspect(checkpoint(tmp_path / "Llama-3-tiny", LLAMA, llama_tensors()))
    (tmp_path / "tiny.yaml").write_text(dump_profile(profile))
    spec = write(tmp_path, VALID.replace(str(PROFILE), "tiny.yaml"))
    with pytest.raises(InvalidInput) as refused:
        validate_file(spec, "spec.yaml")
    messages = [d.gcc() for d in refused.value.diagnostics]
    assert any(
        "services.grandpa.model: model 'coder' is a Hugging Face checkpoint" in m
        and "ik_llama.cpp loads GGUF files" in m
        for m in messages
    ), messages


def test_qwen3_next_mtp_layers_apart_count_as_nextn_when_the_config_says_so(
    tmp_path: Path,
) -> None:
    """Qwen3-Next/3.5 keep their MTP layer as mtp.layers.K (not past the decoder); with
    mtp_num_hidden_layers in config.json it counts as a nextn layer, so a vLLM service
    can use it for speculative decoding."""
    tensors = ends(64, 500)
    for i in range(4):
        tensors |= attention(f"model.layers.{i}", 4, 2, 64, 64)
    tensors |= attention("mtp.layers.0", 4, 2, 64, 64)
    config = dict(QWEN3_NEXT, mtp_num_hidden_layers=1)
    h = hp(inspect(checkpoint(tmp_path / "Qwen3-Next-mtp", config, tensors)))
    assert (h["n_layer"], h["nextn_layers"]) == (5, 1)  # 4 decoder layers + the MTP one


# ------------------------------------------------------- shards read in parallel


def moe_checkpoint(d: Path, shards: int) -> Path:
    tensors = ends(64, 128)
    for i in range(4):
        p = f"model.layers.{i}"
        tensors |= attention(p, 4, 2, 16, 64) | experts(p, 8, 64, 32)
    config = LLAMA | {"num_hidden_layers": 4}
    return checkpoint(d, config, tensors, shards=shards)


def outcome(d: Path, jobs: int) -> str:
    """The profile text, or the error, of ``inspect_dir(d, jobs)``."""
    try:
        return dump_profile(inspect_dir(d, jobs))
    except SafetensorsError as exc:
        return f"error: {exc}"


JOBS = [2, 3, 7]


def test_shards_read_in_parallel_give_the_same_profile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = moe_checkpoint(tmp_path / "m", shards=7)
    one = outcome(d, 1)
    assert not one.startswith("error") and "blk.{0..3}.mlp.experts.7.up_proj.weight" in one
    for jobs in JOBS:
        assert outcome(d, jobs) == one, jobs
    # and the default: one process per core, for a checkpoint big enough to fork for
    monkeypatch.setattr(hf_checkpoint, "PARALLEL_FROM", 100)
    assert dump_profile(inspect_dir(d)) == one


def test_shards_read_in_parallel_give_the_first_error_in_shard_order(tmp_path: Path) -> None:
    """Errors in several shards at once: the one a reader going shard by shard meets
    first, whichever process found each (later shards are read by other processes)."""
    d = moe_checkpoint(tmp_path / "m", shards=7)
    files = sorted(p.name for p in d.glob("*.safetensors"))
    good = index(d)
    # shard 6 truncated, shard 5 lacks a tensor the index lists there, shard 3 holds
    # one the index puts in shard 4: the last of these is the first met
    with (d / files[5]).open("r+b") as f:
        f.truncate(f.seek(0, 2) - 2)
    doc = json.loads(json.dumps(good))
    doc["weight_map"]["model.extra.weight"] = files[4]
    moved = next(t for t, f in good["weight_map"].items() if f == files[2])
    doc["weight_map"][moved] = files[3]
    write_index(d, doc)
    first = (
        f"error: {d / files[2]}: tensor {moved!r} is listed in model.safetensors.index.json "
        f"in {files[3]}, not in this file"
    )
    assert outcome(d, 1) == first
    for jobs in JOBS:
        assert outcome(d, jobs) == first, jobs

    # without shard 3's problem, shard 5's comes first, then shard 6's
    doc["weight_map"][moved] = files[2]
    write_index(d, doc)
    second = (
        f"error: {d / files[4]}: tensor 'model.extra.weight' is listed in "
        "model.safetensors.index.json but not in this file"
    )
    assert [outcome(d, jobs) for jobs in [1, *JOBS]] == [second] * 4
    write_index(d, good)
    third = outcome(d, 1)
    assert third.startswith(f"error: {d / files[5]}: truncated")
    assert [outcome(d, jobs) for jobs in JOBS] == [third] * 3


def test_an_index_error_comes_before_a_name_error_in_the_same_shard(tmp_path: Path) -> None:
    tensors = llama_tensors() | {"blk.0.x": ("float32", (2,))}
    d = checkpoint(tmp_path / "m", LLAMA, tensors, shards=3)
    doc = index(d)
    shard = doc["weight_map"]["blk.0.x"]
    doc["weight_map"]["model.extra.weight"] = shard
    write_index(d, doc)
    index_error = (
        f"error: {d / shard}: tensor 'model.extra.weight' is listed in "
        "model.safetensors.index.json but not in this file"
    )
    assert [outcome(d, jobs) for jobs in [1, *JOBS]] == [index_error] * 4
    del doc["weight_map"]["model.extra.weight"]
    write_index(d, doc)
    name_error = (
        f"error: {d / shard}: tensor 'blk.0.x' starts with 'blk.', which profiles keep for the "
        "decoder's layers"
    )
    assert [outcome(d, jobs) for jobs in [1, *JOBS]] == [name_error] * 4


# -- issue 31: inspect refuses what validate would, loops, and headers too big to parse


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"hidden_size": 0}, "key 'hidden_size' is 0; expected a whole number from 1 to 16777215"),
        (
            {"num_attention_heads": 0},
            "key 'num_attention_heads' is 0; expected a whole number from 1 to 65536",
        ),
        (
            {"num_key_value_heads": 0},
            "key 'num_key_value_heads' is 0; expected a whole number from 1 to 65536",
        ),
        ({"head_dim": 0}, "key 'head_dim' is 0; expected a whole number from 1 to 16777215"),
        ({"vocab_size": 0}, "key 'vocab_size' is 0; expected a whole number from 1 to 16777215"),
        (
            {"architectures": []},
            "key 'architectures' is []; expected a list of model class names, "
            'e.g. ["LlamaForCausalLM"]',
        ),
        (
            {"torch_dtype": "float128"},
            "key 'torch_dtype' is 'float128'; expected one of bfloat16, float16, float32, "
            "half, float",
        ),
    ],
)
def test_a_config_validate_would_refuse_is_refused_by_inspect(
    tmp_path: Path, change: dict[str, Any], message: str
) -> None:
    """Each of these wrote a profile that validate then refused (or sized with 0)."""
    d = checkpoint(tmp_path / "m", LLAMA | change, llama_tensors())
    assert one_line_error(d) == f"{d / 'config.json'}: {message}"
    assert not (tmp_path / "m.yaml").exists()


def test_a_dense_config_s_zero_experts_are_no_experts(tmp_path: Path) -> None:
    d = checkpoint(tmp_path / "m", LLAMA | {"num_experts": 0}, llama_tensors())
    profile = inspect(d)
    assert profile.hparams.n_expert is None
    (tmp_path / "p.yaml").write_text(dump_profile(profile))
    load_profile(tmp_path / "p.yaml")  # validate accepts what inspect wrote


def test_symbolic_link_loops_are_one_line_errors(tmp_path: Path) -> None:
    d = tmp_path / "m"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(LLAMA))
    (d / "model.safetensors").symlink_to(d / "model.safetensors")
    assert one_line_error(d) == (
        f"{d / 'model.safetensors'}: a loop of symbolic links (or links too deep to follow); "
        "point it at the file itself"
    )
    (d / "model.safetensors").unlink()
    (d / "a").symlink_to(d / "b")
    (d / "b").symlink_to(d / "a")
    (d / "model.safetensors").symlink_to(d / "a")
    assert one_line_error(d).startswith(f"{d / 'model.safetensors'}: a loop of symbolic links")


def test_a_header_with_more_tensors_than_a_profile_holds_is_refused_before_parsing(
    tmp_path: Path,
) -> None:
    """Counted while read (every tensor has two lists), refused at the chunk where the
    count passes 100,000: the JSON (~700 bytes a tensor parsed) is never built."""
    n = 250_000
    entry = '"model.layers.0.x{i}.weight":{{"dtype":"F32","shape":[4],"data_offsets":[{a},{b}]}}'
    raw = "{" + ",".join(entry.format(i=i, a=16 * i, b=16 * i + 16) for i in range(n)) + "}"
    d, path = single(tmp_path, raw.encode(), 16 * n)
    message = one_line_error(d)
    assert message.startswith(
        f"{path}: the header lists more than 100000 tensors (more than 200000 '[' in its first "
    )
    assert message.endswith(" bytes); a profile holds at most 100000")
    read = int(message.split("in its first ")[1].split(" bytes")[0])
    assert read < len(raw) // 2  # refused well before the end of the header
