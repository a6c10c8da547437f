"""Model profiles: a model's tensor inventory and hyperparameters, as reviewable YAML.

Why profiles exist: specs refer to committed profiles so that validation,
planning and CI never need the (hundreds of GiB of) weights.  A profile is
written by ``layoutgen inspect`` from GGUF headers or a Hugging Face
checkpoint's config.json and safetensors headers (``format: safetensors``:
safetensors dtypes, shapes outermost first, ``blk.N.`` for the decoder's
layers; :mod:`layoutgen.models.hf_checkpoint`), or by hand with a
``source:`` saying where every number came from.  This module and
:mod:`layoutgen.spec.schema` are the only places with pydantic models; loading
returns a plain frozen :class:`Profile`, whose :meth:`Profile.tensors` yields
every tensor unfolded (see :mod:`layoutgen.models.tensors` for the ``blk.{3..77}``
notation).

Checks beyond the schema: every entry's bytes equal what its type and shape
give (ggml types for GGUF profiles, safetensors dtypes for safetensors ones;
where layoutgen knows the type, an unknown type's bytes are taken as written),
a GGUF tensor has 1 to 4 dimensions of at least 1 (a safetensors one up to 8,
scalars and empty tensors included), no tensor is listed twice after unfolding,
and layer numbers stay below ``n_layer``.  Numbers stay within what a model can have (``_BOUNDS``,
the same bounds ``layoutgen inspect`` applies to GGUF headers), layer sets are
measured before they are unfolded, and a profile that is otherwise consistent
must carry the hyperparameters the memory model needs (heads and K/V sizes for
attention, state sizes for recurrent layers): without them a KV cache would be
estimated as zero, and an estimate may be high but never low.  Problems are
located as ``file:line:col``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema

from layoutgen.errors import InvalidInput, Problem
from layoutgen.inputs import source
from layoutgen.models import quants
from layoutgen.models.tensors import Folded, LayerSetError, Tensor, expand_name, fold, parse_layers

#: The deepest GGUF models have ~130 blocks; per-layer loops run up to this.
MAX_LAYERS = 4096
#: Tensors after unfolding: GLM-5.1 has 1809; every one is visited per candidate layout.
MAX_TENSORS = 100_000
MAX_WIDTH = (1 << 24) - 1  # embeddings (16,384 wide) and vocabularies (262,144) are the largest
MAX_MANY = 1 << 16  # heads, experts
MAX_TOKENS = 1 << 30  # contexts and windows
#: hparams field -> highest value it can mean (lowest is 0, n_layer's 1); a per-layer
#: list is bounded item by item.  Layer counts are bounded again by n_layer.
_BOUNDS = {
    "n_layer": MAX_LAYERS,
    **dict.fromkeys(("n_head", "n_head_kv", "n_expert", "n_expert_used"), MAX_MANY),
    "n_expert_shared": MAX_MANY,
    **dict.fromkeys(("leading_dense", "nextn_layers", "shared_kv_layers"), MAX_LAYERS),
    **dict.fromkeys(("sliding_window", "n_ctx_train"), MAX_TOKENS),
}
_LAYER_NUMBER = re.compile(r"[0-9]+")
_LAYER_RANGE = re.compile(r"([0-9]+)\s*(?:\.\.\s*([0-9]+))?")
#: Projections whose outputs a KV cache holds (GQA K/V, fused QKV, MLA's compressed KV).
_KV_WEIGHT = re.compile(r"\.attn_(k|v|qkv|kv_a_mqa|kv_b|k_b|v_b)\.weight$")
#: the same in Hugging Face names (quantized ones end in .qweight, .weight_packed, ...)
_KV_WEIGHT_HF = re.compile(r"\.self_attn\.(k_proj|v_proj|qkv_proj|kv_a_proj_with_mqa|kv_b_proj)\.")
_DELTANET_ARCHS = {"qwen3next", "qwen35", "qwen35moe", "qwen3_next", "qwen3_5", "qwen3_5_moe"}
#: where a missing hyperparameter comes from, by profile format (the GGUF key, config.json's)
_WHERE = {
    "gguf": {
        "n_head": "{arch}.attention.head_count",
        "rope_dim": "{arch}.rope.dimension_count",
        "key_length": "{arch}.attention.key_length",
        "ssm": "{arch}.ssm.*",
        "from": "the GGUF",
    },
    "safetensors": {
        "n_head": "num_attention_heads in config.json",
        "rope_dim": "qk_rope_head_dim in config.json",
        "key_length": "head_dim in config.json",
        "ssm": "linear_* in config.json",
        "from": "config.json",
    },
}
Format = Literal["gguf", "safetensors"]
_PLAIN_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
MAX_DIMS_GGUF = 4  # GGML_MAX_DIMS
MAX_DIMS = 8  # safetensors: checkpoints have up to 5 (video patch embeddings)

SCHEMA_VERSION = 1
SCHEMA_COMMENT = "# yaml-language-server: $schema=../schema/profile.schema.json"

__all__ = ["Folded", "HParams", "Profile", "Tensor", "dump_profile", "fold", "load_profile"]


def _layer_list(value: object) -> object:
    if isinstance(value, str):
        beyond = _beyond(value, MAX_LAYERS)
        if beyond is not None:  # refused before '0..999999999' is unfolded
            raise ValueError(f"layer {beyond} is beyond any model (at most {MAX_LAYERS} layers)")
        try:
            return parse_layers(value)
        except LayerSetError as exc:
            raise ValueError(str(exc)) from None
    return value


LayerList = Annotated[
    tuple[int, ...],
    BeforeValidator(_layer_list),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "array", "items": {"type": "integer", "minimum": 0}},
                {"type": "string", "pattern": r"^[0-9., ]+$"},
            ],
            "description": "layer indexes: a list, or a set like '0..4,6..10'",
        }
    ),
]
Count = Annotated[int, Field(ge=0)]
PerLayer = Count | tuple[Count, ...]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class HParams(_Strict):
    """Hyperparameters normalised across architectures; absent = not applicable."""

    n_layer: int = Field(ge=1, description="blocks (blk.0 .. blk.N-1), nextn/MTP included")
    n_embd: Count | None = None
    n_head: PerLayer | None = Field(None, description="int, or one value per layer")
    n_head_kv: PerLayer | None = Field(None, description="int, or one value per layer")
    key_length: Count | None = Field(None, description="K head size (global layers)")
    value_length: Count | None = Field(None, description="V head size (global layers)")
    key_length_swa: Count | None = Field(None, description="K head size on sliding layers")
    value_length_swa: Count | None = Field(None, description="V head size on sliding layers")
    q_lora_rank: Count | None = None
    kv_lora_rank: Count | None = Field(None, description="MLA compressed KV rank")
    rope_dim: Count | None = Field(None, description="MLA: rope part of K (cached beside kv)")
    n_ff: PerLayer | None = Field(None, description="dense FFN size")
    n_expert: Count | None = None
    n_expert_used: Count | None = None
    n_expert_shared: Count | None = None
    expert_ff: Count | None = None
    expert_shared_ff: Count | None = None
    leading_dense: Count | None = Field(None, description="number of leading dense layers")
    nextn_layers: Count | None = Field(None, description="trailing nextn/MTP layers")
    sliding_window: Count | None = None
    swa_layers: LayerList | None = Field(None, description="sliding-window layers")
    shared_kv_layers: Count | None = Field(None, description="trailing layers reusing KV")
    recurrent_layers: LayerList | None = Field(None, description="DeltaNet/Mamba layers")
    ssm_conv_kernel: Count | None = None
    ssm_state_size: Count | None = None
    ssm_inner_size: Count | None = None
    ssm_group_count: Count | None = None
    ssm_time_step_rank: Count | None = None
    vocab: Count | None = None
    n_ctx_train: Count | None = None
    rope_positions: Count | None = Field(
        None,
        description="safetensors: positions of the rotary cos/sin cache vLLM builds "
        "(max_position_embeddings; YaRN: original_max_position_embeddings x factor)",
    )
    dtype: str | None = Field(
        None,
        pattern=_PLAIN_NAME,
        description="safetensors: the checkpoint's torch_dtype (vLLM's default KV cache dtype)",
    )
    quantization: str | None = Field(
        None,
        pattern=_PLAIN_NAME,
        description="safetensors: quantization_config.quant_method (fp8, mxfp4, awq, ...)",
    )


class FileEntry(_Strict):
    name: str = Field(description="GGUF or safetensors file name (one per shard)")
    size: Count = Field(description="file size in bytes")


class TensorEntry(_Strict):
    name: str = Field(description="tensor name; blk.{A..B}.rest folds identical layers")
    type: str = Field(
        description="ggml type name: f32, q4_0, q6_k, iq3_ks, ...; with format safetensors, "
        "the safetensors dtype in lower case: bf16, f8_e4m3, u8, ..."
    )
    shape: tuple[Annotated[int, Field(ge=0)], ...] = Field(
        max_length=MAX_DIMS,
        description="GGUF: ggml order (ne0 first), 1 to 4 dimensions of at least 1; "
        "safetensors: as the header writes it (outermost first)",
    )
    bytes: Count = Field(description="bytes of one tensor (not of the whole folded run)")


class ProfileSchema(_Strict):
    """The profile file format (``layouts/schema/profile.schema.json``)."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        defer_build=True,
        populate_by_name=True,
        title="layoutgen model profile",
        json_schema_extra={"$id": "https://layoutgen.invalid/schema/profile.schema.json"},
    )

    version: Literal[1] = Field(alias="schema", description="profile format version")
    name: str
    arch: str = Field(description="general.architecture of the GGUF, or config.json's model_type")
    format: Format = Field(
        "gguf", description="what the tensors are stored as: gguf (default) or safetensors"
    )
    source: str = Field(description="where every number came from")
    files: tuple[FileEntry, ...] = ()
    hparams: HParams
    tensors: tuple[TensorEntry, ...] = Field(min_length=1)


