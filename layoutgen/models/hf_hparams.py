"""Hyperparameters from a Hugging Face ``config.json``, in the profile's terms.

Why here and not from the tensors: the memory model needs heads, K/V sizes,
which layers slide or are recurrent, and vLLM sizes its KV cache from the
config as well.  Multimodal configs keep the text decoder's numbers under
``text_config``; a key is looked up there first, then at the top.  The keys
per field (first found wins):

- n_embd ``hidden_size``; n_head ``num_attention_heads``; n_head_kv
  ``num_key_value_heads`` (default: n_head); n_ff ``intermediate_size``;
  vocab ``vocab_size``; n_ctx_train ``max_position_embeddings``;
- K/V head sizes: ``head_dim``, else ``hidden_size / num_attention_heads``;
  MLA (a ``kv_lora_rank``): K = ``qk_nope_head_dim + qk_rope_head_dim``,
  V = ``v_head_dim``, rope_dim ``qk_rope_head_dim``, q_lora_rank;
- experts: ``num_experts | n_routed_experts | num_local_experts``, used
  ``num_experts_per_tok | experts_per_token``, shared ``n_shared_experts``,
  expert_ff ``moe_intermediate_size`` (else ``intermediate_size``, as Mixtral
  and gpt-oss size their experts), expert_shared_ff
  ``shared_expert_intermediate_size``, leading_dense ``first_k_dense_replace``;
- nextn/MTP: ``num_nextn_predict_layers | mtp_num_hidden_layers`` bounds the
  decoder layers beyond ``num_hidden_layers`` (the caller counts them);
- sliding layers: ``layer_types`` ("sliding_attention"), else
  ``sliding_window_pattern`` (layer i slides when ``(i + 1) % pattern``,
  transformers' Gemma rule; Gemma 2 and gpt-oss default to 2, Gemma 3 to 6),
  else ``use_sliding_window`` with ``max_window_layers`` (Qwen2/3: layers from
  it on), else a Mistral/Mixtral ``sliding_window`` (every layer);
- recurrent layers: ``layer_types`` ("linear_attention"), else
  ``full_attention_interval`` (Qwen3-Next: every interval-th layer is full);
  Gated DeltaNet state sizes as llama.cpp's ``convert_hf_to_gguf.py``
  (Qwen3NextModel) writes them: conv kernel ``linear_conv_kernel_dim``, state
  ``linear_key_head_dim``, groups ``linear_num_key_heads``, time-step rank
  ``linear_num_value_heads``, inner ``linear_value_head_dim x
  linear_num_value_heads``;
- dtype ``torch_dtype | dtype``, quantization ``quantization_config.quant_method``.

Gemma 3 configs leave some numbers to transformers' defaults
(``Gemma3TextConfig``: 8 heads, 4 KV heads, head_dim 256, 262,208 tokens,
131,072 positions, window 4096, pattern 6); they are applied for
``gemma3_text`` and said so in the profile's ``source:``.  Values are checked
like GGUF keys: whole numbers within the profile's bounds, one-line errors
naming config.json and the key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from layoutgen.models.profile import MAX_LAYERS, MAX_MANY, MAX_TOKENS, MAX_WIDTH, TORCH_DTYPES
from layoutgen.models.safetensors_header import SafetensorsError

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\Z")
_DEFAULTS: dict[str, dict[str, int]] = {
    "gemma3_text": {
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "head_dim": 256,
        "vocab_size": 262_208,
        "max_position_embeddings": 131_072,
        "sliding_window": 4096,
        "sliding_window_pattern": 6,
    },
}
_PATTERN_DEFAULT = {"gemma2": 2, "gemma3_text": 6, "gpt_oss": 2}
_ALL_SLIDE = {"mistral", "mixtral"}


@dataclass
class ConfigFacts:
    """What config.json says: HParams fields, layer counts, and keys not found."""

    arch: str
    fields: dict[str, Any] = field(default_factory=dict)
    n_hidden: int | None = None  # num_hidden_layers
    nextn_max: int = 0  # MTP layers the decoder may have beyond n_hidden
    missing: list[str] = field(default_factory=list)
    defaults: list[str] = field(default_factory=list)


class _Config:
    """Checked reads of one config (text_config first); errors name ``where`` and the key."""

    def __init__(self, top: dict[str, Any], where: str) -> None:
        text = top.get("text_config")
        self.text: dict[str, Any] = text if isinstance(text, dict) else {}
        self.top, self.where = top, where
        self.model_type = self.text.get("model_type") or top.get("model_type")
        self.defaults = _DEFAULTS.get(str(self.model_type), {})
        self.used: list[str] = []

    def raw(self, key: str) -> Any:
        for scope in (self.text, self.top):
            if scope.get(key) is not None:
                return scope[key]
        if key in self.defaults:
            self.used.append(f"{key} {self.defaults[key]}")
            return self.defaults[key]
        return None

    def whole(self, keys: tuple[str, ...], lo: int, hi: int, missing: list[str]) -> int | None:
        for key in keys:
            value = self.raw(key)
            if value is None:
                continue
            if type(value) is not int or not lo <= value <= hi:
                shown = ascii(value)[:40]
                raise SafetensorsError(
                    f"{self.where}: key {key!r} is {shown}; expected a whole number from "
                    f"{lo} to {hi}"
                )
            return value
        missing.append(keys[0])
        return None

    def dtype(self, value: Any) -> str | None:
        """torch_dtype: one vLLM sizes a KV cache "auto" by (the profile's rule)."""
        name = self.name("torch_dtype", value)
        if name is not None and name.lower() not in TORCH_DTYPES:
            raise SafetensorsError(
                f"{self.where}: key 'torch_dtype' is {ascii(name)[:40]}; expected one of "
                f"{', '.join(TORCH_DTYPES)}"
            )
        return name

    def architectures(self, value: Any) -> None:
        """vLLM picks the model class from ``architectures``: a present one names one."""
        if value is None:
            return
        if (
            type(value) is not list
            or not value
            or not all(isinstance(v, str) and _NAME.match(v) for v in value)
        ):
            raise SafetensorsError(
                f"{self.where}: key 'architectures' is {ascii(value)[:60]}; expected a "
                'list of model class names, e.g. ["LlamaForCausalLM"]'
            )

    def name(self, key: str, value: Any) -> str | None:
        if value is None:
            return None
        if not isinstance(value, str) or not _NAME.match(value):
            raise SafetensorsError(
                f"{self.where}: key {key!r} is {ascii(value)[:40]}; expected a plain name "
                "(letters, digits, '-', '_' or '.', e.g. bfloat16 or fp8)"
            )
        return value


def facts(config: dict[str, Any], where: str) -> ConfigFacts:
    """The profile's hyperparameters known from ``config`` (read from ``where``)."""
    c = _Config(config, where)
    arch = c.name("model_type", config.get("model_type"))
    out = ConfigFacts(arch or "unknown")
    miss = out.missing
    if arch is None:
        miss.append("model_type")
    f = out.fields
    out.n_hidden = c.whole(("num_hidden_layers",), 1, MAX_LAYERS, miss)
    top = out.n_hidden or MAX_LAYERS
    nextn = c.whole(("num_nextn_predict_layers", "mtp_num_hidden_layers"), 0, MAX_LAYERS, [])
    out.nextn_max = nextn or 0
    # widths and head counts are at least 1: a 0 would plan a zero-byte cache (or divide
    # by zero), and validate refuses such a profile; inspect refuses the config first
    f["n_embd"] = c.whole(("hidden_size",), 1, MAX_WIDTH, miss)
    f["n_head"] = c.whole(("num_attention_heads",), 1, MAX_MANY, miss)
    f["n_head_kv"] = c.whole(("num_key_value_heads",), 1, MAX_MANY, [])
    if f["n_head_kv"] is None and f["n_head"] is not None:
        f["n_head_kv"] = f["n_head"]
        out.defaults.append("num_key_value_heads absent: n_head_kv = num_attention_heads")
    _head_sizes(c, out)
    f["n_ff"] = c.whole(("intermediate_size",), 0, MAX_WIDTH, miss)
    experts = ("num_experts", "n_routed_experts", "num_local_experts")
    f["n_expert"] = c.whole(experts, 0, MAX_MANY, []) or None  # 0 experts: a dense model
    if f["n_expert"]:
        used = ("num_experts_per_tok", "experts_per_token")
        f["n_expert_used"] = c.whole(used, 1, f["n_expert"], miss)
        f["n_expert_shared"] = c.whole(("n_shared_experts",), 0, MAX_MANY, [])
        f["expert_ff"] = c.whole(("moe_intermediate_size",), 1, MAX_WIDTH, [])
        if f["expert_ff"] is None and f["n_ff"] is not None:
            f["expert_ff"] = f["n_ff"]
            out.defaults.append("moe_intermediate_size absent: expert_ff = intermediate_size")
        shared = ("shared_expert_intermediate_size",)
        f["expert_shared_ff"] = c.whole(shared, 0, MAX_WIDTH, []) or None  # 0: none
        f["leading_dense"] = c.whole(("first_k_dense_replace",), 0, top, [])
    f["vocab"] = c.whole(("vocab_size",), 1, MAX_WIDTH, miss)
    f["n_ctx_train"] = c.whole(("max_position_embeddings",), 0, MAX_TOKENS, miss)
    f["rope_positions"] = _rope_positions(c, f["n_ctx_train"])
    _layers(c, out, out.n_hidden)
    f["dtype"] = c.dtype(c.raw("torch_dtype") or c.raw("dtype"))
    c.architectures(config.get("architectures"))
    quant = config.get("quantization_config")
    if isinstance(quant, dict):
        f["quantization"] = c.name("quantization_config.quant_method", quant.get("quant_method"))
    out.defaults.extend(f"{u} (transformers' default for {c.model_type})" for u in c.used)
    out.fields = {k: v for k, v in f.items() if v is not None}
    return out


def _rope_positions(c: _Config, trained: int | None) -> int | None:
    """Rows of vLLM's rotary cos/sin cache (``get_rope``: one cache, every layer): the
    trained context, or with YaRN the original context x the factor.  None for a
    model without rotary embeddings (no ``rope_theta``, no ``rope_scaling``)."""
    scaling = c.raw("rope_scaling")
    if c.raw("rope_theta") is None and not isinstance(scaling, dict):
        return None
    if isinstance(scaling, dict) and (scaling.get("rope_type") or scaling.get("type")) == "yarn":
        original, factor = scaling.get("original_max_position_embeddings"), scaling.get("factor")
        if isinstance(original, int) and isinstance(factor, int | float) and factor >= 1:
            rows = int(original * float(factor))
            if 0 < rows <= MAX_TOKENS * 16:
                return rows
    return trained


def _head_sizes(c: _Config, out: ConfigFacts) -> None:
    f, miss = out.fields, out.missing
    if c.raw("kv_lora_rank") is not None:  # MLA (DeepSeek-V2/V3, Kimi K2, GLM-5)
        f["q_lora_rank"] = c.whole(("q_lora_rank",), 1, MAX_WIDTH, [])
        f["kv_lora_rank"] = c.whole(("kv_lora_rank",), 1, MAX_WIDTH, miss)
        nope = c.whole(("qk_nope_head_dim",), 0, MAX_WIDTH, miss)
        rope = c.whole(("qk_rope_head_dim",), 0, MAX_WIDTH, miss)
        f["rope_dim"] = rope
        f["key_length"] = None if nope is None or rope is None else nope + rope
        f["value_length"] = c.whole(("v_head_dim",), 1, MAX_WIDTH, miss)
        if f["key_length"] == 0:
            raise SafetensorsError(
                f"{c.where}: keys 'qk_nope_head_dim' and 'qk_rope_head_dim' are both 0; "
                "expected the K head's parts (e.g. 128 and 64)"
            )
        return
    head = c.whole(("head_dim",), 1, MAX_WIDTH, [])
    if head is None and f.get("n_embd") and f.get("n_head") and f["n_embd"] % f["n_head"] == 0:
        head = f["n_embd"] // f["n_head"]
        out.defaults.append("head_dim absent: key/value_length = hidden_size / heads")
    if head is None:
        miss.append("head_dim")
    f["key_length"] = f["value_length"] = head


def _layers(c: _Config, out: ConfigFacts, n: int | None) -> None:
    """swa_layers, sliding_window, recurrent_layers and the DeltaNet state sizes."""
    f = out.fields
    if n is None:
        return
    kinds = c.raw("layer_types")
    window = c.whole(("sliding_window",), 0, MAX_TOKENS, []) or None  # 0: no window
    swa: tuple[int, ...] = ()
    recurrent: tuple[int, ...] = ()
    if kinds is not None:
        if type(kinds) is not list or len(kinds) != n or not all(type(k) is str for k in kinds):
            raise SafetensorsError(
                f"{c.where}: key 'layer_types' is not a list of {n} strings "
                '(one per layer, e.g. "full_attention")'
            )
        swa = tuple(i for i, k in enumerate(kinds) if k == "sliding_attention")
        recurrent = tuple(i for i, k in enumerate(kinds) if k == "linear_attention")
    elif window:
        pattern = c.whole(("sliding_window_pattern",), 0, MAX_LAYERS, [])
        pattern = pattern or _PATTERN_DEFAULT.get(str(c.model_type))
        if pattern:
            swa = tuple(i for i in range(n) if (i + 1) % pattern)
        elif c.raw("use_sliding_window") is True:
            first = c.whole(("max_window_layers",), 0, MAX_LAYERS, []) or 0
            swa = tuple(range(first, n))
        elif c.raw("use_sliding_window") is None and c.model_type in _ALL_SLIDE:
            swa = tuple(range(n))
    if kinds is None:
        interval = c.whole(("full_attention_interval",), 1, MAX_LAYERS, [])
        if interval:
            recurrent = tuple(i for i in range(n) if (i + 1) % interval)
    if swa:
        f["swa_layers"], f["sliding_window"] = swa, window
        if window is None:
            out.missing.append("sliding_window")
    if recurrent:
        f["recurrent_layers"] = recurrent
        _delta_net(c, out)


def _delta_net(c: _Config, out: ConfigFacts) -> None:
    f, miss = out.fields, out.missing
    f["ssm_conv_kernel"] = c.whole(("linear_conv_kernel_dim",), 0, MAX_WIDTH, miss)
    f["ssm_state_size"] = c.whole(("linear_key_head_dim",), 0, MAX_WIDTH, miss)
    f["ssm_group_count"] = c.whole(("linear_num_key_heads",), 0, MAX_WIDTH, miss)
    heads = c.whole(("linear_num_value_heads",), 0, MAX_WIDTH, miss)
    f["ssm_time_step_rank"] = heads
    value = c.whole(("linear_value_head_dim",), 0, MAX_WIDTH, miss)
    if heads is not None and value is not None:
        f["ssm_inner_size"] = heads * value
