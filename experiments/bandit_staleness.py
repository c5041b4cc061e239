"""Tang et al.'s Figure-1 bandit trained on stale batches, where the true max@k is known.

    .venv/bin/python -m experiments.bandit_staleness                      # a few minutes on 2 cores
    .venv/bin/python -m experiments.bandit_staleness --smoke              # seconds (the test's run)

Bandit (as experiments/bandit.py): |Y| = ``--num_arms`` arms with rewards drawn once from N(0, 1),
softmax policy π_θ over free logits from θ = 0.  Every update draws ``--prompts`` rows of n samples
from the policy of s updates ago (μ = π_θ_{t−s}; the first s updates use θ_0), forms the train
step's three log-ratios (π_old = π_θ: one update per batch, PPO iteration 0) and the coefficients of
``maxk_jax.rl.staleness.corrected_coefficients`` -- the train step's own path -- and takes
θ ← θ + lr · (1/P) Σ_rows Σ_i c_i ∇ log π_θ(y_i).  Curves (`CURVES`), each at s ∈ ``--staleness``:

  unbiased/none       eq. 10 with the LOO-1 baseline and the leave-one-row-out RMS scale
                      (``maxk_offpolicy_exact_loo1_rms``), stale data treated as on-policy;
  unbiased/tis        the same, coefficients times min(π_θ/μ, 2) (per-sample truncated IS);
  unbiased/behaviour  the same estimator with δ = log π_θ/μ (eq. 10's weights correct the staleness);
  zscore/behaviour    the paper's z-scored eq. 10 (clamp_delta 1.0) with δ = log π_θ/μ.
At s = 0 the three unbiased curves coincide (μ = π_θ).  Metrics, exact, after every update: max@k of
the policy (E[max of k draws]); the cosine between the update and the exact ∇ max@k; the effective
sample size fraction of the weights π_θ/μ per row.  Outputs in ``--out_dir``: bandit_staleness.png
(max@k against updates, mean ± 1 s.e. over seeds) and bandit_staleness.json (per-curve means, s.d.,
s.e., per-seed finals, the configuration).
"""
from __future__ import annotations

import functools
import json
import pathlib
import time
from typing import Any, Sequence

from absl import app, flags
import jax
import jax.numpy as jnp
import numpy as np

from maxk_jax.estimators import get_estimator
from maxk_jax.rl import staleness

FLAGS = flags.FLAGS
# name -> (estimator options of maxk_offpolicy_exact, correction)
CURVES = {"unbiased/none": (dict(baseline="loo1", scale="loo_rms", clamp_delta=None), "none"),
          "unbiased/tis": (dict(baseline="loo1", scale="loo_rms", clamp_delta=None), "tis"),
          "unbiased/behaviour": (dict(baseline="loo1", scale="loo_rms", clamp_delta=None), "behaviour"),
          "zscore/behaviour": (dict(baseline="zscore"), "behaviour")}


def max_at_k(logits: jax.Array, rewards: jax.Array, k: int) -> jax.Array:
    """Exact E[max of k i.i.d. draws from softmax(logits)]: [A], [A] -> scalar."""
    order = jnp.argsort(rewards)
    p = jax.nn.softmax(logits)[order]
    cdf = jnp.clip(jnp.cumsum(p), 0.0, 1.0)
    return jnp.sum(rewards[order] * (cdf ** k - jnp.clip(cdf - p, 0.0, 1.0) ** k))


