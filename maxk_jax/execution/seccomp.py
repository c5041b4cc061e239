"""The system-call filter of judged programs (seccomp-BPF, installed by bubblewrap's ``--seccomp FD``).

bubblewrap loads the filter just before it executes the slot's worker, so the fork server and every
test process it forks (and their children: seccomp filters are inherited and cannot be removed)
run under it. The filter allows everything but what no judged program needs and what widens the
kernel's attack surface: debugging other processes, eBPF, perf events, kexec, kernel keyrings,
mounts and namespaces, userfaultfd, io_uring, kernel modules and host-wide settings (``DENIED``).
Those calls fail with EPERM -- the program sees an ordinary error (its own ``OSError``, RE if
uncaught), so the verdict is reported cleanly. ``clone`` with a namespace flag is EPERM too, and
``clone3`` (whose flags a filter cannot read) is ENOSYS, so glibc falls back to ``clone``. Calls of
another ABI (32-bit ``int 0x80``, x32) kill the caller. ``socket`` and ``socketpair`` take only the
families in ``ALLOWED_FAMILIES`` (AF_UNIX, AF_INET, AF_INET6: the sandbox's network namespace has
nothing but loopback); every other family -- AF_VSOCK (which a network namespace does not isolate:
it reaches the hypervisor's services), AF_NETLINK, AF_PACKET and the rest -- fails with EPERM.

Built with libseccomp (the Debian package ``libseccomp2``) through its ctypes bindings
``pyseccomp``. Where either is missing, :func:`filter_program` returns None with the reason and
the caller logs one warning and runs without the filter (the namespaces and cgroups still hold).
"""
import errno
import functools
import logging
import os

DENIED = (
    # other processes' memory and state
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd", "process_madvise",
    # kernel programmability and introspection
    "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "lookup_dcookie", "syslog", "fanotify_init", "name_to_handle_at", "open_by_handle_at",
    # kernel keyrings
    "keyctl", "add_key", "request_key",
    # mounts, roots and namespaces
    "mount", "umount2", "mount_setattr", "move_mount", "open_tree", "fsopen", "fsconfig", "fsmount", "fspick",
    "pivot_root", "chroot", "setns", "unshare",
    # the machine itself
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "reboot", "swapon",
    "swapoff", "acct", "quotactl", "quotactl_fd", "iopl", "ioperm", "uselib", "vhangup", "settimeofday",
    "clock_settime", "clock_adjtime", "adjtimex", "sethostname", "setdomainname", "nfsservctl",
)
# socket(2) address families a judged program may use: AF_UNIX, AF_INET, AF_INET6
ALLOWED_FAMILIES = (1, 2, 10)
# clone(2) flags that create namespaces (CLONE_NEWNS .. CLONE_NEWNET, CLONE_NEWTIME)
NAMESPACE_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000 | 0x00000080


def _bindings():
    """The ``pyseccomp`` module, or raise ImportError/OSError/RuntimeError naming what is missing."""
    import pyseccomp   # noqa: PLC0415 - optional: needs libseccomp.so.2 at import time
    return pyseccomp


