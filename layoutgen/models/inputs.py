"""Opening user-named input files: regular files only, never blocking on a FIFO.

Why: a path on the command line may name a FIFO, a device (``/dev/zero``), a
socket or a directory.  Opened and read like a file, a FIFO blocks forever
and ``/dev/zero`` never ends.  The GGUF header reader and calibrate (the
start-up log, the spec it edits) open their files here, so that such a path
is refused with a one-line error before anything is read.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from layoutgen.errors import Diagnostic, InvalidInput, Severity

_KINDS = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class NotRegularFile(OSError):
    """A path that is not a regular file; ``kind`` says what it is instead."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


def open_regular(path: Path) -> BinaryIO:
    """``path`` opened for reading, if it is a regular file; else :class:`NotRegularFile`.

    ``stat`` first, so that a FIFO or a device is never opened; the open is
    non-blocking and checked again with ``fstat``, so that a path swapped for
    a FIFO in between cannot block either.  Other errors are ``OSError``.
    """
    _check_regular(os.stat(path).st_mode)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        _check_regular(os.fstat(fd).st_mode)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def _check_regular(mode: int) -> None:
    if stat.S_ISREG(mode):
        return
    if stat.S_ISDIR(mode):
        raise IsADirectoryError("a directory")
    raise NotRegularFile(next((kind for test, kind in _KINDS if test(mode)), "not a file"))


def too_big(name: str, limit: int, why: str) -> InvalidInput:
    """The one-line error for a file over ``limit`` bytes (calibrate's readers set limits)."""
    message = f"larger than the {limit >> 20} MiB calibrate reads; {why}"
    return InvalidInput([Diagnostic(name, 0, 0, Severity.ERROR, message)])


@contextlib.contextmanager
def open_bounded(path: Path, name: str, limit: int, why: str, advice: str) -> Iterator[BinaryIO]:
    """A regular file of at most ``limit`` bytes, opened without blocking; one-line errors."""
    try:
        f = open_regular(path)
    except FileNotFoundError:
        message = "no such file"
    except IsADirectoryError:
        message = "is a directory, not a file"
    except NotRegularFile as exc:
        message = f"is {exc.kind}, not a regular file; {advice}"
    except OSError as exc:
        message = f"cannot read: {exc.strerror or exc}"
    else:
        with f:
            size = os.fstat(f.fileno()).st_size
            if size > limit:
                raise too_big(name, limit, f"it has {size / (1 << 20):.1f} MiB; {why}")
            yield f
        return
    raise InvalidInput([Diagnostic(name, 0, 0, Severity.ERROR, message)])


def read_bounded(path: Path, name: str, limit: int, why: str, advice: str) -> bytes:
    """All of a regular file of at most ``limit`` bytes (:func:`open_bounded`), refused
    when it grows past the limit while being read."""
    with open_bounded(path, name, limit, why, advice) as f:
        raw = f.read(limit + 1)
    if len(raw) > limit:
        raise too_big(name, limit, "it grew past the limit while being read")
    return raw
