"""HF checkpoint <-> params: transformers loads what we save, round trips, sharded index
checkpoints, sharded placement, and clear errors for missing / unexpected / misshapen keys."""
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers
from safetensors.numpy import load_file, save_file

from maxk_jax.runtime import sharding as sh
from maxk_jax.models import convert, qwen2
from tests.models.hf_fixtures import make_tiny_hf_checkpoint


def _tokens(config, seed=0):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, config.vocab_size, (2, 9))
    mask = np.ones_like(tokens)
    mask[1, :3] = 0
    return tokens, mask


def _hf_logits(path, tokens, mask):
    model = transformers.Qwen2ForCausalLM.from_pretrained(path, attn_implementation="eager")
    model = model.to(torch.float32).eval()
    positions = np.maximum(np.cumsum(mask, -1) - 1, 0)
    with torch.no_grad():
        return model(input_ids=torch.tensor(tokens), attention_mask=torch.tensor(mask),
                     position_ids=torch.tensor(positions)).logits.numpy()


def _all_tensors(path):
    out = {}
    for name in os.listdir(path):
        if name.endswith(".safetensors"):
            out.update(load_file(os.path.join(path, name)))
    return out


@pytest.mark.parametrize("tie", [False, True])
def test_save_hf_loads_in_transformers_and_round_trips(tmp_path, tie):
    src = make_tiny_hf_checkpoint(tmp_path / "src", tie_word_embeddings=tie, seed=7)
    config, params = convert.load_hf(src)
    # Perturb so the export is not just a copy of the source files.
    params = jax.tree.map(lambda x: x * 1.5, params)
    out = convert.save_hf(config, params, tmp_path / "out")
    cfg_json = json.load(open(os.path.join(out, "config.json")))
    assert cfg_json["rope_parameters"]["rope_theta"] == config.rope_theta
    assert ("lm_head.weight" in _all_tensors(out)) == (not tie)
    tokens, mask = _tokens(config)
    ours = np.asarray(qwen2.logits(config, params, tokens, mask))
    ref = _hf_logits(out, tokens, mask)
    assert np.abs(ours - ref)[mask.astype(bool)].max() <= 1e-4
    # load -> save -> load is the identity, and re-saving the source reproduces its tensors.
    config2, params2 = convert.load_hf(out)
    assert config2 == config
    jax.tree.map(np.testing.assert_array_equal, params, params2)
    _, original = convert.load_hf(src)
    again = convert.save_hf(config, original, tmp_path / "again")
    a, b = _all_tensors(src), _all_tensors(again)
    assert sorted(a) == sorted(b)
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def test_sharded_index_checkpoints_both_ways(tmp_path):
    src = make_tiny_hf_checkpoint(tmp_path / "src", seed=3, max_shard_size="20KB")
    assert os.path.exists(os.path.join(src, convert.INDEX))
    config, params = convert.load_hf(src)
    out = convert.save_hf(config, params, tmp_path / "out", max_shard_size="20KB")
    index = json.load(open(os.path.join(out, convert.INDEX)))
    files = set(index["weight_map"].values())
    assert len(files) > 2 and all(os.path.exists(os.path.join(out, f)) for f in files)
    assert sorted(index["weight_map"]) == sorted(convert.expected_hf_keys(config))
    assert not os.path.exists(os.path.join(out, convert.SAFETENSORS))
    _, params2 = convert.load_hf(out)
    jax.tree.map(np.testing.assert_array_equal, params, params2)
    tokens, mask = _tokens(config, seed=1)
    ref = _hf_logits(out, tokens, mask)
    ours = np.asarray(qwen2.logits(config, params, tokens, mask))
    assert np.abs(ours - ref)[mask.astype(bool)].max() <= 1e-4


def _rewrite(path, fn):
    file = os.path.join(path, convert.SAFETENSORS)
    tensors = load_file(file)
    fn(tensors)
    save_file(tensors, file, metadata={"format": "pt"})


