"""generate(): greedy parity with transformers, exact behaviour log-probs, shared-prefix sampling
distribution and KV cache (against the cache-free full forward), per-sample keys, stop tokens /
lengths / padding / early stop, bucketing, 8-device sharding and error paths. Compilations are
shared between tests (module fixtures, same shapes)."""
import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from absl.testing import parameterized
import torch
from scipy import stats

from maxk_jax import sampling
from maxk_jax.runtime import sharding
from maxk_jax.sampling import _sampler
from maxk_jax.models import convert, qwen2
from maxk_jax.sampling import sampling_logprobs
from tests.models.hf_fixtures import make_tiny_hf_model

_filtered = jax.jit(sampling_logprobs, static_argnames=("temperature", "top_k", "top_p"))

GREEDY_LENS = [3, 9, 17, 6]  # bucket 32
T_GREEDY = 12
SAMPLED_LENS = [2, 5, 8, 11, 14, 17, 20, 4]  # P = 8 (one row per device on the 8-device mesh)
T_SAMPLED = 16
FILTERS = dict(temperature=0.7, top_k=20, top_p=0.8)


def _prompts(lengths, vocab, seed):
    rng = np.random.default_rng(seed)
    return [rng.integers(3, vocab, size=n).tolist() for n in lengths]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """(torch model, config, params): one random HF checkpoint, saved and loaded with load_hf."""
    model = make_tiny_hf_model(seed=0)
    path = tmp_path_factory.mktemp("sampler_ckpt")
    model.save_pretrained(str(path))
    config, params = convert.load_hf(path)
    return model, config, params


@pytest.fixture(scope="module")
def greedy_prompts(tiny):
    return _prompts(GREEDY_LENS, tiny[1].vocab_size, 0)


@pytest.fixture(scope="module")
def greedy_nostop(tiny, greedy_prompts):
    _, config, params = tiny
    return sampling.generate(config, params, greedy_prompts, n=2, max_new_tokens=T_GREEDY,
                             key=jax.random.key(0), temperature=0.0)


def _hf_greedy(model, prompts, max_new, eos_id, pad_id):
    width = max(map(len, prompts))
    ids = np.full((len(prompts), width), pad_id, np.int64)
    mask = np.zeros((len(prompts), width), np.int64)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):], mask[i, width - len(p):] = p, 1
    with torch.no_grad():
        out = model.generate(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask),
                             do_sample=False, max_new_tokens=max_new, eos_token_id=eos_id,
                             pad_token_id=pad_id)
    new = out[:, width:].numpy()
    return np.pad(new, ((0, 0), (0, max_new - new.shape[1])), constant_values=pad_id)


def test_greedy_matches_transformers(tiny, greedy_prompts):
    model, config, params = tiny
    eos = config.eos_token_id
    out = sampling.generate(config, params, greedy_prompts, n=2, max_new_tokens=T_GREEDY,
                            key=jax.random.key(0), temperature=0.0, eos_id=eos)
    ref = _hf_greedy(model, greedy_prompts, T_GREEDY, eos, config.pad_token_id)
    tokens = np.asarray(out.tokens)
    assert tokens.shape == (len(GREEDY_LENS), 2, T_GREEDY) and tokens.dtype == np.int32
    np.testing.assert_array_equal(tokens[:, 0], ref)
    np.testing.assert_array_equal(tokens[:, 1], ref)
    # Greedy = point mass: log-prob 0 for every generated token (and at padding).
    np.testing.assert_array_equal(np.asarray(out.logprobs), 0.0)
    assert out.logprobs.dtype == jnp.float32