def run_seed(key: jax.Array, s: jax.Array, rewards: jax.Array, *, estimator, correction: str, k: int,
             n: int, prompts: int, lr: float, steps: int, max_s: int) -> dict[str, jax.Array]:
    """One run at staleness s (traced, <= max_s): per-update max@k, cos(update, ∇max@k), ESS fraction [steps]."""
    arms = rewards.shape[0]
    grad_true = jax.grad(lambda th: max_at_k(th, rewards, k))

    def step(carry, step_key):
        history, t = carry                                        # history [max_s + 1, A]: θ_t, θ_{t-1}, ...
        theta, theta_mu = history[0], history[jnp.minimum(s, t)]
        ys = jax.random.categorical(step_key, theta_mu, shape=(prompts, n))
        lp, lp_mu = jax.nn.log_softmax(theta)[ys], jax.nn.log_softmax(theta_mu)[ys]
        log_w = lp - lp_mu                                        # π_old = π_θ: log π_old/μ = log π_θ/μ
        coef = staleness.corrected_coefficients(
            estimator, rewards[ys], k=k, correction=correction, tis_cap=2.0, log_ratio_old=jnp.zeros_like(lp),
            log_w=log_w, to_behaviour=log_w, mask=jnp.ones(ys.shape, bool), answer_ids=ys)
        counts = jnp.zeros(arms).at[ys.reshape(-1)].add(coef.reshape(-1))
        update = (counts - jnp.sum(coef) * jax.nn.softmax(theta)) / prompts
        g = grad_true(theta)
        cos = update @ g / jnp.maximum(jnp.linalg.norm(update) * jnp.linalg.norm(g), 1e-30)
        ess = jnp.mean(staleness.row_ess_fraction(log_w, jnp.ones(ys.shape, bool)))
        new = theta + lr * update
        history = jnp.concatenate([new[None], history[:-1]], axis=0)
        return (history, t + 1), dict(max_at_k=max_at_k(new, rewards, k), cos=cos, ess=ess,
                                      update_norm=jnp.linalg.norm(update))

    history = jnp.zeros((max_s + 1, arms))
    _, out = jax.lax.scan(step, (history, jnp.int32(0)), jax.random.split(key, steps))
    return out


def run_curve(name: str, staleness_values: Sequence[int], cfg: dict[str, Any]) -> dict[str, np.ndarray]:
    """All seeds x staleness values of one curve: {metric: [S_values, seeds, steps]}."""
    options, correction = CURVES[name]
    rewards = jax.random.normal(jax.random.PRNGKey(cfg["bandit_seed"]), (cfg["num_arms"],))
    fn = functools.partial(run_seed, rewards=rewards, estimator=get_estimator("maxk_offpolicy_exact", **options),
                           correction=correction, k=cfg["k"], n=cfg["n"], prompts=cfg["prompts"], lr=cfg["lr"],
                           steps=cfg["steps"], max_s=max(staleness_values))
    keys = jax.random.split(jax.random.PRNGKey(cfg["seed"]), cfg["seeds"])
    svals = jnp.asarray(staleness_values, jnp.int32)
    out = jax.jit(jax.vmap(jax.vmap(fn, in_axes=(0, None)), in_axes=(None, 0)))(keys, svals)
    return {m: np.asarray(v, np.float64) for m, v in out.items()}


def summarise(curves: dict[str, dict[str, np.ndarray]], staleness_values: Sequence[int]) -> dict[str, Any]:
    """Per (curve, s): final max@k mean / s.d. / s.e. over seeds, per-seed finals, mean curve, mean
    cos(update, ∇max@k), ESS fraction, update norm; and the gap to the curve's family at s = 0."""
    out: dict[str, Any] = {}
    for name, res in curves.items():
        for i, s in enumerate(staleness_values):
            m = res["max_at_k"][i]                                    # [seeds, steps]
            final = m[:, -1]
            out[f"{name}@s{s}"] = dict(
                curve=name, s=int(s), final_mean=float(final.mean()), final_sd=float(final.std(ddof=1)),
                final_se=float(final.std(ddof=1) / np.sqrt(len(final))), final_per_seed=final.tolist(),
                auc_mean=float(m.mean()), mean_curve=m.mean(axis=0).tolist(),
                se_curve=(m.std(axis=0, ddof=1) / np.sqrt(m.shape[0])).tolist(),
                cos_mean=float(np.nanmean(res["cos"][i])), ess_mean=float(res["ess"][i].mean()),
                update_norm_mean=float(res["update_norm"][i].mean()))
    for key, row in out.items():
        sync = out[f"{row['curve'].split('/')[0]}/behaviour@s0"]
        row["final_minus_sync"] = row["final_mean"] - sync["final_mean"]
        row["auc_minus_sync"] = row["auc_mean"] - sync["auc_mean"]
    return out


