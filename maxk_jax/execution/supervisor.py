"""The supervisor: worker slots, a shared test queue, verdicts and per-submission results.

``Supervisor.judge(submissions)`` splits validated submissions into one unit per test, queues
them, and each slot thread runs units on its own sandboxed worker — so a batch is judged
concurrently across all slots. Results come back in request order in the docs/contracts.md schema. A
worker that dies, hangs past ``wall_s + grace_s`` or breaks the protocol is killed and restarted;
its test gets verdict SE and the submission status ``sandbox_error`` with ``reward`` None (the
trainer masks it) — never 0. Custom checkers run in a separate, lazily started checker sandbox,
so expected outputs never enter a process that candidate code is forked from.

Each result also carries ``behaviour``: the fingerprint of the program's outputs on the tests
(`maxk_jax.execution.behaviour`, for majority voting; None when undetermined).

Memory is limited by a cgroup per slot where the host allows it (:mod:`cgroups`: memory incl.
shmem/memfd/tmpfs and every child process, pids, one CPU per slot) -- the group is emptied before each
test, the kernel's limit is ``memory_mb`` plus ``CGROUP_SLACK_MB`` (page cache is reclaimed before any
OOM kill; stdout/stderr are pipes the worker drains, never charged); an OOM kill in the group is MLE,
and so is a group peak above ``memory_mb`` once the file cache the test's reads left is taken off (the
program's total over all its processes and memory files) -- else by RLIMIT_AS per process.
``memory_limit_by`` in every result and in ``health()`` says which.
"""
import dataclasses
import logging
import queue
import shutil
import threading
import time
import weakref
from collections.abc import Sequence

from maxk_jax.execution import behaviour, cgroups, judge, seccomp
from maxk_jax.execution.sandbox import (UNAVAILABLE_HINT, Reaper, Sandbox, SandboxConfig, SandboxFailure,
                                        SandboxUnavailableError, UidBlock, become_subreaper, bwrap_usable,
                                        clean_stale_dirs, processes_of, stage_sources)
from maxk_jax.execution.executor import JudgeResult
from maxk_jax.execution.schema import Submission

CHECKER_LIMITS = {"cpu_s": 10.0, "wall_s": 20.0, "memory_mb": 1024, "output_mb": 1}
STDERR_IN_RESULT = 2000
CGROUP_SLACK_MB = 32
HEARTBEAT_S = 1.0       # an idle slot pings its worker this often (and before a job after a longer pause)
ABANDONED = "not run: the request was abandoned (its client disconnected)"


@dataclasses.dataclass
class _Batch:
    subs: list
    results: list
    remaining: int
    done: threading.Event
    lock: threading.Lock
    compile_errors: dict
    cancel: threading.Event | None = None

    def complete(self, sub_index: int, test_index: int, result: dict) -> None:
        """Store one test's result; remember compile errors; wake the waiter after the last."""
        with self.lock:
            self.results[sub_index][test_index] = result
            if result["verdict"] == "CE":
                self.compile_errors.setdefault(sub_index, result["message"])
            self.remaining -= 1
            if self.remaining == 0:
                self.done.set()


def _not_run(verdict: str, message: str, **flags) -> dict:
    return dict({"verdict": verdict, "cpu_s": None, "wall_s": None, "memory_mb": None, "exit_code": None,
                 "signal": None, "message": message}, **flags)


def _parse_record(raw: bytes | None) -> dict | None:
    if raw is None:
        return None
    try:
        record = judge.parse_value(raw)
    except (ValueError, RecursionError):
        return None
    return record if isinstance(record, dict) else None