def test_stop_tokens_lengths_padding_and_early_stop(tiny, greedy_prompts, greedy_nostop):
    _, config, params = tiny
    ref = np.asarray(greedy_nostop.tokens)
    assert (np.asarray(greedy_nostop.lengths) == T_GREEDY).all()
    assert int(greedy_nostop.num_steps) == T_GREEDY
    assert np.asarray(greedy_nostop.mask).all() and not np.asarray(greedy_nostop.finished).any()
    np.testing.assert_array_equal(np.asarray(greedy_nostop.prompt_lengths), GREEDY_LENS)
    # Stop ids = the 4th greedy token of every prompt: each row must stop within 4 tokens.
    stop = sorted({int(ref[p, 0, 3]) for p in range(len(GREEDY_LENS))})
    expected = np.array([next(j for j in range(T_GREEDY) if ref[p, 0, j] in stop) + 1
                         for p in range(len(GREEDY_LENS))])
    compiled = _sampler.decode_loop._cache_size()
    out = sampling.generate(config, params, greedy_prompts, n=2, max_new_tokens=T_GREEDY,
                            key=jax.random.key(0), temperature=0.0, eos_id=stop, pad_id=7)
    assert _sampler.decode_loop._cache_size() == compiled  # stop ids / pad id are data, not static
    lengths = np.asarray(out.lengths)
    np.testing.assert_array_equal(lengths, np.stack([expected, expected], 1))
    assert int(out.num_steps) == expected.max() <= 4 < T_GREEDY  # the while_loop stopped early
    assert np.asarray(out.finished).all()
    t = np.arange(T_GREEDY)
    mask = t < lengths[..., None]
    np.testing.assert_array_equal(np.asarray(out.mask), mask)
    tokens = np.asarray(out.tokens)
    np.testing.assert_array_equal(tokens[mask], ref[mask])  # left-pad token 7 changed nothing
    assert (tokens[~mask] == 7).all()
    assert sampling.to_token_lists(out)[1][0] == ref[1, 0, :expected[1]].tolist()


def test_prompt_buckets_reuse_compilation_and_rows_are_independent(tiny, greedy_prompts,
                                                                   greedy_nostop):
    _, config, params = tiny
    others = _prompts([30, 2, 25], config.vocab_size, 5)
    prompts = [greedy_prompts[2]] + others  # 4 prompts of new lengths, same bucket (32)
    sizes = _sampler.prefill_prompts._cache_size(), _sampler.decode_loop._cache_size()
    out = sampling.generate(config, params, prompts, n=2, max_new_tokens=T_GREEDY,
                            key=jax.random.key(3), temperature=0.0)
    assert (_sampler.prefill_prompts._cache_size(), _sampler.decode_loop._cache_size()) == sizes
    np.testing.assert_array_equal(np.asarray(out.tokens[0]), np.asarray(greedy_nostop.tokens[2]))
    # 3 prompts -> batch bucket 4 (one dummy row, discarded): still no recompilation.
    out3 = sampling.generate(config, params, prompts[:3], n=2, max_new_tokens=T_GREEDY,
                             key=jax.random.key(3), temperature=0.0)
    assert out3.tokens.shape == (3, 2, T_GREEDY)
    assert (_sampler.prefill_prompts._cache_size(), _sampler.decode_loop._cache_size()) == sizes
    np.testing.assert_array_equal(np.asarray(out3.tokens), np.asarray(out.tokens[:3]))


# ---------------------------------------------------------------------------------------------
# Sampled generation (temperature 0.7, top-k 20, top-p 0.8)
# ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def sampled(tiny):
    """A no-stop run, and a run with the same key whose stop ids are its 5 most frequent tokens."""
    _, config, params = tiny
    prompts = _prompts(SAMPLED_LENS, config.vocab_size, 1)
    kw = dict(n=4, max_new_tokens=T_SAMPLED, key=jax.random.key(42), **FILTERS)
    free = sampling.generate(config, params, prompts, **kw)
    counts = np.bincount(np.asarray(free.tokens).ravel(), minlength=config.vocab_size)
    stop = np.argsort(-counts, kind="stable")[:5].tolist()
    stopped = sampling.generate(config, params, prompts, eos_id=stop, **kw)
    return prompts, stop, free, stopped


def _recompute_logprobs(config, params, prompts, out, filters):
    """Log-prob of every generated token from ONE full forward pass over prompt + completion,
    processed with the same temperature/top-k/top-p: (logprobs [P, n, T], kept-set sizes)."""
    tokens, lengths = np.asarray(out.tokens), np.asarray(out.lengths)
    p_count, n, t_max = tokens.shape
    seqs = [prompts[p] + tokens[p, i, :lengths[p, i]].tolist()
            for p in range(p_count) for i in range(n)]
    width = max(map(len, seqs))
    ids = np.zeros((len(seqs), width), np.int32)
    mask = np.zeros((len(seqs), width), np.int32)
    for r, s in enumerate(seqs):
        ids[r, width - len(s):], mask[r, width - len(s):] = s, 1
    logp = np.asarray(_filtered(qwen2.logits(config, params, jnp.asarray(ids), jnp.asarray(mask)),
                                **filters))
    ref = np.zeros((p_count * n, t_max), np.float32)
    kept = np.zeros((p_count * n, t_max), np.int64)
    for r, length in enumerate(lengths.ravel()):
        cols = width - length + np.arange(length)  # column of completion token j
        ref[r, :length] = logp[r, cols - 1, ids[r, cols]]
        kept[r, :length] = np.isfinite(logp[r, cols - 1]).sum(-1)
    return ref.reshape(p_count, n, t_max), kept.reshape(p_count, n, t_max)