@dataclass(frozen=True)
class ModelFile:
    name: str
    size: int


@dataclass(frozen=True)
class Profile:
    """A loaded, checked profile: plain frozen data for the solver."""

    name: str
    arch: str
    source: str
    hparams: HParams
    entries: tuple[Folded, ...]
    files: tuple[ModelFile, ...] = ()
    format: Format = "gguf"

    def tensors(self) -> Iterator[Tensor]:
        """Every tensor, unfolded: name, type, shape, nbytes (and ``.layer``)."""
        return iter(self._unfolded)

    def __hash__(self) -> int:
        # the solver's caches are keyed by profile: hashed once, not per lookup
        return self._hash

    @cached_property
    def _hash(self) -> int:
        return hash(
            (self.name, self.arch, self.source, self.hparams, self.entries, self.files, self.format)
        )

    def __getstate__(self) -> dict[str, object]:
        # the cached values stay behind: a str hash differs in every process
        # (PYTHONHASHSEED), and the profile cache keeps only the fields
        return {k: v for k, v in self.__dict__.items() if k not in ("_hash", "_unfolded")}

    @cached_property
    def _unfolded(self) -> tuple[Tensor, ...]:
        # unfolded once per profile: the solver walks the tensors once per service
        # and placement, and expanding the folded names was most of that walk
        return tuple(
            Tensor(name, e.type, e.shape, e.nbytes)
            for e in self.entries
            for name in expand_name(e.name)
        )

    @property
    def total_bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors())


