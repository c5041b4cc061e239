"""maxk_jax/estimators/_registry.py: every registered estimator vs a brute-force / direct reference."""
from __future__ import annotations

import functools
import inspect

from absl.testing import parameterized
import chex
from hypothesis import given, settings as hyp_settings, strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from maxk_jax import estimators as E

import estimator_reference as ref  # noqa: E402  (tests/estimators/conftest.py puts it on sys.path)

WIDTH, BATCH = 10, 24
TOL = dict(atol=5e-6, rtol=1e-5)
REQUIRED = ("grpo", "rloo", "bon_max_mean", "bon_max_second", "bon_loo1", "bon_mean", "maxk",
            "maxk_offpolicy", "maxk_offpolicy_exact", "tang_loo", "tang_loo_biased",
            "tang_leave_p_out", "tang_softmax", "majority_vote")
ANSWER_REWARD = np.array([0.0, 1.0, 0.25, 0.5])


def _data(seed=0):
    rng = np.random.default_rng(seed)
    _, mask = ref.random_rows(rng, BATCH, WIDTH, [0.0])
    mask[0] = True
    ans = rng.integers(0, 4, size=(BATCH, WIDTH))
    r = np.where(mask, ANSWER_REWARD[ans], np.nan)          # ties; reward is a function of the answer
    lr = np.where(mask, rng.normal(size=r.shape) * 0.3, np.nan)
    return r, lr, mask, ans


def _maxk_ref(mode, baseline):
    def f(x, l, a, k):
        raw = ref.transform(x, k, l, mode)
        if baseline == "none":
            return raw
        if baseline == "mean":
            return raw - raw.mean()
        if baseline == "zscore":
            return ref.zscore(raw)
        if k == 1:
            w = {"on": np.ones_like(x), "first": 1 + np.expm1(l), "exact": np.exp(l)}[mode]
            return w * ref.rloo(x) / len(x)
        return ref.loo1(x, k, l, mode)
    return f


def _clamped(reference, c):
    """Reference with Listing 3's clamp: delta = rho - 1 clipped to [-c, c] before the weights."""
    def f(x, l, a, k):
        delta = np.clip(np.expm1(l), -c, c)
        return reference(x, np.log1p(delta), a, k)
    return f


# name, options, reference(row rewards, row log_ratio, row answers, k), ks
CASES = [
    ("grpo", {}, lambda x, l, a, k: ref.zscore(x), (1, 4)),
    ("grpo", dict(ddof=1, eps=0.0), lambda x, l, a, k: ref.zscore(x, ddof=1, eps=0.0) if np.ptp(x) > 0
     else np.zeros_like(x), (2,)),
    ("rloo", {}, lambda x, l, a, k: ref.rloo(x), (1, 3)),
    ("bon_max_mean", {}, lambda x, l, a, k: ref.bon_max(x, False), (2,)),
    ("bon_max_second", {}, lambda x, l, a, k: ref.bon_max(x, True), (2,)),
    ("bon_loo1", {}, lambda x, l, a, k: ref.loo1(x, k), (2, 5)),
    ("tang_loo", {}, lambda x, l, a, k: ref.loo1(x, k), (3,)),
    ("bon_mean", {}, lambda x, l, a, k: ref.zscore(ref.transform(x, k)), (1, 3)),
    ("tang_loo_biased", {}, lambda x, l, a, k: ref.tang_biased(x, k), (2, 4)),
    ("tang_leave_p_out", {}, lambda x, l, a, k: ref.leave_p_out(x, k, 1), (3,)),
    ("tang_leave_p_out", dict(p=2), lambda x, l, a, k: ref.leave_p_out(x, k, 2), (3, 4)),
    ("tang_softmax", {}, lambda x, l, a, k: ref.subset_loo(x, k, lambda ids: ref.softmax_value(x[ids], 1.0)), (3,)),
    ("tang_softmax", dict(beta=4.0, biased=True),
     lambda x, l, a, k: ref.subset_loo(x, k, lambda ids: ref.softmax_value(x[ids], 4.0), True), (3,)),
    ("majority_vote", {}, lambda x, l, a, k: ref.subset_loo(x, k, lambda ids: ref.majority_value(x[ids], a[ids])), (3,)),
] + [(name, dict(baseline=b), _maxk_ref(mode, b), (1, 3)) for b in E.BASELINES
       for name, mode in (("maxk", "on"),)
] + [(name, dict(baseline=b, clamp_delta=None), _maxk_ref(mode, b), (1, 3)) for b in E.BASELINES
     for name, mode in (("maxk_offpolicy", "first"), ("maxk_offpolicy_exact", "exact"))
] + [(name, dict(baseline=b, clamp_delta=c), _clamped(_maxk_ref(mode, b), c), (1, 3))
     for b in ("zscore", "loo1") for c in (0.2, 1.5)
     for name, mode in (("maxk_offpolicy", "first"), ("maxk_offpolicy_exact", "exact"))]