@functools.lru_cache(maxsize=None)
def filter_program() -> tuple:
    """``(BPF program bytes, None)``, or ``(None, reason)`` where libseccomp or its bindings are missing.

    Built once per process; ``denied`` names the calls this libseccomp resolves on the native
    architecture (:func:`denied_calls`)."""
    try:
        sc = _bindings()
    except (ImportError, OSError, RuntimeError) as err:
        return None, f"no seccomp filter: libseccomp's Python bindings are unavailable ({err}); " \
                     "pip install pyseccomp and apt-get install libseccomp2"
    try:
        rules = sc.SyscallFilter(sc.ALLOW)
        rules.set_attr(sc.Attr.ACT_BADARCH, sc.KILL_PROCESS)
        arch = sc.system_arch()
        for name in denied_calls():
            rules.add_rule(sc.ERRNO(errno.EPERM), name)
        if sc.resolve_syscall(arch, "clone") >= 0:     # flags are clone's first argument on x86-64
            for bit in _bits(NAMESPACE_FLAGS):
                rules.add_rule(sc.ERRNO(errno.EPERM), "clone", sc.Arg(0, sc.MASKED_EQ, bit, bit))
        if sc.resolve_syscall(arch, "clone3") >= 0:
            rules.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
        for call in ("socket", "socketpair"):
            if sc.resolve_syscall(arch, call) >= 0:      # the family is the first argument
                for compare in _outside(ALLOWED_FAMILIES):
                    rules.add_rule(sc.ERRNO(errno.EPERM), call, sc.Arg(0, *compare))
        fd = os.memfd_create("maxk-seccomp", os.MFD_CLOEXEC)
        try:
            with os.fdopen(os.dup(fd), "rb", closefd=True) as view:
                rules.export_bpf(view)
            size = os.fstat(fd).st_size
            program = os.pread(fd, size, 0)
        finally:
            os.close(fd)
    except (OSError, ValueError, AttributeError) as err:
        return None, f"no seccomp filter: libseccomp could not build it ({type(err).__name__}: {err})"
    if not program or len(program) % 8:
        return None, f"no seccomp filter: libseccomp exported {len(program)} bytes, not a BPF program"
    return program, None


@functools.lru_cache(maxsize=None)
def denied_calls() -> tuple:
    """The names of ``DENIED`` that exist on this machine's architecture (others need no rule)."""
    sc = _bindings()
    arch = sc.system_arch()
    return tuple(name for name in DENIED if sc.resolve_syscall(arch, name) >= 0)


def _outside(allowed: tuple) -> list:
    """Argument comparisons ``(op, value)`` that together match every 64-bit value not in
    ``allowed``: equality for each gap below the largest, ``>`` above it."""
    sc = _bindings()
    compares = [(sc.EQ, value) for value in range(max(allowed)) if value not in allowed]
    return compares + [(sc.GT, max(allowed))]


def _bits(mask: int) -> list:
    return [1 << i for i in range(mask.bit_length()) if mask >> i & 1]


_WARNED: set = set()


def warn_once(reason: str, prefix: str = "") -> None:
    """Log ``reason`` (why there is no filter) once per process, as one line after ``prefix``."""
    if reason in _WARNED:
        return
    _WARNED.add(reason)
    logging.warning("%s%s; judged programs keep every system call and socket family (namespaces and cgroups "
                    "still apply)", prefix, " ".join(reason.split()))


def refusal_for_host(host: str, insecure_no_seccomp: bool, active: bool | None = None) -> str | None:
    """Why a service on ``host`` must not start without the filter, or None.

    ``active``: whether the started supervisor applies the filter (None: whether libseccomp can
    build it). A non-loopback ``host`` without it is refused unless ``insecure_no_seccomp``, which
    logs one warning line instead; loopback: None (the executor warns once when it starts)."""
    from maxk_jax.execution.auth import is_loopback   # noqa: PLC0415 - keeps this module free of the service's imports

    reason = filter_program()[1] if active is None else None if active else "the sandbox runs no filter"
    if reason is None or is_loopback(host):
        return None
    if not insecure_no_seccomp:
        return (f"refusing to listen on {host!r} (not a loopback address) without the system-call filter "
                f"({reason}); install it or give --insecure_no_seccomp")
    warn_once(reason, prefix=f"serve: listening on {host} WITHOUT the system-call filter (--insecure_no_seccomp): ")
    return None


def program_fd(program: bytes) -> int:
    """A fresh inheritable-by-``pass_fds`` memfd holding ``program`` at offset 0 (the caller closes it)."""
    fd = os.memfd_create("maxk-seccomp", os.MFD_CLOEXEC)
    try:
        os.write(fd, program)
        os.lseek(fd, 0, os.SEEK_SET)
    except OSError:
        os.close(fd)
        raise
    return fd
