"""``fork_map``: the same outcomes as a loop in this process, whatever the worker count.

Each case runs with 1 to 6 workers over 7 items and compares with the one-process
answer, which is the contract (layoutgen/models/forked.py).  Work done in a
child is told apart by its process id, so that a test shows the fork happened
and which part fell back to this process.
"""

from __future__ import annotations

import os

import pytest

from layoutgen.errors import LayoutgenError
from layoutgen.models.forked import cores, fork_map

ITEMS = list(range(7))
WORKERS = [1, 2, 3, 6, 20]


class Refused(LayoutgenError):
    pass


def no_children_left() -> bool:
    try:
        os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


@pytest.mark.parametrize("workers", WORKERS)
def test_results_come_back_in_order_from_every_worker(workers: int) -> None:
    here = os.getpid()
    outcomes = fork_map(lambda i: (i * i, os.getpid()), ITEMS, workers)
    assert [(ok, value[0]) for ok, value in outcomes] == [(True, i * i) for i in ITEMS]
    pids = {value[1] for _, value in outcomes}
    # one process per chunk: this one for the first, a child for each other chunk
    assert len(pids) == min(workers, len(ITEMS))
    assert outcomes[0][1][1] == here
    assert no_children_left()


@pytest.mark.parametrize("workers", WORKERS)
def test_the_first_error_ends_the_results(workers: int) -> None:
    def work(i: int) -> int:
        if i in (3, 5):
            raise Refused(f"item {i} refused")
        return i

    outcomes = fork_map(work, ITEMS, workers)
    assert outcomes == [(True, 0), (True, 1), (True, 2), (False, "item 3 refused")]
    assert no_children_left()


@pytest.mark.parametrize("how", ["bug", "death"])
@pytest.mark.parametrize("workers", [2, 3, 6])
def test_a_child_that_fails_has_its_part_done_here(how: str, workers: int) -> None:
    here = os.getpid()

    def work(i: int) -> tuple[int, int]:
        if i == 6 and os.getpid() != here:  # only in the child that has the last item
            if how == "bug":
                raise ValueError("a bug in the worker")
            os._exit(3)
        return i, os.getpid()

    outcomes = fork_map(work, ITEMS, workers)
    assert [value[0] for _, value in outcomes] == ITEMS
    # the last chunk was redone in this process, every item of it
    last = len(ITEMS) * (workers - 1) // workers
    assert {value[1] for _, value in outcomes[last:]} == {here}
    assert no_children_left()


def test_a_bug_here_propagates_and_leaves_no_child_behind() -> None:
    here = os.getpid()

    def work(i: int) -> int:
        if os.getpid() == here:
            raise ValueError("a bug in this process")
        return i

    with pytest.raises(ValueError, match="a bug in this process"):
        fork_map(work, ITEMS, 3)
    assert no_children_left()


def test_values_are_plain_data_only() -> None:
    # marshal carries tuples, lists, dicts, str, int and None; an object is refused
    # in the child, which then counts as a failed worker: done here, same answer
    outcomes = fork_map(lambda i: {"i": [i, (str(i), None)]}, ITEMS, 3)
    assert outcomes == [(True, {"i": [i, (str(i), None)]}) for i in ITEMS]
    objects = fork_map(lambda i: object(), ITEMS[:2], 2)
    assert [ok for ok, _ in objects] == [True, True]


def test_cores_is_at_least_one() -> None:
    assert cores() >= 1


def test_a_fork_that_fails_leaves_its_part_to_this_process(monkeypatch: pytest.MonkeyPatch) -> None:
    real = os.fork
    calls = []

    def fork() -> int:  # the second fork finds no process slot
        calls.append(1)
        if len(calls) == 2:
            raise BlockingIOError(11, "Resource temporarily unavailable")
        return real()

    monkeypatch.setattr(os, "fork", fork)
    here = os.getpid()
    outcomes = fork_map(lambda i: (i, os.getpid()), ITEMS, 3)
    assert [value[0] for _, value in outcomes] == ITEMS
    assert {value[1] for _, value in outcomes[4:]} == {here}  # the third part
    assert {value[1] for _, value in outcomes[2:4]} != {here}  # the second, forked
    assert no_children_left()


@pytest.mark.parametrize("workers", [1, 3])
def test_meanwhile_runs_once_here_and_changes_no_outcome(workers: int) -> None:
    here = os.getpid()
    ran: list[int] = []
    outcomes = fork_map(lambda i: i, ITEMS, workers, meanwhile=lambda: ran.append(os.getpid()))
    assert ran == [here]
    assert outcomes == [(True, i) for i in ITEMS]
