"""What a spec string may contain, given where it lands: a script, a unit file, a path.

Why refuse rather than only escape: one value reaches several formats at
once (a model path is a podman ``--volume`` source, a quadlet ``Volume=``
value, a systemd ``ExecStart=`` word and a shell word), and some of them have
no escape at all: podman splits ``--volume`` at ``:`` and ``,``, a unit file
ends a value at a newline and continues it after a trailing backslash, and
quadlet passes ``%`` and ``$`` in ``Volume=`` through to systemd, which
expands them in the generated ``ExecStart``.  So values that name things
(images, paths, secrets, endpoints, devices) are held to a character set
every format takes literally, and free text (passthrough ``args``) is refused
only control characters, then escaped by :mod:`layoutgen.render.quoting` for each
format.  Every rule matches the whole string (``fullmatch``): ``$`` alone
accepts a trailing newline.

Each validator returns the value or raises ``ValueError`` with a message
that says what to write instead; pydantic turns that into a located error.
"""

from __future__ import annotations

import ipaddress
import re
import unicodedata
from collections.abc import Callable
from pathlib import PurePosixPath

#: Unicode categories refused in any spec string: control characters (newline,
#: CR, NUL, ESC, ...), format characters (bidi overrides, zero-width), line and
#: paragraph separators, and surrogates.
_REFUSED_CATEGORIES = {"Cc", "Cf", "Zl", "Zp", "Cs"}

#: Longest string anywhere in a spec; passthrough args may be long (a grammar).
MAX_TEXT = 65536
#: Longest path (Linux PATH_MAX).
MAX_PATH = 4096

# distribution/reference's grammar (the one podman and docker parse): an
# optional registry host[:port], lowercase path components, an optional tag
# and an optional digest.  It cannot start with '-', so it is never an option.
_DOMAIN_PART = r"(?:[A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9-]*[A-Za-z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_PART}(?:\.{_DOMAIN_PART})*|\[[0-9A-Fa-f:]+\])(?::[0-9]{{1,5}})?"
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_TAG = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9A-Fa-f]{32,}"
IMAGE = re.compile(rf"(?:{_DOMAIN}/)?{_COMPONENT}(?:/{_COMPONENT})*(?::{_TAG})?(?:@{_DIGEST})?")

_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOSTNAME = rf"{_LABEL}(?:\.{_LABEL})*"
ENDPOINT = re.compile(rf"(?P<host>{_HOSTNAME}|\[[0-9A-Fa-f:.]+\]):(?P<port>[0-9]{{1,5}})")

#: podman secret names (podman-secret-create(1): letters, digits, ``_.-``).
SECRET = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,252}")
#: ggml backend device names: CUDA0, Vulkan1, CPU, ...
DEVICE = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,31}")
#: runtime buffer names as logs print them: CUDA0, CUDA_Host, RPC0[127.0.0.1:50052]
BUFFER = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,31}(?:\[[A-Za-z0-9.:\[\]-]{1,64}\])?")
#: NVML UUIDs: "GPU-" and 8-4-4-4-12 hex digits (MIG instances are not GPUs of a spec).
GPU_UUID = re.compile(r"GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")

#: Characters a host path may hold besides letters and digits: none of them is
#: special to podman's volume syntax, unit files, systemd specifiers or sh.
PATH_PUNCTUATION = "/._-+@=~"

#: Directories that are never mounted into a container: the whole host, and
#: trees where a relabel (``:z``) or a read by the server can break the host or
#: leak secrets.  A model or key file must live in a directory of its own.
SYSTEM_TREES = (
    "/etc",
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/boot",
    "/dev",
    "/proc",
    "/sys",
    "/run",
    "/var/run",
    "/var/lib/containers",
)
#: Directories that may hold a models folder but are never mounted whole.
SYSTEM_DIRS = (
    "/",
    "/home",
    "/root",
    "/opt",
    "/srv",
    "/mnt",
    "/media",
    "/var",
    "/var/lib",
    "/tmp",
    "/var/tmp",
    "/usr/local",
)


def text(value: str, *, limit: int = MAX_TEXT) -> str:
    """Free text: any printable character, no control or invisible formatting ones."""
    if len(value) > limit:
        raise ValueError(f"is {len(value)} characters long; at most {limit} are accepted")
    for i, ch in enumerate(value):
        if unicodedata.category(ch) in _REFUSED_CATEGORIES:
            raise ValueError(
                f"{clip(value)} holds the control character {_char(ch)} at offset {i}; "
                "remove it (it would end or alter a line in the rendered scripts and units)"
            )
    return value


