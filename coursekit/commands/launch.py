"""``coursekit start``: JupyterLab on a free local port, opened at the course index.

Students work in ``my-work/``, a copy of ``exercises/`` made on first start (files already
there are never overwritten), so regenerating the exercises or pulling new modules never
touches their answers. ``my-work/index.ipynb``, the landing page, lists the modules with
which exercises pass their checks; it holds no work of the student's and is rewritten at
every start.
"""

from __future__ import annotations

import importlib.util
import os
import secrets
import shutil
import socket
import subprocess
import sys
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


def lab_command(root: Path, port: int, token: str, open_browser: bool) -> list[str]:
    command = [
        sys.executable,
        "-m",
        "jupyterlab",
        f"--ServerApp.root_dir={root}",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        "--ServerApp.ip=127.0.0.1",
        f"--IdentityProvider.token={token}",
        f"--LabApp.default_url=/lab/tree/{WORK_FOLDER}/{INDEX_NOTEBOOK}",
        f"--ServerApp.open_browser={open_browser}",
    ]
    if os.name == "posix":
        # Kernels talk to the server over Unix sockets in Jupyter's runtime folder (readable
        # by this user only), not over localhost TCP, which any local user could read and
        # which makes every kernel print "Kernel is running over TCP without encryption".
        command.append("--KernelManager.transport=ipc")
    if hasattr(os, "geteuid") and os.geteuid() == 0:  # containers often run as root
        command.append("--ServerApp.allow_root=True")
    return command


def _ready(port: int, token: str) -> bool:
    try:
        url = f"http://127.0.0.1:{port}/api/status?token={token}"
        with urllib.request.urlopen(url, timeout=1) as response:
            return response.status == 200
    except OSError:
        return False


def start_lab(root: Path, port: int = 8888, open_browser: bool = True, wait_s: float = 60) -> int:
    """Run JupyterLab until it is stopped (Ctrl-C); return its exit status."""
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
    for _ in range(5):  # another program may take the port between our probe and Lab's start
        chosen = free_port(port)
        if chosen != port:
            print(f"Port {port} is busy; using {chosen}.")
        process = subprocess.Popen(lab_command(root, chosen, token, open_browser))
        deadline = time.monotonic() + wait_s
        while process.poll() is None and time.monotonic() < deadline:
            if _ready(chosen, token):
                url = f"http://127.0.0.1:{chosen}/lab/tree/{WORK_FOLDER}/{INDEX_NOTEBOOK}"
                print(f"\nThe course is open at {url}?token={token}\nStop it with Ctrl-C.\n")
                try:
                    return process.wait()
                except KeyboardInterrupt:
                    process.terminate()
                    return process.wait()
            time.sleep(0.3)
        if process.poll() is None:  # never answered: give up rather than hang
            process.terminate()
            print("coursekit start: JupyterLab did not answer in time.", file=sys.stderr)
            return 1
        port = chosen + 1
    print("coursekit start: JupyterLab could not start (see its messages above).", file=sys.stderr)
    return 1
