"""The typed run config: field validation (errors name the field and the value), composition of
the sampler / loss settings, the ConfigDict round trip, and command-line overrides of the typed
fields through absl's config_flags."""
import dataclasses
import json

import pytest
from absl import flags
from ml_collections import config_flags

from maxk_jax.rl.config_dict import from_config_dict, to_config_dict
from maxk_jax.rl.losses import LossConfig
from maxk_jax.rl.run_config import (AlgoSettings, DataSettings, EvalSettings, ModelSettings, OptimSettings, RolloutConfig, RunConfig)
from maxk_jax.rl.method import Method, with_method
from maxk_jax.cli.fields import replace_fields
from maxk_jax.sampling import SamplerSettings


def test_defaults_are_the_papers_hyperparameters():
    run = RunConfig()
    s, a = run.rollout.sampler, run.algo
    assert (s.n, s.temperature, s.top_p, s.max_new_tokens, run.optim.learning_rate) == (8, 1.0, 1.0, 256, 5e-6)
    assert (a.loss.kl_beta, a.loss.eps_low, a.ppo_iterations, run.data.epochs) == (0.01, 0.2, 3, 1)
    assert a.behaviour_logprobs == "trainer"
    step = run.step_config()
    assert step.sampler is run.rollout.sampler and step.loss is run.algo.loss   # composed, not copied
    assert (step.estimator, step.k, step.n, step.kind) == ("maxk_offpolicy", 4, 8, "clipped")


@pytest.mark.parametrize("build, message", [
    (lambda: RolloutConfig(prompts=0), r"rollout.prompts=0 must be an int >= 1"),
    (lambda: RolloutConfig(prompts=True), r"rollout.prompts=True must be an int >= 1"),
    (lambda: RolloutConfig(eos_ids="1,2"), r"rollout.eos_ids='1,2' must be a tuple of ints"),
    (lambda: RolloutConfig(eos_ids=(1, -2)), r"rollout.eos_ids=\(1, -2\) must be a tuple of ints >= 0"),
    (lambda: SamplerSettings(n=0, max_new_tokens=4), r"^n=0 must be an int >= 1"),
    (lambda: replace_fields(RunConfig(), {"rollout.sampler.n": 0}), r"^rollout.sampler.n=0 must be an int >= 1"),
    (lambda: replace_fields(RunConfig(), {"rollout.sampler.top_k": -1}), r"^rollout.sampler.top_k must be"),
    (lambda: from_config_dict({"rollout": {"sampler": {"top_p": 2.0}}}), r"^rollout.sampler.top_p must lie in"),
    (lambda: EvalSettings(ks=(0,)), r"eval.ks=\(0,\) must be a tuple of ints >= 1"),
    (lambda: EvalSettings(ks="1,2"), r"eval.ks='1,2' must be a tuple of ints"),
    (lambda: EvalSettings(interval=-1), r"eval.interval=-1 must be an int >= 0"),
    (lambda: DataSettings(chat="true"), r"data.chat='true' must be True, False or None"),
    (lambda: DataSettings(epochs=0), r"data.epochs=0 must be an int >= 1"),
    (lambda: DataSettings(options='{"seed": 1}'), r"data.options='\{\"seed\": 1\}' must be \(name, value\) pairs"),
    (lambda: DataSettings(options=(("seed", 1), ("seed", 2))), r"data.options=.* names an option twice"),
    (lambda: EvalSettings(options=((1, 2),)), r"eval.options=\(\(1, 2\),\) must be \(name, value\) pairs"),
    (lambda: ModelSettings(dtype="float16"), r"model.dtype='float16' must be"),
    (lambda: ModelSettings(reference_dtype="f16"), r"model.reference_dtype='f16' must be '', 'float32' or 'bfloat16'"),
    (lambda: ModelSettings(remat_policy="all"), r"model.remat_policy='all' must be one of \('auto', 'nothing', 'dots'\)"),
    (lambda: OptimSettings(mu_dtype="int8"), r"optim.mu_dtype='int8' must be '', 'float32' or 'bfloat16'"),
    (lambda: OptimSettings(schedule="step"), r"optim.schedule='step' is not one of"),
    (lambda: OptimSettings(learning_rate=0.0), r"optim.learning_rate=0.0 must be a finite number > 0"),
    (lambda: AlgoSettings(estimator="nope"), r"unknown estimator 'nope'"),
    (lambda: AlgoSettings(behaviour_logprobs="hf"), r"algo.behaviour_logprobs='hf' is not one of \('trainer', 'sampler'\)"),
    (lambda: AlgoSettings(estimator_options={"bogus": 1}), r"algo.estimator_options=\(\('bogus', 1\),\): .*unknown"),
    (lambda: AlgoSettings(estimator_options="{}"), r"algo.estimator_options='\{\}' must be \(name, value\) pairs"),
    (lambda: RunConfig(seed=-1), r"seed=-1 must be an int >= 0"),
    (lambda: RunConfig(algo=AlgoSettings(k=9)), r"algo.k=9 must be an int with 1 <= k <= n=8"),
    (lambda: RunConfig(algo=AlgoSettings(estimator="tang_loo", k=1)), r"rejects k=1"),
    (lambda: replace_fields(RunConfig(), {"mesh.data": -1}), r"^mesh=.*only one mesh axis may be -1"),
    (lambda: replace_fields(RunConfig(), {"rollout.bogus": 1}), r"RolloutConfig has no field 'bogus'"),
])
def test_bad_fields_name_the_field_and_the_value(build, message):
    with pytest.raises(ValueError, match=message):
        build()


