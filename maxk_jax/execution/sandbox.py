"""Sandbox slots: a bubblewrap-wrapped fork-server worker per slot, started as an unprivileged uid.

Each :class:`Sandbox` is one long-lived ``/usr/bin/python3`` worker (bubblewrap found on ``PATH``) (:mod:`worker`) that is PID 1
of fresh user/pid/net/ipc/uts/cgroup/mount namespaces. The supervisor (root) spawns bwrap via
``subprocess.Popen(user=uid, group=uid, extra_groups=[])`` so the uid and groups are dropped in
the C child *before* bwrap is exec'd (bwrap started as root would keep uid 0 inside). Inside:
read-only ``/usr`` (+ the /bin, /lib symlinks), a read-only copy of the worker sources at
``/maxk``, fresh ``/proc`` and ``/dev``, size-capped tmpfs at ``/tmp`` (scratch, the cwd) and
``/dev/shm``, read-only root, empty environment except PATH/HOME/LANG, no network (loopback of
an empty net namespace), no nested user namespaces (``--disable-userns``, bubblewrap >= 0.8:
so no mounts or uid maps of the program's own), and a seccomp filter (:mod:`seccomp`, bubblewrap's
``--seccomp FD``) denying the system calls no judged program needs. ``--die-with-parent`` ties the sandbox to the slot
thread that made it.

The process is a child subreaper (orphans of dying sandboxes are reparented to it) and a
:class:`Reaper` reaps zombies of the sandbox uids. Each executor takes its own block of uids
(an flock'ed lock file per block) so concurrent executors on one machine never share a uid.
"""
import ctypes
import dataclasses
import fcntl
import functools
import logging
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time

from maxk_jax.execution import cgroups, protocol, seccomp

_PR_SET_CHILD_SUBREAPER = 36
_SOURCES = ("worker.py", "harness.py", "harness_assert.py", "protocol.py")
UID_BLOCK = 128
MAX_SLOTS = UID_BLOCK - 1
MAX_GRACE_S = 3600.0        # upper bound of SandboxConfig.grace_s / start_timeout_s (and serve --grace_s)


class SandboxUnavailableError(RuntimeError):
    """bubblewrap or unprivileged user namespaces are missing and unsandboxed mode was not chosen."""


class SandboxFailure(RuntimeError):
    """The worker died, hung, or broke the protocol during a job (the job's verdict is SE)."""


