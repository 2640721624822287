"""Grading as an ordinary user: the sandbox still works, through an unprivileged user
namespace where the kernel allows one, and otherwise says exactly what is missing.

Run as root (as CI is), the test grades as uid 65534 (nobody) through tests/helpers/as_user.py.
"""

import json
import os
import socket
import subprocess
import sys

import pytest

from tests.corpora.hostile import MARKERS, payloads
from tests.helpers.hand_ins import ASSIGNMENT, IMPORTS, REPO, answers, notebook

pytestmark = [
    pytest.mark.grading,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox is Linux's"),
]
NOBODY = 65534


def _as_user(command: list[str], paths: list[str]) -> list[str]:
    if os.getuid() != 0:
        return command
    as_user = REPO / "tests" / "helpers" / "as_user.py"
    return [sys.executable, str(as_user), str(NOBODY), "--", *command]


def _user_namespaces_work(paths: list[str]) -> bool:
    probe = "import ctypes, sys; sys.exit(ctypes.CDLL(None).unshare(0x10000000) != 0)"
    done = subprocess.run(
        _as_user([sys.executable, "-c", probe], paths),
        cwd=REPO,
        env={**os.environ, "AS_USER_PATHS": os.pathsep.join(paths)},
    )
    return done.returncode == 0


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    base = tmp_path_factory.mktemp("unprivileged")
    os.chmod(base, 0o777)
    folder = base / "hand-ins"
    folder.mkdir(mode=0o777)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(str(base / "open.dgram"))
    os.chmod(base / "open.dgram", 0o666)  # any user outside a sandbox could send to it
    listener.setblocking(False)
    # sleepers of this test's own (2998 s): the corpus batch, maybe running beside it, counts 2999
    attacks = payloads({"socket": base / "open.sock", "dgram": base / "open.dgram"}, 2998)
    hand_ins = {
        "ada": [IMPORTS, *answers()],
        "ben": [IMPORTS, *answers(accumulate_window="loss_not_divided")],
        **{
            name: [IMPORTS, *attacks[name], *answers()]
            for name in ("escape_datagram", "proc_secrets", "processes_left_behind", "fill_disk")
        },
        # RLIMIT_NPROC, not a pids cgroup, holds an ordinary user's processes
        "many_processes": [
            IMPORTS,
            "import subprocess\nfor _ in range(500):\n    subprocess.Popen(['sleep', '2998'])",
            *answers(),
        ],
    }
    for name, cells in hand_ins.items():
        (folder / f"{name}.ipynb").write_text(notebook(cells))
    paths = [str(base)]
    command = [sys.executable, "-m", "coursekit.commands.cli", "grade", str(folder), "--json"]
    command += ["--assignment", ASSIGNMENT, "--workers", "2", "--root", str(REPO)]
    command += ["--gradebook", str(base / "gradebook.sqlite")]
    done = subprocess.run(
        _as_user(command, paths),
        cwd=base,
        env={**os.environ, "AS_USER_PATHS": os.pathsep.join(paths)},
        capture_output=True,
        text=True,
        timeout=900,
    )
    return {
        "done": done,
        "results": {
            json.loads(line)["student"]: json.loads(line) for line in done.stdout.splitlines()
        },
        "listener": listener,
        "user_namespaces": _user_namespaces_work(paths),
        "sleepers": subprocess.run(["pgrep", "-c", "-f", "sleep 2998"], capture_output=True).stdout,
    }


def test_an_ordinary_user_grades_and_gets_the_right_scores(graded):
    assert graded["done"].returncode == 0, graded["done"].stderr
    results = graded["results"]
    assert results["ada"]["score"] == 10.0 and results["ben"]["score"] < 10.0
    contained = ("escape_datagram", "proc_secrets", "processes_left_behind", "fill_disk")
    for name in (*contained, "many_processes"):
        assert results[name]["score"] == 10.0, results[name]


def test_the_sandbox_holds_or_says_what_is_missing(graded):
    err = graded["done"].stderr
    if graded["user_namespaces"]:
        assert "Sandbox: its own processes; its own read-only root" in err, err
        warnings = [line for line in err.splitlines() if line.startswith("Warning:")]
        assert all("memory cgroup (none is delegated" in w for w in warnings), warnings
        everything = json.dumps(graded["results"])
        assert not any(marker in everything for marker in MARKERS), everything
        with pytest.raises(BlockingIOError):
            graded["listener"].recv(100)
        assert graded["sleepers"].strip() in (b"", b"0")
        assert "No space left on device" in " ".join(graded["results"]["fill_disk"]["notes"])
    else:
        for missing in ("PID namespace", "root file system of its own", "network namespace"):
            assert f"Warning: the sandbox here has no {missing}" in err, err
