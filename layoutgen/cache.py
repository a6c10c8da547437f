"""layoutgen's cache directory: parsed profiles and compiled templates kept
between runs (each user's own; nothing in it is needed, all of it can go).

``$LAYOUTGEN_CACHE_DIR``, else ``$XDG_CACHE_HOME/layoutgen``, else
``~/.cache/layoutgen``; ``LAYOUTGEN_CACHE_DIR=off`` turns caching off.  What
is kept there is loaded as code or pickles, so a directory is used only when
this user owns it and no one else can write to it.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


def cache_dir(*parts: str) -> Path | None:
    """The cache directory (or a folder in it), or None when caching is off."""
    configured = os.environ.get("LAYOUTGEN_CACHE_DIR")
    if configured == "off":
        return None
    if configured:
        return Path(configured, *parts)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base, "layoutgen", *parts)


def private(st: os.stat_result) -> bool:
    """Owned by this user and writable by no one else."""
    return st.st_uid == os.getuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def private_dir(*parts: str) -> Path | None:
    """``cache_dir(*parts)``, created (mode 0700) if missing; None when caching is
    off, or the folder cannot be made or is not private."""
    where = cache_dir(*parts)
    if where is None:
        return None
    try:
        where.mkdir(mode=0o700, parents=True, exist_ok=True)
        return where if private(where.stat()) else None
    except OSError:
        return None
