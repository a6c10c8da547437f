"""Normalising GGUF key/values into :class:`~layoutgen.models.profile.HParams`.

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

Every value is checked before use: a whole number (a signed type may not be
negative, a float or a string is refused) within the bounds of ``_BOUNDS``,
which are far above any real model and keep what follows (per-layer loops,
sizes that multiply these numbers) bounded: at most 4,096 layers (the deepest
GGUF models have ~130), widths and vocabularies below 2^24 (16,384-wide
embeddings and 262,144-token vocabularies are the largest), at most 65,536
heads or experts, contexts and windows below 2^30 tokens.  A value outside
them is a one-line :class:`~layoutgen.models.gguf_header.GGUFError` naming the file
and the key.
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from layoutgen.models.gguf_header import GGUFError, SkippedArray, SkippedString
from layoutgen.models.profile import MAX_LAYERS, MAX_MANY, MAX_TOKENS, MAX_WIDTH, HParams

_MLA_ARCHS = {"deepseek2", "glm-dsa", "kimi-linear"}
_SWA_PATTERN_DEFAULT = {"gemma3": 6, "llama4": 4, "gpt-oss": 2}
_RECURRENT_INTERVAL_ARCHS = {"qwen3next", "qwen35", "qwen35moe"}

# Bounds shared with hand-written profiles (profile.py), so inspect and validate agree.
LAYERS = "layers"  # an upper bound: the model's layer count
#: field -> (gguf.Keys path, lowest, highest, one value per layer allowed)
_BOUNDS: dict[str, tuple[str, int, int | str, bool]] = {
    "n_embd": ("LLM.EMBEDDING_LENGTH", 0, MAX_WIDTH, False),
    "n_head": ("Attention.HEAD_COUNT", 0, MAX_MANY, True),
    "n_head_kv": ("Attention.HEAD_COUNT_KV", 0, MAX_MANY, True),
    "key_length": ("Attention.KEY_LENGTH", 0, MAX_WIDTH, False),
    "value_length": ("Attention.VALUE_LENGTH", 0, MAX_WIDTH, False),
    "key_length_swa": ("Attention.KEY_LENGTH_SWA", 0, MAX_WIDTH, False),
    "value_length_swa": ("Attention.VALUE_LENGTH_SWA", 0, MAX_WIDTH, False),
    "q_lora_rank": ("Attention.Q_LORA_RANK", 0, MAX_WIDTH, False),
    "kv_lora_rank": ("Attention.KV_LORA_RANK", 0, MAX_WIDTH, False),
    "n_ff": ("LLM.FEED_FORWARD_LENGTH", 0, MAX_WIDTH, True),
    "n_expert": ("LLM.EXPERT_COUNT", 0, MAX_MANY, False),
    "n_expert_used": ("LLM.EXPERT_USED_COUNT", 0, MAX_MANY, False),
    "n_expert_shared": ("LLM.EXPERT_SHARED_COUNT", 0, MAX_MANY, False),
    "expert_ff": ("LLM.EXPERT_FEED_FORWARD_LENGTH", 0, MAX_WIDTH, False),
    "expert_shared_ff": ("LLM.EXPERT_SHARED_FEED_FORWARD_LENGTH", 0, MAX_WIDTH, False),
    "leading_dense": ("LLM.LEADING_DENSE_BLOCK_COUNT", 0, LAYERS, False),
    "nextn_layers": ("LLM.NEXTN_PREDICT_LAYERS", 0, LAYERS, False),
    "sliding_window": ("Attention.SLIDING_WINDOW", 0, MAX_TOKENS, False),
    "shared_kv_layers": ("Attention.SHARED_KV_LAYERS", 0, LAYERS, False),
    "ssm_conv_kernel": ("SSM.CONV_KERNEL", 0, MAX_WIDTH, False),
    "ssm_state_size": ("SSM.STATE_SIZE", 0, MAX_WIDTH, False),
    "ssm_inner_size": ("SSM.INNER_SIZE", 0, MAX_WIDTH, False),
    "ssm_group_count": ("SSM.GROUP_COUNT", 0, MAX_WIDTH, False),
    "ssm_time_step_rank": ("SSM.TIME_STEP_RANK", 0, MAX_WIDTH, False),
    "vocab": ("LLM.VOCAB_SIZE", 0, MAX_WIDTH, False),
    "n_ctx_train": ("LLM.CONTEXT_LENGTH", 0, MAX_TOKENS, False),
}


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


def _key(path: str) -> str:
    node = gguf_keys()
    for part in path.split("."):
        node = getattr(node, part)
    return str(node)


class _Reader:
    """Checked reads of one model's key/values; errors name ``source`` and the key."""

    def __init__(self, arch: str, kv: dict[str, Any], source: str) -> None:
        self.arch, self.kv, self.source = arch, kv, source
        self.n_layer = MAX_LAYERS

    def error(self, key: str, message: str) -> GGUFError:
        return GGUFError(f"{self.source}: key {key!r} {message}")

    def whole(self, template: str, lo: int, hi: int, *, per_layer: bool = False) -> Any:
        """An integer in [lo, hi], a per-layer tuple of them, or None when absent."""
        key = template.format(arch=self.arch)
        value = self.kv.get(key)
        if value is None:
            return None
        if isinstance(value, list):
            if not value or len(value) > self.n_layer:
                raise self.error(key, f"has {len(value)} values; expected 1 to {self.n_layer}")
            items = [self._check(key, v, lo, hi) for v in value]
            if len(set(items)) == 1:
                return items[0]
            if not per_layer:
                raise self.error(key, "has different values per layer; expected one number")
            return tuple(items)
        return self._check(key, value, lo, hi)

    def _check(self, key: str, value: Any, lo: int, hi: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(key, f"is {_kind(value)}; expected a whole number from {lo} to {hi}")
        if not lo <= value <= hi:
            raise self.error(key, f"is {value}; expected a whole number from {lo} to {hi}")
        return value


def _kind(value: Any) -> str:
    if isinstance(value, SkippedArray):
        return f"an array of {value.length} items"
    if isinstance(value, SkippedString):
        return f"a string of {value.length} bytes"
    if isinstance(value, bool):
        return f"a boolean ({value})"
    text = repr(value)
    shown = text if len(text) <= 40 else text[:37] + "..."
    return f"a {type(value).__name__} ({shown})"


def normalise(arch: str, kv: dict[str, Any], source: str = "model") -> HParams:
    """The profile's hyperparameters from one model's key/values (``source`` names it)."""
    Keys = gguf_keys()
    read = _Reader(arch, kv, source)
    block_count = Keys.LLM.BLOCK_COUNT.format(arch=arch)
    if block_count not in kv:
        raise GGUFError(
            f"{source}: no key {block_count!r} (the number of layers); is it a model? "
            "(a projector or vocabulary-only GGUF has no layers to place)"
        )
    n_layer = read.whole(Keys.LLM.BLOCK_COUNT, 1, MAX_LAYERS)
    read.n_layer = n_layer
    fields: dict[str, Any] = {"n_layer": n_layer}
    for field, (path, lo, hi, per_layer) in _BOUNDS.items():
        top = n_layer if hi == LAYERS else int(hi)
        fields[field] = read.whole(_key(path), lo, top, per_layer=per_layer)
    if fields["n_expert"] is not None and fields["n_expert_used"] is not None:
        read.whole(Keys.LLM.EXPERT_USED_COUNT, 0, fields["n_expert"])
    if fields["vocab"] is None:
        fields["vocab"] = _length(kv.get(Keys.Tokenizer.LIST))
    if arch in _MLA_ARCHS and fields["kv_lora_rank"]:
        fields["rope_dim"] = read.whole(Keys.Rope.DIMENSION_COUNT, 0, MAX_WIDTH)
    fields["swa_layers"] = _swa_layers(read, n_layer, fields["sliding_window"])
    if arch in _RECURRENT_INTERVAL_ARCHS:
        # every interval-th layer has full attention: a modulo by it follows
        interval = read.whole(Keys.LLM.FULL_ATTENTION_INTERVAL, 1, MAX_LAYERS)
        if interval:
            fields["recurrent_layers"] = tuple(i for i in range(n_layer) if (i + 1) % interval != 0)
    try:
        return HParams.model_validate({k: v for k, v in fields.items() if v is not None})
    except ValidationError as exc:  # the checks above should leave nothing for pydantic
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise GGUFError(f"{source}: hyperparameter {where}: {first['msg']}") from None


def _swa_layers(read: _Reader, n_layer: int, window: Any) -> Any:
    Keys = gguf_keys()
    key = Keys.Attention.SLIDING_WINDOW_PATTERN.format(arch=read.arch)
    raw = read.kv.get(key)
    if isinstance(raw, list) and raw and isinstance(raw[0], bool):
        if len(raw) > n_layer or not all(isinstance(v, bool) for v in raw):
            raise read.error(key, f"is not a list of at most {n_layer} booleans (one per layer)")
        return tuple(i for i, swa in enumerate(raw) if swa)
    pattern = _SWA_PATTERN_DEFAULT.get(read.arch)
    if isinstance(raw, int) and not isinstance(raw, bool):
        pattern = read.whole(Keys.Attention.SLIDING_WINDOW_PATTERN, 0, MAX_LAYERS)
    if not pattern or not (window or read.arch == "llama4"):
        return None
    return tuple(i for i in range(n_layer) if i % pattern < pattern - 1)


def _length(value: Any) -> int | None:
    if isinstance(value, SkippedArray):
        return value.length
    if isinstance(value, list):
        return len(value)
    return None
