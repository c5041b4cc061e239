"""train_step: IS-weighted gradient, micro-batch accumulation, masking, PPO log-ratio recompute,
8-device sharding, truncated log-probs, config errors (tiny random Qwen2, CPU)."""
import dataclasses

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from maxk_jax.runtime import sharding
from maxk_jax.rl import logprobs, training
from maxk_jax.rl.losses import LossConfig
from maxk_jax.sampling import SamplerSettings
from maxk_jax.estimators import estimator_info, get_estimator, list_estimators
from maxk_jax.models import qwen2

CONFIG = qwen2.Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=2,
                           num_heads=4, num_kv_heads=2, rope_theta=10000.0)
P, N, SP, T = 4, 4, 3, 5


@pytest.fixture(scope="module")
def params():
    return qwen2.init_params(CONFIG, jax.random.key(0))


def single_mesh():
    return sharding.make_mesh(1, 1, 1, devices=jax.devices()[:1])


def exact_logp(params, tokens, mask, temperature=1.0):
    """Independent reference: log-softmax of qwen2.logits / temperature at completion tokens."""
    logits = qwen2.logits(CONFIG, params, tokens, mask) / temperature
    lp = jax.nn.log_softmax(logits[:, SP - 1:-1], axis=-1)
    return jnp.take_along_axis(lp, tokens[:, SP:, None], axis=-1)[..., 0]


def make_batch(params, seed, *, noise=0.0, invalid=(), lengths=None, temperature=1.0):
    """Random prompts/completions; old_logp = exact policy log-probs + uniform noise."""
    rng = np.random.default_rng(seed)
    b = P * N
    tokens = rng.integers(4, CONFIG.vocab_size, size=(b, SP + T)).astype(np.int32)
    attn = np.ones((b, SP + T), bool)
    attn[::3, 0] = False  # some left padding
    lengths = rng.integers(1, T + 1, size=b) if lengths is None else lengths
    comp = np.arange(T)[None, :] < np.asarray(lengths)[:, None]
    attn[:, SP:] = comp
    rewards = rng.integers(0, 5, size=b).astype(np.float32) / 4
    valid = np.ones(b, bool)
    valid[list(invalid)] = False
    lp = np.asarray(exact_logp(params, jnp.asarray(tokens), jnp.asarray(attn), temperature))
    old = lp + rng.uniform(-noise, noise, size=lp.shape)
    return training.Batch(tokens=jnp.asarray(tokens), attention_mask=jnp.asarray(attn),
                          completion_mask=jnp.asarray(comp),
                          old_logp=jnp.asarray(np.where(comp, old, 0.0), jnp.float32),
                          rewards=jnp.asarray(np.where(valid, rewards, 0.0)),
                          valid=jnp.asarray(valid), answer_ids=jnp.asarray(rng.integers(0, 3, b), jnp.int32))


_STEPS = {}
LR = 20.0
# Shared configs (each train_step compile of even this tiny model takes several seconds on CPU):
def sampler(n=None, **kwargs):
    """SamplerSettings of the test batches (n = N samples per prompt, T new tokens)."""
    return SamplerSettings(n=N if n is None else n, max_new_tokens=T, **kwargs)


CFG_IS = training.StepConfig(estimator="maxk_offpolicy", k=2, sampler=sampler(),
                             loss=LossConfig(kind="is_weighted", aggregation="seq_sum_norm", norm_length=T))
CFG_FULL = training.StepConfig(estimator="grpo", k=2, sampler=sampler(),
                               loss=LossConfig(aggregation="token", kl_beta=0.01))
CFG_ACC = dataclasses.replace(CFG_FULL, micro_batches=2)


def get_step(cfg, mesh_kind="single"):
    """(train_step, shardings, mesh), compiled once per (cfg, mesh) for the module; SGD(LR)."""
    key = (cfg, mesh_kind)
    if key not in _STEPS:
        mesh = single_mesh() if mesh_kind == "single" else sharding.make_mesh(data=2, fsdp=2, tensor=2)
        tx = optax.sgd(LR)
        _, sh = training.abstract_train_state(CONFIG, tx, mesh)
        _STEPS[key] = (training.make_train_step(CONFIG, cfg, tx, mesh, sh), sh, mesh, tx)
    return _STEPS[key]


