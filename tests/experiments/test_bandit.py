"""maxk_jax/pipelines/bandit.py and its entry point experiments/bandit.py: exact metrics, expected
estimator updates vs exact gradients, smoke runs."""
import functools
import itertools
import json
import math
import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from maxk_jax.pipelines import bandit
from maxk_jax import estimators

ROOT = pathlib.Path(__file__).resolve().parents[2]
REWARDS = jnp.array([0.3, -1.2, 0.3, 2.0, 0.7])  # a tie on purpose
LOGITS = jnp.array([0.2, -0.5, 1.0, 0.1, -0.3])
OLD_LOGITS = jnp.array([0.0, 0.3, 0.6, -0.2, 0.1])


def _tuples(num_arms: int, n: int) -> jax.Array:
    return jnp.array(list(itertools.product(range(num_arms), repeat=n)))


@functools.lru_cache(maxsize=None)
def _expected_update_program(name: str, options: tuple, k: int, n: int, scale: float,
                             clip_eps: float):
    """jit(logits, behaviour) -> E over all n-tuples ~ softmax(behaviour) of the bandit update."""
    tuples = _tuples(len(REWARDS), n)
    est = estimators.get_estimator(name, **dict(options))

    def expectation(logits, behaviour):
        logp, logq = jax.nn.log_softmax(logits), jax.nn.log_softmax(behaviour)
        prob = jnp.exp(logq[tuples].sum(-1))
        log_ratio = logp[tuples] - logq[tuples]
        grads = jax.vmap(lambda a, lr: bandit.estimator_gradient(
            logits, a, REWARDS, lr, est, k, scale, clip_eps))(tuples, log_ratio)
        return prob @ grads

    return jax.jit(expectation)


def expected_update(name: str, k: int, n: int, scale: float, logits=LOGITS, behaviour=None,
                    clip_eps: float = math.inf, **options) -> jax.Array:
    """E over all n-tuples drawn from softmax(behaviour) of bandit.estimator_gradient at logits."""
    program = _expected_update_program(name, tuple(sorted(options.items())), k, n, scale,
                                       clip_eps)
    return program(logits, logits if behaviour is None else behaviour)


def exact_grad_max_at_k(k: int, logits=LOGITS) -> jax.Array:
    return jax.grad(bandit.max_at_k)(logits, REWARDS, k)


def test_max_at_k_matches_enumeration_with_ties():
    p = np.asarray(jax.nn.softmax(LOGITS), np.float64)
    rewards = np.asarray(REWARDS, np.float64)
    exact = jax.jit(bandit.max_at_k, static_argnums=2)
    for k in (1, 2, 3):
        brute = sum(np.prod(p[list(t)]) * rewards[list(t)].max()
                    for t in itertools.product(range(len(p)), repeat=k))
        np.testing.assert_allclose(exact(LOGITS, REWARDS, k), brute, rtol=1e-5)
    np.testing.assert_allclose(exact(LOGITS, REWARDS, 1), p @ rewards, rtol=1e-6)


def test_kl_and_metrics_shapes():
    p = np.asarray(jax.nn.softmax(LOGITS), np.float64)
    q = np.asarray(jax.nn.softmax(OLD_LOGITS), np.float64)
    np.testing.assert_allclose(bandit.kl_divergence(LOGITS, OLD_LOGITS), np.sum(p * np.log(p / q)),
                               rtol=1e-5)
    batch = jnp.stack([LOGITS, OLD_LOGITS, LOGITS])[None]  # [1, 3, A]
    out = jax.jit(bandit.policy_metrics, static_argnums=3)(batch, OLD_LOGITS, REWARDS, 2)
    assert {m: v.shape for m, v in out.items()} == {m: (1, 3) for m in bandit.METRICS}
    np.testing.assert_allclose(out["kl"][0, 1], 0.0, atol=1e-7)


