"""A real JupyterHub on this machine, for tests/test_hub_workshop.py.

What a workshop runs on: JupyterHub with its configurable-http-proxy (from npm), a dummy
authenticator (any name, the one password below), and each student's server as a local
process whose home is a folder under the test's temporary folder. The students' environment
is ``.venv/hub``, which ``scripts/setup --browser`` builds from ``binder/requirements.txt``,
the file a hub's image is built from, with only its coursekit line swapped for this checkout.

Everything the hub writes (its database, cookie secret, proxy PID file, the students' homes)
stays in the temporary folder, and it listens on free ports of its own. Every process it
starts (the proxy, the students' servers, their kernels, git) inherits one marker in its
environment, :data:`MARKER`, so :func:`processes_of` finds them even after their parent has
died; :func:`running_hub` stops them all and reports any that outlived the hub's own shutdown.
Processes that a killed earlier run left behind are found the same way and stopped first.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from coursekit.authoring.student_copy import make_student_copy
from coursekit.commands.launch import free_port

REPO = Path(__file__).resolve().parents[2]
HUB_ENV = REPO / ".venv" / "hub"
HUB_BIN = HUB_ENV / "bin"
PROXY = HUB_ENV / "node" / "node_modules" / ".bin" / "configurable-http-proxy"
#: The environment variable every process of a test hub carries: ``<test's PID>-<token>``.
MARKER = "COURSEKIT_HUB_TEST"
PASSWORD = "workshop"  # the dummy authenticator's shared password


def missing_hub_reason() -> str | None:
    """Why the hub test cannot run here, or None when it can."""
    for path, what in (
        (HUB_BIN / "jupyterhub", "the hub's environment .venv/hub"),
        (HUB_BIN / "jupyterhub-singleuser", "jupyterhub-singleuser in .venv/hub"),
        (PROXY, "configurable-http-proxy (npm)"),
    ):
        if not os.access(path, os.X_OK):
            return f"{what} is missing: ./scripts/setup --browser builds it"
    return None


@dataclass
class Hub:
    """A running test hub: its address, its files, and the marker its processes carry."""

    url: str
    workdir: Path
    marker: str
    process: subprocess.Popen
    leftovers: list[str] = field(default_factory=list)  # filled in when it stops

    def home(self, user: str) -> Path:
        return self.workdir / "home" / user

    def log(self) -> str:
        return (self.workdir / "jupyterhub.log").read_text(errors="replace")


def processes_of(marker_prefix: str) -> dict[int, str]:
    """PID -> command line of every live process whose :data:`MARKER` starts with the prefix."""
    wanted = f"{MARKER}={marker_prefix}".encode()
    found = {}
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            environment = (proc / "environ").read_bytes()
            if not any(item.startswith(wanted) for item in environment.split(b"\0")):
                continue
            if (proc / "stat").read_text().rsplit(")", 1)[1].split()[0] in "ZX":
                continue  # a zombie is already dead; its parent only has to reap it
            command = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue  # gone meanwhile, or not ours to read
        found[int(proc.name)] = command.strip()
    return found


def stop_processes(pids: list[int], wait_s: float = 10) -> None:
    """SIGTERM, then SIGKILL what is still there after ``wait_s``."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
            time.sleep(0.2)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in "ZX"


def stop_leftovers_of_dead_runs() -> list[str]:
    """Stop test hubs' processes whose test run (the PID in their marker) has died."""
    stale = {}
    for pid, command in processes_of("").items():
        try:
            owner = int(_marker_of(pid).split("-", 1)[0])
        except (OSError, ValueError):
            continue
        if not _alive(owner):
            stale[pid] = command
    stop_processes(list(stale))
    return list(stale.values())


def _marker_of(pid: int) -> str:
    for item in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
        if item.startswith(f"{MARKER}=".encode()):
            return item.split(b"=", 1)[1].decode()
    raise ValueError("no marker")


