"""The method registry: every RL method by name (estimator + estimator options + loss form, and for a
few variants RunConfig overrides), and applying one to a RunConfig. Every entry point that trains takes
``--method=<name>`` with these names; runs, reports and plots are labelled by them (`method_label`).

    run = apply_method(RunConfig(), "grpo")            # the estimator, options, loss form; run.name = "grpo"
    method_label(run)                                  # "grpo": the registry name of the run's method
    check_method("nope")                               # ValueError: method 'nope' is unknown; valid methods: ...

The default (`DEFAULT_METHOD`, every shipped config's) is ``maxk_offpolicy_exact_loo1_rms``:
unbiased off-policy max@k (`UNBIASED_OFFPOLICY`). A method is an entry of `METHODS` (each
estimator of ``maxk_jax.estimators`` has one of its own name, with the estimator's defaults) or of
`VARIANTS` (a `METHODS` entry with extra estimator options and RunConfig overrides).
"""
from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from absl import flags

from maxk_jax.cli.fields import Options, check_choice, replace_fields
from maxk_jax.rl import losses
from maxk_jax.rl.run_config import RunConfig
from maxk_jax.rl.training import loss_kind


class Method(NamedTuple):
    """A named method of a method table: the estimator, its options, and the loss form only where
    the method deviates from the registry's (``"auto"`` = ``estimator_info(estimator).loss_form``)."""

    estimator: str
    options: Mapping[str, Any] | Options = ()
    loss_kind: str = "auto"


#: The project's default method (``maxk_offpolicy_exact_loo1_rms``, the main job's and every shipped
#: config's): exact importance-weighted eq. 10 with the LOO-1 baseline, each prompt's
#: coefficients divided by the RMS of the other prompts' (``scale="loo_rms"``), in the §3.3
#: IS-weighted loss -- unbiased and scale-free off-policy max@k. The paper ran ``maxk_offpolicy``
#: (first-order r~', z-scored, clipped loss), whose expected update is biased off-policy; see
#: docs/results/offpolicy_unbiased.md for the exactness check and the testbed runs behind the choice.
UNBIASED_OFFPOLICY = Method("maxk_offpolicy_exact", (("baseline", "loo1"), ("scale", "loo_rms")),
                            loss_kind="is_weighted")
DEFAULT_METHOD = "maxk_offpolicy_exact_loo1_rms"

# Every method: Method(estimator, options, loss form), with the paper section it follows. The loss
# form is given only where a method deviates from the estimator registry's
# (`maxk_jax.estimators.estimator_info(name).loss_form`: "clipped" = GRPO's clipped objective
# eq. 4, what the paper ran for every method); "is_weighted" = the §3.3 derivation's gradient
# sum_i c_i grad log pi(y_i), no extra ratio.
METHODS: dict[str, Method] = {
    # --- the max@k paper's Table 2 ---
    # GRPO (§3.1, eq. 4-5): z-scored rewards -- the pure reward-maximisation baseline.
    "grpo": Method("grpo"),
    # BoN-max mean (Chow et al.; App. A): reward only on the best samples, mean baseline.
    "bon_max_mean": Method("bon_max_mean"),
    # BoN-max second (App. A): reward only on the best samples, second-best baseline.
    "bon_max_second": Method("bon_max_second"),
    # BoN LOO-1 (Walder & Karkhanis; App. A, §4.5): unbiased on-policy max@k, LOO-1 baseline.
    "bon_loo1": Method("bon_loo1"),
    # BoN mean (§4.3, App. A): on-policy max@k transform r~ (eq. 9), z-scored (eq. 5).
    "bon_mean": Method("bon_mean"),
    # Off-policy BoN, the paper's method as it ran it (§3.3 + §3.1/§4.3, Listing 3): first-order
    # IS-corrected r~' with delta clamped (clamp_delta), z-scored, in GRPO's clipped eq. 4.
    "maxk_offpolicy": Method("maxk_offpolicy"),
    # ... the same under a name that says what it is (the paper's z-scored form; not the default)
    "maxk_offpolicy_zscore": Method("maxk_offpolicy"),
    # --- beyond Table 2 ---
    # The same estimator with the §3.3 derivation's gradient (IS-weighted, no extra PPO ratio).
    "maxk_offpolicy_is": Method("maxk_offpolicy", loss_kind="is_weighted"),
    # Exact importance-weighted eq. 10 (polynomial DP), rho clamped to [1-c, 1+c], z-scored.
    "maxk_offpolicy_exact": Method("maxk_offpolicy_exact"),
    # Unbiased and scale-free off-policy max@k (the form `algo.stale_correction=behaviour` accepts):
    # the LOO-1 baseline (unbiased with the estimator's own importance weights), the coefficients of
    # each prompt divided by the RMS of the OTHER prompts' coefficients of the micro-batch (a scale
    # that does not depend on the prompt's own samples: updates as large as the z-scored ones,
    # expected update parallel to grad max@k), in the §3.3 IS-weighted loss (the clipped loss would
    # multiply the importance weights by pi_theta/pi_old again at PPO iterations > 0).
    # Eq. 10 (exact weights) and the first-order r~' of §3.3.
    # Eq. 10 + loo1 + loo_rms is the project's default method (DEFAULT_METHOD).
    DEFAULT_METHOD: UNBIASED_OFFPOLICY,
    "maxk_offpolicy_loo1_rms": Method("maxk_offpolicy", {"baseline": "loo1", "scale": "loo_rms"},
                                      loss_kind="is_weighted"),
    # On-policy max@k (eq. 9), z-scored (== bon_mean); ignores PPO staleness.
    "maxk": Method("maxk"),
    # RLOO (Ahmadian et al.): leave-one-out mean baseline.
    "rloo": Method("rloo"),
    # Tang et al. eq. 2 (leave-one-out, f = max) and eq. 3 (mean-subtracted).
    "tang_loo": Method("tang_loo"),
    "tang_loo_biased": Method("tang_loo_biased"),
    # Tang et al. App. B leave-p-out (p = 1; --config.algo.estimator_options="(('p',2),)").
    "tang_leave_p_out": Method("tang_leave_p_out"),
    # Tang et al. App. B softmax objective (beta = 1).
    "tang_softmax": Method("tang_softmax"),
    # Tang et al. §3.1 majority voting; the answer is the program's judged behaviour on the test
    # inputs (maxk_jax/execution/behaviour.py); undetermined behaviour is masked.
    "majority_vote": Method("majority_vote"),
}

