"""The exactness table: every estimator's expected update against the exact grad max@k, enumerated.

    .venv/bin/python -m experiments.estimator_exactness                 # markdown table on stdout
    .venv/bin/python -m experiments.estimator_exactness --out=docs/results/offpolicy_unbiased_table.md

The bandit of ``maxk_jax.rl.exactness``: 3 arms with rewards 0 / 0.5 / 1, n = 4 samples per row,
k = 2, every sample tuple enumerated; each tuple's update is the gradient of the train step's own
wiring (``rl.wiring.update_loss``: log-ratios, coefficients, ``losses.policy_loss`` with an open trust
region).  For each setting and column the cell is the WORST cosine between E[update] and grad max@k
over ``--draws`` random (θ, θ_old, θ_μ) at each logit shift of ``--shifts`` (|θ − θ_old| = shift/2,
|θ_old − θ_μ| = shift).  Columns: the synchronous loop at PPO iteration 0 (on-policy) and > 0 (samples
from π_old; clipped and IS-weighted loss), asynchronous rollouts at iteration 0 with each correction,
and at iterations > 0 with "behaviour" in both loss forms.  Settings with ``scale`` != "none" are
measured on batches of 2 independent rows (their scale couples rows).  "claim" is
``estimators.update_claim`` (objective, unbiased on-policy / off-policy); "ratio" the range of
|E[update]| / |rows · grad max@k| on-policy and under stale behaviour (1 = the claimed unit scale).
"""
from __future__ import annotations

import pathlib
from typing import Sequence

from absl import app, flags
from maxk_jax import cli
import numpy as np

from maxk_jax import estimators as E
from maxk_jax.rl import exactness as X

K, N = 2, 4
FLAGS = flags.FLAGS
# (column title, scenario, correction, loss form)
COLUMNS = (("on-policy", "on_policy", "none", "is_weighted"),
           ("PPO it>0 clipped", "ppo", "none", "clipped"),
           ("PPO it>0 IS-w.", "ppo", "none", "is_weighted"),
           ("stale it0 none", "stale", "none", "is_weighted"),
           ("stale it0 tis", "stale", "tis", "is_weighted"),
           ("stale it0 behaviour", "stale", "behaviour", "is_weighted"),
           ("stale it>0 behaviour IS-w.", "stale_ppo", "behaviour", "is_weighted"),
           ("stale it>0 behaviour clipped", "stale_ppo", "behaviour", "clipped"))
OFF_SETTINGS = [dict(baseline=b, clamp_delta=None) for b in E.BASELINES] + [
    dict(baseline="loo1", scale=s, clamp_delta=None) for s in ("batch_rms", "loo_rms")] + [{}]


def settings() -> list[tuple[str, dict]]:
    """Every registry estimator at its defaults, the maxk family at every baseline and scale."""
    out = [(name, {}) for name in E.list_estimators() if not name.startswith("maxk")]
    out += [("maxk", dict(baseline=b)) for b in E.BASELINES]
    out += [(name, o) for name in ("maxk_offpolicy", "maxk_offpolicy_exact") for o in OFF_SETTINGS]
    return out


def measure(name: str, options: dict, shifts: Sequence[float], draws: int, seed: int) -> dict:
    """{column title: (worst cosine, [norm ratios])} of one setting (NaN where it does not apply)."""
    fn = E.get_estimator(name, **options)
    rows = 1 if options.get("scale", "none") == "none" else 2
    reads_lr = E.estimator_info(name).needs_log_ratio
    ds = [d for s in shifts for d in X.make_draws(seed, draws, s)]
    target = np.stack([rows * X.target_gradient(d.theta, "max@k", k=K) for d in ds])
    out = {}
    for title, scenario, correction, kind in COLUMNS:
        if correction == "behaviour" and not reads_lr:
            out[title] = (float("nan"), [])
            continue
        pol = np.stack([X.scenario_policies(d, scenario) for d in ds])
        upd = X.expected_update(fn, pol, k=K, n=N, correction=correction, rows=rows,
                                stale=scenario.startswith("stale"), loss=X.open_trust_region(kind))
        res = [X.compare(u, g) for u, g in zip(upd, target)]
        out[title] = (min(c for c, _ in res), [r for _, r in res])
    return out


def _label(name: str, options: dict) -> str:
    opts = ", ".join(f"{k}={v}" for k, v in options.items() if not (k == "clamp_delta" and v is None))
    if name.startswith("maxk_off") and "clamp_delta" not in options:
        opts = "paper defaults (zscore, clamp 1.0)"
    return f"`{name}`" + (f" ({opts})" if opts else "")


def _claim(name: str, options: dict) -> str:
    c = E.update_claim(name, **options)
    if not c.on_policy:
        return f"biased ({c.objective})"
    off = {"exact": ", off-policy exact", "first_order": ", off-policy 1st order"}.get(c.off_policy, "")
    return f"{c.objective}{off}" + (", ×1" if c.unit_scale else "")


def _range(values: list[float]) -> str:
    return "–" if not values else f"{min(values):.2f}–{max(values):.2f}"


def table(results: list[tuple[str, dict, dict]]) -> str:
    """The markdown table of `measure` results."""
    head = ["setting", "claim"] + [c[0] for c in COLUMNS] + ["ratio on-policy", "ratio stale behaviour"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * 2 + "---:|" * (len(head) - 2)]
    for name, options, res in results:
        cells = ["–" if np.isnan(res[c[0]][0]) else f"{res[c[0]][0]:+.4f}" for c in COLUMNS]
        lines.append("| " + " | ".join([_label(name, options), _claim(name, options)] + cells +
                                        [_range(res["on-policy"][1]), _range(res["stale it0 behaviour"][1])]) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str]) -> None:
    del argv
    shifts = [float(s) for s in FLAGS.shifts]
    results = []
    for name, options in settings():
        results.append((name, options, measure(name, options, shifts, FLAGS.draws, FLAGS.seed)))
        print(f"measured {_label(name, options)}", flush=True)
    text = (f"Worst cosine of E[update] with grad max@k over {FLAGS.draws} draws at logit shifts "
            f"{', '.join(FLAGS.shifts)} (seed {FLAGS.seed}; n = {N}, k = {K}, rewards 0 / 0.5 / 1):\n\n"
            + table(results) + "\n")
    print(text)
    if FLAGS.out:
        pathlib.Path(FLAGS.out).write_text(text, encoding="utf-8")


if __name__ == "__main__":
    flags.DEFINE_list("shifts", ["0.1", "0.3", "0.6"], "Logit shifts |θ_old − θ_μ| (|θ − θ_old| is half of it).")
    flags.DEFINE_integer("draws", 4, "Random (θ, θ_old, θ_μ) draws per shift.")
    flags.DEFINE_integer("seed", 0, "Seed of the draws.")
    flags.DEFINE_string("out", "", "Also write the markdown table to this file ('' = stdout only).")
    cli.run_main(main)
