"""Harness integrity and the grader without namespaces (issue 29), graded in both modes.

One batch of module-1 hand-ins is graded twice: with namespaces (as root on this machine), and
in a Docker-like mode (tests/helpers/docker_like.py: ``unshare``, ``setns`` and namespace ``clone``
refused as Docker's default profile refuses them, ``clone3`` ENOSYS, cgroups read-only), with
and without the Landlock system calls. In every mode: right answers keep full marks with no
flag; every attack on the harness (tests/corpora/hostile.py HARNESS_ATTACKS, each placed before
three WRONG answers) loses its points or is flagged; attacks that root could once make (the hand-in
is root where no user namespace hides it) reach no grader file, no other process and no other
student's grade; nothing is left running; the gradebook passes ``PRAGMA integrity_check``.
"""

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.corpora.hostile import (
    HARNESS_ATTACKS,
    HONEST_HABITS,
    PROCESS_ATTACK_FLAGS,
    REGISTRATION_ORIGINALS,
)
from tests.helpers import docker_like
from tests.helpers.hand_ins import ASSIGNMENT, IMPORTS, REPO, answers, notebook, runners_left

pytestmark = [
    pytest.mark.grading,
    pytest.mark.module1,
    pytest.mark.skipif(docker_like.available() is not None, reason=str(docker_like.available())),
]
WRONG = {
    "accumulate_window": "loss_not_divided",
    "train_accumulated": "step_every_micro_batch",
    "plan_micro_batch": "not_largest",
}
LIMITS = ["--cell-timeout", "20", "--test-timeout", "10", "--timeout", "150", "--wall-factor", "3"]

# What root could do to others before hand-ins ran as a user of their own: each is a cell
# placed before the right answers, so a hand-in that reached nothing keeps full marks.
ROOT_ATTACKS = {
    # another student's grade, the gradebook, the course's hidden tests, the key, /etc/shadow
    "reads_and_writes_grader_files": """
import glob, os
found = []
for pattern in ("{gradebook}", "{course}/notebooks/*.ipynb", "/etc/shadow", "{folder}/*.ipynb"):
    for path in glob.glob(pattern):
        try:
            open(path, "rb").read(16)
            found.append(path)
        except OSError:
            pass
        try:
            open(path, "ab").close()
            found.append("w:" + path)
        except OSError:
            pass
if found:
    raise RuntimeError("LEAKED: " + " ".join(found))
""",
    # every process it can see: the warm parent, other students' runners, the grader
    "kills_every_process": """
import os, signal
for pid in os.listdir("/proc"):
    if pid.isdigit() and int(pid) != os.getpid():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except OSError:
            pass
""",
    # 768 MiB, past the 512 MiB scratch cap, half in its folder and half in /tmp
    "fills_the_disk": """
import os
block = b"x" * 2**20
def fill(path):
    with open(path, "wb") as handle:
        for _ in range(64):
            handle.write(block)
for i in range(12):
    try:
        fill(f"/tmp/fill-{{i}}")  # the host's /tmp where it has no root of its own
    except OSError:
        fill(f"fill-{{i}}")  # its scratch folder: raises when that is full too
""",
    "many_processes": """
import os, time
children = 0
for _ in range(150):
    try:
        if os.fork() == 0:
            time.sleep(600)
            os._exit(0)
        children += 1
    except OSError:
        break
if children >= 150:
    raise RuntimeError("UNCAPPED: 150 processes")
""",
    # the timers' handler, read back with signal.getsignal: its globals were the runner's
    # private copy, whose names (run_task, which is handed the runner's questions) the
    # runner calls, and which a cell could rebind without an audited step
    "timer_handler_reaches_the_runner": """
import signal
for number in (signal.SIGALRM, signal.SIGPROF):
    names = getattr(signal.getsignal(number), "__glo" + "bals__", {{}})
    if "run_task" in names or "serve" in names:
        raise RuntimeError("LEAKED: the runner's own names, through the timers' handler")
""",
    # the names the next hand-ins' scratch folders would get, were they predictable: folders,
    # files and links to / (old names and new), held while the others start (issue 40)
    "squats_scratch_names": """
import os, re, time
found = re.search(r"coursekit-hand-in-([0-9]+)-([0-9]+)", os.getcwd())
made = 0
for pid in range(int(found.group(2)) + 1, int(found.group(2)) + 400) if found else ():
    for name in (f"{{pid}}", f"{{pid}}-{{pid:016x}}"):
        path = f"/tmp/coursekit-hand-in-{{found.group(1)}}-{{name}}"
        try:
            [os.mkdir, lambda p: open(p, "w").close(), lambda p: os.symlink("/", p)][pid % 3](path)
            made += 1
        except OSError:
            pass
time.sleep(3 if made else 0)
""",
}


