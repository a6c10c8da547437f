"""Opening files under ``out/`` without following a symbolic link anywhere below it.

Why: ``out/`` comes from the repository, and in CI the repository is a pull
request.  A link there (``out/.layoutgen.lock -> /proc/self/environ``,
``out/<host>/plan.json -> ~/.ssh/id_ed25519``, ``out/<host>/systemd -> /etc``)
would make layoutgen read a file outside the repository into a diff, or
truncate and write one.  So every path layoutgen reads or writes under the
output root is opened one component at a time, each relative to the
directory opened before it (``openat``) and with ``O_NOFOLLOW``: a link where
layoutgen expects its own file or directory is :class:`LinkRefused`, which
names the path and never what the link points at, let alone its content.

The output root itself may be a link (the user chose it; ``cli`` checks that
it does not leave the repository unless told to); nothing below it is followed.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from layoutgen.errors import LayoutgenError

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class LinkRefused(LayoutgenError):
    """A symbolic link where layoutgen keeps its own file or directory."""

    def __init__(self, path: Path) -> None:
        self.path = path
        super().__init__(
            f"{path}: a symbolic link where layoutgen keeps its own file; layoutgen never "
            "reads or writes through links in the output directory (it could point "
            "anywhere): remove the link and run again"
        )


class NotRegular(LayoutgenError):
    """Something other than a regular file (a FIFO, a device) where layoutgen keeps its own."""

    def __init__(self, path: Path) -> None:
        self.path = path
        super().__init__(
            f"{path}: not a regular file (a pipe, device, socket or directory) where layoutgen "
            "keeps its own file: remove it and run again"
        )


def open_under(root: Path, rel: str, flags: int, mode: int = 0o644) -> int:
    """A file descriptor of ``root/rel`` opened with ``flags``, no link followed below root.

    Raises :class:`LinkRefused` for a link at any component of ``rel``, and
    the usual ``FileNotFoundError`` / ``NotADirectoryError`` for what is absent.
    """
    parts = rel.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"{rel!r}: not a plain relative path")
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for i, part in enumerate(parts[:-1]):
            try:
                sub = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except NotADirectoryError:
                if _is_link(part, fd):
                    raise LinkRefused(root.joinpath(*parts[: i + 1])) from None
                raise
            os.close(fd)
            fd = sub
        try:
            return os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP or (exc.errno == errno.ENOTDIR and _is_link(parts[-1], fd)):
                raise LinkRefused(root / rel) from None
            raise
    finally:
        os.close(fd)


def _is_link(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def read_under(root: Path, rel: str, limit: int = -1) -> bytes | None:
    """The bytes of the regular file ``root/rel`` (its first ``limit``); None if absent.

    Never follows a link (:class:`LinkRefused`), never blocks on a FIFO
    (:class:`NotRegular` for anything but a regular file).
    """
    try:
        fd = open_under(root, rel, os.O_RDONLY | os.O_NONBLOCK)
    except (FileNotFoundError, NotADirectoryError):
        return None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise NotRegular(root / rel)
        return f.read(limit)
