"""Normalising GGUF key/values into :class:`~layoutgen.profile.HParams`.

Why: each architecture names its hyperparameters ``{arch}.block_count``,
``{arch}.attention.head_count_kv`` and so on, and some facts are not keys at
all (which layers slide, which are recurrent).  Key names come from the
``gguf`` package (``gguf.Keys``), never typed here.  Layer patterns follow the
runtimes: a layer ``il`` slides when ``il % pattern < pattern - 1``
(ik_llama.cpp ``llama-build-context.cpp``), with pattern 6 for gemma3 unless
the file says otherwise, 4 for llama4 (chunked attention, 8192) and 2 for
gpt-oss (mainline's ``set_swa_pattern(2)``, quoted in ik's
``llama-hparams.cpp``); gemma4 stores a per-layer boolean list; qwen3next /
qwen35 / qwen35moe put full attention on every ``full_attention_interval``-th
layer and recurrent (DeltaNet) layers elsewhere.
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path
from typing import Any

from layoutgen.gguf_header import SkippedArray
from layoutgen.profile import HParams

_MLA_ARCHS = {"deepseek2", "glm-dsa", "kimi-linear"}
_SWA_PATTERN_DEFAULT = {"gemma3": 6, "llama4": 4, "gpt-oss": 2}
_RECURRENT_INTERVAL_ARCHS = {"qwen3next", "qwen35", "qwen35moe"}


@functools.cache
def gguf_keys() -> Any:
    """``gguf.Keys``: the metadata key names, from the gguf package itself.

    Loaded from the package's ``constants.py`` alone (it needs only the
    standard library): importing ``gguf`` runs its ``__init__``, which imports
    numpy and the reader, ~100 ms of ``layoutgen inspect`` for key names.
    """
    found = importlib.util.find_spec("gguf")
    if found is None or found.origin is None:  # pragma: no cover - a declared dependency
        raise ModuleNotFoundError("gguf")
    path = Path(found.origin).parent / "constants.py"
    spec = importlib.util.spec_from_file_location("layoutgen._gguf_constants", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.Keys


def normalise(arch: str, kv: dict[str, Any]) -> HParams:
    """The profile's hyperparameters from one model's key/values."""
    Keys = gguf_keys()

    def get(template: str) -> Any:
        value = kv.get(template.format(arch=arch))
        if isinstance(value, list):
            return value[0] if len(set(value)) == 1 else tuple(int(v) for v in value)
        return value

    n_layer = int(get(Keys.LLM.BLOCK_COUNT) or 0)
    fields: dict[str, Any] = {
        "n_layer": n_layer,
        "n_embd": get(Keys.LLM.EMBEDDING_LENGTH),
        "n_head": get(Keys.Attention.HEAD_COUNT),
        "n_head_kv": get(Keys.Attention.HEAD_COUNT_KV),
        "key_length": get(Keys.Attention.KEY_LENGTH),
        "value_length": get(Keys.Attention.VALUE_LENGTH),
        "key_length_swa": get(Keys.Attention.KEY_LENGTH_SWA),
        "value_length_swa": get(Keys.Attention.VALUE_LENGTH_SWA),
        "q_lora_rank": get(Keys.Attention.Q_LORA_RANK),
        "kv_lora_rank": get(Keys.Attention.KV_LORA_RANK),
        "n_ff": get(Keys.LLM.FEED_FORWARD_LENGTH),
        "n_expert": get(Keys.LLM.EXPERT_COUNT),
        "n_expert_used": get(Keys.LLM.EXPERT_USED_COUNT),
        "n_expert_shared": get(Keys.LLM.EXPERT_SHARED_COUNT),
        "expert_ff": get(Keys.LLM.EXPERT_FEED_FORWARD_LENGTH),
        "expert_shared_ff": get(Keys.LLM.EXPERT_SHARED_FEED_FORWARD_LENGTH),
        "leading_dense": get(Keys.LLM.LEADING_DENSE_BLOCK_COUNT),
        "nextn_layers": get(Keys.LLM.NEXTN_PREDICT_LAYERS),
        "sliding_window": get(Keys.Attention.SLIDING_WINDOW),
        "shared_kv_layers": get(Keys.Attention.SHARED_KV_LAYERS),
        "ssm_conv_kernel": get(Keys.SSM.CONV_KERNEL),
        "ssm_state_size": get(Keys.SSM.STATE_SIZE),
        "ssm_inner_size": get(Keys.SSM.INNER_SIZE),
        "ssm_group_count": get(Keys.SSM.GROUP_COUNT),
        "ssm_time_step_rank": get(Keys.SSM.TIME_STEP_RANK),
        "vocab": get(Keys.LLM.VOCAB_SIZE) or _length(kv.get(Keys.Tokenizer.LIST)),
        "n_ctx_train": get(Keys.LLM.CONTEXT_LENGTH),
    }
    if arch in _MLA_ARCHS and fields["kv_lora_rank"]:
        fields["rope_dim"] = get(Keys.Rope.DIMENSION_COUNT)
    fields["swa_layers"] = _swa_layers(arch, n_layer, kv, get(Keys.Attention.SLIDING_WINDOW))
    if arch in _RECURRENT_INTERVAL_ARCHS:
        interval = get(Keys.LLM.FULL_ATTENTION_INTERVAL)
        if interval:
            fields["recurrent_layers"] = tuple(
                i for i in range(n_layer) if (i + 1) % int(interval) != 0
            )
    return HParams.model_validate({k: v for k, v in fields.items() if v is not None})


def _swa_layers(arch: str, n_layer: int, kv: dict[str, Any], window: Any) -> Any:
    Keys = gguf_keys()

    raw = kv.get(Keys.Attention.SLIDING_WINDOW_PATTERN.format(arch=arch))
    if isinstance(raw, list) and raw and isinstance(raw[0], bool):
        return tuple(i for i, swa in enumerate(raw) if swa)
    pattern = raw if isinstance(raw, int) else _SWA_PATTERN_DEFAULT.get(arch)
    if not pattern or not (window or arch == "llama4"):
        return None
    return tuple(i for i in range(n_layer) if i % pattern < pattern - 1)


def _length(value: Any) -> int | None:
    if isinstance(value, SkippedArray):
        return value.length
    if isinstance(value, list):
        return len(value)
    return None
