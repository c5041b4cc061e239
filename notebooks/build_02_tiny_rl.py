"""Writes notebooks/02_tiny_rl.ipynb (outputs cleared). Run: .venv/bin/python notebooks/build_02_tiny_rl.py"""
from notebook_builder import NotebookBuilder

NB = NotebookBuilder()
md, code = NB.md, NB.code


md(r"""
# The tiny RL pipeline, step by step

The laptop-scale main job of `maxk_jax` (`python -m experiments.tiny_pipeline`), opened up:
synthetic programming problems with partial-credit tests -> a tiny Qwen2 with its own tokenizer ->
supervised warm-up -> sampling and sandboxed judging -> estimator coefficients (GRPO vs the
paper's off-policy max@k) -> PPO steps -> pass@k / max@k of the base and the trained model.

Everything here is deliberately **smaller** than the real run (a 2-layer 64-wide model, a few
hundred warm-up steps on easy problems, four RL steps) so the notebook finishes in about two minutes on a
CPU; the numbers it prints only show that each piece works. The calibrated run (a 0.9M-parameter
model warmed up to pass@1 ~0.15, 16 RL steps, n = 64) is `experiments/tiny_pipeline.py`; the
comparison of all methods of the paper's Table 2 is `experiments/compare_methods.py`.

**Colab:** set `REPO_URL` at the top of the first code cell to the repository's address and run all cells:
that cell clones the repository (unless the notebook already runs inside a checkout), pip-installs the
checkout and, as root, installs bubblewrap for the judge (`./setup.sh` does that locally).
""")

NB.colab_install(("bubblewrap",))


code(r"""
import dataclasses
import tempfile
import time

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

from maxk_jax import estimators, sampling
from maxk_jax.runtime import sharding
from maxk_jax.rl import rollout
from maxk_jax.rl import training
from maxk_jax.rl import warmup
from maxk_jax.data import synthetic, synthetic_solutions
from maxk_jax.eval.compare import compare_runs
from maxk_jax.eval.run import EvalOptions, evaluate
from maxk_jax.execution import make_executor
from maxk_jax.models import convert, qwen2, tiny
from maxk_jax.models.tokenizer import load_tokenizer

WORK = tempfile.mkdtemp(prefix="maxk_tiny_rl_")
executor = make_executor("embedded")   # bubblewrap sandbox, one worker per CPU
T0 = time.perf_counter()
print("jax", jax.__version__, "| devices:", jax.devices(), "| work dir:", WORK)
""")

md(r"""
## 1. Synthetic problems with partial credit

Each problem is a short pipeline of integer operations described in one sentence; 8 hidden
stdin/stdout tests. A program that is slightly wrong (a dropped clamp, `>` instead of `>=`, a
constant off by one) passes only *some* tests, so the reward -- the fraction of tests passed --
is continuous, which is what max@k is about.
""")

code(r"""
cfg = synthetic.SyntheticConfig(seed=0, num_train=400, num_test=8, max_ops=2, list_fraction=0.0)
train, test = synthetic.make_split(cfg)
# a problem with a near miss that gets partial credit
problem = next(p for p in train if any(0 < m.reward < 1 for m in synthetic_solutions.near_misses(p)))
print("statement:", problem.prompt)
print("canonical program:\n" + synthetic_solutions.canonical_solution(problem))
misses = synthetic_solutions.near_misses(problem)[:6]
codes = [synthetic_solutions.canonical_solution(problem)] + [m.code for m in misses]
results = executor.judge([problem.to_submission(c, str(i)) for i, c in enumerate(codes)])
print("\nprogram                expected reward   judged reward   verdicts")
for m, r in zip([None] + misses, results):
    label = "canonical" if m is None else m.mutation
    want = 1.0 if m is None else m.reward
    verdicts = "".join(t["verdict"][0] for t in r["tests"])
    print(f"{label:22s} {want:15.3f} {r['reward']:15.3f}   {verdicts}")
""")