def json_schema() -> dict[str, Any]:
    schema = ProfileSchema.model_json_schema(by_alias=True)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return schema


def load_profile(path: Path, name: str | None = None) -> Profile:
    """Read, validate and check one profile; problems raise :class:`InvalidInput`."""
    return profile_from_document(source.load(path, name))


def profile_from_document(doc: source.Document) -> Profile:
    from layoutgen.inputs.schema_errors import validate_mapping

    parsed = validate_mapping(
        doc,
        ProfileSchema,
        "a profile is a mapping with keys schema, name, arch, source, hparams and tensors",
    )
    problems = check(parsed) or required(parsed)
    if problems:
        raise InvalidInput([doc.diagnostic(p) for p in problems])
    return Profile(
        name=parsed.name,
        arch=parsed.arch,
        source=parsed.source,
        hparams=parsed.hparams,
        entries=tuple(Folded(t.name, t.type.lower(), t.shape, t.bytes) for t in parsed.tensors),
        files=tuple(ModelFile(f.name, f.size) for f in parsed.files),
        format=parsed.format,
    )


def check(parsed: ProfileSchema) -> list[Problem]:
    """Semantic checks on a schema-valid profile, located by spec path."""
    problems = _check_bounds(parsed.hparams)
    n_layer = parsed.hparams.n_layer
    seen: dict[str, int] = {}
    total = 0
    for i, entry in enumerate(parsed.tensors):
        at = ("tensors", i)
        beyond = _beyond(_layer_set(entry.name), n_layer - 1)
        if beyond is not None:  # measured before unfolding: blk.{0..999999999} is refused
            problems.append(Problem((*at, "name"), _beyond_n_layer(i, beyond, n_layer)))
            continue
        total += _count(entry.name)
        if total > MAX_TENSORS:
            problems.append(
                Problem(
                    (*at, "name"),
                    f"tensors[{i}].name: more than {MAX_TENSORS} tensors once unfolded "
                    "(the largest models have about 2000); check the layer sets",
                )
            )
            return problems
        try:
            names = expand_name(entry.name)
        except LayerSetError as exc:
            problems.append(Problem((*at, "name"), f"tensors[{i}].name: {exc}"))
            continue
        problems.extend(
            _check_shape(i, entry, parsed.format) or _check_bytes(i, entry, parsed.format)
        )
        for name in names:
            first = seen.setdefault(name, i)
            if first != i:
                problems.append(
                    Problem(
                        (*at, "name"),
                        f"tensors[{i}].name: {name!r} is "
                        f"already listed by tensors[{first}]; list it once",
                    )
                )
                break
        layer = Tensor(names[-1], "", (), 0).layer
        if layer is not None and layer >= n_layer:
            problems.append(Problem((*at, "name"), _beyond_n_layer(i, layer, n_layer)))
    problems.extend(_check_hparams(parsed.hparams))
    return problems


