"""A command run as a program ends without Python's teardown (coursekit/commands/quick_exit.py),
and loses nothing by it: its status, its buffered output, its atexit functions and the
threads it started all end as Python's own ending would have them."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _run(tmp_path: Path, body: str) -> subprocess.CompletedProcess:
    script = tmp_path / "program.py"
    script.write_text(
        "import atexit, sys, threading, time\n"
        "from pathlib import Path\n"
        "from coursekit.commands.quick_exit import end_now\n"
        f"HERE = Path({str(tmp_path)!r})\n" + textwrap.dedent(body)
    )
    return subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )


def test_the_status_output_atexit_functions_and_threads_are_kept(tmp_path):
    done = _run(
        tmp_path,
        """
        atexit.register(lambda: (HERE / "atexit").write_text("ran"))
        def late():
            time.sleep(0.3)
            (HERE / "thread").write_text("finished")
        threading.Thread(target=late).start()  # not a daemon: waited for
        sys.stdout.write("buffered, no newline")  # a pipe: held in the buffer until flushed
        end_now(3)
        print("never printed")
        """,
    )
    assert done.returncode == 3, done.stderr
    assert done.stdout == "buffered, no newline"
    assert (tmp_path / "atexit").read_text() == "ran"
    assert (tmp_path / "thread").read_text() == "finished"


def test_the_teardown_is_skipped(tmp_path):
    """What the teardown would do (a module global's finalizer) does not happen: that is
    the time saved."""
    done = _run(
        tmp_path,
        """
        class Kept:
            def __del__(self):
                (HERE / "finalized").write_text("torn down")
        KEPT = Kept()
        end_now(None)
        """,
    )
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "finalized").exists()


def test_a_status_that_is_not_a_number_ends_as_python_ends(tmp_path):
    done = _run(
        tmp_path,
        """
        end_now("a message")
        print("returned")
        raise SystemExit("a message")
        """,
    )
    assert done.returncode == 1
    assert done.stdout == "returned\n"
    assert done.stderr.strip() == "a message"


def test_a_status_beyond_a_byte_ends_as_the_system_keeps_it(tmp_path):
    assert _run(tmp_path, "end_now(256 + 7)\n").returncode == 7
    assert _run(tmp_path, "end_now(-1)\n").returncode == 255


def test_the_command_line_ends_with_its_status_and_all_its_output(capsys):
    """Run as a program, a command prints all it prints in process, with its status."""
    from coursekit.commands.cli import main

    for argv, status in (
        (["links", "--hub", "https://hub.example.org"], 0),
        (["no-such-command"], 2),
    ):
        assert main(argv) == status
        in_process = capsys.readouterr()
        done = subprocess.run(
            [sys.executable, "-m", "coursekit.commands.cli", *argv],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=120,
        )
        assert done.returncode == status, done.stderr
        assert (done.stdout, done.stderr) == (in_process.out, in_process.err)
        assert done.stdout or done.stderr
