"""maxk_jax.pipelines.config / config_dict: the typed PipelineConfig (validation naming the bad
field, frozen keyword-only sections), command-line shortcuts, the judge cache rule, the RL config
derived from the pipeline config, and the ConfigDict form (round trip, --config overrides)."""
import dataclasses
import json

import pytest
from absl import flags
from ml_collections import config_flags

from maxk_jax.pipelines import (PipelineConfig, PipelineData, PipelineEval, TinyModelSettings, TokenizerSettings,
                                WarmupPhase, apply_overrides, default_config, from_config_dict, rl_config,
                                shortcut_overrides, to_config_dict, smoke_config, uses_judge_cache, validate_config)
from maxk_jax.cli.fields import replace_fields


def test_judge_cache_is_used_for_synthetic_data_only():
    cfg = default_config()
    assert uses_judge_cache(cfg)
    assert not uses_judge_cache(replace_fields(cfg, {"executor_cache": False}))
    real = apply_overrides(default_config(), model_path="/ckpt", dataset="mbpp")
    assert real.executor_cache and not uses_judge_cache(real)
    # a reward function scores completions, not programs: nothing to cache (tiny_pipeline --reward)
    assert not uses_judge_cache(replace_fields(cfg, {"executor": "reward:maxk_jax.data.arithmetic:closeness_reward"}))


def test_overrides_return_a_copy_with_the_shortcuts_applied():
    cfg = default_config()
    out = apply_overrides(cfg, name="x", runs_dir="/r", estimator="grpo", k=2, model_path="/m", dataset="mbpp",
                          dataset_path="/d")
    assert (out.name, out.runs_dir, out.rl.algo.estimator, out.rl.algo.k, out.model.path, out.data.dataset,
            out.data.path) == ("x", "/r", "grpo", 2, "/m", "mbpp", "/d")
    assert cfg == default_config() == PipelineConfig()         # the input is unchanged
    assert apply_overrides(cfg) == cfg                         # None keeps every value
    assert shortcut_overrides(k=2, name=None) == {"rl.algo.k": 2}


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
    with pytest.raises(ValueError, match=match):
        validate_config(apply_overrides(default_config(), **kwargs))
    with pytest.raises(ValueError, match=match):       # the command-line route: one conversion
        validate_config(from_config_dict(to_config_dict(default_config()), shortcut_overrides(**kwargs)))


@pytest.mark.parametrize("section,field,value,match", [
    ("eval.sampler", "n", 0, "eval.sampler.n"), ("eval.sampler", "temperature", 0.0, "eval.sampler.temperature"),
    ("eval.sampler", "top_p", 2.0, "eval.sampler.top_p must lie in"),
    ("eval.sampler", "top_k", -1, "eval.sampler.top_k must be an int >= 0"),
    ("eval.sampler", "temperature", float("inf"), "eval.sampler.temperature must be a finite float"),
    ("eval", "num_problems", 0, "eval.num_problems=0 must be an int >= 1"),
    ("eval", "n", 8, r"eval has no field\(s\) \['n'\].*\(did you mean eval.sampler.n\?\)"),
    ("warmup.config", "steps", 0, "WarmupConfig.steps"), ("warmup", "noise", 1.5, "warmup.noise"),
    ("warmup", "steps", 9, r"\(did you mean warmup.config.steps\?\)"),
    ("warmup", "per_problem", 0, "warmup.per_problem=0 must be an int >= 1"),
    ("synthetic", "max_ops", 9, "max_ops"), ("rl", "max_steps", -1, "rl.max_steps"),
    ("data", "options", '{"seed": 1}', "data.options=.* must be \\(name, value\\) pairs"),
    ("tokenizer", "vocab_size", 0, "tokenizer.vocab_size=0"), ("model", "num_layers", 1.5, "model.num_layers=1.5"),
])
def test_config_validation(section, field, value, match):
    tree = to_config_dict(default_config()).to_dict()   # the dict form: no ConfigDict type check
    node = tree
    for part in section.split("."):
        node = node[part]
    node[field] = value
    with pytest.raises(ValueError, match=match):
        from_config_dict(tree)


