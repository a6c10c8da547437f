"""``layoutgen inspect DIR``: a profile from a Hugging Face model directory, headers only.

Reads ``config.json`` (hyperparameters, :mod:`layoutgen.models.hf_hparams`),
``model.safetensors.index.json`` (or a single ``model.safetensors``) and each
shard's safetensors header (:mod:`layoutgen.models.safetensors_header`); no
tensor data.  The profile has ``format: safetensors``: types are the
lower-cased safetensors dtypes, shapes as the headers write them (outermost
first), bytes exact from dtype and shape (checked against ``data_offsets``).

Names.  The text decoder's per-layer tensors ``<prefix>.layers.N.<rest>``
(prefix ``model``, ``model.language_model``, ``language_model.model``,
``language_model`` or ``model.text_model``, the first of these the checkpoint
uses) are written ``blk.N.<rest>``, so that layers fold and place as in GGUF
profiles; every other tensor keeps its name (embeddings, ``lm_head``, vision
towers, ``mtp.*``).  The profile's ``source:`` states the prefix, so the
mapping can be undone.  Decoder layers past ``num_hidden_layers`` are nextn/MTP
layers (DeepSeek-V3, GLM-4.5 keep them there); more of them than the config's
``num_nextn_predict_layers`` is an error naming the tensor.

Bounded input: config.json at most 16 MiB and the index at most 100 MB of JSON
objects; the index's ``weight_map`` may name only plain file names in the
directory, and a name that is a symbolic link must stay inside it (or, in the
Hugging Face cache, inside the snapshot's ``blobs/``); every tensor the index
lists must be in its shard, none in two shards; at most 100,000 tensors in
all (the profile's bound).  Output is deterministic: entries in natural name
order, shards in name order.

Speed.  Where the index lists at least :data:`PARALLEL_FROM` tensors, the
shards are read by forked copies of this process (:mod:`layoutgen.models.forked`),
each a run of them; the results are put together in shard order, and the
errors that involve several shards are found there, so the profile and the
first error are those of a reader going shard by shard.
"""

from __future__ import annotations

import gc
import re
from collections import Counter
from operator import itemgetter
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from layoutgen.models import forked
from layoutgen.models.hf_hparams import ConfigFacts, facts
from layoutgen.models.inputs import NotRegularFile, open_regular
from layoutgen.models.profile import MAX_TENSORS, HParams, ModelFile, Profile
from layoutgen.models.safetensors_header import (
    MAX_HEADER,
    SafetensorsError,
    TensorKind,
    json_object,
    read_header,
)
from layoutgen.models.tensors import Folded, format_layers

CONFIG = "config.json"
INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"
CONFIG_MAX = 16 << 20
_PREFIXES = (
    "model",
    "model.language_model",
    "language_model.model",
    "language_model",
    "model.text_model",
)
_LAYER = re.compile(
    r"(?P<p>" + "|".join(re.escape(p) for p in _PREFIXES) + r")\.layers\."
    r"(?P<n>0|[1-9][0-9]{0,8})\.(?P<rest>.+)\Z"
)
_MTP = re.compile(r"mtp\.layers\.(0|[1-9][0-9]{0,3})\.")
_FILE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,254}\Z")
_DIGITS = re.compile(r"([0-9]+)")
_NAME_MAX = 256
#: (prefix, rest, (dtype, shape, bytes)) -> layers
_Key = tuple[str, str, TensorKind]


def inspect_dir(root: Path, jobs: int | None = None) -> Profile:
    """The profile of the Hugging Face model directory ``root``; its shards are read by
    up to ``jobs`` processes (default: one per core, at most :data:`MOST_JOBS`, where
    there are enough tensors to pay for a fork: :mod:`layoutgen.models.forked`).  The
    profile, or the first error, is the same for any number."""
    # The headers' JSON makes ~100,000 small dicts and lists and no cycles: the
    # cyclic collector would only walk them again and again (~15 % of the time).
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _inspect(root, jobs)
    finally:
        if enabled:
            gc.enable()


#: Tensors in an index from which its shards are read in parallel: below this,
#: forking costs more than it saves.
PARALLEL_FROM = 4096
#: At most this many processes: each fork costs the parent a millisecond or two
#: before it reads its own part, and ten shards gain little past a few cores.
MOST_JOBS = 8
#: What one shard gives: file size, names the index does not list in it (header
#: order), its own first error (a tensor the index lists there but it lacks, else
#: a name profiles keep for layers), layer groups, other tensors, the deepest layer
#: and its tensor, and its tensor count.  Plain data, so that a worker can send it.
_Shard = tuple[
    int,
    tuple[str, ...],
    str | None,
    dict[_Key, list[int]],
    list[tuple[str, TensorKind]],
    tuple[int, str],
    int,
]


