"""privileges.end_processes_of: the hand-in's processes, ending already, cost no helper; a
user that keeps making processes still gets the helper that ends them all at once.

tests/test_hand_in_user.py checks that daemons hidden in sessions of their own are ended;
these check which way they are ended (a helper is a fork of the grader, which a batch
would pay for at every hand-in that left a process) and that both ways end them all.
"""

import os
import resource
import select
import sys
import time

import pytest

from coursekit.grading.sandbox import privileges, reaping

pytestmark = [
    pytest.mark.grading,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only"),
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (as CI has)"),
]


def _as_user(uid: int, then, nproc: int | None = None) -> int:
    """Fork a process that becomes ``uid`` (as a hand-in does) and runs ``then``."""
    pid = os.fork()
    if pid == 0:
        try:
            if nproc is not None:  # counted for the user, once it is not root
                resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
            privileges.become_hand_in_user(uid, uid)
            then()
        finally:
            os._exit(0)
    return pid


@pytest.fixture
def helpers(monkeypatch):
    """The helpers end_processes_of forks (each still forked and waited for)."""
    forked = []
    real = reaping.fork_owned

    def counted(child):
        forked.append(child)
        return real(child)

    monkeypatch.setattr(reaping, "fork_owned", counted)
    return forked


def _started(read: int, count: int) -> None:
    seen = b""
    while len(seen) < count and select.select([read], [], [], 60)[0]:
        chunk = os.read(read, count)
        assert chunk, "a process ended before it said it runs"
        seen += chunk
    assert len(seen) >= count


@pytest.mark.parametrize("most", [privileges.MOST_ONE_BY_ONE, 2])
def test_processes_that_end_when_killed_need_no_helper_unless_too_many(helpers, monkeypatch, most):
    """Four processes: killed one by one (no helper), unless more than ``most`` are left
    (a descriptor each, in the grader: past a few, kill(-1) as the user does it)."""
    monkeypatch.setattr(privileges, "MOST_ONE_BY_ONE", most)
    uid = privileges.hand_in_ids(os.getpid() % 4_000_000 + 7)[0]
    read, write = os.pipe()

    def sleepers():
        for _ in range(3):
            if os.fork() == 0:
                os.setsid()  # out of the leader's group, as a hand-in's daemon would be
                os.write(write, b"+")
                time.sleep(600)
                os._exit(0)
        time.sleep(600)

    leader = _as_user(uid, sleepers)
    os.close(write)
    _started(read, 3)
    os.close(read)
    assert len(privileges.processes_of(uid)) == 4
    assert privileges.end_processes_of(uid)
    os.waitpid(leader, 0)
    assert privileges.processes_of(uid) == []
    assert (helpers == []) == (most >= 4)


@pytest.mark.parametrize("wait_s", [privileges.ENDING_S, 0.0])
def test_a_user_that_keeps_making_processes_is_ended(helpers, monkeypatch, wait_s):
    """Killed one by one, they may refill what is killed; then (and always, when the wait
    for them is 0) the helper's kill(-1) as the user ends them all at once."""
    monkeypatch.setattr(privileges, "ENDING_S", wait_s)
    # a user of each run's own: where this process is a subreaper (a grader ran in it before:
    # reaping.py), what the other run killed stays here unreaped, counted against the user's
    # 12 processes, and this run's would never reach 4 (it waited out the 30 s in the suite)
    uid = privileges.hand_in_ids(os.getpid() % 4_000_000 + (8 if wait_s else 9))[0]
    read, write = os.pipe()

    def multiply():  # every process forks as fast as it can, up to its user's 12
        os.write(write, b"+")
        while True:
            try:
                if os.fork() == 0:
                    continue
            except OSError:
                time.sleep(0.001)

    leader = _as_user(uid, multiply, nproc=12)
    os.close(write)
    _started(read, 1)
    os.close(read)
    # a few are enough to be refilling what is killed; waiting for all 12 could take the whole
    # backstop where the user's limit counts processes that are already ending
    deadline = time.monotonic() + 30
    while (seen := len(privileges.processes_of(uid))) < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        assert seen >= 4, f"only {seen} processes of the user's after 30 s: nothing to refill"
        assert privileges.end_processes_of(uid)
        assert privileges.processes_of(uid) == []
        if wait_s == 0:
            assert helpers  # not waited for: kill(-1) as the user ended them
    finally:
        privileges.end_processes_of(uid)
        os.waitpid(leader, 0)