def _beyond_n_layer(i: int, layer: int, n_layer: int) -> str:
    return (
        f"tensors[{i}].name: layer {layer} is beyond hparams.n_layer {n_layer} "
        f"(blk.0 .. blk.{n_layer - 1})"
    )


def _beyond(text: str, highest: int) -> int | None:
    """The first number in ``text`` above ``highest`` (digits compared before converting)."""
    for m in _LAYER_NUMBER.finditer(text):
        digits = m.group().lstrip("0") or "0"
        if len(digits) > 6 or int(digits) > highest:
            return int(digits) if len(digits) <= 40 else highest + 1
    return None


def _layer_set(name: str) -> str:
    """What is inside the braces of a folded name (``""`` for a plain name)."""
    start = name.find("{")
    return "" if start < 0 else name[start + 1 : name.find("}", start)]


def _count(name: str) -> int:
    """Tensors a folded name stands for, without unfolding it (its numbers are bounded)."""
    total = 0
    for m in _LAYER_RANGE.finditer(_layer_set(name)):
        a, b = int(m.group(1)), int(m.group(2) or m.group(1))
        total += max(b - a + 1, 1)
    return max(total, 1)


def _check_bounds(hp: HParams) -> list[Problem]:
    """Numbers beyond what any model has: refused before later stages loop over them."""
    problems: list[Problem] = []
    for key, value in hp:
        if value is None or key in ("swa_layers", "recurrent_layers") or isinstance(value, str):
            continue
        highest = _BOUNDS.get(key, MAX_WIDTH)
        items = value if isinstance(value, tuple) else (value,)  # a list's length: n_layer's
        too_big = [v for v in items if v > highest]
        if too_big:
            problems.append(
                Problem(
                    ("hparams", key),
                    f"hparams.{key}: {too_big[0]} is more than any model has (at most {highest}); "
                    "write the value from the GGUF",
                )
            )
    return problems