class Supervisor:
    """Owns the worker slots (one thread each), the checker sandbox, the reaper and the uid block."""

    def __init__(self, config: SandboxConfig = SandboxConfig()):
        self.config = config
        self.num_slots = config.num_slots()
        reason = bwrap_usable(config)
        if reason and not config.allow_unsandboxed:
            raise SandboxUnavailableError(f"{reason}. {UNAVAILABLE_HINT}")
        self.sandboxed = reason is None
        become_subreaper()
        self.stale_removed = clean_stale_dirs()
        self._cgroups, self._slot_groups = None, {}
        self.cgroup_reason = "disabled (SandboxConfig.cgroups=False)"
        if config.cgroups:
            bases, self.cgroup_reason = cgroups.probe()
            if bases is not None:
                try:
                    self._cgroups = cgroups.CgroupSet(bases, pids_max=config.nproc + 8,
                                                      cpus_per_slot=config.cpus_per_slot, slots=self.num_slots)
                except OSError as err:
                    self.cgroup_reason = f"cannot create cgroups: {err}"
        self.memory_limit_by = "cgroup" if self._cgroups is not None else "rlimit"
        if self._cgroups is None and config.cgroups:
            logging.warning("per-slot cgroups unavailable (%s); memory is limited per process by RLIMIT_AS",
                            self.cgroup_reason)
        self.block = UidBlock(config.uid_base)
        self.source_dir = stage_sources()
        weakref.finalize(self, shutil.rmtree, self.source_dir, True)   # also at interpreter exit
        self.reaper = Reaper(self.block, exclude=self._popen_pids)
        self._queue: queue.Queue = queue.Queue()
        self._checker: Sandbox | None = None
        self._checker_lock = threading.Lock()
        self._enqueue_lock = threading.Lock()
        self._closed = False
        try:
            self._start_slots()
        except BaseException:
            self.close()
            raise

    def _start_slots(self) -> None:
        while True:
            self._sandboxes = [Sandbox(i, self.config, self.source_dir, self.block.uid(i), self.sandboxed,
                                       self._slot_group(i)) for i in range(self.num_slots)]
            events = [threading.Event() for _ in self._sandboxes]
            errors: list = [None] * self.num_slots
            self._threads = [threading.Thread(target=self._slot_main, args=(i, events[i], errors), daemon=True,
                                              name=f"maxk-slot-{i}") for i in range(self.num_slots)]
            for thread in self._threads:
                thread.start()
            for event in events:
                event.wait()
            failure = next((e for e in errors if e is not None), None)
            if failure is None:
                return
            for thread, error in zip(self._threads, errors):
                if error is not None:
                    thread.join()           # returning after its failed start
            self._stop_threads()
            while not self._queue.empty():  # no unit can be queued yet: only stray sentinels
                self._queue.get_nowait()
            if not self.sandboxed or not self.config.allow_unsandboxed:
                raise SandboxUnavailableError(f"{failure}\n{UNAVAILABLE_HINT}")
            logging.warning("sandbox unavailable (%s); running UNSANDBOXED as explicitly allowed", failure)
            self.sandboxed = False

    def _slot_group(self, index: int) -> "cgroups.SlotCgroup | None":
        if self._cgroups is None:
            return None
        if index not in self._slot_groups:
            self._slot_groups[index] = self._cgroups.slot(index)
        return self._slot_groups[index]

    def _stop_threads(self) -> None:
        alive = [t for t in getattr(self, "_threads", []) if t.is_alive()]
        for _ in alive:
            self._queue.put(None)
        for thread in alive:
            thread.join()
        self._threads = []

    def _slot_main(self, index: int, ready: threading.Event, errors: list) -> None:
        sandbox = self._sandboxes[index]
        try:
            sandbox.start()
        except (SandboxFailure, OSError) as err:
            errors[index] = err
            ready.set()
            return
        ready.set()
        while True:
            try:
                unit = self._queue.get(timeout=HEARTBEAT_S)
            except queue.Empty:
                self._heartbeat(sandbox)
                continue
            if unit is None:
                break
            if time.monotonic() - sandbox.last_answer > HEARTBEAT_S:
                self._heartbeat(sandbox)       # a worker stopped since the last beat must not take the test
            batch, sub_index, test_index = unit
            if batch.cancel is not None and batch.cancel.is_set():
                batch.complete(sub_index, test_index, _not_run("SE", ABANDONED))
                continue
            try:
                result = self._run_unit(sandbox, batch, sub_index, test_index)
            except Exception as err:  # noqa: BLE001 - a unit must never be lost
                logging.exception("judging failed")
                result = _not_run("SE", f"internal error: {type(err).__name__}: {err}")
            batch.complete(sub_index, test_index, result)
        sandbox.kill()

    def _heartbeat(self, sandbox: Sandbox) -> None:
        """Ping an idle worker; one that does not answer within ``grace_s`` (stopped, hung) or is dead
        is restarted, so that liveness means "answers" and no request lands on a hung worker."""
        if sandbox.alive() and sandbox.ping(self.config.grace_s):
            return
        if sandbox.starts:
            logging.warning("sandbox worker %d did not answer a ping within %.1fs; restarting it",
                            sandbox.index, self.config.grace_s)
        self._restart(sandbox)

    def _limits(self, limits: dict, sandboxed_uid: bool, cgroup: bool) -> dict:
        return {"cpu_s": limits["cpu_s"], "wall_s": limits["wall_s"],
                "memory_bytes": None if cgroup else limits["memory_mb"] << 20,
                "output_bytes": limits["output_mb"] << 20, "scratch_bytes": self.config.scratch_mb << 20,
                "nofile": self.config.nofile,
                "nproc": self.config.nproc if sandboxed_uid else None}

    def _execute(self, sandbox: Sandbox, header: dict, blobs: dict, limits: dict) -> tuple:
        """Run one job; (answer header, answer blobs) or raises SandboxFailure after a restart attempt.

        With a slot cgroup the answer header also carries the test's ``oom_kills`` and ``peak_bytes``."""
        group = sandbox.cgroup
        header = dict(header, op="run", limits=self._limits(limits, self.sandboxed or sandbox.uid is not None,
                                                            group is not None))
        sandbox.busy = True
        try:
            if not sandbox.alive():
                sandbox.start()
            if group is not None:
                # program memory (anon, memfd/shm/scratch tmpfs pages, kernel memory); reclaimable page
                # cache never OOM-kills, the captures are pipes outside the group
                group.begin((limits["memory_mb"] + CGROUP_SLACK_MB) << 20)
            answer = sandbox.run(header, blobs, limits["wall_s"] + self.config.grace_s)
            if group is not None:
                answer[0].update(group.end())
                # the program's total: the group's peak less the page cache its reads left charged
                answer[0]["program_bytes"] = max(0, answer[0]["peak_bytes"] - answer[0]["file_cache_bytes"])
        except SandboxFailure:
            self._restart(sandbox)
            raise
        except OSError as err:
            self._restart(sandbox)
            raise SandboxFailure(f"slot {sandbox.index} cgroup: {err}") from None
        finally:
            sandbox.busy = False
        if answer[0].get("restart"):
            self._restart(sandbox)
        return answer

    @staticmethod
    def _restart(sandbox: Sandbox) -> None:
        try:
            sandbox.start()
        except (SandboxFailure, OSError) as err:
            logging.error("restarting sandbox %d failed: %s", sandbox.index, err)

    def _run_unit(self, sandbox: Sandbox, batch: _Batch, sub_index: int, test_index: int) -> dict:
        sub: Submission = batch.subs[sub_index]
        test = sub.tests[test_index]
        with batch.lock:
            compile_error = batch.compile_errors.get(sub_index)
        if compile_error is not None:
            return _not_run("CE", compile_error)
        limits = dataclasses.asdict(sub.limits)
        header = {"mode": sub.mode}
        blobs = {"code": sub.code, "stdin": test.stdin}
        if sub.mode == "function":
            header.update(entry_point=sub.entry_point, args_json=test.args_json)
        elif sub.mode == "assert":
            blobs["test_code"] = test.test_code
        try:
            run, out = self._execute(sandbox, header, blobs, limits)
        except SandboxFailure as err:
            return _not_run("SE", str(err))
        record = _parse_record(out.get("record"))
        peak_kb = max(run["maxrss_kb"], run.get("program_bytes", 0) >> 10)
        result = {"verdict": None, "cpu_s": run["cpu_s"], "wall_s": run["wall_s"],
                  "memory_mb": round(peak_kb / 1024, 1), "exit_code": run["exit_code"],
                  "signal": run["signal"], "message": ""}
        if record and record.get("k") == "tce":
            return dict(result, verdict="SE", message=f"test code does not compile: {record.get('msg')}",
                        _invalid=True)
        failure = judge.run_failure(run, record, sub.limits.cpu_s, sub.limits.memory_mb)
        verdict, message = failure if failure else judge.answer_verdict(sub.mode, run, record)
        if verdict is None and sub.mode == "stdio":
            if sub.checker is not None:
                verdict, message, invalid = self._check(sandbox, sub, test, out["stdout"])
                if invalid:
                    result["_invalid"] = True
            else:
                ok, message = judge.compare_output(test.expected, out["stdout"], sub.compare_mode, sub.float_tol)
                verdict = "AC" if ok else "WA"
        elif verdict is None:
            try:
                ok, message = judge.compare_values(test.expected_value, record.get("v"), sub.float_tol)
            except RecursionError:
                ok, message = False, "return value nested too deeply to compare"
            verdict = "AC" if ok else "WA"
        result.update(verdict=verdict, message=message)
        result[behaviour.FIELD] = behaviour.run_token(sub.mode, verdict, stdout=out.get("stdout"), record=record,
                                                      compare_mode=sub.compare_mode)
        if verdict != "AC" and out.get("stderr"):
            result["stderr"] = out["stderr"][:STDERR_IN_RESULT].decode("utf-8", "replace")
        return result

    def _check(self, sandbox: Sandbox, sub: Submission, test, output: bytes) -> tuple:
        """Run the problem's checker in the checker sandbox: (verdict, message, invalid)."""
        header = {"mode": "stdio", "files": ["input.txt", "output.txt", "expected.txt"],
                  "argv": ["checker.py", "input.txt", "output.txt", "expected.txt"]}
        blobs = {"code": sub.checker, "stdin": b"", "file:input.txt": test.stdin, "file:output.txt": output,
                 "file:expected.txt": test.expected}
        with self._checker_lock:
            if self._checker is None:
                self._checker = Sandbox(self.num_slots, self.config, self.source_dir,
                                        self.block.uid(self.num_slots), self.sandboxed, self._slot_group(self.num_slots))
            try:
                run, out = self._execute(self._checker, header, blobs, CHECKER_LIMITS)
            except SandboxFailure as err:
                return "SE", f"checker sandbox failed: {err}", False
        record = _parse_record(out.get("record"))
        if record and record.get("k") == "ce":
            return "SE", f"checker does not compile: {record.get('msg')}", True
        detail = (out["stdout"][:300] + out["stderr"][-300:]).decode("utf-8", "replace").strip()
        if not run["timed_out"] and run["signal"] is None and run["exit_code"] == 0:
            return "AC", detail, False
        if not run["timed_out"] and run["signal"] is None and run["exit_code"] in (1, 2):
            return "WA", detail or "rejected by the checker", False
        failure = judge.run_failure(run, record, CHECKER_LIMITS["cpu_s"], CHECKER_LIMITS["memory_mb"])
        return "SE", f"checker failed ({failure[0] if failure else 'exit ' + str(run['exit_code'])}): {detail}", False

    def _summarise(self, sub: Submission, tests: list) -> JudgeResult:
        invalid = any(t.pop("_invalid", False) for t in tests)
        passed = sum(t["verdict"] == "AC" for t in tests)
        status = "invalid" if invalid else "sandbox_error" if any(t["verdict"] == "SE" for t in tests) else "ok"
        reward = passed / len(tests) if status == "ok" else None
        fingerprint = behaviour.summarise(tests)
        return {"id": sub.id, "status": status, "reward": reward, "passed": passed, "total": len(tests),
                "tests": tests, "behaviour": fingerprint if status == "ok" else None,
                "memory_limit_by": self.memory_limit_by}

    def judge(self, submissions: Sequence[Submission], cancel: threading.Event | None = None) -> list[JudgeResult]:
        """Judge validated :class:`Submission` objects; one result dict per submission, in order.

        Once ``cancel`` is set, tests not yet started are not run (verdict SE, message ``ABANDONED``)."""
        if not submissions:
            return []
        batch = _Batch(subs=list(submissions), results=[[None] * len(s.tests) for s in submissions],
                       remaining=sum(len(s.tests) for s in submissions), done=threading.Event(),
                       lock=threading.Lock(), compile_errors={}, cancel=cancel)
        with self._enqueue_lock:          # never behind close()'s stop sentinels
            if self._closed:
                raise RuntimeError("the supervisor is closed")
            for sub_index, sub in enumerate(submissions):
                for test_index in range(len(sub.tests)):
                    self._queue.put((batch, sub_index, test_index))
        batch.done.wait()
        return [self._summarise(sub, batch.results[i]) for i, sub in enumerate(submissions)]

    def pending(self) -> int:
        """Tests queued and not yet picked up by a slot."""
        return self._queue.qsize()

    def health(self) -> dict:
        """Slots alive (answering: running a job or heard from within HEARTBEAT_S + grace_s), restarts,
        queue depth, sandboxing mode, memory limit mechanism and whether the seccomp filter is on."""
        alive = sum(s.responsive(HEARTBEAT_S + self.config.grace_s) for s in self._sandboxes)
        starts = sum(s.starts for s in self._sandboxes)
        health = {"slots": self.num_slots, "alive": alive, "restarts": max(0, starts - self.num_slots),
                  "pending": self.pending(), "sandboxed": self.sandboxed, "reaped_orphans": self.reaper.reaped,
                  "memory_limit_by": self.memory_limit_by, "seccomp": self.seccomp_active()}
        if self._cgroups is None:
            health["cgroups_unavailable"] = self.cgroup_reason
        return health

    def seccomp_active(self) -> bool:
        """True when the slots' programs run under the system-call filter (:mod:`seccomp`)."""
        return bool(self.sandboxed and self.config.seccomp and seccomp.filter_program()[0] is not None)

    def _popen_pids(self) -> list:
        checker = getattr(self, "_checker", None)
        boxes = list(getattr(self, "_sandboxes", [])) + ([checker] if checker else [])
        return [box.proc.pid for box in boxes if box.proc is not None]

    def worker_pids(self) -> list:
        """Host pids of the bwrap (or worker) processes, one per slot (None if down)."""
        return [s.proc.pid if s.alive() else None for s in self._sandboxes]

    def stray_processes(self) -> list:
        """Processes of this executor's uids other than the idle slots' bwrap/worker pairs."""
        expected = set()
        for sandbox in self._sandboxes + ([self._checker] if self._checker else []):
            if sandbox.alive():
                expected.add(sandbox.proc.pid)
                expected.update(_children(sandbox.proc.pid))
        return [p for p in processes_of(self.block) if p[0] not in expected]

    def close(self) -> None:
        """Stop the slots, kill every sandbox, reap, release the uid block. Idempotent."""
        with self._enqueue_lock:
            if self._closed:
                return
            self._closed = True
        self._stop_threads()
        for sandbox in getattr(self, "_sandboxes", []):
            sandbox.kill()
        if self._checker is not None:
            self._checker.kill()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and processes_of(self.block):
            self.reaper.reap_once()
            time.sleep(0.01)
        self.reaper.stop()
        if getattr(self, "_cgroups", None) is not None:
            self._cgroups.close()
        self.block.release()
        shutil.rmtree(self.source_dir, ignore_errors=True)


def _children(pid: int) -> list:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []

