"""Load test of the judge service with and without bearer-token authentication, workers being killed.

``python -m experiments.bench_service_load --clients=16 --requests=100``

For each mode (``noauth``, then ``auth``: ``serve --token_file``), starts ``python -m
maxk_jax.execution.serve`` on a free loopback port, runs ``--clients`` threads that each send
``--requests`` requests (one stdio submission of two tests, distinct per request so the repeat cache
never answers), while a killer thread SIGKILLs a random sandbox worker every ``--kill_every_s``.
A request is *lost* when it gets no HTTP 200 with one result per submission; tests on a killed
worker come back as ``sandbox_error`` (counted, not lost). Prints per mode the request latency
p50/p99, lost requests, sandbox errors and kills, and the auth/noauth p99 ratio measured in the same
run; writes ``results.json`` under ``--results_dir``.
"""
import json
import logging
import os
import pathlib
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import httpx
from absl import app, flags
from maxk_jax import cli

FLAGS = flags.FLAGS
flags.DEFINE_integer("clients", 16, "Concurrent client threads per mode.")
flags.DEFINE_integer("requests", 100, "Requests each client sends per mode.")
flags.DEFINE_integer("slots", 2, "Worker slots of the service.")
flags.DEFINE_float("kill_every_s", 2.0, "Seconds between SIGKILLs of a random sandbox worker (0: none).")
flags.DEFINE_list("modes", ["noauth", "auth"], "Modes to run, in this order (noauth, auth).")
flags.DEFINE_string("results_dir", "runs/bench_service_load", "Directory for results.json.")
flags.DEFINE_integer("seed", 0, "Seed of the killer's choices.")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _children(pid: int) -> list:
    """Child pids of every thread of ``pid`` (the sandboxes are started by the slot threads)."""
    found = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                found += [int(p) for p in f.read().split()]
    except OSError:
        pass
    return found


def start_service(port: int, slots: int, token_file: str | None) -> subprocess.Popen:
    """Start ``serve`` and wait for /healthz (RuntimeError with its output if it dies)."""
    extra = [f"--token_file={token_file}"] if token_file else []
    proc = subprocess.Popen([sys.executable, "-m", "maxk_jax.execution.serve", "--port", str(port), "--slots", str(slots),
                             "--cache_size=0", *extra], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError("service did not come up: " + proc.stdout.read().decode()[-2000:])
        time.sleep(0.2)


def run_mode(mode: str, clients: int, requests: int, slots: int, kill_every_s: float, rng: random.Random) -> dict:
    """One mode's load run; returns its latency percentiles and counters."""
    token, token_file = None, None
    if mode == "auth":
        token = os.urandom(32).hex()
        fd, token_file = tempfile.mkstemp(prefix="maxk_bench_token_")
        os.write(fd, token.encode())
        os.close(fd)
        os.chmod(token_file, 0o600)
    port = _free_port()
    proc = start_service(port, slots, token_file)
    url = f"http://127.0.0.1:{port}/v1/judge"
    headers = {"authorization": f"Bearer {token}"} if token else {}
    latencies, lost, sandbox_errors, kills = [], [], [0], [0]
    lock, stop = threading.Lock(), threading.Event()

    def client(index: int) -> None:
        with httpx.Client(headers=headers, timeout=120) as http:
            for r in range(requests):
                body = {"submissions": [{"id": f"c{index}r{r}", "code": f"# {index} {r}\nprint(int(input()) * 2)",
                                         "mode": "stdio", "limits": {"cpu_s": 1, "wall_s": 2},
                                         "tests": [{"stdin": "2", "expected": "4"}, {"stdin": "5", "expected": "10"}]}]}
                start = time.monotonic()
                try:
                    response = http.post(url, json=body)
                    results = response.json().get("results") if response.status_code == 200 else None
                except (httpx.HTTPError, ValueError) as err:
                    results, response = None, err
                elapsed = time.monotonic() - start
                with lock:
                    if not isinstance(results, list) or len(results) != 1:
                        lost.append(f"c{index}r{r}: {response}")
                    else:
                        latencies.append(elapsed)
                        sandbox_errors[0] += results[0]["status"] == "sandbox_error"

    def killer() -> None:
        while not stop.wait(kill_every_s):
            workers = [w for bwrap in _children(proc.pid) for w in _children(bwrap)]
            if workers:
                try:
                    os.kill(rng.choice(workers), signal.SIGKILL)
                    kills[0] += 1
                except ProcessLookupError:
                    pass

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    killer_thread = threading.Thread(target=killer, daemon=True)
    start = time.monotonic()
    for thread in threads:
        thread.start()
    if kill_every_s > 0:
        killer_thread.start()
    for thread in threads:
        thread.join()
    wall = time.monotonic() - start
    stop.set()
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    if token_file:
        os.unlink(token_file)
    latencies.sort()
    pick = lambda q: 1e3 * latencies[min(len(latencies) - 1, int(q * len(latencies)))] if latencies else float("nan")
    return {"mode": mode, "requests": clients * requests, "answered": len(latencies), "lost": len(lost),
            "lost_examples": lost[:5], "sandbox_errors": sandbox_errors[0], "kills": kills[0], "wall_s": wall,
            "p50_ms": pick(0.50), "p99_ms": pick(0.99)}


def main(argv: list) -> None:
    del argv
    logging.getLogger("httpx").setLevel(logging.WARNING)     # not one line per request
    for mode in FLAGS.modes:
        if mode not in ("noauth", "auth"):
            raise app.UsageError(f"--modes: unknown mode {mode!r} (noauth, auth)")
    rng = random.Random(FLAGS.seed)
    rows = [run_mode(mode, FLAGS.clients, FLAGS.requests, FLAGS.slots, FLAGS.kill_every_s, rng) for mode in FLAGS.modes]
    by_mode = {row["mode"]: row for row in rows}
    print(f"{FLAGS.clients} clients x {FLAGS.requests} requests, {FLAGS.slots} slots, a worker SIGKILLed every "
          f"{FLAGS.kill_every_s:g}s; {os.cpu_count()} CPUs")
    print("| mode | answered | lost | sandbox_error | kills | p50 ms | p99 ms | wall s |")
    print("|:--|--:|--:|--:|--:|--:|--:|--:|")
    for r in rows:
        print(f"| {r['mode']} | {r['answered']}/{r['requests']} | {r['lost']} | {r['sandbox_errors']} | {r['kills']} | "
              f"{r['p50_ms']:.1f} | {r['p99_ms']:.1f} | {r['wall_s']:.1f} |")
    if {"auth", "noauth"} <= set(by_mode):
        print(f"p99 auth / noauth: {by_mode['auth']['p99_ms'] / by_mode['noauth']['p99_ms']:.3f}")
    out = pathlib.Path(FLAGS.results_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps({"rows": rows, "flags": {
        "clients": FLAGS.clients, "requests": FLAGS.requests, "slots": FLAGS.slots, "kill_every_s": FLAGS.kill_every_s}},
        indent=2))


if __name__ == "__main__":
    cli.run_main(main)