def run_steps(params, cfg, batch, mesh_kind="single", steps=1):
    step, sh, mesh, tx = get_step(cfg, mesh_kind)
    state, _ = training.create_train_state(CONFIG, params, tx, mesh)
    batch = sharding.shard_batch(batch, mesh)
    out = []
    for _ in range(steps):
        state, metrics = step(state, batch)
        out.append(jax.device_get(metrics))
    return state, out


def flat(tree):
    return np.concatenate([np.ravel(np.asarray(x)) for x in jax.tree.leaves(tree)])


def with_ref(batch):
    return batch.replace(ref_logp=batch.old_logp + 0.05 * jnp.sin(batch.old_logp))


def test_is_weighted_gradient_is_sum_of_coefficients_times_grad_logpi(params):
    batch = make_batch(params, 0, noise=0.04)  # off-policy, inside the trust region
    assert CFG_IS.kind == "is_weighted"
    state, (metrics,) = run_steps(params, CFG_IS, batch)
    assert metrics["clip_fraction"] == 0.0
    grad = jax.tree.map(lambda a, b: (b - a) / LR, state.params, params)

    mask = batch.completion_mask
    lp = exact_logp(params, batch.tokens, batch.attention_mask)
    log_ratio = jnp.sum(jnp.where(mask, lp - batch.old_logp, 0.0), axis=-1)
    c = get_estimator("maxk_offpolicy")(batch.rewards.reshape(P, N), k=2,
                                        log_ratio=log_ratio.reshape(P, N)).reshape(-1)
    assert float(jnp.max(jnp.abs(c))) > 0

    def weighted(p):
        seq_logp = jnp.sum(jnp.where(mask, exact_logp(p, batch.tokens, batch.attention_mask), 0.0), -1)
        return -jnp.sum(jax.lax.stop_gradient(c) * seq_logp) / (P * N * T)

    expected = jax.grad(weighted)(params)
    np.testing.assert_allclose(flat(grad), flat(expected), rtol=1e-3, atol=1e-7)
    assert np.max(np.abs(flat(expected))) > 1e-4


def test_gradient_accumulation_equals_full_batch(params):
    batch = with_ref(make_batch(params, 1, noise=0.3, invalid=(5,)))
    s1, (m1,) = run_steps(params, CFG_FULL, batch)
    s2, (m2,) = run_steps(params, CFG_ACC, batch)
    np.testing.assert_allclose(flat(s1.params), flat(s2.params), rtol=1e-5, atol=1e-6)
    for key in ("loss", "loss_policy", "loss_kl", "kl_ref", "clip_fraction", "ratio_mean",
                "ratio_min", "ratio_max", "entropy", "advantage_mean", "advantage_std",
                "is_ratio_max", "num_tokens", "grad_norm"):
        np.testing.assert_allclose(m1[key], m2[key], rtol=1e-5, atol=1e-6, err_msg=key)
    assert 0 < m1["clip_fraction"] < 1  # noise 0.3 pushes some tokens out of the trust region
    assert m1["kl_ref"] > 0


def test_null_rewards_are_masked_and_counted(params):
    invalid = (0, 1, 2, 9)            # prompt 0 keeps 1 valid sample < k = 2
    batch = make_batch(params, 2, noise=0.1, invalid=invalid)
    idx = jnp.asarray(invalid)
    garbage = batch.replace(rewards=batch.rewards.at[idx].set(1e6),
                            old_logp=batch.old_logp.at[idx].set(-50.0),
                            tokens=batch.tokens.at[idx, -1].set(7))
    s1, (m1,) = run_steps(params, CFG_IS, batch)
    s2, (m2,) = run_steps(params, CFG_IS, garbage)
    np.testing.assert_array_equal(flat(s1.params), flat(s2.params))
    assert m1["masked_samples"] == len(invalid) and m1["valid_samples"] == P * N - len(invalid)
    assert m1["rows_below_k"] == 1
    counted = np.asarray(batch.completion_mask).copy()
    counted[list(invalid)] = False
    assert m1["num_tokens"] == counted.sum()
    assert np.isfinite(m1["loss"]) and np.isfinite(m2["loss"])