def test_bad_checkpoints_name_the_key(tmp_path):
    base = make_tiny_hf_checkpoint(tmp_path / "base", seed=1)
    key = "model.layers.1.self_attn.k_proj.bias"

    missing = make_tiny_hf_checkpoint(tmp_path / "missing", seed=1)
    _rewrite(missing, lambda t: t.pop(key))
    with pytest.raises(ValueError, match=r"missing tensors: \['model\.layers\.1\.self_attn"):
        convert.load_hf(missing)

    extra = make_tiny_hf_checkpoint(tmp_path / "extra", seed=1)
    _rewrite(extra, lambda t: t.__setitem__("model.layers.0.mystery", np.zeros(3, np.float32)))
    with pytest.raises(ValueError, match="unexpected tensors: \\['model.layers.0.mystery'\\]"):
        convert.load_hf(extra)

    shape = make_tiny_hf_checkpoint(tmp_path / "shape", seed=1)
    _rewrite(shape, lambda t: t.__setitem__(key, np.zeros(5, np.float32)))
    with pytest.raises(ValueError, match=r"k_proj\.bias: shape \(5,\) != expected \(16,\)"):
        convert.load_hf(shape)

    cfg = json.load(open(os.path.join(base, "config.json")))
    cfg["num_hidden_layers"] = 3
    json.dump(cfg, open(os.path.join(base, "config.json"), "w"))
    with pytest.raises(ValueError, match="model.layers.2"):
        convert.load_hf(base)
    with pytest.raises(ValueError, match="no config.json"):
        convert.load_hf(tmp_path)
    os.remove(os.path.join(base, convert.SAFETENSORS))
    with pytest.raises(ValueError, match="no model.safetensors"):
        convert.load_hf(base)


def test_save_hf_rejects_params_that_do_not_fit_config(tmp_path):
    src = make_tiny_hf_checkpoint(tmp_path / "src", seed=2)
    config, params = convert.load_hf(src)
    params["layers"]["mlp"]["up_kernel"] = params["layers"]["mlp"]["up_kernel"][:, :, :5]
    with pytest.raises(ValueError, match="layers/mlp/up_kernel has shape"):
        convert.save_hf(config, params, tmp_path / "out")


def test_load_hf_places_tensors_on_mesh_and_dtype(tmp_path):
    src = make_tiny_hf_checkpoint(tmp_path / "src", seed=4, num_attention_heads=4,
                                  num_key_value_heads=2)
    config, ref_params = convert.load_hf(src)
    mesh = sh.make_mesh(data=1, fsdp=4, tensor=2)
    config2, params = convert.load_hf(src, mesh=mesh)
    q = params["layers"]["attn"]["q_kernel"]
    assert q.sharding.spec == jax.sharding.PartitionSpec(None, "fsdp", "tensor", None)
    assert q.addressable_shards[0].data.shape == (2, 32 // 4, 4 // 2, 8)
    jax.tree.map(np.testing.assert_array_equal, ref_params, params)
    cfg_bf, params_bf = convert.load_hf(src, dtype=jnp.bfloat16)
    assert cfg_bf.dtype == "bfloat16" and cfg_bf.param_dtype == "bfloat16"
    assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(params_bf))
    out = convert.save_hf(cfg_bf, params_bf, tmp_path / "bf16")
    assert json.load(open(os.path.join(out, "config.json")))["dtype"] == "bfloat16"
    assert load_file(os.path.join(out, convert.SAFETENSORS))["model.norm.weight"].dtype.name \
        == "bfloat16"
    with pytest.raises(ValueError, match="unsupported dtype int32"):
        convert.load_hf(src, dtype=jnp.int32)


def test_key_table_rules_are_inverse():
    config = qwen2.Qwen2Config(vocab_size=16, hidden_size=12, intermediate_size=10, num_layers=1,
                               num_heads=3, num_kv_heads=1)
    shapes = qwen2.abstract_params(config)
    rng = np.random.default_rng(0)
    for rule in convert.KEY_TABLE:
        shape = convert._get(shapes, rule.path).shape[1 if rule.per_layer else 0:]
        p = rng.standard_normal(shape).astype(np.float32)
        hf = rule.to_hf(p)
        assert hf.ndim == len(rule.hf_axes)
        np.testing.assert_array_equal(rule.to_param(hf, shape), p)