def test_logprobs_equal_full_forward_recomputation(tiny, sampled):
    _, config, params = tiny
    prompts, _, free, stopped = sampled
    for out in (free, stopped):
        assert out.logprobs.dtype == jnp.float32 and out.tokens.dtype == jnp.int32
        ref, kept = _recompute_logprobs(config, params, prompts, out, FILTERS)
        mask = np.asarray(out.mask)
        # No sampled token lies outside the truncation set (recomputed log-prob finite) ...
        assert np.isfinite(ref[mask]).all()
        np.testing.assert_allclose(np.asarray(out.logprobs)[mask], ref[mask], atol=2e-4)
        # ... and the truncation was real (top-k 20 of 128, top-p 0.8 cut further).
        assert kept[mask].max() <= 20 and kept[mask].min() < 20
        assert (np.asarray(out.logprobs)[~mask] == 0).all()
        assert (np.asarray(out.logprobs)[mask] <= 0).all()


def test_stop_ids_truncate_the_same_samples(sampled):
    _, stop, free, stopped = sampled
    ftok, stok = np.asarray(free.tokens), np.asarray(stopped.tokens)
    lengths, finished = np.asarray(stopped.lengths), np.asarray(stopped.finished)
    is_stop = np.isin(ftok, stop)
    first = np.where(is_stop.any(-1), is_stop.argmax(-1) + 1, T_SAMPLED)
    np.testing.assert_array_equal(lengths, first)  # same per-step keys -> same prefix
    np.testing.assert_array_equal(finished, is_stop.any(-1))
    assert finished.any() and not finished.all()
    mask = np.asarray(stopped.mask)
    np.testing.assert_array_equal(stok[mask], ftok[mask])
    np.testing.assert_array_equal(np.asarray(stopped.logprobs)[mask], np.asarray(free.logprobs)[mask])
    assert (stok[~mask] == 0).all()  # config.pad_token_id
    assert int(stopped.num_steps) == lengths.max()


def test_keys_reproducible_and_split_per_sample(tiny, sampled):
    _, config, params = tiny
    prompts, _, free, _ = sampled
    kw = dict(n=4, max_new_tokens=T_SAMPLED, **FILTERS)
    again = sampling.generate(config, params, prompts, key=jax.random.key(42), **kw)
    np.testing.assert_array_equal(np.asarray(again.tokens), np.asarray(free.tokens))
    explicit = sampling.generate(config, params, prompts, **kw,
                                 key=jax.random.split(jax.random.key(42), (8, 4)))
    np.testing.assert_array_equal(np.asarray(explicit.tokens), np.asarray(free.tokens))
    raw = sampling.generate(config, params, prompts, key=jax.random.PRNGKey(42), **kw)
    np.testing.assert_array_equal(np.asarray(raw.tokens), np.asarray(free.tokens))
    other = sampling.generate(config, params, prompts, key=jax.random.key(43), **kw)
    assert (np.asarray(other.tokens) != np.asarray(free.tokens)).mean() > 0.5


@pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 (simulated) devices")
def test_sharded_over_8_devices_equals_single_device(tiny, sampled):
    _, config, params = tiny
    prompts, stop, _, stopped = sampled
    mesh = sharding.make_mesh(data=8)
    out = sampling.generate(config, params, prompts, n=4, max_new_tokens=T_SAMPLED,
                            key=jax.random.key(42), eos_id=stop, mesh=mesh, **FILTERS)
    np.testing.assert_array_equal(np.asarray(out.tokens), np.asarray(stopped.tokens))
    np.testing.assert_array_equal(np.asarray(out.lengths), np.asarray(stopped.lengths))
    np.testing.assert_allclose(np.asarray(out.logprobs), np.asarray(stopped.logprobs), atol=1e-6)
    assert len(out.tokens.sharding.device_set) == 8