def test_sections_are_frozen_and_keyword_only():
    with pytest.raises(TypeError):
        RolloutConfig(16)   # noqa: positional
    with pytest.raises(dataclasses.FrozenInstanceError):
        RunConfig().seed = 1   # type: ignore[misc]


def test_normalised_values_and_methods():
    algo = AlgoSettings(estimator_options={"clamp_delta": None, "baseline": "loo1"})
    assert algo.estimator_options == (("baseline", "loo1"), ("clamp_delta", None))   # sorted pairs
    assert RolloutConfig(eos_ids=[2, 1]).eos_ids == (2, 1)
    assert DataSettings(options={"seed": 3, "drop": "x"}).options == (("drop", "x"), ("seed", 3))
    run = with_method(RunConfig(), Method("maxk_offpolicy", loss_kind="is_weighted"), name="is")
    assert (run.name, run.step_config().kind) == ("is", "is_weighted")
    assert with_method(run, Method("grpo")).algo.loss.kind == "clipped"   # the registry's form


def test_config_dict_round_trip():
    run = replace_fields(RunConfig(), {
        "algo.estimator_options": {"baseline": "loo1", "clamp_delta": None}, "eval.ks": (1, 2, 4),
        "rollout.eos_ids": (5, 7), "data.chat": False, "data.options": (("seed", 3), ("max_tests", None)), "model.logprob_chunk": 4096,
        "algo.loss": LossConfig(kind="is_weighted", aggregation="seq_sum_norm", norm_length=99, kl_beta=0.02)})
    cfg = to_config_dict(run)
    assert cfg.algo.loss.kind == "is_weighted" and cfg.algo.loss.norm_length == 99 and cfg.rollout.sampler.n == 8
    assert cfg.eval.ks == (1, 2, 4) and cfg.data.chat is False
    assert from_config_dict(cfg) == run
    assert from_config_dict(json.loads(cfg.to_json_best_effort())) == run   # config.json: lists -> tuples
    assert from_config_dict(to_config_dict(RunConfig())) == RunConfig()
    default = to_config_dict(RunConfig())
    assert default.algo.loss.kind == "auto" and default.algo.loss.norm_length is None and default.data.chat is None


def test_config_dict_derived_fields_and_errors():
    cfg = to_config_dict(RunConfig())
    cfg.algo.loss.aggregation = "seq_sum_norm"       # norm_length None = rollout.sampler.max_new_tokens
    cfg.rollout.sampler.max_new_tokens = 64
    assert from_config_dict(cfg).algo.loss.norm_length == 64
    cfg = to_config_dict(RunConfig())
    cfg.algo.loss.eps_low = 0.0
    with pytest.raises(ValueError, match="^algo.loss.eps_low=0.0 must satisfy"):
        from_config_dict(cfg)
    tree = to_config_dict(RunConfig()).to_dict()
    tree["algo"]["estimator_options_json"] = "{}"     # a field of the old string schema
    with pytest.raises(ValueError, match=r"algo has no field\(s\) \['estimator_options_json'\]; valid fields: .*"
                                         r"estimator_options"):
        from_config_dict(tree)
    tree = to_config_dict(RunConfig()).to_dict()
    tree["max_stepz"] = 3                             # a misspelt top-level field
    with pytest.raises(ValueError, match=r"the run config has no field\(s\) \['max_stepz'\]; valid top-level "
                                         r"fields: .*max_steps"):
        from_config_dict(tree)
    tree = to_config_dict(RunConfig()).to_dict()
    tree["eval"]["sampler"]["temperature"] = -1.0
    with pytest.raises(ValueError, match="eval.sampler.temperature must be a finite float >= 0"):
        from_config_dict(tree)


@pytest.mark.parametrize("section, old, new", [("rollout", "n", "rollout.sampler.n"),
                                               ("eval", "temperature", "eval.sampler.temperature"),
                                               ("algo", "loss_kind", "algo.loss.kind"),
                                               ("algo", "kl_beta", "algo.loss.kl_beta")])
