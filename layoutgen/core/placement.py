"""Where each weight tensor lands: the rules both runtimes share, and the questions
each answers for itself (:class:`~layoutgen.core.runtime.Runtime`).

Shared (llama.cpp ``llama_model::load_tensors``, ik_llama.cpp
``create_tensors_helper``; checked against seed 001's logs and the oracles):

- token embeddings stay in host memory, whatever ``-ngl`` says;
- a layer's non-expert tensors, its KV cache and compute live on the device
  the layer is assigned to; the output layer goes to the last device;
- routed-expert tensors go where their ``-ot`` rule sends them;
- nextn/MTP layers are not loaded when MTP is off.

Asked of the runtime: which tensors it loads after all (``Runtime.keeps``),
the name of the host buffer, how layers split over devices.

Pure functions over a profile; every byte figure here is exact (it comes
from the profile), so its basis is "exact".
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from layoutgen.core.rules import remembering
from layoutgen.core.runtime import Runtime
from layoutgen.models.profile import Profile
from layoutgen.models.tensors import Tensor

_EXPERT = re.compile(r"^blk\.(?P<layer>\d+)\.ffn_(?P<kind>up|gate|down|gate_up)_exps\.weight$")


#: the target of a tensor pinned to host RAM (-ot PATTERN=CPU), whatever the
#: runtime names the buffer it lands in
HOST = "host"


@functools.lru_cache(maxsize=1 << 14)  # a few thousand names per profile, asked many times
def expert_layer(name: str) -> int | None:
    """The layer of a routed-expert tensor (what ``--cpu-moe`` moves), else None."""
    m = _EXPERT.match(name)
    return int(m.group("layer")) if m else None


@functools.lru_cache(maxsize=1 << 14)
def expert_kind(name: str) -> tuple[int, str] | None:
    """A routed-expert tensor's layer and kind (up, gate, down, gate_up), else None."""
    m = _EXPERT.match(name)
    return (int(m.group("layer")), m.group("kind")) if m else None


def expert_name(layer: int, kind: str) -> str:
    """The GGUF name of one layer's routed-expert tensor of one kind."""
    return f"blk.{layer}.ffn_{kind}_exps.weight"


def nextn_layers(profile: Profile) -> frozenset[int]:
    hp = profile.hparams
    count = hp.nextn_layers or 0
    return frozenset(range(hp.n_layer - count, hp.n_layer))


@remembering(64)
def loaded(profile: Profile, runtime: Runtime) -> tuple[Tensor, ...]:
    """The tensors the runtime loads (nextn layers are skipped; see the module notes).

    Cached: the solver asks for the same profile's tensors many times, and
    unfolding ~1800 tensors each time dominated solve time.
    """
    nextn = nextn_layers(profile)
    return tuple(t for t in profile.tensors() if runtime.keeps(profile, t, nextn))


def layer_sizes(tensors: Iterable[Tensor]) -> tuple[dict[int, int], int]:
    """Bytes per layer (all its tensors, experts included) and of the output layer.

    This is the size ik_llama.cpp's split uses: it ignores ``-ot`` overrides.
    """
    layers: dict[int, int] = {}
    output = 0
    for t in tensors:
        if t.layer is not None:
            layers[t.layer] = layers.get(t.layer, 0) + t.nbytes
        elif t.name != "token_embd.weight":
            output += t.nbytes
    return layers, output


def split_by_count(
    layers: Sequence[int], devices: Sequence[str], shares: Sequence[float], output: bool = True
) -> dict[int, str]:
    """Split by layer count: layer i goes to the device whose cumulative share covers i/n.

    Mainline llama.cpp's split, and ik_llama.cpp's before its build 4327.

    An offloaded output layer counts as one more layer at the end (it lands on the
    last device): n is ``act_gpu_layers`` = min(-ngl, n_layer + 1), the offloaded
    layers and the output when it is offloaded too.
    """
    if not devices:
        return {}
    n = len(layers) + (1 if output else 0)
    weight = sum(shares)
    bounds: list[float] = []
    acc = 0.0
    for share in shares:
        acc += share / weight
        bounds.append(acc)
    out: dict[int, str] = {}
    for i, layer in enumerate(sorted(layers)):
        x = i / n
        out[layer] = next((devices[d] for d, b in enumerate(bounds) if x < b), devices[-1])
    return out


@dataclass(frozen=True)
class Weights:
    """Every loaded tensor's buffer, and the bytes per buffer."""

    tensor_buffer: dict[str, str]
    buffers: dict[str, int]
    skipped: tuple[str, ...]


