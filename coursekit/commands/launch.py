"""``coursekit start``: JupyterLab on a free local port, opened at the course index.

Students work in ``my-work/``, a copy of ``exercises/`` made on first start (files already
there are never overwritten), so regenerating the exercises or pulling new modules never
touches their answers. ``my-work/index.ipynb``, the landing page, lists the modules with
which exercises pass their checks; it holds no work of the student's and is rewritten at
every start.

Every way of stopping ``coursekit start`` stops its JupyterLab (and so the kernels): Ctrl-C
(SIGINT), SIGTERM and SIGHUP (a closed terminal) make coursekit stop the server before it
exits, and if coursekit itself dies (SIGKILL, a crash) the server notices that a pipe from
coursekit has closed and stops itself (POSIX: Linux, macOS). JupyterLab runs in a session of
its own, so Ctrl-C reaches coursekit alone: the server never asks "Shut down this Jupyter
server (y/[n])?" and the kernels are not interrupted. The lab it starts never asks to fetch
Jupyter's news.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from coursekit.commands.course_index import (
    INDEX_NOTEBOOK,
    course_progress,
    summary_lines,
    write_index,
)

WORK_FOLDER = "my-work"


def free_port(first: int, attempts: int = 50) -> int:
    """The first port from ``first`` on that nothing on this machine is listening to."""
    for port in range(first, first + attempts):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"Ports {first}-{first + attempts - 1} are all busy; pass --port.")


def prepare_work_folder(root: Path) -> tuple[Path, list[str]]:
    """Copy exercise notebooks that are not in ``my-work/`` yet; return the folder and copies."""
    work = root / WORK_FOLDER
    work.mkdir(exist_ok=True)
    copied = []
    for exercise in sorted((root / "exercises").glob("*.ipynb")):
        target = work / exercise.name
        if not target.exists():
            shutil.copy2(exercise, target)
            copied.append(exercise.name)
    write_index(work)
    return work, copied


#: The module that serves JupyterLab (``python -m jupyterlab``).
LAB_MODULE = "jupyterlab"
#: JupyterLab's plugin that asks "Would you like to get notified about official Jupyter
#: news?" and checks for updates (@jupyterlab/apputils-extension, announcements.ts). It asks
#: whenever the setting ``fetchNews`` is "none", its default, whatever the server's
#: ``news_url``; disabling the plugin is the one switch a server can set.
NEWS_PLUGIN = "@jupyterlab/apputils-extension:announcements"
#: How long JupyterLab gets to shut its kernels down when stopped, before it is killed.
STOP_GRACE_S = 30.0


def lab_command(root: Path, port: int, token: str, open_browser: bool) -> list[str]:
    """``python -m jupyterlab`` and the options the course's lab runs with."""
    return [sys.executable, "-m", LAB_MODULE, *lab_options(root, port, token, open_browser)]


def lab_options(root: Path, port: int, token: str, open_browser: bool) -> list[str]:
    command = [
        f"--ServerApp.root_dir={root}",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        "--ServerApp.ip=127.0.0.1",
        f"--IdentityProvider.token={token}",
        f"--LabApp.default_url=/lab/tree/{WORK_FOLDER}/{INDEX_NOTEBOOK}",
        f"--ServerApp.open_browser={open_browser}",
        # Nothing fetched from the web: no news feed and no update check (the prompt that
        # asks about them is turned off by lab_config_dir).
        "--LabApp.news_url=None",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
    ]
    if os.name == "posix":
        # Kernels talk to the server over Unix sockets in Jupyter's runtime folder (readable
        # by this user only), not over localhost TCP, which any local user could read and
        # which makes every kernel print "Kernel is running over TCP without encryption".
        command.append("--KernelManager.transport=ipc")
    if hasattr(os, "geteuid") and os.geteuid() == 0:  # containers often run as root
        command.append("--ServerApp.allow_root=True")
    return command


