"""What a hand-in's process gives up before its first cell: the whole of its confinement.

:func:`confine` runs in the hand-in's own process (:func:`coursekit.grading.sandbox.runner.serve`),
after process 1 built its root or its scratch folder and before any hand-in code runs: rlimits,
the loopback device of its own network namespace, its own user (graded as root) or no
capabilities, Landlock's allow lists (:func:`readable_paths`), the seccomp filter that pins the
channel to the grader, and last the process limit. Each step can only take away.
"""

from __future__ import annotations

import os
import resource
import signal


def confine(
    job: dict,
    namespaces,
    channel_fds: tuple[int, ...] = (),
    user: tuple[int, int] | None = None,
    python: list[str] | None = None,
) -> dict:
    """Apply every limit the job asks for to this process; return what was applied.
    ``channel_fds`` (the pipes to the grader) are pinned by the seccomp filter; ``user``
    (uid, gid) is the hand-in's own user, taken on when the grader is root; ``python``: the
    folders Python and coursekit live in (never ``/`` nor the course's folder)."""
    from coursekit.grading.sandbox import landlock, privileges, seccomp

    limits = job["limits"]
    applied: dict = {}
    # files the hand-in makes are its own alone unless it opens them up itself: where hand-ins
    # share /tmp (no root of their own), one running beside it cannot read what it leaves
    os.umask(0o077)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_AS, (limits["memory_bytes"], limits["memory_bytes"]))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits["file_bytes"], limits["file_bytes"]))
    cpu = int(limits["hand_in_timeout_s"]) + 5
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a too-large write fails instead of killing
    if namespaces.network:  # loopback only, inside the new namespace: for gloo
        applied["loopback"] = privileges.loopback_up()
    if user is not None:  # graded as root: the hand-in's own user, owning nothing else
        privileges.become_hand_in_user(*user)
        applied["capabilities"] = "dropped"
        applied["hand_in_user"] = user[0]
    elif os.getuid() == 0 or namespaces.user:
        privileges.drop_all_capabilities()  # in a user namespace: the ones it gave
        applied["capabilities"] = "dropped"
    # RLIMIT_NPROC counts every process and thread of the (real) user, so leave room for
    # the ones it already runs (none but this one for a hand-in's own user); counted before
    # Landlock hides the other processes' folders of /proc.
    nproc = limits["max_processes"] + _processes_of(os.getuid())
    own_loopback = bool(namespaces.network and applied.get("loopback"))
    landlock_abi = landlock.abi_version() if job.get("landlock", True) else 0
    if landlock_abi >= 1:
        readable = readable_paths(python or [], job.get("hidden", []))
        if namespaces.pid:  # its own /proc: its own processes alone
            readable.append("/proc")
        else:  # the host's: this process's own folder, and the machine's facts
            readable += [f"/proc/{os.getpid()}", *(f"/proc/{name}" for name in _PROC)]
        # without a root of its own: its scratch folder, and /dev/shm for multiprocessing's
        # semaphores (what it leaves there is its user's, counted and removed)
        writable = (
            ["/scratch", "/tmp", "/dev/shm"] if namespaces.mount else [os.getcwd(), "/dev/shm"]
        )
        writable += [f"/dev/{name}" for name in _DEVICES]
        applied["landlock"] = landlock.restrict(
            readable, writable, block_tcp=not own_loopback, ephemeral_bind=not own_loopback
        )
    # IPv4 and IPv6 for gloo's one-process groups (module 2's and 4's checks): inside a
    # network namespace of its own they reach only its loopback; without one, TCP alone
    # (gloo's only need), which Landlock 4+ (Linux 6.7) holds to binding a port the kernel
    # picks, with no connection at all. Without Landlock, grading's own need wins: TCP
    # stays open (the grader listens on none), and grade warns of it.
    inet = "all" if own_loopback else "stream"
    applied["inet"] = inet
    applied["seccomp"] = seccomp.install(protected=channel_fds, inet=inet)
    resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
    return applied


_ETC = ("ld.so.cache", "localtime", "passwd", "group", "nsswitch.conf", "fonts", "hosts")
_DEVICES = ("null", "zero", "full", "random", "urandom")
_SYSTEM = ("/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin", "/sys")
# Of the host's /proc (no PID namespace), what a process reads about the machine; and its own
# folder, /proc/<pid> (what /proc/self names), not another process's command line.
_PROC = ("cpuinfo", "meminfo", "stat", "filesystems", "mounts", "sys", "version", "loadavg")


def readable_paths(python: list[str], hidden: list[str]) -> list[str]:
    """What Landlock lets a hand-in read: an allow list, never a whole disk.

    ``python`` (the interpreter, its standard library, site-packages, coursekit's package:
    :func:`coursekit.grading.sandbox.namespaces.python_paths`), the system's programs and libraries,
    a few files of ``/etc`` and the harmless devices. A path that is ``/``, or holds a
    ``hidden`` folder (the course's, the Gradescope bundle's source), is left out, so the
    list can never grant the course's ``notebooks/``.
    """
    from pathlib import Path

    secret = [Path(h).resolve() for h in hidden]
    wanted = {*python, *_SYSTEM, *(f"/etc/{n}" for n in _ETC), *(f"/dev/{n}" for n in _DEVICES)}
    allowed = []
    for path in sorted(wanted):
        here = Path(path)
        if here == Path("/") or any(h.is_relative_to(here) for h in secret):
            continue  # it would hold a hidden folder (a venv or package inside one is fine)
        allowed.append(path)
    return allowed


def _processes_of(uid: int) -> int:
    """Threads (which RLIMIT_NPROC counts as processes) that ``uid`` runs now."""
    total = 0
    for name in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status") as handle:
                fields = dict(line.split(":", 1) for line in handle if ":" in line)
        except OSError:
            continue
        if int(fields.get("Uid", "-1").split()[0]) == uid:
            total += int(fields.get("Threads", "1").strip())
    return total
