"""Tang et al.'s Figure-1 bandit trained on stale batches, where the true max@k is known.

    .venv/bin/python -m experiments.bandit_staleness                      # ~25 s on 2 cores -> docs/results/
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
(max@k against updates, mean ± 1 s.e. over seeds) and bandit_staleness.json (per (curve, s): max@k
at ``--report_steps`` with 95% CIs and s.d., per-seed means over updates, mean curves; the config).
"""
from __future__ import annotations

import functools
import json
import pathlib
import time
from typing import Any, Sequence

from absl import app, flags
from maxk_jax import cli
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


def update_step(theta: jax.Array, theta_mu: jax.Array, uniforms: jax.Array, rewards: jax.Array, *, estimator,
                correction: str, k: int) -> tuple[jax.Array, dict[str, jax.Array]]:
    """One run's update from a batch of P rows of n samples ~ softmax(theta_mu), drawn by inverse
    CDF from `uniforms` [P, n] in [0, 1): logits [A], [A] -> (update [A], {cos: cos(update,
    ∇max@k), ess: mean per-row ESS fraction of π_θ/μ})."""
    prompts = uniforms.shape[0]
    cdf = jnp.cumsum(jax.nn.softmax(theta_mu))
    ys = jnp.minimum(jnp.sum(uniforms[..., None] >= cdf, axis=-1), rewards.shape[0] - 1)   # [P, n]
    lp, lp_mu = jax.nn.log_softmax(theta)[ys], jax.nn.log_softmax(theta_mu)[ys]
    log_w = lp - lp_mu                                            # π_old = π_θ: log π_old/μ = log π_θ/μ
    mask = jnp.ones(ys.shape, bool)
    coef = staleness.corrected_coefficients(
        estimator, rewards[ys], k=k, correction=correction, tis_cap=2.0, log_ratio_old=jnp.zeros_like(lp),
        log_w=log_w, to_behaviour=log_w, mask=mask, answer_ids=ys)
    counts = jnp.zeros(rewards.shape).at[ys.reshape(-1)].add(coef.reshape(-1))
    update = (counts - jnp.sum(coef) * jax.nn.softmax(theta)) / prompts  # (1/P) Σ c_i ∇ log π_θ(y_i)
    g = jax.grad(max_at_k)(theta, rewards, k)
    cos = update @ g / jnp.maximum(jnp.linalg.norm(update) * jnp.linalg.norm(g), 1e-30)
    return update, dict(cos=cos, ess=jnp.mean(staleness.row_ess_fraction(log_w, mask)))


def bandit_rewards(cfg: dict[str, Any]) -> jax.Array:
    """The arms' rewards [num_arms] ~ N(0, 1), drawn once from ``cfg["bandit_seed"]``."""
    return jax.random.normal(jax.random.PRNGKey(cfg["bandit_seed"]), (cfg["num_arms"],))


def make_step(name: str, cfg: dict[str, Any]):
    """jit(history [R, depth, A], t, s [R] int32, uniforms [R, P, n] -> (history, {metric: [R]})): one
    update of R runs of curve `name` at once, each at its own staleness s (history holds θ_t,
    θ_{t-1}, ..., θ_{t-depth+1}; depth = max(cfg["staleness"]) + 1).  One compile per curve; the
    updates are a host loop (a lax.scan over them let XLA unroll short scans around eq. 10's own
    scans: minutes of compile for a 6-step smoke; so did a vmapped jax.random.categorical, hence
    host-drawn uniforms)."""
    options, correction = CURVES[name]
    rewards = bandit_rewards(cfg)
    one = functools.partial(update_step, rewards=rewards, estimator=get_estimator("maxk_offpolicy_exact", **options),
                            correction=correction, k=cfg["k"])
    lr, k = cfg["lr"], cfg["k"]

    @functools.partial(jax.jit, compiler_options={"xla_backend_optimization_level": 0})   # compile > run time
    def step(history, t, s, uniforms):
        theta = history[:, 0]
        theta_mu = jnp.take_along_axis(history, jnp.minimum(s, t)[:, None, None], axis=1)[:, 0]
        update, metrics = jax.vmap(one)(theta, theta_mu, uniforms)
        new = theta + lr * update
        metrics.update(max_at_k=jax.vmap(max_at_k, in_axes=(0, None, None))(new, rewards, k),
                       update_norm=jnp.linalg.norm(update, axis=-1))
        return jnp.concatenate([new[:, None], history[:, :-1]], axis=1), metrics
    return step


