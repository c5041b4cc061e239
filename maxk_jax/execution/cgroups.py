"""Per-slot cgroups (v1 ``memory``, ``pids``, ``cpu`` hierarchies) for the sandbox slots.

rlimits are per process: RLIMIT_AS does not see memfds or tmpfs pages, and every forked child
gets its own allowance. A cgroup per slot charges everything the test's processes allocate
(anonymous memory, shmem/memfd/tmpfs pages, page cache) to one memory limit, caps processes and
threads (``pids.max``) and gives each slot one CPU's worth of time (``cpu.cfs_quota_us``, equal
``cpu.shares``) so a multi-threaded program cannot steal the other slots' CPU.

Layout: under the supervisor's own cgroup of each controller,
``maxk_jax_<pid>-<starttime>_<n>/slot<i>`` (``n`` tells apart executors of one process).
The worker itself stays outside: the supervisor (root) opens each slot's ``cgroup.procs`` and
passes the fds into the sandbox; the forked test process writes ``0`` to them (moving itself; the
kernel checks the opener's credentials) before any program code runs, then closes them. So the
limit and the OOM killer see only the test's processes, never the fork server.

Verdicts come from the kernel's counters: ``memory.oom_control``'s ``oom_kill`` (MLE when it
grew during the test) and ``memory.max_usage_in_bytes`` (peak). Before each test the group is
emptied (``memory.force_empty``: the page cache earlier tests left charged to it is reclaimed; the
group has no tasks between tests) and the peak reset, so one test's file reads never count against
the next. After the test, ``file_cache_bytes`` (``memory.stat``: ``total_cache`` less
``total_shmem``) is the page cache the test's own reads left charged: the caller takes it off the
peak, so a program is judged by what it holds (anonymous memory, shmem/memfd/tmpfs pages, kernel
memory), not by the files it read. Page cache is reclaimable: at the kernel's limit it is dropped
before any OOM kill. Where this is unavailable (not root, no writable v1 controllers -- e.g. a
cgroup2-only host) the caller falls back to rlimits and reports it (``mechanism``).
"""
import itertools
import logging
import os
import re
import time

CONTROLLERS = ("memory", "pids", "cpu")
PREFIX = "maxk_jax_"
_OWNER = re.compile(r"(\d+)-(\d+)$")
_SERIAL = itertools.count()


def owner_tag(pid: int | None = None) -> str:
    """``"<pid>-<starttime>"`` of ``pid`` (default: this process); unique across pid reuse."""
    pid = os.getpid() if pid is None else pid
    with open(f"/proc/{pid}/stat", "rb") as f:
        start = int(f.read().rsplit(b")", 1)[1].split()[19])
    return f"{pid}-{start}"


def owner_alive(tag: str) -> bool:
    """True if the process named by an :func:`owner_tag` still runs (same pid and start time)."""
    match = _OWNER.match(tag)
    if match is None:
        return True          # not ours to judge: keep it
    try:
        return owner_tag(int(match.group(1))) == tag
    except (OSError, ValueError, IndexError):
        return False


def _v1_mounts() -> dict:
    """``{controller: mount point}`` of the cgroup v1 hierarchies mounted read-write."""
    mounts = {}
    with open("/proc/self/mounts") as f:
        for line in f:
            fields = line.split()
            if len(fields) < 4 or fields[2] != "cgroup":
                continue
            options = set(fields[3].split(","))
            if "rw" not in options:
                continue
            for controller in CONTROLLERS:
                if controller in options:
                    mounts.setdefault(controller, fields[1])
    return mounts


def _own_paths() -> dict:
    """``{controller: this process's cgroup path}`` in the v1 hierarchies."""
    paths = {}
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, names, path = line.rstrip("\n").split(":", 2)
            for name in names.split(","):
                paths[name] = path
    return paths


def _write(path: str, value) -> None:
    with open(path, "w") as f:
        f.write(str(value))


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def probe() -> tuple:
    """``(bases, None)`` with ``{controller: directory to create slot groups in}``, or ``(None, reason)``."""
    if os.geteuid() != 0:
        return None, "not running as root"
    try:
        mounts, own = _v1_mounts(), _own_paths()
    except OSError as err:
        return None, f"cannot read the cgroup mounts: {err}"
    missing = [c for c in CONTROLLERS if c not in mounts or c not in own]
    if missing:
        return None, (f"no read-write cgroup v1 hierarchy for {', '.join(missing)} "
                      "(cgroup2-only hosts are not supported)")
    bases = {c: os.path.join(mounts[c], own[c].lstrip("/")) for c in CONTROLLERS}
    for controller, base in bases.items():
        if not os.access(base, os.W_OK):
            return None, f"{base} is not writable"
    if "oom_kill " not in _read(os.path.join(bases["memory"], "memory.oom_control")):
        return None, "memory.oom_control has no oom_kill counter (kernel older than 4.13)"
    return bases, None


def _remove_tree(path: str, budget_s: float = 2.0) -> bool:
    """rmdir ``path`` and its child groups (retrying while exiting tasks leave); True when gone."""
    deadline = time.monotonic() + budget_s
    while True:
        try:
            for entry in os.scandir(path):
                if entry.is_dir(follow_symlinks=False):
                    _remove_tree(entry.path, max(0.0, deadline - time.monotonic()))
            os.rmdir(path)
            return True
        except FileNotFoundError:
            return True
        except OSError:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)


def clean_stale(bases: dict) -> list:
    """Remove ``maxk_jax_*`` groups under ``bases`` whose owner process is gone; returns their paths."""
    removed = []
    for base in bases.values():
        try:
            entries = list(os.scandir(base))
        except OSError:
            continue
        for entry in entries:
            owner = entry.name[len(PREFIX):].split("_", 1)[0]
            if entry.name.startswith(PREFIX) and entry.is_dir() and not owner_alive(owner):
                if _remove_tree(entry.path, 0.5):
                    removed.append(entry.path)
                else:
                    logging.warning("stale cgroup %s could not be removed (tasks left?)", entry.path)
    return removed


