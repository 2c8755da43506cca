"""Compare-and-swaps asked at the same time commit in one transaction (group commit).

A shared query commits hundreds of tables at once, from several threads. On
SQLite every write transaction takes the database's one write lock and syncs
the file on COMMIT, so the tables' swaps would queue for that lock one by one,
each paying its own sync. Here the swaps that arrive while a transaction runs
wait for it to end, and the next transaction carries all of them: each is still
its own conditional UPDATE (only its table's pointer, only from its expected
location), so each table keeps its own outcome: one table's conflict is that
table's, and the others commit. Only the transaction is shared, and with it
what the database says about it: a COMMIT that fails leaves every swap in it
with an unknown outcome, which each caller settles as it would its own.

Pure coordination: the transaction itself is the ``run`` callback's.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from commit.identifiers import TableIdentifier


@dataclass
class Swap:
    """One table's swap, and once its group ran, the error it ends with (None: it committed)."""

    identifier: TableIdentifier
    expected_location: str
    new_location: str
    error: BaseException | None = None
    done: bool = False


class GroupCommit:
    """Runs swaps in groups: ``run(group)`` executes them in one transaction and sets each one's
    :attr:`Swap.error`; an exception out of ``run`` becomes, through ``failed``, the error of every swap
    of the group that has none of its own."""

    def __init__(
        self,
        run: Callable[[list[Swap]], None],
        failed: Callable[[Swap, BaseException], BaseException],
    ) -> None:
        self._run = run
        self._failed = failed
        self._pending: list[Swap] = []
        self._pending_lock = threading.Lock()
        self._turn = threading.Lock()  # one transaction at a time; its runner takes every swap waiting

    def swap(self, swap: Swap) -> None:
        """Commit ``swap`` in the next group; raises its error."""
        with self._pending_lock:
            self._pending.append(swap)
        with self._turn:
            if not swap.done:  # no earlier runner took it: this thread runs the group
                with self._pending_lock:
                    group, self._pending = self._pending, []
                self._run_group(group)
        if swap.error is not None:
            raise swap.error

    def _run_group(self, group: list[Swap]) -> None:
        try:
            self._run(group)
        except BaseException as error:  # noqa: BLE001 - every swap of the group carries it, and raises it
            for swap in group:
                if swap.error is None:
                    swap.error = error  # never left without one: no error means committed
                    swap.error = self._failed(swap, error)
        finally:
            for swap in group:
                swap.done = True