# ---------------------------------------------------------------------------------------------
# Shared prefix vs repeated prompt
# ---------------------------------------------------------------------------------------------

def _chi2_gof(seqs: np.ndarray, probs: dict) -> float:
    """p-value of observed 2-token sequences [N, 2] against exact probabilities (bins with
    expected count < 5 merged)."""
    n = len(seqs)
    observed = {}
    for s in map(tuple, seqs):
        assert s in probs, f"sampled sequence {s} outside the truncated support"
        observed[s] = observed.get(s, 0) + 1
    big = [s for s, p in probs.items() if n * p >= 5]
    obs = [observed.get(s, 0) for s in big]
    exp = [n * probs[s] for s in big]
    obs.append(n - sum(obs))
    exp.append(n - sum(exp))
    return stats.chisquare(obs, exp).pvalue


def test_shared_prefix_matches_repeated_prompt(tiny):
    _, config, params = tiny
    filt = dict(temperature=1.0, top_k=6, top_p=0.9)
    num = 1024
    prompt = _prompts([5], config.vocab_size, 2)[0]
    keys = jax.random.split(jax.random.key(7), num)
    shared = sampling.generate(config, params, [prompt], n=num, max_new_tokens=2,
                               key=keys.reshape(1, num), **filt)
    repeated = sampling.generate(config, params, [prompt] * num, n=1, max_new_tokens=2,
                                 key=keys.reshape(num, 1), **filt)
    # Same per-sample keys -> same tokens, whether the prompt is prefilled once or 1024 times.
    np.testing.assert_array_equal(np.asarray(shared.tokens[0]), np.asarray(repeated.tokens[:, 0]))
    np.testing.assert_allclose(np.asarray(shared.logprobs[0]), np.asarray(repeated.logprobs[:, 0]),
                               atol=1e-5)
    independent = sampling.generate(config, params, [prompt] * num, n=1, max_new_tokens=2,
                                    key=jax.random.key(8), **filt)
    # Exact distribution of the first two tokens under the truncated sampling distribution.
    first = np.asarray(_filtered(
        qwen2.logits(config, params, jnp.asarray([prompt]))[:, -1], **filt))[0]
    support = np.flatnonzero(np.isfinite(first))
    second = np.asarray(_filtered(qwen2.logits(
        config, params, jnp.asarray([prompt + [int(a)] for a in support]))[:, -1], **filt))
    logp = {(int(a), int(b)): first[a] + second[i, b]
            for i, a in enumerate(support) for b in np.flatnonzero(np.isfinite(second[i]))}
    probs = {s: float(np.exp(v)) for s, v in logp.items()}
    a_seqs = np.asarray(shared.tokens[0])
    b_seqs = np.asarray(independent.tokens[:, 0])
    assert _chi2_gof(a_seqs, probs) > 1e-3
    assert _chi2_gof(b_seqs, probs) > 1e-3
    # Two-sample test: shared-prefix vs independently keyed repeated-prompt samples.
    cells = sorted(set(map(tuple, a_seqs)) | set(map(tuple, b_seqs)))
    table = np.array([[sum(1 for s in map(tuple, x) if s == c) for c in cells]
                      for x in (a_seqs, b_seqs)])
    assert stats.chi2_contingency(table).pvalue > 1e-3
    # Returned log-probs are the exact sequence log-probs.
    got = np.asarray(shared.logprobs[0]).sum(-1)
    np.testing.assert_allclose(got, [logp[tuple(s)] for s in a_seqs], atol=2e-4)
    # Sanity (the test can fail): a wrong distribution is rejected.
    shifted = {s: p for s, p in zip(probs, np.roll(list(probs.values()), 1))}
    assert _chi2_gof(a_seqs, shifted) < 1e-3


# ---------------------------------------------------------------------------------------------
# Shared-prefix KV cache vs the cache-free full forward (prompt bucket 384: not a power of two)
# ---------------------------------------------------------------------------------------------

LONG_LENS = [300, 7, 130]  # bucket 384 (the power-of-two rule would pad to 512)
T_LONG = 10