def test_sections_are_frozen_keyword_only_and_validated_on_construction():
    with pytest.raises(TypeError):
        TokenizerSettings(768)   # noqa: positional
    with pytest.raises(dataclasses.FrozenInstanceError):
        default_config().seed = 1   # type: ignore[misc]
    for make, match in [(lambda: PipelineData(path=3), "data.path=3 must be a str"),
                        (lambda: PipelineData(options=(("a", 1), ("a", 2))), "names an option twice"),
                        (lambda: TinyModelSettings(hidden_size=0), "model.hidden_size=0 must be an int >= 1"),
                        (lambda: WarmupPhase(noise=-0.1), r"warmup.noise=-0.1 must be in \[0, 1\]"),
                        (lambda: PipelineEval(seed=-1), "eval.seed=-1 must be an int >= 0"),
                        (lambda: PipelineConfig(executor=""), "executor='' must be a non-empty string"),
                        (lambda: PipelineConfig(eval=3), "eval=3 must be a PipelineEval")]:
        with pytest.raises(ValueError, match=match):
            make()
    assert PipelineData(options={"seed": 2, "a": None}).options == (("a", None), ("seed", 2))


def test_config_dict_round_trip_and_errors():
    for cfg in (default_config(), smoke_config(),
                replace_fields(smoke_config(), {"data.options": (("seed", 3),), "warmup.config.logprob_chunk": 64,
                                              "rl.algo.estimator_options": (("clamp_delta", 0.5),)})):
        tree = to_config_dict(cfg)
        assert from_config_dict(tree) == cfg
        assert from_config_dict(json.loads(tree.to_json_best_effort())) == cfg   # pipeline_config.json
    tree = to_config_dict(default_config())
    assert (tree.eval.sampler.n, tree.warmup.config.steps, tree.warmup.noise, tree.rl.rollout.sampler.n) == (64, 800, 0.3, 8)
    bad = tree.to_dict()
    bad["runs_dirr"] = "/tmp"                         # a misspelt top-level field
    with pytest.raises(ValueError, match=r"the pipeline config has no field\(s\) \['runs_dirr'\]; valid "
                                         r"top-level fields: .*runs_dir"):
        from_config_dict(bad)
    bad = tree.to_dict()
    bad["data"]["options_json"] = "{}"
    with pytest.raises(ValueError, match=r"data has no field\(s\) \['options_json'\]; valid fields: .*options"):
        from_config_dict(bad)
    bad = tree.to_dict()
    bad["rl"]["algo"]["k"] = 9
    with pytest.raises(ValueError, match=r"^rl.algo.k=9"):
        from_config_dict(bad)
    with pytest.raises(ValueError, match="has no field 'eval.nope'"):
        from_config_dict(tree, {"eval.nope": 1})


def test_command_line_overrides(tmp_path):
    path = tmp_path / "pipe_cfg.py"
    path.write_text("from maxk_jax.pipelines import default_config, to_config_dict\n\n\n"
                    "def get_config():\n    return to_config_dict(default_config())\n")
    argv = ["prog", f"--config={path}", "--config.rl.max_steps=48", "--config.eval.sampler.n=128",
            "--config.warmup.config.seed=1", "--config.data.options=(('seed',3),('difficulty','easy'))",
            "--config.warmup.config.logprob_chunk=256", "--config.rl.algo.estimator_options=(('clamp_delta',0.5),)"]
    values = flags.FlagValues()
    config_flags.DEFINE_config_file("config", str(path), flag_values=values, lock_config=False, sys_argv=argv)
    values(argv)
    cfg = from_config_dict(values.config, shortcut_overrides(k=2, name="cli"))
    assert (cfg.rl.max_steps, cfg.eval.sampler.n, cfg.warmup.config.seed, cfg.warmup.config.logprob_chunk) == (
        48, 128, 1, 256)
    assert cfg.data.options == (("difficulty", "easy"), ("seed", 3))
    assert (cfg.rl.algo.k, cfg.name, cfg.rl.algo.estimator_options) == (2, "cli", (("clamp_delta", 0.5),))


def test_rl_config_fills_in_model_data_judge_and_output():
    cfg = replace_fields(default_config(), {"seed": 7, "executor": "embedded:2"})
    rl = rl_config(cfg, "/base", "/run/rl", "/cache/train.jsonl")
    assert (rl.seed, rl.output_dir, rl.model.path, rl.rollout.executor) == (7, "/run/rl", "/base", "embedded:2")
    assert (rl.data.problems, rl.data.dataset, rl.data.prompt_format) == ("/cache/train.jsonl", "", "statement")
    assert cfg.rl.output_dir == "" and cfg.rl.model.path == ""         # cfg.rl itself is unchanged
    real = apply_overrides(cfg, model_path="/ckpt", dataset="mbpp", dataset_path="/data")
    real = replace_fields(real, {"data.options": {"seed": 5}})
    rl = rl_config(real, "/ckpt", "/run/rl", None)
    assert (rl.data.dataset, rl.data.path, rl.data.split, rl.data.problems, rl.data.prompt_format,
            rl.data.options) == ("mbpp", "/data", "train", "", "full", (("seed", 5),))


