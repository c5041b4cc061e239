"""Tests for maxk_jax.rl.losses: gradients vs independent formulas, a PyTorch GRPO reference, KL,
aggregation, masking, metrics and error paths."""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from maxk_jax.rl import losses
from maxk_jax.rl.losses import LossConfig


# ---------------------------------------------------------------- toy linear-softmax policy
B, T, D, V = 5, 7, 4, 6


def _toy_problem(seed: int):
    """Features x [B,T,D], sampled tokens y [B,T], mask [B,T] (ragged, one empty row), W [D,V]."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(B, T, D))
    y = rng.integers(0, V, size=(B, T))
    lengths = np.array([7, 3, 5, 0, 1])
    mask = np.arange(T)[None, :] < lengths[:, None]
    w = rng.normal(size=(D, V)) * 0.5
    return x, y, mask, w


def _toy_logp(w, x, y):
    """log π_W(y_t | x_t) for the linear softmax policy: [B, T] (jnp, differentiable in w)."""
    logits = jnp.einsum("btd,dv->btv", jnp.asarray(x, jnp.float32), w)
    return losses.token_logprobs(logits, jnp.asarray(y))


def _np_softmax(z):
    z = z - z.max(-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(-1, keepdims=True)


def _np_logp(w, x, y):
    p = _np_softmax(np.einsum("btd,dv->btv", x, w))
    return np.log(np.take_along_axis(p, y[..., None], -1)[..., 0])


def _np_token_grads(w, x, y):
    """Analytic ∇_W log π(y_t|x_t) = x_t ⊗ (onehot(y_t) − softmax(x_t W)): [B, T, D, V]."""
    p = _np_softmax(np.einsum("btd,dv->btv", x, w))
    onehot = np.eye(V)[y]
    return np.einsum("btd,btv->btdv", x, onehot - p)


def _is_loss_grad(cfg, w, x, y, mask, old_logp, coef):
    def loss_fn(w_):
        logp = _toy_logp(w_, x, y)
        return losses.policy_loss(logp, jnp.asarray(old_logp, jnp.float32),
                                  jnp.asarray(coef, jnp.float32), jnp.asarray(mask), cfg)[0]
    return np.asarray(jax.jit(jax.grad(loss_fn))(jnp.asarray(w, jnp.float32)), np.float64)


@pytest.mark.parametrize("aggregation", ["seq_sum_norm", "token", "sequence"])
@pytest.mark.parametrize("offset", ["on_policy", "inside_trust_region"])
def test_is_weighted_gradient_is_sum_c_grad_logpi(aggregation, offset):
    x, y, mask, w = _toy_problem(0)
    rng = np.random.default_rng(1)
    coef = rng.normal(size=B)
    old_logp = _np_logp(w, x, y)
    if offset == "inside_trust_region":
        old_logp = old_logp + rng.uniform(-0.1, 0.1, size=(B, T))  # ρ ∈ (0.90, 1.11)
    cfg = LossConfig(kind="is_weighted", eps_low=0.2, eps_high=0.2, aggregation=aggregation,
                     norm_length=16)
    got = _is_loss_grad(cfg, w, x, y, mask, old_logp, coef)

    g_tok = _np_token_grads(w, x, y) * mask[..., None, None]
    g_seq = g_tok.sum(axis=1)                                  # ∇ log π(y_b): [B, D, V]
    lengths = mask.sum(1)
    n_seq = (lengths > 0).sum()
    if aggregation == "seq_sum_norm":
        expected = -np.einsum("b,bdv->dv", coef, g_seq) / (n_seq * 16)
    elif aggregation == "token":
        expected = -np.einsum("b,bdv->dv", coef, g_seq) / lengths.sum()
    else:
        expected = -np.einsum("b,bdv->dv", coef / np.maximum(lengths, 1), g_seq) / n_seq
    np.testing.assert_allclose(got, expected, rtol=2e-5, atol=1e-6)


def test_is_weighted_equals_clipped_surrogate_gradient_at_ratio_one():
    x, y, mask, w = _toy_problem(2)
    coef = np.random.default_rng(3).normal(size=B)
    old_logp = _np_logp(w, x, y)
    g_is = _is_loss_grad(LossConfig(kind="is_weighted"), w, x, y, mask, old_logp, coef)
    g_clip = _is_loss_grad(LossConfig(kind="clipped"), w, x, y, mask, old_logp, coef)
    np.testing.assert_allclose(g_is, g_clip, rtol=2e-5, atol=1e-6)
    assert np.abs(g_is).max() > 1e-3


def test_is_weighted_gradient_drops_exactly_the_clipped_tokens():
    x, y, mask, w = _toy_problem(4)
    rng = np.random.default_rng(5)
    coef = np.array([1.5, -0.7, 2.0, 0.3, -1.1])
    shift = rng.choice([-0.5, 0.0, 0.5], size=(B, T))        # ρ = e^{∓0.5}: far outside [0.8, 1.2]
    old_logp = _np_logp(w, x, y) + shift
    ratio = np.exp(-shift)
    clipped = ((coef[:, None] > 0) & (ratio > 1.2)) | ((coef[:, None] < 0) & (ratio < 0.8))
    keep = mask & ~clipped
    assert (mask & clipped).any() and (mask & ~clipped & (shift != 0)).any()
    cfg = LossConfig(kind="is_weighted", aggregation="seq_sum_norm", norm_length=T)
    got = _is_loss_grad(cfg, w, x, y, mask, old_logp, coef)
    g_tok = _np_token_grads(w, x, y) * keep[..., None, None]
    expected = -np.einsum("b,btdv->dv", coef, g_tok) / ((mask.sum(1) > 0).sum() * T)
    np.testing.assert_allclose(got, expected, rtol=2e-5, atol=1e-6)


# ---------------------------------------------------------------- PyTorch GRPO reference
def _torch_grpo_loss(logp, old_logp, adv, mask, ref_logp, eps_low, eps_high, beta, aggregation,
                     norm_length):
    """Direct GRPO/DAPO/Dr.GRPO loss in torch (token ratios, k3 KL), written independently."""
    m = mask.to(logp.dtype)
    ratio = torch.exp(logp - old_logp)
    a = adv[:, None]
    per_tok = -torch.min(ratio * a, torch.clamp(ratio, 1 - eps_low, 1 + eps_high) * a)
    d = ref_logp - logp
    per_tok = per_tok + beta * (torch.exp(d) - d - 1)
    lens = m.sum(-1)
    valid = (lens > 0).to(logp.dtype)
    if aggregation == "token":
        return (per_tok * m).sum() / m.sum()
    if aggregation == "sequence":
        seq = (per_tok * m).sum(-1) / lens.clamp(min=1)
        return (seq * valid).sum() / valid.sum()
    return (per_tok * m).sum() / (valid.sum() * norm_length)


@pytest.mark.parametrize("aggregation", ["token", "sequence", "seq_sum_norm"])
def test_clipped_surrogate_matches_torch_grpo(aggregation):
    rng = np.random.default_rng(6)
    bsz, tlen = 6, 9
    logp = rng.uniform(-3.0, -0.05, size=(bsz, tlen)).astype(np.float32)
    old_logp = (logp + rng.normal(scale=0.3, size=(bsz, tlen))).astype(np.float32)
    ref_logp = (logp + rng.normal(scale=0.2, size=(bsz, tlen))).astype(np.float32)
    adv = rng.normal(size=bsz).astype(np.float32)
    mask = np.arange(tlen)[None, :] < np.array([9, 4, 1, 0, 6, 9])[:, None]
    cfg = LossConfig(kind="clipped", eps_low=0.2, eps_high=0.28, kl_beta=0.04,
                     kl_estimator="k3", aggregation=aggregation, norm_length=12)

    def f(lp):
        return losses.policy_loss(lp, jnp.asarray(old_logp), jnp.asarray(adv), jnp.asarray(mask),
                                  cfg, ref_logp=jnp.asarray(ref_logp))[0]
    loss, grad = jax.jit(jax.value_and_grad(f))(jnp.asarray(logp))

    t_logp = torch.tensor(logp, dtype=torch.float64, requires_grad=True)
    t_loss = _torch_grpo_loss(t_logp, torch.tensor(old_logp, dtype=torch.float64),
                              torch.tensor(adv, dtype=torch.float64), torch.tensor(mask),
                              torch.tensor(ref_logp, dtype=torch.float64), 0.2, 0.28, 0.04,
                              aggregation, 12)
    t_loss.backward()
    ratio = np.exp(logp - old_logp)
    assert ((ratio > 1.28) | (ratio < 0.8))[mask].any()   # the clip branch is exercised
    np.testing.assert_allclose(float(loss), t_loss.item(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(grad), t_logp.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_clipped_token_with_overflowing_ratio_has_zero_gradient():
    """ρ = exp(100) overflows float32; the min picks the clipped branch, so grad is 0, not NaN."""
    old = jnp.array([[-100.0, -0.5]])
    for kind in losses.KINDS:
        cfg = LossConfig(kind=kind, aggregation="token")

        def f(lp, cfg=cfg):
            return losses.policy_loss(lp, old, jnp.array([2.0]), jnp.ones((1, 2), bool), cfg)[0]

        loss, grad = jax.jit(jax.value_and_grad(f))(jnp.array([[0.0, -0.5]]))
        assert np.isfinite(float(loss))
        np.testing.assert_allclose(np.asarray(grad), [[0.0, -2.0 / 2]], rtol=1e-6)


# ---------------------------------------------------------------- KL estimators
def test_kl_estimators_match_direct_formulas():
    rng = np.random.default_rng(7)
    logp = rng.uniform(-4, -0.1, size=(3, 5)).astype(np.float32)
    ref = rng.uniform(-4, -0.1, size=(3, 5)).astype(np.float32)
    mask = np.ones((3, 5), bool)
    mask[1, 3:] = False
    d = (ref - logp).astype(np.float64)
    direct = {"k1": -d, "k2": 0.5 * d ** 2, "k3": np.exp(d) - d - 1}
    for name, want in direct.items():
        got = np.asarray(losses.kl_penalty(jnp.asarray(logp), jnp.asarray(ref),
                                           jnp.asarray(mask), name))
        np.testing.assert_allclose(got, np.where(mask, want, 0.0), rtol=1e-5, atol=1e-6)


def test_k1_and_k3_are_exact_kl_in_expectation():
    """Σ_v p_v k(v) = KL(p‖q) for k1 and k3 (the estimators are unbiased)."""
    rng = np.random.default_rng(8)
    p = _np_softmax(rng.normal(size=(1, V)))
    q = _np_softmax(rng.normal(size=(1, V)))
    kl = float(np.sum(p * (np.log(p) - np.log(q))))
    logp = jnp.asarray(np.log(p), jnp.float32)
    ref = jnp.asarray(np.log(q), jnp.float32)
    for name in ("k1", "k3"):
        k = np.asarray(losses.kl_penalty(logp, ref, jnp.ones((1, V), bool), name))
        np.testing.assert_allclose(float(np.sum(p * k)), kl, rtol=1e-5)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(-30, 30, allow_nan=False, width=32), min_size=2, max_size=2))
def test_k3_is_nonnegative_and_zero_iff_equal(pair):
    logp, ref = (jnp.full((1, 1), v, jnp.float32) for v in pair)
    k3 = float(losses.kl_penalty(logp, ref, jnp.ones((1, 1), bool), "k3")[0, 0])
    assert k3 >= 0.0
    if pair[0] == pair[1]:
        assert k3 == 0.0


# ---------------------------------------------------------------- aggregation and masks
def test_aggregation_modes_by_hand():
    values = jnp.array([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0], [9.0, 9.0, 9.0]])
    mask = jnp.array([[1, 1, 1], [1, 0, 0], [0, 0, 0]], bool)
    assert float(losses.aggregate(values, mask, "token")) == pytest.approx((1 + 2 + 3 + 4) / 4)
    assert float(losses.aggregate(values, mask, "sequence")) == pytest.approx((2.0 + 4.0) / 2)
    assert float(losses.aggregate(values, mask, "seq_sum_norm", 5)) == pytest.approx(10 / (2 * 5))
    empty = jnp.zeros_like(mask)
    for mode in losses.AGGREGATIONS:
        assert float(losses.aggregate(values, empty, mode, 5)) == 0.0


def test_padding_tokens_contribute_nothing():
    """Garbage (NaN/inf) at masked positions changes neither loss nor gradients."""
    rng = np.random.default_rng(9)
    bsz, tlen = 4, 6
    lengths = np.array([6, 2, 4, 3])
    mask = np.arange(tlen)[None, :] < lengths[:, None]
    logp = rng.uniform(-2, -0.1, size=(bsz, tlen)).astype(np.float32)
    old = (logp + rng.normal(scale=0.3, size=logp.shape)).astype(np.float32)
    ref = (logp + rng.normal(scale=0.3, size=logp.shape)).astype(np.float32)
    logits = rng.normal(size=(bsz, tlen, V)).astype(np.float32)
    adv = rng.normal(size=bsz).astype(np.float32)
    junk = np.where(mask, 0.0, np.nan).astype(np.float32)
    junk[0, 0] = 0.0
    junk_inf = np.where(mask, 0.0, -np.inf).astype(np.float32)
    for kind in losses.KINDS:
        cfg = LossConfig(kind=kind, kl_beta=0.1, entropy_coef=0.01)

        def f(lp, lg, old_, ref_):
            return losses.policy_loss(lp, old_, jnp.asarray(adv), jnp.asarray(mask), cfg,
                                      ref_logp=ref_, logits=lg)

        args_clean = tuple(map(jnp.asarray, (logp, logits, old, ref)))
        args_junk = tuple(map(jnp.asarray, (logp + junk_inf, logits + junk[..., None],
                                            old + junk, ref + junk_inf)))
        vg = jax.jit(jax.value_and_grad(f, argnums=(0, 1), has_aux=True))
        (l1, m1), g1 = vg(*args_clean)
        (l2, m2), g2 = vg(*args_junk)
        assert float(l1) == pytest.approx(float(l2), rel=1e-6)
        for a, b in zip(g1, g2):
            assert np.all(np.isfinite(np.asarray(b)))
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7)
        assert np.all(np.asarray(g2[0])[~mask] == 0.0)
        assert np.all(np.asarray(g2[1])[~mask] == 0.0)
        for key in m1:
            np.testing.assert_allclose(float(m1[key]), float(m2[key]), rtol=1e-6)

        # and the loss equals the one computed on the unpadded row alone
        one = LossConfig(kind=kind)
        loss_of = jax.jit(losses.policy_loss, static_argnames=("config",))
        full = loss_of(jnp.asarray(logp[1:2]), jnp.asarray(old[1:2]),
                       jnp.asarray(adv[1:2]), jnp.asarray(mask[1:2]), one)[0]
        short = loss_of(jnp.asarray(logp[1:2, :2]), jnp.asarray(old[1:2, :2]),
                        jnp.asarray(adv[1:2]), jnp.ones((1, 2), bool), one)[0]
        assert float(full) == pytest.approx(float(short), rel=1e-6)


def test_sequence_log_ratio_sums_completion_tokens():
    logp = jnp.array([[-1.0, -2.0, jnp.nan], [-0.5, -0.5, -0.5]])
    old = jnp.array([[-1.5, -1.0, 0.0], [-0.5, -1.5, -0.25]])
    mask = jnp.array([[1, 1, 0], [1, 1, 1]])
    got = np.asarray(losses.sequence_log_ratio(logp, old, mask))
    np.testing.assert_allclose(got, [0.5 - 1.0, 0.0 + 1.0 - 0.25])


# ---------------------------------------------------------------- metrics
_jit_policy_loss = jax.jit(losses.policy_loss, static_argnames=("config",))

def test_metrics_clip_fraction_and_ratio_stats():
    logp = jnp.zeros((2, 4))
    log_rho = np.log(np.array([[1.5, 1.0, 0.5, 1.1], [1.5, 0.5, 1.0, 7.0]], np.float32))
    old = jnp.asarray(-log_rho)
    mask = jnp.array([[1, 1, 1, 1], [1, 1, 1, 0]], bool)
    adv = jnp.array([1.0, -1.0])
    _, m = _jit_policy_loss(logp, old, adv, mask, config=LossConfig(eps_low=0.2, eps_high=0.3))
    # row 0 (A>0): only ρ=1.5 > 1.3 is clipped; row 1 (A<0): only ρ=0.5 < 0.8 (7.0 is padding)
    assert float(m["clip_fraction"]) == pytest.approx(2 / 7)
    assert float(m["ratio_out_of_range_fraction"]) == pytest.approx(4 / 7)
    assert float(m["ratio_max"]) == pytest.approx(1.5)
    assert float(m["ratio_min"]) == pytest.approx(0.5)
    counted = np.array([1.5, 1.0, 0.5, 1.1, 1.5, 0.5, 1.0])
    assert float(m["ratio_mean"]) == pytest.approx(counted.mean(), rel=1e-6)
    assert float(m["approx_kl_old"]) == pytest.approx(np.mean(counted - 1 - np.log(counted)),
                                                      rel=1e-5)
    assert float(m["num_tokens"]) == 7
    assert "kl_ref" not in m and "entropy" not in m


def test_ratio_metrics_are_the_statistics_policy_loss_reports():
    rng = np.random.default_rng(3)
    logp, old = (jnp.asarray(rng.normal(size=(3, 5)) * 0.3, jnp.float32) for _ in range(2))
    mask = jnp.asarray(np.arange(5)[None] < np.array([[5], [2], [4]]))
    adv = jnp.array([1.0, -0.5, 2.0])
    config = LossConfig(eps_low=0.1, eps_high=0.2)
    stats = losses.ratio_metrics(logp, old, adv, mask, config)
    _, m = losses.policy_loss(logp, old, adv, mask, config)
    assert set(stats) == {"clip_fraction", "ratio_out_of_range_fraction", "ratio_mean", "ratio_min", "ratio_max",
                          "approx_kl_old", "num_tokens"}
    for key, value in stats.items():
        np.testing.assert_allclose(float(value), float(m[key]), rtol=1e-6, err_msg=key)
    rho = np.exp(np.asarray(logp - old))[np.asarray(mask)]
    assert float(stats["num_tokens"]) == 11 and float(stats["ratio_max"]) == pytest.approx(rho.max(), rel=1e-6)
    assert float(stats["ratio_out_of_range_fraction"]) == pytest.approx(np.mean((rho > 1.2) | (rho < 0.9)))


def test_loss_terms_add_up_and_entropy_matches_numpy():
    rng = np.random.default_rng(10)
    logits = rng.normal(size=(3, 4, V)).astype(np.float32)
    tokens = rng.integers(0, V, size=(3, 4))
    logp = losses.token_logprobs(jnp.asarray(logits), jnp.asarray(tokens))
    p = _np_softmax(logits.astype(np.float64))
    np.testing.assert_allclose(np.asarray(logp),
                               np.log(np.take_along_axis(p, tokens[..., None], -1)[..., 0]),
                               rtol=1e-5)
    h = -(p * np.log(p)).sum(-1)
    np.testing.assert_allclose(np.asarray(losses.token_entropy(jnp.asarray(logits))), h,
                               rtol=1e-5)
    h_bf16 = losses.token_entropy(jnp.zeros((1, 1, V), jnp.bfloat16))
    assert h_bf16.dtype == jnp.float32 and float(h_bf16[0, 0]) == pytest.approx(np.log(V))

    mask = jnp.array([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]], bool)
    ref = logp + 0.1
    cfg = LossConfig(kl_beta=0.5, kl_estimator="k2", entropy_coef=0.2, aggregation="token")
    loss, m = _jit_policy_loss(logp, logp - 0.05, jnp.array([1.0, -2.0, 0.5]), mask, config=cfg,
                               ref_logp=ref, logits=jnp.asarray(logits))
    assert float(loss) == pytest.approx(
        float(m["loss_policy"] + m["loss_kl"] + m["loss_entropy"]), rel=1e-6)
    assert float(m["kl_ref"]) == pytest.approx(0.5 * 0.01, rel=1e-4)
    assert float(m["loss_kl"]) == pytest.approx(0.5 * 0.5 * 0.01, rel=1e-4)
    h_mean = h[np.asarray(mask)].mean()
    assert float(m["entropy"]) == pytest.approx(h_mean, rel=1e-5)
    assert float(m["loss_entropy"]) == pytest.approx(-0.2 * h_mean, rel=1e-5)


def test_policy_loss_jits_with_static_config():
    rng = np.random.default_rng(11)
    logp = jnp.asarray(rng.uniform(-2, -0.1, size=(3, 5)), jnp.float32)
    old = logp + 0.05
    adv = jnp.array([0.5, -1.0, 2.0])
    mask = jnp.ones((3, 5), bool)
    cfg = LossConfig(kind="is_weighted", kl_beta=0.01)
    got = _jit_policy_loss(logp, old, adv, mask, config=cfg, ref_logp=old)
    want = losses.policy_loss(logp, old, adv, mask, cfg, ref_logp=old)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6), got, want)


# ---------------------------------------------------------------- error paths
@pytest.mark.parametrize("changes, needle", [
    ({"kind": "ppo"}, "'ppo'"),
    ({"kl_estimator": "k4"}, "'k4'"),
    ({"aggregation": "mean"}, "'mean'"),
    ({"eps_low": 0.0}, "eps_low=0.0"),
    ({"eps_low": -0.1}, "eps_low=-0.1"),
    ({"eps_low": 1.0}, "eps_low=1.0"),
    ({"eps_high": 0.0}, "eps_high=0.0"),
    ({"eps_high": float("nan")}, "eps_high=nan"),
    ({"kl_beta": -0.01}, "kl_beta=-0.01"),
    ({"entropy_coef": float("inf")}, "entropy_coef=inf"),
    ({"aggregation": "seq_sum_norm"}, "norm_length=None"),
    ({"norm_length": 0}, "norm_length=0"),
])
def test_bad_config_raises_naming_value(changes, needle):
    with pytest.raises(ValueError, match=needle.replace("(", r"\(")):
        LossConfig(**changes)


def test_config_is_frozen_and_hashable():
    cfg = LossConfig()
    assert hash(cfg) == hash(LossConfig())
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.kind = "is_weighted"  # type: ignore[misc]


def test_bad_inputs_raise():
    logp = jnp.zeros((2, 3))
    mask = jnp.ones((2, 3), bool)
    adv = jnp.zeros(2)
    with pytest.raises(ValueError, match=r"old_logp has shape \(2, 4\)"):
        losses.policy_loss(logp, jnp.zeros((2, 4)), adv, mask, LossConfig())
    with pytest.raises(ValueError, match=r"advantages has shape \(3,\)"):
        losses.policy_loss(logp, logp, jnp.zeros(3), mask, LossConfig())
    with pytest.raises(ValueError, match="kl_beta=0.01 > 0 needs ref_logp"):
        losses.policy_loss(logp, logp, adv, mask, LossConfig(kl_beta=0.01))
    with pytest.raises(ValueError, match="entropy_coef=0.1 > 0 needs logits"):
        losses.policy_loss(logp, logp, adv, mask, LossConfig(entropy_coef=0.1))
    with pytest.raises(ValueError, match="logits has shape"):
        losses.policy_loss(logp, logp, adv, mask, LossConfig(), logits=jnp.zeros((2, 4, V)))
    with pytest.raises(ValueError, match="'k5'"):
        losses.kl_penalty(logp, logp, mask, "k5")
    with pytest.raises(ValueError, match="'median'"):
        losses.aggregate(logp, mask, "median")
    with pytest.raises(ValueError, match="eps_low=1.5"):
        losses.clipped_surrogate(logp, logp, adv, mask, 1.5, 0.2)
    with pytest.raises(ValueError, match="mask must be"):
        losses.sequence_log_ratio(jnp.zeros(3), jnp.zeros(3), jnp.ones(3))
    with pytest.raises(ValueError, match="config must be a LossConfig"):
        losses.policy_loss(logp, logp, adv, mask, {"kind": "clipped"})  # type: ignore[arg-type]


def test_sequence_level_ratio_is_eq4_and_kl_to_old():
    """ratio_level="sequence": −min(ρ_i A_i, clip(ρ_i) A_i) with ρ_i = exp(Σ_t log ρ_t) per sequence
    (value and gradient against a brute-force definition); kl_target="old": the KL term uses old_logp
    and needs no reference log-probs."""
    rng = np.random.default_rng(3)
    b, t = 4, 5
    logp = jnp.asarray(rng.normal(-1.0, 0.3, (b, t)), jnp.float32)
    old = logp + jnp.asarray(rng.normal(0.0, 0.05, (b, t)), jnp.float32)
    mask = jnp.asarray(np.arange(t)[None, :] < np.array([5, 3, 4, 1])[:, None])
    adv = jnp.asarray([1.0, -0.5, 2.0, -1.0], jnp.float32)
    cfg = LossConfig(kind="clipped", ratio_level="sequence", eps_low=0.05, eps_high=0.05)

    def brute(lp):
        per_seq = []
        for i in range(b):
            n = int(mask[i].sum())
            rho = jnp.exp(jnp.sum(lp[i, :n] - old[i, :n]))
            per_seq.append(-jnp.minimum(rho * adv[i], jnp.clip(rho, 0.95, 1.05) * adv[i]))
        return jnp.mean(jnp.stack(per_seq))          # "sequence" aggregation: mean over sequences

    ours = lambda lp: losses.policy_loss(lp, old, adv, mask, cfg)[0]  # noqa: E731
    np.testing.assert_allclose(ours(logp), brute(logp), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(jax.grad(ours)(logp), jax.grad(brute)(logp), rtol=1e-4, atol=1e-6)
    token = losses.policy_loss(logp, old, adv, mask, LossConfig(kind="clipped", eps_low=0.05, eps_high=0.05))[0]
    assert not np.isclose(float(token), float(ours(logp)))     # the two levels differ here
    # KL to π_old: no ref_logp needed; the term is β · agg(k3(logp, old_logp))
    kl_old = LossConfig(kl_beta=0.5, kl_target="old")
    assert not kl_old.needs_reference and LossConfig(kl_beta=0.5).needs_reference
    loss, metrics = losses.policy_loss(logp, old, adv, mask, kl_old)
    plain = losses.policy_loss(logp, old, adv, mask, LossConfig())[0]
    np.testing.assert_allclose(loss - plain, 0.5 * metrics["kl_old"], rtol=1e-3)   # float32 difference of sums
    with pytest.raises(ValueError, match="needs ref_logp"):
        losses.policy_loss(logp, old, adv, mask, LossConfig(kl_beta=0.5))
    with pytest.raises(ValueError, match="ratio_level='seq' is not one of"):
        LossConfig(ratio_level="seq")
    with pytest.raises(ValueError, match="kl_target='ref' is not one of"):
        LossConfig(kl_target="ref")
