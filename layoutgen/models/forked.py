"""Reading many files at once: a map over forked copies of this process.

Why: ``inspect DIR`` decodes every shard's JSON header and checks each tensor
(~37,000 of them in Qwen3-235B, ~90,000 in DeepSeek-V3).  That is Python work
one core does at a time, and a checkpoint's shards are independent of each
other.  ``multiprocessing`` would cost more to import (~20 ms) than it saves
on a checkpoint of ten shards; a plain ``os.fork`` of the process that already
holds its imports and the index costs a millisecond or two.

Contract, the same as ``[func(item) for item in items]`` stopped at the first
:class:`~layoutgen.errors.LayoutgenError`:

* results come back in item order, each ``(True, value)`` or ``(False,
  message)`` for the error an item raised; after an error its worker stops
  (nothing past the first failing item is needed);
* a value must be plain data (tuples, lists, dicts, str, int, None) that
  :mod:`marshal` carries: the children are this process, so nothing untrusted
  is read back;
* a worker that dies, or raises anything but a ``LayoutgenError`` (a bug),
  sends nothing, and this process runs its items itself: a bug keeps its
  traceback, and the outcome never depends on how many cores there are; so
  does a part no process could be forked for (``fork`` failing for want of
  memory or of process slots).
"""

from __future__ import annotations

import marshal
import os
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from layoutgen.errors import LayoutgenError

T = TypeVar("T")
Outcome = tuple[bool, Any]  # (True, value) or (False, the error's message)


def cores() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def fork_map(
    func: Callable[[T], Any],
    items: Sequence[T],
    workers: int,
    meanwhile: Callable[[], object] | None = None,
) -> list[Outcome]:
    """``func`` over ``items`` in up to ``workers`` processes (this one included).

    ``meanwhile``: work this process needs later anyway, done after its own part
    while the workers finish theirs (run once, forked or not)."""
    workers = max(1, min(workers, len(items)))
    if workers == 1 or not hasattr(os, "fork"):
        outcomes = _run(func, items)
        if meanwhile is not None:
            meanwhile()
        return outcomes
    bounds = [len(items) * k // workers for k in range(workers + 1)]
    chunks = [items[bounds[k] : bounds[k + 1]] for k in range(workers)]
    children: list[tuple[int, int] | None] = []  # None: no process to spare, done here
    for chunk in chunks[1:]:
        try:
            children.append(_fork(func, chunk))
        except OSError:
            children.append(None)
    results: list[tuple[int, bytes] | None] = []
    try:
        outcomes = _run(func, chunks[0])
        if meanwhile is not None:
            meanwhile()
    finally:  # every child is read and reaped, even when this part hits a bug
        for child in children:
            results.append(None if child is None else _reap(*child))
    for result, chunk in zip(results, chunks[1:], strict=True):
        if outcomes and not outcomes[-1][0]:  # an item failed: the rest is not needed
            break
        if result is not None and result[0] == 0 and result[1]:
            outcomes.extend(marshal.loads(result[1]))
        else:  # no worker, or it died or hit a bug: its part is done here
            outcomes.extend(_run(func, chunk))
    return outcomes


def _fork(func: Callable[[T], Any], chunk: Sequence[T]) -> tuple[int, int]:
    """A child that runs ``chunk`` and writes its outcomes to a pipe: (pid, read end)."""
    read, write = os.pipe()
    try:
        pid = os.fork()
    except OSError:
        os.close(read)
        os.close(write)
        raise
    if pid == 0:  # the child: never returns into the caller
        code = 1
        try:
            os.close(read)
            data = marshal.dumps(_run(func, chunk))
            with os.fdopen(write, "wb") as out:
                out.write(data)
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    return pid, read


def _reap(pid: int, read: int) -> tuple[int, bytes]:
    """What the child wrote, and its exit status once it has gone."""
    with os.fdopen(read, "rb") as got:
        data = got.read()
    return os.waitpid(pid, 0)[1], data


def _run(func: Callable[[T], Any], items: Sequence[T]) -> list[Outcome]:
    out: list[Outcome] = []
    for item in items:
        try:
            out.append((True, func(item)))
        except LayoutgenError as exc:
            out.append((False, str(exc)))
            break
    return out