def run_curve(name: str, staleness_values: Sequence[int], cfg: dict[str, Any]) -> dict[str, np.ndarray]:
    """All seeds x staleness values of one curve: {metric: [S_values, seeds, steps]} (the same
    seeds' sample keys at every s: common random numbers across s and across curves)."""
    seeds, steps = cfg["seeds"], cfg["steps"]
    step = make_step(name, cfg)
    s = jnp.asarray(np.repeat(np.asarray(staleness_values, np.int32), seeds))    # [R = S * seeds]
    uniforms = np.random.default_rng(cfg["seed"]).random((steps, seeds, cfg["prompts"], cfg["n"]), np.float32)
    history = jnp.zeros((s.shape[0], max(staleness_values) + 1, cfg["num_arms"]))
    out = []
    for t in range(steps):
        history, metrics = step(history, jnp.int32(t), s, jnp.tile(uniforms[t], (len(staleness_values), 1, 1)))
        out.append(metrics)
    return {m: np.stack([np.asarray(o[m], np.float64) for o in out], axis=-1).reshape(len(staleness_values), seeds, steps)
            for m in out[0]}


def _ci(x: np.ndarray) -> float:
    """Half-width of the normal-approximation 95% confidence interval of the mean of x [seeds]."""
    return float(1.96 * x.std(ddof=1) / np.sqrt(len(x)))


def summarise(curves: dict[str, dict[str, np.ndarray]], staleness_values: Sequence[int],
              report_steps: Sequence[int]) -> dict[str, Any]:
    """Per (curve, s): max@k after each of `report_steps` updates and after the last (mean, 95% CI
    half-width, s.d. over seeds), the mean max@k over all updates ("auc", per seed) and its paired
    difference to the curve's family at s = 0 (same seeds' samples: common random numbers), the
    mean cos(update, ∇max@k), ESS fraction and update norm over the first max(report_steps)
    updates (the learning phase), the mean curve and its s.e."""
    out: dict[str, Any] = {}
    early = max(report_steps)
    for name, res in curves.items():
        for i, s in enumerate(staleness_values):
            m = res["max_at_k"][i]                                    # [seeds, steps]
            at = {str(t): m[:, t - 1] for t in list(report_steps) + [m.shape[1]]}
            out[f"{name}@s{s}"] = dict(
                curve=name, s=int(s),
                max_at_k={t: dict(mean=float(v.mean()), ci95=_ci(v), sd=float(v.std(ddof=1))) for t, v in at.items()},
                auc_per_seed=m.mean(axis=1).tolist(), mean_curve=m.mean(axis=0).tolist(),
                se_curve=(m.std(axis=0, ddof=1) / np.sqrt(m.shape[0])).tolist(),
                cos_early=float(np.nanmean(res["cos"][i][:, :early])), ess_early=float(res["ess"][i][:, :early].mean()),
                update_norm_early=float(res["update_norm"][i][:, :early].mean()))
    for row in out.values():
        auc = np.asarray(row["auc_per_seed"])
        diff = auc - np.asarray(out[f"{row['curve'].split('/')[0]}/behaviour@s0"]["auc_per_seed"])
        row.update(auc=dict(mean=float(auc.mean()), ci95=_ci(auc), sd=float(auc.std(ddof=1))),
                   auc_minus_sync=dict(mean=float(diff.mean()), ci95=_ci(diff)))
    return out


