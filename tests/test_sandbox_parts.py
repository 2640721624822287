"""The sandbox's parts, each on its own: the seccomp filter, the channel's framing and
encoder, lossless text, the tampering instruments, and what grade says is missing."""

import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coursekit.grading.sandbox import channel, harness_seal, privileges, scratch, seccomp
from coursekit.grading.sandbox.driver import Limits, Options, describe_confinement, run_hand_in
from coursekit.grading.sandbox.provenance import Provenance
from coursekit.grading.text import capped_notes, for_terminal, lossless
from tests.helpers.docker_like import in_docker_like

pytestmark = pytest.mark.grading
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")


def _in_filtered_child(code: str) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh Python after installing the filter."""
    script = (
        "from coursekit.grading.sandbox import seccomp\nassert seccomp.install()\n"
        + textwrap.dedent(code)
    )
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )


@linux_only
@pytest.mark.skipif(not seccomp.supported(), reason="a processor coursekit has no table for")
def test_the_filter_refuses_what_a_notebook_has_no_business_doing():
    done = _in_filtered_child(
        """
        import ctypes, errno, os, socket, subprocess, threading
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        def refused(call, expected):
            try:
                call()
            except OSError as error:
                assert error.errno == expected, (call, error)
                return
            raise AssertionError(f"{call} was allowed")
        refused(lambda: socket.socket(socket.AF_UNIX), errno.EACCES)
        refused(lambda: socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM), errno.EACCES)
        refused(lambda: socket.socketpair(socket.AF_UNIX, socket.SOCK_RAW), errno.EACCES)
        socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)  # multiprocessing needs these
        socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # IPv4 only where the runner allows it (its own network namespace, or TCP under
        # Landlock): not by default
        refused(lambda: socket.socket(socket.AF_INET), errno.EAFNOSUPPORT)
        assert libc.unshare(0x10000000) == -1 and ctypes.get_errno() == errno.EPERM
        assert libc.syscall(425, 4, ctypes.create_string_buffer(120)) == -1  # io_uring_setup
        assert ctypes.get_errno() == errno.ENOSYS
        assert libc.mount(b"none", b"/tmp", b"tmpfs", 0, None) == -1
        assert ctypes.get_errno() == errno.EPERM
        t = threading.Thread(target=lambda: None); t.start(); t.join()
        assert subprocess.run(["true"]).returncode == 0
        if os.fork() == 0:
            os._exit(0)
        print("refused all")
        """
    )
    assert done.returncode == 0 and "refused all" in done.stdout, done.stderr


@linux_only
@pytest.mark.skipif(os.uname().machine != "x86_64", reason="int 0x80 is x86's")
def test_the_filter_kills_a_32_bit_system_call():
    done = _in_filtered_child(
        """
        import ctypes
        libc = ctypes.CDLL(None)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                              ctypes.c_int, ctypes.c_long]
        page = libc.mmap(None, 4096, 7, 0x22 | 0x40, -1, 0)
        code = bytes([0xB8, 20, 0, 0, 0, 0xCD, 0x80, 0xC3])  # mov eax, 20 (getpid); int 0x80; ret
        ctypes.memmove(page, code, len(code))
        ctypes.CFUNCTYPE(ctypes.c_int)(page)()
        print("survived")
        """
    )
    assert done.returncode == -signal.SIGSYS and "survived" not in done.stdout


def test_the_filter_program_assembles_for_each_machine():
    for machine in ("x86_64", "aarch64"):
        program = seccomp.program(machine)
        assert 20 < len(program) < 255
        assert program[-1].k == seccomp.KILL_PROCESS


scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
plain = st.recursive(
    scalars | st.just([]) | st.just({}),
    lambda children: (
        st.lists(children, min_size=1, max_size=4)
        | st.dictionaries(st.text(), children, min_size=1, max_size=4)
    ),
    max_leaves=20,
)


@given(plain)
def test_the_runners_encoder_writes_what_json_reads_back(value):
    assert json.loads(channel.encode_plain(value)) == value


def test_the_encoder_refuses_anything_but_plain_data():
    class Sneaky(dict):
        def items(self):
            return [("score", 10)]

    for bad in (Sneaky(a=1), {1: 2}, [object()], {"x": {"y": 2.0j}}, type("F", (float,), {})(1.0)):
        with pytest.raises(channel.NotPlainData):
            channel.encode_plain(bad)
    deep = []
    for _ in range(channel.MAX_DEPTH + 2):
        deep = [deep]
    with pytest.raises(channel.NotPlainData):
        channel.encode_plain(deep)
    with pytest.raises(channel.NotPlainData):
        channel.encode_plain("x" * 100, max_bytes=50)
    assert json.loads(channel.encode_plain([math.inf, "\ud800"])) == [math.inf, "\ud800"]


def test_frames_from_a_hand_in_are_read_with_caps_and_never_crash_the_reader():
    for payload in (b"[" * 100_000 + b"]" * 100_000, b"\xff\xfe", b"[1, 2]", b"{}", b"nul\0"):
        with pytest.raises(channel.ChannelError):
            channel.parse_untrusted(payload)
    read, write = os.pipe()
    os.write(write, channel.HEADER.pack(channel.MAX_FRAME_BYTES + 1))
    reader = channel.FrameReader(read)
    with pytest.raises(channel.ChannelError, match="at most"):
        reader.next_frame(deadline=float("inf"))
    os.close(read)
    os.close(write)


def test_text_is_made_lossless_and_safe_for_a_terminal():
    assert lossless("ada\udcff") == "ada\\udcff"
    assert lossless("Zoë") == "Zoë"
    assert for_terminal("ada\x1b[31m\n") == "ada\\x1b[31m\\n"
    notes = capped_notes(["x" * 10_000] * 100)
    assert len(notes) == 41 and all(len(n) <= 500 for n in notes) and "60 more" in notes[-1]


def test_the_seal_names_what_a_notebook_replaced_whatever_file_its_code_claims():
    import torch

    import coursekit.checks

    provenance = Provenance((os.path.dirname(os.path.dirname(torch.__file__)) + "/",))
    provenance.seal()
    sealed = harness_seal.seal()
    question = coursekit.checks.QUESTIONS["accumulate_window"]
    run = type(question).run
    original, code = torch.allclose, run.__code__
    # code that claims to be torch's own: its file name is a lie, so it is the notebook's
    fake = eval(compile("lambda *a, **k: True", torch.__file__, "eval"))
    swapped = compile("def run(self, fn, spec):\n    return 1\n", torch.__file__, "exec")
    try:
        torch.allclose = fake
        question.run = fake
        run.__code__ = swapped.co_consts[0]
        assert set(harness_seal.changes(sealed, provenance)) >= {
            "torch.allclose",
            "QUESTIONS['accumulate_window'].run",
            f"the code of {run.__module__}.{run.__qualname__}",  # wherever the checks live
        }
    finally:
        torch.allclose = original
        run.__code__ = code
        del question.run
    assert harness_seal.changes(sealed, provenance) == []


def test_library_code_is_told_by_its_code_not_by_the_file_it_names():
    import collections

    import torch

    provenance = Provenance((os.path.dirname(os.path.dirname(torch.__file__)) + "/",))
    provenance.seal()
    assert provenance.is_library(collections.namedtuple.__code__)
    assert provenance.is_library(torch.nn.Module.__call__.__code__)
    forged = compile("def f():\n    return 1\n", torch.__file__, "exec")
    assert not provenance.is_library(forged)
    assert not provenance.is_library(forged.replace(co_filename=torch.nn.__file__))
    # a faithful compile of a library's own file is that library's code
    source = open(torch.nn.modules.module.__file__, "rb").read()
    honest = compile(source, torch.nn.modules.module.__file__, "exec", dont_inherit=True)
    assert provenance.is_library(honest)


@in_docker_like
def test_what_grade_says_is_missing_without_namespaces():
    run = run_hand_in(["x = 1"], [], Limits(hand_in_timeout_s=120), Options(isolation="none"))
    assert run.failure is None
    present, missing = describe_confinement(run.confinement)
    joined = " ".join(missing)
    for gap in ("PID namespace", "root file system of its own", "network namespace"):
        assert gap in joined, joined
    assert "a seccomp filter" in present or not seccomp.supported()


@linux_only
def test_a_hand_in_sees_only_its_own_root_and_processes():
    cells = [
        # Landlock grants no listing of / (its allow list never holds /); without it, / holds
        # only the hand-in's own skeleton
        "import os\ntry:\n    seen = sorted(os.listdir('/'))\nexcept PermissionError:\n"
        "    seen = []",
        "assert 'home' not in seen and os.getcwd() == '/scratch/work', seen",
        "pids = sorted(p for p in os.listdir('/proc') if p.isdigit())\n"
        "assert pids == ['1', '2'], pids",
        "open('/usr/x', 'w')",
        "import socket\nsocket.socket(socket.AF_INET).connect(('1.1.1.1', 53))",
    ]
    run = run_hand_in(cells, [], Limits(hand_in_timeout_s=120))
    statuses = [c["status"] for c in run.cells]
    assert statuses == ["ok", "ok", "ok", "error", "error"], run.cells
    assert "Read-only file system" in run.cells[3]["error"] or "Permission" in run.cells[3]["error"]


def _ended_pids(count: int) -> list[int]:
    """Ids of processes that have just ended: no process has them now."""
    ended = [subprocess.Popen(["true"]) for _ in range(count)]
    for process in ended:
        process.wait()
    return [process.pid for process in ended]


def _folder(path, uid: int | None = None):
    (path / "deep").mkdir(parents=True)
    (path / "deep" / "file").write_text("x")
    if uid is not None:
        os.chown(path, uid, uid)
    return path


@linux_only
def test_a_sweep_removes_only_real_folders_of_ours_whose_processes_are_gone(tmp_path):
    grader, runner, other = _ended_pids(3)
    me = os.getpid()
    gone = [f"coursekit-hand-in-{grader}-{runner}", f"coursekit-hand-in-{other}"]  # old name too
    kept = [
        f"coursekit-hand-in-{me}-{runner}",  # its grader (this process) is alive
        f"coursekit-hand-in-{grader}-{me}",  # its owner is alive
        f"coursekit-hand-in-{grader}-{runner}-x",  # not a name of ours
        f"coursekit-hand-in-0-{runner}",
    ]
    for name in gone + kept:
        _folder(tmp_path / name)
    elsewhere = _folder(tmp_path / "elsewhere")
    (tmp_path / f"coursekit-hand-in-{other}-{runner}").symlink_to(elsewhere)
    (tmp_path / f"coursekit-hand-in-{runner}-{other}").write_text("a file, not a folder")
    kept += [
        "elsewhere",
        f"coursekit-hand-in-{other}-{runner}",
        f"coursekit-hand-in-{runner}-{other}",
    ]
    if os.geteuid() == 0:
        _folder(tmp_path / f"coursekit-hand-in-{runner}-{grader}", uid=65534)  # another user's
        kept.append(f"coursekit-hand-in-{runner}-{grader}")
        # the scratch a root grader's runner gave its hand-in's own user: that runner's
        gone.append(f"coursekit-hand-in-{other}-{grader}")
        _folder(tmp_path / gone[-1], uid=privileges.hand_in_ids(grader)[0])
    assert sorted(scratch.sweep(tmp_path)) == sorted(str(tmp_path / name) for name in gone)
    assert sorted(os.listdir(tmp_path)) == sorted(kept)
    assert (elsewhere / "deep" / "file").exists()  # nothing followed the link


@linux_only
def test_a_folder_named_after_this_process_but_older_than_it_is_an_earlier_ones(
    tmp_path, monkeypatch
):
    # a restarted container, or pids wrapping round, gives this grader an earlier one's pid
    (runner,) = _ended_pids(1)
    earlier = _folder(tmp_path / f"coursekit-hand-in-{os.getpid()}-{runner}")
    assert scratch.sweep(tmp_path) == []  # made after this process began: this run's
    monkeypatch.setattr(scratch, "_LOADED_AT", time.time() + 60)  # now it predates it
    assert scratch.sweep(tmp_path) == [str(earlier)]


@linux_only
def test_a_sandbox_that_cannot_be_built_is_the_machines_fault_not_the_notebooks():
    from coursekit.grading.sandbox.driver import SandboxSetupError

    with pytest.raises(SandboxSetupError, match="making the hand-in's root failed"):
        run_hand_in(["x = 1"], [], Limits(scratch_bytes=-1, hand_in_timeout_s=120))


_SPINS_ONCE = """
calls = []
def effective_batch_size(micro_batch_size, accum_steps, world_size=1):
    calls.append(1)
    while len(calls) == 1:  # the first call never ends
        pass
    return micro_batch_size * accum_steps * world_size
