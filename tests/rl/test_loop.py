"""RL loop: data order, config validation, rollout batch layout / metrics, metrics log, and
end-to-end runs on a tiny checkpoint with the embedded executor (incl. SIGKILL + resume)."""
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

from maxk_jax.rl import loop as rl_loop
from maxk_jax.rl import rollout
from maxk_jax.rl import training
from maxk_jax.estimators import max_at_k
from maxk_jax.rl.metrics_log import MetricsLogger, deterministic, read_metrics
from maxk_jax.cli.fields import replace_fields
from maxk_jax.sampling import Sampler, SamplerSettings
from tests.rl.fixtures import echo_problem, small_config
from tests.cpu_flags import xla_flags

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# ------------------------------------------------------------------ pure helpers ------------

def test_data_stream_is_a_deterministic_permutation_per_epoch():
    problems = [echo_problem(i) for i in range(7)]
    first = [p.id for s in range(7) for p in rl_loop.step_problems(problems, s, 2, seed=3, shuffle=True)]
    again = [p.id for s in range(7) for p in rl_loop.step_problems(problems, s, 2, seed=3, shuffle=True)]
    assert first == again
    assert sorted(first[:7]) == sorted(p.id for p in problems)        # epoch 0 = a permutation
    assert sorted(first[7:14]) == sorted(p.id for p in problems)      # epoch 1 too, reshuffled
    assert first[:7] != first[7:14]
    plain = [p.id for p in rl_loop.step_problems(problems, 1, 3, seed=0, shuffle=False)]
    assert plain == ["fixture/3", "fixture/4", "fixture/5"]


def test_periodic_evaluation_steps():
    from maxk_jax.rl.run_config import EvalSettings

    every = EvalSettings(interval=4, problems="p.jsonl")
    after = lambda settings, total: [d for d in range(1, total + 1) if rl_loop.evaluates_after(settings, d, total)]  # noqa: E731
    assert after(every, 10) == [4, 8, 10] and after(every, 8) == [4, 8]
    skip = EvalSettings(interval=4, problems="p.jsonl", at_end=False)
    assert after(skip, 10) == [4, 8] and after(skip, 8) == [4]
    assert after(EvalSettings(), 10) == []   # interval 0: no periodic evaluation


def test_build_batch_layout():
    prompts = [[5, 6, 7], [8]]
    p, n, t = 2, 3, 4
    rng = np.random.default_rng(0)
    tokens = rng.integers(10, 20, size=(p, n, t))
    lengths = np.array([[4, 2, 1], [3, 4, 4]])
    mask = np.arange(t) < lengths[..., None]
    logp = np.where(mask, -rng.random((p, n, t)), 0.0)
    rewards = np.array([[0.5, np.nan, 1.0], [0.0, 0.25, 1.0]])
    batch = rollout.build_batch(prompts, tokens, logp, mask, rewards, np.zeros((p, n), int), pad_id=0,
                                min_prompt_bucket=4)
    assert batch.tokens.shape == (6, 8) and batch.completion_mask.shape == (6, 4)
    np.testing.assert_array_equal(batch.tokens[0], [0, 5, 6, 7, *tokens[0, 0]])
    np.testing.assert_array_equal(batch.tokens[4, :4], [0, 0, 0, 8])
    np.testing.assert_array_equal(batch.attention_mask[4], [0, 0, 0, 1, 1, 1, 1, 1])
    np.testing.assert_array_equal(batch.attention_mask[1], [0, 1, 1, 1, 1, 1, 0, 0])
    np.testing.assert_array_equal(batch.valid, [True, False, True, True, True, True])
    np.testing.assert_array_equal(batch.rewards, [0.5, 0.0, 1.0, 0.0, 0.25, 1.0])
    np.testing.assert_allclose(batch.old_logp, logp.reshape(6, 4).astype(np.float32))
    with pytest.raises(ValueError, match="rewards"):
        rollout.build_batch(prompts, tokens, logp, mask, rewards[:1], np.zeros((p, n), int), pad_id=0)