def markdown(summary: dict[str, Any]) -> str:
    """Table: one row per (curve, s); mean ± 95% CI half-width over seeds."""
    steps = list(next(iter(summary.values()))["max_at_k"])
    head = ([f"max@k after {t} (± 95% CI)" for t in steps] + ["s.d. at " + steps[0], "mean max@k over updates",
            "s.d.", "− sync (paired)", f"cos(update, ∇max@k), first {max(map(int, steps[:-1]))}", "ESS fraction", "update norm"])
    lines = ["| curve | s | " + " | ".join(head) + " |", "|---|---:|" + "---:|" * len(head)]
    for row in summary.values():
        cells = [f"{row['max_at_k'][t]['mean']:.3f} ± {row['max_at_k'][t]['ci95']:.3f}" for t in steps]
        cells += [f"{row['max_at_k'][steps[0]]['sd']:.3f}", f"{row['auc']['mean']:.3f} ± {row['auc']['ci95']:.3f}",
                  f"{row['auc']['sd']:.3f}",
                  f"{row['auc_minus_sync']['mean']:+.3f} ± {row['auc_minus_sync']['ci95']:.3f}",
                  f"{row['cos_early']:.3f}", f"{row['ess_early']:.3f}", f"{row['update_norm_early']:.2f}"]
        lines.append(f"| {row['curve']} | {row['s']} | " + " | ".join(cells) + " |")
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
               staleness=[int(s) for s in FLAGS.staleness], report_steps=[int(t) for t in FLAGS.report_steps])
    if FLAGS.smoke:
        cfg.update(num_arms=10, steps=6, seeds=2, staleness=[0, 1], report_steps=[2, 4])
    return check_config(cfg)


def check_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """`cfg` unchanged, or ONE ValueError naming the bad setting (before anything is compiled)."""
    if not cfg["staleness"] or cfg["staleness"][0] != 0 or any(s < 0 for s in cfg["staleness"]):
        raise ValueError(f"--staleness={cfg['staleness']} must start with 0 (the synchronous curve) and be >= 0")
    if not 1 <= cfg["k"] <= cfg["n"] or cfg["prompts"] < 2:
        raise ValueError(f"need 1 <= k <= n and prompts >= 2 (the scale leaves one row out), got k={cfg['k']}, "
                         f"n={cfg['n']}, prompts={cfg['prompts']}")
    if not cfg["report_steps"] or not all(1 <= t < cfg["steps"] for t in cfg["report_steps"]):
        raise ValueError(f"--report_steps={cfg['report_steps']} must be non-empty, each in [1, steps={cfg['steps']})")
    if cfg["seeds"] < 2 or cfg["steps"] < 1 or cfg["num_arms"] < 2:
        raise ValueError(f"need seeds >= 2 (a spread over seeds), steps >= 1 and num_arms >= 2, got "
                         f"seeds={cfg['seeds']}, steps={cfg['steps']}, num_arms={cfg['num_arms']}")
    return cfg


def main(argv: Sequence[str]) -> None:
    del argv
    cfg = config_from_flags()
    out_dir = pathlib.Path(FLAGS.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    start = time.time()
    curves = {name: run_curve(name, cfg["staleness"], cfg) for name in CURVES}
    summary = summarise(curves, cfg["staleness"], cfg["report_steps"])
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
    flags.DEFINE_integer("steps", 100, "Updates per run.")
    flags.DEFINE_integer("seeds", 32, "Runs per curve and staleness value.")
    flags.DEFINE_list("report_steps", ["5", "10", "25"], "Updates after which the table reports max@k (and the last).")
    flags.DEFINE_integer("seed", 0, "PRNG seed of the runs' samples.")
    flags.DEFINE_integer("bandit_seed", 0, "PRNG seed of the arm rewards.")
    flags.DEFINE_list("staleness", ["0", "1", "2", "4"], "Staleness values s (the first must be 0).")
    flags.DEFINE_bool("smoke", False, "A seconds-long run (10 arms, 6 updates, 2 seeds, s = 0, 1) for the test.")
    flags.DEFINE_string("out_dir", "docs/results", "Where to write bandit_staleness.{png,json}.")


if __name__ == "__main__":
    define_flags()
    cli.run_main(main)