@dataclasses.dataclass(frozen=True)
class SandboxConfig:
    """Static sandbox settings shared by all slots (limits that vary per test travel with the job)."""

    slots: int | None = None            # worker slots; None -> os.cpu_count()
    python: str = "/usr/bin/python3"    # interpreter for candidate code (readable by the sandbox uids)
    bwrap: str = "bwrap"                # bubblewrap: a name looked up on PATH, or a path
    allow_unsandboxed: bool = False     # explicit opt-in to run without bubblewrap/namespaces
    uid_base: int = 200000              # first uid of the per-executor uid blocks (root only)
    scratch_mb: int = 64                # tmpfs size of /tmp (the program's cwd)
    shm_mb: int = 16                    # tmpfs size of /dev/shm
    nproc: int = 64                     # processes + threads per test
    nofile: int = 256                   # open files per process
    grace_s: float = 5.0                # time past a job's wall limit before the worker counts as hung
    start_timeout_s: float = 30.0       # worker start-up deadline
    cgroups: bool = True                # a cgroup per slot where the host allows it; False forces rlimits
    cpus_per_slot: float = 1.0          # CPU quota of a slot's cgroup
    seccomp: bool = True                # the system-call filter where libseccomp is available

    def __post_init__(self):
        for name in ("grace_s", "start_timeout_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= MAX_GRACE_S:
                raise ValueError(f"SandboxConfig.{name} must be a finite number in (0, {MAX_GRACE_S:g}], got {value!r}")

    def num_slots(self) -> int:
        """Resolved slot count (validated)."""
        slots = (os.cpu_count() or 1) if self.slots is None else self.slots
        if not isinstance(slots, int) or not 1 <= slots <= MAX_SLOTS:
            raise ValueError(f"slots must be an integer in [1, {MAX_SLOTS}], got {slots!r}")
        return slots


def bwrap_path(config: SandboxConfig) -> str | None:
    """The executable ``config.bwrap`` names (found on PATH unless it holds a ``/``), or None."""
    return shutil.which(config.bwrap)


def bwrap_usable(config: SandboxConfig) -> str | None:
    """None if bubblewrap can be tried, else the reason it cannot (missing binary or python)."""
    if bwrap_path(config) is None:
        where = f"at {config.bwrap}" if os.sep in config.bwrap else \
            f"on PATH ({os.environ.get('PATH', os.defpath)})"
        return (f"bubblewrap not found {where}: install it (Debian/Ubuntu: apt-get install bubblewrap; Fedora: "
                "dnf install bubblewrap) or name it with SandboxConfig(bwrap=PATH)")
    if not os.path.isfile(config.python):
        return f"the candidate interpreter {config.python} does not exist"
    return None


UNAVAILABLE_HINT = (
    "The execution sandbox needs bubblewrap and unprivileged user namespaces (check "
    "`sysctl kernel.unprivileged_userns_clone` / `user.max_user_namespaces`, and "
    "`kernel.apparmor_restrict_unprivileged_userns=0` on Ubuntu). To run model code WITHOUT a "
    "sandbox (rlimits and a separate uid only) opt in explicitly: make_executor('embedded-unsandboxed'), "
    "EmbeddedExecutor(allow_unsandboxed=True) or `serve --unsandboxed`.")


class UidBlock:
    """A block of UID_BLOCK uids reserved for this process by an flock'ed lock file."""

    def __init__(self, uid_base: int):
        self.fd, self.base = None, None
        if os.geteuid() != 0:
            return
        lock_dir = os.path.join(tempfile.gettempdir(), "maxk_jax_uid_blocks")
        os.makedirs(lock_dir, mode=0o700, exist_ok=True)
        for block in range(4096):
            fd = os.open(os.path.join(lock_dir, f"{block}.lock"), os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            self.fd, self.base = fd, uid_base + block * UID_BLOCK
            return
        raise RuntimeError("no free uid block for the sandbox")

    def uid(self, index: int) -> int | None:
        """The uid of slot ``index`` (None when not running as root: no uid switch possible)."""
        return None if self.base is None else self.base + index

    def owns(self, uid: int) -> bool:
        """True if ``uid`` belongs to this block."""
        return self.base is not None and self.base <= uid < self.base + UID_BLOCK

    def release(self) -> None:
        """Give the block back."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def processes_of(block: UidBlock) -> list:
    """``[(pid, uid, state)]`` of all processes whose real uid lies in ``block``."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status", "rb") as f:
                status = f.read()
        except OSError:
            continue
        fields = dict(line.split(b":", 1) for line in status.splitlines() if b":" in line)
        try:
            uid = int(fields[b"Uid"].split()[0])
        except (KeyError, ValueError, IndexError):
            continue
        if block.owns(uid):
            found.append((int(name), uid, fields.get(b"State", b"?").split()[0].decode()))
    return found


def become_subreaper() -> bool:
    """Make this process a child subreaper (orphans of the sandboxes are reparented here)."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


class Reaper:
    """Periodically reaps zombie children whose uid is in the block (orphans of dead sandboxes).

    ``exclude()`` returns pids that belong to live ``Popen`` objects (bwrap itself), which
    ``Popen.wait`` reaps; zombies of other uids are left alone (they belong to someone else).
    """

    def __init__(self, block: UidBlock, interval_s: float = 1.0, exclude=lambda: ()):
        self.block, self.reaped, self.exclude = block, 0, exclude
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, args=(interval_s,), name="maxk-reaper", daemon=True)
        self._thread.start()

    def reap_once(self) -> int:
        """Reap the zombies of our uids that are children of this process; returns how many."""
        me, count, skip = os.getpid(), 0, set(self.exclude())
        for pid, _, state in processes_of(self.block):
            if state != "Z" or pid in skip:
                continue
            try:
                with open(f"/proc/{pid}/stat", "rb") as f:
                    ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
                if ppid == me and os.waitpid(pid, os.WNOHANG)[0] == pid:
                    count += 1
            except (OSError, ValueError, IndexError, ChildProcessError):
                continue
        self.reaped += count
        return count

    def _loop(self, interval_s: float) -> None:
        while not self._stop.wait(interval_s):
            self.reap_once()

    def stop(self) -> None:
        """Stop the background thread."""
        self._stop.set()


def owned_tempdir(kind: str) -> str:
    """A fresh ``/tmp/maxk_jax_<kind>_<pid>-<starttime>_XXXX`` directory (the owner is in the name)."""
    return tempfile.mkdtemp(prefix=f"maxk_jax_{kind}_{cgroups.owner_tag()}_")


@functools.lru_cache(maxsize=None)
def userns_args(bwrap: str) -> tuple[str, ...]:
    """``--unshare-user --disable-userns`` where this bubblewrap supports it (>= 0.8): candidate
    code can then create no nested user namespace (and so no mount, no uid map of its own).
    Older bubblewrap: () and one warning (nested user namespaces stay possible there)."""
    try:
        text = subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        text = ""
    if "--disable-userns" in text:
        return ("--unshare-user", "--disable-userns")
    logging.warning("bubblewrap at %s has no --disable-userns (needs >= 0.8): sandboxed programs can create "
                    "nested user namespaces", bwrap)
    return ()


def clean_stale_dirs(kinds: tuple = ("worker", "scratch")) -> list:
    """Remove ``/tmp/maxk_jax_<kind>_<owner>_*`` directories whose owner process is gone.

    A SIGKILLed service cannot clean up after itself; the next executor does. Directories of live
    owners (other executors) and names without an owner tag are left alone. Returns the removed paths.
    """
    removed, root = [], tempfile.gettempdir()
    for name in os.listdir(root):
        for kind in kinds:
            prefix = f"maxk_jax_{kind}_"
            owner = name[len(prefix):].split("_", 1)[0] if name.startswith(prefix) else ""
            if re.fullmatch(r"\d+-\d+", owner) and not cgroups.owner_alive(owner):
                shutil.rmtree(os.path.join(root, name), ignore_errors=True)
                removed.append(os.path.join(root, name))
    return removed


def stage_sources() -> str:
    """Copy the worker's stdlib-only sources to a fresh world-readable directory; returns it."""
    path = owned_tempdir("worker")
    os.chmod(path, 0o755)
    here = os.path.dirname(os.path.abspath(__file__))
    for name in _SOURCES:
        shutil.copyfile(os.path.join(here, name), os.path.join(path, name))
        os.chmod(os.path.join(path, name), 0o644)
    return path


class Sandbox:
    """One slot: a worker process inside bubblewrap (or, opted in, without it) and its channel."""

    def __init__(self, index: int, config: SandboxConfig, source_dir: str, uid: int | None, sandboxed: bool,
                 cgroup: cgroups.SlotCgroup | None = None):
        self.index, self.config, self.source_dir, self.uid, self.sandboxed = index, config, source_dir, uid, sandboxed
        self.cgroup = cgroup
        self.proc: subprocess.Popen | None = None
        self.worker_pid: int | None = None
        self.scratch_dir: str | None = None
        self.starts = 0
        self.last_answer = 0.0          # time.monotonic() of the worker's last frame (ready, answer, pong)
        self.busy = False               # a job is running (its own deadline watches the worker)
        self._stderr = None

    def _command(self, seccomp_fd: int | None = None) -> tuple:
        cfg = self.config
        if self.sandboxed:
            filter_args = [] if seccomp_fd is None else ["--seccomp", str(seccomp_fd)]
            bwrap = bwrap_path(cfg) or cfg.bwrap
            cmd = [bwrap, "--unshare-all", *userns_args(bwrap), *filter_args, "--die-with-parent", "--as-pid-1",
                   "--new-session",
                   "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--symlink", "usr/sbin", "/sbin",
                   "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
                   "--ro-bind", self.source_dir, "/maxk", "--proc", "/proc", "--dev", "/dev",
                   "--size", str(cfg.shm_mb << 20), "--tmpfs", "/dev/shm", "--remount-ro", "/dev",
                   "--size", str(cfg.scratch_mb << 20), "--tmpfs", "/tmp", "--remount-ro", "/",
                   "--hostname", "sandbox", "--clearenv", "--setenv", "PATH", "/usr/local/bin:/usr/bin:/bin",
                   "--setenv", "HOME", "/tmp", "--setenv", "TMPDIR", "/tmp", "--setenv", "LANG", "C.UTF-8",
                   "--chdir", "/tmp", "--", cfg.python, "-I", "-B", "/maxk/worker.py", "/maxk", "all",
                   *self._cgroup_args(), "/tmp", "/dev/shm"]
            return cmd, None, {}
        self.scratch_dir = owned_tempdir("scratch")
        if self.uid is not None:
            os.chown(self.scratch_dir, self.uid, self.uid)
        kill_mode = "all" if self.uid is not None else "tree"
        cmd = [cfg.python, "-I", "-B", os.path.join(self.source_dir, "worker.py"), self.source_dir, kill_mode,
               *self._cgroup_args(), self.scratch_dir]
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": self.scratch_dir, "TMPDIR": self.scratch_dir,
               "LANG": "C.UTF-8"}
        return cmd, self.scratch_dir, env

    def seccomp_program(self) -> bytes | None:
        """The BPF filter bubblewrap installs, or None (unsandboxed, disabled, or unavailable: one warning)."""
        if not (self.sandboxed and self.config.seccomp):
            return None
        program, reason = seccomp.filter_program()
        if program is None:
            seccomp.warn_once(reason)
        return program

    def _cgroup_args(self) -> list:
        return [] if self.cgroup is None else ["--cgroup-fds=" + ",".join(map(str, self.cgroup.fds))]

    def start(self) -> None:
        """Launch the worker and wait for its ready frame (SandboxFailure with bwrap's message)."""
        self.kill()
        program = self.seccomp_program()
        seccomp_fd = seccomp.program_fd(program) if program is not None else None
        try:
            cmd, cwd, env = self._command(seccomp_fd)
            self._stderr = tempfile.TemporaryFile()
            ids = {} if self.uid is None else {"user": self.uid, "group": self.uid, "extra_groups": []}
            fds = (*(self.cgroup.fds if self.cgroup else ()), *(() if seccomp_fd is None else (seccomp_fd,)))
            self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
                                         cwd=cwd or "/", env=env, close_fds=True, start_new_session=True,
                                         pass_fds=fds, **ids)
        finally:
            if seccomp_fd is not None:
                os.close(seccomp_fd)
        os.set_blocking(self.proc.stdin.fileno(), False)
        self.starts += 1
        try:
            ready, _ = protocol.read_frame(self.proc.stdout.fileno(), time.monotonic() + self.config.start_timeout_s)
        except (protocol.ProtocolError, OSError) as err:
            message = self.stderr_tail() or str(err)
            self.kill()
            raise SandboxFailure(f"worker {self.index} failed to start: {message}") from None
        if not ready.get("ready"):
            self.kill()
            raise SandboxFailure(f"worker {self.index} sent {ready!r} instead of ready")
        self.worker_pid = ready.get("pid")
        self.last_answer = time.monotonic()

    def stderr_tail(self, size: int = 2000) -> str:
        """The end of the worker's (and bwrap's) stderr."""
        if self._stderr is None:
            return ""
        try:
            self._stderr.seek(0, os.SEEK_END)
            end = self._stderr.tell()
            self._stderr.seek(max(0, end - size))
            return self._stderr.read().decode("utf-8", "replace").strip()
        except (OSError, ValueError):
            return ""

    def alive(self) -> bool:
        """True while the worker process is running."""
        return self.proc is not None and self.proc.poll() is None

    def run(self, header: dict, blobs: dict, timeout_s: float) -> tuple:
        """Send one job and wait for its answer; SandboxFailure (worker killed) on any fault."""
        if not self.alive():
            raise SandboxFailure(f"worker {self.index} is not running")
        deadline = time.monotonic() + timeout_s
        try:
            protocol.write_frame(self.proc.stdin.fileno(), header, blobs, deadline)
            answer = protocol.read_frame(self.proc.stdout.fileno(), deadline)
        except (protocol.ProtocolError, OSError) as err:
            tail = self.stderr_tail(500)
            self.kill()
            raise SandboxFailure(f"worker {self.index} failed during a job: {err}" + (f"; {tail}" if tail else "")) from None
        self.last_answer = time.monotonic()
        if not answer[0].get("ok"):
            self.kill()
            raise SandboxFailure(f"worker {self.index} reported: {answer[0].get('error')}")
        return answer

    def ping(self, timeout_s: float) -> bool:
        """Ask the idle worker for a pong within ``timeout_s``; False (and the worker killed) if it does not answer."""
        if not self.alive():
            return False
        deadline = time.monotonic() + timeout_s
        try:
            protocol.write_frame(self.proc.stdin.fileno(), {"op": "ping"}, None, deadline)
            answer, _ = protocol.read_frame(self.proc.stdout.fileno(), deadline)
        except (protocol.ProtocolError, OSError):
            self.kill()
            return False
        if not answer.get("pong"):
            self.kill()
            return False
        self.last_answer = time.monotonic()
        return True

    def responsive(self, within_s: float) -> bool:
        """Alive and either running a job or heard from within ``within_s`` seconds (a stopped worker is not)."""
        return self.alive() and (self.busy or time.monotonic() - self.last_answer <= within_s)

    def kill(self) -> None:
        """SIGKILL the worker (bwrap's --die-with-parent takes the namespace down) and reap it."""
        proc, self.proc, self.worker_pid = self.proc, None, None
        if proc is not None:
            try:
                proc.send_signal(signal.SIGKILL)
            except ProcessLookupError:
                pass
            for stream in (proc.stdin, proc.stdout):
                try:
                    stream.close()
                except OSError:
                    pass
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                logging.warning("sandbox worker %d did not exit after SIGKILL", self.index)
        if self.scratch_dir is not None:
            shutil.rmtree(self.scratch_dir, ignore_errors=True)
            self.scratch_dir = None
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
