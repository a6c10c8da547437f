"""Which host GPUs an imported command runs on, named as the user's spec names them.

Why here and not in the flag reader: the same answer is needed for a pasted
command, a ``podman inspect`` record and a process, and it depends only on
what selects devices (``--device nvidia.com/gpu=…`` CDI names,
``CUDA_VISIBLE_DEVICES``, ``--gpus``) and on the spec's ``host.gpus``.

Inside a container CUDA numbers the GPUs it was given from 0, in PCI (NVML
index) order; ``CUDA_VISIBLE_DEVICES`` numbers them in the order it lists.
A GPU the spec does not have is an error naming the spec's GPUs: importing it
as some other card would plan the wrong memory.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from layoutgen.errors import Diagnostic, Severity
from layoutgen.importer.cmdline import Command, UnreadableCommand, Word
from layoutgen.inputs.literals import clip


@dataclass(frozen=True)
class SpecGpu:
    """A local GPU of the spec's host: its id, NVML/CDI index and UUID where written."""

    id: str
    index: int | None = None
    uuid: str | None = None
    #: HOST:PORT of an rpc device (ggml-rpc-server); None: a local GPU
    rpc: str | None = None


@dataclass(frozen=True)
class Selected:
    """The GPUs a command selects, in CUDA order, or ``every`` GPU the process sees."""

    ids: tuple[str, ...]
    #: the command selects every GPU (``gpu=all``, no selection at all on a native server)
    every: bool
    #: how many GPUs the selection holds when known (0: not known)
    known: int
    warnings: tuple[Diagnostic, ...] = ()


_CDI = re.compile(r"(?:nvidia\.com/gpu=)(.+)")
_DOCKER_GPUS = re.compile(r"gpus=(?:\"?device=)?([^\"]+)\"?")


def _entries(command: Command) -> list[tuple[Word, str]]:
    """(word, entry) for each GPU a device option or CUDA_VISIBLE_DEVICES names."""
    out: list[tuple[Word, str]] = []
    for d in command.devices:
        count = re.fullmatch(r"gpus=(\d{1,3})", d.text)
        if count is not None:  # docker --gpus N: the first N GPUs
            out += [(d, str(i)) for i in range(int(count.group(1)))]
            continue
        m = _CDI.fullmatch(d.text) or _DOCKER_GPUS.fullmatch(d.text)
        if m is None:
            continue
        out += [(d, e.strip()) for e in m.group(1).split(",") if e.strip()]
    return out


def select(command: Command, gpus: Sequence[SpecGpu] | None) -> Selected:
    """The host GPUs ``command`` runs on, by the spec's ids where ``gpus`` is given."""
    src = command.source
    warnings: list[Diagnostic] = []
    local = sorted(
        (g for g in gpus or () if g.rpc is None), key=lambda g: (g.index is None, g.index or 0)
    )
    entries = _entries(command)
    visible: list[tuple[Word, str]] = []
    for e in command.env:
        if e.name == "CUDA_VISIBLE_DEVICES":
            visible = [(e.word, s.strip()) for s in e.value.split(",") if s.strip()]
    if not entries and not visible:
        return Selected(tuple(g.id for g in local), True, len(local) if gpus else 0)
    if any(entry in ("all", "-1") for _, entry in entries):
        if gpus is not None:
            return Selected(tuple(g.id for g in local), True, len(local))
        return Selected((), True, 0)
    ids: list[tuple[int | None, str]] = []  # (host index for ordering, id)
    for word, entry in entries or visible:
        found = _one(src, word, entry, gpus, local)
        ids.append(found)
    if entries:  # CDI devices: CUDA numbers them in PCI (NVML index) order
        ids.sort(key=lambda x: (x[0] is None, x[0] or 0))
    names = tuple(dict.fromkeys(i for _, i in ids))
    if visible and entries:
        warnings.append(
            Diagnostic(
                src,
                visible[0][0].line,
                visible[0][0].col,
                Severity.WARNING,
                "CUDA_VISIBLE_DEVICES inside a container numbers the GPUs podman gave it; "
                "read as the container's devices",
            )
        )
    return Selected(names, False, len(names), tuple(warnings))


