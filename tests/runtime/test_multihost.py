"""maxk_jax/runtime/multihost.py: the helpers in one process, and a real multi-controller cluster of
2 processes x 4 CPU devices on 127.0.0.1 (gloo collectives) running experiments.train (2 RL
steps, a checkpoint; a resume with -m slow) and experiments.evaluate against 1 process x 8 devices."""
import json
import math
import os
import shutil
import socket
import subprocess
import sys
from typing import Callable, Optional

import jax
import numpy as np
import pytest

from maxk_jax.runtime import multihost, sharding
from maxk_jax.data import Problem, StdioCase, StdioTests, save_problems
from maxk_jax.execution import JudgeCounter
from maxk_jax.rl.metrics_log import read_metrics
from tests.cpu_flags import xla_flags

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LAUNCH_TIMEOUT = 420   # seconds for one launch of all its processes (a hang fails, never blocks)


# ------------------------------------------------------------------ in-process helpers -------

def test_split_evenly_covers_every_item_once_in_order():
    items = list(range(5))
    parts = [multihost.split_evenly(items, i, 2) for i in range(2)]
    assert parts == [[0, 1, 2], [3, 4]]
    assert [multihost.split_evenly([7], i, 2) for i in range(2)] == [[7], []]
    assert sum((multihost.split_evenly(list(range(11)), i, 4) for i in range(4)), []) == list(range(11))
    with pytest.raises(ValueError, match="part index 2"):
        multihost.split_evenly(items, 2, 2)


def test_single_process_helpers_are_identities():
    mesh = sharding.make_mesh(-1, 1, 1)
    assert not multihost.spans_processes(mesh) and not multihost.spans_processes(None)
    assert multihost.batch_block(mesh) == (0, 1)
    assert multihost.host_row_range(6, mesh) == (0, 6)
    assert multihost.host_share(list("abc"), None) == list("abc")
    assert multihost.allgather_objects({"a": [1.5, float("nan")]})[0]["a"][0] == 1.5
    assert multihost.broadcast_object([3]) == [3]
    assert multihost.allgather_blocks({"x": 1}, mesh) == [{"x": 1}]
    x = np.arange(4 * len(jax.devices()) * 3).reshape(-1, 3)
    g = multihost.global_batch(x, mesh)
    assert g.sharding == sharding.batch_sharding(mesh, 2)
    np.testing.assert_array_equal(multihost.host_rows(g, 2, 5), x[2:5])
    np.testing.assert_array_equal(multihost.replicated_value(jax.numpy.float32(2.5)), 2.5)


# ------------------------------------------------------------------ the 2 x 4 cluster --------

def echo_problem(i: int) -> Problem:
    cases = (StdioCase("0", "0"), StdioCase("1", "1"), StdioCase(str(5 + i), str(5 + i)))
    return Problem(id=f"fixture/{i}", source="fixture", prompt=f"Read x and print x. ({i})",
                   tests=StdioTests(cases))


@pytest.fixture(scope="module")
def problems_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("problems") / "fixture.jsonl"
    save_problems([echo_problem(i) for i in range(6)], path)
    return str(path)


