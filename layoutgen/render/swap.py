"""Replacing ``out/<host>/`` whole, under a lock: the operating-system half of writing out/.

Invariant: outside the lock nobody writes in ``out/``, and inside it
``out/<host>/`` changes only by one atomic rename, so at every instant
(a SIGKILL or a power cut included) it is either the complete previous
tree or the complete new one, never a mix.

How: the new tree is built beside it in ``out/.<host>.layoutgen-new-XXXXXXXX/``
(every file written and fsynced, every directory fsynced), then swapped in
with ``renameat2(RENAME_EXCHANGE)`` (Linux >= 3.15, on ext4, xfs, btrfs,
tmpfs...); the staging name then holds the old tree, which is deleted.  A
host that did not exist is renamed into place; one that ends up empty is
renamed aside and deleted.

Where the exchange is not available (another kernel or filesystem), the swap
is two renames recorded first in a journal, ``out/.<host>.layoutgen-swap``,
naming the complete new tree and where the old one goes: a kill between the
two renames leaves ``out/<host>`` absent for an instant, and the next
layoutgen run finishes the swap from the journal before anything else.

Anything named ``.<host>.layoutgen-new-*``, ``.<host>.layoutgen-old-*`` or
``.<host>.layoutgen-swap`` in ``out/`` is therefore garbage once any swap in
progress is finished: the next render removes it (:func:`recover`), and
``render --check`` reports it (:func:`leftovers`).

The lock is ``flock`` on ``out/.layoutgen.lock``, which names its holder
while held and is unlinked by the holder before it lets go (a waiter that
then locks the unlinked file sees a different inode at the path and tries
again): after a clean run ``out/`` holds no lock file, and one left by a
killed run names the pid that was killed.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import re
import secrets
import shutil
import socket
import stat
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from layoutgen.errors import LayoutgenError
from layoutgen.render import nofollow

LOCK = ".layoutgen.lock"
_STAGE = re.compile(r"^\.(?P<host>.+)\.layoutgen-(?P<kind>new|old)-[0-9a-f]{8}$")
_JOURNAL = re.compile(r"^\.(?P<host>.+)\.layoutgen-swap$")
_POLL_S = 0.05


class LockBusy(LayoutgenError):
    """Another layoutgen holds out/'s lock for longer than we may wait."""


class SwapError(LayoutgenError):
    """``out/<host>`` is something layoutgen cannot replace whole (a link, a file)."""


# ------------------------------------------------------------------ the lock


@contextmanager
def locked(root: Path, what: str, timeout: float, *, shared: bool = False) -> Iterator[str | None]:
    """Hold out/'s lock; yields what a killed holder left in the lock file (None: nothing).

    ``shared`` (for ``--check``, which writes nothing) neither creates nor
    removes the file: with no lock file no render is running.
    """
    path = root / LOCK
    deadline = time.monotonic() + timeout
    while True:
        try:
            flags = os.O_RDONLY if shared else os.O_RDWR | os.O_CREAT
            fd = nofollow.open_under(root, LOCK, flags | os.O_NONBLOCK, 0o644)
        except FileNotFoundError:
            if not shared:
                raise
            yield None
            return
        try:
            _own_file(fd, path)
            fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            if time.monotonic() >= deadline:
                raise LockBusy(_busy(path, root, timeout)) from None
            time.sleep(_POLL_S)
            continue
        except BaseException:
            os.close(fd)
            raise
        if _same_file(fd, path):
            break
        os.close(fd)  # its holder unlinked it as it let go: lock the new one
    try:
        text = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip()
        # locked shared, an existing file is a killed render's even if it is empty
        previous = text if shared else text or None
        if not shared:
            os.ftruncate(fd, 0)
            since = time.strftime("%Y-%m-%d %H:%M:%S")
            os.pwrite(
                fd,
                f"pid {os.getpid()} on {socket.gethostname()} since {since}: {what}\n".encode(),
                0,
            )
        yield previous
    finally:
        if not shared:
            path.unlink(missing_ok=True)  # still holding it: see the module docstring
        os.close(fd)


def _own_file(fd: int, path: Path) -> None:
    """The lock is layoutgen's own file: regular, with no other name (a hard link
    would make its truncation and writes another file's)."""
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        raise nofollow.NotRegular(path)
    if info.st_nlink > 1:
        raise SwapError(
            f"{path}: has {info.st_nlink} names (hard links); layoutgen's lock is its own "
            "file, truncated and written on every render: remove it and run again"
        )


def _same_file(fd: int, path: Path) -> bool:
    try:
        st = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)


def _busy(path: Path, root: Path, timeout: float) -> str:
    try:
        raw = nofollow.read_under(root, LOCK, 4096) or b""
        holder = raw.decode("utf-8", errors="replace").strip()
    except (OSError, LayoutgenError):
        holder = ""
    who = f" ({holder})" if holder else ""
    return (
        f"{path}: another layoutgen{who} is writing {root}; waited {timeout:g} s for it. "
        "Let it finish and run again, or give --lock-timeout SECONDS to wait longer"
    )


# ------------------------------------------------------------------ renames