@pytest.mark.parametrize("name, options, reference, ks", CASES,
                         ids=[f"{c[0]}-{'-'.join(f'{k}={v}' for k, v in c[1].items())}" for c in CASES])
def test_registry_entry_matches_reference(name, options, reference, ks):
    r, lr, mask, ans = _data()
    fn = E.get_estimator(name, **options)
    for k in ks:
        out = np.asarray(fn(r, k=k, log_ratio=lr, mask=mask, answer_ids=ans), np.float64)
        for i in range(BATCH):
            m = mask[i]
            if m.sum() < k:
                np.testing.assert_array_equal(out[i], 0.0, err_msg=f"{name} row {i} below k")
                continue
            np.testing.assert_allclose(out[i, m], reference(r[i, m], lr[i, m], ans[i, m], k),
                                       err_msg=f"{name} {options} row {i} k={k}", **TOL)
            np.testing.assert_array_equal(out[i, ~m], 0.0)


def test_required_names_and_uniform_signature():
    assert set(REQUIRED) <= set(E.list_estimators())
    for name in E.list_estimators():
        params = inspect.signature(E.get_estimator(name)).parameters
        assert list(params) == ["rewards", "k", "log_ratio", "mask", "answer_ids"], name
        assert params["rewards"].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
        assert all(params[p].kind is inspect.Parameter.KEYWORD_ONLY for p in list(params)[1:])
        opts = E.estimator_options(name)
        opts["not_an_option"] = 1                                   # a copy: registry unchanged
        assert "not_an_option" not in E.estimator_options(name)


def test_defaults_documented_choices():
    r, lr, mask, ans = _data(1)
    np.testing.assert_allclose(E.get_estimator("maxk", baseline="loo1")(r, k=3, mask=mask),
                               E.loo1_advantage(r, 3, mask=mask))
    np.testing.assert_allclose(E.get_estimator("maxk")(r, k=3, mask=mask),      # paper default: z-score
                               E.get_estimator("bon_mean")(r, k=3, mask=mask), atol=1e-6)
    np.testing.assert_allclose(E.get_estimator("maxk_offpolicy", baseline="none", clamp_delta=None)(r, k=3, log_ratio=lr, mask=mask),
                               E.maxk_reward_transform_offpolicy(r, lr, 3, mask=mask))
    # estimators that do not need log_ratio ignore it
    np.testing.assert_array_equal(E.get_estimator("grpo")(r, k=2, mask=mask, log_ratio=lr),
                                  E.get_estimator("grpo")(r, k=2, mask=mask))


def test_all_equal_rewards_give_zero_advantages():
    r = np.full((BATCH, WIDTH), 0.7)
    lr = np.random.default_rng(0).normal(size=r.shape) * 0.2
    ans = np.zeros((BATCH, WIDTH), np.int32)
    biased_raw = {("maxk", "none"), ("maxk_offpolicy", "none"), ("maxk_offpolicy_exact", "none")}
    for name in E.list_estimators():
        fn = E.get_estimator(name)
        if E.estimator_info(name).needs_log_ratio:
            # on-policy (log_ratio = 0) equal rewards carry no signal ...
            np.testing.assert_allclose(fn(r, k=3, log_ratio=np.zeros_like(lr)), 0.0, atol=1e-6, err_msg=name)
            # ... but off-policy the z-scored r~' of equal rewards is (1 + sum delta)-noise of unit
            # scale: the paper's "BoN mean" on r~' does this at PPO iterations >= 1 (docs/usage/estimators.md)
            z = np.asarray(fn(r, k=3, log_ratio=lr))
            np.testing.assert_allclose(z.std(axis=-1), 1.0, rtol=1e-3, err_msg=name)
            fn = E.get_estimator(name, baseline="loo1")
        np.testing.assert_array_equal(fn(r, k=3, log_ratio=lr, answer_ids=ans), 0.0, err_msg=name)
    for name, b in sorted(biased_raw):                      # raw transforms are not zero
        assert np.all(np.asarray(E.get_estimator(name, baseline=b)(r, k=3, log_ratio=lr)) > 0)