def _inspect(root: Path, jobs: int | None) -> Profile:
    allowed = _allowed(root)
    config = _json(root, CONFIG, CONFIG_MAX, allowed)
    known = facts(config, str(root / CONFIG))
    files, weight_map = _shards(root, allowed)
    counts = Counter(weight_map.values()) if weight_map is not None else Counter()

    def read(file: str) -> _Shard:
        return _shard(root, file, allowed, weight_map, counts[file])

    if jobs is None:
        big = weight_map is not None and len(weight_map) >= PARALLEL_FROM
        jobs = min(forked.cores(), MOST_JOBS) if big else 1
    groups: dict[_Key, list[int]] = {}
    singles: list[Folded] = []
    deepest = (-1, "")
    unlisted: dict[str, str] = {}  # tensors in a shard the index does not name: -> shard
    count = 0
    sizes = []
    # pydantic builds HParams' validator on first use (~30 ms): built while workers read
    outcomes = forked.fork_map(read, files, jobs, meanwhile=_hparams_validator)
    for file, (ok, got) in zip(files, outcomes, strict=False):
        if not ok:
            raise SafetensorsError(got)
        size, odd, error, shard_groups, shard_singles, shard_deepest, shard_count = got
        sizes.append(ModelFile(file, size))
        for name in odd:  # checked against the shards before: in shard order
            _unlisted(root, file, name, weight_map or {}, unlisted)
        if error is not None:
            raise SafetensorsError(error)
        for key, layers in shard_groups.items():
            known_layers = groups.get(key)
            if known_layers is None:
                groups[key] = layers
            else:
                known_layers.extend(layers)
        singles.extend(Folded(name, *kind) for name, kind in shard_singles)
        if shard_deepest[0] > deepest[0]:
            deepest = shard_deepest
        count += shard_count
    if not count:
        raise SafetensorsError(f"{root}: the checkpoint holds no tensors")
    if count > MAX_TENSORS:
        raise SafetensorsError(
            f"{root}: the checkpoint has {count} tensors; a profile holds at most {MAX_TENSORS}"
        )
    prefix = next((p for p in _PREFIXES if any(k[0] == p for k in groups)), None)
    entries = _entries(groups, singles, prefix)
    # Qwen3-Next/3.5 keep their MTP layer apart (mtp.layers.K.*), not past the decoder
    mtp = max((int(m[1]) + 1 for t in singles if (m := _MTP.match(t.name))), default=0)
    hparams = _hparams(root, known, deepest if prefix else (-1, ""), mtp)
    return Profile(
        name=_name(root),
        arch=known.arch,
        source=_source(root, known, prefix, len(files), weight_map is not None),
        hparams=hparams,
        entries=entries,
        files=tuple(sizes),
        format="safetensors",
    )


def _shard(
    root: Path,
    file: str,
    allowed: tuple[Path, ...],
    weight_map: dict[str, str] | None,
    listed: int,
) -> _Shard:
    """One shard's header, checked against the index (``listed``: how many tensors
    the index puts in it), its tensors grouped by layer.  Errors that depend on
    other shards are left to the caller, which sees the shards in order."""
    shown = str(root / file)
    _inside(root / file, shown, allowed)
    header = read_header(root / file, shown)
    odd: tuple[str, ...] = ()
    error = None
    if weight_map is not None:  # else a single file: JSON names are unique
        # the index's file for each tensor here, in C-level passes (names in a
        # header are unique: ``here`` counts this file's listed tensors present)
        names = list(map(itemgetter(0), header.tensors))
        here = list(map(weight_map.get, names)).count(file)
        if here != len(names):  # the slow way, for the message
            odd = tuple(name for name in names if weight_map.get(name) != file)
        if here != listed and (absent := _absent(file, weight_map, set(names))):
            error = f"{shown}: tensor {absent!a} is listed in {INDEX} but not in this file"
    groups: dict[_Key, list[int]] = {}
    singles: list[tuple[str, TensorKind]] = []
    deepest = (-1, "")
    match = _LAYER.match
    for name, kind in header.tensors:
        m = match(name)
        if m is None:
            if name.startswith("blk.") and error is None:
                error = (
                    f"{shown}: tensor {name!r} starts with 'blk.', which profiles keep "
                    "for the decoder's layers"
                )
            singles.append((name, kind))
            continue
        prefix, number, rest = m.groups()
        layer = int(number)
        key = (prefix, rest, kind)
        layers = groups.get(key)
        if layers is None:
            groups[key] = [layer]
        else:
            layers.append(layer)
        if layer > deepest[0]:
            deepest = (layer, name)
    return (header.file_size, odd, error, groups, singles, deepest, len(header.tensors))


