"""Named methods of the comparison: which estimator, loss form, estimator options and RL config
overrides a method name stands for.

A method is an entry of a method table -- ``{name: maxk_jax.rl.method.Method(estimator,
options, loss_kind)}``, the run config's ``METHODS`` (experiments/configs/base.py), passed in by
the caller -- or one of the comparison-only `VARIANTS` below, or any other registry estimator name
(its defaults, loss form "auto" = the registry's).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import dataclasses

from maxk_jax.pipelines.config import PipelineConfig, check_estimator, validate_config
from maxk_jax.rl.method import Method, with_method
from maxk_jax.fields import replace_fields

# Method(estimator, estimator options, loss form "auto" | "clipped" | "is_weighted")
MethodEntry = Method
MethodTable = Mapping[str, MethodEntry]
# (estimator, loss form, estimator options, rl config overrides as dotted RunConfig paths)
MethodSpec = tuple[str, str, dict[str, Any], dict[str, Any]]

TABLE2_METHODS = ("grpo", "bon_max_second", "bon_max_mean", "bon_loo1", "bon_mean", "maxk_offpolicy",
                  "maxk_offpolicy_is", "maxk_offpolicy_exact")
REFERENCE = "maxk_offpolicy"   # the paper's method: the reference of the Wilcoxon tests
# Variants: name -> (method table entry, extra estimator options, rl config overrides). They put
# points on the max@k-vs-KL frontier: the same estimators with smaller steps.
VARIANTS: dict[str, tuple[str, dict[str, Any], dict[str, Any]]] = {
    # the former default of maxk_offpolicy: unbiased LOO-1 baseline, §3.3 IS-weighted loss
    "maxk_offpolicy_loo1_is": ("maxk_offpolicy_is", {"baseline": "loo1"}, {}),
    # GRPO with half the learning rate (a smaller step at the same number of RL steps)
    "grpo_lowlr": ("grpo", {}, {"optim.learning_rate": 1.5e-4}),
    # GRPO on the binary reward (1 when every test passes), the max@k paper's Table 1 second row
    "grpo_binary": ("grpo", {}, {"rollout.reward": "binary"}),
    # the delta-noise isolation: the paper's method with rows of all-equal rewards contributing nothing
    "maxk_offpolicy_zero_flat": ("maxk_offpolicy", {"zero_flat_rows": True}, {}),
    # ... and with every row whose on-policy r~ is flat contributing nothing (e.g. >= n - k + 1
    # samples at the row maximum: a superset of the rows of equal rewards)
    "maxk_offpolicy_zero_flat_rt": ("maxk_offpolicy", {"zero_flat_transform": True}, {}),
    # BoN-max-mean divided by the reward std, "as in vanilla GRPO" (§4.3); App. A does not divide
    "bon_max_mean_std": ("bon_max_mean", {"divide_std": True}, {}),
    # eq. 4 as the paper prints it, one factor at a time: the sequence-level ratio inside the clip,
    # and the KL to pi_old instead of the frozen reference
    "maxk_offpolicy_seq_ratio": ("maxk_offpolicy", {}, {"algo.loss.ratio_level": "sequence"}),
    "maxk_offpolicy_kl_old": ("maxk_offpolicy", {}, {"algo.loss.kl_target": "old"}),
    # ... and GRPO with the sequence-level ratio: whether the default ratio level should change for
    # the estimators without a delta term too
    "grpo_seq_ratio": ("grpo", {}, {"algo.loss.ratio_level": "sequence"}),
    # the delta-size suspect, two ways: delta = rho - 1 clamped to [-0.2, 0.2] (the default clamp is
    # 1.0), and the paper's method at grpo_lowlr's half learning rate (smaller steps, smaller deltas)
    "maxk_offpolicy_clamp02": ("maxk_offpolicy", {"clamp_delta": 0.2}, {}),
    "maxk_offpolicy_lowlr": ("maxk_offpolicy", {}, {"optim.learning_rate": 1.5e-4}),
    # the row-std suspect: r~ and r~' minus their row mean, not divided by the row's std (which,
    # on rows of close rewards, scales the delta terms up to the size of the reward differences)
    "maxk_mean": ("maxk", {"baseline": "mean"}, {}),
    "maxk_offpolicy_mean": ("maxk_offpolicy", {"baseline": "mean"}, {}),
    # ... and the unbiased leave-one-out baseline (b_i: over the k-subsets holding i, the best reward
    # of the subset's other members, weighted like the estimator; no division) in the clipped loss:
    # under stale rollouts (`behaviour`) delta is the policy's drift over s steps
    "maxk_offpolicy_loo1": ("maxk_offpolicy", {"baseline": "loo1"}, {}),
    # ... and the exact eq. 10 estimator with the same baseline (the staleness grid's loo1 family)
    "maxk_offpolicy_exact_loo1": ("maxk_offpolicy_exact", {"baseline": "loo1"}, {}),
}


def method_spec(method: str, method_table: MethodTable) -> MethodSpec:
    """(estimator, loss form, estimator options, rl config overrides) of a comparison method name
    (ValueError when a variant's parent is missing from `method_table`)."""
    if method in VARIANTS:
        parent, extra, overrides = VARIANTS[method]
        if parent not in method_table:
            raise ValueError(f"method {method!r} is a variant of {parent!r}, which the method table lacks "
                             f"(it has: {', '.join(sorted(method_table))})")
        entry = method_table[parent]
        return entry.estimator, entry.loss_kind, {**dict(entry.options), **extra}, dict(overrides)
    entry = method_table.get(method, Method(method))
    return entry.estimator, entry.loss_kind, dict(entry.options), {}


def apply_method(cfg: PipelineConfig, method: str, method_table: MethodTable) -> PipelineConfig:
    """Copy of the pipeline config `cfg` whose RL run trains `method`: its estimator, loss form,
    estimator options and rl overrides (dotted `RunConfig` paths, e.g. ``optim.learning_rate``)."""
    estimator, loss_kind, options, overrides = method_spec(method, method_table)
    check_estimator(estimator)
    rl = with_method(cfg.rl, Method(estimator, options, loss_kind))
    try:
        rl = replace_fields(rl, overrides)
    except ValueError as err:
        raise ValueError(f"method {method!r} overrides rl fields {sorted(overrides)}: {err}") from err
    return dataclasses.replace(cfg, rl=rl)


def validate_methods(methods: Sequence[str], cfg: PipelineConfig, method_table: MethodTable,
                     reference: str = REFERENCE, *, trained: bool = True) -> list[str]:
    """Known, distinct method names including `reference` (the row the Wilcoxon tests compare
    against; "base" = the base model, then one method is enough); each validated with the pipeline
    config (`validate_config`) when `trained` (runs to train), else only its name and estimator
    (aggregating finished runs: e.g. runs of a setting refused since they were made). ValueError
    naming the bad list or method."""
    methods = list(methods)
    least = 1 if reference == "base" else 2
    if len(set(methods)) != len(methods) or len(methods) < least:
        raise ValueError(f"--methods must list at least {('one', 'two')[least - 1]} distinct estimator(s), got {methods}")
    if reference != "base" and reference not in methods:
        raise ValueError(f"--methods must include {reference!r} (the reference of the Wilcoxon tests), got {methods}")
    for m in methods:
        if trained:
            validate_config(apply_method(cfg, m, method_table))
        else:
            check_estimator(method_spec(m, method_table)[0])
    return methods
