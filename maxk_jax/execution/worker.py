"""In-sandbox fork server (stdlib only): PID 1 of the bubblewrap namespaces, one fork per test.

Started by :mod:`maxk_jax.execution.sandbox` as ``/usr/bin/python3 -I worker.py HARNESS_DIR
KILL_MODE [--cgroup-fds=A,B,C] SCRATCH...`` after the supervisor dropped to the slot's unprivileged uid. It makes itself
non-dumpable (a program running as the same uid cannot read its memory, fds or environment through
/proc, nor ptrace it), pre-imports the common modules, then serves frames from fd 0 to fd 1:

``{"op": "run", ...}`` -> fork a child that runs :func:`harness.run_test`; wait with a wall-clock
deadline (pidfd); the child first joins the slot's cgroups by writing ``0`` to the inherited
``cgroup.procs`` fds (so the worker itself is never charged or OOM-killed); kill every other process of the sandbox; reap; collect CPU time (all
descendants), peak RSS, exit status, stdout/stderr and the harness record carrying the per-run nonce;
wipe the scratch tmpfs; answer one frame.

stdout and stderr are pipes the worker drains while it waits (the worker stays outside the slot's
cgroup, so what a program prints is never charged as its memory, and a sparse or seeked capture
cannot hide pages): the first ``output_bytes`` of stdout and ``STDERR_EXCERPT`` of stderr are kept,
both are counted, and a program that writes more than ``output_bytes`` to either is killed (OLE).
"""
import ctypes
import fcntl
import gc
import os
import resource
import select
import signal
import sys
import time

# Warm the modules most programs import, so every fork inherits them. Not `threading` or
# `random` (their at-fork hooks cost ~1 ms / ~0.2 ms per test) nor rarely used heavy modules:
# each pre-import makes every fork a little dearer, and programs that need them import them.
import array, bisect, collections, copy, functools, heapq, itertools, math, operator  # noqa: E401,F401
import re, string, struct, typing  # noqa: E401,F401

_PR_SET_DUMPABLE, _PR_SET_CHILD_SUBREAPER = 4, 36
STDERR_EXCERPT = 8192
MAX_SCRATCH_ENTRIES = 20000
_CHILD_FAILED = 121
_JOIN_FAILED = 122
_F_SETPIPE_SZ = 1031
_PIPE_BYTES = 1 << 20       # pipe capacity asked for (fewer wake-ups for large outputs) and the read size
DRAIN_S = 2.0               # after the test's processes are gone, how long to wait for their pipes' EOF


def _decode_status(status: int) -> tuple:
    if os.WIFSIGNALED(status):
        num = os.WTERMSIG(status)
        try:
            return None, signal.Signals(num).name
        except ValueError:
            return None, f"SIG{num}"
    return os.WEXITSTATUS(status), None


def _cpu(usage) -> float:
    return usage.ru_utime + usage.ru_stime


class Capture:
    """One output pipe's read end: keeps the first ``keep`` bytes, counts up to ``limit`` + 1."""

    def __init__(self, fd: int, keep: int, limit: int):
        self.fd, self.keep, self.limit = fd, keep, limit
        self.chunks, self.kept, self.size, self.open = [], 0, 0, True

    @property
    def over(self) -> bool:
        """More than ``limit`` bytes arrived."""
        return self.size > self.limit

    def read(self) -> bool:
        """One non-blocking read; False when nothing was there (EOF sets ``open`` False)."""
        try:
            data = os.read(self.fd, _PIPE_BYTES)
        except BlockingIOError:
            return False
        except OSError:
            data = b""
        if not data:
            self.open = False
            return False
        self.size += len(data)
        if self.kept < self.keep:
            part = data[:self.keep - self.kept]
            self.chunks.append(part)
            self.kept += len(part)
        return True

    def data(self) -> bytes:
        """The kept bytes."""
        return b"".join(self.chunks)


