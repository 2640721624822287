"""What the grader does while a hand-in's runner works (issue 40: the grader's own speed).

The next hand-in's runner is forked (some 30 ms of waiting on the warm parent) only once the
runner has worked on a command for :data:`session.PATIENCE_S` without answering, so a cell
answered sooner is read at once; and the grader reads its children from its threads' own
``children`` files rather than every process's ``stat``. No sandbox is started here: a
thread plays the runner, on a pipe.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time

import pytest

from coursekit.grading.sandbox import channel, reaping, session

pytestmark = pytest.mark.grading
linux_only = pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="reads /proc")


def _session_with_a_runner(answer_after_s: float):
    """A Session whose runner (a thread) answers each command after ``answer_after_s``."""
    to_runner_r, to_runner_w = os.pipe()
    from_runner_r, from_runner_w = os.pipe()
    output_r, output_w = os.pipe()

    def runner():
        reader = channel.FrameReader(to_runner_r)
        while True:
            try:
                command = reader.next_frame(time.monotonic() + 10)
            except (channel.Closed, channel.TimedOut):
                return
            time.sleep(answer_after_s)
            keys = ("kind", "index", "nonce")
            channel.send(from_runner_w, {key: command.get(key) for key in keys})

    thread = threading.Thread(target=runner, daemon=True)
    thread.start()
    reader = channel.FrameReader(from_runner_r)
    made = session.Session(None, to_runner_w, reader, session.Tail(output_r), session.Attempt())

    def close():
        os.close(to_runner_w)  # the runner reads the end of its commands, and returns
        thread.join(5)
        for fd in (to_runner_r, from_runner_r, from_runner_w, output_r, output_w):
            os.close(fd)

    return made, close


@pytest.mark.parametrize("answer_after_s, waited", [(0.0, False), (0.3, True)])
def test_the_graders_own_work_waits_for_a_command_that_takes_a_while(answer_after_s, waited):
    made, close = _session_with_a_runner(answer_after_s)
    called = []
    try:
        reply = made.command(
            "cell", time.monotonic() + 10, 0, while_waiting=lambda: called.append(1), source=""
        )
    finally:
        close()
    assert reply["kind"] == "cell" and reply["index"] == 0
    assert called == ([1] if waited else [])


def test_the_graders_own_work_runs_once_a_command_outlasts_the_patience():
    """Backstop for the case above: a runner that never answers quickly still gets it."""
    assert session.PATIENCE_S < 0.3  # (the slow runner above answers after 0.3 s)
    payload = json.dumps({"kind": "x"}).encode()
    read, write = os.pipe()
    try:
        reader = channel.FrameReader(read)
        assert not reader.answered_within(0.01)
        channel.write_frame(write, payload)
        assert reader.answered_within(0.01)
    finally:
        os.close(read)
        os.close(write)


@linux_only
def test_children_are_read_from_the_threads_files_as_from_every_process():
    """Children forked by another thread (it ended: they moved to a live one) and a zombie
    are found both ways, and the two ways agree."""
    started = [subprocess.Popen(["sleep", "5"]) for _ in range(2)]

    def fork_here():
        started.append(subprocess.Popen(["sleep", "5"]))

    forker = threading.Thread(target=fork_here)
    forker.start()
    forker.join()
    zombie = subprocess.Popen(["true"])
    try:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:  # until the zombie is one
            with open(f"/proc/{zombie.pid}/stat") as status:
                if status.read().rsplit(")", 1)[1].split()[0] == "Z":
                    break
            time.sleep(0.01)
        by_thread, by_scan = reaping._children_by_thread(), reaping._children_by_scan()
        assert by_thread == by_scan
        assert {p.pid for p in started} | {zombie.pid} <= reaping.children()
    finally:
        for process in [*started, zombie]:
            process.kill()
            process.wait()
