"""The hand-in's own user and what it cannot reach (issue 29): the parts, one at a time.

The whole grader in each mode is tested in tests/test_grading_harness.py; here each piece is
tested on its own: the ids, ending every process of a user, the Landlock read list, the
TCP rules without a network namespace, the refusal to run unconfined, the mode line, the
permissions taken off the grader's files, and the gradebook's mode.
"""

import errno
import os
import select
import signal
import socket
import stat
import sys
import time

import pytest

from coursekit.grading.grader import close_to_hand_ins
from coursekit.grading.records.gradebook import Gradebook
from coursekit.grading.sandbox import landlock, privileges
from coursekit.grading.sandbox.confinement import readable_paths
from coursekit.grading.sandbox.modes import mode_of, unconfined_refusal

pytestmark = [
    pytest.mark.grading,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only"),
]
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (as CI has)")


def test_hand_in_ids_are_far_from_any_account_and_below_what_tools_read_as_minus_one():
    uid, gid = privileges.hand_in_ids(4_194_304)  # the largest pid Linux gives
    assert uid == gid and 65_536 < privileges.HAND_IN_ID_BASE <= uid < 2**31 - 1
    assert privileges.hand_in_ids(7) != privileges.hand_in_ids(8)  # one user per runner


def _as_user(uid: int, then) -> int:
    """Fork a process that becomes ``uid`` (as a hand-in does) and runs ``then``."""
    pid = os.fork()
    if pid == 0:
        try:
            privileges.become_hand_in_user(uid, uid)
            then()
        finally:
            os._exit(0)
    return pid


@as_root
def test_every_process_of_a_hand_ins_user_is_ended_however_it_hides():
    uid = privileges.hand_in_ids(os.getpid() % 4_000_000)[0]
    read, write = os.pipe()

    def fork_and_hide():
        for _ in range(5):  # daemons in sessions of their own, which outlive their parent
            if os.fork() == 0:
                os.setsid()
                if os.fork() == 0:
                    signal.signal(signal.SIGTERM, signal.SIG_IGN)
                    os.write(write, b"+")  # hidden and running
                    time.sleep(600)
                os._exit(0)
        time.sleep(600)

    leader = _as_user(uid, fork_and_hide)
    os.close(write)
    # wait for the five to say they run (counting processes instead could catch the moment
    # the leader and its five short-lived children were six, before any daemon had started)
    started = b""
    while len(started) < 5 and select.select([read], [], [], 120)[0]:
        started += os.read(read, 5) or b"!"
        assert not started.endswith(b"!"), "a daemon ended before it started"
    os.close(read)
    assert started == b"+++++"
    assert len(privileges.processes_of(uid)) >= 6  # the leader and the five daemons
    assert privileges.end_processes_of(uid)
    os.waitpid(leader, 0)
    assert privileges.processes_of(uid) == []


@as_root
def test_a_hand_ins_user_holds_no_capability_and_no_group():
    uid = privileges.hand_in_ids(os.getpid() % 4_000_000 + 1)[0]
    read, write = os.pipe()

    def report():
        status = open("/proc/self/status").read()
        fields = dict(line.split(":", 1) for line in status.splitlines())
        line = f"{os.getuid()} {os.getgid()} {os.getgroups()} {fields['CapEff'].strip()}"
        line += f" {fields['CapPrm'].strip()} {fields['CapBnd'].strip()}"
        os.write(write, line.encode())

    pid = _as_user(uid, report)
    os.close(write)
    seen = os.read(read, 1000).decode().split(" ", 2)
    os.waitpid(pid, 0)
    assert seen[0] == seen[1] == str(uid)
    groups, effective, permitted, bounding = seen[2].rsplit(" ", 3)
    assert groups == "[]"
    assert int(effective, 16) == int(permitted, 16) == int(bounding, 16) == 0


def test_landlocks_read_list_never_holds_root_or_a_hidden_folder(tmp_path):
    course = tmp_path / "course"
    venv = course / ".venv"  # a virtual environment inside the course: its own files only
    venv.mkdir(parents=True)
    allowed = readable_paths(["/", str(tmp_path), str(venv), "/usr/lib/python3"], [str(course)])
    assert "/" not in allowed and str(tmp_path) not in allowed  # it would hold the course
    assert str(venv) in allowed and "/usr" in allowed
    assert not any(a == str(course) for a in allowed)


@pytest.mark.skipif(landlock.abi_version() < 4, reason="Landlock's TCP rules need Linux 6.7")
def test_without_a_network_namespace_tcp_binds_a_kernel_picked_port_and_connects_nowhere():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        outcome = []
        try:
            landlock.restrict(["/usr"], [], block_tcp=True, ephemeral_bind=True)
            mine = socket.socket()
            mine.bind(("127.0.0.1", 0))  # what gloo does
            mine.listen()
            outcome.append("bound")
            for attempt in (
                lambda: socket.create_connection(listener.getsockname(), timeout=5),
                lambda: socket.socket().bind(("127.0.0.1", 8123)),
            ):
                try:
                    attempt()
                    outcome.append("allowed")
                except OSError as error:
                    outcome.append(errno.errorcode.get(error.errno, "?"))
        finally:
            os.write(write, " ".join(outcome).encode())
            os._exit(0)
    os.close(write)
    seen = os.read(read, 200).decode()
    os.waitpid(pid, 0)
    assert seen == "bound EACCES EACCES", seen


def test_grading_refuses_to_run_unconfined_and_says_what_to_do():
    applied = {"root_user": False, "user_namespace": False, "why_no_namespaces": "EPERM"}
    refusal = unconfined_refusal(applied)
    assert "not root" in refusal and "--unconfined" in refusal and "EPERM" in refusal
    own_root = {"root": {"root": "own"}}  # reads confined (tests/test_read_shield.py: without)
    assert unconfined_refusal({"root_user": True, "hand_in_user": 5, **own_root}) is None
    assert unconfined_refusal({"user_namespace": True, **own_root}) is None
    assert mode_of(applied).startswith("UNCONFINED")


def test_the_mode_line_names_each_mode():
    docker = {"root_user": True, "hand_in_user": 5, "namespaces": [], "seccomp": True}
    assert mode_of(docker).startswith("no namespaces, as root") and "Landlock" not in mode_of(
        docker
    )
    assert "Landlock" in mode_of({**docker, "landlock": 6})
    full = {**docker, "namespaces": ["mount", "pid", "network"]}
    assert mode_of(full).startswith("namespaces as root")
    user = {"user_namespace": True, "namespaces": ["mount", "pid"]}
    assert mode_of(user).startswith("namespaces through a user namespace")


def test_the_graders_files_are_closed_to_others_only_where_hand_ins_share_them(tmp_path):
    notebooks = tmp_path / "notebooks"
    notebooks.mkdir(mode=0o755)
    os.chmod(notebooks, 0o755)
    own_root = {"hand_in_user": 5, "root": {"root": "own"}}
    assert close_to_hand_ins([notebooks], own_root) == []  # it cannot see them anyway
    assert stat.S_IMODE(notebooks.stat().st_mode) == 0o755
    shared = {"hand_in_user": 5}
    assert close_to_hand_ins([notebooks], shared) == [str(notebooks)]
    assert stat.S_IMODE(notebooks.stat().st_mode) == 0o750


def test_a_gradebook_is_its_owners_alone(tmp_path):
    path = tmp_path / "gradebook.sqlite"
    path.write_bytes(b"")
    os.chmod(path, 0o644)  # one made before this release
    with Gradebook(path):
        pass
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    fresh = tmp_path / "new.sqlite"
    with Gradebook(fresh):
        pass
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o600