def required(parsed: ProfileSchema) -> list[Problem]:
    """Hyperparameters the memory model needs, given the K/V and state tensors listed.

    Checked once the profile is otherwise consistent: a missing one would
    make a KV cache or recurrent state count as zero bytes.
    """
    hp, arch = parsed.hparams, parsed.arch
    where = {k: v.format(arch=arch) for k, v in _WHERE[parsed.format].items()}
    kv_weight = _KV_WEIGHT if parsed.format == "gguf" else _KV_WEIGHT_HF
    recurrent = set(hp.recurrent_layers or ())
    missing: list[tuple[list[str], str]] = []
    attention = any(kv_weight.search(t.name) for t in parsed.tensors)
    if attention and len(recurrent) < hp.n_layer:
        heads = hp.n_head if isinstance(hp.n_head, tuple) else (hp.n_head or 0,)
        if not any(heads):
            missing.append((["n_head"], f"the attention heads ({where['n_head']})"))
        if hp.kv_lora_rank:
            if hp.rope_dim is None:
                why = f"the rope part of MLA's cached K ({where['rope_dim']})"
                missing.append((["rope_dim"], why))
        elif not hp.key_length and not hp.n_embd:
            why = (
                f"the K head size ({where['key_length']}), or n_embd to derive it "
                "as n_embd / n_head"
            )
            missing.append((["key_length"], why))
    if recurrent:
        state = ["ssm_conv_kernel", "ssm_state_size", "ssm_inner_size"]
        if arch in _DELTANET_ARCHS:
            state += ["ssm_group_count", "ssm_time_step_rank"]
        absent = [key for key in state if not getattr(hp, key)]
        if absent:
            missing.append((absent, f"the recurrent state sizes ({where['ssm']})"))
    return [
        Problem(
            ("hparams", keys[0]),
            f"hparams: missing {', '.join(repr(k) for k in keys)}: {why}, which the memory "
            "model needs; write " + ("it" if len(keys) == 1 else "them") + f" from {where['from']}",
        )
        for keys, why in missing
    ] or _check_sizes(parsed, where["from"], attention)


#: sizes that are a width, a count of heads or of experts: never 0 where they are written
#: (0 means nothing in a GGUF; leave the key out when the model has none)
_NONZERO = (
    "n_embd",
    "key_length",
    "value_length",
    "key_length_swa",
    "value_length_swa",
    "q_lora_rank",
    "kv_lora_rank",
    "n_expert",
    "n_expert_used",
    "expert_ff",
    "expert_shared_ff",
    "sliding_window",
    "vocab",
)
#: a checkpoint's torch_dtype as vLLM reads it (what a KV cache "auto" is stored in)
TORCH_DTYPES = ("bfloat16", "float16", "float32", "half", "float")
_GGUF_K = re.compile(r"^blk\.(\d+)\.attn_([kv])\.weight$")


def _check_sizes(parsed: ProfileSchema, source: str, attention: bool) -> list[Problem]:
    """Sizes the solver multiplies by, as it will use them: not zero, experts used
    within the experts there are, and K/V widths equal to the K/V tensors' own (a
    smaller width would plan a KV cache smaller than the runtime allocates)."""
    hp = parsed.hparams
    out: list[Problem] = []
    for key in _NONZERO:
        if getattr(hp, key) == 0:
            out.append(
                Problem(
                    ("hparams", key),
                    f"hparams.{key}: 0 is no size; write the value from {source}, or leave "
                    "the key out if the model has none",
                )
            )
    for key in ("n_head", "n_head_kv"):
        if attention and getattr(hp, key) == 0:  # per layer, 0 marks a layer without attention
            out.append(
                Problem(
                    ("hparams", key),
                    f"hparams.{key}: 0 heads, yet the profile lists K/V tensors; write the "
                    f"value from {source}",
                )
            )
    if hp.dtype is not None and hp.dtype.lower() not in TORCH_DTYPES:
        out.append(
            Problem(
                ("hparams", "dtype"),
                f"hparams.dtype: {hp.dtype!r} is not a dtype vLLM loads a model in; write "
                f"one of {', '.join(TORCH_DTYPES)} (the checkpoint's torch_dtype)",
            )
        )
    if hp.n_expert and hp.n_expert_used and hp.n_expert_used > hp.n_expert:
        out.append(
            Problem(
                ("hparams", "n_expert_used"),
                f"hparams.n_expert_used: {hp.n_expert_used} experts used of {hp.n_expert}; "
                f"write the values from {source}",
            )
        )
    if out or parsed.format != "gguf":
        return out
    return _check_widths(parsed, source)