def _leaves(obj, path=""):
    """(dotted path, value) of every non-dataclass leaf of a frozen config tree."""
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value):
            yield from _leaves(value, f"{path}{f.name}.")
        else:
            yield f"{path}{f.name}", value


def test_every_pipeline_field_round_trips_through_the_command_line(tmp_path):
    """Each leaf of the pipeline tree outside ``rl`` (covered by tests/rl/test_run_config.py), set
    on the command line by its typed path to a changed value, arrives at that path of the
    PipelineConfig: the command-line spelling is the typed spelling."""
    path = tmp_path / "pipe_cfg.py"
    path.write_text("from maxk_jax.pipelines import default_config, to_config_dict\n\n\n"
                    "def get_config():\n    return to_config_dict(default_config())\n")
    changed = {"bool": lambda v: str(not v).lower(), "int": lambda v: str(v + 1),
               "float": lambda v: str(v * 0.5 + 0.25)}
    tried = 0
    for dotted, value in _leaves(default_config()):
        kind = type(value).__name__
        if dotted.startswith("rl.") or kind not in changed:
            continue
        argv = ["prog", f"--config={path}", f"--config.{dotted}={changed[kind](value)}"]
        values = flags.FlagValues()
        config_flags.DEFINE_config_file("config", str(path), flag_values=values, lock_config=False, sys_argv=argv)
        values(argv)
        try:
            cfg = from_config_dict(values.config)
        except ValueError as err:                    # only valid together with another field
            assert dotted.split(".")[-1] in str(err), (dotted, err)
            continue
        obj = cfg
        for part in dotted.split("."):
            obj = getattr(obj, part)
        assert str(obj).lower() == changed[kind](value).lower() or obj == pytest.approx(float(changed[kind](value))), dotted
        tried += 1
    assert tried >= 15, tried


def test_the_documented_command_lines_use_the_typed_paths():
    """Every ``--config.<path>=`` in README.md and docs/**/*.md names a field of the run config or of the
    pipeline config (so no former flattened spelling survives in what users copy)."""
    import pathlib
    import re

    from maxk_jax.rl.config_dict import to_config_dict as run_tree
    from maxk_jax.rl.run_config import RunConfig

    root = pathlib.Path(__file__).resolve().parents[2]
    texts = [root / "README.md", *sorted((root / "docs").rglob("*.md"))]
    assert {"docs/usage/training.md", "docs/results/async_testbed.md"} <= {str(t.relative_to(root)) for t in texts}
    trees = [run_tree(RunConfig()).to_dict(), to_config_dict(default_config()).to_dict()]

    def has(tree, dotted):
        node = tree
        for part in dotted.split("."):
            if not isinstance(node, dict) or part not in node:
                return False
            node = node[part]
        return True

    found = set()
    for text in texts:
        found |= set(re.findall(r"--config\.([A-Za-z_][A-Za-z0-9_.]*[A-Za-z0-9_])=", text.read_text()))
    assert len(found) >= 40, found
    missing = sorted(p for p in found if not any(has(t, p) for t in trees))
    assert not missing, f"documented --config paths that name no field: {missing}"


def test_the_testbed_is_its_calibrated_point():
    """The testbed config holds exactly the fields of the calibration point that met the target
    (docs/testbed/calibration.jsonl), and is reachable as tiny.py:testbed."""
    import json
    import pathlib

    from experiments.configs import tiny
    from maxk_jax.pipelines import from_config_dict, testbed_config

    rows = [json.loads(line) for line in (pathlib.Path(__file__).resolve().parents[2] / "docs" / "testbed" /
                                          "calibration.jsonl").read_text().splitlines() if line.strip()]
    (row,) = [r for r in rows if r["point"] == "testbed"]
    assert row["target_met"] and row["n"] == 256 and row["num_problems"] == 96
    cfg = testbed_config()
    for path, value in row["changed"].items():
        if path != "runs_dir":
            obj = cfg
            for part in path.split("."):
                obj = getattr(obj, part)
            assert obj == value, path
    assert cfg.synthetic.max_ops == 3 and cfg.rl.rollout.sampler.temperature == cfg.eval.sampler.temperature
    assert from_config_dict(tiny.get_config("testbed")) == cfg
    assert cfg.rl.eval_sampler() == cfg.eval.sampler and cfg.rl.eval.seed == cfg.eval.seed   # curves from the base
