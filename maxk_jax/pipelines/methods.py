"""Named methods of the comparison and the pipelines: applying a method of the registry
(`maxk_jax.rl.method`: ``METHODS``, its ``VARIANTS``, every estimator under its own name) to a
pipeline config, and checking a comparison's list of methods.

A method table (``{name: maxk_jax.rl.method.Method(estimator, options, loss_kind)}``) defaults to
the registry's ``METHODS``; tests pass their own.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Optional

from maxk_jax.pipelines.config import PipelineConfig, validate_config
from maxk_jax.rl import method as registry
from maxk_jax.rl.method import DEFAULT_METHOD, VARIANTS, Method, MethodSpec, check_method

# Method(estimator, estimator options, loss form "auto" | "clipped" | "is_weighted")
MethodEntry = Method
MethodTable = Mapping[str, MethodEntry]

TABLE2_METHODS = ("grpo", "bon_max_second", "bon_max_mean", "bon_loo1", "bon_mean", "maxk_offpolicy",
                  "maxk_offpolicy_is", "maxk_offpolicy_exact")
REFERENCE = "maxk_offpolicy"   # the paper's method: the reference of the Wilcoxon tests of the paper's table

__all__ = ["DEFAULT_METHOD", "MethodEntry", "MethodSpec", "MethodTable", "REFERENCE", "TABLE2_METHODS", "VARIANTS",
           "apply_method", "default_reference", "method_spec", "validate_methods"]


def method_spec(method: str, method_table: Optional[MethodTable] = None) -> MethodSpec:
    """(estimator, loss form, estimator options, rl config overrides) of a method name
    (`maxk_jax.rl.method.method_spec`; ValueError for an unknown one)."""
    return registry.method_spec(method, method_table)


def apply_method(cfg: PipelineConfig, method: str, method_table: Optional[MethodTable] = None) -> PipelineConfig:
    """Copy of the pipeline config `cfg` whose RL run trains `method` (its estimator, loss form,
    estimator options and rl overrides), the RL run named after it (the run's label)."""
    return dataclasses.replace(cfg, rl=registry.apply_method(cfg.rl, method, method_table))


def default_reference(methods: Sequence[str]) -> str:
    """The Wilcoxon reference when ``--reference`` is not given: the default method when listed, else
    the paper's `REFERENCE` when listed, else the first method."""
    for name in (DEFAULT_METHOD, REFERENCE):
        if name in methods:
            return name
    return methods[0]


def validate_methods(methods: Sequence[str], cfg: PipelineConfig, method_table: Optional[MethodTable] = None,
                     reference: str = REFERENCE, *, trained: bool = True) -> list[str]:
    """Known, distinct method names including `reference` (the row the Wilcoxon tests compare
    against; "base" = the base model, then one method is enough); each validated with the pipeline
    config (`validate_config`) when `trained` (runs to train), else only its name
    (aggregating finished runs: e.g. runs of a setting refused since they were made). ValueError
    naming the bad list or method."""
    methods = list(methods)
    least = 1 if reference == "base" else 2
    for m in methods:
        check_method(m, method_table)
    if len(set(methods)) != len(methods) or len(methods) < least:
        raise ValueError(f"--methods must list at least {('one', 'two')[least - 1]} distinct method(s), got {methods}")
    if reference != "base" and reference not in methods:
        raise ValueError(f"--reference={reference!r} must be one of --methods ({', '.join(methods)}) or 'base'")
    if trained:
        for m in methods:
            validate_config(apply_method(cfg, m, method_table))
    return methods
