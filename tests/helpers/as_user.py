"""Run a command as another (unprivileged) user, from root, where that user could not
otherwise reach this Python: ``python -m tests.helpers.as_user UID -- COMMAND...``.

Root's own folders (``/root``, pytest's ``/tmp/pytest-of-root``, a clone in a private
``mktemp -d``) are mode 0700. In a mount namespace of its own, this mounts an empty tmpfs
over each such folder and binds back only the paths the command needs (the interpreter, the
course, the test's folder), then drops to the user and runs the command. Nothing changes
outside that namespace. Linux only; needs root.
"""

from __future__ import annotations

import ctypes
import os
import stat
import sys
from pathlib import Path

MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18


def _closed_ancestor(path: Path) -> Path | None:
    """The topmost folder above ``path`` that others may not enter, if there is one."""
    for folder in [*reversed(path.parents), path]:
        mode = folder.stat().st_mode
        if stat.S_ISDIR(mode) and not mode & stat.S_IXOTH:
            return folder
    return None


def expose(paths: list[Path]) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(0x00020000) != 0:  # CLONE_NEWNS: a mount namespace of our own
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNS) failed")
    if libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        raise OSError(ctypes.get_errno(), "making mounts private failed")
    by_top: dict[Path, list[Path]] = {}
    for path in paths:
        top = _closed_ancestor(path)
        if top is not None:
            by_top.setdefault(top, []).append(path)
    for top, inside in sorted(by_top.items(), key=lambda item: len(item[0].parts)):
        handles = {path: os.open(path, os.O_PATH) for path in inside}
        if libc.mount(b"tmpfs", str(top).encode(), b"tmpfs", 0, b"mode=0755") != 0:
            raise OSError(ctypes.get_errno(), f"mounting over {top} failed")
        for path, handle in handles.items():
            path.mkdir(parents=True, exist_ok=True)
            source = f"/proc/self/fd/{handle}".encode()
            if libc.mount(source, str(path).encode(), None, MS_BIND | MS_REC, None) != 0:
                raise OSError(ctypes.get_errno(), f"binding {path} failed")
            os.close(handle)


def main(argv: list[str]) -> None:
    uid = int(argv[0])
    command = argv[argv.index("--") + 1 :]
    needed = [Path(sys.base_prefix), Path(sys.prefix), Path(__file__).resolve().parents[2]]
    needed += [Path(p) for p in os.environ.get("AS_USER_PATHS", "").split(os.pathsep) if p]
    expose([p.resolve() for p in needed])
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
    os.execvp(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