def _resolve(path: Path, shown: str) -> Path:
    """``path`` with every symbolic link followed; a loop (Python 3.11 raises
    RuntimeError, later ones OSError) is a one-line error, not a traceback."""
    try:
        return path.resolve()
    except (RuntimeError, OSError):
        raise SafetensorsError(
            f"{shown}: a loop of symbolic links (or links too deep to follow); "
            "point it at the file itself"
        ) from None


def _allowed(root: Path) -> tuple[Path, ...]:
    """Where files may resolve: the directory, and a Hugging Face cache's blobs/."""
    real = _resolve(root, str(root))
    if real.parent.name == "snapshots":
        return real, real.parent.parent / "blobs"
    return (real,)


def _inside(path: Path, shown: str, allowed: tuple[Path, ...]) -> None:
    real = _resolve(path, shown)
    if not any(real.is_relative_to(a) for a in allowed):
        raise SafetensorsError(
            f"{shown}: is a symbolic link to {ascii(str(real))[1:-1]}, outside the model "
            "directory; layoutgen reads only files inside it"
        )


def _json(root: Path, name: str, limit: int, allowed: tuple[Path, ...]) -> dict[str, Any]:
    path, shown = root / name, str(root / name)
    try:
        f = open_regular(path)
    except FileNotFoundError:
        hint = "; a Hugging Face model directory has config.json beside its safetensors"
        raise SafetensorsError(f"{shown}: no such file{hint if name == CONFIG else ''}") from None
    except NotRegularFile as exc:
        raise SafetensorsError(f"{shown}: is {exc.kind}, not a regular file") from None
    except OSError as exc:
        raise SafetensorsError(f"{shown}: cannot read: {exc.strerror or exc}") from None
    with f:
        _inside(path, shown, allowed)
        data = f.read(limit + 1)
    if len(data) > limit:
        raise SafetensorsError(f"{shown}: larger than the {limit:,} bytes layoutgen reads")
    doc: dict[str, Any] = json_object(shown, data)
    return doc


def _shards(root: Path, allowed: tuple[Path, ...]) -> tuple[list[str], dict[str, str] | None]:
    """The shard file names (sorted) and the index's weight_map (None: a single file)."""
    if not (root / INDEX).exists() and not (root / INDEX).is_symlink():
        if (root / SINGLE).exists() or (root / SINGLE).is_symlink():
            return [SINGLE], None
        raise SafetensorsError(
            f"{root}: has no {INDEX} or {SINGLE}; layoutgen reads Hugging Face checkpoints "
            "in safetensors"
        )
    shown = str(root / INDEX)
    weight_map = _json(root, INDEX, MAX_HEADER, allowed).get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise SafetensorsError(f"{shown}: no weight_map object of tensor names and files")
    if set(map(type, weight_map.values())) != {str}:
        tensor, file = next((t, f) for t, f in weight_map.items() if type(f) is not str)
        raise SafetensorsError(
            f"{shown}: weight_map gives {ascii(file)[:80]} for tensor {ascii(tensor)[:80]}; "
            "expected a file name"
        )
    files = sorted(set(weight_map.values()))
    for file in files:
        if not _FILE.match(file):
            raise SafetensorsError(
                f"{shown}: weight_map names the file {ascii(file)[:80]}; expected a file name "
                "in this directory (no '/', no leading '.')"
            )
        if not (root / file).exists():
            raise SafetensorsError(f"{root / file}: missing shard (named in {INDEX})")
    return files, weight_map


def _unlisted(
    root: Path, file: str, name: str, weight_map: dict[str, str], seen: dict[str, str]
) -> None:
    """A tensor the index does not list in ``file``.

    One the index lists in another shard is an error; one it does not list at
    all is kept (the loaders read every tensor of a shard), once.
    """
    other = weight_map.get(name)
    if other is not None:
        raise SafetensorsError(
            f"{root / file}: tensor {name!r} is listed in {INDEX} in {other}, not in this file"
        )
    first = seen.setdefault(name, file)
    if first != file:
        raise SafetensorsError(f"{root / file}: tensor {name!r} is in {first} too")