class SlotCgroup:
    """One slot's groups: memory limit per test, counters, and the ``cgroup.procs`` fds to join them."""

    def __init__(self, paths: dict, pids_max: int, cpus: float):
        self.paths = paths
        for path in paths.values():
            os.makedirs(path, exist_ok=True)
        mem = paths["memory"]
        self._memsw = os.path.exists(os.path.join(mem, "memory.memsw.limit_in_bytes"))
        _write(os.path.join(paths["pids"], "pids.max"), pids_max)
        _write(os.path.join(paths["cpu"], "cpu.shares"), 1024)
        period = int(_read(os.path.join(paths["cpu"], "cpu.cfs_period_us")))
        _write(os.path.join(paths["cpu"], "cpu.cfs_quota_us"), max(1000, int(period * cpus)))
        self.fds = [os.open(os.path.join(paths[c], "cgroup.procs"), os.O_WRONLY | os.O_CLOEXEC) for c in CONTROLLERS]
        self._limit = None
        self._oom_before = 0

    def _set_limit(self, limit: int) -> None:
        mem = self.paths["memory"]
        files = ["memory.limit_in_bytes"] + (["memory.memsw.limit_in_bytes"] if self._memsw else [])
        if self._limit is not None and limit > self._limit:
            files.reverse()          # memsw >= memory at every step
        for name in files:
            _write(os.path.join(mem, name), limit)
        self._limit = limit

    def oom_kills(self) -> int:
        """The memory group's cumulative ``oom_kill`` counter."""
        for line in _read(os.path.join(self.paths["memory"], "memory.oom_control")).splitlines():
            if line.startswith("oom_kill "):
                return int(line.split()[1])
        return 0

    def usage(self) -> int:
        """Bytes charged to the memory group now."""
        return int(_read(os.path.join(self.paths["memory"], "memory.usage_in_bytes")))

    def stat(self) -> dict:
        """``memory.stat`` as ``{name: int}``."""
        return {name: int(value) for name, value in
                (line.split() for line in _read(os.path.join(self.paths["memory"], "memory.stat")).splitlines())}

    def reclaim(self) -> None:
        """Empty the group (no tasks in it): reclaim the page cache earlier tests left charged to it."""
        if self.usage():
            _write(os.path.join(self.paths["memory"], "memory.force_empty"), 0)

    def begin(self, limit_bytes: int) -> None:
        """Before a test: empty the group, set the memory limit, reset the peak and fail counters, note oom_kill."""
        self.reclaim()
        if limit_bytes != self._limit:
            self._set_limit(limit_bytes)
        mem = self.paths["memory"]
        _write(os.path.join(mem, "memory.max_usage_in_bytes"), 0)
        _write(os.path.join(mem, "memory.failcnt"), 0)
        self._oom_before = self.oom_kills()

    def end(self) -> dict:
        """After a test (its processes gone): ``{"oom_kills", "peak_bytes", "failcnt", "file_cache_bytes"}``."""
        mem = self.paths["memory"]
        stat = self.stat()
        return {"oom_kills": self.oom_kills() - self._oom_before,
                "peak_bytes": int(_read(os.path.join(mem, "memory.max_usage_in_bytes"))),
                "failcnt": int(_read(os.path.join(mem, "memory.failcnt"))),
                "file_cache_bytes": max(0, stat.get("total_cache", 0) - stat.get("total_shmem", 0))}

    def close(self) -> None:
        """Close the fds and remove the groups (their tasks must be gone)."""
        for fd in self.fds:
            os.close(fd)
        self.fds = []
        for path in self.paths.values():
            if not _remove_tree(path):
                logging.warning("cgroup %s could not be removed", path)


class CgroupSet:
    """The executor's parent groups ``maxk_jax_<owner>`` (one per controller) and its slot groups."""

    def __init__(self, bases: dict, pids_max: int, cpus_per_slot: float = 1.0, slots: int = 1):
        if pids_max < 1 or cpus_per_slot <= 0 or slots < 1:
            raise ValueError(f"pids_max and slots must be >= 1 and cpus_per_slot > 0, got {pids_max}, {slots}, "
                             f"{cpus_per_slot}")
        self.stale_removed = clean_stale(bases)
        name = f"{PREFIX}{owner_tag()}_{next(_SERIAL)}"
        self.roots = {c: os.path.join(b, name) for c, b in bases.items()}
        self.pids_max, self.cpus = pids_max, cpus_per_slot
        self.slots: list = []
        try:
            for root in self.roots.values():
                os.makedirs(root, exist_ok=True)
            # weigh the parent like `slots` ordinary tasks (as the slots' processes weigh without
            # cgroups): less and all slots together get one task's share of a busy machine, more
            # and they take CPU from the machine's other jobs
            _write(os.path.join(self.roots["cpu"], "cpu.shares"), 1024 * slots)
        except OSError:
            self.close()
            raise

    def slot(self, index: int) -> SlotCgroup:
        """Create the groups of slot ``index``."""
        paths = {c: os.path.join(r, f"slot{index}") for c, r in self.roots.items()}
        group = SlotCgroup(paths, self.pids_max, self.cpus)
        self.slots.append(group)
        return group

    def close(self) -> None:
        """Remove every group this set created (call after the sandboxes are dead). Idempotent."""
        for group in self.slots:
            if group.fds:
                group.close()
        self.slots = []
        for root in self.roots.values() if hasattr(self, "roots") else ():
            if not _remove_tree(root):
                logging.warning("cgroup %s could not be removed", root)
