"""maxk_jax.eval.checkpoint: HF directories and orbax training checkpoints (params-only restore)."""
import flax
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from maxk_jax.runtime.checkpoint import Checkpointer
from maxk_jax.eval.checkpoint import generation_eos_ids, load_model
from maxk_jax.models import convert, qwen2
from maxk_jax.models.tiny import tiny_qwen2_config


def make_hf_dir(path, hidden_size=16):
    """A tiny random HF Qwen2 directory written by save_hf (no torch needed)."""
    config = qwen2.Qwen2Config.from_hf_dict(tiny_qwen2_config(64, hidden_size=hidden_size, num_layers=1,
                                                              num_heads=2, num_kv_heads=1))
    return convert.save_hf(config, qwen2.init_params(config, jax.random.key(0)), path)


@flax.struct.dataclass
class State:
    """Same layout as maxk_jax.rl.training.TrainState (step, params, opt_state)."""

    step: jax.Array
    params: dict
    opt_state: optax.OptState


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    return make_hf_dir(tmp_path_factory.mktemp("hf") / "model")


def _equal(a, b):
    return all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def test_hf_directory(hf_dir):
    config, params = convert.load_hf(hf_dir)
    model = load_model(hf_dir)
    assert model.config == config and _equal(model.params, params)
    assert model.tokenizer_dir == hf_dir and model.description == {"kind": "hf", "checkpoint": hf_dir}
    with pytest.raises(ValueError, match="not an orbax checkpoint"):
        load_model(hf_dir, step=3)


def test_orbax_checkpoint_reads_params_only(hf_dir, tmp_path):
    _, params = convert.load_hf(hf_dir)
    trained = jax.tree.map(lambda x: x * 0.5 + 0.01, params)
    tx = optax.adam(1e-3)
    root = tmp_path / "ckpt"
    with Checkpointer(root, async_save=False) as ckpt:
        ckpt.save(5, State(jnp.asarray(5), params, tx.init(params)), {"model_dir": hf_dir})
        ckpt.save(9, State(jnp.asarray(9), trained, tx.init(trained)), {"model_dir": hf_dir})
    latest = load_model(root)
    assert latest.description == {"kind": "orbax", "checkpoint": str(root), "step": 9, "model_dir": hf_dir}
    assert _equal(latest.params, trained) and latest.tokenizer_dir == hf_dir
    assert _equal(load_model(root, step=5).params, params)
    bf16 = load_model(root / "5", dtype=jnp.bfloat16)
    assert {x.dtype for x in jax.tree.leaves(bf16.params)} == {jnp.dtype(jnp.bfloat16)}
    with pytest.raises(ValueError, match=r"step=7 not found .* available steps: \[5, 9\]"):
        load_model(root, step=7)
    with pytest.raises(ValueError, match="is step 5 but step=9"):
        load_model(root / "5", step=9)


def test_orbax_checkpoint_needs_a_model_dir(hf_dir, tmp_path):
    _, params = convert.load_hf(hf_dir)
    root = tmp_path / "ckpt"
    with Checkpointer(root, async_save=False) as ckpt:
        ckpt.save(1, {"params": params}, {})
    with pytest.raises(ValueError, match="does not record 'model_dir'.*--model_dir"):
        load_model(root)
    assert _equal(load_model(root, model_dir=hf_dir).params, params)
    wrong = make_hf_dir(tmp_path / "wide", hidden_size=32)
    with pytest.raises(ValueError, match="wrong shapes"):
        load_model(root, model_dir=wrong)
    with Checkpointer(tmp_path / "noparams", async_save=False) as ckpt:
        ckpt.save(1, {"weights": params}, {"model_dir": hf_dir})
    with pytest.raises(ValueError, match="no top-level 'params' entry"):
        load_model(tmp_path / "noparams")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no committed orbax checkpoint"):
        load_model(tmp_path / "empty")
    with pytest.raises(ValueError, match="is not a directory"):
        load_model(tmp_path / "missing")


def test_generation_eos_ids(tmp_path):
    assert generation_eos_ids(tmp_path) == []
    (tmp_path / "generation_config.json").write_text('{"eos_token_id": [151645, 151643]}')
    assert generation_eos_ids(tmp_path) == [151645, 151643]
    (tmp_path / "generation_config.json").write_text('{"eos_token_id": 7}')
    assert generation_eos_ids(tmp_path) == [7]
    (tmp_path / "generation_config.json").write_text('{"eos_token_id": "x"}')
    with pytest.raises(ValueError, match="eos_token_id must be an int"):
        generation_eos_ids(tmp_path)
