"""``layoutgen import``: a working llama.cpp or vLLM command in, the spec service out.

:mod:`~layoutgen.importer.sources` reads what the user names (text, a ``podman
inspect`` record or container, a process, a script run with recorders:
:mod:`~layoutgen.importer.running`, :mod:`~layoutgen.importer.shellrun`);
:mod:`~layoutgen.importer.cmdline` finds the command in it (a shell line,
``podman run``, a quadlet ``.container``, a systemd ``.service``);
:mod:`~layoutgen.importer.tospec` (llama.cpp) and :mod:`~layoutgen.importer.vllm`
read its flags and write the YAML fragment, with the GPUs named by the spec's
(:mod:`~layoutgen.importer.devices`), the build (:mod:`~layoutgen.importer.build`)
and what render changes (:mod:`~layoutgen.importer.changes`).
"""

from __future__ import annotations

from collections.abc import Sequence

from layoutgen.importer.cmdline import Command, UnreadableCommand, Word, read_command
from layoutgen.importer.devices import SpecGpu, spec_gpus
from layoutgen.importer.tospec import Imported, parse_args, to_spec

__all__ = [
    "Command",
    "Imported",
    "SpecGpu",
    "UnreadableCommand",
    "Word",
    "import_text",
    "parse_args",
    "read_command",
    "spec_gpus",
    "to_spec",
]


def import_text(
    text: str,
    source: str = "<stdin>",
    *,
    gpu_ids: Sequence[str] | None = None,
    name: str | None = None,
    gpus: Sequence[SpecGpu] | None = None,
    log: tuple[str, str] | None = None,
    made: str | None = None,
) -> Imported:
    """The spec fragment for the command in ``text``; raises a LayoutgenError with its location.

    ``gpus``: the spec's host GPUs, so that CDI devices and CUDA_VISIBLE_DEVICES
    entries (by index or UUID) become the spec's GPU ids; ``log``: a start-up log's
    (text, name), whose build line becomes the runtime's ``version:``; ``made``: how
    ``text`` was made when it was read from something running (shown in the YAML)."""
    return to_spec(
        read_command(text, source),
        gpu_ids=gpu_ids,
        name=name,
        gpus=gpus,
        log=log,
        made=None if made is None else (made, text),
    )
