"""`coursekit start` stops its JupyterLab however it is stopped, and the lab never asks about
Jupyter's news: real processes, real signals.

A stand-in server (a few lines of Python answering JupyterLab's status URL) takes the lab's
place for each way of stopping, started exactly as the lab is (the same pipe and session);
one test runs the real JupyterLab. Nothing is timed: each wait has a generous backstop only
so that a broken build fails instead of hanging.

No test relies on the signal dispositions the test runner hands down (``nohup ./scripts/test``
ignores SIGHUP, a background job SIGINT): coursekit is started with every stop signal ignored,
as the worst runner would, and sets the ones each test names itself, as a terminal would.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import urllib.request
from pathlib import Path

import pytest

from coursekit.commands import launch

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="reads /proc to find the lab's processes"
)
BACKSTOP_S = 180  # only ever reached by a build that hangs

FAKE_LAB = """\
import http.server, os, sys
port = int(next(a.split("=", 1)[1] for a in sys.argv if a.startswith("--ServerApp.port=")))
class Status(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"{}")
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", port), Status).serve_forever()
"""

#: The signals that stop `coursekit start`; none of their dispositions is inherited here.
STOP_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")

# coursekit start, as a terminal runs it: each stop signal as a fresh process has it (SIGINT
# raises KeyboardInterrupt), whatever the test runner handed down, except those named in
# argv[4] (comma-separated), ignored as `nohup` ignores SIGHUP; serving LAB_MODULE.
DRIVER = """\
import signal, sys
from pathlib import Path
for name in ("SIGINT", "SIGTERM", "SIGHUP"):
    fresh = signal.default_int_handler if name == "SIGINT" else signal.SIG_DFL
    ignored = name in sys.argv[4].split(",")
    signal.signal(getattr(signal, name), signal.SIG_IGN if ignored else fresh)