def drain(captures: tuple, deadline: float) -> bool:
    """Read ``captures`` until EOF (every writer gone) or past the limit or ``deadline``; True when all ended."""
    poller = select.poll()
    pending = {c.fd: c for c in captures if c.open and not c.over}
    for fd in pending:
        poller.register(fd, select.POLLIN)
    while pending:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        for fd, _ in poller.poll(max(1, int(remaining * 1000) + 1)):
            capture = pending[fd]
            capture.read()
            if not capture.open or capture.over:
                poller.unregister(fd)
                del pending[fd]
    return True


class Worker:
    """The fork server state: scratch dirs, kill mode, frame loop."""

    def __init__(self, harness_dir: str, kill_mode: str, scratch: list, cgroup_fds: tuple = ()):
        self.harness_dir, self.kill_mode, self.scratch = harness_dir, kill_mode, scratch
        self.cgroup_fds = tuple(cgroup_fds)
        self.sandboxed = kill_mode == "all" and os.getpid() == 1
        self.own_processes = 1

    def kill_leftovers(self, budget_s: float = 5.0) -> bool:
        """SIGKILL every process of the sandbox but this one and reap them; True when none are left."""
        deadline = time.monotonic() + budget_s
        me = os.getpid()
        while time.monotonic() < deadline:
            if self.kill_mode == "all":
                try:
                    os.kill(-1, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            else:
                for pid in self._descendants(me):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            while True:
                try:
                    pid, _ = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    if self.kill_mode == "all" or not self._descendants(me):
                        return True
                    break
                if pid == 0:
                    break
            time.sleep(0.0005)
        return False

    @staticmethod
    def _descendants(root: int) -> list:
        parents = {}
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    with open(f"/proc/{name}/stat", "rb") as f:
                        fields = f.read().rsplit(b")", 1)[1].split()
                    parents[int(name)] = int(fields[1])
                except (OSError, IndexError, ValueError):
                    continue
        found, frontier = [], {root}
        while frontier:
            frontier = {pid for pid, ppid in parents.items() if ppid in frontier}
            found.extend(frontier)
        return found

    def scratch_used(self) -> int:
        """Bytes of the largest file under the scratch dirs (what RLIMIT_FSIZE bounds)."""
        largest = 0
        for root in self.scratch:
            for dirpath, _, names in os.walk(root):
                for name in names:
                    try:
                        largest = max(largest, os.lstat(os.path.join(dirpath, name)).st_size)
                    except OSError:
                        pass
        return largest

    def wipe_scratch(self) -> bool:
        """Delete everything under the scratch dirs; False if the sandbox should be replaced."""
        ok = True
        for root in self.scratch:
            try:
                if not os.listdir(root):
                    continue
                ok = self._wipe(root) and ok
            except OSError:
                ok = False
        return ok

    @staticmethod
    def _wipe(root: str) -> bool:
        stack, dirs, entries = [root], [], 0
        while stack:
            path = stack.pop()
            os.chmod(path, 0o700)
            with os.scandir(path) as it:
                for entry in it:
                    entries += 1
                    if entries > MAX_SCRATCH_ENTRIES:
                        return False
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
                        dirs.append(entry.path)
                    else:
                        os.unlink(entry.path)
        for path in reversed(dirs):
            os.rmdir(path)
        return True

    def ipc_clean(self) -> bool:
        """True when no SysV IPC object survives (they outlive processes inside the IPC namespace)."""
        if not self.sandboxed:
            return True
        for name in ("shm", "msg", "sem"):
            try:
                fd = os.open(f"/proc/sysvipc/{name}", os.O_RDONLY)
            except OSError:
                continue
            try:
                if os.read(fd, 65536).count(b"\n") > 1:
                    return False
            finally:
                os.close(fd)
        return True

    def run(self, job: dict, blobs: dict) -> tuple:
        """Run one test; returns the (header, blobs) answer frame."""
        limits = dict(job["limits"])
        if limits.get("nproc"):
            limits["nproc"] = int(limits["nproc"]) + self.own_processes
        cwd = self.scratch[0]
        for name in job.get("files", []):
            with open(os.path.join(cwd, name), "wb") as f:
                f.write(blobs["file:" + name])
        fds = {name: os.memfd_create(name, os.MFD_CLOEXEC) for name in ("stdin", "result")}
        readers = {}
        try:
            for name in ("stdout", "stderr"):
                readers[name], fds[name] = os.pipe2(os.O_CLOEXEC)
                os.set_blocking(readers[name], False)
                try:
                    fcntl.fcntl(readers[name], _F_SETPIPE_SZ, _PIPE_BYTES)
                except OSError:
                    pass                    # the default 64 KiB pipe works, only with more wake-ups
            if blobs.get("stdin"):
                os.write(fds["stdin"], blobs["stdin"])
                os.lseek(fds["stdin"], 0, os.SEEK_SET)
            return self._run_forked(dict(job, limits=limits, cwd=cwd, harness_dir=self.harness_dir), blobs, fds,
                                    readers)
        finally:
            for fd in (*fds.values(), *readers.values()):    # the write ends are gone from fds after the fork
                os.close(fd)

    def _run_forked(self, job: dict, blobs: dict, fds: dict, readers: dict) -> tuple:
        import harness  # imported at start-up (cached); each child drops it from sys.modules

        limit = int(job["limits"]["output_bytes"])
        out = Capture(readers["stdout"], limit if job["mode"] == "stdio" else 0, limit)
        err = Capture(readers["stderr"], STDERR_EXCERPT, limit)
        read_end, write_end = os.pipe()
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.monotonic()
        pid = os.fork()
        if pid == 0:  # child
            try:
                os.close(write_end)
                try:
                    for fd in self.cgroup_fds:
                        os.write(fd, b"0")      # move this process into the slot's group
                        os.close(fd)
                except OSError:
                    os._exit(_JOIN_FAILED)
                harness.run_test(job, blobs, dict(fds, nonce=read_end))
            finally:
                os._exit(_CHILD_FAILED)
        os.close(read_end)
        for name in ("stdout", "stderr"):       # the child holds the write ends now: EOF when all its processes are gone
            os.close(fds.pop(name))
        nonce = os.urandom(16).hex().encode("ascii")
        os.write(write_end, nonce)
        os.close(write_end)
        timed_out = self._wait(pid, start + float(job["limits"]["wall_s"]), (out, err))
        _, status, usage = os.wait4(pid, 0)
        wall = time.monotonic() - start
        clean = self.kill_leftovers()
        clean = drain((out, err), time.monotonic() + DRAIN_S) and clean
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        exit_code, sig = _decode_status(status)
        out_size, err_size = out.size, err.size
        stdout, stderr = out.data(), err.data()
        record = self._record(fds["result"], nonce)
        output_limited = out.over or err.over
        file_limited = ""
        if sig == "SIGXFSZ" and not output_limited:   # which file hit RLIMIT_FSIZE: scratch or memory
            scratch = int(job["limits"].get("scratch_bytes") or 0)
            file_limited = "scratch" if scratch and self.scratch_used() >= scratch else "memory"
        clean = self.wipe_scratch() and self.ipc_clean() and clean
        if exit_code == _JOIN_FAILED and record is None and self.cgroup_fds:
            return {"ok": False, "error": "the test process could not join the slot's cgroups", "restart": True}, {}
        header = {
            "ok": True, "exit_code": exit_code, "signal": sig, "timed_out": timed_out,
            "cpu_s": round(_cpu(after) - _cpu(before), 6), "wall_s": round(wall, 6),
            "maxrss_kb": usage.ru_maxrss, "stdout_size": out_size, "stderr_size": err_size,
            "output_limited": output_limited, "file_limited": file_limited,
            "restart": not clean,
        }
        answer = {"stdout": stdout, "stderr": stderr}
        if record is not None:
            answer["record"] = record
        return header, answer

    @staticmethod
    def _wait(pid: int, deadline: float, captures: tuple) -> bool:
        """Wait for ``pid`` to exit until ``deadline`` while draining ``captures``; SIGKILL it and return
        True on timeout. A capture beyond its limit gets ``pid`` SIGKILLed at once (the caller sees ``over``)."""
        pidfd = os.pidfd_open(pid)
        try:
            poller = select.poll()
            poller.register(pidfd, select.POLLIN)
            by_fd = {c.fd: c for c in captures}
            for fd in by_fd:
                poller.register(fd, select.POLLIN)
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    os.kill(pid, signal.SIGKILL)
                    return True
                for fd, _ in poller.poll(max(1, int(remaining * 1000) + 1)):
                    if fd == pidfd:
                        return False
                    capture = by_fd[fd]
                    capture.read()
                    if not capture.open:
                        poller.unregister(fd)
                    if capture.over:
                        os.kill(pid, signal.SIGKILL)
                        return False
        finally:
            os.close(pidfd)

    @staticmethod
    def _record(fd: int, nonce: bytes):
        size = os.fstat(fd).st_size
        data = os.pread(fd, size, 0) if size else b""
        found = None
        for line in data.split(b"\n"):
            if line.startswith(nonce + b" "):
                found = line[len(nonce) + 1:]
        return found

    def serve(self, in_fd: int, out_fd: int) -> None:
        """Answer frames until the supervisor closes the channel."""
        import protocol

        protocol.write_frame(out_fd, {"ready": True, "pid": os.getpid(), "sandboxed": self.sandboxed,
                                      "python": sys.version.split()[0]})
        while True:
            try:
                job, blobs = protocol.read_frame(in_fd)
            except protocol.ProtocolError:
                return
            op = job.get("op")
            if op == "run":
                try:
                    header, answer = self.run(job, blobs)
                except Exception as err:  # noqa: BLE001 - report, then let the supervisor restart us
                    header, answer = {"ok": False, "error": f"{type(err).__name__}: {err}", "restart": True}, {}
                    self.kill_leftovers()
                protocol.write_frame(out_fd, header, answer)
            elif op == "ping":
                protocol.write_frame(out_fd, {"ok": True, "pong": True})
            else:
                return


def main(argv: list) -> None:
    """Entry point: ``worker.py HARNESS_DIR KILL_MODE [--cgroup-fds=A,B,C] SCRATCH_DIR [EXTRA_SCRATCH_DIR...]``."""
    harness_dir, kill_mode, scratch = argv[1], argv[2], argv[3:]
    cgroup_fds = ()
    if scratch and scratch[0].startswith("--cgroup-fds="):
        cgroup_fds = tuple(int(fd) for fd in scratch.pop(0).split("=", 1)[1].split(",") if fd)
        for fd in cgroup_fds:
            os.set_inheritable(fd, False)
    if kill_mode not in ("all", "tree") or not scratch:
        sys.exit(f"usage: worker.py HARNESS_DIR all|tree SCRATCH_DIR..., got {argv[1:]!r}")
    if kill_mode == "all" and os.geteuid() == 0 and os.getpid() != 1:
        sys.exit("worker.py: refusing kill mode 'all' as root outside a pid namespace (kill(-1) would hit the host)")
    sys.path.insert(0, harness_dir)
    import harness  # noqa: F401 - warm the child's imports
    import harness_assert  # noqa: F401
    import protocol  # noqa: F401

    libc = ctypes.CDLL(None)
    libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    # PID 1 of a pid namespace only receives signals it has handlers for: keep none (SIGINT's
    # Python handler included), so programs in the sandbox cannot signal the worker at all.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2,
                signal.SIGALRM, signal.SIGXFSZ, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    in_fd, out_fd = os.dup(0), os.dup(1)
    devnull = os.open("/dev/null", os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.close(devnull)
    os.set_inheritable(in_fd, False)
    os.set_inheritable(out_fd, False)
    harness.prepare_worker()
    gc.collect()
    gc.freeze()     # start-up objects never get GC-touched (copied) in the forked children
    Worker(harness_dir, kill_mode, scratch, cgroup_fds).serve(in_fd, out_fd)


if __name__ == "__main__":
    main(sys.argv)