@pytest.fixture(scope="module")
def long_model():
    """A random GQA Qwen2 (4 query / 2 KV heads, 3 layers) with room for 300-token prompts."""
    config = qwen2.Qwen2Config(vocab_size=96, hidden_size=32, intermediate_size=64, num_layers=3,
                               num_heads=4, num_kv_heads=2, rope_theta=10000.0,
                               max_position_embeddings=512, pad_token_id=0)
    return config, qwen2.init_params(config, jax.random.key(21))


def test_shared_cache_logprobs_equal_teacher_forced_forward(long_model):
    config, params = long_model
    prompts = _prompts(LONG_LENS, config.vocab_size, 21)
    assert sampling.prompt_length_bucket(max(LONG_LENS)) == 384
    out = sampling.generate(config, params, prompts, n=3, max_new_tokens=T_LONG,
                            key=jax.random.key(5), **FILTERS)
    ref, kept = _recompute_logprobs(config, params, prompts, out, FILTERS)
    mask = np.asarray(out.mask)
    assert mask.all()  # no stop token: every position is checked
    np.testing.assert_allclose(np.asarray(out.logprobs), ref, rtol=0, atol=1e-5)
    assert kept.min() < 20  # the filters truncated (the oracle went through the same filters)
    # The samples of a prompt differ (they share the prompt block, not their completions).
    tokens = np.asarray(out.tokens)
    assert all(len({tuple(tokens[p, i]) for i in range(3)}) > 1 for p in range(len(prompts)))


def test_shared_cache_greedy_equals_full_forward_greedy_decoding(long_model):
    config, params = long_model
    prompts = _prompts(LONG_LENS, config.vocab_size, 22)
    out = sampling.generate(config, params, prompts, n=2, max_new_tokens=T_LONG,
                            key=jax.random.key(0), temperature=0.0)
    # Oracle: re-run the whole (left-padded, fixed-width) sequence at every step, argmax.
    width = max(LONG_LENS) + T_LONG
    seqs = [list(p) for p in prompts]
    for _ in range(T_LONG):
        ids = np.zeros((len(seqs), width), np.int32)
        mask = np.zeros((len(seqs), width), np.int32)
        for r, seq in enumerate(seqs):
            ids[r, width - len(seq):], mask[r, width - len(seq):] = seq, 1
        last = np.asarray(qwen2.logits(config, params, jnp.asarray(ids), jnp.asarray(mask)))[:, -1]
        for r, tok in enumerate(last.argmax(-1)):
            seqs[r].append(int(tok))
    ref = np.asarray([seq[len(p):] for seq, p in zip(seqs, prompts)])
    tokens = np.asarray(out.tokens)
    np.testing.assert_array_equal(tokens[:, 0], ref)
    np.testing.assert_array_equal(tokens[:, 1], ref)


def test_prefill_stores_the_prompt_once_per_prompt(long_model):
    config, params = long_model
    n, t_new, pb, tp = 5, 7, 2, 384
    settings = sampling.SamplerSettings(n=n, max_new_tokens=t_new)
    tokens = jax.ShapeDtypeStruct((pb, tp), jnp.int32)
    first, cache = jax.eval_shape(_sampler.prefill_prompts, config, settings, None, params, tokens, tokens)
    l, kv, d = config.num_layers, config.num_kv_heads, config.head_dim_
    assert first.shape == (pb * n, config.vocab_size)
    assert len(cache.prompt_k) == len(cache.k) == l
    assert {x.shape for x in cache.prompt_k + cache.prompt_v} == {(pb, kv, tp, d)}
    assert {x.shape for x in cache.k + cache.v} == {(pb * n, kv, t_new - 1, d)}
    assert cache.prompt_valid.shape == (pb, tp) and cache.length.shape == ()


# ---------------------------------------------------------------------------------------------
# Helpers and error paths
# ---------------------------------------------------------------------------------------------