def test_ppo_iterations_recompute_log_ratios(params):
    batch = make_batch(params, 3, noise=0.0)      # old_logp == current policy
    _, metrics = run_steps(params, CFG_IS, batch, steps=3)
    assert metrics[0]["is_log_ratio_abs_max"] < 1e-4
    np.testing.assert_allclose(metrics[0]["ratio_mean"], 1.0, atol=1e-5)
    for m in metrics[1:]:
        assert m["is_log_ratio_abs_max"] > 1e-3 and abs(m["ratio_mean"] - 1.0) > 1e-5
    # the off-policy coefficients see the recomputed ratios: advantages change across iterations
    assert abs(metrics[1]["advantage_std"] - metrics[0]["advantage_std"]) > 1e-7


def test_sharded_step_equals_single_device(params):
    if len(jax.devices()) < 8:
        pytest.skip("needs 8 (simulated) devices")
    batch = with_ref(make_batch(params, 4, noise=0.1, invalid=(3,)))
    single_state, single = run_steps(params, CFG_ACC, batch, steps=2)
    state, multi = run_steps(params, CFG_ACC, batch, mesh_kind="8dev", steps=2)
    assert state.params["layers"]["mlp"]["gate_kernel"].sharding.spec == \
        jax.sharding.PartitionSpec(None, "fsdp", "tensor")
    d_single = flat(single_state.params) - flat(params)
    d_multi = flat(state.params) - flat(params)
    np.testing.assert_allclose(d_multi, d_single, rtol=0, atol=1e-4 * np.abs(d_single).max())
    for a, b in zip(single, multi):
        for key in a:
            np.testing.assert_allclose(a[key], b[key], rtol=1e-4, atol=1e-5, err_msg=key)


def reference_truncated(logits, target, top_k, top_p):
    """numpy float64 reference of top-k then top-p truncated, renormalised log-prob (target kept)."""
    x = np.asarray(logits, np.float64)
    keep = np.ones_like(x, bool)
    if top_k:
        keep &= x >= np.sort(x)[-top_k]
    if top_p < 1:
        order = np.argsort(-np.where(keep, x, -np.inf))
        p = np.exp(x[order] - x.max()) * keep[order]
        p /= p.sum()
        in_set = (np.cumsum(p) - p) < top_p
        keep_p = np.zeros_like(keep)
        keep_p[order[in_set]] = True
        keep &= keep_p
    keep[target] = True
    z = np.log(np.sum(np.exp(x[keep] - x.max()))) + x.max()
    return x[target] - z


def test_truncated_logprobs_match_reference():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(3, 4, 20)).astype(np.float32) * 2
    targets = rng.integers(0, 20, size=(3, 4)).astype(np.int32)
    for top_k, top_p in ((0, 1.0), (5, 1.0), (0, 0.7), (6, 0.5)):
        got = np.asarray(logprobs.truncated_logprobs(jnp.asarray(logits), jnp.asarray(targets), top_k, top_p))
        want = np.array([[reference_truncated(logits[b, t], targets[b, t], top_k, top_p)
                          for t in range(4)] for b in range(3)])
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=f"{top_k} {top_p}")
        assert np.all(np.isfinite(got))


def test_temperature_is_applied_to_policy_logprobs(params):
    batch = make_batch(params, 5, temperature=0.7)   # behaviour log-probs at T = 0.7
    cfg = training.StepConfig(estimator="grpo", k=2, sampler=sampler(temperature=0.7))
    mesh = single_mesh()
    fn = training.make_logprob_fn(CONFIG, cfg, mesh, training.abstract_train_state(
        CONFIG, optax.sgd(1.0), mesh)[1].params)
    lp = fn(params, sharding.shard_batch(batch, mesh))
    np.testing.assert_allclose(np.asarray(lp), np.asarray(batch.old_logp), atol=2e-5)
    # the vocabulary chunk of the log-prob pass is a setting (24 does not divide V = 64: ragged chunks)
    chunked = dataclasses.replace(cfg, logprob_chunk=24)
    fn = training.make_logprob_fn(CONFIG, chunked, mesh, training.abstract_train_state(
        CONFIG, optax.sgd(1.0), mesh)[1].params)
    np.testing.assert_allclose(np.asarray(fn(params, sharding.shard_batch(batch, mesh))), np.asarray(lp), atol=2e-5)


