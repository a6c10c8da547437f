"""The runtime build an imported command ran, from its image tag or a start-up log.

Why it matters: without ``version:`` a layout is planned for every build the
dated rules know, which refuses layouts a known build runs (seed 001's
``--n-cpu-moe 64`` is exact once ``version: "4357"`` is written).  The build
is found where it is written:

- image tags: llama.cpp's ``ghcr.io/ggml-org/llama.cpp:server-cuda-b6123``,
  ``:full-b6123``, ``:b6123``; vLLM's ``vllm/vllm-openai:v0.10.2``;
- start-up logs: llama.cpp and ik_llama.cpp print ``build: 6123 (a1b2c3d)``
  (older: ``main: build = 3808 (38012f72)``; ``--version``: ``version: 3772
  (5236c98b)``); vLLM prints ``vLLM API server version 0.10.2``.

A moving tag (``latest``, ``server-cuda``) names no build: said, with what to
write instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_LLAMA_TAG = re.compile(r"(?:^|-)b(\d{3,6})$|^(\d{3,6})$")
_RELEASE = r"\d{1,3}\.\d{1,3}(?:\.\d{1,4})?(?:\.post\d{1,3}|rc\d{1,3}|\.dev\d{1,6})?"
_VLLM_TAG = re.compile(rf"v?({_RELEASE})")
_LLAMA_LOG = re.compile(r"(?:\bbuild(?::| =)|^\s*version:) (\d{3,6}) \(([0-9a-f]{6,40})\)", re.M)
_VLLM_LOG = re.compile(rf"vLLM API server version ({_RELEASE})")


@dataclass(frozen=True)
class Found:
    """A build and where it was read (for the YAML comment and messages)."""

    version: str
    where: str


def tag_of(image: str) -> str | None:
    """The tag of ``[REGISTRY/]NAME[:TAG][@DIGEST]``, None when there is none."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else None


def from_image(image: str, kind: str) -> Found | None:
    """The build an image's tag names, if it names one."""
    tag = tag_of(image)
    if tag is None:
        return None
    m = _VLLM_TAG.fullmatch(tag) if kind == "vllm" else _LLAMA_TAG.search(tag)
    found = next((g for g in (m.groups() if m else ()) if g), None)
    if found is None or not _known(kind, found):
        return None
    return Found(found, f"from the image tag {tag}")


def from_log(text: str, kind: str) -> tuple[Found, int] | None:
    """The build a start-up log prints, and its line (1-based)."""
    m = (_VLLM_LOG if kind == "vllm" else _LLAMA_LOG).search(text)
    if m is None or not _known(kind, m.group(1)):
        return None
    line = text.count("\n", 0, m.start()) + 1
    return Found(m.group(1), f"from the start-up log, line {line}"), line


def _known(kind: str, version: str) -> bool:
    """Whether the runtime's rules take ``version`` (a build the spec accepts)."""
    from layoutgen import runtimes

    try:
        runtimes.get(kind, version)
    except (KeyError, ValueError):  # VersionError: a build the rules do not name
        return False
    return True


def missing(kind: str, image: str | None, args: tuple[str, ...] = ()) -> str:
    """What to write when no build was found; ARGS: the server's flags, whose forms
    can bound the builds (layoutgen.spec.flags.build_range)."""
    from layoutgen.spec.flags import build_range

    where = f"the image tag {tag_of(image) or '(none)'} names no build" if image else "no image"
    if kind == "vllm":
        how = "the release 'vllm --version' prints (e.g. 0.10.2)"
    else:
        how = "the build number 'llama-server --version' prints (e.g. 6123)"
    planned = "every build"
    found = build_range(kind, args) if kind != "vllm" else None
    if found is not None and found != (None, None):
        first, last = found
        span = f"{first or 'the first'}-{last}" if last is not None else f"from {first}"
        planned = f"builds {span}, those that read its flags as written"
    return (
        f"build unknown ({where}): the layout is planned for {planned}; write "
        f"version: as {how}, or give the start-up log with --log FILE"
    )