def test_rollout_metrics_and_answer_ids():
    rewards = np.array([[0.0, 0.5, np.nan, 1.0], [0.25, 0.25, 0.0, 0.0]])
    ro = rollout.Rollout(batch=None, rewards=rewards, passed=np.array([[0, 1, 0, 2], [1, 1, 0, 0]]),
                         total=np.array([[2, 2, 2, 2], [4, 4, 4, 4]]),
                         statuses=[("ok", "ok", "sandbox_error", "ok"), ("ok",) * 4],
                         lengths=np.array([[3, 4, 5, 6], [1, 2, 3, 4]]),
                         finished=np.array([[True] * 4, [True, True, False, True]]),
                         texts=[("",) * 4] * 2, no_code=1, sandbox_retries=2, sample_seconds=1.0,
                         judge_seconds=1.0)
    m = rollout.rollout_metrics(ro, ks=(1, 2, 4))
    assert m["samples/masked"] == 1 and m["status/sandbox_error"] == 1 and m["status/ok"] == 7
    np.testing.assert_allclose(m["reward/mean"], np.nanmean(rewards))
    np.testing.assert_allclose(m["reward/best_of_n_mean"], (1.0 + 0.25) / 2)
    # max@2: prompt 0 over its 3 valid samples, prompt 1 over 4 -> brute-force mean over pairs
    pairs0 = [max(a, b) for i, a in enumerate([0.0, 0.5, 1.0]) for b in [0.0, 0.5, 1.0][i + 1:]]
    pairs1 = [max(a, b) for i, a in enumerate([0.25, 0.25, 0.0, 0.0]) for b in [0.25, 0.25, 0.0, 0.0][i + 1:]]
    np.testing.assert_allclose(m["train/max_at_k/2"], (np.mean(pairs0) + np.mean(pairs1)) / 2)
    np.testing.assert_allclose(m["train/max_at_k/4"], float(max_at_k(np.nan_to_num(rewards[1:]), 4)[0]))
    np.testing.assert_allclose(m["train/pass_at_k/1"], (1 / 3 + 0) / 2)  # all tests passed: 1 of 3
    assert m["length/truncated_fraction"] == 1 / 8