def place_weights(
    profile: Profile,
    runtime: Runtime,
    layer_device: Mapping[int, str],
    expert_device: Mapping[int, str],
    host: str,
    output_device: str | None,
    expert_host: str | None = None,
    repacked: Mapping[str, tuple[str, int]] | None = None,
    pinned: Mapping[str, str] | None = None,
    *,
    mapped: bool = True,
) -> Weights:
    """Assign each loaded tensor to a buffer.

    ``layer_device``: layer -> device for its non-expert tensors (layers absent
    stay on the host, as with a partial ``-ngl``).  ``expert_device``: expert
    layer -> device for its routed experts; absent expert layers go to
    ``expert_host`` (default ``host``).  ``output_device``: where output/norm
    tensors go (None: host).  ``repacked``: host tensors the CPU backend keeps in
    ``CPU_REPACK`` or ``AMX`` instead, name -> (buffer, bytes there) (llama.cpp
    without a GPU's pinned buffer).  ``pinned``:
    tensor -> buffer for tensors an ``-ot`` rule moves one by one, whatever their
    layer says; ``"host"`` is the buffer tensors overridden to the CPU land in
    (``expert_host``).  ``mapped``: host weights stay memory-mapped (mmap).
    """
    expert_home = expert_host or host
    groups, sizes, skipped = _groups(profile, runtime)
    tensor_buffer: dict[str, str] = {}
    buffers: dict[str, int] = {}
    count: dict[str, int] = {}  # tensors per buffer: a buffer exists while it holds one

    def put(names: tuple[str, ...], nbytes: int, buf: str) -> None:
        if repacked and buf in ("CPU", "CPU_Mapped"):
            for name in names:
                one, nbytes = repacked.get(name, (buf, sizes[name]))
                tensor_buffer[name] = one
                buffers[one] = buffers.get(one, 0) + nbytes
                count[one] = count.get(one, 0) + 1
            return
        tensor_buffer.update(dict.fromkeys(names, buf))
        buffers[buf] = buffers.get(buf, 0) + nbytes
        count[buf] = count.get(buf, 0) + len(names)

    for kind, key, names, nbytes in groups:
        if kind == "expert":
            buf = expert_device.get(key, expert_home)
        elif kind == "layer":
            buf = layer_device.get(key, host)
        elif kind == "token_embd":
            buf = host
        else:
            buf = output_device or host
        put(names, nbytes, buf)
    tied = tied_output(profile)
    elsewhere = output_device is not None and output_device != host
    if tied and (elsewhere or (output_device is None and not mapped)):
        # no output.weight: the loader makes the output from token_embd
        # (TENSOR_DUPLICATED) in the output layer's buffer, a copy beside the one
        # in host RAM (llama-model-loader.cpp create_tensor; gemma3 27B on one GPU:
        # 1,102.77 MiB more on CUDA0, ik discussion 334); in host RAM too unless
        # the file is mapped, where both tensors point at the same bytes (gemma3
        # 27B on the CPU with ik's -rtr, which turns mmap off: 1,102.77 MiB more)
        out = output_device or host
        buffers[out] = buffers.get(out, 0) + sizes["token_embd.weight"]
        count[out] = count.get(out, 0) + 1
    for name, pin in (pinned or {}).items():  # single tensors an -ot rule moves
        old = tensor_buffer.get(name)
        if old is None:
            continue  # not loaded
        buffers[old] -= sizes[name]
        count[old] -= 1
        if not count[old]:
            del buffers[old], count[old]
        put((name,), sizes[name], expert_home if pin == HOST else pin)
    return Weights(tensor_buffer, dict(sorted(buffers.items())), skipped)


#: architectures without a language-model head: nothing is made from token_embd
_NO_LM_HEAD = frozenset({"bert", "nomic-bert", "nomic-bert-moe", "jina-bert-v2", "t5encoder"})


def has_lm_head(profile: Profile) -> bool:
    """Whether the model computes logits (an encoder like BERT pools embeddings)."""
    return profile.arch not in _NO_LM_HEAD


@functools.lru_cache(maxsize=64)
def tied_output(profile: Profile) -> bool:
    """Whether the model ties its output to the embeddings (no ``output.weight``): the
    runtime then builds the output from ``token_embd`` where the output layer lives."""
    if profile.arch in _NO_LM_HEAD:
        return False
    names = {t.name for t in profile.tensors()}
    return "token_embd.weight" in names and "output.weight" not in names


#: a run of tensors that go to one buffer together: (kind, layer or -1, names, bytes);
#: kind is expert (a layer's routed experts), layer (its other tensors), token_embd
#: or output (everything else outside the blocks)
_Group = tuple[str, int, tuple[str, ...], int]


@remembering(64)
def _groups(
    profile: Profile, runtime: Runtime
) -> tuple[tuple[_Group, ...], dict[str, int], tuple[str, ...]]:
    """Loaded tensors grouped by what decides their buffer, each name's bytes, and
    the skipped names: ``place_weights`` then assigns groups, not ~2,000 tensors,
    once per candidate layout while the solver fills GPUs."""
    slots, skipped = _slots(profile, runtime)
    grouped: dict[tuple[str, int], tuple[list[str], list[int]]] = {}
    for name, nbytes, expert, layer in slots:
        if expert is not None:
            key = ("expert", expert)
        elif layer is not None:
            key = ("layer", layer)
        else:
            key = ("token_embd" if name == "token_embd.weight" else "output", -1)
        names, sizes = grouped.setdefault(key, ([], []))
        names.append(name)
        sizes.append(nbytes)
    groups = tuple((k, n, tuple(names), sum(b)) for (k, n), (names, b) in grouped.items())
    return groups, {name: nbytes for name, nbytes, _, _ in slots}, skipped


def tensor_slots(
    profile: Profile, runtime: Runtime
) -> tuple[tuple[str, int, int | None, int | None], ...]:
    """Loaded tensors as (name, bytes, expert layer or None, layer or None), cached."""
    return _slots(profile, runtime)[0]


@remembering(64)
def _slots(
    profile: Profile, runtime: Runtime
) -> tuple[tuple[tuple[str, int, int | None, int | None], ...], tuple[str, ...]]:
    """Loaded tensors as (name, bytes, expert layer, layer), and the skipped names.

    ``place_weights`` runs once per candidate layout while the solver fills
    GPUs; classifying each tensor by regex there dominated solve time.
    """
    keep = loaded(profile, runtime)
    kept = {t.name for t in keep}
    skipped = tuple(t.name for t in profile.tensors() if t.name not in kept)
    return tuple((t.name, t.nbytes, expert_layer(t.name), t.layer) for t in keep), skipped