def test_rows_below_k_get_zeros_everywhere():
    _, lr, _, ans = _data(2)
    r = ANSWER_REWARD[ans]
    mask = np.zeros((BATCH, WIDTH), bool)
    mask[:, :2] = True
    for name in E.list_estimators():
        out = E.get_estimator(name)(r, k=3, log_ratio=np.nan_to_num(lr), mask=mask, answer_ids=ans)
        np.testing.assert_array_equal(out, 0.0, err_msg=name)


def test_registry_functions_are_jittable():
    r, lr, mask, ans = _data(3)
    r, lr = np.nan_to_num(r), np.nan_to_num(lr)
    for name in ("maxk_offpolicy", "bon_max_second"):
        fn = E.get_estimator(name)
        jitted = jax.jit(functools.partial(fn, k=3))
        np.testing.assert_allclose(jitted(r, log_ratio=lr, mask=mask), fn(r, k=3, log_ratio=lr, mask=mask),
                                   atol=1e-6)


@pytest.mark.parametrize("call, match", [
    (lambda: E.get_estimator("ppo"), "unknown estimator 'ppo'; valid names: bon_loo1, bon_max_mean"),
    (lambda: E.get_estimator("maxk", beta=1.0), "unknown option\\(s\\) \\['beta'\\]; valid options: baseline"),
    (lambda: E.get_estimator("maxk", baseline="median"), "baseline must be one of"),
    (lambda: E.get_estimator("maxk_offpolicy", clamp_delta=0.0), "clamp_delta must be None"),
    (lambda: E.get_estimator("maxk_offpolicy_exact", clamp_delta=float("inf")), "clamp_delta must be None"),
    (lambda: E.get_estimator("maxk", clamp_delta=0.2), "unknown option"),
    (lambda: E.get_estimator("maxk_offpolicy", clamp_delta=None)(
        np.array([0.0, 1.0, 0.5]), k=2, log_ratio=np.array([95.0, 0.0, 0.0])),
     "overflow \\(largest valid log_ratio 95"),
    (lambda: E.get_estimator("maxk_offpolicy_exact", clamp_delta=None, baseline="loo1")(
        np.array([0.0, 1.0, 0.5]), k=2, log_ratio=np.array([0.0, 120.0, 0.0])),
     "overflow \\(largest valid log_ratio 120"),
    (lambda: E.get_estimator("grpo", eps=-1.0), "eps must be a number >= 0"),
    (lambda: E.get_estimator("bon_mean", ddof=2), "ddof must be 0 or 1"),
    (lambda: E.get_estimator("maxk_offpolicy")(np.ones(4), k=2), "maxk_offpolicy needs log_ratio"),
    (lambda: E.get_estimator("maxk_offpolicy_exact")(np.ones(4), k=2), "maxk_offpolicy_exact needs log_ratio"),
    (lambda: E.get_estimator("majority_vote")(np.ones(4), k=2), "majority_vote needs answer_ids"),
    (lambda: E.get_estimator("grpo")(np.ones(4), k=5), "k=5 exceeds"),
    (lambda: E.get_estimator("bon_loo1")(np.ones(4), k=1), "k must be >= 2"),
    (lambda: E.get_estimator("rloo")(np.array([1.0, np.nan]), k=1), "non-finite"),
    (lambda: E.get_estimator("tang_leave_p_out", p=3)(np.ones(4), k=3), "p=3 exceeds"),
])
def test_error_paths(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def _zscore_rows(x):
    return np.stack([ref.zscore(row) for row in np.asarray(x, np.float64)])


def test_offpolicy_defaults_are_the_paper():
    """Issue acceptance: the default maxk_offpolicy is the per-row z-score of its transform (eq. 5
    applied to r~'), after Listing 3's delta clamp; likewise the exact form with rho clamped."""
    rng = np.random.default_rng(7)
    r = rng.choice([0.0, 0.25, 0.5, 1.0], size=(16, 8))
    lr = rng.normal(size=r.shape) * 0.8                     # |delta| often above the clamp
    c = E.DEFAULT_CLAMP_DELTA
    delta = np.clip(np.expm1(lr), -c, c)
    for name, transform in (("maxk_offpolicy", E.maxk_reward_transform_offpolicy),
                            ("maxk_offpolicy_exact", E.maxk_reward_transform_offpolicy_exact)):
        for k in (1, 3, 6):
            unclamped = E.get_estimator(name, clamp_delta=None)(r, k=k, log_ratio=lr)
            np.testing.assert_allclose(unclamped, _zscore_rows(transform(r, lr, k)), atol=2e-5,
                                       err_msg=f"{name} k={k}")
            for cd, d in ((None, delta), (0.3, np.clip(np.expm1(lr), -0.3, 0.3))):
                kw = {} if cd is None else dict(clamp_delta=cd)
                out = E.get_estimator(name, **kw)(r, k=k, log_ratio=lr)
                np.testing.assert_allclose(out, _zscore_rows(transform(r, np.log1p(d), k)), atol=2e-5,
                                           err_msg=f"{name} clamp={cd} k={k}")
    assert E.estimator_options("maxk_offpolicy")["baseline"] == "zscore"
    assert E.estimator_options("maxk")["baseline"] == "zscore"


def test_clamp_bounds_delta_and_rho():
    lr = np.array([-5.0, -0.1, 0.0, 0.05, 3.0, 200.0])
    d = np.expm1(np.asarray(E.clamp_log_ratio(lr, 0.2), np.float64))
    np.testing.assert_allclose(d, [-0.2, np.expm1(-0.1), 0.0, np.expm1(0.05), 0.2, 0.2], rtol=1e-5)
    rho = np.exp(np.asarray(E.clamp_log_ratio(lr, 2.0), np.float64))   # c >= 1: rho >= 0 unclamped below
    np.testing.assert_allclose(rho, [np.exp(-5.0), np.exp(-0.1), 1.0, np.exp(0.05), 3.0, 3.0], rtol=1e-5)
    np.testing.assert_array_equal(E.clamp_log_ratio(lr, None), lr)
    # a huge but finite log-ratio is harmless with the default clamp
    out = E.get_estimator("maxk_offpolicy")(np.array([[0.0, 1.0, 0.5, 0.2]]), k=2,
                                            log_ratio=np.array([[500.0, 0.0, -500.0, 1.0]]))
    assert np.all(np.isfinite(out))


def test_estimator_info_metadata():
    for name in E.list_estimators():
        info = E.estimator_info(name)
        assert info.name == name and info.loss_form in ("clipped", "is_weighted")
        r = np.array([[0.0, 1.0, 0.5, 0.25]])
        kw = dict(log_ratio=np.zeros_like(r), answer_ids=np.array([[0, 1, 2, 3]]))
        E.get_estimator(name)(r, k=max(info.min_k, 1), **kw)            # min_k is accepted
        if info.min_k > 1:
            with pytest.raises(ValueError):
                E.get_estimator(name)(r, k=info.min_k - 1, **kw)
        if info.needs_log_ratio:
            with pytest.raises(ValueError, match="needs log_ratio"):
                E.get_estimator(name)(r, k=2, answer_ids=kw["answer_ids"])
        if info.needs_answer_ids:
            with pytest.raises(ValueError, match="needs answer_ids"):
                E.get_estimator(name)(r, k=2, log_ratio=kw["log_ratio"])
    assert E.estimator_info("maxk_offpolicy").needs_log_ratio
    assert not E.estimator_info("grpo").needs_log_ratio


def test_table2_isolation_options():
    """zero_flat_rows zeroes the off-policy coefficients of rows whose valid rewards are all equal
    (only delta noise there), zero_flat_transform those of rows whose on-policy r~ is flat; bon_max_mean's divide_std divides the top samples' centred reward by
    the row's reward std (ddof 0)."""
    r = np.array([[0.5, 0.5, 0.5, 0.5], [0.0, 0.25, 1.0, 0.25]], np.float32)
    lr = np.array([[0.3, -0.2, 0.1, 0.0], [0.1, 0.0, -0.1, 0.2]], np.float32)
    plain = np.asarray(E.get_estimator("maxk_offpolicy")(r, k=2, log_ratio=lr))
    flat = np.asarray(E.get_estimator("maxk_offpolicy", zero_flat_rows=True)(r, k=2, log_ratio=lr))
    assert float(np.abs(plain[0]).max()) > 0.1          # z-scored delta noise on the flat row
    np.testing.assert_array_equal(flat[0], 0.0)
    np.testing.assert_allclose(flat[1], plain[1], rtol=1e-6)
    # zero_flat_transform: also rows whose rewards differ but whose r~ is flat (n = 8, k = 4, five maxima)
    r8 = np.array([[1, 1, 1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 0, 0, 0, 0], [0.5] * 8, [0] * 8], np.float32)
    lr8 = np.random.default_rng(0).normal(0, 0.05, r8.shape).astype(np.float32)
    plain = np.asarray(E.get_estimator("maxk_offpolicy")(r8, k=4, log_ratio=lr8))
    rows = np.asarray(E.get_estimator("maxk_offpolicy", zero_flat_rows=True)(r8, k=4, log_ratio=lr8))
    flat = np.asarray(E.get_estimator("maxk_offpolicy", zero_flat_transform=True)(r8, k=4, log_ratio=lr8))
    onpolicy = np.asarray(E.get_estimator("bon_mean")(r8, k=4))
    np.testing.assert_array_equal(onpolicy[0], 0.0)             # r~ flat: nothing to learn on-policy ...
    assert float(np.std(plain[0])) > 0.9                          # ... unit-variance delta noise off-policy
    np.testing.assert_allclose(rows[0], plain[0], rtol=1e-6)      # not a row of equal rewards
    np.testing.assert_array_equal(flat[[0, 2, 3]], 0.0)
    np.testing.assert_allclose(flat[1], plain[1], rtol=1e-6)      # four maxima: r~ not flat, kept
    exact = np.asarray(E.get_estimator("maxk_offpolicy_exact", zero_flat_transform=True)(r8, k=4, log_ratio=lr8))
    np.testing.assert_array_equal(exact[0], 0.0)
    with pytest.raises(ValueError, match="zero_flat_transform must be a bool"):
        E.get_estimator("maxk_offpolicy", zero_flat_transform=1)
    base = np.asarray(E.get_estimator("bon_max_mean")(r, k=2))
    scaled = np.asarray(E.get_estimator("bon_max_mean", divide_std=True)(r, k=2))
    std = float(np.std(r[1]))
    np.testing.assert_allclose(scaled[1], base[1] / (std + 1e-6), rtol=1e-5)
    np.testing.assert_array_equal(scaled[0], 0.0)
    with pytest.raises(ValueError, match="divide_std must be a bool"):
        E.get_estimator("bon_max_mean", divide_std=1)


# one setting per estimator family (each with_jit variant is a compile: the default suite's budget)
PROPERTY_SETTINGS = [("grpo", {}), ("bon_max_second", {}), ("maxk", dict(baseline="loo1")),
                     ("maxk_offpolicy_exact", dict(baseline="loo1", scale="loo_rms", clamp_delta=None)),
                     ("tang_leave_p_out", {}), ("majority_vote", {})]
P_ROWS, P_N, P_K = 3, 6, 3


class RegistryPropertiesTest(parameterized.TestCase):
    """One estimator per family (and the maxk family's loo_rms scale), with and without jit, on hypothesis
    inputs (rewards from a small value set, so ties occur; log-ratios up to ±1; a masked sample):
    outputs [rows, n] float32 and finite (chex), masked samples get 0, permuting a row's samples
    permutes its outputs, and the jitted call equals the eager one."""

    @chex.variants(with_jit=True, without_jit=True)
    @parameterized.parameters(*PROPERTY_SETTINGS)
    def test_shape_type_finiteness_masking_and_permutation(self, name, options):
        plain = E.get_estimator(name, **options)
        call = self.variant(lambda r, lr, m, ids: plain(r, k=P_K, log_ratio=lr, mask=m, answer_ids=ids))  # noqa: E731
        values = st.sampled_from([0.0, 0.25, 0.5, 1.0])

        @hyp_settings(max_examples=4, deadline=None, database=None)
        @given(rewards=st.lists(values, min_size=P_ROWS * P_N, max_size=P_ROWS * P_N),
               deltas=st.lists(st.floats(-1.0, 1.0), min_size=P_ROWS * P_N, max_size=P_ROWS * P_N),
               masked=st.integers(0, P_ROWS * P_N - 1), seed=st.integers(0, 2**16))
        def check(rewards, deltas, masked, seed):
            r = np.asarray(rewards, np.float32).reshape(P_ROWS, P_N)
            lr = np.asarray(deltas, np.float32).reshape(P_ROWS, P_N)
            ids = (r * 4).astype(np.int32)                                    # the answer decides the reward
            m = np.ones(r.shape, bool)
            m.flat[masked] = False
            out = call(r, lr, m, ids)
            chex.assert_shape(out, (P_ROWS, P_N))
            chex.assert_type(out, jnp.float32)
            chex.assert_tree_all_finite(out)
            assert np.asarray(out).flat[masked] == 0.0
            np.testing.assert_allclose(out, plain(r, k=P_K, log_ratio=lr, mask=m, answer_ids=ids), atol=2e-5, rtol=1e-4)
            perm = np.random.default_rng(seed).permutation(P_N)
            permuted = call(r[:, perm], lr[:, perm], m[:, perm], ids[:, perm])
            np.testing.assert_allclose(permuted, np.asarray(out)[:, perm], atol=2e-5, rtol=1e-4)

        check()