def test_metrics_logger_truncates_on_resume(tmp_path):
    log = MetricsLogger(tmp_path, tensorboard=True)
    for s in range(1, 5):
        log.write(s, {"a": s, "time/x": 0.1, "nan": float("nan")})
    log.close()
    assert [r["step"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [1, 2, 3, 4]
    assert read_metrics(tmp_path / "metrics.jsonl")[0]["nan"] is None
    log = MetricsLogger(tmp_path, tensorboard=False, resume_step=2)
    log.write(3, {"a": 30})
    log.close()
    records = read_metrics(tmp_path / "metrics.jsonl")
    assert [(r["step"], r["a"]) for r in records] == [(1, 1), (2, 2), (3, 30)]
    assert deterministic(records[0]) == {"step": 1, "a": 1, "nan": None}
    assert os.listdir(tmp_path / "tensorboard")


@pytest.mark.parametrize("change, message", [   # field errors: the RunConfig refuses to exist
    ({"algo.estimator": "nope"}, "unknown estimator 'nope'"),
    ({"algo.k": 9}, "algo.k=9 must be an int with 1 <= k <= n=4"),
    ({"algo.estimator_options": (("bogus", 1),)}, "algo.estimator_options=.*unknown option"),
    ({"rollout.sampler.temperature": 0.0}, "rollout.sampler.temperature=0.0 must be a finite number > 0"),
    ({"rollout.prompts": 0}, "rollout.prompts=0 must be an int >= 1"),
    ({"eval.interval": 5, "eval.ks": (1, 16)}, "eval.ks has k=16 outside \\[1, eval.sampler.n/2=4\\]"),
    ({"eval.interval": 5, "eval.dataset": ""}, "eval.interval > 0 needs"),
    ({"eval.interval": 5, "eval.sampler.top_p": 2.0}, "eval.sampler.top_p must lie in \\(0, 1\\]"),
    ({"eval.interval": 5, "eval.sampler.temperature": -1.0}, "eval.sampler.temperature must be a finite float >= 0"),
    ({"eval.interval": 5, "eval.batch_size": 0}, "eval.batch_size=0 must be an int >= 1"),
    ({"data.prompt_format": "xml"}, "prompt_format"),
    ({"data.chat": "auto"}, "data.chat='auto' must be True, False or None"),
    ({"model.logprob_chunk": 0}, "model.logprob_chunk=0 must be an int >= 1"),
    ({"eval.at_end": "no"}, "eval.at_end='no'"),
])
def test_bad_fields_fail_on_construction(tmp_path, change, message):
    cfg = small_config(str(tmp_path / "no_such_model"), "", tmp_path / "out")
    with pytest.raises(ValueError, match=message):
        replace_fields(cfg, change)


@pytest.mark.parametrize("change, message", [   # checks that need the devices (or the run's paths)
    ({"rollout.prompts": 3, "optim.micro_batches": 2}, "micro_batches=2 does not divide the 3 prompts"),
    ({"rollout.prompts": 3, "rollout.sampler": SamplerSettings(n=2, max_new_tokens=12)},
     "not divisible across the data\\*fsdp=8"),
    ({"mesh.data": 3}, "does not divide the 8 devices"),
    ({"output_dir": ""}, "output_dir is empty"),
])
def test_bad_configs_fail_before_loading_or_compiling(tmp_path, monkeypatch, change, message):
    cfg = replace_fields(small_config(str(tmp_path / "no_such_model"), "", tmp_path / "out"), change)

    def no_compile(*args, **kwargs):
        raise AssertionError("jax.jit called before the config was validated")

    monkeypatch.setattr(jax, "jit", no_compile)
    with pytest.raises(ValueError, match=message):
        cfg.require_paths()
        cfg.validate(num_devices=8)
    with pytest.raises(ValueError, match=message):   # run() validates before anything else
        rl_loop.run(cfg)
    with pytest.raises(TypeError, match="takes a RunConfig"):   # the library takes no ConfigDict
        from maxk_jax.rl.config_dict import to_config_dict
        rl_loop.run(to_config_dict(cfg))


# ------------------------------------------------------------------ with the model ----------

def test_rollout_logprobs_match_training_forward_under_truncation(tiny_ckpt, problems_file):
    """Sampler log-probs (T = 0.7, top-p 0.9, top-k 20) == the train step's policy log-probs at
    iteration 0: the training forward uses the same temperature and truncation."""
    from maxk_jax.runtime import sharding
    from maxk_jax.data import load_problems
    from maxk_jax.execution import make_executor
    from maxk_jax.models import convert
    from maxk_jax.models.tokenizer import load_tokenizer

    config, params = convert.load_hf(tiny_ckpt)
    tok = load_tokenizer(tiny_ckpt)
    sampler = SamplerSettings(n=4, max_new_tokens=12, temperature=0.7, top_p=0.9, top_k=20)
    smp = Sampler.create(config, params, tok, sampler, eos_ids=(tok.eos_token_id,), pad_id=tok.pad_token_id,
                         prompt_format="statement")
    with make_executor("embedded:2") as ex:
        ro = rollout.collect(smp, load_problems(problems_file)[:2], ex, jax.random.key(0))
        binary = rollout.collect(smp, load_problems(problems_file)[:2], ex, jax.random.key(0), reward="binary")
        with pytest.raises(ValueError, match="reward='pass' is not one of"):
            rollout.collect(smp, load_problems(problems_file)[:2], ex, jax.random.key(0), reward="pass")
    # the same samples; the batch trains on 1 / 0 for all tests passed, the metrics keep the fraction
    np.testing.assert_array_equal(binary.batch.tokens, ro.batch.tokens)
    np.testing.assert_array_equal(binary.rewards, ro.rewards)
    np.testing.assert_array_equal(binary.batch.rewards, (ro.passed == ro.total).reshape(-1).astype(np.float32))
    sp = ro.batch.tokens.shape[1] - 12
    assert ro.batch.tokens.shape[0] == 8 and sp >= 16 and sp & (sp - 1) == 0   # power-of-two bucket
    assert ro.valid.all() and ro.rewards.shape == (2, 4)
    ids = ro.batch.answer_ids.reshape(2, 4)   # from behaviour fingerprints: dense per prompt, -1 = unknown
    np.testing.assert_array_equal(ids, ro.answer_ids)
    assert ids.min() >= -1 and ids.max() < 4
    for row_ids, row_r in zip(ids, ro.rewards):   # same behaviour => same verdicts => same reward
        assert all(row_r[j] == row_r[i] for i in range(4) for j in range(4) if row_ids[i] == row_ids[j] >= 0)
    assert rollout.rollout_metrics(ro, ks=(1,))["samples/behaviour_unknown"] == float(np.sum(ids < 0))
    cfg = training.StepConfig(estimator="grpo", k=2, sampler=sampler)
    mesh = sharding.make_mesh(1, 1, 1, devices=jax.devices()[:1])
    import optax
    _, sh = training.abstract_train_state(config, optax.sgd(1.0), mesh)
    lp = training.make_logprob_fn(config, cfg, mesh, sh.params)(params, sharding.shard_batch(ro.batch, mesh))
    mask = ro.batch.completion_mask
    np.testing.assert_allclose(np.asarray(lp)[mask], ro.batch.old_logp[mask], atol=1e-4)


def _run_train(cfg_args, out_dir, resume=False):
    cmd = [sys.executable, "-m", "experiments.train", "--config=experiments/configs/tiny_synthetic.py",
           "--progress=false", *cfg_args] + (["--resume"] if resume else [])
    return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "XLA_FLAGS": xla_flags(2)})