def test_every_registered_estimator_traces(params):
    batch = make_batch(params, 6, noise=0.05)
    mesh = single_mesh()
    tx = optax.adam(1e-3)
    abstract, sh = training.abstract_train_state(CONFIG, tx, mesh)
    kinds = {}
    for name in list_estimators():
        cfg = training.StepConfig(estimator=name, k=2, sampler=sampler())
        step = training.make_train_step(CONFIG, cfg, tx, mesh, sh)
        with sharding.activation_sharding(mesh):
            _, metrics = jax.eval_shape(step.jitted, abstract, batch)
        assert metrics["loss"].shape == ()
        kinds[name] = cfg.kind
    # the paper's pipeline: eq. 4 for every method; the §3.3 IS-weighted form only when asked for
    assert set(kinds.values()) == {"clipped"}
    assert {n: estimator_info(n).loss_form for n in list_estimators()} == kinds
    forced = training.StepConfig(estimator="maxk_offpolicy", k=2, sampler=sampler(),
                                 loss=LossConfig(kind="is_weighted"))
    assert forced.kind == "is_weighted" and forced.loss.kind == "is_weighted"
    # the loss settings and the sampler settings are composed, not re-declared
    assert training.StepConfig(estimator="grpo", k=2, sampler=sampler()).loss == LossConfig()
    assert forced.n == N and forced.sampler == sampler() and forced.logprob_chunk is None


def test_optimizer_schedule():
    tx, sched = training.make_optimizer(1e-3, total_steps=110, schedule="cosine", warmup_steps=10)
    assert float(sched(0)) == 0.0 and float(sched(10)) == pytest.approx(1e-3)
    assert float(sched(60)) == pytest.approx(5e-4, rel=1e-3) and float(sched(110)) == pytest.approx(0.0, abs=1e-9)
    _, const = training.make_optimizer(5e-6, total_steps=3)
    assert float(const(2)) == pytest.approx(5e-6)
    with pytest.raises(ValueError, match="warmup_steps"):
        training.make_optimizer(1e-3, total_steps=5, warmup_steps=6)


def test_config_and_batch_errors(params):
    with pytest.raises(ValueError, match="unknown estimator 'nope'"):
        training.StepConfig(estimator="nope", k=2, sampler=sampler(4))
    with pytest.raises(ValueError, match="k=5"):
        training.StepConfig(estimator="grpo", k=5, sampler=sampler(4))
    with pytest.raises(ValueError, match="tang_loo"):
        training.StepConfig(estimator="tang_loo", k=1, sampler=sampler(4))   # LOO needs k >= 2
    with pytest.raises(ValueError, match="temperature"):
        training.StepConfig(estimator="grpo", k=2, sampler=sampler(4, temperature=0.0))
    with pytest.raises(ValueError, match="eps_low"):
        training.StepConfig(estimator="grpo", k=2, sampler=sampler(4), loss=LossConfig(eps_low=0.0))
    with pytest.raises(ValueError, match="unknown option"):
        training.StepConfig(estimator="grpo", k=2, sampler=sampler(4), estimator_options=(("bogus", 1),))
    with pytest.raises(ValueError, match="logprob_chunk=0"):
        training.StepConfig(estimator="grpo", k=2, sampler=sampler(4), logprob_chunk=0)
    with pytest.raises(TypeError):   # keyword-only: no positional settings
        training.StepConfig("grpo", 2, sampler(4))
    cfg = training.StepConfig(estimator="grpo", k=2, sampler=sampler(), micro_batches=3)
    with pytest.raises(ValueError, match="micro_batches=3 does not divide the 4 prompts"):
        cfg.check_batch(P * N)
    with pytest.raises(ValueError, match="not divisible across the data\\*fsdp=8"):
        dataclasses.replace(cfg, micro_batches=4).check_batch(P * N, 8)
    with pytest.raises(ValueError, match="whole number of prompt groups"):
        cfg.check_batch(P * N + 1)
    with pytest.raises(ValueError, match="schedule"):
        training.make_optimizer(1e-3, total_steps=10, schedule="bogus")
    # the jitted step raises the same error at trace time (before compiling)
    mesh = single_mesh()
    tx = optax.sgd(1.0)
    abstract, sh = training.abstract_train_state(CONFIG, tx, mesh)
    step = training.make_train_step(CONFIG, cfg, tx, mesh, sh)
    with pytest.raises(ValueError, match="micro_batches=3"):
        step.lower(abstract, make_batch(params, 7))
    step = training.make_train_step(CONFIG, dataclasses.replace(cfg, micro_batches=1, loss=LossConfig(kl_beta=0.1)),
                                    tx, mesh, sh)
    with pytest.raises(ValueError, match="needs batch.ref_logp"):
        step.lower(abstract, make_batch(params, 7))


