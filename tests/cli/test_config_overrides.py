"""config_overrides: an unknown --config.<field> names the field, where it was looked up and the
valid fields (ml_collections alone gives a bare AttributeError)."""
import os

import ml_collections
import pytest

from maxk_jax.cli import config_overrides

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _config():
    return ml_collections.ConfigDict({"seed": 0, "algo": {"k": 4, "estimator": "grpo"}, "items": [1, 2]})


@pytest.mark.parametrize("path, message", [
    ("bogus", "config has no field 'bogus'; valid fields: algo, items, seed"),
    ("algo.estimatr", "config.algo has no field 'estimatr'; valid fields: estimator, k (did you mean 'estimator'?)"),
    ("algo.k.x", "config.algo.k is not a config section (it holds 4), it has no field 'x'"),
])
def test_unknown_field_names_field_section_and_valid_fields(path, message):
    assert config_overrides.unknown_field(_config(), path) == message


@pytest.mark.parametrize("path", ["seed", "algo", "algo.k", "items[0]"])
def test_known_fields_pass(path):
    assert config_overrides.unknown_field(_config(), path) is None


def test_override_paths_and_explain_use_the_given_config_file():
    argv = ["prog", "--config", os.path.join(ROOT, "experiments/configs/base.py:grpo"), "--config.algo.k=2",
            "--noconfig.log.tensorboard", "--config.algo.bogus=1", "--other=3"]
    assert config_overrides.override_paths(argv) == ["algo.k", "log.tensorboard", "algo.bogus"]
    message = config_overrides.explain(argv, "config", default="/no/such/default.py")
    assert message.startswith("--config.algo.bogus: config.algo has no field 'bogus'; valid fields: ")
    assert "estimator" in message and "loss" in message
    assert config_overrides.explain(argv[:4], "config", default="/no/such/default.py") is None


def test_the_removed_string_fields_get_a_clear_error():
    """``algo.estimator_options_json`` (the former JSON-string field) is now the typed pairs of
    ``algo.estimator_options``: an old command line names the new field."""
    argv = ["prog", "--config", os.path.join(ROOT, "experiments/configs/base.py"),
            "--config.algo.estimator_options_json={}"]
    message = config_overrides.explain(argv, "config")
    assert message.startswith("--config.algo.estimator_options_json: config.algo has no field "
                              "'estimator_options_json'; valid fields: ")
    assert message.endswith("(did you mean 'estimator_options'?)")