md(r"""
## 2. A tokenizer and a tiny Qwen2

A byte-level BPE tokenizer trained on statements and programs, and a Qwen2-architecture model
(RMSNorm, RoPE, grouped-query attention, SwiGLU) with random weights, saved in Hugging Face format:
the same loading path (`convert.load_hf`, `AutoTokenizer`) as a real Qwen2.5 checkpoint.
""")

code(r"""
corpus = synthetic_solutions.tokenizer_corpus(train[:200], np.random.default_rng(0))
ckpt = tiny.build_tiny_checkpoint(f"{WORK}/base", corpus, seed=0, vocab_size=512, hidden_size=64,
                                  num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=256)
config, params = convert.load_hf(ckpt)
tok = load_tokenizer(ckpt)
prompt = warmup.chat_prompt_ids(tok, problem.prompt)
print(f"{qwen2.param_count(config):,} parameters, vocabulary {config.vocab_size}")
print(f"prompt: {len(prompt)} tokens -> {tok.decode(prompt)!r}")
""")

md(r"""
## 3. Supervised warm-up

Next-token cross-entropy on the answer tokens only (prompt tokens masked). To learn something in a
minute, this demo trains on the canonical program of each problem plus one near miss (30% of the
examples would be near misses in the real run, which also rewrites every program in random
equivalent styles -- `synthetic_solutions.noisy_solutions` -- and needs ~800 steps of a 0.9M model).
""")

code(r"""
rng = np.random.default_rng(1)
examples = [warmup.encode_example(tok, p.prompt, synthetic_solutions.canonical_solution(p)) for p in train]
examples += [warmup.encode_example(tok, p.prompt, s.code)
             for p in train for s in synthetic_solutions.sample_solutions(p, rng, 1, noise=1.0)]
print(len(examples), "examples, e.g.", repr(tok.decode(examples[-1].completion)))
""")

code(r"""
wcfg = warmup.WarmupConfig(steps=250, seed=0, batch_size=16, learning_rate=1e-2, lr_warmup_steps=15,
                           length_bucket=64)   # at most 2 batch shapes -> 2 compilations
result = warmup.run_warmup(config, params, examples, wcfg)
base_params = result.params
print(f"loss {result.losses[0]:.2f} -> {result.losses[-20:].mean():.3f} in {result.total_s:.0f} s")
plt.figure(figsize=(5, 3)); plt.plot(result.losses); plt.yscale("log")
plt.xlabel("step"); plt.ylabel("completion NLL"); plt.title("warm-up"); plt.show()
""")

md(r"""
## 4. One rollout: sample, extract, judge

`rollout.collect` samples n completions per prompt with a `sampling.Sampler` (model config, weights,
tokenizer, settings and prompt format held together; one shared-prefix prefill per prompt in
`maxk_jax.sampling.generate`, behaviour log-probs of the distribution actually sampled from),
judges the extracted programs in the sandbox and packs the training batch.
""")

code(r"""
settings = sampling.SamplerSettings(n=8, max_new_tokens=48, temperature=1.0, top_k=0, top_p=1.0)
sampler = sampling.Sampler.create(config, base_params, tok, settings, eos_ids=(tok.eos_token_id,),
                                  prompt_format="statement")
ro = rollout.collect(sampler, test[:4], executor, jax.random.key(1))
print("problem 0:", test[0].prompt)
print("sample 0:\n" + ro.texts[0][0])
print("\nrewards [4 problems x 8 samples]:\n", np.round(ro.rewards, 2))
""")

md(r"""
## 5. From rewards to gradient coefficients

GRPO z-scores the rewards (it pushes up everything above the mean: reward maximisation, max@1).
The paper's off-policy max@k estimator gives each sample its share of the expected best-of-k
reward, so only samples that can be the best of k subsets get credit.
""")