def test_a_former_flattened_spelling_names_the_typed_path(section, old, new):
    tree = to_config_dict(RunConfig()).to_dict()
    tree[section][old] = tree[section].get(old, 1)
    with pytest.raises(ValueError, match=rf"{section} has no field\(s\) \['{old}'\].*\(did you mean {new}\?\)"):
        from_config_dict(tree)


def test_every_field_round_trips_through_the_command_line(tmp_path):
    """Each leaf of the run tree, set on the command line by its typed path to a non-default value,
    arrives at that path of the typed RunConfig."""
    import dataclasses as dc

    run = RunConfig()
    leaves = []

    def walk(obj, path):
        for f in dc.fields(obj):
            value = getattr(obj, f.name)
            if dc.is_dataclass(value):
                walk(value, f"{path}{f.name}.")
            else:
                leaves.append((f"{path}{f.name}", value))

    walk(run, "")
    changed = {"bool": lambda v: not v, "int": lambda v: v + 1, "float": lambda v: v * 0.5 + 0.25,
               "str": lambda v: v}
    tried = 0
    for path, value in leaves:
        kind = type(value).__name__
        if kind not in changed or path in NOT_ALONE:
            continue
        new = changed[kind](value)
        text = str(new).lower() if kind == "bool" else new
        parsed = _parse(tmp_path, f"--config.{path}={text}")
        obj = parsed
        for part in path.split("."):
            obj = getattr(obj, part)
        assert obj == pytest.approx(new) if kind == "float" else obj == new, path
        tried += 1
    assert tried >= 40, tried


# fields whose changed value is only valid together with another field (checked elsewhere)
NOT_ALONE = {"algo.k", "eval.interval", "mesh.data", "mesh.fsdp", "mesh.tensor", "distributed.num_processes",
             "distributed.process_id", "rollout.sampler.n", "optim.micro_batches", "algo.loss.kind"}


def _parse(tmp_path, *overrides):
    """--config=<file building to_config_dict(RunConfig())> + overrides, parsed by config_flags."""
    path = tmp_path / "run_cfg.py"
    path.write_text("from maxk_jax.rl.config_dict import to_config_dict\n"
                    "from maxk_jax.rl.run_config import RunConfig\n\n\n"
                    "def get_config():\n    return to_config_dict(RunConfig())\n")
    argv = ["prog", f"--config={path}", *overrides]
    values = flags.FlagValues()
    config_flags.DEFINE_config_file("config", str(path), flag_values=values, lock_config=True, sys_argv=argv)
    values(argv)
    return from_config_dict(values.config)


def test_command_line_overrides_of_typed_fields(tmp_path):
    run = _parse(tmp_path, "--config.eval.ks=(1,2,4)", "--config.rollout.eos_ids=(151645,151643)",
                 "--config.algo.estimator_options=(('baseline','loo1'),('clamp_delta',None))",
                 "--config.data.chat=true", "--config.model.logprob_chunk=4096", "--config.model.remat_policy=dots",
                 "--config.data.options=(('seed',3),('difficulty','easy'))",
                 "--config.algo.loss.kind=is_weighted", "--config.rollout.sampler.temperature=0.7",
                 "--config.algo.behaviour_logprobs=sampler")
    assert run.algo.behaviour_logprobs == "sampler"
    assert run.eval.ks == (1, 2, 4) and run.rollout.eos_ids == (151645, 151643)
    assert run.algo.estimator_options == (("baseline", "loo1"), ("clamp_delta", None))
    assert run.data.chat is True and run.model.logprob_chunk == 4096 and run.model.remat_policy == "dots"
    assert run.data.options == (("difficulty", "easy"), ("seed", 3))
    assert run.algo.loss.kind == "is_weighted" and run.rollout.sampler.temperature == 0.7
    assert run.eval_ks() == (1, 2, 4)
    assert run.render_kwargs()["chat"] is True
    default = _parse(tmp_path)
    assert default.eval_ks() == (1, 2, 4) and default.data.chat is None
    assert _parse(tmp_path, "--config.data.chat=false").data.chat is False
    with pytest.raises(ValueError, match="algo.estimator_options=.*unknown option"):
        _parse(tmp_path, "--config.algo.estimator=grpo", "--config.algo.estimator_options=(('p',2),)")


def test_eval_sampler_defaults_to_the_rollout_length():
    run = replace_fields(RunConfig(), {"rollout.sampler.max_new_tokens": 100, "eval.sampler.n": 4})
    assert run.eval_sampler() == SamplerSettings(n=4, max_new_tokens=100)
    run = replace_fields(run, {"eval.sampler.max_new_tokens": 7})
    assert run.eval_sampler().max_new_tokens == 7
    assert run.train_ks() == [1, 4, 8]