# A kernel registered by the cells past every wrapper (through what the wrappers replaced,
# as hostile.py's kernel_registered_unseen takes it), left on for the first test and taken
# off by the function's second call: only a reading of the dispatcher made before the tests
# that follow the first one sees it (the one after the last test does not). With the memory
# test first, the prime call is the first call, and the reading is made as its fork measures.
KERNEL_UNTIL_THE_SECOND_CALL = (
    "import gc, torch\n"
    + REGISTRATION_ORIGINALS
    + """_handle = _real["_dispatch_library"]("IMPL", "aten", "", "<cell>", 1)
_real["impl"](_handle, "logit", torch._C.DispatchKey.CPU, lambda *args: args[0])
""",
    """
_calls, _answer = [0], accumulate_window
def accumulate_window(*args, **kwargs):
    _calls[0] += 1
    if _calls[0] == 2:
        _handle.reset()
    return _answer(*args, **kwargs)
""",
)


# The same kernel, registered past every wrapper by the function of the question tested last
# (plan_micro_batch: the memory test runs first, then the questions in order) and left on:
# only the reading made after the last test's answer sees it, while the next hand-in has
# begun (coursekit/grading/sandbox/lanes.py).
KERNEL_FROM_THE_LAST_QUESTION = (
    "import gc, torch\n" + REGISTRATION_ORIGINALS,
    """
_made, _planner = [], plan_micro_batch
def plan_micro_batch(*args, **kwargs):
    if not _made:
        _made.append(_real["_dispatch_library"]("IMPL", "aten", "", "<cell>", 1))
        _real["impl"](_made[0], "logit", torch._C.DispatchKey.CPU, lambda *args: args[0])
    return _planner(*args, **kwargs)
""",
)


# The last question's function, right, ends its process 50 ms after its latest call: after
# the last test's answer, while the runner reads the dispatcher and compares the seal
# (or, on a slow machine, between two tests). That is the last test's crash: it keeps no
# points of it, and the next try ends the same way.
EXITS_AFTER_ITS_LAST_ANSWER = """
import os, threading
_exit_timer, _planner_before = [], plan_micro_batch
def plan_micro_batch(*args, **kwargs):
    for timer in _exit_timer:
        timer.cancel()
    _exit_timer[:] = [threading.Timer(0.05, os._exit, (0,))]
    _exit_timer[0].start()
    return _planner_before(*args, **kwargs)
"""


def _hand_ins(folder, course, gradebook) -> dict[str, str]:
    register, take_off = KERNEL_UNTIL_THE_SECOND_CALL
    originals, last_question = KERNEL_FROM_THE_LAST_QUESTION
    cells = {
        "ada": [IMPORTS, *answers()],
        "honest": [IMPORTS, HONEST_HABITS, *answers()],
        "wrong": [IMPORTS, *answers(**WRONG)],
        **{name: [IMPORTS, attack, *answers(**WRONG)] for name, attack in HARNESS_ATTACKS.items()},
        "kernel_until_the_second_call": [IMPORTS, register, *answers(**WRONG), take_off],
        "kernel_from_the_last_question": [IMPORTS, originals, *answers(), last_question],
        "exits_after_its_last_answer": [
            IMPORTS,
            originals,
            *answers(),
            last_question,
            EXITS_AFTER_ITS_LAST_ANSWER,
        ],
    }
    where = {"gradebook": gradebook, "course": course, "folder": folder}
    for name, attack in ROOT_ATTACKS.items():
        cells[name] = [IMPORTS, attack.format(**where), *answers()]
    for name, content in cells.items():
        (folder / f"{name}.ipynb").write_text(notebook(content))
    return cells


def course_copy(base) -> Path:
    """The course's notebooks/ in a folder of its own: without namespaces, grade takes other
    users' permissions off the notebooks/ it grades from, which must not be this checkout's."""
    course = base / "course"
    shutil.copytree(REPO / "notebooks", course / "notebooks")
    os.chmod(course / "notebooks", 0o755)  # as a checkout has it
    return course