@pytest.fixture(scope="module")
def compile_cache(tmp_path_factory):
    """A persistent XLA cache shared by the launches of this module (same programs compile once)."""
    return str(tmp_path_factory.mktemp("jax_cache"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(module: str, args: list[str], *, processes: int, devices: int, cache: str,
          distributed: Optional[Callable[[int, int], list[str]]]) -> list[subprocess.Popen]:
    """Start ``processes`` processes of ``python -m module`` with ``devices`` CPU devices each;
    ``distributed(port, process_id)`` gives the extra flags of a multi-process launch."""
    env = {**os.environ, "XLA_FLAGS": xla_flags(devices),
           "JAX_COMPILATION_CACHE_DIR": cache, "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
           "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"}
    port = free_port()
    extra = (lambda i: []) if processes == 1 else (lambda i: distributed(port, i))
    return [subprocess.Popen([sys.executable, "-m", module, *args, *extra(i)], cwd=ROOT, env=env, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for i in range(processes)]


def finish(procs: list[subprocess.Popen], timeout: float = LAUNCH_TIMEOUT) -> list[str]:
    """Wait for every process (bounded); on a timeout or a failure kill the rest and fail."""
    outs = []
    try:
        for p in procs:
            out, _ = p.communicate(timeout=timeout)
            outs.append(out)
            assert p.returncode == 0, f"process exited with {p.returncode}:\n{out[-4000:]}"
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    return outs


def train_cluster_flags(port: int, i: int) -> list[str]:
    return ["--config.distributed.enabled=true", f"--config.distributed.coordinator_address=127.0.0.1:{port}",
            "--config.distributed.num_processes=2", f"--config.distributed.process_id={i}"]


def train_args(ckpt: str, problems: str, out_dir, resume: bool = False) -> list[str]:
    return ["--config=experiments/configs/tiny_synthetic.py", "--progress=false",
            f"--config.model.path={ckpt}", f"--config.output_dir={out_dir}", "--config.data.dataset=",
            f"--config.data.problems={problems}", "--config.rollout.prompts=4", "--config.rollout.sampler.n=2",
            "--config.rollout.sampler.max_new_tokens=10", "--config.rollout.executor=embedded:1", "--config.algo.k=2",
            "--config.algo.ppo_iterations=2", "--config.max_steps=2", "--config.checkpoint.interval=1",
            "--config.log.tensorboard=false", "--config.mesh.data=-1",
            # in-loop evaluation at step 2: 3 problems in one sampling group, split 2 + 1 (same
            # sampler settings as the rollout, so no extra compilation)
            "--config.eval.interval=2", "--config.eval.dataset=", f"--config.eval.problems={problems}",
            "--config.eval.limit=3", "--config.eval.sampler.n=2", "--config.eval.ks=1",
            "--config.eval.sampler.max_new_tokens=0"] + (["--resume"] if resume else [])   # 0: the rollout's


def close(a: float, b: float) -> bool:
    """Equal up to reduction order: 1e-4 relative, or 1e-6 absolute for values that are 0 up to
    float error (e.g. the log-ratio at the first PPO iteration)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return math.isclose(a, b, rel_tol=1e-4, abs_tol=1e-6)


def assert_same_metrics(single: list[dict], multi: list[dict]) -> None:
    assert [r["step"] for r in single] == [r["step"] for r in multi]
    for a, b in zip(single, multi):
        keys = {k for k in a if not k.startswith(("time/", "perf/", "samples/judged_host"))}
        assert keys == {k for k in b if not k.startswith(("time/", "perf/", "samples/judged_host"))}
        bad = {k: (a[k], b[k]) for k in sorted(keys) if not close(a[k], b[k])}
        assert not bad, f"step {a['step']}: {bad}"


def test_train_on_two_processes_matches_one_process(tiny_ckpt, problems_file, tmp_path, compile_cache):
    one, two = tmp_path / "one", tmp_path / "two"
    procs = start("experiments.train", train_args(tiny_ckpt, problems_file, two), processes=2, devices=4,
                  cache=compile_cache, distributed=train_cluster_flags)
    procs += start("experiments.train", train_args(tiny_ckpt, problems_file, one), processes=1, devices=8,
                   cache=compile_cache, distributed=None)
    finish(procs)
    single, multi = read_metrics(one / "metrics.jsonl"), read_metrics(two / "metrics.jsonl")
    assert [r["step"] for r in multi] == [1, 2]
    assert_same_metrics(single, multi)
    for a, b in zip(single, multi):   # each host's judge received exactly its half of the step
        assert a["samples/judged_host0"] == a["samples/judged"] == 4 * 2
        assert "samples/judged_host1" not in a
        assert b["samples/judged_host0"] == b["samples/judged_host1"] == b["samples/judged"] / 2 == 4
    assert sorted(os.listdir(two / "checkpoints")) == ["1", "2"]
    assert "eval/max_at_k/1" in multi[1] and "eval/max_at_k/1" not in multi[0]   # k <= n/2 of n = 2
    report = "eval/step_2/per_problem.jsonl"
    assert (one / report).read_bytes() == (two / report).read_bytes()   # written once, by process 0


@pytest.mark.slow   # the default run has the cluster's training above; this adds a second 2-process launch
def test_train_on_two_processes_resumes_from_a_checkpoint(tiny_ckpt, problems_file, tmp_path, compile_cache):
    two = tmp_path / "two"
    finish(start("experiments.train", train_args(tiny_ckpt, problems_file, two), processes=2, devices=4,
                 cache=compile_cache, distributed=train_cluster_flags))
    uninterrupted = read_metrics(two / "metrics.jsonl")
    # Resume on the cluster from the step-1 checkpoint: step 2 is redone and logged again.
    shutil.rmtree(two / "checkpoints" / "2")
    finish(start("experiments.train", train_args(tiny_ckpt, problems_file, two, resume=True), processes=2,
                 devices=4, cache=compile_cache, distributed=train_cluster_flags))
    resumed = read_metrics(two / "metrics.jsonl")
    assert [r["step"] for r in resumed] == [1, 2]
    assert_same_metrics(uninterrupted, resumed)
    assert sorted(os.listdir(two / "checkpoints")) == ["1", "2"]


@pytest.mark.slow
def test_stale_rollouts_on_two_processes_match_one_process(tiny_ckpt, problems_file, tmp_path, compile_cache):
    """rollout.max_staleness=2 on 2 processes x 4 devices (each host's producer inline, its share of
    the prompts) gives the metrics of 1 process x 8 devices (producer thread)."""
    one, two = tmp_path / "one", tmp_path / "two"
    stale = ["--config.rollout.max_staleness=2", "--config.algo.stale_correction=behaviour",
             "--config.algo.estimator_options=(('baseline','loo1'),('scale','loo_rms'))",
             "--config.algo.loss.kind=is_weighted"]

    def args(out_dir):
        return [a.replace("--config.max_steps=2", "--config.max_steps=4") for a in
                train_args(tiny_ckpt, problems_file, out_dir)] + stale

    procs = start("experiments.train", args(two), processes=2, devices=4, cache=compile_cache,
                  distributed=train_cluster_flags)
    procs += start("experiments.train", args(one), processes=1, devices=8, cache=compile_cache, distributed=None)
    finish(procs)
    single, multi = read_metrics(one / "metrics.jsonl"), read_metrics(two / "metrics.jsonl")
    assert [r["rollout/weight_version"] for r in multi] == [0, 0, 0, 1]
    assert_same_metrics(single, multi)
    assert sorted(os.listdir(two / "in_flight")) == [f"{s}.host{h}.pkl" for s in (3, 4) for h in (0, 1)]


@pytest.mark.slow
def test_each_hosts_rollout_sub_mesh_trains_as_one_process(tiny_ckpt, problems_file, tmp_path, compile_cache):
    """rollout.devices=2 on each of 2 processes x 4 devices (each host's producer thread decodes its
    share of the prompts on its own last 2 devices, s = 1; the learner's mesh spans the other 2 of
    each) gives the metrics of 1 process x 8 devices with rollout.devices=4 (learner 4, rollout 4)."""
    one, two = tmp_path / "one", tmp_path / "two"

    def args(out_dir, d):
        return [a.replace("--config.max_steps=2", "--config.max_steps=3") for a in
                train_args(tiny_ckpt, problems_file, out_dir)] + [
            "--config.rollout.max_staleness=1", "--config.algo.stale_correction=behaviour",
            "--config.algo.estimator_options=(('baseline','loo1'),('scale','loo_rms'))",
            "--config.algo.loss.kind=is_weighted", f"--config.rollout.devices={d}"]

    procs = start("experiments.train", args(two, 2), processes=2, devices=4, cache=compile_cache,
                  distributed=train_cluster_flags)
    procs += start("experiments.train", args(one, 4), processes=1, devices=8, cache=compile_cache, distributed=None)
    finish(procs)
    single, multi = read_metrics(one / "metrics.jsonl"), read_metrics(two / "metrics.jsonl")
    assert [r["rollout/weight_version"] for r in multi] == [0, 0, 1]
    assert_same_metrics(single, multi)
    for b in multi:   # each host sampled and judged its half of the step's prompts
        assert b["samples/judged_host0"] == b["samples/judged_host1"] == b["samples/judged"] / 2 == 4
    report = "eval/step_2/per_problem.jsonl"
    assert (one / report).read_bytes() == (two / report).read_bytes()


def eval_cluster_flags(port: int, i: int) -> list[str]:
    return ["--distributed", f"--coordinator_address=127.0.0.1:{port}", "--num_processes=2", f"--process_id={i}"]


@pytest.mark.slow   # 35-57 s at load ~10 (the train test above already takes 145-210 s there)
@pytest.mark.parametrize("n, batch_size", [(2, 4), (5, 2)])
def test_evaluate_on_two_processes_writes_the_files_of_one_process(tiny_ckpt, problems_file, tmp_path,
                                                                   compile_cache, n, batch_size):
    # n=2, batch 4 per host: groups (0..3), (4); the second host has no problem in the last group
    # and still takes part in its sampler call.  n=5 > batch 2: every problem's samples are split
    # across the hosts (3 + 2: a call of 2 samples each, then one where only host 0 has rows).
    def args(out):
        return [f"--checkpoint={tiny_ckpt}", f"--problems={problems_file}", "--limit=5", f"--out_dir={out}",
                "--run_name=tiny", f"--n={n}", f"--batch_size={batch_size}", "--max_new_tokens=8", "--seed=0",
                "--executor=embedded:1", "--progress=false", "--mesh=-1,1,1"]

    one, two = tmp_path / "one", tmp_path / "two"
    finish(start("experiments.evaluate", args(two), processes=2, devices=4, cache=compile_cache,
                 distributed=eval_cluster_flags)
           + start("experiments.evaluate", args(one), processes=1, devices=8, cache=compile_cache,
                   distributed=None))
    names = sorted(os.listdir(one))
    assert sorted(os.listdir(two)) == names and "per_problem.jsonl" in names and "summary.json" in names
    for name in names:
        a, b = (one / name).read_bytes(), (two / name).read_bytes()
        if name == "run_config.json":   # records out_dir-independent settings only
            a, b = json.loads(a), json.loads(b)
        assert a == b, name
    assert len((two / "per_problem.jsonl").read_text().splitlines()) == 5


# ------------------------------------------------------------------ evaluation split ---------

class _FakeJudge:
    """Reward 1 for the program "print(input())", else 0 (one test); no sandbox."""

    def judge(self, subs):
        out = []
        for s in subs:
            ok = s["code"].strip() == "print(input())"
            out.append({"id": s["id"], "status": "ok", "reward": float(ok), "passed": int(ok), "total": 1,
                        "tests": [{"verdict": "AC" if ok else "WA"}]})
        return out


def test_evaluation_splits_every_group_across_hosts_and_calls_the_source_on_every_host():
    from maxk_jax.eval.run import EvalOptions, StaticCompletionSource, run_evaluation

    problems = [echo_problem(i) for i in range(5)]
    texts = {p.id: ["```python\nprint(input())\n```", f"```python\nprint({i})\n```"]
             for i, p in enumerate(problems)}

    def run(host):
        calls = []
        static = StaticCompletionSource(texts)

        def source(batch, keys, first):
            calls.append([p.id for p in batch])
            return static(batch, keys, first)

        judge = JudgeCounter(_FakeJudge())
        result = run_evaluation(problems, source, executor=judge, n=2, key=jax.random.key(0), options=EvalOptions(batch_size=4, progress=False, host=host))
        return {r.index: r.to_json() for r in result.problems}, calls, judge.count

    whole, whole_calls, whole_judged = run((0, 1))
    first, first_calls, first_judged = run((0, 2))
    second, second_calls, second_judged = run((1, 2))
    # batch_size 4 per host: groups (0,1,2,3), (4) on two hosts; (0,1), (2,3), (4) on one
    assert sorted(first) == [0, 1, 4] and sorted(second) == [2, 3]
    assert {**first, **second} == whole
    assert len(first_calls) == len(second_calls) == 2 and len(whole_calls) == 3   # lock-step calls
    assert second_calls[-1] == []                                          # its empty share of (4,)
    assert (first_judged, second_judged, whole_judged) == (6, 4, 10)        # each judges its own
    with pytest.raises(ValueError, match="host must be"):
        run((2, 2))


def test_samples_of_a_problem_are_split_across_hosts_when_n_exceeds_the_batch(monkeypatch):
    """n = 5 > batch_size = 2 on two simulated hosts (threads; allgather through a barrier):
    host 0 owns samples 0-2 of each problem and host 1 samples 3-4: one lock-step call of 2
    samples each, then one of 1 sample where only host 0 has rows; the completions are gathered, problem i is judged by host i % 2,
    and both hosts return the one-host result."""
    import threading

    from maxk_jax.runtime import multihost
    from maxk_jax.eval.run import EvalOptions, StaticCompletionSource, run_evaluation

    problems = [echo_problem(i) for i in range(3)]
    texts = {p.id: [f"```python\nprint({j})\n```" if j % 2 else "```python\nprint(input())\n```"
                    for j in range(5)] for i, p in enumerate(problems)}
    barrier, slots, host = threading.Barrier(2, timeout=60), [None, None], threading.local()

    def allgather(obj):
        slots[host.index] = obj
        barrier.wait()
        out = list(slots)
        barrier.wait()
        return out

    monkeypatch.setattr(multihost, "allgather_objects", allgather)
    monkeypatch.setattr(multihost, "broadcast_object", lambda obj: obj)

    def run(index, count, out):
        host.index = index
        calls, static = [], StaticCompletionSource(texts)

        def source(batch, keys, first):
            calls.append(([p.id for p in batch], first, int(keys.shape[1])))
            return static(batch, keys, first)

        judge = JudgeCounter(_FakeJudge())
        result = run_evaluation(problems, source, executor=judge, n=5, key=jax.random.key(0), options=EvalOptions(batch_size=2, progress=False, host=(index, count)))
        out[index] = ({r.index: r.to_json() for r in result.problems}, calls, judge.count)

    whole = {}
    run(0, 1, whole)
    split = {}
    threads = [threading.Thread(target=run, args=(h, 2, split)) for h in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert sorted(split) == [0, 1], "a simulated host failed"
    assert split[0][0] == split[1][0] == whole[0][0]
    ids = [p.id for p in problems]
    assert split[0][1] == [x for i in ids for x in (([i], 0, 2), ([i], 2, 1))]
    assert split[1][1] == [x for i in ids for x in (([i], 3, 2), ([], 5, 1))]
    assert (split[0][2], split[1][2], whole[0][2]) == (10, 5, 15)   # problems 0, 2 / problem 1
