"""How a batch's grading threads share the machine: ``workers`` hand-ins at a time, each from
its start to its last test's answer, and the spare runners forked for the next ones.

A hand-in's last steps (its runner reads torch's dispatcher again and compares the seal,
then the grader ends its process, removes its folders and judges its answers: some 100 ms
of a module-1 hand-in's 500) need the hand-in no more, and little of the machine. So a batch
runs two grading threads per worker (:func:`coursekit.grading.grader.grade_all`), and a
hand-in holds one of ``workers`` places (:meth:`Lanes.enter`) only until its last test has
answered: the next hand-in then starts while the last one finishes. What a hand-in is
charged with is unchanged: each thread still owns its runner and everything it starts, and
judges its hand-in only once that hand-in's last findings are in.

The spares (runners forked and built ahead, :mod:`coursekit.grading.sandbox.driver`) are
the batch's, not a thread's: one thread's spare is taken by whichever thread starts the
next hand-in, at most one per place.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


class Place:
    """A place taken: :meth:`leave` gives it back, once, however often it is called."""

    def __init__(self, free: threading.Semaphore):
        self._free, self._held = free, True
        self._lock = threading.Lock()

    def leave(self) -> None:
        with self._lock:
            held, self._held = self._held, False
        if held:
            self._free.release()


class Lanes:
    """``workers`` places for hand-ins from their start to their last answer, and a pool of
    at most ``workers`` spare runners."""

    def __init__(self, workers: int):
        self.workers = max(1, workers)
        self._free = threading.Semaphore(self.workers)
        self._lock = threading.Lock()
        self._spares: list = []
        self._forking = 0  # spares reserved and being forked

    def enter(self, stopped: Callable[[], bool]) -> Place:
        """Wait for a place; :class:`SystemExit` once the batch is stopped meanwhile."""
        while not self._free.acquire(timeout=0.2):
            if stopped():
                raise SystemExit("grading was stopped")
        if stopped():
            self._free.release()
            raise SystemExit("grading was stopped")
        return Place(self._free)

    def reserve_spare(self) -> bool:
        """A place in the pool for a spare about to be forked (:meth:`put_spare` fills it,
        :meth:`cancel_spare` gives it back); False when the pool, forks under way
        included, is full: two threads never fork one spare too many."""
        with self._lock:
            if len(self._spares) + self._forking >= self.workers:
                return False
            self._forking += 1
            return True

    def cancel_spare(self) -> None:
        with self._lock:
            self._forking -= 1

    def put_spare(self, spare) -> None:
        """Keep ``spare`` for the next hand-in, in the place :meth:`reserve_spare` gave."""
        with self._lock:
            self._forking -= 1
            self._spares.append(spare)

    def take_spare(self):
        """The oldest spare (it has built its sandbox longest), or None."""
        with self._lock:
            return self._spares.pop(0) if self._spares else None

    def take_all_spares(self) -> list:
        with self._lock:
            spares, self._spares = self._spares, []
        return spares
