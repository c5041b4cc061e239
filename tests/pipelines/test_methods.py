"""maxk_jax.pipelines.methods: method names -> estimator, loss form, options and RL overrides from
the method table (shaped like experiments/configs/base.py's METHODS, checked there by
tests/experiments/test_configs.py) and the comparison-only variants; the method list is validated
against the pipeline config."""
import pytest

from maxk_jax.pipelines import TABLE2_METHODS, apply_method, default_config, method_spec, rl_config, validate_methods
from maxk_jax.cli.fields import replace_fields
from maxk_jax.rl.method import Method
from tests.pipelines.fixtures import method_table

METHODS = method_table()


def test_methods_set_estimator_loss_form_options_and_overrides():
    base = default_config()
    cfg = apply_method(base, "maxk_offpolicy_is", METHODS)
    assert (cfg.rl.algo.estimator, cfg.rl.algo.loss.kind) == ("maxk_offpolicy", "is_weighted")
    assert base == default_config()                                    # a copy: the input is unchanged
    cfg = apply_method(cfg, "maxk_offpolicy", METHODS)
    assert (cfg.rl.algo.estimator, cfg.rl.algo.loss.kind) == ("maxk_offpolicy", "clipped")   # the registry's
    assert rl_config(cfg, "/m", "/o", "/t").algo.loss.kind == "clipped"
    cfg = apply_method(cfg, "bon_mean", METHODS)
    assert (cfg.rl.algo.estimator, cfg.rl.algo.loss.kind, cfg.rl.algo.estimator_options) == (
        "bon_mean", "clipped", ())
    assert validate_methods(list(TABLE2_METHODS), default_config(), METHODS) == list(TABLE2_METHODS)
    cfg = apply_method(cfg, "maxk_offpolicy_loo1_is", METHODS)
    run = rl_config(cfg, "/m", "/o", "/t")
    assert (run.algo.loss.kind, run.algo.estimator_options) == ("is_weighted", (("baseline", "loo1"),))
    lr = cfg.rl.optim.learning_rate
    cfg = apply_method(cfg, "grpo_lowlr", METHODS)
    assert cfg.rl.algo.estimator == "grpo" and cfg.rl.optim.learning_rate == 1.5e-4 != lr
    # eq. 4 as printed, one factor each, on the paper's method
    run = rl_config(apply_method(cfg, "maxk_offpolicy_seq_ratio", METHODS), "/m", "/o", "/t")
    assert (run.algo.estimator, run.algo.loss.ratio_level, run.algo.loss.kl_target) == (
        "maxk_offpolicy", "sequence", "reference")
    run = rl_config(apply_method(cfg, "maxk_offpolicy_kl_old", METHODS), "/m", "/o", "/t")
    assert (run.algo.loss.ratio_level, run.algo.loss.kl_target) == ("token", "old")
    run = rl_config(apply_method(cfg, "grpo_seq_ratio", METHODS), "/m", "/o", "/t")
    assert (run.algo.estimator, run.algo.loss.ratio_level, run.algo.loss.kl_target) == (
        "grpo", "sequence", "reference")
    # the delta-size suspect: a tighter clamp, a smaller step
    run = rl_config(apply_method(cfg, "maxk_offpolicy_clamp02", METHODS), "/m", "/o", "/t")
    assert (run.algo.estimator, run.algo.estimator_options) == ("maxk_offpolicy", (("clamp_delta", 0.2),))
    run = rl_config(apply_method(default_config(), "maxk_offpolicy_lowlr", METHODS), "/m", "/o", "/t")
    assert (run.algo.estimator, run.optim.learning_rate) == ("maxk_offpolicy", 1.5e-4)
    # the row-std suspect: the mean baseline, on- and off-policy
    for name, estimator in (("maxk_mean", "maxk"), ("maxk_offpolicy_mean", "maxk_offpolicy")):
        run = rl_config(apply_method(default_config(), name, METHODS), "/m", "/o", "/t")
        assert (run.algo.estimator, dict(run.algo.estimator_options)["baseline"]) == (estimator, "mean")
    for name, estimator in (("maxk_offpolicy_loo1", "maxk_offpolicy"), ("maxk_offpolicy_exact_loo1",
                                                                        "maxk_offpolicy_exact")):
        run = rl_config(apply_method(default_config(), name, METHODS), "/m", "/o", "/t")
        assert (run.algo.estimator, run.algo.loss.kind, run.algo.estimator_options) == (
            estimator, "clipped", (("baseline", "loo1"),))
    # a registry name outside the table: its defaults, loss form "auto"
    assert method_spec("tang_loo", {}) == ("tang_loo", "auto", {}, {})


def test_the_method_table_is_the_callers():
    table = {"maxk_offpolicy": Method("maxk_offpolicy", {"clamp_delta": 0.5}, "clipped")}
    assert method_spec("maxk_offpolicy", table) == ("maxk_offpolicy", "clipped", {"clamp_delta": 0.5}, {})
    with pytest.raises(ValueError, match="variant of 'maxk_offpolicy_is', which the method table lacks"):
        method_spec("maxk_offpolicy_loo1_is", table)
    # every estimator is a method of its own name (its defaults), so its variants resolve too
    assert method_spec("grpo", table) == ("grpo", "auto", {}, {})
    assert method_spec("grpo_binary", table) == ("grpo", "auto", {}, {"rollout.reward": "binary"})
    spec = method_spec("maxk_offpolicy", table)
    spec[2]["clamp_delta"] = 9.0                     # the returned options are a copy
    assert table["maxk_offpolicy"].options == {"clamp_delta": 0.5}


@pytest.mark.parametrize("methods,match", [
    (["grpo", "bon_mean"], "--reference='maxk_offpolicy' must be one of --methods"),
    (["maxk_offpolicy"], "at least two"),
    (["maxk_offpolicy", "grpo", "grpo"], "distinct"),
    (["maxk_offpolicy", "nope"], "method 'nope' is unknown; valid methods: grpo, "),
])
def test_method_validation(methods, match):
    with pytest.raises(ValueError, match=match):
        validate_methods(methods, default_config(), METHODS)


def test_finished_runs_of_a_refused_setting_validate_by_name_only():
    """Aggregating runs made before a setting was refused (the z-scored behaviour cells) checks the
    names only; training them is refused, and an unknown name is refused either way."""
    cfg = replace_fields(default_config(), {
        "rl.rollout.max_staleness": 1, "rl.algo.stale_correction": "behaviour", "rl.algo.loss.kind": "is_weighted",
        "rl.algo.estimator": "maxk_offpolicy_exact",
        "rl.algo.estimator_options": (("baseline", "loo1"), ("scale", "loo_rms"))})
    methods = ["maxk_offpolicy", "maxk_offpolicy_exact"]
    assert validate_methods(methods, cfg, METHODS, "base", trained=False) == methods
    with pytest.raises(ValueError, match="needs algo.loss.kind='is_weighted'"):
        validate_methods(methods, cfg, METHODS, "base")
    with pytest.raises(ValueError, match="method 'nope' is unknown"):
        validate_methods(["nope"], cfg, METHODS, "base", trained=False)