def _args(tiny_ckpt, problems_file, out_dir):
    return [f"--config.model.path={tiny_ckpt}", f"--config.output_dir={out_dir}",
            "--config.data.dataset=", f"--config.data.problems={problems_file}",
            "--config.rollout.prompts=2", "--config.rollout.sampler.n=4", "--config.rollout.sampler.max_new_tokens=12",
            "--config.rollout.executor=embedded:2", "--config.algo.k=2", "--config.max_steps=4",
            "--config.checkpoint.interval=2", "--config.log.tensorboard=false", "--config.mesh.data=-1",
            "--config.eval.interval=2", "--config.eval.dataset=", f"--config.eval.problems={problems_file}",
            "--config.eval.limit=2", "--config.eval.sampler.n=4", "--config.eval.ks=(1,2)",
            "--config.eval.sampler.max_new_tokens=8"]


STALE = ["--config.rollout.max_staleness=2", "--config.algo.stale_correction=behaviour",
         "--config.algo.estimator_options=(('baseline','loo1'),('scale','loo_rms'))",
         "--config.algo.loss.kind=is_weighted"]


@pytest.mark.slow
@pytest.mark.parametrize("extra", [[], STALE], ids=["synchronous", "stale2"])
def test_sigkill_and_resume_reproduces_uninterrupted_run(warm_ckpt, problems_file, tmp_path, extra):
    """SIGKILL after checkpoint 2, resume: the metrics of the uninterrupted run, bit for bit -- with
    asynchronous rollouts too (s = 2: batches 2 and 3, sampled from weights 0 and 1 before the kill,
    come back from the checkpoint's in-flight file)."""
    full_dir, cut_dir = tmp_path / "full", tmp_path / "cut"
    full = _run_train(_args(warm_ckpt, problems_file, full_dir) + extra, full_dir)
    cut = _run_train(_args(warm_ckpt, problems_file, cut_dir) + extra, cut_dir)
    deadline = time.time() + 900
    while not (cut_dir / "checkpoints" / "2").is_dir():          # committed step 2 (atomic rename)
        assert cut.poll() is None, cut.stdout.read()
        assert time.time() < deadline
        time.sleep(0.2)
    os.kill(cut.pid, signal.SIGKILL)
    cut.wait()
    assert cut.returncode == -signal.SIGKILL
    out, _ = full.communicate(timeout=900)
    assert full.returncode == 0, out
    resumed = _run_train(_args(warm_ckpt, problems_file, cut_dir) + extra, cut_dir, resume=True)
    out2, _ = resumed.communicate(timeout=900)
    assert resumed.returncode == 0, out2
    a = [deterministic(r) for r in read_metrics(full_dir / "metrics.jsonl")]
    b = [deterministic(r) for r in read_metrics(cut_dir / "metrics.jsonl")]
    assert [r["step"] for r in a] == [r["step"] for r in b] == [1, 2, 3, 4]
    assert a == b
    rewards = [r["reward/mean"] for r in a]
    assert all(r["ppo/advantage_std"] > 0 for r in a), rewards   # non-trivial estimator input
    assert all(r["ppo/it1/is_log_ratio_abs_max"] > 0 for r in a)
    assert [r["step"] for r in a if "eval/max_at_k/2" in r] == [2, 4]    # periodic evaluation
    assert (cut_dir / "eval" / "step_4" / "summary.json").is_file()
    from maxk_jax.runtime.checkpoint import Checkpointer
    with Checkpointer(full_dir / "checkpoints", read_only=True) as c1, \
            Checkpointer(cut_dir / "checkpoints", read_only=True) as c2:
        assert c1.all_steps() == c2.all_steps() == [2, 4]
    meta = json.loads((cut_dir / "config.json").read_text())
    from experiments.configs import base   # the run's method: the configs' default
    assert meta["algo"]["estimator"] == base.METHODS[base.DEFAULT_METHOD].estimator == "maxk_offpolicy_exact"
    if extra:
        assert [r["rollout/weight_version"] for r in a] == [0, 0, 0, 1]
        assert sorted(os.listdir(cut_dir / "in_flight")) == ["2.host0.pkl", "4.host0.pkl"]


