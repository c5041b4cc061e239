"""maxk_jax/rl/wiring.py: the update's log-ratios, masks and coefficients on a hand-made batch
(independent numpy reference), padding and invalid samples never read, own_old, bad input."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from maxk_jax.estimators import get_estimator
from maxk_jax.rl import wiring
from maxk_jax.rl.losses import LossConfig

P, N, T = 2, 3, 4
LOSS = LossConfig(kind="is_weighted", aggregation="seq_sum_norm", norm_length=T,
                  eps_low=1 - 1e-7, eps_high=1e9)   # a trust region that never clips these random ratios


def _batch(seed=0):
    rng = np.random.default_rng(seed)
    lengths = np.array([1, 4, 2, 3, 4, 2])
    comp = np.arange(T)[None] < lengths[:, None]
    valid = np.array([True, True, True, True, False, True])
    logp, old, mu = (np.where(comp, rng.normal(-1.0, 0.3, (P * N, T)), np.nan).astype(np.float32)
                     for _ in range(3))     # NaN in the padding: the masks must keep it out
    old[4] = np.nan                          # an invalid sample's log-probs are never read either
    rewards = np.where(valid, rng.uniform(size=P * N), 0.0).astype(np.float32)
    return dict(logp=logp, old=old, mu=mu, comp=comp, valid=valid, rewards=rewards)


def _wire(b, **kw):
    fn = get_estimator("maxk_offpolicy_exact", baseline="none", clamp_delta=None)
    return wiring.update_loss(jnp.asarray(b["logp"]), old_logp=jnp.asarray(b["old"]),
                              completion_mask=jnp.asarray(b["comp"]), valid=jnp.asarray(b["valid"]),
                              rewards=jnp.asarray(b["rewards"]), answer_ids=jnp.zeros(P * N, jnp.int32),
                              behaviour_logp=jnp.asarray(b["mu"]), estimator=fn, k=2, n=N, loss=LOSS, **kw)


def test_log_ratios_masks_and_coefficients():
    b = _batch()
    w = _wire(b, correction="behaviour")
    counted = b["comp"] & b["valid"][:, None]
    seq = lambda x, y: np.sum(np.where(counted, x - y, 0.0), axis=1)  # noqa: E731
    np.testing.assert_array_equal(np.asarray(w.counted), counted)
    np.testing.assert_allclose(w.log_ratio, seq(b["logp"], b["old"]), rtol=1e-6)       # log π_θ/π_old
    np.testing.assert_allclose(w.log_w, seq(b["old"], b["mu"]), rtol=1e-6)             # log π_old/μ
    np.testing.assert_allclose(w.to_behaviour, seq(b["logp"], b["mu"]), rtol=1e-6)     # log π_θ/μ
    fn = get_estimator("maxk_offpolicy_exact", baseline="none", clamp_delta=None)
    rows = lambda x: jnp.asarray(x).reshape(P, N)  # noqa: E731
    expected = fn(rows(b["rewards"]), k=2, log_ratio=rows(seq(b["logp"], b["mu"])), mask=rows(b["valid"]))
    np.testing.assert_allclose(w.coef, np.asarray(expected).reshape(-1), rtol=1e-5)
    assert np.isfinite(float(w.loss)) and np.all(np.isfinite(np.asarray(w.coef)))
    w_none = _wire(b, correction="none")                 # δ = log π_θ/π_old without the behaviour correction
    assert not np.allclose(w_none.coef, w.coef)


def test_gradient_flows_only_through_the_loss_logp():
    """−∂loss/∂logp_t = c_b / (n_seq·T) on counted tokens, 0 elsewhere (coefficients are constants)."""
    b = _batch(1)
    b["logp"] = np.nan_to_num(b["logp"], nan=0.0)
    g = jax.grad(lambda lp: _wire(dict(b, logp=lp), correction="behaviour").loss)(jnp.asarray(b["logp"]))
    w = _wire(b, correction="behaviour")
    counted = b["comp"] & b["valid"][:, None]
    want = np.where(counted, -np.asarray(w.coef)[:, None] / (b["valid"].sum() * T), 0.0)
    np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-8)


def test_own_old_makes_the_ppo_log_ratio_exactly_zero():
    b = _batch(2)
    w = _wire(b, own_old=jnp.bool_(True), correction="behaviour")
    assert np.all(np.asarray(w.log_ratio) == 0.0)
    counted = b["comp"] & b["valid"][:, None]
    np.testing.assert_allclose(w.log_w, np.sum(np.where(counted, b["logp"] - b["mu"], 0.0), axis=1), rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(w.log_w), np.asarray(w.to_behaviour))


def test_bad_shapes_are_refused():
    b = _batch()
    with pytest.raises(ValueError, match=r"multiple of n=3, got shape \(5, 4\)"):
        wiring.update_loss(jnp.zeros((5, T)), old_logp=jnp.zeros((5, T)), completion_mask=jnp.ones((5, T), bool),
                           valid=jnp.ones(5, bool), rewards=jnp.zeros(5), answer_ids=jnp.zeros(5, jnp.int32),
                           estimator=get_estimator("rloo"), k=2, n=N, loss=LOSS)
    assert b["logp"].shape == (P * N, T)