def test_estimator_gradient_is_the_score_function_sum():
    actions = jnp.array([2, 0, 2, 4])  # a repeated action
    adv = jnp.array([0.5, -1.0, 0.25, 2.0])
    fake = lambda r, *, k, log_ratio, mask: adv  # noqa: E731
    surrogate = lambda l: 0.3 * jnp.sum(adv * jax.nn.log_softmax(l)[actions])  # noqa: E731
    np.testing.assert_allclose(
        bandit.estimator_gradient(LOGITS, actions, REWARDS, jnp.zeros(4), fake, 2, 0.3),
        jax.grad(surrogate)(LOGITS), rtol=1e-5, atol=1e-7)


def test_trust_region_drops_only_updates_leaving_the_region():
    actions = jnp.array([0, 1, 2, 3])
    adv = jnp.array([1.0, 1.0, -1.0, -1.0])
    fake = lambda r, *, k, log_ratio, mask: adv  # noqa: E731
    log_ratio = jnp.log(jnp.array([1.5, 0.9, 0.5, 1.1]))  # drop 0 (A>0, rho>1.2), 2 (A<0, rho<0.8)
    got = bandit.estimator_gradient(LOGITS, actions, REWARDS, log_ratio, fake, 2, 1.0, 0.2)
    kept = jnp.array([0.0, 1.0, 0.0, -1.0])
    want = bandit.estimator_gradient(LOGITS, actions, REWARDS, jnp.zeros(4),
                                     lambda r, **_: kept, 2, 1.0)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    no_mask = bandit.estimator_gradient(LOGITS, actions, REWARDS, log_ratio, fake, 2, 1.0)
    assert float(jnp.max(jnp.abs(no_mask - got))) > 0.1  # clip_eps = inf keeps every sample


@pytest.mark.parametrize("spec,k,n,target", [
    ("tang_loo", 3, 3, lambda: exact_grad_max_at_k(3)),
    ("tang_loo_biased", 3, 3, lambda: exact_grad_max_at_k(2)),  # Tang et al. Lemma 2: max@(k-1)
    ("maxk:baseline=none", 3, 3, lambda: exact_grad_max_at_k(3)),
    ("maxk:baseline=loo1", 2, 3, lambda: exact_grad_max_at_k(2)),
    ("rloo", 3, 3, lambda: jax.grad(bandit.mean_reward)(LOGITS, REWARDS)),
])
def test_expected_on_policy_update_is_the_exact_gradient(spec, k, n, target):
    curve = bandit.parse_curve(spec)
    config = bandit.BanditConfig(curves=(curve,), k=k, n=n)
    got = expected_update(curve.estimator, k, n, config.scale(curve.estimator),
                          **dict(curve.options))
    np.testing.assert_allclose(got, target(), rtol=2e-4, atol=2e-6)


def test_expected_exact_offpolicy_update_is_the_exact_gradient_at_the_new_policy():
    got = expected_update("maxk_offpolicy_exact", 2, 3, 1.0, behaviour=OLD_LOGITS, baseline="loo1",
                          clamp_delta=None)
    np.testing.assert_allclose(got, exact_grad_max_at_k(2), rtol=2e-4, atol=2e-6)
    stale = expected_update("maxk", 2, 3, 1.0, behaviour=OLD_LOGITS)  # ignores log_ratio
    assert float(jnp.max(jnp.abs(stale - exact_grad_max_at_k(2)))) > 1e-2


def test_first_order_offpolicy_bias_is_second_order_in_the_policy_change():
    errors = []
    for eps in (0.2, 0.1):
        logits = OLD_LOGITS + eps * (LOGITS - OLD_LOGITS)
        got = expected_update("maxk_offpolicy", 2, 3, 1.0, logits=logits, behaviour=OLD_LOGITS,
                              baseline="loo1", clamp_delta=None)
        errors.append(float(jnp.linalg.norm(got - exact_grad_max_at_k(2, logits))))
    assert errors[1] < errors[0]
    assert 2.5 < errors[0] / errors[1] < 6.0  # O(eps^2): halving eps quarters the bias


