"""Module 7's simulated card with its log out of the tuner's reach.

The tuner is handed ``try_step`` and ``free_memory``. Handing it the card's own bound methods
would hand it the card (``try_step.__self__``), and with it the log the judge reads and the
count of calls that stops a search that never ends: a tuner could clear the log, raise the
limit, or write the log it wants judged. So the card lives in a
:class:`~coursekit.checks.tamper_evident.Sink` that only the frame of
:func:`~coursekit.checks.tamper_evident.watched` holds while the tuner runs, as the other
checks' instruments do. The two functions hold an opaque token; each call pokes the sink,
which runs the card and leaves the outcome in a fresh list the call reads. Reaching the card
any other way takes frames, ``gc`` or ``ctypes``, which the grader's audit hook reports.

An out-of-memory error is raised with a traceback that starts at ``try_step``, so the frames
that held the card are not on it either. It is raised without a local name that holds it: the
failed try's memory is held exactly as long as the error lives, as on a real card (see
:class:`~coursekit.real_model.simulated_device.SimulatedDevice`).
"""

from __future__ import annotations

from coursekit.checks.module07.common import card
from coursekit.checks.tamper_evident import Sink, poke
from coursekit.real_model.simulated_device import ProbingDidNotStop, SimulatedDevice

_OUTSIDE = (
    "try_step and free_memory work only while the check runs your function, in its own "
    "thread: call them from your function, not from a thread or after it returned"
)


class CardSink(Sink):
    """The card itself, reached by a poke from the functions the tuner holds."""

    def __init__(self, device: SimulatedDevice):
        super().__init__()
        self.device = device
        self.sinks = [self]  # an instrument of its own, for watched()

    def accept(self, action=None, size=None, outcome=None, *_rest) -> None:
        if type(outcome) is not list or outcome:
            return
        try:
            if action == "try":
                outcome.append(self.device.try_step(size))
            elif action == "free":
                self.device.free_memory()
                outcome.append(None)
        except (Exception, ProbingDidNotStop) as error:
            # raised again by the caller, from its own frame: nothing of this one on it
            outcome.append(error.with_traceback(None))


def sealed_functions(sink: CardSink) -> tuple:
    """``(try_step, free_memory)`` for ``sink``'s card; they reach it only through the
    running :func:`~coursekit.checks.tamper_evident.watched` call."""

    def try_step(micro_batch_size, _token=sink.token, _send=poke, _raised=BaseException):
        """One forward and backward pass of ``micro_batch_size`` samples: its peak bytes."""
        outcome: list = []
        _send(_token, ("try", micro_batch_size, outcome))
        if not outcome:
            raise RuntimeError(_OUTSIDE)
        if isinstance(outcome[0], _raised):
            raise outcome.pop()  # no name holds the error: it dies when the tuner drops it
        return outcome.pop()

    def free_memory(_token=sink.token, _send=poke) -> None:
        """Return the memory of every failed try whose exception no longer exists."""
        outcome: list = []
        _send(_token, ("free", None, outcome))
        if not outcome:
            raise RuntimeError(_OUTSIDE)

    return try_step, free_memory


def new_sealed_card(spec: dict) -> tuple:
    """A fresh card of ``spec``: ``(sink, try_step, free_memory)``. Call the tuner through
    ``watched((sink,), fn, try_step, free_memory, ...)``, then read ``sink.device``."""
    sink = CardSink(card(spec))
    return (sink, *sealed_functions(sink))
