"""Temperature / top-k / top-p logit processing vs transformers' logits warpers (the oracle)."""
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers
from hypothesis import given, settings, strategies as st

from maxk_jax.sampling import (greedy_logprobs, sampling_logprobs, top_k_mask, top_p_mask,
                                       validate_filters)


def _hf_logprobs(logits: np.ndarray, temperature: float, top_k: int, top_p: float) -> np.ndarray:
    """transformers' sampling pipeline (temperature -> top-k -> top-p), then log_softmax."""
    scores = torch.tensor(logits, dtype=torch.float32)
    warpers = [transformers.TemperatureLogitsWarper(temperature)]
    if top_k > 0:
        warpers.append(transformers.TopKLogitsWarper(top_k))
    if top_p < 1.0:
        warpers.append(transformers.TopPLogitsWarper(top_p))
    for w in warpers:
        scores = w(None, scores)
    return torch.log_softmax(scores, dim=-1).numpy()


@pytest.mark.parametrize("temperature,top_k,top_p", [
    (1.0, 0, 1.0), (0.7, 0, 1.0), (1.3, 10, 1.0), (1.0, 0, 0.9), (0.6, 0, 0.5),
    (0.8, 40, 0.95), (1.0, 3, 0.3), (2.0, 1, 1.0), (1.0, 0, 1e-3),
])
def test_matches_transformers_warpers(temperature, top_k, top_p):
    rng = np.random.default_rng(0)
    logits = (rng.normal(size=(16, 97)) * 3.0).astype(np.float32)
    ours = np.asarray(sampling_logprobs(jnp.asarray(logits), temperature, top_k, top_p))
    ref = _hf_logprobs(logits, temperature, top_k, top_p)
    assert ours.dtype == np.float32
    np.testing.assert_array_equal(np.isfinite(ours), np.isfinite(ref))
    kept = np.isfinite(ref)
    np.testing.assert_allclose(ours[kept], ref[kept], atol=2e-5)
    # Renormalised over the kept set.
    np.testing.assert_allclose(np.exp(ours).sum(-1), 1.0, atol=1e-5)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**31 - 1), st.floats(0.05, 1.0), st.integers(0, 12))
def test_top_p_is_smallest_set_reaching_p(seed, top_p, top_k):
    rng = np.random.default_rng(seed)
    logits = (rng.normal(size=(4, 23)) * 2.0).astype(np.float32)
    logp = np.asarray(sampling_logprobs(jnp.asarray(logits), 1.0, top_k, top_p))
    base = np.asarray(sampling_logprobs(jnp.asarray(logits), 1.0, top_k, 1.0))
    probs = np.exp(base)
    for row in range(4):
        kept = np.isfinite(logp[row])
        order = np.argsort(-probs[row])
        need = int(np.searchsorted(np.cumsum(probs[row][order]), top_p - 1e-6) + 1)
        assert kept.sum() == max(1, min(need, np.isfinite(base[row]).sum()))
        assert set(np.flatnonzero(kept)) == set(order[:kept.sum()])


def test_ties_are_kept_together():
    logits = jnp.asarray([[3.0, 1.0, 1.0, 1.0, 0.0]])
    assert np.asarray(top_k_mask(logits, 2)).tolist() == [[True, True, True, True, False]]
    # 3.0 alone has prob ~0.77 < 0.8, so the cut falls inside the tie at 1.0: all kept.
    assert np.asarray(top_p_mask(logits, 0.8)).tolist() == [[True, True, True, True, False]]
    assert np.asarray(top_p_mask(logits, 0.5)).tolist() == [[True, False, False, False, False]]


def test_greedy_is_point_mass_on_first_argmax():
    logits = jnp.asarray([[0.0, 2.0, 2.0, -1.0], [5.0, 1.0, 0.0, 0.0]])
    logp = np.asarray(greedy_logprobs(logits))
    assert logp[0, 1] == 0.0 and logp[1, 0] == 0.0
    assert np.isneginf(logp).sum() == 6
    np.testing.assert_array_equal(np.asarray(sampling_logprobs(logits, 0.0, 5, 0.3)), logp)


@pytest.mark.parametrize("kwargs,match", [
    (dict(temperature=-0.1, top_k=0, top_p=1.0), "temperature"),
    (dict(temperature=float("nan"), top_k=0, top_p=1.0), "temperature"),
    (dict(temperature=float("inf"), top_k=0, top_p=1.0), "temperature"),
    (dict(temperature="1", top_k=0, top_p=1.0), "temperature"),
    (dict(temperature=1.0, top_k=-1, top_p=1.0), "top_k"),
    (dict(temperature=1.0, top_k=2.5, top_p=1.0), "top_k"),
    (dict(temperature=1.0, top_k=0, top_p=0.0), "top_p"),
    (dict(temperature=1.0, top_k=0, top_p=1.5), "top_p"),
    (dict(temperature=1.0, top_k=0, top_p=float("nan")), "top_p"),
])
def test_invalid_settings(kwargs, match):
    with pytest.raises(ValueError, match=match):
        validate_filters(**kwargs)