def test_setup_and_one_rl_step_alone(tiny_ckpt, problems_file, tmp_path, monkeypatch):
    """The loop's parts without `run`: `setup` builds the context once, `rl_step` advances the
    state by one rollout and ``algo.ppo_iterations`` optimizer updates and returns the metrics."""
    import contextlib

    # the random tiny model solves nothing: reward every other sample 1 so the update has a signal
    # (with all rewards 0 the advantages are 0 and only float noise, or nothing, moves the policy)
    judged = rollout._rewards

    def every_other_sample_solved(results):
        rewards, passed, total = judged(results)
        return np.where(np.arange(rewards.shape[1]) % 2 == 1, 1.0, rewards), passed, total

    monkeypatch.setattr(rollout, "_rewards", every_other_sample_solved)
    cfg = small_config(tiny_ckpt, problems_file, tmp_path / "out", max_steps=3)
    with contextlib.ExitStack() as stack:
        ctx = rl_loop.setup(cfg, stack)
        assert (ctx.start, ctx.total, len(ctx.problems)) == (0, 3, 6)
        assert ctx.sampler.settings.n == 4 and ctx.sampler.params is None and ctx.logger is not None and ctx.eval_fn is None
        state, rng, metrics = rl_loop.rl_step(ctx, 0, ctx.state, ctx.rng)
        assert int(state.step) == cfg.algo.ppo_iterations
        assert not np.array_equal(jax.random.key_data(rng), jax.random.key_data(ctx.rng))
        assert metrics["samples/judged"] == 2 * 4 and metrics["data/position"] == 2.0
        assert {"reward/mean", "ppo/loss", "ppo/it0/grad_norm", "time/train_s"} <= set(metrics)
        # π_old from the trainer (default): iteration 0 is exactly on-policy
        assert metrics["ppo/it0/is_log_ratio_abs_max"] == 0.0
        assert metrics["ppo/it0/ratio_min"] == metrics["ppo/it0/ratio_max"] == 1.0
        assert metrics["ppo/it0/advantage_nonzero_fraction"] > 0.0 and metrics["ppo/it0/grad_norm"] > 1e-4
        assert metrics["ppo/it1/is_log_ratio_abs_max"] > 1e-4
        mean, worst = metrics["rollout/logprob_mismatch_mean"], metrics["rollout/logprob_mismatch_max"]
        assert 0.0 <= mean <= worst < 1e-3 and "ppo/logprob_mismatch_mean" not in metrics
    assert (tmp_path / "out" / "config.json").is_file()


def test_a_rollout_sub_mesh_beside_the_learners(tiny_ckpt, problems_file, tmp_path):
    """rollout.devices=4 of 8: the train state lives on the first 4 devices, every rollout copy
    (the producer's and the in-loop evaluation's) on the last 4, batch t from version max(0, t - 1)."""
    import contextlib

    cfg = small_config(tiny_ckpt, problems_file, tmp_path / "out", max_steps=3, **{
        "rollout.devices": 4, "rollout.max_staleness": 1, "eval.interval": 3, "eval.dataset": "",
        "eval.problems": problems_file, "eval.limit": 2, "eval.sampler.n": 2, "eval.sampler.max_new_tokens": 0})
    devices = jax.devices()
    copies = []
    with contextlib.ExitStack() as stack:
        ctx = rl_loop.setup(cfg, stack)
        assert set(ctx.mesh.devices.flat) == set(devices[:4])
        assert set(ctx.rollout_layout.mesh.devices.flat) == set(devices[4:]) == set(ctx.sampler.mesh.devices.flat)
        layout_copy = ctx.rollout_layout.copy

        def spy(params):
            out = layout_copy(params)
            copies.append({d for leaf in jax.tree.leaves(out) for d in leaf.sharding.device_set})
            return out

        ctx.rollout_layout = dataclasses.replace(ctx.rollout_layout, jitted_copy=spy)
        ctx.eval_fn = rl_loop.make_eval_fn(cfg, rl_loop.problems_of_eval(cfg, ctx.tokenizer), ctx.executor,
                                           ctx.rollout_layout, ctx.sampler)
        state, rng, records = ctx.state, ctx.rng, []
        for step in range(3):
            state, rng, metrics = rl_loop.rl_step(ctx, step, state, rng)
            records.append(metrics)
        assert {d for leaf in jax.tree.leaves(state.params) for d in leaf.sharding.device_set} == set(devices[:4])
    assert [r["rollout/weight_version"] for r in records] == [0, 0, 1]
    assert len(copies) == 3 and all(c == set(devices[4:]) for c in copies)   # versions 0, 1 + the evaluation
    assert "eval/max_at_k/1" in records[2] and np.isfinite(records[2]["ppo/loss"])


