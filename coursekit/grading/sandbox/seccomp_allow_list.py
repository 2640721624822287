"""The system calls a hand-in may make, by name: the seccomp filter's policy, as data.

:data:`ALLOWED` groups the calls a hand-in may make, each group with its reason;
:data:`NOT_PERMITTED` the calls refused with EPERM because they administer the system or reach
outside the process; :data:`NOT_SUPPORTED` those refused with ENOSYS although they would
otherwise be allowed. Every other call is refused with ENOSYS. The program that enforces this,
and the rules that read a call's arguments, are :mod:`coursekit.grading.sandbox.seccomp`'s.

The list was derived from what really runs: ``strace -f`` of the grading of modules 1 and 4
(the hand-in's process after it installed the filter: Python, IPython, the runner, a gloo
group) and of an everyday workload (torch with OpenMP threads, numpy and OpenBLAS,
matplotlib with a fresh font cache, IPython, threads, ``os.fork``, ``subprocess``,
``multiprocessing``, files in a temporary folder, signals and timers), then widened to what
a normal CPU program may call, legacy x86-64 variants included.
"""

# What a hand-in may call, by group. A name a machine has no number for (the legacy x86-64
# calls on arm64) is skipped there.
ALLOWED: dict[str, tuple[str, ...]] = {
    # A process's life: start-up of every program (exec'd ones too: arch_prctl,
    # set_tid_address, rseq...), its own ids, and its end.
    "process": (
        "execve", "execveat", "exit", "exit_group", "restart_syscall", "arch_prctl",
        "set_tid_address", "set_robust_list", "rseq", "prctl", "getpid", "getppid", "gettid",
        "getuid", "geteuid", "getgid", "getegid", "getresuid", "getresgid", "getgroups",
        "getpgid", "getpgrp", "setpgid", "getsid", "setsid", "capget", "umask", "uname",
        "sysinfo", "getrusage", "times", "getpriority", "getrlimit", "setrlimit",
    ),
    # Children and threads: fork, vfork and clone (whose namespace flags are checked below),
    # waiting for them; threads synchronise with futexes and may pin themselves to CPUs
    # (OpenMP does).
    "processes and threads": (
        "clone", "fork", "vfork", "wait4", "waitid", "futex", "futex_waitv", "futex_wake",
        "futex_wait", "futex_requeue", "sched_yield", "sched_getaffinity",
        "sched_setaffinity", "sched_getparam", "sched_getscheduler", "sched_getattr",
        "sched_get_priority_max", "sched_get_priority_min", "sched_rr_get_interval", "getcpu",
    ),
    # Signals: handlers, masks, waiting, and sending them (Landlock scopes signals to the
    # hand-in's own processes); pidfds for the children it waits for (not pidfd_getfd).
    "signals": (
        "rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "rt_sigpending", "rt_sigtimedwait",
        "rt_sigsuspend", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "sigaltstack", "pause",
        "kill", "tkill", "tgkill", "signalfd", "signalfd4", "pidfd_open", "pidfd_send_signal",
    ),
    # Clocks and timers, read and armed (the runner's cell timer is setitimer); never set.
    "time": (
        "clock_gettime", "clock_getres", "clock_nanosleep", "nanosleep", "gettimeofday",
        "time", "alarm", "getitimer", "setitimer", "timer_create", "timer_settime",
        "timer_gettime", "timer_getoverrun", "timer_delete", "timerfd_create",
        "timerfd_settime", "timerfd_gettime",
    ),
    # Memory of its own: allocators, JIT and shared memory between its processes; memory
    # policy (OpenBLAS calls mbind). Not process_madvise, migrate_pages or move_pages,
    # which act on other processes.
    "memory": (
        "brk", "mmap", "munmap", "mremap", "mprotect", "madvise", "msync", "mincore",
        "mlock", "mlock2", "munlock", "mlockall", "munlockall", "membarrier", "memfd_create",
        "pkey_alloc", "pkey_free", "pkey_mprotect", "get_mempolicy", "set_mempolicy",
        "mbind", "map_shadow_stack",
    ),
    # Descriptors: reading, writing, duplicating (the channel's pin is checked below),
    # pipes, polling and event descriptors.
    "descriptors": (
        "read", "write", "readv", "writev", "pread64", "pwrite64", "preadv", "pwritev",
        "preadv2", "pwritev2", "lseek", "close", "dup", "dup2", "dup3", "fcntl", "ioctl",
        "pipe", "pipe2", "sendfile", "splice", "tee", "copy_file_range", "poll", "ppoll",
        "select", "pselect6", "epoll_create", "epoll_create1", "epoll_ctl", "epoll_wait",
        "epoll_pwait", "epoll_pwait2", "eventfd", "eventfd2",
    ),
    # Files by path or descriptor: what may be read or written is Landlock's and the file
    # system's to say (a read-only root, a scratch tmpfs); these calls add no reach.
    "files": (
        "open", "openat", "openat2", "creat", "stat", "fstat", "lstat", "newfstatat",
        "statx", "statfs", "fstatfs", "access", "faccessat", "faccessat2", "getdents",
        "getdents64", "getcwd", "chdir", "fchdir", "readlink", "readlinkat", "mkdir",
        "mkdirat", "rmdir", "unlink", "unlinkat", "rename", "renameat", "renameat2", "link",
        "linkat", "symlink", "symlinkat", "mknod", "mknodat", "chmod", "fchmod", "fchmodat",
        "fchmodat2", "chown", "fchown", "lchown", "fchownat", "truncate", "ftruncate",
        "fallocate", "fadvise64", "readahead", "fsync", "fdatasync", "sync_file_range",
        "flock", "utime", "utimes", "futimesat", "utimensat", "getxattr", "lgetxattr",
        "fgetxattr", "listxattr", "llistxattr", "flistxattr", "setxattr", "lsetxattr",
        "fsetxattr", "removexattr", "lremovexattr", "fremovexattr", "inotify_init",
        "inotify_init1", "inotify_add_watch", "inotify_rm_watch",
    ),
    # Sockets: the calls on a socket it has. Which sockets it may have is checked at
    # socket/socketpair below (Unix pairs; loopback TCP for gloo when allowed).
    "sockets": (
        "socket", "socketpair", "bind", "listen", "accept", "accept4", "connect",
        "getsockname", "getpeername", "setsockopt", "getsockopt", "sendto", "recvfrom",
        "sendmsg", "recvmsg", "sendmmsg", "recvmmsg", "shutdown",
    ),
    # Random numbers; resource limits of this process (prlimit64 is checked below).
    "misc": ("getrandom", "prlimit64"),
    # Restricting itself further: a second seccomp filter or Landlock domain can only take
    # away, never give back.
    "self-restriction": (
        "seccomp", "landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self",
    ),
}  # fmt: skip
# Not listed, so refused with ENOSYS: the set-id family and setgroups (the process is
# already the unprivileged user it runs as), capset, personality, SysV IPC and POSIX message
# queues (shared with other processes), AIO (io_setup...), setpriority and the sched_set*
# policies (they reach other processes of the user), get_robust_list, sync and syncfs,
# vmsplice, kcmp, name_to_handle_at, fanotify, memfd_secret, process_mrelease, the new mount
# API's open_tree_attr, statmount and listmount, lsm_*, cachestat, mseal, the *xattrat
# calls, modify_ldt, set_thread_area, and every number coursekit does not know.

# Refused with EPERM: they administer the system or reach outside the process.
NOT_PERMITTED = (
    "setns", "unshare", "mount", "umount2", "pivot_root", "chroot", "open_tree",
    "move_mount", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr", "add_key",
    "request_key", "keyctl", "ptrace", "process_vm_readv", "process_vm_writev",
    "pidfd_getfd", "perf_event_open", "bpf", "userfaultfd", "kexec_load", "kexec_file_load",
    "init_module", "finit_module", "delete_module", "reboot", "swapon", "swapoff", "syslog",
    "acct", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "quotactl",
    "quotactl_fd", "lookup_dcookie", "open_by_handle_at", "uselib", "iopl", "ioperm",
    "vhangup",
)  # fmt: skip
# Refused with ENOSYS although they would otherwise be listed (see the seccomp module's
# docstring: io_uring would undo every rule, clone3's flags cannot be read, close_range
# would unpin the channel).
NOT_SUPPORTED = ("io_uring_setup", "io_uring_enter", "io_uring_register", "clone3", "close_range")