def _one(
    src: str, word: Word, entry: str, gpus: Sequence[SpecGpu] | None, local: list[SpecGpu]
) -> tuple[int | None, str]:
    """(host index, id) of one selected GPU: by index or UUID, from the spec when given."""
    is_uuid = entry.upper().startswith(("GPU-", "MIG-"))
    if gpus is None:
        if entry.isdigit() and len(entry) < 4:
            return int(entry), f"gpu{int(entry)}"
        if is_uuid:
            return None, "gpu-" + re.sub(r"[^a-z0-9]+", "", entry.lower()[4:])[:8]
        raise _error(src, word, f"{clip(entry)} is neither a GPU index nor a UUID (GPU-...)")
    if is_uuid:
        match = [g for g in local if g.uuid is not None and g.uuid.lower() == entry.lower()]
        what = f"UUID {entry}"
    elif entry.isdigit() and len(entry) < 4:
        match = [g for g in local if g.index == int(entry)]
        what = f"index {int(entry)}"
    else:
        raise _error(src, word, f"{clip(entry)} is neither a GPU index nor a UUID (GPU-...)")
    if not match:
        listed = ", ".join(
            g.id
            + " ("
            + ", ".join(
                p
                for p in (
                    f"index {g.index}" if g.index is not None else "",
                    f"uuid {g.uuid}" if g.uuid else "",
                )
                if p
            )
            + ")"
            for g in local
        )
        raise _error(
            src,
            word,
            f"the command runs on the GPU with {what}, which the spec's host.gpus does not "
            f"have (its GPUs: {listed or 'none'}); add it to host.gpus (layoutgen probe "
            "prints them) or import with the spec of the host this command ran on",
        )
    return match[0].index, match[0].id


def spec_gpus(path: Path) -> list[SpecGpu]:
    """The local GPUs of a spec's host (rpc devices are not CUDA devices), schema-checked
    only: a spec that does not fit (yet) still names its GPUs."""
    from layoutgen.inputs import source
    from layoutgen.inputs.schema_errors import validate_mapping
    from layoutgen.spec.schema import Spec

    spec = validate_mapping(
        source.load(path, str(path)),
        Spec,
        "a spec is a mapping with keys host, models, runtimes and services",
    )
    return [
        SpecGpu(g.id, g.index, g.uuid, g.rpc.endpoint if g.rpc is not None else None)
        for g in spec.host.gpus
    ]


def rpc_devices(
    src: str, word: Word, value: str, gpus: Sequence[SpecGpu] | None
) -> tuple[list[str], list[Diagnostic]]:
    """The ids of ``--rpc HOST:PORT,...`` in its order (llama.cpp lists rpc devices
    before local GPUs): the spec's rpc GPUs by endpoint, ``rpc<k>`` without a spec."""
    ids: list[str] = []
    warnings: list[Diagnostic] = []
    remote = [g for g in gpus or () if g.rpc is not None]
    for k, endpoint in enumerate(e.strip() for e in value.split(",") if e.strip()):
        match = [g.id for g in remote if g.rpc == endpoint]
        if match:
            ids.append(match[0])
        elif gpus is not None:
            listed = ", ".join(f"{g.id} ({g.rpc})" for g in remote) or "none"
            raise _error(
                src,
                word,
                f"--rpc {endpoint}: the spec's host.gpus has no rpc device at that endpoint "
                f"(its rpc devices: {listed}); add it as a GPU with rpc: {{endpoint: "
                f"{endpoint}, binary: ..., device: CUDA0}}",
            )
        else:
            ids.append(f"rpc{k}")
            warnings.append(
                Diagnostic(
                    src,
                    word.line,
                    word.col,
                    Severity.WARNING,
                    f"--rpc {endpoint}: named rpc{k}; add it to host.gpus with rpc: "
                    f"{{endpoint: {endpoint}, binary: ..., device: CUDA0}}",
                )
            )
    return ids, warnings


def _error(src: str, w: Word, message: str) -> UnreadableCommand:
    return UnreadableCommand([Diagnostic(src, w.line, w.col, Severity.ERROR, message)])
