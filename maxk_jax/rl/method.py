"""The method a run trains: a named table entry (estimator, options, loss form) and applying it to a
RunConfig.

    METHODS = {"grpo": Method("grpo"), "maxk_offpolicy_is": Method("maxk_offpolicy", loss_kind="is_weighted")}
    run = with_method(run, METHODS["grpo"], name="grpo")
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, NamedTuple

from maxk_jax.fields import Options, check_choice
from maxk_jax.rl import losses
from maxk_jax.rl.run_config import RunConfig
from maxk_jax.rl.training import loss_kind


class Method(NamedTuple):
    """A named method of a method table: the estimator, its options, and the loss form only where
    the method deviates from the registry's (``"auto"`` = ``estimator_info(estimator).loss_form``)."""

    estimator: str
    options: Mapping[str, Any] | Options = ()
    loss_kind: str = "auto"


#: The project's default method (``experiments/configs/base.py``'s ``maxk_offpolicy_exact_loo1_rms`` and
#: the main job's): exact importance-weighted eq. 10 with the LOO-1 baseline, each prompt's
#: coefficients divided by the RMS of the other prompts' (``scale="loo_rms"``), in the §3.3
#: IS-weighted loss -- unbiased and scale-free off-policy max@k. The paper ran ``maxk_offpolicy``
#: (first-order r~', z-scored, clipped loss), whose expected update is biased off-policy; see
#: docs/results/offpolicy_unbiased.md for the exactness check and the testbed runs behind the choice.
UNBIASED_OFFPOLICY = Method("maxk_offpolicy_exact", (("baseline", "loo1"), ("scale", "loo_rms")),
                            loss_kind="is_weighted")


def loss_form(estimator: str, kind: str = "auto") -> str:
    """The loss form of `estimator`: `kind`, or the registry's form (`training.loss_kind`) when it is "auto"."""
    if kind == "auto":
        return loss_kind(estimator)
    check_choice(kind, "loss_kind", ("auto",) + losses.KINDS)
    return kind


def with_method(run: RunConfig, method: Method, *, name: str | None = None) -> RunConfig:
    """`run` training `method` (estimator, options, loss form); ``name`` (default: unchanged)."""
    algo = dataclasses.replace(
        run.algo, estimator=method.estimator, estimator_options=tuple(dict(method.options).items()),
        loss=dataclasses.replace(run.algo.loss, kind=loss_form(method.estimator, method.loss_kind)))
    return dataclasses.replace(run, algo=algo, name=run.name if name is None else name)
