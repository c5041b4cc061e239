"""experiments/configs: the method table (one entry per method, the loss form only where it
deviates from the estimator registry) and the config files' ConfigDicts, which convert to the
typed RunConfig (maxk_jax.rl.run_config) and back unchanged."""
import pytest

from experiments.configs import base, tiny, tiny_synthetic
from maxk_jax.estimators import estimator_info
from maxk_jax.pipelines import from_config_dict as pipeline_from_config_dict
from maxk_jax.pipelines import rl_config, shortcut_overrides
from maxk_jax.rl.config_dict import from_config_dict, to_config_dict
from maxk_jax.cli.fields import replace_fields


def test_every_method_config_validates():
    assert {"grpo", "bon_max_mean", "bon_max_second", "bon_loo1", "bon_mean", "maxk_offpolicy",
            "maxk_offpolicy_exact", "tang_loo", "tang_loo_biased"} <= set(base.METHODS)
    runs = [from_config_dict(base.get_config(name)) for name in base.METHODS]
    runs.append(from_config_dict(tiny_synthetic.get_config()))
    for run in runs:
        step = replace_fields(run, {"model.path": "/model", "output_dir": "/out"}).validate(num_devices=8)
        assert step.k <= step.n
    for name, method in base.METHODS.items():
        step = from_config_dict(base.get_config(name)).step_config()
        registry = estimator_info(method.estimator).loss_form
        assert (step.estimator, step.kind) == (method.estimator, registry if method.loss_kind == "auto"
                                               else method.loss_kind), name
        assert method.loss_kind in ("auto", "is_weighted") and method.loss_kind != registry, name
    with pytest.raises(ValueError, match="method 'nope' is unknown; valid methods: grpo, "):
        base.get_config("nope")
    paper = base.get_config()
    assert (paper.rollout.sampler.n, paper.rollout.sampler.temperature, paper.rollout.sampler.top_p,
            paper.rollout.sampler.max_new_tokens, paper.optim.learning_rate, paper.algo.loss.kl_beta, paper.algo.loss.eps_low, paper.algo.ppo_iterations,
            paper.data.epochs) == (8, 1.0, 1.0, 256, 5e-6, 0.01, 0.2, 3, 1)
    assert paper.name == base.DEFAULT_METHOD == "maxk_offpolicy_exact_loo1_rms"     # the unbiased default
    step = from_config_dict(paper).step_config()
    assert (step.estimator, step.kind, dict(step.estimator_options)) == (
        "maxk_offpolicy_exact", "is_weighted", {"baseline": "loo1", "scale": "loo_rms"})
    zscore = from_config_dict(base.get_config("maxk_offpolicy_zscore"))                 # the paper's form by name
    assert zscore.algo.estimator == "maxk_offpolicy" and zscore.step_config().kind == "clipped"   # eq. 4
    assert from_config_dict(base.get_config("maxk_offpolicy_is")).step_config().kind == "is_weighted"  # §3.3


def test_config_files_round_trip_through_the_typed_config():
    for name in base.METHODS:
        cfg = base.get_config(name)
        assert from_config_dict(cfg) == base.get_run_config(name)
        assert to_config_dict(from_config_dict(cfg)).to_dict() == cfg.to_dict()
    assert from_config_dict(tiny_synthetic.get_config()) == tiny_synthetic.get_run_config()
    run = rl_config(pipeline_from_config_dict(tiny.get_config()), "/base", "/run/rl", "/cache/train.jsonl")
    assert (run.rollout.prompts, run.rollout.sampler.n, run.max_steps, run.algo.estimator) == (8, 8, 16,
                                                                                         "maxk_offpolicy_exact")
    assert (dict(run.algo.estimator_options), run.algo.loss.kind) == ({"baseline": "loo1", "scale": "loo_rms"},
                                                                      "is_weighted")
    grpo = rl_config(pipeline_from_config_dict(tiny.get_config(), shortcut_overrides(estimator="grpo")), "/base",
                     "/run/rl", "/cache/train.jsonl")   # --estimator: that estimator with its own defaults
    assert (grpo.algo.estimator, grpo.algo.estimator_options, grpo.algo.loss.kind) == ("grpo", (), "clipped")


def test_tiny_pipeline_config_file_serves_the_typed_defaults_and_the_toy_variant():
    from maxk_jax.pipelines import default_config, smoke_config, testbed_config, toy_config

    assert pipeline_from_config_dict(tiny.get_config()) == default_config()
    assert pipeline_from_config_dict(tiny.get_config("toy")) == toy_config()
    assert pipeline_from_config_dict(tiny.get_config("smoke")) == smoke_config()
    assert pipeline_from_config_dict(tiny.get_config("testbed")) == testbed_config()
    with pytest.raises(ValueError, match="unknown variant 'big'"):
        tiny.get_config("big")
    # the stand-alone tiny run is the pipeline's RL run with its own deviations (sizes written once)
    run, rl = tiny_synthetic.get_run_config(), default_config().rl
    assert (run.rollout, run.algo, run.model, run.mesh) == (rl.rollout, rl.algo, rl.model, rl.mesh)
    assert (run.optim.learning_rate, run.data.dataset, run.eval.limit) == (1e-3, "synthetic", 32)
