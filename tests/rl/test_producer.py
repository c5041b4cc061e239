"""The asynchronous rollout producer (maxk_jax.rl.producer): the weight version of every batch, the
key chain, the staleness bound, in-flight batches across a checkpoint, errors."""
from __future__ import annotations

import random
import threading
import time

import jax
import numpy as np
import pytest

from maxk_jax.rl import producer as P


def _chain_keys(seed: int, total: int) -> list[np.ndarray]:
    """The synchronous loop's keys: rng, key = split(rng) once per step."""
    rng, out = jax.random.key(seed), []
    for _ in range(total):
        rng, key = jax.random.split(rng)
        out.append(np.asarray(jax.random.key_data(key)))
    return out


class Learner:
    """Drives a producer like the RL loop: publish the weights of step t, take batch t, 'train'."""

    def __init__(self, s: int, total: int, *, threaded: bool, jitter: float = 0.0, start: int = 0,
                 rng: jax.Array | None = None, ready=None, fail_at: int | None = None) -> None:
        self.s, self.step, self.jitter = s, start, jitter
        self.built: list[int] = []           # versions whose weights were built
        self.ahead: list[int] = []           # index - learner step when production started
        self.fail_at = fail_at
        self.producer = P.RolloutProducer(self.produce, max_staleness=s, start=start, total=total,
                                          rng=jax.random.key(0) if rng is None else rng, ready=ready,
                                          threaded=threaded)

    def produce(self, index, weights, key):
        self.ahead.append(index - self.step)
        if self.fail_at == index:
            raise OSError("judge exploded")
        if self.jitter:
            time.sleep(random.random() * self.jitter)
        return P.Produced(index, P.weight_version(index, self.s),
                          {"weights": weights, "key": np.asarray(jax.random.key_data(key))}, judged=index)

    def weights(self, version):
        def build():
            self.built.append(version)
            return f"w{version}"
        return build

    def run(self, stop: int) -> list[P.Produced]:
        out = []
        for t in range(self.step, stop):
            self.step = t
            self.producer.publish(t, self.weights(t))
            out.append(self.producer.take(t))
            if self.jitter:
                time.sleep(random.random() * self.jitter)
        self.step = stop
        return out


@pytest.mark.parametrize("threaded", [False, True])
@pytest.mark.parametrize("s", [0, 1, 2, 4])
def test_every_batch_comes_from_the_weights_of_step_t_minus_s(s, threaded):
    random.seed(s)
    total = 9
    learner = Learner(s, total, threaded=threaded, jitter=0.01 if threaded else 0.0)
    items = learner.run(total)
    learner.producer.close()
    keys = _chain_keys(0, total)
    for t, item in enumerate(items):
        assert (item.index, item.version) == (t, max(0, t - s))
        assert item.rollout["weights"] == f"w{max(0, t - s)}"     # the version the schedule names
        np.testing.assert_array_equal(item.rollout["key"], keys[t])   # the synchronous loop's key t
        assert item.judged == t
    # a version's weights are built once, and only when some batch is sampled with them
    assert learner.built == sorted(set(max(0, t - s) for t in range(total)))
    # bounded: production never runs more than s batches ahead of the learner
    assert max(learner.ahead) <= s and min(learner.ahead) >= 0


def test_the_producer_overlaps_with_the_learner():
    """s = 1, threaded: batch t + 1 is produced while the learner trains on batch t."""
    started, release = threading.Event(), threading.Event()

    def produce(index, weights, key):
        if index == 1:
            started.set()
            assert release.wait(30)
        return P.Produced(index, P.weight_version(index, 1), weights, 0)

    producer = P.RolloutProducer(produce, max_staleness=1, start=0, total=3, rng=jax.random.key(0), threaded=True)
    producer.publish(0, lambda: "w0")
    assert producer.take(0).rollout == "w0"
    assert started.wait(30)           # batch 1 is in production before the learner asks for it
    release.set()
    assert producer.take(1).rollout == "w0"
    producer.publish(1, lambda: "w1")
    assert producer.take(2).rollout == "w1"
    producer.close()


@pytest.mark.parametrize("threaded", [False, True])
def test_in_flight_batches_resume_the_run_exactly(tmp_path, threaded):
    s, total, cut = 2, 8, 3
    full = Learner(s, total, threaded=threaded).run(total)
    first = Learner(s, total, threaded=threaded)
    first.run(cut)
    in_flight = first.producer.in_flight(cut)
    assert [(p.index, p.version) for p in in_flight] == [(3, 1), (4, 2)]
    P.save_in_flight(str(tmp_path), cut, in_flight)
    first.producer.close()
    rng = jax.random.key(0)
    for _ in range(cut):              # the loop's checkpointed chain state after `cut` steps
        rng, _ = jax.random.split(rng)
    resumed = Learner(s, total, threaded=threaded, start=cut, rng=rng, ready=P.load_in_flight(str(tmp_path), cut))
    rest = resumed.run(total)
    resumed.producer.close()
    assert resumed.built == [3, 4, 5]   # the old weights of versions 1 and 2 are not needed again
    for a, b in zip(full[cut:], rest):
        assert (a.index, a.version, a.rollout["weights"]) == (b.index, b.version, b.rollout["weights"])
        np.testing.assert_array_equal(a.rollout["key"], b.rollout["key"])