def image(value: str) -> str:
    text(value, limit=MAX_PATH)
    if not IMAGE.fullmatch(value):
        raise ValueError(
            f"{clip(value)} is not a container image reference; write "
            "REGISTRY[:PORT]/NAME[:TAG][@DIGEST] with a lowercase name, e.g. "
            "ghcr.io/ggml-org/llama.cpp:server-cuda"
        )
    first, slash, _ = value.partition("/")
    if not slash or not ("." in first or ":" in first or first == "localhost"):
        raise ValueError(
            f"{clip(value)} names no registry: podman would resolve the short name through "
            "its search list, so the image run could come from another registry; write it "
            "fully qualified, e.g. docker.io/library/NAME or localhost/NAME for a local build"
        )
    return value


def host_path(value: str) -> str:
    """An absolute path written into volumes, units and scripts as it is."""
    text(value, limit=MAX_PATH)
    if not value.startswith("/"):
        raise ValueError(f"{clip(value)} is not absolute; write the full path on the host")
    bad = sorted({ch for ch in value if not (ch.isalnum() or ch in PATH_PUNCTUATION)})
    if bad:
        shown = " ".join(repr(ch) for ch in bad)
        raise ValueError(
            f"{clip(value)} contains {shown}: a host path may hold only letters, digits and "
            f"{' '.join(PATH_PUNCTUATION)} (it is written unescaped into podman volume "
            "options, unit files and scripts); rename it or link it from such a path"
        )
    parts = value.split("/")[1:]
    if any(p in ("", ".", "..") for p in parts):
        raise ValueError(
            f"{clip(value)} is not a normalized path: write it without '//', '/./', "
            "'/../' or a trailing '/'"
        )
    return value


def mounted_file(value: str) -> str:
    """A host file whose directory (or itself) is mounted into a container."""
    host_path(value)
    parent = str(PurePosixPath(value).parent)
    where = system_tree(value)
    if where is not None:
        raise ValueError(
            f"{clip(value)} is under {where}: layoutgen never mounts system directories into "
            "a container (a relabel can break the host); move it to a directory of its own"
        )
    if parent in SYSTEM_DIRS:
        raise ValueError(
            f"{clip(value)} lies directly in {parent}: its directory is mounted into the "
            f"container, and {parent} is never mounted whole; move it to a directory of its "
            f"own, e.g. {parent.rstrip('/')}/models/"
        )
    return value


def system_tree(path: str) -> str | None:
    """The system tree ``path`` lies in (``/etc`` for ``/etc/x``), or None."""
    for tree in SYSTEM_TREES:
        if path == tree or path.startswith(tree + "/"):
            return tree
    return None


def endpoint(value: str) -> str:
    text(value, limit=300)
    m = ENDPOINT.fullmatch(value)
    if m is not None and m.group("host").startswith("["):
        try:
            ipaddress.IPv6Address(m.group("host")[1:-1])
        except ValueError:
            m = None
    if m is None or not 1 <= int(m.group("port")) <= 65535:
        raise ValueError(
            f"{clip(value)} is not an endpoint; write HOST:PORT with a host name or IP "
            "address and a port 1-65535, e.g. 127.0.0.1:50052"
        )
    return value


def _matching(pattern: re.Pattern[str], what: str) -> Callable[[str], str]:
    """A validator: the whole value matches ``pattern``, else "... is not {what}"."""

    def check(value: str) -> str:
        if not pattern.fullmatch(value):
            raise ValueError(f"{clip(value)} is not {what}")
        return value

    return check


secret = _matching(
    SECRET,
    "a podman secret name; use letters, digits, '_', '.' and '-', starting with a letter or digit",
)
device = _matching(
    DEVICE, "a backend device name; write it as llama.cpp names it, e.g. CUDA0 or CPU"
)
gpu_uuid = _matching(
    GPU_UUID,
    "an NVML GPU UUID; write it as `nvidia-smi -L` or `layoutgen probe` prints it, "
    "e.g. GPU-5a2c1f3e-8d4b-4c6a-9e7f-0123456789ab",
)
buffer = _matching(
    BUFFER,
    "a buffer name; write it as the runtime's log prints it, e.g. CUDA0, CUDA_Host or "
    "RPC0[127.0.0.1:50052]",
)


def _char(ch: str) -> str:
    name = unicodedata.name(ch, "")
    return f"U+{ord(ch):04X}" + (f" ({name})" if name else "")


def clip(value: str, limit: int = 60) -> str:
    """The value for a message: repr (control characters visible), cut when long."""
    shown = value if len(value) <= limit else value[:limit] + "..."
    return repr(shown)