class Scaled(NamedTuple):
    """An override value relative to the run's own: the field's value times `factor` (a variant's
    "half the learning rate" is half of whatever the config's is, at any scale)."""

    factor: float


# Variants: name -> (parent METHODS entry, extra estimator options, RunConfig overrides as dotted
# paths; a `Scaled` value multiplies the run's own). They put points on the max@k-vs-KL frontier (the same estimators with smaller steps) and
# isolate single factors of the paper's method.
VARIANTS: dict[str, tuple[str, dict[str, Any], dict[str, Any]]] = {
    # the former default of maxk_offpolicy: unbiased LOO-1 baseline, §3.3 IS-weighted loss
    "maxk_offpolicy_loo1_is": ("maxk_offpolicy_is", {"baseline": "loo1"}, {}),
    # GRPO with half the learning rate (a smaller step at the same number of RL steps)
    "grpo_lowlr": ("grpo", {}, {"optim.learning_rate": Scaled(0.5)}),
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
    "maxk_offpolicy_lowlr": ("maxk_offpolicy", {}, {"optim.learning_rate": Scaled(0.5)}),
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

# (estimator, loss form, estimator options, RunConfig overrides as dotted paths)
MethodSpec = tuple[str, str, dict[str, Any], dict[str, Any]]


def method_names(table: Mapping[str, Method] | None = None) -> list[str]:
    """Every valid method name, in registry order: the entries of `table` (default `METHODS`), every
    estimator of ``maxk_jax.estimators`` the table lacks (a method of its own name: the estimator's
    defaults), and the `VARIANTS` whose parent is among them."""
    from maxk_jax.estimators import list_estimators

    table = METHODS if table is None else table
    base = [*table, *(e for e in list_estimators() if e not in table)]
    return [*base, *(v for v, (parent, _, _) in VARIANTS.items() if parent in base and v not in base)]


def check_method(name: Any, table: Mapping[str, Method] | None = None) -> str:
    """`name` when it is a method name (`method_names`), else ValueError naming it and listing the valid ones
    (the one message of every entry point's ``--method`` / ``--methods``)."""
    names = method_names(table)
    if not isinstance(name, str) or name not in names:
        if name in VARIANTS:
            raise ValueError(f"method {name!r} is a variant of {VARIANTS[name][0]!r}, which the method table "
                             f"lacks (it has: {', '.join(sorted(names))})")
        raise ValueError(f"method {name!r} is unknown; valid methods: {', '.join(names)}")
    return name


def method_spec(name: str, table: Mapping[str, Method] | None = None) -> MethodSpec:
    """(estimator, loss form, estimator options, RunConfig overrides) of method `name` (`method_names`
    of `table`, default `METHODS`; ValueError for an unknown name: `check_method`). The options are a copy."""
    table = METHODS if table is None else table
    check_method(name, table)
    if name not in VARIANTS or name in table:
        entry = table.get(name, Method(name))
        return entry.estimator, entry.loss_kind, dict(entry.options), {}
    parent, extra, overrides = VARIANTS[name]
    entry = table.get(parent, Method(parent))
    return entry.estimator, entry.loss_kind, {**dict(entry.options), **extra}, dict(overrides)


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


def apply_method(run: RunConfig, name: str, table: Mapping[str, Method] | None = None, *,
                 rename: bool = True) -> RunConfig:
    """`run` training method `name` (`method_spec`: estimator, options, loss form, overrides), named
    `name` when `rename` (the run's label: `method_label`). ValueError for an unknown name or an
    override the run refuses."""
    estimator, kind, options, overrides = method_spec(name, table)
    out = with_method(run, Method(estimator, options, kind), name=name if rename else None)
    try:
        return replace_fields(out, {path: _value(run, path, v) for path, v in overrides.items()})
    except ValueError as err:
        raise ValueError(f"method {name!r} overrides fields {sorted(overrides)}: {err}") from err


def _field(run: RunConfig, path: str) -> Any:
    """The value of the dotted field `path` of `run`."""
    node: Any = run
    for part in path.split("."):
        node = getattr(node, part)
    return node


def _value(run: RunConfig, path: str, value: Any) -> Any:
    """An override's value for `run`: `value`, or the run's own value at `path` times a `Scaled` factor."""
    return _field(run, path) * value.factor if isinstance(value, Scaled) else value


def method_label(run: RunConfig, table: Mapping[str, Method] | None = None) -> str:
    """The name runs of `run`'s method are labelled with: ``run.name`` when it is a method name
    whose settings `run` has (e.g. after `apply_method`; a `Scaled` field is not checked), else the first registry name whose
    settings it has (estimator, options, loss form, overrides; the methods with overrides first, those
    with only `Scaled` ones never), else a description
    ``<estimator>(<option>=<value>, ..., <loss form> loss)`` of a method the registry lacks."""
    names = method_names(table)

    def has(name: str) -> bool:   # a Scaled override's field is not checked (its base value is gone)
        estimator, kind, options, overrides = method_spec(name, table)
        a = run.algo
        if (a.estimator, dict(a.estimator_options), a.loss.kind) != (estimator, options, loss_form(estimator, kind)):
            return False
        return all(_field(run, p) == v for p, v in overrides.items() if not isinstance(v, Scaled))

    if run.name in names and has(run.name):
        return run.name

    def rank(name: str) -> int:   # 0: absolute overrides (the most specific), 1: none, 2: only Scaled ones
        overrides = method_spec(name, table)[3].values()
        return 1 if not overrides else 2 if all(isinstance(v, Scaled) for v in overrides) else 0

    for name in sorted((n for n in names if rank(n) < 2), key=rank):
        if has(name):
            return name
    a = run.algo
    return f"{a.estimator}({''.join(f'{k}={v}, ' for k, v in a.estimator_options)}{a.loss.kind} loss)"


def define_method_flag() -> None:
    """``--method`` (once per process): the RL method by its registry name (`maxk_jax.rl.method`; the
    same names, default and error of every entry point that trains). Its value: None = the config's
    method; check it with `maxk_jax.rl.method.check_method` (one line naming the valid ones)."""
    if "method" not in flags.FLAGS:
        flags.DEFINE_string(
            "method", None, "RL method: estimator + options + loss form, by its name in the registry "
            f"maxk_jax.rl.method (default: the config's method, {DEFAULT_METHOD} in every shipped config: "
            "unbiased off-policy max@k, docs/usage/estimators.md). Valid: " + ", ".join(method_names()) + ".",
            module_name=sys.argv[0])   # listed by --help with the program's own flags


def method_flag(prefix: str = "", argv: Sequence[str] | None = None) -> str | None:
    """The ``--method`` given (None when not given), checked: a registry name (ValueError naming the
    valid ones) that no ``--config.<prefix><field>`` override of the same fields contradicts
    (ValueError: the method sets the estimator, its options, the loss form and its own overrides).
    `prefix`: where the RunConfig sits in the --config tree ("rl." in the pipeline config)."""
    name = flags.FLAGS.method
    if name is None:
        return None
    check_method(name)
    touched = {"algo.estimator", "algo.estimator_options", "algo.loss.kind", *method_spec(name)[3]}
    given = [a[2:].split("=", 1)[0] for a in (sys.argv if argv is None else argv)[1:] if a.startswith("--config.")]
    clash = [g for g in given if g[len("config."):].removeprefix(prefix) in touched]
    if clash:
        raise ValueError(f"--method={name} sets {', '.join('--' + c for c in clash)} too: give one of them (a "
                         "method's settings with other estimator options: --config.<...>.algo.* without --method)")
    return name
