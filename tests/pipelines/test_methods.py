"""maxk_jax.pipelines.methods: method names -> estimator, loss form, options and RL overrides from
the method table (experiments/configs/base.py's METHODS) and the comparison-only variants; the
method list is validated against the pipeline config."""
import json

import pytest

from experiments.configs import base as base_config
from experiments.configs import tiny as tiny_config
from maxk_jax.pipelines import TABLE2_METHODS, apply_method, method_spec, validate_methods

METHODS = base_config.METHODS


def test_methods_set_estimator_loss_form_options_and_overrides():
    cfg = tiny_config.get_config()
    apply_method(cfg, "maxk_offpolicy_is", METHODS)
    assert (cfg.rl.algo.estimator, cfg.rl.algo.loss_kind) == ("maxk_offpolicy", "is_weighted")
    apply_method(cfg, "maxk_offpolicy", METHODS)
    assert (cfg.rl.algo.estimator, cfg.rl.algo.loss_kind) == ("maxk_offpolicy", "clipped")
    apply_method(cfg, "bon_mean", METHODS)
    assert (cfg.rl.algo.estimator, cfg.rl.algo.loss_kind, cfg.rl.algo.estimator_options_json) == (
        "bon_mean", "clipped", "{}")
    assert validate_methods(list(TABLE2_METHODS), tiny_config.get_config(), METHODS) == list(TABLE2_METHODS)
    apply_method(cfg, "maxk_offpolicy_loo1_is", METHODS)
    assert (cfg.rl.algo.loss_kind, json.loads(cfg.rl.algo.estimator_options_json)) == (
        "is_weighted", {"baseline": "loo1"})
    lr = cfg.rl.optim.learning_rate
    apply_method(cfg, "grpo_lowlr", METHODS)
    assert cfg.rl.algo.estimator == "grpo" and cfg.rl.optim.learning_rate == 1.5e-4 != lr
    # a registry name outside the table: its defaults, loss form "auto"
    assert method_spec("tang_loo", {}) == ("tang_loo", "auto", {}, {})


def test_the_method_table_is_the_callers():
    table = {"maxk_offpolicy": ("maxk_offpolicy", "clipped", {"clamp_delta": 0.5})}
    assert method_spec("maxk_offpolicy", table) == ("maxk_offpolicy", "clipped", {"clamp_delta": 0.5}, {})
    with pytest.raises(ValueError, match="variant of 'grpo', which the method table lacks"):
        method_spec("grpo_lowlr", table)
    spec = method_spec("maxk_offpolicy", table)
    spec[2]["clamp_delta"] = 9.0                     # the returned options are a copy
    assert table["maxk_offpolicy"][2] == {"clamp_delta": 0.5}


@pytest.mark.parametrize("methods,match", [
    (["grpo", "bon_mean"], "must include 'maxk_offpolicy'"),
    (["maxk_offpolicy"], "at least two"),
    (["maxk_offpolicy", "grpo", "grpo"], "distinct"),
    (["maxk_offpolicy", "nope"], "estimator='nope' is unknown"),
])
def test_method_validation(methods, match):
    with pytest.raises(ValueError, match=match):
        validate_methods(methods, tiny_config.get_config(), METHODS)