def test_helpers():
    assert [sampling.next_pow2(x, 16) for x in (1, 16, 17, 100)] == [16, 16, 32, 128]
    lengths = (1, 16, 17, 100, 128, 129, 256, 257, 1024, 1025)
    assert ([sampling.prompt_length_bucket(x) for x in lengths]
            == [16, 16, 32, 128, 128, 256, 256, 384, 1024, 1152])
    assert [sampling.prompt_length_bucket(x, 64) for x in (3, 65, 200)] == [64, 128, 256]
    buckets = {sampling.prompt_length_bucket(x) for x in range(1, 4097)}
    assert all(sampling.prompt_length_bucket(b) == b for b in buckets)  # idempotent
    assert all(b - x < 128 for x in range(129, 4097) for b in [sampling.prompt_length_bucket(x)])
    tokens, mask = sampling.pad_prompts([[5, 6], [7]], 4, 3, 0)
    assert tokens.tolist() == [[0, 0, 5, 6], [0, 0, 0, 7], [0, 0, 0, 0]]
    assert mask.tolist() == [[0, 0, 1, 1], [0, 0, 0, 1], [0, 0, 0, 1]]
    assert sampling.stop_id_array(None, 10).tolist() == [-1] * 8
    assert sampling.stop_id_array([4, 2, 4], 10).tolist() == [2, 4] + [-1] * 6
    assert len(sampling.stop_id_array(list(range(9)), 10)) == 16


def test_prompt_batch_bucket_steps_of_eight_and_shards():
    buckets = [sampling.prompt_batch_bucket(p) for p in range(1, 42)]
    assert all(b >= p for b, p in zip(buckets, range(1, 42)))
    assert buckets[:8] == [1, 2, 4, 4, 8, 8, 8, 8]
    assert all(b % 8 == 0 and b - p < 8 for b, p in zip(buckets[8:], range(9, 42)))
    assert sampling.prompt_batch_bucket(33) == 40  # next_pow2 would be 64
    assert [sampling.prompt_batch_bucket(p, 8) for p in (1, 9, 17)] == [8, 16, 24]
    assert sampling.prompt_batch_bucket(5, 3) == 9
    with pytest.raises(ValueError, match="num_prompts >= 1"):
        sampling.prompt_batch_bucket(0)
    stop = jnp.asarray([2, 4, -1, -1])
    assert sampling.is_stop(jnp.asarray([1, 2, 4, -5]), stop).tolist() == [False, True, True, False]


@pytest.mark.parametrize("change,match", [
    (dict(n=0), "n=0 must be an int >= 1"),
    (dict(n=2.0), "n=2.0 must be an int >= 1"),
    (dict(max_new_tokens=0), "max_new_tokens=0 must be an int >= 1"),
    (dict(temperature=-1.0), "temperature"),
    (dict(top_p=0.0), "top_p"),
    (dict(top_p=1.01), "top_p"),
    (dict(top_k=-2), "top_k"),
    (dict(prompts=[]), "non-empty"),
    (dict(prompts="hello"), "non-empty"),
    (dict(prompts=[[1, 2], []]), r"prompts\[1\] is empty"),
    (dict(prompts=[[1, 2.5]]), "non-int token 2.5"),
    (dict(prompts=[[1, "a"]]), "non-int token 'a'"),
    (dict(prompts=[[1, True]]), "non-int token True"),
    (dict(prompts=[5]), "list of token ids"),
    (dict(prompts=[[1, 128]]), "outside the vocabulary"),
    (dict(prompts=[[1, -1]]), "outside the vocabulary"),
    (dict(prompts=[[1] * 250]), r"250 tokens > max_position_embeddings \(256\) - max_new_tokens"),
    (dict(key=None), "key must be"),
    (dict(key=0), "key must be"),
    (dict(key=np.zeros(3, np.float32)), "key must be"),
    (dict(key="key"), "key must be"),
    (dict(key=jax.random.split(jax.random.key(0), 3)), r"key array shape \(3,\)"),
    (dict(eos_id=128), "eos_id"),
    (dict(eos_id=[2, -1]), "eos_id"),
    (dict(eos_id="2"), "eos_id"),
    (dict(pad_id=500), "pad_id"),
    (dict(min_prompt_bucket=0), "min_prompt_bucket"),
])
def test_invalid_arguments(tiny, change, match):
    _, config, params = tiny
    kw = dict(prompts=[[1, 2, 3]], n=2, max_new_tokens=8, key=jax.random.key(0))
    kw.update(change)
    with pytest.raises(ValueError, match=match):
        sampling.generate(config, params, kw.pop("prompts"), **kw)