def _check_widths(parsed: ProfileSchema, source: str) -> list[Problem]:
    """MLA rank and K/V head sizes against the tensors that hold them (GGUF names)."""
    hp = parsed.hparams
    swa = set(hp.swa_layers or ())
    shapes: dict[str, tuple[int, ...]] = {}
    for entry in parsed.tensors:
        for name in expand_name(entry.name):
            shapes[name] = tuple(entry.shape)
    out: list[Problem] = []
    seen: set[str] = set()

    def differs(key: str, value: int, tensor: str, dim: int, width: int) -> None:
        if key not in seen:
            seen.add(key)
            out.append(
                Problem(
                    ("hparams", key),
                    f"hparams.{key}: {value} does not match {tensor} (dimension {dim} is "
                    f"{width}); write the value from {source}",
                )
            )

    rank, rope = hp.kv_lora_rank, hp.rope_dim or 0
    for name, shape in sorted(shapes.items()):
        if rank and name.endswith(".attn_kv_a_norm.weight") and shape[0] != rank:
            differs("kv_lora_rank", rank, name, 0, shape[0])
        mqa = name.endswith(".attn_kv_a_mqa.weight") and len(shape) > 1
        if rank and mqa and shape[1] != rank + rope:
            differs("kv_lora_rank", rank, f"{name} (kv_lora_rank + rope_dim)", 1, shape[1])
        m = _GGUF_K.match(name)
        if m is None or rank or len(shape) < 2:
            continue
        il, kv = int(m.group(1)), m.group(2)
        heads = hp.n_head_kv[il] if isinstance(hp.n_head_kv, tuple) else hp.n_head_kv
        if kv == "k":
            key, size = "key_length", hp.key_length
            if il in swa and hp.key_length_swa:
                key, size = "key_length_swa", hp.key_length_swa
        else:
            key, size = "value_length", hp.value_length
            if il in swa and hp.value_length_swa:
                key, size = "value_length_swa", hp.value_length_swa
        if heads and size and shape[1] != heads * size:
            differs(key, size, f"{name} (n_head_kv x {key})", 1, shape[1])
    return out


def _check_shape(i: int, entry: TensorEntry, fmt: Format) -> list[Problem]:
    """GGUF tensors have 1 to 4 dimensions of at least 1 (ggml's rules); safetensors any."""
    if fmt != "gguf":
        return []
    at = ("tensors", i, "shape")
    if not 1 <= len(entry.shape) <= MAX_DIMS_GGUF:
        return [
            Problem(
                at,
                f"tensors[{i}].shape: {len(entry.shape)} dimensions; a GGUF tensor has 1 to "
                f"{MAX_DIMS_GGUF} (write format: safetensors for a safetensors checkpoint)",
            )
        ]
    if min(entry.shape) < 1:
        return [
            Problem(
                (*at, entry.shape.index(0)),
                f"tensors[{i}].shape: a GGUF dimension must be at least 1, got 0",
            )
        ]
    return []


def _check_bytes(i: int, entry: TensorEntry, fmt: Format = "gguf") -> list[Problem]:
    known, size = (
        (quants.known, quants.tensor_nbytes)
        if fmt == "gguf"
        else (quants.safetensors_known, quants.safetensors_nbytes)
    )
    if not known(entry.type):
        return []  # a type layoutgen cannot size: the written bytes are taken as they are
    try:
        expected = size(entry.type, entry.shape)
    except quants.UnknownType as exc:
        return [Problem(("tensors", i, "shape"), f"tensors[{i}].shape: {exc}")]
    if expected == entry.bytes:
        return []
    shape = ", ".join(str(d) for d in entry.shape)
    return [
        Problem(
            ("tensors", i, "bytes"),
            f"tensors[{i}].bytes: {entry.bytes} does not "
            f"match {entry.type.lower()} [{shape}], which is {expected} bytes; "
            f"write {expected}, or fix the type or shape",
        )
    ]


def _check_hparams(hp: HParams) -> list[Problem]:
    problems: list[Problem] = []
    for key in ("n_head", "n_head_kv", "n_ff"):
        value = getattr(hp, key)
        if isinstance(value, tuple) and len(value) != hp.n_layer:
            problems.append(
                Problem(
                    ("hparams", key),
                    f"hparams.{key}: {len(value)} values for "
                    f"{hp.n_layer} layers; write one per layer, or one number",
                )
            )
    for key in ("swa_layers", "recurrent_layers"):
        layers = getattr(hp, key) or ()
        beyond = [n for n in layers if n >= hp.n_layer]
        if beyond:
            problems.append(
                Problem(
                    ("hparams", key),
                    f"hparams.{key}: layer {beyond[0]} is beyond n_layer {hp.n_layer}",
                )
            )
    return problems


def dump_profile(profile: Profile) -> str:
    """Deterministic YAML for a profile, in the committed files' layout."""
    from layoutgen.models.profile_yaml import render

    return render(profile, SCHEMA_COMMENT)
