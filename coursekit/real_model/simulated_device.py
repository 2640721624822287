"""A pretend GPU for trying an auto-tuner on the CPU: it runs out of memory the way a real one
does, in a fraction of a millisecond.

Module 7's graded exercise probes for the largest micro-batch that fits. On a real GPU each
probe is a forward and backward pass, and the ways a tuner goes wrong (forgetting to free
what a failed try held, trusting a size that fails one time in three, swallowing an error
that is not about memory, ignoring a budget below the card's size, never stopping) show only
now and then. This device makes each one happen on purpose, and keeps a log of every call,
so a check can say which one happened.

Memory is a line: a micro-batch of ``b`` needs ``base_bytes + b * per_sample_bytes`` (the
weights, gradients and optimizer state, then each sample's activations, as module 1
measured). ``try_step(b)`` returns that peak, or raises :class:`torch.OutOfMemoryError` when
it (plus whatever earlier failures still hold) is over the card's ``capacity_bytes``.
"""

from __future__ import annotations

import gc
import random
import sys
import weakref
from dataclasses import dataclass, field

import torch

GIB = 2**30


class ProbingDidNotStop(BaseException):
    """Raised once a tuner has called ``try_step`` more times than any search needs.

    A ``BaseException``, like ``KeyboardInterrupt``, so that ``except Exception`` in a tuner
    does not catch it and probe on forever."""


@dataclass
class SimulatedDevice:
    """A card of ``capacity_bytes``; see the module docstring for its memory model.

    Args:
        flaky_bytes: within this many bytes below the capacity, a step runs out of memory
            on some calls and not on others (fragmentation does this on real cards), with
            probability ``flaky_chance``, drawn from ``seed``.
        held_fraction: after an out-of-memory error, this fraction of what the failed step
            asked for stays allocated: the failed try's tensors, which the exception's
            traceback keeps alive. :meth:`free_memory` returns them only once the exception
            is gone, as ``gc.collect(); torch.cuda.empty_cache()`` does: called inside the
            ``except`` block, or with the exception kept in a variable, it frees nothing.
        error_from: a micro-batch at least this big raises a ``RuntimeError`` that is not
            about memory (a bug in the model's code): a tuner must let it through.
        max_calls: after this many calls, :class:`ProbingDidNotStop`.
    """

    capacity_bytes: int
    base_bytes: int
    per_sample_bytes: int
    flaky_bytes: int = 0
    flaky_chance: float = 0.5
    held_fraction: float = 0.0
    error_from: int | None = None
    max_calls: int = 80
    seed: int = 0
    log: list[dict] = field(default_factory=list)
    _random: random.Random = field(init=False, repr=False)
    _held: list[tuple[weakref.ref, int]] = field(init=False, repr=False, default_factory=list)

    def __post_init__(self) -> None:
        self._random = random.Random(self.seed)

    @property
    def held_bytes(self) -> int:
        """What failed tries still hold: nothing is returned until :meth:`free_memory`."""
        return sum(n_bytes for _, n_bytes in self._held)

    def needs(self, size: int) -> int:
        """Bytes a micro-batch of ``size`` needs, with nothing held."""
        return self.base_bytes + size * self.per_sample_bytes

    @property
    def calls(self) -> int:
        return sum(1 for entry in self.log if entry["event"] != "free")

    def try_step(self, micro_batch_size: int) -> int:
        """One forward and backward pass of ``micro_batch_size`` samples: its peak bytes."""
        if self.calls >= self.max_calls:
            self.log.append({"event": "stopped", "size": _plain(micro_batch_size)})
            raise ProbingDidNotStop(
                f"try_step was called {self.max_calls} times; a search needs far fewer."
            )
        if type(micro_batch_size) is not int:
            # a plain int only: a subclass's methods would run inside the card, with its
            # capacity in hand, and could raise before the call is logged
            what = type(micro_batch_size).__name__
            self.log.append({"event": "bad", "size": what[:40]})
            raise TypeError(f"a micro-batch size is a whole number (an int), not a {what}")
        size = micro_batch_size
        if size < 1:
            self.log.append({"event": "bad", "size": size})
            raise ValueError(f"a micro-batch of {size} samples has nothing to train on")
        if self.error_from is not None and size >= self.error_from:
            self.log.append({"event": "error", "size": size})
            raise RuntimeError(
                "CUDA error: an illegal memory access was encountered (the model's code has "
                f"a bug at micro-batch {size}; this is not about memory)"
            )
        wanted = self.needs(size)
        peak = wanted + self.held_bytes
        edge = self.capacity_bytes - self.flaky_bytes
        flaked = self.flaky_bytes > 0 and peak > edge and self._random.random() < self.flaky_chance
        held = self.held_bytes
        if peak > self.capacity_bytes or flaked:
            self.log.append({"event": "oom", "size": size, "held": held})
            # raised straight from a helper: a local name for it here would make a reference
            # cycle (error -> traceback -> this frame -> error) that only gc.collect breaks
            raise self._out_of_memory(size, wanted, held)
        self.log.append({"event": "ok", "size": size, "peak": peak, "held": held})
        return peak

    def _out_of_memory(self, size: int, wanted: int, held: int) -> torch.OutOfMemoryError:
        error = torch.OutOfMemoryError(
            f"CUDA out of memory. Tried to allocate {_gib(wanted)} for a micro-batch of "
            f"{size}; {_gib(self.capacity_bytes)} total capacity, {_gib(held)} held by "
            "earlier failed tries (simulated)"
        )
        kept = int(wanted * self.held_fraction)
        if kept:  # the failed step's tensors live exactly as long as the error
            self._held.append((weakref.ref(error), kept))
        return error

    def free_memory(self) -> None:
        """What ``gc.collect(); torch.cuda.empty_cache()`` does after a failed try: returns
        the memory of every failed try whose exception no longer exists."""
        handled = sys.exc_info()[1]  # alive for sure
        if any(ref() is not None and ref() is not handled for ref, _ in self._held):
            gc.collect()  # only then: a full collection costs milliseconds with torch loaded
        before = self.held_bytes
        self._held = [(ref, n_bytes) for ref, n_bytes in self._held if ref() is not None]
        self.log.append(
            {"event": "free", "released": before - self.held_bytes, "still_held": self.held_bytes}
        )


def _plain(value):
    """A size as the log keeps it: an int, or the name of what was passed (never its repr,
    which would run the caller's code)."""
    return value if type(value) is int else type(value).__name__[:40]


def _gib(n_bytes: int) -> str:
    return f"{n_bytes / GIB:.2f} GiB"