@pytest.mark.slow
def test_a_rollout_sub_mesh_trains_as_the_same_meshes_on_a_machine_of_their_own(tiny_ckpt, problems_file, tmp_path):
    """8 devices with rollout.devices=4 (learner on 4, rollout copy sent to the other 4) gives the
    metrics of a 4-device process whose learner and rollout share its 4 devices: the same two
    programs on the same mesh shapes; only where they run differs."""
    from tests.runtime.test_multihost import assert_same_metrics, finish, start, train_args

    args = lambda out: [a.replace("--config.max_steps=2", "--config.max_steps=3") for a in  # noqa: E731
                        train_args(tiny_ckpt, problems_file, out)] + ["--config.rollout.max_staleness=1"]
    cache = str(tmp_path / "cache")
    sub, own = tmp_path / "sub", tmp_path / "own"
    finish(start("experiments.train", args(sub) + ["--config.rollout.devices=4"], processes=1, devices=8,
                 cache=cache, distributed=None)
           + start("experiments.train", args(own), processes=1, devices=4, cache=cache, distributed=None))
    a, b = read_metrics(sub / "metrics.jsonl"), read_metrics(own / "metrics.jsonl")
    assert [r["rollout/weight_version"] for r in a] == [0, 0, 1]
    assert_same_metrics(a, b)
    assert [r["reward/mean"] for r in a] == [r["reward/mean"] for r in b]   # the same samples


@pytest.mark.parametrize("devices, message", [(8, "leaves no device of the 8 of this process to the learner"),
                                               (3, "does not divide")])
def test_rollout_devices_are_checked_against_the_machine(tmp_path, devices, message):
    cfg = small_config(str(tmp_path / "m"), "", tmp_path / "out", **{"rollout.devices": devices, "mesh.data": 2})
    with pytest.raises(ValueError, match=message):
        cfg.validate(8)


@pytest.mark.slow
def test_sampler_behaviour_logprobs_keep_the_samplers_pi_old(tiny_ckpt, problems_file, tmp_path):
    """algo.behaviour_logprobs="sampler": π_old = the sampler's log-probs, so the iteration-0
    log-ratio is the sampler-vs-trainer float error (bounded by T x the per-token mismatch), and
    the mismatch logged is the same quantity as with "trainer" (same rollout, same weights)."""
    import contextlib

    out = {}
    for source in ("sampler", "trainer"):
        cfg = small_config(tiny_ckpt, problems_file, tmp_path / source, max_steps=1,
                           **{"algo.behaviour_logprobs": source})
        with contextlib.ExitStack() as stack:
            ctx = rl_loop.setup(cfg, stack)
            out[source] = rl_loop.rl_step(ctx, 0, ctx.state, ctx.rng)[2]
    s, t = out["sampler"], out["trainer"]
    for key in ("rollout/logprob_mismatch_mean", "rollout/logprob_mismatch_max", "reward/mean"):
        assert s[key] == t[key], key
    assert 0.0 < s["ppo/it0/is_log_ratio_abs_max"] <= 12 * s["rollout/logprob_mismatch_max"] * (1 + 1e-5)
    assert t["ppo/it0/is_log_ratio_abs_max"] == 0.0


def test_load_problem_set_passes_the_typed_loader_options(tmp_path, monkeypatch):
    """``data.options`` (name, value) pairs reach the dataset loader as keyword options; an option the
    loader lacks is named."""
    import datasets

    from maxk_jax.rl.run_config import DataSettings
    from tests.pipelines.fixtures import MBPP_TRAIN

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf_cache"))
    (tmp_path / "mbpp").mkdir()
    (tmp_path / "mbpp" / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in MBPP_TRAIN))
    spec = DataSettings(dataset="mbpp", path=str(tmp_path / "mbpp"), split="train",
                        options=(("include_challenge_tests", True),))
    assert [p.id for p in rl_loop.load_problem_set(spec, tokenizer=None)][:1] == ["mbpp/601"]
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['bogus'\] for dataset 'mbpp'"):
        rl_loop.load_problem_set(replace_fields(spec, {"options": (("bogus", 1),)}), tokenizer=None)


