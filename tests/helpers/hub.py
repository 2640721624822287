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
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from coursekit.authoring.student_copy import make_student_copy

REPO = Path(__file__).resolve().parents[2]
HUB_ENV = REPO / ".venv" / "hub"
HUB_BIN = HUB_ENV / "bin"
PROXY = HUB_ENV / "node" / "node_modules" / ".bin" / "configurable-http-proxy"
#: The environment variable every process of a test hub carries:
#: ``<test's PID>-<its start time>-<token>``, so that a PID reused by another process is not
#: taken for the test run that started the hub.
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
    """PID -> command line of every live process whose :data:`MARKER` starts with the prefix.

    Only processes in this process's PID namespace: a container's PIDs mean nothing here.
    """
    wanted = f"{MARKER}={marker_prefix}".encode()
    own_namespace = _pid_namespace("self")
    found = {}
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if _pid_namespace(proc.name) != own_namespace:
                continue
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


def _pid_namespace(pid: str) -> str:
    return os.readlink(f"/proc/{pid}/ns/pid")


def stop_processes(marker_prefix: str, wait_s: float = 10) -> None:
    """SIGTERM every process carrying the marker, then SIGKILL those still there after
    ``wait_s``. Each round looks the processes up again, so a PID that ended meanwhile (and
    may now be another program's) is never signalled."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in processes_of(marker_prefix):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and processes_of(marker_prefix):
            time.sleep(0.2)


def _start_time(pid: int | str) -> str:
    """When the process started, in clock ticks since boot (field 22 of /proc/PID/stat)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]


def _owner_alive(marker: str) -> bool:
    """Whether the test run named in a marker (its PID and start time) still runs."""
    try:
        pid, started, _ = marker.split("-", 2)
        return _start_time(pid) == started
    except (OSError, ValueError, IndexError):
        return False


def stop_leftovers_of_dead_runs() -> None:
    """Stop the processes of test hubs whose test run has died (killed before it could)."""
    markers = set()
    for pid in processes_of(""):
        with contextlib.suppress(OSError, ValueError):
            markers.add(_marker_of(pid))
    for marker in markers:
        if not _owner_alive(marker):
            stop_processes(marker)


def _marker_of(pid: int) -> str:
    for item in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
        if item.startswith(f"{MARKER}=".encode()):
            return item.split(b"=", 1)[1].decode()
    raise ValueError("no marker")


def hub_config(workdir: Path, ports: list[int], marker: str, environment: dict[str, str]) -> str:
    """The hub's ``jupyterhub_config.py``: everything under ``workdir``, on ports of its own
    (``ports``: the public one, the hub's API and the proxy's API).

    ``environment``: extra variables for each student's server (the hub passes a server only
    what it is told to: no variable of the test's own leaks into the students' servers).
    """
    home = workdir / "home" / "{username}"
    port, hub_port, proxy_api_port = ports
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
        "JupyterHub.hub_port": hub_port,
        "ConfigurableHTTPProxy.api_url": f"http://127.0.0.1:{proxy_api_port}",
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


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports nothing listens on: the kernel picks them, all bound at once."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for probe in sockets:
            probe.bind(("127.0.0.1", 0))
        return [probe.getsockname()[1] for probe in sockets]


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
    marker = f"{os.getpid()}-{_start_time('self')}-{secrets.token_hex(6)}"
    ports = free_ports(3)
    config = workdir / "jupyterhub_config.py"
    config.write_text(hub_config(workdir, ports, marker, environment or {}))
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
    hub = Hub(f"http://127.0.0.1:{ports[0]}", workdir, marker, process)
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
        deadline = time.monotonic() + wait_s  # a kernel may still be exiting as the hub returns
        while survivors and time.monotonic() < deadline:
            time.sleep(0.3)
            survivors = processes_of(marker)
        hub.leftovers = [f"{pid}: {command}" for pid, command in survivors.items()]
        stop_processes(marker)


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