CFG_OFF = training.StepConfig(estimator="maxk_offpolicy", k=2, sampler=sampler(), micro_batches=2,
                              loss=LossConfig(aggregation="token", kl_beta=0.0))


def test_trainer_old_logp_makes_iteration_zero_exactly_on_policy(params):
    """trainer_old_logp: at first=True the step's own log-probs are π_old -- log-ratio exactly 0,
    every token ratio exactly 1 -- whatever batch.old_logp holds (here: noisy sampler log-probs);
    the mismatch metrics are |Δ log p| against batch.old_logp over counted tokens; first=False
    is the default step (π_old = batch.old_logp), and iteration 1 on the returned log-probs
    equals the default step fed those log-probs."""
    mesh = single_mesh()
    tx = optax.sgd(LR)
    _, sh = training.abstract_train_state(CONFIG, tx, mesh)
    own = training.make_train_step(CONFIG, CFG_OFF, tx, mesh, sh, trainer_old_logp=True)
    default = training.make_train_step(CONFIG, CFG_OFF, tx, mesh, sh)
    batch = sharding.shard_batch(make_batch(params, 7, noise=0.05, invalid=(2,)), mesh)
    new = lambda: training.create_train_state(CONFIG, params, tx, mesh)[0]  # noqa: E731

    state, m0, old = own(new(), batch, np.bool_(True))
    m0, old = jax.device_get(m0), np.asarray(old)
    assert m0["is_log_ratio_abs_max"] == 0.0
    assert m0["ratio_min"] == m0["ratio_max"] == m0["ratio_mean"] == 1.0
    assert m0["is_ratio_min"] == m0["is_ratio_max"] == 1.0 and m0["clip_fraction"] == 0.0
    comp = np.asarray(batch.completion_mask)
    counted = comp & np.asarray(batch.valid)[:, None]
    assert np.all(old[~comp] == 0.0)
    np.testing.assert_allclose(old[comp], np.asarray(exact_logp(params, batch.tokens,
                                                                batch.attention_mask))[comp], atol=1e-5)
    gap = np.abs(old - np.asarray(batch.old_logp))[counted]
    np.testing.assert_allclose(m0["logprob_mismatch_mean"], gap.mean(), rtol=1e-6)
    assert m0["logprob_mismatch_max"] == gap.max() and 0.01 < gap.max() <= 0.05 + 1e-5

    _, m_sampler, _ = own(new(), batch, np.bool_(False))     # π_old = batch.old_logp (sampler)
    _, m_default = default(new(), batch)
    for key in m_default:
        assert m_sampler[key] == m_default[key], key
    assert m_default["is_log_ratio_abs_max"] > 1e-3

    _, m1, _ = own(state, batch.replace(old_logp=jnp.asarray(old)), np.bool_(False))
    _, m1_ref = default(own(new(), batch, np.bool_(True))[0], batch.replace(old_logp=jnp.asarray(old)))
    for key in m1_ref:
        np.testing.assert_allclose(m1[key], m1_ref[key], rtol=1e-6, atol=1e-7, err_msg=key)
    assert m1["is_log_ratio_abs_max"] > 1e-3


def test_adam_first_moment_dtype():
    """optim.mu_dtype: Adam's first moment stored in bfloat16 (the second stays float32)."""
    import optax

    params = {"w": jnp.ones((3, 4), jnp.float32)}
    tx, _ = training.make_optimizer(1e-3, total_steps=10, mu_dtype="bfloat16")
    adam = [s for s in jax.tree.leaves(tx.init(params), is_leaf=lambda x: isinstance(x, optax.ScaleByAdamState))
            if isinstance(s, optax.ScaleByAdamState)][0]
    assert adam.mu["w"].dtype == jnp.bfloat16 and adam.nu["w"].dtype == jnp.float32
    with pytest.raises(ValueError, match="mu_dtype='f8'"):
        training.make_optimizer(1e-3, total_steps=10, mu_dtype="f8")


