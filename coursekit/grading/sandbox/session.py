"""One run of a runner, from the grader's side: commands out, answers in, flags on the way.

Every answer must be the one asked for, echoing its nonce; anything else on the channel is the
hand-in's doing, which ends the attempt (:class:`Ended`) and is flagged. What the hand-in's
process sends is untrusted: the records made of its answers (:func:`cell_record`,
:func:`task_record`) keep only known statuses and capped text, for
:mod:`coursekit.grading.judging` to judge in the grader's own process.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import time
from dataclasses import dataclass, field

from coursekit.grading.sandbox import channel
from coursekit.grading.sandbox.errors import RunnerSetupError

OUTPUT_TAIL_BYTES = 4000
MAX_FLAGS = 20
# how long a command runs before the grader does its own work that can wait (the next
# runner's fork, some 30 ms of waiting on the warm parent) beside it: a cell answered
# sooner is not held up by it
PATIENCE_S = 0.005


class Ended(Exception):
    """The attempt ended before its work was done; ``why`` says how."""

    def __init__(self, why: str, detail: str = ""):
        super().__init__(why)
        self.why, self.detail = why, detail


class Tail:
    """The hand-in's output, read as it comes (or the pipe fills and it blocks); its end kept."""

    def __init__(self, fd: int):
        self.fd, self.data = fd, b""
        os.set_blocking(fd, False)

    def drain(self, fd: int | None = None, most_bytes: int = 2**20) -> None:
        """Read what is there, up to ``most_bytes`` (a hand-in that writes without end must
        not keep the grader from its clock)."""
        with contextlib.suppress(BlockingIOError, OSError):
            while most_bytes > 0 and (chunk := os.read(self.fd, 2**16)):
                self.data = (self.data + chunk)[-OUTPUT_TAIL_BYTES:]
                most_bytes -= len(chunk)

    def text(self) -> str:
        return self.data.decode("utf-8", "replace")


@dataclass
class Attempt:
    cells: dict[int, dict] = field(default_factory=dict)
    tasks: dict[int, dict] = field(default_factory=dict)
    applied: dict = field(default_factory=dict)
    flags: list[str] = field(default_factory=list)
    flags_over_cap: int = 0
    slow_questions: set = field(default_factory=set)  # ran out of time twice on a test
    position: tuple = ("start",)  # what was running when it ended
    parent_died: bool = False  # the warm parent died while this hand-in alone ran
    lost: bool = False  # the runner was reaped by someone else: the grader's fault
    ended: Ended | None = None
    returncode: int | None = None
    output: str = ""
    seconds: float = 0.0


class Session:
    """One run of the runner: commands out, answers in, flags collected on the way."""

    def __init__(self, process, to_runner: int, reader, tail: Tail, attempt: Attempt):
        self.process, self.to_runner, self.reader, self.tail = process, to_runner, reader, tail
        self.attempt = attempt

    def send(self, message: dict, deadline: float) -> None:
        try:
            channel.send_by(self.to_runner, message, deadline)
        except channel.TimedOut:
            raise Ended("timeout") from None
        except OSError:  # a broken pipe: the process ended
            raise Ended("exit") from None

    def expect(self, kind: str, deadline: float, index=None, nonce=None) -> dict:
        while True:
            try:
                frame = self.reader.next_frame(deadline, self.tail.drain, (self.tail.fd,))
            except channel.Closed:
                raise Ended("exit") from None
            except channel.TimedOut:
                raise Ended("timeout") from None
            except channel.ChannelError as error:
                raise Ended("violation", str(error)) from None
            if frame.get("kind") == "flag":
                what = frame.get("what")
                if isinstance(what, str) and len(self.attempt.flags) < MAX_FLAGS:
                    self.attempt.flags.append(what[:300])
                else:  # counted, so that a flood of flags cannot hide the real ones unseen
                    self.attempt.flags_over_cap += 1
                continue
            if frame.get("kind") == "failed" and kind == "ready":
                raise RunnerSetupError(str(frame.get("why"))[:1000])
            if (
                frame.get("kind") != kind
                or frame.get("index") != index
                or frame.get("nonce") != nonce
            ):
                raise Ended("violation", f"an answer out of turn ({str(frame.get('kind'))[:40]})")
            return frame

    def command(self, kind: str, deadline: float, index=None, while_waiting=None, **fields) -> dict:
        """Send a command and wait for its answer. ``while_waiting`` (the grader's own work,
        which can wait: the fork of the next hand-in's runner) is called only once the
        runner has worked on this command for :data:`PATIENCE_S` without an answer, so that
        the runner does not sit idle, its answer unread, while the grader waits on that. The
        time it takes is added to the deadline, so that a slow fork of the next runner costs
        this one nothing."""
        nonce = secrets.token_hex(8)
        self.send({"kind": kind, "index": index, "nonce": nonce, **fields}, deadline)
        if while_waiting is not None and not self.reader.answered_within(PATIENCE_S):
            started = time.monotonic()
            while_waiting()
            deadline += time.monotonic() - started
        return self.expect(kind, deadline, index, nonce)


def crashed_record(task: dict, why: str) -> dict:
    """The record of a test not run again because it ended the process, or ran out of time
    twice, in an earlier try."""
    if why == "timeout":
        return {"status": "timeout"}
    return {
        "status": "error",
        "message": f"{task['question']} crashed or exited: grading had to end its process.",
    }


_CELL_STATUSES = {"ok", "error", "timeout"}
_TASK_STATUSES = {"ok", "error", "timeout", "missing", "not_attempted"}


def cell_record(reply: dict) -> dict:
    status = reply.get("status") if reply.get("status") in _CELL_STATUSES else "error"
    record = {"status": status}
    if status == "error":
        record["error"] = str(reply.get("error", "an error"))[:400]
    return record


def task_record(reply: dict) -> dict:
    status = reply.get("status") if reply.get("status") in _TASK_STATUSES else "error"
    record = {"status": status}
    if status == "ok":
        record["outputs_json"] = reply.get("outputs_json")
    elif status == "error":
        record["message"] = str(reply.get("message", "it raised an error"))[:1000]
    return record
