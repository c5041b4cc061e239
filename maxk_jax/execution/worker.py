"""In-sandbox fork server (stdlib only): PID 1 of the bubblewrap namespaces, one fork per test.

Started by :mod:`maxk_jax.execution.sandbox` as ``/usr/bin/python3 -I worker.py HARNESS_DIR
KILL_MODE [--cgroup-fds=A,B,C] SCRATCH...`` after the supervisor dropped to the slot's unprivileged uid. It makes itself
non-dumpable (a program running as the same uid cannot read its memory, fds or environment through
/proc, nor ptrace it), pre-imports the common modules, then serves frames from fd 0 to fd 1:

``{"op": "run", ...}`` -> fork a child that runs :func:`harness.run_test`; wait with a wall-clock
deadline (pidfd); the child first joins the slot's cgroups by writing ``0`` to the inherited
``cgroup.procs`` fds (so the worker itself is never charged or OOM-killed); kill every other process of the sandbox; reap; collect CPU time (all
descendants), peak RSS, exit status, stdout/stderr (memfds, RLIMIT_FSIZE-capped) and the harness
record carrying the per-run nonce; wipe the scratch tmpfs; answer one frame.
"""
import ctypes
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
        fds = {name: os.memfd_create(name, os.MFD_CLOEXEC) for name in ("stdin", "stdout", "stderr", "result")}
        try:
            if blobs.get("stdin"):
                os.write(fds["stdin"], blobs["stdin"])
                os.lseek(fds["stdin"], 0, os.SEEK_SET)
            return self._run_forked(dict(job, limits=limits, cwd=cwd, harness_dir=self.harness_dir), blobs, fds)
        finally:
            for fd in fds.values():
                os.close(fd)

    def _run_forked(self, job: dict, blobs: dict, fds: dict) -> tuple:
        import harness  # imported at start-up (cached); each child drops it from sys.modules

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
        nonce = os.urandom(16).hex().encode("ascii")
        os.write(write_end, nonce)
        os.close(write_end)
        timed_out = self._wait(pid, start + float(job["limits"]["wall_s"]))
        _, status, usage = os.wait4(pid, 0)
        wall = time.monotonic() - start
        clean = self.kill_leftovers()
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        exit_code, sig = _decode_status(status)
        out_size = os.fstat(fds["stdout"]).st_size
        err_size = os.fstat(fds["stderr"]).st_size
        limit = int(job["limits"]["output_bytes"])
        stdout = os.pread(fds["stdout"], min(out_size, limit), 0) if job["mode"] == "stdio" else b""
        stderr = os.pread(fds["stderr"], min(err_size, STDERR_EXCERPT), 0)
        record = self._record(fds["result"], nonce)
        output_limited = out_size > limit or err_size > limit
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
    def _wait(pid: int, deadline: float) -> bool:
        """Wait for ``pid`` to exit until ``deadline``; SIGKILL it and return True on timeout."""
        pidfd = os.pidfd_open(pid)
        try:
            poller = select.poll()
            poller.register(pidfd, select.POLLIN)
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    os.kill(pid, signal.SIGKILL)
                    return True
                if poller.poll(max(1, int(remaining * 1000) + 1)):
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