"""


@in_docker_like
def test_time_limits_are_cpu_time_with_a_wall_clock_backstop():
    cells = [
        "import time\ntime.sleep(2)",  # waits 2 s without computing: within a 1 s CPU limit
        "while True:\n    pass",  # computes past 1 s of CPU
        # the CPU timer's signal blocked, then a wait: the wall clock's timer still ends it
        "import time, signal\nsignal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGPROF})\n"
        "time.sleep(600)",
        # and no handler can be changed (a handler is handed the runner's frames)
        "import signal\nsignal.signal(signal.SIGPROF, signal.SIG_IGN)",
    ]
    limits = Limits(cell_timeout_s=1, hand_in_timeout_s=120, wall_factor=8)
    run = run_hand_in(cells, [], limits, Options(isolation="none"))
    statuses = [c["status"] for c in run.cells]
    assert statuses == ["ok", "timeout", "timeout", "error"], run.cells
    assert run.cells[3]["error"].startswith("PermissionError"), run.cells
    assert run.seconds < 100  # the sleeper was ended by the 8 s backstop, not after 600 s


@in_docker_like
def test_timers_taken_off_by_a_signal_module_made_again_are_flagged():
    """``_signal`` run again reads every handler back as None: the timers then end nothing.
    Handlers cannot be set again (they are frozen), so it is flagged, and the hand-in runs
    to the grader's own limit."""
    cells = [
        "import _imp, importlib.machinery\n"
        "_again = _imp.create_builtin(importlib.machinery.ModuleSpec('_signal', None))\n"
        "_imp.exec_builtin(_again)",
        "x = 1",
    ]
    run = run_hand_in(cells, [], Limits(cell_timeout_s=5, hand_in_timeout_s=60))
    assert [c["status"] for c in run.cells] == ["ok", "ok"], run.cells
    assert any("took the grader's time limits off" in flag for flag in run.flags), run.flags


@in_docker_like
def test_a_test_that_runs_out_of_time_is_tried_once_more_and_then_says_so():
    from coursekit.checks import QUESTIONS
    from coursekit.grading.judging import judge_test

    question = QUESTIONS["effective_batch_size"]
    spec = question.public_specs()[0]
    tasks = [{"question": question.name, "spec": spec}]
    limits = Limits(task_timeout_s=1, hand_in_timeout_s=120)
    run = run_hand_in([_SPINS_ONCE], tasks, limits, Options(isolation="none"))
    assert run.tasks[0]["status"] == "ok"  # the second try finished: no points lost
    spins = _SPINS_ONCE.replace("while len(calls) == 1", "while True")
    run = run_hand_in([spins], tasks, limits, Options(isolation="none"))
    assert run.tasks[0]["status"] == "timeout"
    expected = question.run(question.reference(), spec)
    passed, message, mistake = judge_test(question, spec, run.tasks[0], expected, 1)
    assert not passed and mistake is None
    assert "took too long" in message and "wrong" not in message.replace("right or wrong", "")
