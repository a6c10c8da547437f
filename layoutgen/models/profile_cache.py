"""Parsed profiles kept between runs, by content: a pre-commit hook's second run
does not parse and check the same YAML again.

Why: a profile is parsed through ruamel's round-trip loader and validated by a
pydantic model whose first build alone costs ~10 ms; a spec names two to five
of them, so every ``validate`` paid 15-30 ms for files that rarely change.

The key is the SHA-256 of the file's bytes and of layoutgen's code that turns
them into a :class:`Profile` (the modules in ``_CODE``, read each run: a
checkout's edits invalidate the cache without a version bump).  Only profiles
that loaded without a problem are kept, so every error is still found and
located by the real parser.  Entries are written to a temporary file and
renamed into place (``os.replace``), so concurrent runs never read half an
entry; a damaged or foreign entry is ignored and rewritten.

Where: ``profiles/`` in layoutgen's cache directory (:mod:`layoutgen.cache`).
Entries are pickles, so they are read only from a directory and files owned
by this user that no one else can write.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import tempfile
from functools import cache
from pathlib import Path

from layoutgen.cache import cache_dir, private
from layoutgen.models.profile import Profile

#: layoutgen modules whose code decides what a profile file loads as
_CODE = (
    "models/profile.py",
    "models/hparams.py",
    "models/tensors.py",
    "models/quants.py",
    "models/profile_cache.py",
    "cache.py",
    "inputs/source.py",
    "inputs/yamlbounds.py",
    "inputs/schema_errors.py",
)
_PACKAGE = Path(__file__).resolve().parents[1]


@cache
def _code_digest() -> bytes:
    digest = hashlib.sha256(f"pickle {pickle.HIGHEST_PROTOCOL}".encode())
    for rel in _CODE:
        digest.update((_PACKAGE / rel).read_bytes())
    return digest.digest()


def _entry(data: bytes) -> Path | None:
    where = cache_dir()
    if where is None:
        return None
    key = hashlib.sha256(_code_digest() + data).hexdigest()
    return where / "profiles" / f"{key}.pickle"


def get(data: bytes) -> Profile | None:
    """The profile these bytes loaded as before, if kept; None otherwise."""
    entry = _entry(data)
    if entry is None:
        return None
    try:
        with open(entry, "rb") as f:
            if not (private(os.fstat(f.fileno())) and private(entry.parent.stat())):
                return None
            found = pickle.load(f)
    except Exception:  # missing, damaged or foreign: parse the file instead
        return None
    return found if isinstance(found, Profile) else None


def put(data: bytes, profile: Profile) -> None:
    """Keep ``profile`` for these bytes; a cache that cannot be written is skipped."""
    entry = _entry(data)
    if entry is None:
        return
    try:
        entry.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=entry.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                pickle.dump(profile, f, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(tmp, entry)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError:
        return