code(r"""
# one row with a spread of rewards (the rollout's rows are often all 0 for such a small model)
rewards = jnp.array([[0.0, 0.125, 0.25, 0.25, 0.5, 0.625, 0.875, 1.0]], jnp.float32)
zeros = jnp.zeros_like(rewards)
print(f"{'rewards':15s}", np.round(np.asarray(rewards[0]), 3))
for name in ("grpo", "bon_max_mean", "bon_max_second", "bon_mean", "maxk_offpolicy"):
    coef = estimators.get_estimator(name)(rewards, k=4, log_ratio=zeros)
    print(f"{name:15s}", np.round(np.asarray(coef[0]), 3))
best = int(np.argmax(np.nansum(ro.rewards, 1)))
row = jnp.asarray(np.nan_to_num(ro.rewards[best:best + 1]), jnp.float32)
print("\nrollout row", best, np.round(np.asarray(row[0]), 3))
print("maxk_offpolicy ", np.round(np.asarray(estimators.get_estimator("maxk_offpolicy")(row, k=4,
                                                                                    log_ratio=0 * row)[0]), 3))
""")

md(r"""
## 6. PPO steps with the off-policy max@k estimator

`training.make_train_step` builds one jit-compiled update (sharded over the available devices);
each PPO iteration recomputes the sequence log-ratios against the behaviour log-probs and feeds
them to the estimator, whose coefficients already contain the importance weights (IS-weighted
loss, never multiplied by the PPO ratio again).
""")

code(r"""
step_cfg = training.StepConfig(estimator="maxk_offpolicy", k=4, sampler=settings)   # no KL term
rl_steps, ppo_iterations = 4, 3
tx, _ = training.make_optimizer(3e-4, total_steps=rl_steps * ppo_iterations)
mesh = sharding.make_mesh(data=-1)
state, shardings = training.create_train_state(config, base_params, tx, mesh)
train_step = training.make_train_step(config, step_cfg, tx, mesh, shardings)
for s in range(rl_steps):
    ro = rollout.collect(sampler.replace(params=state.params), train[8 * s: 8 * s + 8], executor,
                         jax.random.key(100 + s))
    batch = sharding.shard_batch(ro.batch, mesh)
    for _ in range(ppo_iterations):
        state, m = train_step(state, batch)
    print(f"RL step {s + 1}: reward {np.nanmean(ro.rewards):.3f}, best-of-8 "
          f"{np.nanmean(np.nanmax(ro.rewards, 1)):.3f}, IS ratio max {float(m['is_ratio_max']):.3f}, "
          f"coef std {float(m['advantage_std']):.4f}")
""")

md(r"""
## 7. Evaluation: pass@k and max@k, base vs trained

Both models are sampled with the same per-sample keys (a paired comparison), judged, and scored
with the unbiased estimators; `compare_runs` adds paired Wilcoxon tests. At this size and with
this few RL steps the difference is noise -- the point is the machinery.
""")

code(r"""
eval_sampler = sampler.replace(settings=dataclasses.replace(settings, n=16))
options = EvalOptions(batch_size=128, progress=False)
runs = [evaluate(eval_sampler.replace(params=p), test, executor=executor, key=jax.random.key(7), options=options)
        for p in (base_params, state.params)]
comparison = compare_runs(runs, ["base", "trained"])
ks = comparison["ks"]
fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
for ax, metric in zip(axes, ("pass_at_k", "max_at_k")):
    for name in comparison["names"]:
        ax.plot(ks, [comparison["means"][name][metric][k] for k in ks], marker="o", label=name)
    ax.set_xscale("log", base=2); ax.set_xticks(ks, [str(k) for k in ks])
    ax.set(xlabel="k", title=metric.replace("_at_", "@")); ax.grid(alpha=0.3); ax.legend()
plt.show()
for metric in ("pass_at_k", "max_at_k"):
    print(metric, {name: [round(comparison["means"][name][metric][k], 3) for k in ks]
                   for name in comparison["names"]})
executor.close()
print(f"notebook ran in {time.perf_counter() - T0:.0f} s")
""")

md(r"""
## Next

* The calibrated main job: `.venv/bin/python -m experiments.tiny_pipeline` (report in
  `runs/tiny/report.md`, curves in `runs/tiny/curves.png`; `--method=grpo` etc.).
* All methods of the paper's Table 2 with several seeds: `.venv/bin/python -m experiments.compare_methods`.
""")


def main() -> None:
    """Writes notebooks/02_tiny_rl.ipynb with no outputs."""
    NB.write("02_tiny_rl.ipynb")


if __name__ == "__main__":
    main()