def _grade(mode: str, base) -> dict:
    folder = base / "hand-ins"
    folder.mkdir()
    gradebook = base / "gradebook.sqlite"
    course = course_copy(base)
    _hand_ins(folder, course, gradebook)
    command = [sys.executable, "-m", "coursekit.commands.cli", "grade", str(folder)]
    command += ["--assignment", ASSIGNMENT, "--json", "--workers", "2"]
    command += ["--gradebook", str(gradebook), "--root", str(course), *LIMITS]
    env = {**os.environ, "AS_USER_PATHS": str(base)}
    if mode == "namespaces":
        done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=REPO)
    else:
        done = docker_like.run(
            command, old=mode == "docker-old", capture_output=True, text=True, env=env
        )
    results = {}
    for line in done.stdout.splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            results[record["student"]] = record
    with sqlite3.connect(gradebook) as db:
        integrity = db.execute("PRAGMA integrity_check").fetchone()[0]
    return {
        "status": done.returncode,
        "stderr": done.stderr,
        "results": results,
        "integrity": integrity,
        "runners_left": runners_left(),
        "gradebook_mode": oct(gradebook.stat().st_mode & 0o777),
        "notebooks_mode": oct((course / "notebooks").stat().st_mode & 0o777),
    }


@pytest.fixture(scope="module", params=["namespaces", "docker", "docker-old"])
def graded(request, tmp_path_factory):
    base = tmp_path_factory.mktemp(f"harness-{request.param}")
    os.chmod(base, 0o755)
    return request.param, _grade(request.param, base)


def _flags(result: dict) -> list[str]:
    return [n for n in result["notes"] if n.startswith("Flagged for review")]


def test_the_batch_finishes_and_the_gradebook_is_whole(graded):
    mode, run = graded
    assert run["status"] in (0, 1), run["stderr"][-3000:]
    assert run["integrity"] == "ok"
    assert run["runners_left"] == 0
    assert run["gradebook_mode"] == "0o600"
    # where hand-ins share the grader's files, others' permissions are taken off notebooks/
    assert run["notebooks_mode"] == ("0o755" if mode == "namespaces" else "0o750")
    expected = {"ada", "honest", "wrong", *HARNESS_ATTACKS, *ROOT_ATTACKS}
    expected |= {
        "kernel_until_the_second_call",
        "kernel_from_the_last_question",
        "exits_after_its_last_answer",
    }
    assert set(run["results"]) == expected, run["stderr"][-3000:]


def test_the_mode_is_said(graded):
    mode, run = graded
    if mode == "namespaces":
        assert "namespaces as root" in run["stderr"]
    else:
        assert "no namespaces, as root" in run["stderr"], run["stderr"][-2000:]
        assert ("Landlock" in run["stderr"].split("Mode:")[-1].splitlines()[0]) == (
            mode == "docker"
        )


def test_right_answers_keep_full_marks_and_no_flag(graded):
    _, run = graded
    for name in ("ada", "honest"):
        result = run["results"][name]
        assert result["score"] == result["max_score"], (name, result)
        assert not _flags(result), (name, result["notes"])


@pytest.mark.parametrize("name", sorted(HARNESS_ATTACKS))
def test_every_harness_attack_loses_its_points_or_is_flagged(graded, name):
    _, run = graded
    result, wrong = run["results"][name], run["results"]["wrong"]
    assert wrong["score"] < wrong["max_score"]
    assert result["score"] <= wrong["score"] or _flags(result), (name, result)


@pytest.mark.parametrize("name", sorted(PROCESS_ATTACK_FLAGS))
def test_reaching_into_its_own_process_is_named_in_every_mode(graded, name):
    """Issue 40's classes b, c, d: torch state left on, library code run as the notebook's,
    coursekit's answers through library callers; each named, whatever the mode."""
    _, run = graded
    flags = " ".join(_flags(run["results"][name]))
    for expected in PROCESS_ATTACK_FLAGS[name]:
        assert expected in flags, (name, expected, flags)


def test_a_kernel_the_cells_left_for_the_first_test_alone_is_named(graded):
    """The dispatcher is read before the tests (where the first is a memory test, while its
    fork measures), not only after the last: a kernel left by the cells and taken off after
    the first call is named."""
    _, run = graded
    flags = " ".join(_flags(run["results"]["kernel_until_the_second_call"]))
    assert "aten::logit" in flags and "cannot be taken back" in flags, flags


