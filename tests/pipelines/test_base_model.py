"""maxk_jax.pipelines.base_model: the base-model cache key covers exactly the settings that change
the base model; the synthetic split is cached by its settings."""
from maxk_jax.pipelines import default_config, shortcut_overrides, smoke_config
from maxk_jax.pipelines import base_key, prepare_data, section_dict, settings_hash
from maxk_jax.cli.fields import replace_fields


def test_base_key_changes_with_every_section():
    c = default_config()
    keys = {base_key(c)}
    for path, value in (("synthetic.seed", 1), ("tokenizer.vocab_size", 700), ("model.hidden_size", 96),
                        ("warmup.noise", 0.1), ("warmup.config.learning_rate", 0.01),
                        ("warmup.config.logprob_chunk", 128)):
        keys.add(base_key(replace_fields(default_config(), {path: value})))
    assert len(keys) == 7
    # RL settings do not change the base model, nor does the (unused) path field
    moved = replace_fields(default_config(), shortcut_overrides(estimator="grpo", model_path="/elsewhere"))
    assert base_key(moved) == base_key(c)


def test_synthetic_split_is_cached_by_its_settings(tmp_path):
    cfg = smoke_config()
    assert settings_hash({"a": 1, "b": 2}) == settings_hash({"b": 2, "a": 1}) != settings_hash({"a": 1})
    train_path, train, test = prepare_data(cfg, str(tmp_path))
    assert (len(train), len(test)) == (cfg.synthetic.num_train, cfg.synthetic.num_test)
    assert train_path == str(tmp_path / f"data-{settings_hash(section_dict(cfg.synthetic))}" / "train.jsonl")
    again = prepare_data(cfg, str(tmp_path))                        # read back from the JSONL cache
    assert again[0] == train_path and [p.to_dict() for p in again[1]] == [p.to_dict() for p in train]
    cfg = replace_fields(cfg, {"synthetic.seed": 1})
    assert prepare_data(cfg, str(tmp_path))[0] != train_path


def test_the_stored_testbed_base_is_the_cache_entry_of_its_config():
    """docs/testbed/base_scalar4_t11_xeon is the base of the testbed at 4 scalar operations (the
    testbed write-up's cache copy names base-<key>): its warm-up record's key and settings are the config's, and
    the checkpoint loads with the parameter count it records."""
    import json
    import pathlib

    from maxk_jax.models import convert, qwen2
    from maxk_jax.pipelines import testbed_config

    stored = pathlib.Path(__file__).resolve().parents[2] / "docs" / "testbed" / "base_scalar4_t11_xeon"
    record = json.loads((stored / "warmup.json").read_text())
    cfg = replace_fields(testbed_config(), {"synthetic.min_ops": 4, "synthetic.max_ops": 4})
    assert record["key"] == base_key(cfg) == "9ce2c3992b2e" and record["cpu"].startswith("Intel")
    assert record["config"]["synthetic"] == section_dict(cfg.synthetic)
    model_config, params = convert.load_hf(str(stored))
    assert qwen2.param_count(model_config) == record["param_count"]
    docs = pathlib.Path(__file__).resolve().parents[2] / "docs" / "results"
    assert "cp -r docs/testbed/base_scalar4_t11_xeon runs/_cache/base-9ce2c3992b2e" in (docs / "testbed_calibration.md").read_text()