def lab_config_dir(folder: Path) -> Path:
    """Write into ``folder`` a Jupyter configuration folder that disables :data:`NEWS_PLUGIN`
    (``labconfig/page_config.json``, which JupyterLab reads from every folder on
    ``JUPYTER_CONFIG_PATH``); return ``folder``."""
    labconfig = folder / "labconfig"
    labconfig.mkdir(parents=True, exist_ok=True)
    page_config = {"disabledExtensions": {NEWS_PLUGIN: True}}
    (labconfig / "page_config.json").write_text(json.dumps(page_config), encoding="utf-8")
    return folder


def lab_environment(config_dir: Path) -> dict[str, str]:
    """This process's environment, with ``config_dir`` last on ``JUPYTER_CONFIG_PATH``: the
    student's own Jupyter configuration, and any path already set, still come first."""
    env = dict(os.environ)
    paths = [p for p in env.get("JUPYTER_CONFIG_PATH", "").split(os.pathsep) if p]
    env["JUPYTER_CONFIG_PATH"] = os.pathsep.join([*paths, str(config_dir)])
    return env


# The lab's own process runs this first (``python -c``): a thread that waits for the pipe
# from coursekit to close, which happens when coursekit exits however it exits (the kernel
# closes a dead process's files), then stops the server as SIGTERM does (its kernels shut
# down). Then it serves JupyterLab, as ``python -m jupyterlab`` would. SIGTERM is how
# coursekit stops its lab (here and in stop_lab), so the lab takes it as a fresh process does
# even where coursekit was started ignoring it: an ignored signal survives exec, and the lab
# would outlive coursekit. SIGHUP stays as it was handed down (nohup: ignored); the lab has a
# session of its own, so a closed terminal never sends it one anyway.
_WATCH_PARENT = """\
import os, runpy, signal, sys, threading
signal.signal(signal.SIGTERM, signal.SIG_DFL)
fd, module = int(sys.argv[1]), sys.argv[2]
def watch():
    while os.read(fd, 1):
        pass
    os.kill(os.getpid(), signal.SIGTERM)
threading.Thread(target=watch, name="coursekit-watch", daemon=True).start()
sys.argv = [module, *sys.argv[3:]]
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""


class Stopped(Exception):
    """``coursekit start`` was told to stop by a signal other than SIGINT."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _stop_signals() -> list[signal.Signals]:
    return [getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name)]


@contextlib.contextmanager
def _signals_raise():
    """While JupyterLab runs, SIGTERM and SIGHUP raise :class:`Stopped` here, as SIGINT raises
    KeyboardInterrupt, so the code that started the server stops it. A signal this process
    was started ignoring (``nohup`` ignores SIGHUP) stays ignored."""
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may set handlers; the parent pipe still guards
        return

    def stop(signum, frame):
        raise Stopped(signum)

    previous = {}
    for signum in _stop_signals():
        if signal.getsignal(signum) is not signal.SIG_IGN:
            previous[signum] = signal.signal(signum, stop)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def stop_lab(process: subprocess.Popen, grace_s: float = STOP_GRACE_S) -> int | None:
    """Stop JupyterLab: SIGTERM (it shuts its kernels down), SIGKILL if it is still there after
    ``grace_s`` or another stop signal comes meanwhile (a second Ctrl-C). Its exit status."""
    if process.poll() is not None:
        return process.returncode
    escalate = threading.current_thread() is threading.main_thread()
    previous = {}
    if escalate:
        for signum in [signal.SIGINT, *_stop_signals()]:
            if signal.getsignal(signum) is not signal.SIG_IGN:
                previous[signum] = signal.signal(signum, lambda *_: process.kill())
    try:
        process.terminate()
        try:
            return process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            process.kill()
            return process.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextlib.contextmanager
