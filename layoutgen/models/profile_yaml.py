"""Writing a profile as YAML: one line per tensor entry, stable order, no surprises.

Why not a YAML library's dumper: reviewers read these files, so the layout
is fixed here (flow mappings, one tensor entry per line, hparams in schema
order) and every string is written as a JSON string, which is a valid YAML
double-quoted scalar: names like ``blk.{3..77}.x`` need quoting anyway and no
value can be misread as a number, boolean or null.  The output loads back into
an equal profile (tested).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from layoutgen.models.tensors import format_layers

if TYPE_CHECKING:
    from layoutgen.models.profile import Profile

_LAYER_SETS = ("swa_layers", "recurrent_layers")


def render(profile: Profile, header: str) -> str:
    lines = [header, "schema: 1", f"name: {_s(profile.name)}", f"arch: {_s(profile.arch)}"]
    if profile.format != "gguf":  # the default: GGUF profiles stay as they were
        lines.append(f"format: {profile.format}")
    lines.extend(_source(profile.source))
    if profile.files:
        lines.append("files:")
        lines.extend(f"  - {{name: {_s(f.name)}, size: {f.size}}}" for f in profile.files)
    lines.append("hparams:")
    for key, value in profile.hparams.model_dump(exclude_none=True).items():
        if key in _LAYER_SETS:
            lines.append(f"  {key}: {_s(format_layers(value))}")
        elif isinstance(value, str):
            lines.append(f"  {key}: {_s(value)}")
        elif isinstance(value, (tuple, list)):
            lines.append(f"  {key}: [{', '.join(str(v) for v in value)}]")
        else:
            lines.append(f"  {key}: {value}")
    lines.append("tensors:")
    for e in profile.entries:
        shape = ", ".join(str(d) for d in e.shape)
        lines.append(
            f"  - {{name: {_s(e.name)}, type: {_s(e.type)}, shape: [{shape}], bytes: {e.nbytes}}}"
        )
    return "\n".join(lines) + "\n"


def _s(text: str) -> str:
    return json.dumps(text, ensure_ascii=True)


def _source(text: str) -> list[str]:
    """A literal block when that round-trips exactly, else one JSON string."""
    body = text.rstrip("\n")
    safe = (
        body
        and "\r" not in text
        and "\t" not in text
        and not body[0].isspace()
        and all(line == line.rstrip() for line in body.split("\n"))
        and text.endswith("\n")
        and not text.endswith("\n\n")
        and all(ch.isprintable() or ch == "\n" for ch in body)
    )
    if not safe:
        return [f"source: {_s(text)}"]
    return ["source: |", *(f"  {line}" if line else "" for line in body.split("\n"))]