@pytest.mark.parametrize("estimator,correction", [("maxk_offpolicy_exact", "behaviour"), ("grpo", "tis")])
def test_stale_batches_use_three_logprobs(params, estimator, correction):
    """A stale batch carries μ (behaviour_logp, the old sampler's); π_old is the trainer's own
    forward (first=True) and the PPO ratio is taken to it -- exactly 1 at iteration 0 however far μ
    is -- while the estimator's coefficients follow the correction: "behaviour" feeds δ = log π_θ/μ
    to the off-policy estimator (eq. 10 brute force), "tis" multiplies GRPO's z-scores by
    min(π_old/μ, cap); the logged behaviour ratios and per-prompt ESS are those of Σ_t (π_old − μ)."""
    from maxk_jax.rl.staleness import CORRECTIONS
    from tests.estimators import estimator_reference as ref

    assert correction in CORRECTIONS
    cap = 1.5
    options = {"baseline": "none", "clamp_delta": None} if estimator != "grpo" else {}
    cfg = training.StepConfig(estimator=estimator, k=2, sampler=sampler(), estimator_options=options,
                              loss=LossConfig(kind="is_weighted", aggregation="seq_sum_norm", norm_length=T),
                              stale_correction=correction, tis_cap=cap)
    mesh = single_mesh()
    tx = optax.sgd(LR)
    _, sh = training.abstract_train_state(CONFIG, tx, mesh)
    step = training.make_train_step(CONFIG, cfg, tx, mesh, sh, trainer_old_logp=True)
    batch = make_batch(params, 11, invalid=(5,))
    rng = np.random.default_rng(3)
    comp = np.asarray(batch.completion_mask)
    mu = np.where(comp, np.asarray(batch.old_logp) + rng.normal(0, 0.4, comp.shape), 0.0).astype(np.float32)
    batch = batch.replace(old_logp=jnp.asarray(mu), behaviour_logp=jnp.asarray(mu))   # as the loop builds it
    state, _ = training.create_train_state(CONFIG, params, tx, mesh)
    _, m, old = step(state, sharding.shard_batch(batch, mesh), np.bool_(True))
    m, old = jax.device_get(m), np.asarray(old)

    np.testing.assert_allclose(old[comp], np.asarray(exact_logp(params, batch.tokens, batch.attention_mask))[comp],
                               atol=1e-5)                                    # π_old = the trainer's forward
    assert m["ratio_min"] == m["ratio_max"] == 1.0 and m["is_log_ratio_abs_max"] == 0.0   # clip vs π_old
    valid = np.asarray(batch.valid)
    log_w = np.sum(np.where(comp, old - mu, 0.0), axis=1)                    # log π_old/μ per sequence
    np.testing.assert_allclose(m["stale_ratio_max"], np.exp(log_w[valid].max()), rtol=1e-5)
    np.testing.assert_allclose(m["stale_ratio_min"], np.exp(log_w[valid].min()), rtol=1e-5)
    np.testing.assert_allclose(m["stale_log_ratio_abs_mean"], np.abs(log_w[valid]).mean(), rtol=1e-5)
    ess = []
    for p in range(P):
        rows = slice(p * N, (p + 1) * N)
        w = np.exp(log_w[rows][valid[rows]])
        ess.append(w.sum() ** 2 / (w ** 2).sum() / w.size)
    np.testing.assert_allclose(m["stale_ess_fraction_mean"], np.mean(ess), rtol=1e-5)
    np.testing.assert_allclose(m["stale_ess_fraction_min"], np.min(ess), rtol=1e-5)

    r = np.asarray(batch.rewards).reshape(P, N)
    coef = np.zeros((P, N))
    for p in range(P):   # at iteration 0 π_θ = π_old, so log π_θ/μ = log_w
        v = valid.reshape(P, N)[p]
        lw = log_w.reshape(P, N)[p]
        if correction == "behaviour":
            coef[p, v] = ref.transform(r[p, v], 2, lw[v], "exact")
            clamped = 0.0
        else:
            coef[p, v] = ref.zscore(r[p, v]) * np.minimum(np.exp(lw[v]), cap)
    if correction == "tis":
        clamped = np.mean(np.exp(log_w[valid]) > cap)
        assert 0 < clamped < 1
    np.testing.assert_allclose(m["advantage_mean"], coef.reshape(-1)[valid].mean(), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(m["advantage_max"], coef.reshape(-1)[valid].max(), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(m["stale_clamped_fraction"], clamped, atol=1e-7)


def test_train_step_traces_once_per_shape(params, monkeypatch):
    """A new batch (other values, other lengths, other rewards) of the same shape, on a fresh state,
    reuses the compiled step: the step's body is traced once (chex.assert_max_traces around the
    metrics combination every trace runs once); a silent recompilation would fail here."""
    from maxk_jax.rl import step_metrics
    monkeypatch.setattr(step_metrics, "combine", chex.assert_max_traces(step_metrics.combine, n=1))
    cfg = dataclasses.replace(CFG_IS, k=3)   # a config no other test compiles
    tx = optax.sgd(LR)
    mesh = single_mesh()
    _, sh = training.abstract_train_state(CONFIG, tx, mesh)
    step = training.make_train_step(CONFIG, cfg, tx, mesh, sh)
    for seed in range(3):
        state, _ = training.create_train_state(CONFIG, params, tx, mesh)
        batch = make_batch(params, seed, noise=0.1 * seed, lengths=np.full(P * N, 1 + seed))
        state, metrics = step(state, sharding.shard_batch(batch, mesh))
        chex.assert_tree_all_finite(metrics)


def test_stale_batch_at_a_later_ppo_iteration_takes_delta_from_the_current_policy(params):
    """PPO iteration > 0 of a stale batch: π_θ (the params), π_old (``old_logp``, here the policy + noise)
    and μ (``behaviour_logp``) all differ.  "behaviour" feeds eq. 10 δ = log π_θ/μ -- of the CURRENT
    policy, not π_old -- so the IS-weighted gradient is −Σ_i c_i ∇ log π_θ(y_i) / (B_valid·T) with c the
    brute-force eq. 10 transform of Σ_t (log π_θ − log μ) (an independent reference); the PPO ratios are to π_old."""
    from tests.estimators import estimator_reference as ref

    cfg = training.StepConfig(estimator="maxk_offpolicy_exact", k=2, sampler=sampler(),
                              estimator_options={"baseline": "none", "clamp_delta": None},
                              loss=LossConfig(kind="is_weighted", aggregation="seq_sum_norm", norm_length=T),
                              stale_correction="behaviour")
    mesh = single_mesh()
    tx = optax.sgd(LR)
    _, sh = training.abstract_train_state(CONFIG, tx, mesh)
    step = training.make_train_step(CONFIG, cfg, tx, mesh, sh, trainer_old_logp=True)
    batch = make_batch(params, 13, noise=0.04, invalid=(6,))          # old_logp = π_old ≠ π_θ
    comp = np.asarray(batch.completion_mask)
    rng = np.random.default_rng(5)
    mu = np.where(comp, np.asarray(batch.old_logp) + rng.normal(0, 0.3, comp.shape), 0.0).astype(np.float32)
    batch = batch.replace(behaviour_logp=jnp.asarray(mu))
    state, _ = training.create_train_state(CONFIG, params, tx, mesh)
    new, m, _ = step(state, sharding.shard_batch(batch, mesh), np.bool_(False))
    m = jax.device_get(m)
    grad = jax.tree.map(lambda a, b: (b - a) / LR, new.params, params)

    valid = np.asarray(batch.valid)
    counted = comp & valid[:, None]
    lp = np.asarray(exact_logp(params, batch.tokens, batch.attention_mask))
    to_mu = np.sum(np.where(counted, lp - mu, 0.0), axis=1)                 # log π_θ/μ
    to_old = np.sum(np.where(counted, lp - np.asarray(batch.old_logp), 0.0), axis=1)
    assert np.abs(to_old[valid]).max() > 1e-2 and m["clip_fraction"] == 0.0
    np.testing.assert_allclose(m["is_log_ratio_abs_max"], np.abs(to_old[valid]).max(), rtol=1e-4)
    r = np.asarray(batch.rewards).reshape(P, N)
    coef = np.zeros((P, N))
    for p in range(P):
        v = valid.reshape(P, N)[p]
        coef[p, v] = ref.transform(r[p, v], 2, to_mu.reshape(P, N)[p, v], "exact")
    c = jnp.asarray(coef.reshape(-1), jnp.float32)
    assert float(jnp.max(jnp.abs(c))) > 0

    def weighted(p):
        seq_logp = jnp.sum(jnp.where(counted, exact_logp(p, batch.tokens, batch.attention_mask), 0.0), -1)
        return -jnp.sum(c * seq_logp) / (valid.sum() * T)       # seq_sum_norm over the counted sequences

    expected = jax.grad(weighted)(params)
    np.testing.assert_allclose(flat(grad), flat(expected), rtol=2e-3, atol=1e-7)
    assert np.max(np.abs(flat(expected))) > 1e-4