def test_training_scan_matches_a_python_loop_of_the_reuse_scheme():
    est = estimators.get_estimator("maxk_offpolicy_exact")
    key, steps, reuse, n, k, lr = jax.random.key(3), 6, 3, 3, 2, 0.5
    traj = bandit.train_one_seed(key, REWARDS, OLD_LOGITS, estimator=est, k=k, n=n, lr=lr,
                                 scale=1.0, reuse=reuse, steps=steps, clip_eps=0.2)
    draw = jax.jit(lambda kk, l: jax.random.categorical(kk, l, shape=(n,)))

    @jax.jit
    def step(logits, actions, logp_old):
        log_ratio = jax.nn.log_softmax(logits)[actions] - logp_old
        return logits + lr * bandit.estimator_gradient(logits, actions, REWARDS, log_ratio, est,
                                                       k, 1.0, 0.2)

    logits, expected = OLD_LOGITS, []
    for batch_key in jax.random.split(key, steps // reuse):  # a plain Python loop, no scan
        actions = draw(batch_key, logits)
        logp_old = jax.nn.log_softmax(logits)[actions]
        for _ in range(reuse):
            logits = step(logits, actions, logp_old)
            expected.append(logits)
    assert traj.shape == (steps, len(REWARDS))
    np.testing.assert_allclose(traj, jnp.stack(expected), rtol=1e-5, atol=1e-6)


def test_bad_configuration_raises_value_errors():
    with pytest.raises(ValueError, match="no_such_estimator"):
        bandit.parse_curve("no_such_estimator")
    with pytest.raises(ValueError, match="'x'"):
        bandit.parse_curve("maxk@x")
    with pytest.raises(ValueError, match="R must be >= 1"):
        bandit.parse_curve("maxk@0")
    curve = (bandit.Curve("maxk", reuse=3),)
    with pytest.raises(ValueError, match="not a multiple"):
        bandit.BanditConfig(curves=curve, steps=10)
    with pytest.raises(ValueError, match="n must be >= k"):
        bandit.BanditConfig(curves=curve, steps=9, n=3, k=4)
    with pytest.raises(ValueError, match="lr"):
        bandit.BanditConfig(curves=curve, steps=9, lr=float("nan"))


def test_cli_runs_at_tiny_size_and_writes_outputs(tmp_path):
    out = tmp_path / "cli"
    proc = subprocess.run(
        [sys.executable, "-m", "experiments.bandit", "--curves=rloo,maxk_offpolicy@2",
         "--num_arms=8", "--steps=6", "--seeds=2", "--kl_levels=0.01,50", f"--out_dir={out}"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert str(out / "bandit.png") in proc.stdout and "| maxk_offpolicy@2 | 6 |" in proc.stdout
    assert (out / "bandit.png").stat().st_size > 10_000
    results = json.loads((out / "bandit.json").read_text())
    assert results["config"]["curves"] == ["rloo", "maxk_offpolicy@2"]
    for label, entry in results["curves"].items():
        assert not entry["diverged"], label
        for m in bandit.METRICS:
            assert len(entry[m]["mean"]) == 7 and len(entry[m]["final_per_seed"]) == 2
        assert entry["kl"]["mean"][0] == 0.0
        assert entry["mean_reward"]["mean"][0] == pytest.approx(results["initial"]["mean_reward"])
        assert sum(entry["final_policy_mean"]) == pytest.approx(1.0, abs=1e-5)
        assert entry["at_kl"]["50.0"] == dict(seeds_reached=0, mean_reward=None, max_at_k=None)
    assert results["curves"]["maxk_offpolicy@2"]["samples_per_run"] == 4 * 6 // 2
    assert results["curves"]["rloo"]["scale"] == 0.25


def test_cli_checks_its_output_directory_before_running(tmp_path):
    (tmp_path / "file").write_text("")
    proc = subprocess.run([sys.executable, "-m", "experiments.bandit", "--num_arms=8", "--steps=6", "--seeds=2",
                           f"--out_dir={tmp_path / 'file' / 'out'}"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr[-2000:]
    assert proc.stderr.splitlines() == [f"bandit: error: --out_dir '{tmp_path / 'file' / 'out'}' cannot be created: "
                                        f"'{tmp_path / 'file'}' is not a directory"]