def markdown(summary: dict[str, Any]) -> str:
    """Table: one row per (curve, s)."""
    lines = ["| curve | s | final max@k (mean ± s.e.) | s.d. over seeds | final − sync | mean max@k over updates − sync "
             "| mean cos(update, ∇max@k) | ESS fraction | mean update norm |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row in summary.values():
        lines.append(f"| {row['curve']} | {row['s']} | {row['final_mean']:.3f} ± {row['final_se']:.3f} | "
                     f"{row['final_sd']:.3f} | {row['final_minus_sync']:+.3f} | {row['auc_minus_sync']:+.3f} | "
                     f"{row['cos_mean']:.3f} | {row['ess_mean']:.3f} | {row['update_norm_mean']:.2f} |")
    return "\n".join(lines)


def plot(summary: dict[str, Any], path: pathlib.Path) -> None:
    """max@k against updates, one panel per curve, one line per s (mean ± 1 s.e.)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(CURVES)
    fig, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names), 3.6), sharey=True)
    for ax, name in zip(axes, names):
        for row in (r for r in summary.values() if r["curve"] == name):
            mean, se = np.asarray(row["mean_curve"]), np.asarray(row["se_curve"])
            x = np.arange(1, len(mean) + 1)
            ax.plot(x, mean, label=f"s = {row['s']}")
            ax.fill_between(x, mean - se, mean + se, alpha=0.2)
        ax.set_title(name)
        ax.set_xlabel("update")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("true max@k of the policy")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def config_from_flags() -> dict[str, Any]:
    """The run's settings (the --smoke preset overrides steps, seeds, arms and staleness values)."""
    cfg = dict(num_arms=FLAGS.num_arms, k=FLAGS.k, n=FLAGS.n, prompts=FLAGS.prompts, lr=FLAGS.lr, steps=FLAGS.steps,
               seeds=FLAGS.seeds, seed=FLAGS.seed, bandit_seed=FLAGS.bandit_seed,
               staleness=[int(s) for s in FLAGS.staleness])
    if FLAGS.smoke:
        cfg.update(num_arms=10, steps=6, seeds=2, staleness=[0, 1])
    if cfg["staleness"][0] != 0 or any(s < 0 for s in cfg["staleness"]):
        raise ValueError(f"--staleness={cfg['staleness']} must start with 0 (the synchronous curve) and be >= 0")
    if not 1 <= cfg["k"] <= cfg["n"] or cfg["prompts"] < 2:
        raise ValueError(f"need 1 <= k <= n and prompts >= 2 (the scale leaves one row out), got k={cfg['k']}, "
                         f"n={cfg['n']}, prompts={cfg['prompts']}")
    return cfg


def main(argv: Sequence[str]) -> None:
    del argv
    cfg = config_from_flags()
    out_dir = pathlib.Path(FLAGS.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    start = time.time()
    curves = {name: run_curve(name, cfg["staleness"], cfg) for name in CURVES}
    summary = summarise(curves, cfg["staleness"])
    text = markdown(summary)
    print(text)
    (out_dir / "bandit_staleness.json").write_text(json.dumps(
        dict(config=cfg, seconds=time.time() - start, summary=summary), indent=1), encoding="utf-8")
    plot(summary, out_dir / "bandit_staleness.png")
    print(f"wrote {out_dir}/bandit_staleness.{{json,png}} in {time.time() - start:.0f} s")


def define_flags() -> None:
    """The command-line flags (registered by ``__main__`` only)."""
    flags.DEFINE_integer("num_arms", 100, "Number of bandit arms |Y| (rewards ~ N(0, 1)).")
    flags.DEFINE_integer("k", 4, "k of max@k (training and the exact metric).")
    flags.DEFINE_integer("n", 8, "Samples per row.")
    flags.DEFINE_integer("prompts", 4, "Independent rows per update (>= 2: the RMS scale leaves the row out).")
    flags.DEFINE_float("lr", 0.5, "Learning rate of the SGD step on the logits.")
    flags.DEFINE_integer("steps", 300, "Updates per run.")
    flags.DEFINE_integer("seeds", 8, "Runs per curve and staleness value.")
    flags.DEFINE_integer("seed", 0, "PRNG seed of the runs' samples.")
    flags.DEFINE_integer("bandit_seed", 0, "PRNG seed of the arm rewards.")
    flags.DEFINE_list("staleness", ["0", "1", "2", "4"], "Staleness values s (the first must be 0).")
    flags.DEFINE_bool("smoke", False, "A seconds-long run (10 arms, 6 updates, 2 seeds, s = 0, 1) for the test.")
    flags.DEFINE_string("out_dir", "docs/bandit_staleness", "Where to write bandit_staleness.{png,json}.")


if __name__ == "__main__":
    define_flags()
    app.run(main)