def test_gumbel_max_draws_the_same_tokens_as_categorical():
    rng = np.random.default_rng(11)
    logp = jax.nn.log_softmax(jnp.asarray(rng.normal(size=(16, 50)) * 3, jnp.float32))
    logp = logp.at[:, ::3].set(-jnp.inf)  # filtered tokens are never drawn
    keys = jax.random.split(jax.random.key(11), 16 * 40).reshape(40, 16)
    ours = jax.vmap(jax.vmap(sampling.gumbel_max))(keys, jnp.broadcast_to(logp, (40, 16, 50)))
    ref = jax.vmap(jax.vmap(jax.random.categorical))(keys, jnp.broadcast_to(logp, (40, 16, 50)))
    np.testing.assert_array_equal(np.asarray(ours), np.asarray(ref))
    assert not np.any(np.asarray(ours) % 3 == 0)
    ties = jnp.asarray([[1.0, 3.0, 3.0, 0.0], [-jnp.inf, 2.0, -jnp.inf, 2.0], [5.0, 5.0, 5.0, 5.0]])
    assert sampling.first_argmax(ties).tolist() == jnp.argmax(ties, axis=-1).tolist() == [1, 1, 0]


class DrawTest(parameterized.TestCase):
    """draw() never stores the [B, V] log-probs, yet gives exactly the tokens and log-probs of
    Gumbel-max over sampling_logprobs' output (what it computed before), with and without jit."""

    @chex.variants(with_jit=True, without_jit=True)
    @parameterized.parameters((1.0, 0, 1.0), (0.7, 20, 0.8), (1.3, 0, 0.9), (0.0, 0, 1.0))
    def test_draw_equals_a_draw_from_the_sampling_logprobs(self, temperature, top_k, top_p):
        rng = np.random.default_rng(3)
        logits = jnp.asarray(rng.normal(size=(12, 300)) * 4, jnp.float32)
        keys = jax.random.split(jax.random.key(5), 12)
        settings = sampling.SamplerSettings(n=1, max_new_tokens=4, temperature=temperature, top_k=top_k,
                                            top_p=top_p)
        tokens, logp = self.variant(sampling.draw, static_argnums=3)(keys, jnp.int32(2), logits, settings)
        chex.assert_shape((tokens, logp), (12,))
        chex.assert_type((tokens, logp), (jnp.int32, jnp.float32))
        chex.assert_tree_all_finite(logp)
        full = sampling_logprobs(logits, temperature, top_k, top_p)
        if temperature == 0:
            want = jnp.argmax(full, axis=-1)
        else:
            step_keys = jax.vmap(jax.random.fold_in, in_axes=(0, None))(keys, 2)
            want = jax.vmap(sampling.gumbel_max)(step_keys, full)
        np.testing.assert_array_equal(np.asarray(tokens), np.asarray(want))
        np.testing.assert_array_equal(np.asarray(logp), np.asarray(full[jnp.arange(12), want]))


def test_generate_traces_once_per_bucket(monkeypatch):
    """Prompts of other lengths and counts inside one (prompt-length, prompt-count) bucket, other
    keys, stop ids and pad ids reuse the compiled prefill and decode loop, each traced once
    (chex.assert_max_traces around the cache's creation, which a prefill trace calls once, and
    around ``record``, which a decode-loop trace calls twice: before the loop and in its body)."""
    monkeypatch.setattr(qwen2, "init_cache", chex.assert_max_traces(qwen2.init_cache, n=1))
    monkeypatch.setattr(_sampler, "record", chex.assert_max_traces(_sampler.record, n=2))
    config = qwen2.Qwen2Config(vocab_size=53, hidden_size=16, intermediate_size=32, num_layers=2, num_heads=2,
                               num_kv_heads=1, rope_theta=10000.0)   # a shape no other test compiles
    params = qwen2.init_params(config, jax.random.key(0))
    cases = [([[5, 6, 7]] * 3, 3, 0), ([[5, 6, 7, 8, 9, 10], [11, 12], [4], [9] * 9], [3, 4], 1),
             ([[7] * 15] * 3, None, 2)]   # 3-4 prompts of 1-15 tokens: the buckets 4 x 16
    for prompts, eos, pad in cases:
        out = sampling.generate(config, params, prompts, n=2, max_new_tokens=5, key=jax.random.key(pad),
                                eos_id=eos, pad_id=pad)
        chex.assert_shape(out.tokens, (len(prompts), 2, 5))
