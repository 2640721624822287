"""``coursekit start``: JupyterLab on a free local port, opened at the welcome notebook."""

from __future__ import annotations

import importlib.util
import os
import secrets
import socket
import subprocess
import sys
from pathlib import Path

FIRST_NOTEBOOK = "exercises/00_welcome.ipynb"


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


def lab_command(root: Path, port: int, token: str, open_browser: bool) -> list[str]:
    return [
        sys.executable,
        "-m",
        "jupyterlab",
        f"--ServerApp.root_dir={root}",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        "--ServerApp.ip=127.0.0.1",
        f"--IdentityProvider.token={token}",
        f"--LabApp.default_url=/lab/tree/{FIRST_NOTEBOOK}",
        f"--ServerApp.open_browser={open_browser}",
    ]


def start_lab(root: Path, port: int = 8888, open_browser: bool = True) -> int:
    """Run JupyterLab until it is stopped (Ctrl-C); return its exit status."""
    if importlib.util.find_spec("jupyterlab") is None:
        print(
            "coursekit start: JupyterLab is not installed. Run ./scripts/start from the "
            "repository (it installs everything), or: pip install 'coursekit[lab]'",
            file=sys.stderr,
        )
        return 2
    chosen = free_port(port)
    if chosen != port:
        print(f"Port {port} is busy; using {chosen}.")
    token = secrets.token_hex(16)
    print(f"The course is at http://127.0.0.1:{chosen}/lab/tree/{FIRST_NOTEBOOK}?token={token}")
    print("Stop it with Ctrl-C.", flush=True)
    try:
        return subprocess.call(lab_command(root, chosen, token, open_browser), env=os.environ)
    except KeyboardInterrupt:
        return 0
