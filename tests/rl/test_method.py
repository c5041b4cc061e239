"""maxk_jax.rl.method: the one registry of methods (every entry point's --method names), applying a
method to a RunConfig, and the label runs get (the method's name, never a bare estimator)."""
import dataclasses

import pytest

from maxk_jax.estimators import list_estimators
from maxk_jax.cli.fields import replace_fields
from maxk_jax.rl.method import (DEFAULT_METHOD, METHODS, UNBIASED_OFFPOLICY, VARIANTS, Method, apply_method,
                                check_method, method_label, method_names, method_spec)
from maxk_jax.rl.run_config import RunConfig


def test_registry_names_every_method_once_and_the_default():
    names = method_names()
    assert len(names) == len(set(names)) == len(METHODS) + len(VARIANTS)
    assert set(list_estimators()) <= set(METHODS)           # every estimator is a method of its own name
    assert METHODS[DEFAULT_METHOD] == UNBIASED_OFFPOLICY == Method(
        "maxk_offpolicy_exact", (("baseline", "loo1"), ("scale", "loo_rms")), "is_weighted")
    assert DEFAULT_METHOD == "maxk_offpolicy_exact_loo1_rms"


def test_unknown_names_are_one_message_listing_the_valid_ones():
    with pytest.raises(ValueError) as err:
        check_method("maxk_offpolicy_exact_loo1_rms_typo")
    assert str(err.value) == ("method 'maxk_offpolicy_exact_loo1_rms_typo' is unknown; valid methods: "
                              + ", ".join(method_names()))
    assert check_method(DEFAULT_METHOD) == DEFAULT_METHOD
    with pytest.raises(ValueError, match="method 'nope' is unknown"):
        apply_method(RunConfig(), "nope")


@pytest.mark.parametrize("name", method_names())
def test_every_method_applies_and_labels_its_runs_by_name(name):
    estimator, kind, options, overrides = method_spec(name)
    run = apply_method(RunConfig(), name)
    assert (run.name, run.algo.estimator, dict(run.algo.estimator_options)) == (name, estimator, options)
    assert run.algo.loss.kind == (kind if kind != "auto" else run.step_config().kind)
    assert method_label(run) == name
    # without its name the label is the first registry name of the same settings (an alias's original)
    label = method_label(dataclasses.replace(run, name="run"))
    assert apply_method(RunConfig(), label).algo == run.algo


def test_labels_of_unnamed_runs_and_of_settings_outside_the_registry():
    assert method_label(RunConfig()) == "maxk_offpolicy"                      # the RunConfig's own default
    assert method_label(apply_method(RunConfig(), "grpo", rename=False)) == "grpo"   # not grpo_lowlr (lr unknown)
    assert method_label(apply_method(RunConfig(), "grpo_binary", rename=False)) == "grpo_binary"   # most specific
    assert method_label(apply_method(RunConfig(), DEFAULT_METHOD, rename=False)) == DEFAULT_METHOD
    assert method_label(apply_method(RunConfig(), "maxk_offpolicy_zscore")) == "maxk_offpolicy_zscore"
    odd = replace_fields(apply_method(RunConfig(), "maxk_offpolicy_exact"),
                         {"algo.estimator_options": (("baseline", "loo1"),), "algo.loss.kind": "is_weighted"})
    assert method_label(odd) == "maxk_offpolicy_exact(baseline=loo1, is_weighted loss)"
    # a run named after a method whose settings it lacks is labelled by its settings, not its name
    assert method_label(dataclasses.replace(odd, name="grpo")) == "maxk_offpolicy_exact(baseline=loo1, is_weighted loss)"


def test_variants_apply_their_overrides_relative_where_scaled():
    run = replace_fields(RunConfig(), {"optim.learning_rate": 4e-4})
    low = apply_method(run, "grpo_lowlr")
    assert (low.algo.estimator, low.optim.learning_rate) == ("grpo", 2e-4)      # half the run's own
    assert apply_method(RunConfig(), "grpo_binary").rollout.reward == "binary"
    assert apply_method(RunConfig(), "maxk_offpolicy_seq_ratio").algo.loss.ratio_level == "sequence"


def test_every_shipped_config_trains_the_default_method():
    """What --method's help says: the default is the config's method, the default method in every shipped config."""
    from experiments.configs import base, tiny, tiny_synthetic
    from maxk_jax.pipelines import from_config_dict as pipeline_config
    from maxk_jax.rl.config_dict import from_config_dict

    assert method_label(from_config_dict(base.get_config())) == DEFAULT_METHOD
    assert method_label(tiny_synthetic.get_run_config()) == DEFAULT_METHOD
    for variant in (None, "toy", "smoke", "testbed"):
        assert method_label(pipeline_config(tiny.get_config(variant)).rl) == DEFAULT_METHOD, variant


def test_the_docs_table_lists_every_method_once():
    """docs/usage/estimators.md's method table names exactly the registry's methods."""
    import pathlib
    import re

    text = (pathlib.Path(__file__).resolve().parents[2] / "docs/usage/estimators.md").read_text(encoding="utf-8")
    section = text.split("## Methods (`maxk_jax.rl.method`)", 1)[1]
    rows = [line.split("|")[1] for line in section.splitlines() if line.startswith("| `")]
    names = [n for row in rows for n in re.findall(r"`([a-z0-9_]+)`", row)]
    assert sorted(names) == sorted(method_names())