def hub_config(workdir: Path, port: int, marker: str, environment: dict[str, str]) -> str:
    """The hub's ``jupyterhub_config.py``: everything under ``workdir``, on ports of its own.

    ``environment``: extra variables for each student's server (the hub passes a server only
    what it is told to: no variable of the test's own leaks into the students' servers).
    """
    home = workdir / "home" / "{username}"
    server_env = {
        "PATH": f"{HUB_BIN}{os.pathsep}/usr/local/bin{os.pathsep}/usr/bin{os.pathsep}/bin",
        "LANG": "C.UTF-8",
        MARKER: marker,
        # One torch thread per kernel: beside Chromium and the hub, two OpenMP threads on two
        # cores spin against each other (see tests/helpers/lab_browser.py).
        "OMP_NUM_THREADS": "1",
        **environment,
    }
    settings = {
        "JupyterHub.bind_url": f"http://127.0.0.1:{port}",
        "JupyterHub.hub_ip": "127.0.0.1",
        "JupyterHub.hub_port": free_port(port + 1),
        "ConfigurableHTTPProxy.api_url": f"http://127.0.0.1:{free_port(port + 20)}",
        "ConfigurableHTTPProxy.command": [str(PROXY)],
        "ConfigurableHTTPProxy.pid_file": str(workdir / "proxy.pid"),
        "JupyterHub.pid_file": str(workdir / "jupyterhub.pid"),
        "JupyterHub.db_url": f"sqlite:///{workdir / 'jupyterhub.sqlite'}",
        "JupyterHub.cookie_secret_file": str(workdir / "jupyterhub_cookie_secret"),
        "JupyterHub.authenticator_class": "dummy",
        "DummyAuthenticator.password": PASSWORD,
        "Authenticator.allow_all": True,
        "JupyterHub.spawner_class": "simple",  # local processes, homes under workdir
        "SimpleLocalProcessSpawner.home_dir_template": str(home),
        "Spawner.cmd": [str(HUB_BIN / "jupyterhub-singleuser")],
        # The tests run as root in containers; a hub's own image runs as a user.
        "Spawner.args": ["--allow-root"] if os.geteuid() == 0 else [],
        "Spawner.default_url": "/lab",
        "Spawner.env_keep": [],
        "Spawner.environment": server_env,
        "Spawner.start_timeout": 120,  # generous for a busy machine
        "Spawner.http_timeout": 120,
    }
    lines = ["c = get_config()  # noqa: F821 (JupyterHub's config loader defines it)"]
    lines += [f"c.{name} = {value!r}" for name, value in settings.items()]
    return "\n".join(lines) + "\n"


@contextlib.contextmanager
def running_hub(
    workdir: Path, environment: dict[str, str] | None = None, wait_s: float = 120
) -> Iterator[Hub]:
    """Start a JupyterHub serving from ``workdir``; stop it and every process it started.

    On leaving, the hub is asked to stop (SIGTERM: it stops the students' servers and the
    proxy itself); whatever still carries its marker after that is killed, and named in
    ``Hub.leftovers``, so a test can assert that the hub's own shutdown left nothing.
    """
    stop_leftovers_of_dead_runs()
    workdir.mkdir(parents=True, exist_ok=True)
    marker = f"{os.getpid()}-{secrets.token_hex(6)}"
    port = free_port(18700)
    config = workdir / "jupyterhub_config.py"
    config.write_text(hub_config(workdir, port, marker, environment or {}))
    env = {
        "PATH": f"{HUB_BIN}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
        "HOME": str(workdir),
        "LANG": "C.UTF-8",
        MARKER: marker,
    }
    log = (workdir / "jupyterhub.log").open("w")
    process = subprocess.Popen(
        [str(HUB_BIN / "jupyterhub"), "-f", str(config)],
        cwd=workdir,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    hub = Hub(f"http://127.0.0.1:{port}", workdir, marker, process)
    try:
        deadline = time.monotonic() + wait_s
        while not _answers(f"{hub.url}/hub/api/"):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"JupyterHub did not start; its log:\n{hub.log()[-5000:]}")
            time.sleep(0.3)
        yield hub
    finally:
        process.terminate()  # the hub stops its servers and its proxy (cleanup_servers)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
        survivors = processes_of(marker)
        deadline = time.monotonic() + 15  # a kernel may still be exiting as the hub returns
        while survivors and time.monotonic() < deadline:
            time.sleep(0.3)
            survivors = processes_of(marker)
        hub.leftovers = [f"{pid}: {command}" for pid, command in survivors.items()]
        stop_processes(list(survivors))


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status == 200
    except OSError:
        return False


def course_repository(folder: Path) -> Path:
    """A git repository holding the student copy of this course (``coursekit student-copy``),
    one commit on ``main``: what an instructor publishes for a graded workshop."""
    make_student_copy(REPO, folder)
    git(folder, "init", "-q", "-b", "main")
    git(folder, "add", "-A")
    git(folder, "commit", "-q", "-m", "The course, as published")
    return folder


def git(folder: Path, *args: str) -> str:
    """Run git in ``folder`` as the instructor, whatever the machine's git identity."""
    identity = ["-c", "user.name=Instructor", "-c", "user.email=instructor@example.org"]
    result = subprocess.run(
        ["git", *identity, "-C", str(folder), *args], check=True, capture_output=True, text=True
    )
    return result.stdout
