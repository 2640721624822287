"""How hand-ins run here, said to the instructor, and refused where they would run unconfined.

The runner reports what it applied (namespaces, the hand-in's own user, Landlock, seccomp,
cgroups); from that :func:`mode_of` says in one line how hand-ins run, :func:`describe_confinement`
lists the protections in place and those missing with what that means (``grade`` prints both
before the first hand-in), and :func:`unconfined_refusal` stops grading where a hand-in would run
as the grader's own user with no namespace of its own, or where it would share the machine's
files with no Landlock while the course or other students' work is readable to it
(:mod:`~coursekit.grading.sandbox.read_shield` first closes them), unless the instructor
accepted that (``--unconfined``).
"""

from __future__ import annotations

from coursekit.grading.sandbox import read_shield
from coursekit.grading.sandbox.errors import SandboxSetupError


class UnconfinedError(SandboxSetupError):
    """Hand-ins would run unconfined, and the instructor did not accept that."""


def unconfined_refusal(applied: dict) -> str | None:
    """Why grading must stop before a sandbox that reported ``applied`` runs any cell: hand-ins
    would run as the grader's own user with no namespaces (an instructor's account in a
    container), or on the machine's files with no Landlock while something protected is
    readable to them (:func:`read_shield.refusal`, which closes it first); None when neither."""
    if applied.get("root_user") or applied.get("user_namespace"):
        return read_shield.refusal(applied)
    why = applied.get("why_no_namespaces") or "no namespaces were made"
    return (
        "hand-ins would run unconfined, as your own user: this account is not root and "
        f"cannot make user namespaces ({why}). A hand-in could then read and change your "
        "files, the gradebook and the course's hidden tests. Grade as root (in a container: "
        "as its root user), or where unprivileged user namespaces are allowed (on Ubuntu: "
        "sysctl kernel.apparmor_restrict_unprivileged_userns=0); or, for hand-ins you trust, "
        "pass --unconfined to run them anyway."
    )


def mode_of(applied: dict) -> str:
    """One line that says how hand-ins run, printed by ``grade`` and the Gradescope bundle."""
    names = set(applied.get("namespaces") or [])
    user = applied.get("hand_in_user")
    as_whom = f"as a user of their own (uid {user})" if user else "as your user"
    if applied.get("user_namespace") and "pid" in names:
        return "namespaces through a user namespace (an ordinary user): hand-ins run in their own"
    if "pid" in names and user:
        return f"namespaces as root: hand-ins run {as_whom}, in namespaces of their own"
    if user:
        return (
            f"no namespaces, as root (as in Docker or Gradescope): hand-ins run {as_whom}, "
            "confined by file permissions, rlimits"
            + (", Landlock" if applied.get("landlock") else "")
            + (" and seccomp" if applied.get("seccomp") else "")
        )
    if applied.get("user_namespace"):
        return "a user namespace without a PID namespace: hand-ins run as your user inside it"
    return "UNCONFINED (--unconfined): hand-ins run as your own user"


def describe_confinement(applied: dict) -> tuple[list[str], list[str]]:
    """(protections in place, protections missing with what that means), from what the
    runner reported it applied; printed by ``grade`` before the first hand-in."""
    names = set(applied.get("namespaces") or [])
    root = applied.get("root") or {}
    why = applied.get("why_no_namespaces") or ""
    because = f" ({why})" if why else ""
    present, missing = [], []

    def check(ok: bool, good: str, bad: str) -> None:
        (present if ok else missing).append(good if ok else bad)

    check(
        "pid" in names and root.get("proc") == "own",
        "its own processes",
        f"PID namespace{because}: the grader ends a hand-in's processes one by one, and a "
        "hand-in can read other processes' command lines in /proc",
    )
    check(
        root.get("root") == "own",
        f"its own read-only root with {int(root.get('scratch_bytes', 0)) // 2**20} MiB of scratch",
        f"root file system of its own{because}: a hand-in sees the host's files. Grading "
        "makes the course's folder, the hand-ins and the gradebook's folder unreadable to it "
        "while it runs (checked as a hand-in's user); what every user may read elsewhere, it "
        "may read too, unless Landlock (where there is one) keeps it out. Its scratch "
        "folder, on the host's disk, has no size cap",
    )
    check(
        "network" in names,
        "no network",
        f"network namespace{because}: the seccomp filter allows TCP alone (gloo's need), "
        "and Landlock refuses every TCP connection where the kernel is 6.7 or newer; "
        "elsewhere a hand-in can open TCP connections",
    )
    check(bool(applied.get("landlock")), "Landlock", "Landlock (Linux 5.13 or newer)")
    check(
        bool(applied.get("seccomp")),
        "a seccomp filter",
        "seccomp filter (this processor is not one coursekit knows)",
    )
    if applied.get("root_user"):
        why_not = (
            "pids and memory cgroups (as root, with /sys/fs/cgroup writable): root ignores "
            "process limits, so a hand-in could start many processes"
        )
    else:
        why_not = (
            "memory cgroup (none is delegated to this user): each of a hand-in's processes is "
            "held to the memory limit, but not all of them together"
        )
    check(
        {"pids", "memory"} <= set(applied.get("cgroups") or []), "pids and memory cgroups", why_not
    )
    return present, missing