from coursekit.commands import launch
launch.LAB_MODULE = sys.argv[3]
sys.exit(launch.start_lab(Path(sys.argv[1]), port=int(sys.argv[2]), open_browser=False))
"""


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _gone(pid: int) -> bool:
    """The process has exited (a zombie no one reaped yet counts as gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in "ZX"
    except (OSError, IndexError):
        return True


def _disposition(pid: int, signum: int) -> str:
    """How ``pid`` takes ``signum``, as /proc shows it: "ignored", "caught" or "default"."""
    status = Path(f"/proc/{pid}/status").read_text()
    fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
    bit = 1 << (signum - 1)
    if int(fields["SigIgn"], 16) & bit:
        return "ignored"
    return "caught" if int(fields["SigCgt"], 16) & bit else "default"


def _serving(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def _until(condition, what: str) -> None:
    event = threading.Event()
    waited = 0.0
    while not condition():
        event.wait(0.1)
        waited += 0.1
        if waited > BACKSTOP_S:
            raise AssertionError(f"still waiting for {what} after the backstop")


@contextlib.contextmanager
def _runner_ignoring_every_stop_signal():
    """This process ignores SIGINT, SIGTERM and SIGHUP while a child starts, so the child
    inherits them ignored: the worst a test runner can hand down (``nohup``, ``&``)."""
    previous = {name: signal.signal(getattr(signal, name), signal.SIG_IGN) for name in STOP_SIGNALS}
    try:
        yield
    finally:
        for name, handler in previous.items():
            signal.signal(getattr(signal, name), handler)


class Started:
    """`coursekit start` in a process of its own, and the lab it started; ``ignored``: the
    stop signals it was started ignoring (every other one as a fresh process has it)."""

    def __init__(self, root: Path, module: str, env: dict[str, str], ignored: tuple = ()):
        (root / "exercises").mkdir(parents=True, exist_ok=True)
        port = str(launch.free_port(21000))
        with _runner_ignoring_every_stop_signal():
            self.process = subprocess.Popen(
                [sys.executable, "-c", DRIVER, str(root), port, module, ",".join(ignored)],
                env={**env, "PYTHONUNBUFFERED": "1"},
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(
            target=lambda: [lines.put(x) for x in self.process.stdout], daemon=True
        ).start()
        self.output = []
        while True:
            line = lines.get(timeout=BACKSTOP_S)
            self.output.append(line)
            if match := re.search(r"open at http://127\.0\.0\.1:(\d+)/\S+\?token=(\w+)", line):
                self.port, self.token = int(match[1]), match[2]
                break
        (self.lab,) = _children(self.process.pid)

    def stopped(self, how: signal.Signals) -> int:
        """Send ``how`` to coursekit alone; its exit status, once the lab has gone too."""
        self.process.send_signal(how)
        status = self.process.wait(timeout=BACKSTOP_S)
        _until(lambda: _gone(self.lab), "the lab's process to end")
        _until(lambda: not _serving(self.port), "the lab's port to close")
        return status

    def clean_up(self) -> None:
        for pid in (self.process.pid, self.lab):
            if not _gone(pid):
                os.kill(pid, signal.SIGKILL)
        self.process.wait()


def _fake_lab(tmp_path: Path, ignored: tuple = ()) -> Started:
    (tmp_path / "fake_lab_server.py").write_text(FAKE_LAB)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    return Started(tmp_path / "course", "fake_lab_server", env, ignored)


@pytest.mark.parametrize(
    ("how", "status"),
    [
        (signal.SIGINT, 0),  # Ctrl-C: the documented way
        (signal.SIGTERM, 128 + signal.SIGTERM),  # kill, systemd, a container stopping
        (signal.SIGHUP, 128 + signal.SIGHUP),  # the terminal closed
        (signal.SIGKILL, -signal.SIGKILL),  # coursekit itself dies: the lab stops itself
    ],
    ids=["SIGINT", "SIGTERM", "SIGHUP", "coursekit-killed"],
)
@pytest.mark.slow  # over 4 s: out of the quick run (-m 'not slow')
def test_every_way_of_stopping_coursekit_stops_its_lab(tmp_path, how, status):
    # Killed, coursekit can ignore every other stop signal: the lab still stops (an ignored
    # signal survives exec, but the lab takes SIGTERM, coursekit's way of stopping it, afresh).
    killed = how == signal.SIGKILL
    started = _fake_lab(tmp_path, ignored=STOP_SIGNALS if killed else ())
    try:
        assert _serving(started.port) and not _gone(started.lab)
        assert os.getsid(started.lab) == started.lab  # a session of its own: Ctrl-C is ours
        assert _disposition(started.lab, signal.SIGTERM) == "default"
        if killed:
            assert _disposition(started.process.pid, signal.SIGTERM) == "ignored"
        assert started.stopped(how) == status
    finally:
        started.clean_up()


@pytest.mark.slow  # over 2.5 s: out of the quick run (-m 'not slow')
def test_a_hangup_that_coursekit_was_told_to_ignore_stays_ignored(tmp_path):
    """`nohup coursekit start` survives a closed terminal, and so does its lab."""
    started = _fake_lab(tmp_path, ignored=("SIGHUP",))  # as nohup starts it
    try:
        started.process.send_signal(signal.SIGHUP)
        started.process.send_signal(signal.SIGTERM)  # the next signal finds both still there
        assert started.process.wait(timeout=BACKSTOP_S) == 128 + signal.SIGTERM
        _until(lambda: _gone(started.lab), "the lab's process to end")
    finally:
        started.clean_up()


def test_the_lab_never_asks_about_jupyter_news(tmp_path):
    config = launch.lab_config_dir(tmp_path / "config")
    page = json.loads((config / "labconfig" / "page_config.json").read_text())
    assert page == {"disabledExtensions": {launch.NEWS_PLUGIN: True}}
    options = launch.lab_options(tmp_path, 1, "t", False)
    assert "--LabApp.news_url=None" in options
    assert "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate" in options


def test_the_students_own_jupyter_configuration_comes_first(tmp_path, monkeypatch):
    monkeypatch.setenv("JUPYTER_CONFIG_PATH", os.pathsep.join(["/a", "/b"]))
    assert launch.lab_environment(tmp_path)["JUPYTER_CONFIG_PATH"] == os.pathsep.join(
        ["/a", "/b", str(tmp_path)]
    )
    monkeypatch.delenv("JUPYTER_CONFIG_PATH")
    assert launch.lab_environment(tmp_path)["JUPYTER_CONFIG_PATH"] == str(tmp_path)


@pytest.mark.slow
def test_the_real_lab_turns_the_news_off_and_stops_with_coursekit(tmp_path):
    pytest.importorskip("jupyterlab")
    runtime = Path(tempfile.mkdtemp(prefix="ck-lab-"))  # kernel sockets need a short path
    env = {
        **os.environ,
        "JUPYTER_CONFIG_DIR": str(tmp_path / "config"),
        "JUPYTER_DATA_DIR": str(tmp_path / "data"),
        "JUPYTER_RUNTIME_DIR": str(runtime),
        "JUPYTERLAB_SETTINGS_DIR": str(tmp_path / "settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / "workspaces"),
    }
    env.pop("JUPYTER_CONFIG_PATH", None)
    started = Started(tmp_path / "course", "jupyterlab", env)
    try:
        base = f"http://127.0.0.1:{started.port}"
        with urllib.request.urlopen(f"{base}/lab?token={started.token}", timeout=60) as answer:
            html = answer.read().decode()
        data = re.search(r'id="jupyter-config-data"[^>]*>(.*?)</script>', html, re.S)[1]
        assert launch.NEWS_PLUGIN in json.loads(data)["disabledExtensions"]
        with urllib.request.urlopen(f"{base}/lab/api/news?token={started.token}", timeout=60) as a:
            assert json.loads(a.read())["news"] == []
        assert started.stopped(signal.SIGTERM) == 128 + signal.SIGTERM
    finally:
        started.clean_up()
        subprocess.run(["rm", "-rf", str(runtime)], check=False)
