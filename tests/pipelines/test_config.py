"""maxk_jax.pipelines.config: command-line shortcuts, validation naming the bad field, the judge
cache rule, and the RL config derived from the pipeline config."""
import pytest

from maxk_jax.pipelines import default_config
from maxk_jax.pipelines import apply_overrides, rl_config, uses_judge_cache, validate_config


def test_judge_cache_is_used_for_synthetic_data_only():
    cfg = default_config()
    assert uses_judge_cache(cfg)
    cfg.executor_cache = False
    assert not uses_judge_cache(cfg)
    real = apply_overrides(default_config(), model_path="/ckpt", dataset="mbpp")
    assert real.executor_cache and not uses_judge_cache(real)


def test_overrides_return_a_copy_with_the_shortcuts_applied():
    cfg = default_config()
    out = apply_overrides(cfg, name="x", runs_dir="/r", estimator="grpo", k=2, model_path="/m", dataset="mbpp",
                          dataset_path="/d")
    assert (out.name, out.runs_dir, out.rl.algo.estimator, out.rl.algo.k, out.model.path, out.data.dataset,
            out.data.path) == ("x", "/r", "grpo", 2, "/m", "mbpp", "/d")
    assert cfg.to_dict() == default_config().to_dict()          # the input is unchanged
    assert apply_overrides(cfg).to_dict() == cfg.to_dict()             # None keeps every value


@pytest.mark.parametrize("kwargs,match", [
    (dict(estimator="nope"), "estimator='nope' is unknown"),
    (dict(k=9), "k=9"),
    (dict(dataset="mbpp"), "needs --model_path"),
    (dict(dataset="no_such_set"), "neither 'synthetic'"),
    (dict(dataset_path="/data/mbpp"), "dataset_path='/data/mbpp' is set but dataset='synthetic'"),
    (dict(model_path="/nonexistent"), "not a Hugging Face directory"),
    (dict(name="a/b"), "plain directory name"),
])
def test_flag_validation(kwargs, match):
    cfg = apply_overrides(default_config(), **kwargs)
    with pytest.raises(ValueError, match=match):
        validate_config(cfg)


@pytest.mark.parametrize("section,field,value,match", [
    ("eval", "n", 0, "eval.n"), ("eval", "temperature", 0.0, "eval.temperature"),
    ("eval", "top_p", 2.0, "eval.top_p must lie in"), ("eval", "top_k", -1, "eval.top_k must be an int >= 0"),
    ("eval", "temperature", float("inf"), "eval.temperature must be a finite float"),
    ("warmup", "steps", 0, "WarmupConfig.steps"), ("warmup", "noise", 1.5, "warmup.noise"),
    ("synthetic", "max_ops", 9, "max_ops"), ("rl", "max_steps", -1, "max_steps"),
])
def test_config_validation(section, field, value, match):
    cfg = default_config()
    cfg[section][field] = value
    with pytest.raises(ValueError, match=match):
        validate_config(cfg)


def test_rl_config_fills_in_model_data_judge_and_output():
    cfg = default_config()
    cfg.seed, cfg.executor = 7, "embedded:2"
    rl = rl_config(cfg, "/base", "/run/rl", "/cache/train.jsonl")
    assert (rl.seed, rl.output_dir, rl.model.path, rl.rollout.executor) == (7, "/run/rl", "/base", "embedded:2")
    assert (rl.data.problems, rl.data.dataset, rl.data.prompt_format) == ("/cache/train.jsonl", "", "statement")
    assert cfg.rl.output_dir == "" and cfg.rl.model.path == ""         # cfg.rl itself is unchanged
    real = apply_overrides(cfg, model_path="/ckpt", dataset="mbpp", dataset_path="/data")
    rl = rl_config(real, "/ckpt", "/run/rl", None)
    assert (rl.data.dataset, rl.data.path, rl.data.split, rl.data.problems, rl.data.prompt_format) == (
        "mbpp", "/data", "train", "", "full")