def running_lab(root: Path, port: int, token: str, open_browser: bool, env: dict[str, str]):
    """JupyterLab, started, and stopped (:func:`stop_lab`) when the block is left, however.

    On POSIX it runs in a session of its own and holds the read end of a pipe whose write end
    only this process holds (never written; no other child inherits it), so it also ends when
    this process ends without leaving the block (SIGKILL).
    """
    if os.name != "posix":
        process = subprocess.Popen(lab_command(root, port, token, open_browser), env=env)
        try:
            yield process
        finally:
            stop_lab(process)
        return
    read_end, write_end = os.pipe()
    try:
        try:
            process = subprocess.Popen(
                [sys.executable, "-c", _WATCH_PARENT, str(read_end), LAB_MODULE]
                + lab_options(root, port, token, open_browser),
                env=env,
                pass_fds=(read_end,),
                stdin=subprocess.DEVNULL,  # the terminal is coursekit's alone
                start_new_session=True,
            )
        finally:
            os.close(read_end)
        try:
            yield process
        finally:
            stop_lab(process)
    finally:
        os.close(write_end)  # a lab not stopped above (a signal at its start) stops itself


def _ready(port: int, token: str) -> bool:
    try:
        url = f"http://127.0.0.1:{port}/api/status?token={token}"
        with urllib.request.urlopen(url, timeout=1) as response:
            return response.status == 200
    except OSError:
        return False


def start_lab(root: Path, port: int = 8888, open_browser: bool = True, wait_s: float = 60) -> int:
    """Run JupyterLab until it, or this process, is stopped; JupyterLab never outlives it.

    Returns JupyterLab's exit status where it ended by itself; 0 after Ctrl-C (the way the
    course tells students to stop it); 128 + the signal's number after SIGTERM or SIGHUP.
    """
    if importlib.util.find_spec("jupyterlab") is None:
        print(
            "coursekit start: JupyterLab is not installed. Run ./scripts/start from the "
            "repository (it installs everything), or: pip install 'coursekit[lab]'",
            file=sys.stderr,
        )
        return 2
    work, copied = prepare_work_folder(root)
    if copied:
        print(f"Your notebooks are in {work}/ (new: {', '.join(copied)}). Work there.")
    print("Your progress, as your notebooks were last saved:")
    print("\n".join(summary_lines(course_progress(root, work))))
    token = secrets.token_hex(16)
    try:
        with tempfile.TemporaryDirectory(prefix="coursekit-lab-") as config, _signals_raise():
            env = lab_environment(lab_config_dir(Path(config)))
            for _ in range(5):  # another program may take the port between our probe and Lab's
                chosen = free_port(port)
                if chosen != port:
                    print(f"Port {port} is busy; using {chosen}.")
                with running_lab(root, chosen, token, open_browser, env) as process:
                    status = _serve(process, chosen, token, wait_s)
                if status is not None:
                    return status
                port = chosen + 1
    except KeyboardInterrupt:
        print("coursekit start: stopped JupyterLab (Ctrl-C).", file=sys.stderr)
        return 0
    except Stopped as stopped:
        print(f"coursekit start: stopped JupyterLab ({stopped}).", file=sys.stderr)
        return 128 + stopped.signum
    print("coursekit start: JupyterLab could not start (see its messages above).", file=sys.stderr)
    return 1


def _serve(process, port: int, token: str, wait_s: float) -> int | None:
    """Wait for the lab to answer, then for it to end: its exit status; None when it ended
    before answering (another program took the port), 1 when it never answered."""
    deadline = time.monotonic() + wait_s
    while process.poll() is None and time.monotonic() < deadline:
        if _ready(port, token):
            url = f"http://127.0.0.1:{port}/lab/tree/{WORK_FOLDER}/{INDEX_NOTEBOOK}"
            print(f"\nThe course is open at {url}?token={token}\nStop it with Ctrl-C.\n")
            return process.wait()
        time.sleep(0.3)
    if process.poll() is None:  # never answered: give up rather than hang
        print("coursekit start: JupyterLab did not answer in time.", file=sys.stderr)
        return 1
    return None