def _load_renameat2() -> Callable[[bytes, bytes, int], int] | None:
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):  # not glibc >= 2.28 / not Linux
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    at_fdcwd = -100

    def call(src: bytes, dst: bytes, flags: int) -> int:
        if fn(at_fdcwd, src, at_fdcwd, dst, flags) == 0:
            return 0
        return ctypes.get_errno()

    return call


#: None where the exchange is not available (tests set it to None to use the journal).
_renameat2 = _load_renameat2()
_RENAME_NOREPLACE = 1
_RENAME_EXCHANGE = 2
_UNSUPPORTED = {errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP}


def _rename2(src: Path, dst: Path, flags: int) -> bool:
    """renameat2; False where the kernel or filesystem cannot do it."""
    if _renameat2 is None:
        return False
    err = _renameat2(os.fsencode(src), os.fsencode(dst), flags)
    if err in _UNSUPPORTED:
        return False
    if err:
        raise OSError(err, os.strerror(err), str(src), None, str(dst))
    return True


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(top: Path) -> None:
    """Every directory, deepest first (files are fsynced as they are written)."""
    for dirpath, _dirs, _files in os.walk(top, topdown=False):
        fsync_dir(Path(dirpath))


def _fresh(root: Path, host: str, kind: str) -> Path:
    return root / f".{host}.layoutgen-{kind}-{secrets.token_hex(4)}"


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


# ------------------------------------------------------------------ the swap


def replace(root: Path, host: str, build: Callable[[Path], None]) -> None:
    """Make ``root/host`` what ``build`` writes into an empty staging directory, atomically.

    The caller holds the lock and has run :func:`recover`.  If ``build``
    fails, the staging directory is removed and ``root/host`` is untouched.
    """
    target = root / host
    if target.is_symlink() or (target.exists() and not target.is_dir()):
        raise SwapError(
            f"{target}: not a directory; layoutgen replaces out/<host> whole, so it must be "
            "a real directory: move it away (or point --out at the directory it links to)"
        )
    stage = _fresh(root, host, "new")
    os.mkdir(stage)
    try:
        build(stage)
        if target.is_dir():  # last: the old mode may forbid writing
            os.chmod(stage, stat.S_IMODE(target.stat().st_mode))
        _fsync_tree(stage)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    empty = not any(stage.iterdir())
    if not target.exists():
        if empty:
            stage.rmdir()
            return
        if not _rename2(stage, target, _RENAME_NOREPLACE):
            os.rename(stage, target)
        fsync_dir(root)
        return
    if empty:  # nothing of the host is left: the new tree is no directory
        stage.rmdir()
        aside = _fresh(root, host, "old")
        os.rename(target, aside)
        fsync_dir(root)
        shutil.rmtree(aside, ignore_errors=True)
        return
    if _rename2(stage, target, _RENAME_EXCHANGE):
        fsync_dir(root)
        shutil.rmtree(stage, ignore_errors=True)  # now the old tree
        return
    _swap_with_journal(root, host, stage, target)


def _swap_with_journal(root: Path, host: str, stage: Path, target: Path) -> None:
    aside = _fresh(root, host, "old")
    journal = root / f".{host}.layoutgen-swap"
    fd = os.open(journal, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, f"new {stage.name}\nold {aside.name}\n".encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_dir(root)  # the journal is durable before anything moves
    os.rename(target, aside)
    os.rename(stage, target)
    fsync_dir(root)
    journal.unlink()
    fsync_dir(root)
    shutil.rmtree(aside, ignore_errors=True)


# ------------------------------------------------------------------ leftovers


def leftovers(root: Path) -> list[tuple[str, str]]:
    """(name in root, what it is) of everything an interrupted render left in ``root``."""
    if not root.is_dir():
        return []
    found: list[tuple[str, str]] = []
    for name in sorted(os.listdir(root)):
        if _JOURNAL.match(name):
            found.append((name, "journal of an interrupted swap"))
        elif m := _STAGE.match(name):
            what = "staging directory" if m["kind"] == "new" else "old tree"
            found.append((name, f"{what} of an interrupted render"))
    return found


def recover(root: Path) -> list[tuple[str, str]]:
    """Finish any swap a journal records, then remove every leftover; what was removed.

    The caller holds the lock.
    """
    done = leftovers(root)
    for name, _ in done:
        if m := _JOURNAL.match(name):
            _finish(root, m["host"], root / name)
    for name, _ in done:
        if _STAGE.match(name):
            _remove(root / name)
    if done:
        fsync_dir(root)
    return done


def _finish(root: Path, host: str, journal: Path) -> None:
    """Put back ``root/host`` if a swap was killed between its two renames."""
    target = root / host
    if not os.path.lexists(target):
        raw = nofollow.read_under(root, journal.name, 4096) or b""
        text = raw.decode("utf-8", "replace")
        names = dict(line.split(" ", 1) for line in text.splitlines() if " " in line)
        # the new tree first: the journal is written only once it is complete
        for kind in ("new", "old"):
            name = names.get(kind, "")
            m = _STAGE.match(name)
            stage = root / name
            if m and m["host"] == host and m["kind"] == kind and _real_dir(stage):
                os.rename(stage, target)
                fsync_dir(root)
                break
    journal.unlink()


def _real_dir(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink()