def _absent(file: str, weight_map: dict[str, str], here: set[str]) -> str | None:
    """The first tensor the index lists in ``file`` that is not there."""
    return next((t for t, listed in weight_map.items() if listed == file and t not in here), None)


def _entries(
    groups: dict[_Key, list[int]], singles: list[Folded], prefix: str | None
) -> tuple[Folded, ...]:
    out = list(singles)
    for (p, rest, (dtype, shape, nbytes)), layers in groups.items():
        if p != prefix:  # another model's layers (a second decoder): names kept
            out.extend(Folded(f"{p}.layers.{n}.{rest}", dtype, shape, nbytes) for n in layers)
            continue
        layers.sort()
        name = (
            f"blk.{layers[0]}.{rest}"
            if len(layers) == 1
            else f"blk.{{{format_layers(layers)}}}.{rest}"
        )
        out.append(Folded(name, dtype, shape, nbytes))
    return tuple(sorted(out, key=lambda e: _natural(e.name.replace("{", "", 1))))


def _natural(name: str) -> tuple[Any, ...]:
    """blk.2 before blk.10, experts.9 before experts.10 (digits compared as numbers)."""
    return tuple(int(p) if i % 2 else p for i, p in enumerate(_DIGITS.split(name)))


def _hparams(root: Path, known: ConfigFacts, deepest: tuple[int, str], mtp: int = 0) -> HParams:
    """``mtp``: MTP layers stored under their own prefix (``mtp.layers.K``); they count
    as nextn layers after the decoder's, as MTP layers past num_hidden_layers do."""
    fields = dict(known.fields)
    layer, tensor = deepest
    where = root / CONFIG
    if known.n_hidden is None:
        n_layer = max(layer + 1, 1)
    else:
        extra = max(layer + 1 - known.n_hidden, min(mtp, known.nextn_max), 0)
        if extra > known.nextn_max:
            raise SafetensorsError(
                f"{root}: tensor {tensor!r} is in layer {layer}, but {where} says "
                f"{known.n_hidden} layers (num_hidden_layers) and {known.nextn_max} "
                "nextn/MTP layers"
            )
        n_layer = known.n_hidden + extra
        if known.nextn_max:
            fields["nextn_layers"] = extra
    fields["n_layer"] = n_layer
    try:
        return HParams.model_validate(fields)
    except ValidationError as exc:  # the reads in hf_hparams leave nothing for pydantic
        first = exc.errors()[0]
        at = ".".join(str(p) for p in first["loc"])
        raise SafetensorsError(f"{where}: hyperparameter {at}: {first['msg']}") from None


def _hparams_validator() -> None:
    HParams.model_validate({"n_layer": 1})


def _name(root: Path) -> str:
    real = _resolve(root, str(root))
    name = real.name
    if real.parent.name == "snapshots":  # the Hugging Face cache: models--org--name
        name = real.parent.parent.name.removeprefix("models--").replace("--", "/")
    if not name or len(name) > _NAME_MAX or not name.isprintable():
        raise SafetensorsError(
            f"{root}: the directory's name is not a model name (at most {_NAME_MAX} printable "
            "characters); rename it"
        )
    return name


def _source(root: Path, known: ConfigFacts, prefix: str | None, shards: int, index: bool) -> str:
    read = f"{CONFIG}, {INDEX} and" if index else f"{CONFIG} and"
    lines = [
        f"layoutgen inspect of {_name(root)} ({read} the headers of {shards} safetensors "
        "file(s); no tensor data read). Bytes from safetensors dtype sizes "
        "(layoutgen/models/quants.py), checked against each header's data_offsets; "
        "shapes as the headers write them (outermost first).",
    ]
    if prefix is not None:
        lines.append(
            f"Tensor names: blk.N.<rest> is the checkpoint's {prefix}.layers.N.<rest>; "
            "every other name is the checkpoint's own."
        )
    if known.missing:
        lines.append(f"Not in {CONFIG}: {', '.join(sorted(set(known.missing)))}.")
    lines.extend(f"Assumed: {d}." for d in known.defaults)
    return "\n".join(lines) + "\n"
