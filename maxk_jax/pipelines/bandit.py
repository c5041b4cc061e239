"""Tang et al. (2025), Figure 1: k-sample policy gradients on a 100-armed bandit (the library of
experiments/bandit.py: curves, the exact metrics, the update rule, the vmapped runs, tables, plot).

Setup (Tang et al. §3.3, "Empirical study on a bandit case"): |Y| = 100 arms, each with a
deterministic reward drawn once from N(0, 1) (``bandit_seed``); softmax policy
pi_theta(y) ∝ exp(theta_y) over free logits; every update draws k = 4 samples and takes one
SGD step on theta with learning rate 1.0. The paper states "identical hyperparameters and
initializations" but not the initialization itself; every run starts from the uniform policy
(theta = 0) unless ``init_logit_std`` > 0 (then theta_0 ~ N(0, std^2), shared by all runs).

Update: theta <- theta + lr * s * sum_i A_i grad_theta log pi_theta(y_i), with A the output of
``maxk_jax.estimators.get_estimator(name)(r, k=k, log_ratio=..., mask=None)`` and
grad log pi(y) = onehot(y) - pi. The k-sample estimators (Tang's eq. 2 and 3, the max@k paper's
eq. 9) are *sums* over samples (s = 1). Per-sample advantages of the mean objective (names in
``average_over_samples``, default rloo and grpo) are averaged instead (s = 1/n), so ``rloo`` is
exactly Tang's "mean policy gradient": eq. (2) with f = mean, (1/k) sum_i (r_i - mean_{j != i} r_j).

Sample reuse (off-policy curves, ``NAME@R``): every R updates a fresh batch of n samples is drawn
from the current policy (which becomes pi_old) and is then used for R consecutive updates; at
each of them log_ratio_i = log pi_theta(y_i) - log pi_old(y_i) is recomputed at the current theta
and passed to the estimator (it is zero at the first update of a batch). With R = 1 every update
is on-policy. As in PPO (and the paper's training: 3 PPO iterations, eps = 0.2), a reused sample
whose update would leave the trust region is dropped from the update: sample i is masked when
A_i > 0 and rho_i > 1 + eps, or A_i < 0 and rho_i < 1 - eps (``maxk_jax.rl.losses.trust_region_mask``;
``clip_eps=inf`` turns this off; it never acts on a fresh batch, where rho = 1). Curves are
compared per update step (an @R curve draws R times fewer samples).

Default curves: ``rloo`` (Tang's mean policy gradient), ``tang_loo`` (eq. 2, f = max; at n = k
it is identical to ``maxk:baseline=loo1`` and to ``bon_loo1``),
``tang_loo_biased`` (eq. 3), ``maxk:baseline=none`` (the max@k paper's raw eq. 9 transform, which
at n = k gives every sample max(r): REINFORCE without a baseline), and the off-policy
``maxk_offpolicy:baseline=loo1:clamp_delta=null@3`` (LOO-1 baseline, no delta clamp: the unbiased
form) and ``maxk_offpolicy:baseline=none:clamp_delta=null@3`` (raw §3.3 form).  The registry's
defaults (z-score, clamped delta: the paper's pipeline) are biased by design, so the bandit, which
checks unbiasedness and the ordering of objectives, names its options explicitly.

Metrics, exact (no sampling), after every update: mean reward E_pi[r]; KL(pi || pi_0); max@k of
the policy, E[max of k i.i.d. draws] = sum_j r_(j) (F_j^k - F_{j-1}^k) with the rewards sorted
and F the cumulative policy mass. Outputs: ``out_dir``/bandit.png (mean ± 1 standard error over
seeds) and bandit.json (per-step mean, s.d. and s.e., per-seed final values, the final policy
averaged over seeds, the configuration).
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import json
import math
import os
import pathlib
import time
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from maxk_jax import estimators
from maxk_jax.rl import losses

DEFAULT_CURVES = ("rloo", "tang_loo", "tang_loo_biased", "maxk:baseline=none",
                  "maxk_offpolicy:baseline=loo1:clamp_delta=null@3",
                  "maxk_offpolicy:baseline=none:clamp_delta=null@3")
METRICS = ("mean_reward", "kl", "max_at_k")

@dataclasses.dataclass(frozen=True)
class Curve:
    """One compared update rule: a registry estimator (with options) and its batch reuse R."""

    estimator: str
    options: tuple[tuple[str, Any], ...] = ()
    reuse: int = 1

    @property
    def label(self) -> str:
        """The flag spelling ``NAME[:KEY=VALUE...][@R]``."""
        opts = "".join(f":{key}={value}" for key, value in self.options)
        return self.estimator + opts + ("" if self.reuse == 1 else f"@{self.reuse}")

    def build(self) -> Callable[..., jax.Array]:
        """The registry estimator ``get_estimator(estimator, **options)``."""
        return estimators.get_estimator(self.estimator, **dict(self.options))


def _option_value(text: str) -> Any:
    """'3' -> 3, '0.5' -> 0.5, 'true'/'false' -> bool, 'null' -> None, anything else a string."""
    if text.lower() == "null":
        return None
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def parse_curve(spec: str) -> Curve:
    """Parses ``NAME[:KEY=VALUE...][@R]`` (e.g. ``maxk:baseline=none``, ``maxk_offpolicy@3``).

    The estimator and its options are checked against the registry (ValueError naming them).
    """
    body, _, reuse = spec.strip().partition("@")
    try:
        reuse_int = int(reuse) if reuse else 1
    except ValueError as err:
        raise ValueError(f"curve {spec!r}: R in NAME@R must be an int, got {reuse!r}") from err
    if reuse_int < 1:
        raise ValueError(f"curve {spec!r}: reuse R must be >= 1, got {reuse_int}")
    name, *opts = body.split(":")
    options = []
    for opt in opts:
        key, eq, value = opt.partition("=")
        if not (key and eq):
            raise ValueError(f"curve {spec!r}: option {opt!r} is not KEY=VALUE")
        options.append((key, _option_value(value)))
    curve = Curve(name, tuple(options), reuse_int)
    curve.build()  # raises a ValueError naming an unknown estimator or option
    return curve


@dataclasses.dataclass(frozen=True)
class BanditConfig:
    """Static settings of one bandit experiment (frozen, hashable)."""

    curves: tuple[Curve, ...]
    num_arms: int = 100
    k: int = 4
    n: int = 4
    lr: float = 1.0
    steps: int = 300
    seeds: int = 10
    clip_eps: float = 0.2
    seed: int = 1
    bandit_seed: int = 0
    init_logit_std: float = 0.0
    average_over_samples: tuple[str, ...] = ("rloo", "grpo")
    kl_levels: tuple[float, ...] = (0.5, 1.0, 2.0, 3.0)

    def __post_init__(self) -> None:
        if not self.curves:
            raise ValueError("at least one curve is required")
        for name in ("k", "n", "steps", "seeds"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.num_arms < 2:
            raise ValueError(f"num_arms must be >= 2, got {self.num_arms}")
        if self.n < self.k:
            raise ValueError(f"n must be >= k, got n = {self.n}, k = {self.k}")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"lr must be a positive finite float, got {self.lr}")
        if not self.clip_eps > 0:
            raise ValueError(f"clip_eps must be > 0 (inf disables the trust region), got {self.clip_eps}")
        if not (math.isfinite(self.init_logit_std) and self.init_logit_std >= 0):
            raise ValueError(f"init_logit_std must be >= 0, got {self.init_logit_std}")
        if not all(math.isfinite(lv) and lv > 0 for lv in self.kl_levels):
            raise ValueError(f"kl_levels must be positive and finite, got {self.kl_levels}")
        for c in self.curves:
            if self.steps % c.reuse:
                raise ValueError(
                    f"steps = {self.steps} is not a multiple of curve {c.label}'s reuse {c.reuse}")

    def scale(self, estimator: str) -> float:
        """Factor s on sum_i A_i grad log pi(y_i): 1/n for per-sample (mean) estimators, else 1."""
        return 1.0 / self.n if estimator in self.average_over_samples else 1.0


def make_bandit(key: jax.Array, num_arms: int,
                init_logit_std: float) -> tuple[jax.Array, jax.Array]:
    """Rewards r ~ N(0, 1) [A] and initial logits theta_0 [A] (zeros unless init_logit_std > 0)."""
    k_r, k_theta = jax.random.split(key)
    rewards = jax.random.normal(k_r, (num_arms,), jnp.float32)
    logits = init_logit_std * jax.random.normal(k_theta, (num_arms,), jnp.float32)
    return rewards, logits


def mean_reward(logits: jax.Array, rewards: jax.Array) -> jax.Array:
    """E_{y~pi}[r(y)]: logits, rewards [A] -> scalar."""
    return jax.nn.softmax(logits) @ rewards


def kl_divergence(logits: jax.Array, ref_logits: jax.Array) -> jax.Array:
    """KL(pi || pi_ref) of two softmax policies: logits [A], ref_logits [A] -> scalar."""
    logp, logq = jax.nn.log_softmax(logits), jax.nn.log_softmax(ref_logits)
    return jnp.sum(jnp.exp(logp) * (logp - logq))


def max_at_k(logits: jax.Array, rewards: jax.Array, k: int) -> jax.Array:
    """Exact E[max of k i.i.d. draws from pi]: logits, rewards [A] -> scalar (ties allowed)."""
    order = jnp.argsort(rewards)
    p = jax.nn.softmax(logits)[order]
    cdf = jnp.clip(jnp.cumsum(p), 0.0, 1.0)
    below = jnp.clip(cdf - p, 0.0, 1.0)
    return jnp.sum(rewards[order] * (cdf**k - below**k))


def policy_metrics(logits: jax.Array, ref_logits: jax.Array, rewards: jax.Array,
                   k: int) -> dict[str, jax.Array]:
    """Metrics of policies ``logits`` [..., A]: mean_reward, kl (to ref_logits [A]), max_at_k [...]."""
    fns = dict(mean_reward=lambda l: mean_reward(l, rewards),
               kl=lambda l: kl_divergence(l, ref_logits),
               max_at_k=lambda l: max_at_k(l, rewards, k))
    flat = logits.reshape(-1, logits.shape[-1])
    return {m: jax.vmap(f)(flat).reshape(logits.shape[:-1]) for m, f in fns.items()}


def estimator_gradient(logits: jax.Array, actions: jax.Array, rewards: jax.Array,
                       log_ratio: jax.Array, estimator: Callable[..., jax.Array], k: int,
                       scale: float, clip_eps: float = math.inf) -> jax.Array:
    """s * sum_i keep_i A_i grad_theta log pi_theta(y_i) for the samples ``actions`` [n] -> [A].

    ``rewards`` [A] is the arm reward table; A = estimator(rewards[actions], k=k,
    log_ratio=log_ratio, mask=None) with ``log_ratio`` [n] = log pi_theta/pi_old of each sample;
    keep = PPO trust-region mask at ratio exp(log_ratio) (all True when clip_eps = inf);
    grad log pi(y) = onehot(y) - pi.
    """
    adv = estimator(rewards[actions], k=k, log_ratio=log_ratio, mask=None)
    if math.isfinite(clip_eps):
        ones = jnp.ones((actions.shape[0], 1), bool)
        keep = losses.trust_region_mask(jnp.exp(log_ratio)[:, None], adv, ones, clip_eps,
                                        clip_eps)[:, 0]
        adv = jnp.where(keep, adv, 0.0)
    counts = jnp.zeros_like(logits).at[actions].add(adv)
    return scale * (counts - jnp.sum(adv) * jax.nn.softmax(logits))


def train_one_seed(key: jax.Array, rewards: jax.Array, logits0: jax.Array, *,
                   estimator: Callable[..., jax.Array], k: int, n: int, lr: float,
                   scale: float, reuse: int, steps: int, clip_eps: float) -> jax.Array:
    """One run of ``steps`` SGD updates from ``logits0`` [A] -> logits after every update [steps, A].

    Outer ``lax.scan`` over the steps // reuse sample batches, inner scan over the ``reuse``
    updates that share a batch (see the module docstring).
    """

    def update(carry, _):
        logits, actions, logp_old = carry
        log_ratio = jax.nn.log_softmax(logits)[actions] - logp_old
        grad = estimator_gradient(logits, actions, rewards, log_ratio, estimator, k, scale,
                                  clip_eps)
        logits = logits + lr * grad
        return (logits, actions, logp_old), logits

    def sample_batch(logits, batch_key):
        actions = jax.random.categorical(batch_key, logits, shape=(n,))
        logp_old = jax.nn.log_softmax(logits)[actions]
        carry = (logits, actions, logp_old)
        (logits, _, _), trajectory = jax.lax.scan(update, carry, None, length=reuse)
        return logits, trajectory

    _, trajectory = jax.lax.scan(sample_batch, logits0, jax.random.split(key, steps // reuse))
    return trajectory.reshape(steps, -1)


def compile_curve(config: BanditConfig, curve: Curve, rewards: jax.Array,
                  logits0: jax.Array) -> Callable[[jax.Array], jax.Array]:
    """AOT-compiled run of all seeds of one curve: keys [S] -> logits trajectories [S, T, A]."""
    fn = functools.partial(
        train_one_seed, rewards=rewards, logits0=logits0, estimator=curve.build(), k=config.k,
        n=config.n, lr=config.lr, scale=config.scale(curve.estimator), reuse=curve.reuse,
        steps=config.steps, clip_eps=config.clip_eps)
    return jax.jit(jax.vmap(fn)).lower(seed_keys(config)).compile()


def seed_keys(config: BanditConfig) -> jax.Array:
    """The per-seed PRNG keys [S], shared by every curve (common random numbers)."""
    return jax.random.split(jax.random.key(config.seed), config.seeds)


@functools.partial(jax.jit, static_argnums=3)
def trajectory_metrics(trajectory: jax.Array, logits0: jax.Array, rewards: jax.Array,
                       k: int) -> dict[str, jax.Array]:
    """Metrics of logits0 followed by ``trajectory`` [S, T, A] -> each [S, T + 1] (0 = init)."""
    start = jnp.broadcast_to(logits0, (trajectory.shape[0], 1, trajectory.shape[-1]))
    return policy_metrics(jnp.concatenate([start, trajectory], axis=1), logits0, rewards, k)


def run_experiment(config: BanditConfig,
                   progress: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """Runs every curve; returns a JSON-able dict (config, per-step mean/s.d., per-seed finals).

    The curves' programs are compiled concurrently (compilation dominates the wall time).
    """
    rewards, logits0 = make_bandit(jax.random.key(config.bandit_seed), config.num_arms,
                                   config.init_logit_std)
    init = policy_metrics(logits0, logits0, rewards, config.k)
    results: dict[str, Any] = dict(
        config={key: str(v) if isinstance(v, float) and not math.isfinite(v) else v  # inf
                for key, v in dataclasses.asdict(config).items()}
        | dict(curves=[c.label for c in config.curves]),
        arm_rewards=np.asarray(rewards).tolist(),
        best_arm_reward=float(jnp.max(rewards)),
        initial={m: float(v) for m, v in init.items()},
        curves={})
    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        programs = list(pool.map(lambda c: compile_curve(config, c, rewards, logits0),
                                 config.curves))
    progress(f"compiled {len(programs)} curves in {time.perf_counter() - t0:.1f}s")
    for curve, program in zip(config.curves, programs):
        trajectory = program(seed_keys(config))
        out = trajectory_metrics(trajectory, logits0, rewards, config.k)
        out = {m: np.asarray(v) for m, v in out.items()}
        final_policy = np.asarray(jax.nn.softmax(trajectory[:, -1], axis=-1)).mean(0)
        finite = all(np.isfinite(v).all() for v in out.values())
        entry: dict[str, Any] = dict(
            estimator=curve.estimator, options=dict(curve.options), reuse=curve.reuse,
            scale=config.scale(curve.estimator),
            samples_per_run=config.n * config.steps // curve.reuse, diverged=not finite,
            final_policy_mean=_jsonable(final_policy),
            at_kl=metrics_at_kl(out, config.kl_levels))
        for m, v in out.items():
            sd = v.std(0, ddof=1) if config.seeds > 1 else np.zeros_like(v[0])
            entry[m] = dict(mean=_jsonable(v.mean(0)), sd=_jsonable(sd),
                            sem=_jsonable(sd / math.sqrt(config.seeds)),
                            final_per_seed=_jsonable(v[:, -1]))
        results["curves"][curve.label] = entry
        if not finite:
            progress(f"{curve.label}: NON-FINITE metrics (diverged)")
    progress(f"ran {len(programs)} curves x {config.seeds} seeds x {config.steps} steps "
             f"in {time.perf_counter() - t0:.1f}s in total")
    return results


def metrics_at_kl(out: dict[str, np.ndarray], levels: Sequence[float]) -> dict[str, Any]:
    """KL-matched comparison: per seed, E_pi[r] and max@k at the first step with KL >= level.

    ``out`` maps metric -> [S, T + 1]. Returns {str(level): {mean_reward, max_at_k (means over
    the seeds that reach the level, None if none does), seeds_reached}}.
    """
    table = {}
    for level in levels:
        reached = out["kl"] >= level  # [S, T + 1]
        hit = reached.any(axis=1)
        first = reached.argmax(axis=1)
        row: dict[str, Any] = dict(seeds_reached=int(hit.sum()))
        for m in ("mean_reward", "max_at_k"):
            values = out[m][np.arange(len(first)), first][hit]
            row[m] = float(values.mean()) if hit.any() else None
        table[str(level)] = row
    return table


def _jsonable(x: np.ndarray) -> list[float | None]:
    """Float list with NaN/inf as None (JSON has no NaN)."""
    return [float(v) if np.isfinite(v) else None for v in np.asarray(x, np.float64).ravel()]


def summary_table(results: dict[str, Any], at_steps: Sequence[int]) -> str:
    """Markdown table: every metric of every curve (mean ± s.e. over seeds) at ``at_steps``."""
    lines = ["| curve | step | " + " | ".join(METRICS) + " |",
             "|---|---:|" + "---:|" * len(METRICS)]
    for label, entry in results["curves"].items():
        for s in at_steps:
            cells = []
            for m in METRICS:
                mu, se = entry[m]["mean"][s], entry[m]["sem"][s]
                cells.append("nan" if mu is None else f"{mu:.3f} ± {se:.3f}")
            lines.append(f"| {label} | {s} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def kl_table(results: dict[str, Any]) -> str:
    """Markdown table of ``metrics_at_kl``: E_pi[r] / max@k of every curve at each KL level."""
    levels = results["config"]["kl_levels"]
    lines = ["| curve | " + " | ".join(f"KL ≥ {lv}: E_π[r] / max@k (seeds)" for lv in levels) + " |",
             "|---|" + "---:|" * len(levels)]
    for label, entry in results["curves"].items():
        cells = []
        for lv in levels:
            row = entry["at_kl"][str(lv)]
            cells.append("not reached" if row["mean_reward"] is None else
                         f"{row['mean_reward']:.3f} / {row['max_at_k']:.3f} ({row['seeds_reached']})")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(results: dict[str, Any], path: pathlib.Path) -> None:
    """2x3 PNG: E_pi[r], KL, max@k against steps (mean ± 1 s.e. over seeds), E_pi[r] and max@k
    against KL (seed means), and the final policy over arms sorted by reward (seed mean)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cfg = results["config"]
    maxk_label = f"max@{cfg['k']} of π (exact)"
    fig, axes = plt.subplots(2, 3, figsize=(16, 9))
    panels = [("mean_reward", "E_π[r]"), ("kl", "KL(π || π_0)"), ("max_at_k", maxk_label)]
    order = np.argsort(results["arm_rewards"])
    for label, entry in results["curves"].items():
        steps = np.arange(len(entry["kl"]["mean"]))
        for ax, (m, ylabel) in zip(axes[0], panels):
            mu = np.array(entry[m]["mean"], dtype=float)
            se = np.array(entry[m]["sem"], dtype=float)
            (line,) = ax.plot(steps, mu, label=label, lw=1.4)
            ax.fill_between(steps, mu - se, mu + se, color=line.get_color(), alpha=0.2, lw=0)
            ax.set(xlabel="update step", ylabel=ylabel)
        kl = np.array(entry["kl"]["mean"], dtype=float)
        for ax, m in zip(axes[1, :2], ("mean_reward", "max_at_k")):
            ax.plot(kl, np.array(entry[m]["mean"], dtype=float), label=label, lw=1.4)
        axes[1, 2].plot(np.array(entry["final_policy_mean"])[order], label=label, lw=1.2)
    axes[1, 0].set(xlabel="KL(π || π_0)", ylabel="E_π[r]", title="KL efficiency (seed means)")
    axes[1, 1].set(xlabel="KL(π || π_0)", ylabel=maxk_label, title="KL efficiency (seed means)")
    axes[1, 2].set(xlabel="arm rank by reward (best on the right)", ylabel="π(arm) at the end",
                   yscale="log", title="final policy (seed mean)")
    axes[1, 2].set_ylim(bottom=1e-4)
    for ax in axes.flat:
        ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=8)
    fig.suptitle(f"{cfg['num_arms']}-armed bandit (Tang et al. Fig. 1 setup), k = {cfg['k']}, "
                 f"n = {cfg['n']}, lr = {cfg['lr']}, {cfg['seeds']} seeds (mean ± 1 s.e.)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_outputs(results: dict[str, Any],
                  out_dir: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    """Writes bandit.json and bandit.png into ``out_dir``; returns their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, png_path = out_dir / "bandit.json", out_dir / "bandit.png"
    json_path.write_text(json.dumps(results, allow_nan=False))
    plot(results, png_path)
    return json_path, png_path