def test_a_kernel_the_last_question_left_is_named_after_its_last_answer(graded):
    """The dispatcher is read again once the last test has answered (while the batch's next
    hand-in may start: lanes.py), and the grader waits for what it finds before it ends the
    process: a kernel registered past every wrapper by the last question is named."""
    _, run = graded
    flags = " ".join(_flags(run["results"]["kernel_from_the_last_question"]))
    assert "aten::logit" in flags and "cannot be taken back" in flags, flags


def test_a_process_that_ends_before_the_last_checks_keeps_no_points_of_its_last_test(graded):
    """The same kernel, and a process that ends right after its last answer, before the
    checks that would name it: that is the last test's crash, and each try without it ends
    the same way until its tries run out; it never keeps full marks (with the answers kept
    at the first such end, it had 10/10)."""
    _, run = graded
    result = run["results"]["exits_after_its_last_answer"]
    assert result["score"] < result["max_score"], result


def test_no_attack_holds_its_process_until_the_time_limit(graded):
    """Every hand-in here is graded, or ends of its own doing: none is stopped by a time
    limit. A frame callback that set torch's hook again as the grader put it back once held
    its process on the guard's own lock until the limit ran out, ungraded (frame_hook_guard.py)."""
    _, run = graded
    held = {
        name: said
        for name, result in run["results"].items()
        for said in (result.get("error") or "", *(q["feedback"] for q in result["questions"]))
        if "took too long" in said
    }
    assert held == {}


@pytest.mark.parametrize("name", sorted(ROOT_ATTACKS))
def test_nothing_of_the_graders_or_of_others_is_reached(graded, name):
    _, run = graded
    result = run["results"][name]
    text = json.dumps(result)
    assert "LEAKED" not in text and "UNCAPPED" not in text, text[:2000]
    # the others keep their grades, whatever this one killed
    assert run["results"]["ada"]["score"] == run["results"]["ada"]["max_score"]


def test_names_a_hand_in_squats_stop_no_one_and_it_is_named(graded):
    mode, run = graded
    assert all(r.get("not_graded") is None for r in run["results"].values()), run["stderr"][-3000:]
    assert run["results"]["ada"]["score"] == run["results"]["ada"]["max_score"]
    flags = " ".join(_flags(run["results"]["squats_scratch_names"]))
    # only where nothing keeps its writes to its own folder (no Landlock, no root of its own)
    assert ("named like the grader's own scratch folders" in flags) == (mode == "docker-old")


@pytest.mark.parametrize("old", [False, True], ids=["docker", "docker-old"])
def test_gloo_checks_keep_full_marks_without_namespaces(tmp_path, old):
    """Modules 2 and 4 run a one-process gloo group in the hand-in's process: without a network
    namespace the filter lets TCP alone through, and Landlock (where there is one) holds it
    to binding a port the kernel picks. A right answer keeps full marks either way."""
    from tests.helpers.hand_ins import cells_of

    os.chmod(tmp_path, 0o755)
    course = course_copy(tmp_path)
    results = {}
    for assignment in ("02_loss_scaling", "04_distributed"):
        folder = tmp_path / assignment
        folder.mkdir()
        (folder / "ada.ipynb").write_text(notebook(cells_of(assignment, {}), assignment))
        command = [sys.executable, "-m", "coursekit.commands.cli", "grade", str(folder), "--json"]
        command += ["--assignment", assignment, "--root", str(course), *LIMITS]
        command += ["--gradebook", str(tmp_path / f"{assignment}.sqlite")]
        env = {**os.environ, "AS_USER_PATHS": str(tmp_path)}
        done = docker_like.run(command, old=old, capture_output=True, text=True, env=env)
        assert done.returncode == 0, done.stderr[-3000:]
        results[assignment] = json.loads(done.stdout.splitlines()[-1])
    for assignment, result in results.items():
        assert result["score"] == result["max_score"], (assignment, result)
        assert not _flags(result), (assignment, result["notes"])


def test_a_hand_in_fills_no_more_than_its_scratch_cap(graded):
    mode, run = graded
    result = run["results"]["fills_the_disk"]
    notes = " ".join(result["notes"])
    if mode == "namespaces":  # a tmpfs of its own, capped
        assert "No space left on device" in notes, notes
    else:  # the watchdog ended it, and its cell was skipped on the next try
        assert "MiB (or 20000 files) of scratch space" in notes, notes
    assert result["score"] == result["max_score"]
