"""Linux namespaces for a hand-in: a root file system, processes, network and IPC of its own.

:func:`unshare` moves the runner into new namespaces (as root directly; as another user
through an unprivileged user namespace, where the kernel allows one). The runner then forks:
the child is process 1 of the new PID namespace, so when it ends the kernel ends every
process the hand-in started, however deep or detached. That child calls :func:`make_root`,
which mounts a small root file system and ``pivot_root``\\s into it:

- Python, its packages and coursekit's own folder, ``/usr``, ``/lib*`` and a few files of
  ``/etc``: bound read-only at their own paths;
- ``/scratch``: a tmpfs with a size and file-count cap, the hand-in's only writable place
  (``/scratch/work`` is its home; ``/tmp`` and ``/dev/shm`` are folders of it);
- ``/dev`` with ``null``, ``zero``, ``full``, ``random``, ``urandom``; a read-only ``/proc``
  of its own PID namespace, where it is alone.

Nothing else of the host exists inside: not the course's ``notebooks/``, not the gradebook,
not another process, not a host socket path (systemd, D-Bus, Docker), not a host disk to
fill. Every mount dies with the namespace: nothing is left behind on the host.
"""

from __future__ import annotations

import ctypes
import errno
import os
import sys
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path

CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS = 0x00020000, 0x02000000, 0x04000000
CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = (
    0x08000000,
    0x10000000,
    0x20000000,
    0x40000000,
)
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
_KEPT = MS_NOSUID | MS_NODEV | MS_NOEXEC | 1024 | 2048 | 4096  # and NOATIME, NODIRATIME, RELATIME
MNT_DETACH = 2
_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}

SCRATCH = "/scratch"
HOME = "/scratch/work"  # the hand-in's working folder
# What Python, torch and matplotlib read from /etc; passwd, group and hosts are written anew.
_ETC_FILES = ("ld.so.cache", "localtime", "nsswitch.conf")
_ETC_FOLDERS = ("alternatives", "fonts")
_DEVICES = ("null", "zero", "full", "random", "urandom")
_SYSTEM = ("/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin")


class SandboxSetupError(OSError):
    """A namespace or mount the sandbox needed could not be made."""


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def _check(result: int, what: str) -> None:
    if result != 0:
        code = ctypes.get_errno()
        raise SandboxSetupError(code, f"{what}: {os.strerror(code)}")


@dataclass
class Namespaces:
    """Which namespaces :func:`unshare` made (``user``: through an unprivileged one)."""

    flags: int = 0
    user: bool = False
    why_not: str = ""

    @property
    def pid(self) -> bool:
        return bool(self.flags & CLONE_NEWPID)

    @property
    def mount(self) -> bool:
        return bool(self.flags & CLONE_NEWNS)

    @property
    def network(self) -> bool:
        return bool(self.flags & CLONE_NEWNET)


ALL = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP
_NAMES = {
    CLONE_NEWNS: "mount",
    CLONE_NEWPID: "pid",
    CLONE_NEWNET: "network",
    CLONE_NEWIPC: "ipc",
    CLONE_NEWUTS: "uts",
    CLONE_NEWCGROUP: "cgroup",
    CLONE_NEWUSER: "user",
}


def describe(flags: int) -> list[str]:
    """The names of the namespaces in ``flags``."""
    return [name for flag, name in _NAMES.items() if flags & flag]


def unshare(force_user: bool = False) -> Namespaces:
    """Enter new mount, PID, network, IPC, UTS and cgroup namespaces, or say why not.

    Root does this directly; other users (and root when ``force_user``, to test that path)
    through a new user namespace in which they keep their own uid. Only network and IPC
    namespaces alone, or none, are the fallbacks, each recorded in ``why_not``.
    """
    if not sys.platform.startswith("linux"):
        return Namespaces(why_not="namespaces need Linux")
    libc = _libc()
    uid, gid = os.getuid(), os.getgid()
    user = force_user or uid != 0
    flags = ALL | (CLONE_NEWUSER if user else 0)
    if libc.unshare(flags) == 0:
        if user:
            _map_ids(uid, gid)
        return Namespaces(flags, user)
    why = os.strerror(ctypes.get_errno())
    if user:
        why = f"unprivileged user namespaces are not allowed here ({why}){_userns_hint()}"
    else:
        why = f"unshare refused ({why})"
    for fallback in (CLONE_NEWNET | CLONE_NEWIPC | (CLONE_NEWUSER if user else 0),):
        if libc.unshare(fallback) == 0:
            if user:
                _map_ids(uid, gid)
            return Namespaces(fallback, user, why)
    return Namespaces(0, False, why)