class _DownJudge:
    """An executor whose every result is an infrastructure failure (an unreachable judge)."""

    def __init__(self, fail_calls: int | None = None) -> None:
        self.calls, self.fail_calls = 0, fail_calls

    def judge(self, submissions):
        self.calls += 1
        down = self.fail_calls is None or self.calls <= self.fail_calls
        return [{"id": s["id"], "status": "sandbox_error" if down else "ok", "reward": None if down else 0.0,
                 "passed": 0, "total": 1, "tests": []} for s in submissions]

    def close(self):
        pass


def test_fully_masked_steps_stop_the_run(tiny_ckpt, problems_file, tmp_path):
    """Every sample masked for a whole step is an error naming the executor and the statuses
    (default: the first such step); ``rollout.masked_steps_tolerated`` allows that many in a row."""
    cfg = small_config(tiny_ckpt, problems_file, tmp_path / "a", max_steps=2, **{"rollout.sandbox_retries": 0})
    with pytest.raises(rl_loop.MaskedRolloutError,
                       match=r"RL step 1: all 8 samples masked \(statuses: sandbox_error 8\) for 1 step\(s\) in a row: "
                             r"the judge 'embedded:2' gave no reward"):
        rl_loop.run(cfg, executor=_DownJudge(), progress=False)


@pytest.mark.slow
def test_masked_steps_tolerated(tiny_ckpt, problems_file, tmp_path):
    cfg = small_config(tiny_ckpt, problems_file, tmp_path / "b", max_steps=2,
                       **{"rollout.sandbox_retries": 0, "rollout.masked_steps_tolerated": 1})
    record = rl_loop.run(cfg, executor=_DownJudge(fail_calls=1), progress=False)   # step 1 masked, step 2 judged
    assert record["step"] == 2 and record["samples/masked"] == 0


def test_each_process_keeps_its_last_rollout_devices(tmp_path):
    from types import SimpleNamespace

    devices = [SimpleNamespace(process_index=p, id=4 * p + i) for p in (0, 1) for i in range(4)]
    cfg = small_config(str(tmp_path / "m"), "", tmp_path / "out", **{"rollout.devices": 1})
    learner, own = cfg.device_split(devices)
    assert [d.id for d in learner] == [0, 1, 2, 4, 5, 6]    # every process's first 3
    assert [d.id for d in own] == [3]                        # this process's (0) last one
    learner, own = replace_fields(cfg, {"rollout.devices": 0}).device_split(devices)
    assert learner == devices and own is None


def test_a_reward_function_trains_on_the_arithmetic_task(tiny_ckpt, tmp_path):
    """``rollout.executor="reward:module:function"`` (train's --reward): the RL loop's judge is the
    Python function, called on the raw completions of the arithmetic questions; its rewards are the
    step's rewards, and the step trains and checkpoints as with the code judge."""
    from tests.rl import fixtures

    fixtures.SCORED.clear()
    cfg = small_config(tiny_ckpt, "", tmp_path / "out", max_steps=1, **{
        "data.dataset": "arithmetic", "data.options": (("num_problems", 8), ("max_operand", 9)),
        "rollout.executor": "reward:tests.rl.fixtures:recorded_closeness_reward", "algo.ppo_iterations": 1})
    record = rl_loop.run(cfg, progress=False)
    assert record["step"] == 1 and record["samples/judged"] == 8 and record["status/ok"] == 8
    assert record["samples/masked"] == 0
    assert len(fixtures.SCORED) == 8 and all(pid.startswith("arithmetic/train/") for pid, _, _ in fixtures.SCORED)
    assert record["reward/mean"] == pytest.approx(np.mean([r for _, _, r in fixtures.SCORED]))
    assert np.isfinite(record["ppo/loss"])
    from maxk_jax.runtime.checkpoint import Checkpointer
    with Checkpointer(tmp_path / "out" / "checkpoints", read_only=True) as saved:
        assert saved.all_steps() == [1]