def test_checkpoint_files_are_named_pruned_and_required(tmp_path):
    item = P.Produced(4, 2, {"x": np.arange(3)}, 5)
    P.save_in_flight(str(tmp_path), 4, [item])
    P.save_in_flight(str(tmp_path), 2, [])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["2.host0.pkl", "4.host0.pkl"]
    P.prune_in_flight(str(tmp_path), [4])
    assert [p.name for p in tmp_path.iterdir()] == ["4.host0.pkl"]
    loaded = P.load_in_flight(str(tmp_path), 4)
    assert list(loaded) == [4] and loaded[4].version == 2 and loaded[4].judged == 5
    with pytest.raises(FileNotFoundError, match="in-flight batches of checkpoint 6"):
        P.load_in_flight(str(tmp_path), 6)


def test_restored_batches_must_follow_the_schedule():
    bad = {3: P.Produced(3, 3, None, 0)}
    with pytest.raises(ValueError, match="came from weights 3.*says 1"):
        P.RolloutProducer(lambda *a: None, max_staleness=2, start=3, total=6, rng=jax.random.key(0), ready=bad,
                          threaded=False)
    with pytest.raises(ValueError, match=r"are not batches \[3\]"):
        P.RolloutProducer(lambda *a: None, max_staleness=2, start=3, total=6, rng=jax.random.key(0),
                          ready={4: P.Produced(4, 2, None, 0)}, threaded=False)


@pytest.mark.parametrize("threaded", [False, True])
def test_a_failing_producer_fails_the_learner(threaded):
    learner = Learner(1, 5, threaded=threaded, fail_at=2)
    with pytest.raises((RuntimeError, OSError), match="judge exploded"):
        learner.run(5)
    learner.producer.close()


# ------------------------------------------------------------------ in the RL loop --------------

def test_the_loop_trains_on_stale_batches_and_checkpoints_the_in_flight_ones(warm_ckpt, problems_file, tmp_path):
    """rollout.max_staleness=1 (threaded producer): batch t from the weights of step t − 1; the
    staleness metrics per step; the checkpoint at step 2 holds batch 2 (made from weights 1)."""
    from maxk_jax.rl import loop as rl_loop
    from maxk_jax.rl.metrics_log import read_metrics
    from tests.rl.fixtures import small_config

    cfg = small_config(warm_ckpt, problems_file, tmp_path / "out", max_steps=3,
                       **{"eval.interval": 0, "log.tensorboard": False, "rollout.max_staleness": 1,
                          "algo.stale_correction": "tis"})
    rl_loop.run(cfg, progress=False)
    rows = read_metrics(tmp_path / "out" / "metrics.jsonl")
    assert [r["rollout/weight_version"] for r in rows] == [0, 0, 1]
    assert [r["rollout/staleness"] for r in rows] == [0, 1, 1]
    assert rows[0]["ppo/stale_ratio_max"] < 1.001   # batch 0 is on-policy: π_old/μ = 1 up to float error
    assert rows[1]["ppo/stale_log_ratio_abs_mean"] > 1e-3 and 0 < rows[1]["ppo/stale_ess_fraction_min"] <= 1
    assert all("ppo/stale_clamped_fraction" in r and "time/wait_rollout_s" in r for r in rows)
    assert P.in_flight_folder(str(tmp_path / "out")) == str(tmp_path / "out" / "in_flight")
    items = P.load_in_flight(str(tmp_path / "out" / "in_flight"), 2)
    assert [(p.index, p.version) for p in items.values()] == [(2, 1)]
    assert P.load_in_flight(str(tmp_path / "out" / "in_flight"), 3) == {}


@pytest.mark.slow
def test_stale_runs_do_not_depend_on_the_threads(warm_ckpt, problems_file, tmp_path, monkeypatch):
    """s = 2 with the producer thread and s = 2 produced inline give the same metrics: the schedule,
    not the timing, decides every batch."""
    import functools

    from maxk_jax.rl import loop as rl_loop
    from maxk_jax.rl.metrics_log import deterministic, read_metrics
    from tests.rl.fixtures import small_config

    out = {}
    for threaded in (True, False):
        monkeypatch.setattr(rl_loop.producer_lib, "RolloutProducer",
                            functools.partial(P.RolloutProducer, threaded=threaded))
        cfg = small_config(warm_ckpt, problems_file, tmp_path / str(threaded), max_steps=5,
                           **{"eval.interval": 0, "log.tensorboard": False, "rollout.max_staleness": 2,
                              "algo.stale_correction": "behaviour",
                              "algo.estimator_options": (("baseline", "loo1"), ("scale", "loo_rms")),
                              "algo.loss.kind": "is_weighted"})
        rl_loop.run(cfg, progress=False)
        out[threaded] = [deterministic(r) for r in read_metrics(tmp_path / str(threaded) / "metrics.jsonl")]
    assert out[True] == out[False]
    assert [r["rollout/weight_version"] for r in out[True]] == [0, 0, 0, 1, 2]