def _userns_hint() -> str:
    for path, bad in (
        ("/proc/sys/kernel/unprivileged_userns_clone", "0"),
        ("/proc/sys/kernel/apparmor_restrict_unprivileged_userns", "1"),
        ("/proc/sys/user/max_user_namespaces", "0"),
    ):
        try:
            if Path(path).read_text().strip() == bad:
                return f"; {path} is {bad}"
        except OSError:
            continue
    return ""


def _map_ids(uid: int, gid: int) -> None:
    """Keep the same uid and gid inside the new user namespace (a single mapping)."""
    Path("/proc/self/setgroups").write_text("deny")
    Path("/proc/self/uid_map").write_text(f"{uid} {uid} 1")
    Path("/proc/self/gid_map").write_text(f"{gid} {gid} 1")


# ------------------------------------------------------------------ the hand-in's own root


@dataclass
class RootPlan:
    """What :func:`make_root` builds: host paths to bind read-only, and the scratch cap."""

    read_only: list[str] = field(default_factory=list)
    scratch_bytes: int = 512 * 2**20
    scratch_files: int = 20_000
    hostname: str = "sandbox"
    owner: tuple[int, int] | None = None  # the hand-in's (uid, gid): its home is theirs


def python_paths(hidden: list[str] | None = None) -> list[str]:
    """Host folders a hand-in's Python needs: the interpreter, every folder on ``sys.path``
    (site-packages, the user's, ``PYTHONPATH``), and coursekit's package folder.

    ``hidden`` folders (the course's own, with ``notebooks/``) are never bound, nor any
    folder that holds one, except the interpreter's (a virtual environment inside the
    course folder) and coursekit's package folder itself.
    """
    import coursekit

    hidden_paths = [Path(h).resolve() for h in hidden or []]

    def shown(path: Path) -> bool:
        return not any(
            path == h or h.is_relative_to(path) or path.is_relative_to(h) for h in hidden_paths
        )

    needed = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    needed |= {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    needed.add(str(Path(coursekit.__file__).resolve().parent))
    here = Path.cwd().resolve()
    for entry in sys.path:
        path = Path(entry or ".").resolve()
        if path != here and path.is_dir() and shown(path):
            needed.add(str(path))
    resolved = {os.path.realpath(p) for p in needed if os.path.isdir(p)} - {"/"}
    ordered = sorted(resolved)  # a folder inside another one is bound with it
    return [p for p in ordered if not any(p != q and p.startswith(q + "/") for q in ordered)]


def make_root(plan: RootPlan) -> dict:
    """Build the hand-in's root file system and pivot into it. Needs a new mount namespace
    (and, for ``/proc``, to be process 1 of a new PID namespace). Returns what it did."""
    libc = _libc()
    report = {"root": "own", "proc": "own", "scratch_bytes": plan.scratch_bytes}
    _check(libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "making mounts private")
    sources = _open_sources(plan.read_only)
    new = _mount_point()
    _check(
        libc.mount(
            b"coursekit", new.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, b"mode=0755,size=4m"
        ),
        "mounting the new root",
    )
    # The hand-in's own places first, the host's folders after: a source under /tmp (a
    # clone in a temporary folder) is then bound on top of the scratch's /tmp, not hidden.
    _make_etc(new, plan)
    _make_dev(libc, new)
    _make_scratch(libc, new, plan)
    for path, (kind, handle) in sources.items():
        target = new + path
        if kind == "link":
            os.makedirs(os.path.dirname(target), exist_ok=True)
            os.symlink(handle, target)
            continue
        _make_mount_point(target, kind == "dir")
        _bind(libc, f"/proc/self/fd/{handle}", target, read_only=True)
        os.close(handle)
    try:
        os.mkdir(new + "/proc")
        _check(
            libc.mount(
                b"proc",
                (new + "/proc").encode(),
                b"proc",
                MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY,
                None,
            ),
            "mounting /proc",
        )
    except OSError as error:
        report["proc"] = f"none ({error.strerror})"
    os.mkdir(new + "/.old")
    machine = os.uname().machine
    _check(libc.syscall(_PIVOT_ROOT[machine], new.encode(), (new + "/.old").encode()), "pivot_root")
    os.chdir("/")
    _check(libc.umount2(b"/.old", MNT_DETACH), "detaching the old root")
    os.rmdir("/.old")
    # the skeleton (mount points, /etc) is read-only too; only /scratch is writable
    _remount_read_only(libc, "/")
    _remount_read_only(libc, "/dev")
    os.chdir(HOME)
    try:
        libc.sethostname(plan.hostname.encode(), len(plan.hostname))
    except OSError:
        pass
    return report


def _mount_point() -> str:
    """A folder to build the new root on. Mounting over it changes nothing outside this
    mount namespace; sources under it stay reachable through the descriptors opened first."""
    for candidate in ("/tmp", "/mnt", "/var/tmp", "/run"):
        if os.path.isdir(candidate) and not os.path.islink(candidate):
            return candidate
    raise SandboxSetupError(errno.ENOENT, "no folder to build the sandbox's root on")


def _open_sources(paths: list[str]) -> dict[str, tuple[str, object]]:
    """path -> ("dir" | "file", O_PATH descriptor) or ("link", its target), for those that exist."""
    found: dict[str, tuple[str, object]] = {}
    for path in [*_SYSTEM, *(f"/etc/{n}" for n in _ETC_FILES + _ETC_FOLDERS), *paths]:
        path = os.path.normpath(path)
        if path in found or any(path.startswith(p + "/") for p in found):
            continue
        if os.path.islink(path):
            found[path] = ("link", os.readlink(path))
            continue
        try:
            handle = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            continue
        found[path] = ("dir" if os.path.isdir(path) else "file", handle)
    return found


def _make_mount_point(target: str, is_dir: bool) -> None:
    os.makedirs(target if is_dir else os.path.dirname(target), exist_ok=True)
    if not is_dir and not os.path.exists(target):
        with open(target, "w"):
            pass


def _bind(libc, source: str, target: str, read_only: bool) -> None:
    """Bind ``source`` at ``target`` (without the mounts below it when the kernel allows)."""
    if libc.mount(source.encode(), target.encode(), None, MS_BIND, None) != 0:
        code = ctypes.get_errno()
        if code != errno.EINVAL:
            raise SandboxSetupError(code, f"binding {target}: {os.strerror(code)}")
        # locked mounts below it (a user namespace): take them along
        _check(
            libc.mount(source.encode(), target.encode(), None, MS_BIND | MS_REC, None),
            f"binding {target}",
        )
    if read_only:
        _remount_read_only(libc, target)


def _remount_read_only(libc, target: str) -> None:
    """Read-only, no set-uid, no devices; keeps the flags a user namespace may not change."""
    kept = os.statvfs(target).f_flag & _KEPT
    flags = MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | kept
    if target != "/dev":
        flags |= MS_NODEV
    _check(libc.mount(None, target.encode(), None, flags, None), f"making {target} read-only")


def _make_etc(new: str, plan: RootPlan) -> None:
    etc = new + "/etc"
    os.makedirs(etc, exist_ok=True)
    uid, gid = os.getuid(), os.getgid()
    users = {0: "root", 65534: "nobody"}
    users.setdefault(uid, "student")
    groups = {0: "root", 65534: "nogroup"}
    groups.setdefault(gid, "student")
    Path(etc, "passwd").write_text(
        "".join(f"{name}:x:{u}:{u}:{name}:{HOME}:/bin/sh\n" for u, name in users.items())
    )
    Path(etc, "group").write_text("".join(f"{name}:x:{g}:\n" for g, name in groups.items()))
    Path(etc, "hosts").write_text(
        f"127.0.0.1 localhost {plan.hostname}\n::1 localhost ip6-localhost\n"
    )


def _make_dev(libc, new: str) -> None:
    dev = new + "/dev"
    os.makedirs(dev, exist_ok=True)
    _check(
        libc.mount(
            b"coursekit-dev", dev.encode(), b"tmpfs", MS_NOSUID | MS_NOEXEC, b"mode=0755,size=64k"
        ),
        "mounting /dev",
    )
    for name in _DEVICES:
        source = f"/dev/{name}"
        if os.path.exists(source):
            _make_mount_point(f"{dev}/{name}", is_dir=False)
            _bind(libc, source, f"{dev}/{name}", read_only=False)
    for name, target in (
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ):
        os.symlink(target, f"{dev}/{name}")
    os.mkdir(f"{dev}/shm")


def _make_scratch(libc, new: str, plan: RootPlan) -> None:
    scratch = new + SCRATCH
    os.makedirs(scratch, exist_ok=True)
    options = f"mode=0755,size={plan.scratch_bytes},nr_inodes={plan.scratch_files}"
    _check(
        libc.mount(
            b"coursekit-scratch", scratch.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, options.encode()
        ),
        "mounting /scratch",
    )
    for name, mode in (("work", 0o700), ("tmp", 0o1777), ("shm", 0o1777)):
        os.mkdir(f"{scratch}/{name}")
        os.chmod(f"{scratch}/{name}", mode)
    if plan.owner is not None:
        os.chown(f"{scratch}/work", *plan.owner)
    os.makedirs(new + "/tmp", exist_ok=True)
    _bind(libc, f"{scratch}/tmp", new + "/tmp", read_only=False)
    _bind(libc, f"{scratch}/shm", new + "/dev/shm", read_only=False)
