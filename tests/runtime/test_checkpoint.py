"""Tests for maxk_jax.runtime.checkpoint: round trip, retention, sharded restore, errors, crash safety."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from maxk_jax.runtime.checkpoint import (CheckpointNotFoundError, Checkpointer, decode_prng_key,
                                 encode_prng_key)

TMP_MARK = ".orbax-checkpoint-tmp"
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@jax.jit
def _train_state(seed: jax.Array) -> dict:
    """A nested TrainState-like pytree: params, an optax Adam state, a step and a typed key."""
    k1, k2, k3 = jax.random.split(jax.random.key(seed), 3)
    params = {"dense": {"kernel": jax.random.normal(k1, (4, 8)), "bias": jnp.zeros(8)},
              "embed": jax.random.normal(k2, (16, 4), jnp.bfloat16)}
    opt = optax.adam(1e-3)
    opt_state = opt.init(params)
    grads = jax.tree.map(jnp.ones_like, params)
    _, opt_state = opt.update(grads, opt_state, params)        # non-trivial mu/nu/count
    return {"params": params, "opt_state": opt_state, "step": jnp.asarray(seed, jnp.int32),
            "rng": k3}


def _assert_trees_equal(a, b) -> None:
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            x, y = jax.random.key_data(x), jax.random.key_data(y)
        assert x.dtype == y.dtype and x.shape == y.shape
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_round_trip_with_adam_state_and_resume_metadata(tmp_path):
    state = _train_state(1)
    data_key = jax.random.split(jax.random.key(7), 4)
    meta = {"data_position": 1234, "epoch": 2, "rng": encode_prng_key(data_key),
            "config": {"lr": 5e-6, "estimators": ["maxk", "grpo"]}}
    with Checkpointer(tmp_path / "ck", max_to_keep=2) as ckpt:
        assert ckpt.latest_step() is None
        ckpt.save(10, state, meta)
        ckpt.wait_until_finished()
        assert ckpt.latest_step() == 10

    reader = Checkpointer(tmp_path / "ck", read_only=True)
    abstract = jax.eval_shape(lambda: _train_state(0))
    restored, got_meta = reader.restore(None, abstract)
    _assert_trees_equal(restored, state)
    assert type(restored["opt_state"][0]) is type(state["opt_state"][0])   # ScaleByAdamState
    assert got_meta == meta
    key = decode_prng_key(got_meta["rng"])
    np.testing.assert_array_equal(jax.random.uniform(key[2], (3,)),
                                  jax.random.uniform(data_key[2], (3,)))
    np.testing.assert_array_equal(jax.random.normal(restored["rng"], (3,)),
                                  jax.random.normal(state["rng"], (3,)))
    with pytest.raises(ValueError, match="read_only"):
        reader.save(11, state, meta)
    reader.close()


def test_keep_last_m_and_save_interval(tmp_path):
    ckpt = Checkpointer(tmp_path, max_to_keep=2, save_interval_steps=3, async_save=False)
    saved = []
    for step in range(0, 11):
        if ckpt.should_save(step):
            ckpt.save(step, {"x": jnp.full((2,), step, jnp.float32)}, {"step": step})
            saved.append(step)
    ckpt.wait_until_finished()
    assert saved == [0, 3, 6, 9]
    assert ckpt.all_steps() == [6, 9]
    assert sorted(os.listdir(tmp_path)) == ["6", "9"]
    assert not ckpt.should_save(9) and not ckpt.should_save(6) and ckpt.should_save(12)
    state, meta = ckpt.restore(6, {"x": jax.ShapeDtypeStruct((2,), jnp.float32)})
    np.testing.assert_array_equal(state["x"], [6.0, 6.0])
    assert meta == {"step": 6}
    with pytest.raises(ValueError, match="step=9 is not newer than the latest checkpoint 9"):
        ckpt.save(9, {"x": jnp.zeros(2)}, {})
    with pytest.raises(CheckpointNotFoundError, match=r"step=3 .*available steps: \[6, 9\]"):
        ckpt.restore(3, {"x": jax.ShapeDtypeStruct((2,), jnp.float32)})
    ckpt.close()


def test_restore_onto_8_device_shardings(tmp_path):
    devices = np.array(jax.devices()[:8])
    assert devices.size == 8, "conftest must provide 8 simulated CPU devices"
    mesh = Mesh(devices.reshape(4, 2), ("data", "model"))
    specs = {"w": P("data", "model"), "b": P("model"), "opt": P(None, "data")}
    shard = {k: NamedSharding(mesh, s) for k, s in specs.items()}
    values = {"w": np.arange(64, dtype=np.float32).reshape(8, 8),
              "b": np.arange(8, dtype=np.float32), "opt": np.ones((3, 8), np.float32)}
    state = {k: jax.device_put(v, shard[k]) for k, v in values.items()}
    ckpt = Checkpointer(tmp_path)
    ckpt.save(1, state, {})
    # saved from a *replicated* layout: restore must still land on the target shardings
    replicated = NamedSharding(mesh, P())
    ckpt.save(2, {k: jax.device_put(v, replicated) for k, v in values.items()}, {})
    ckpt.wait_until_finished()
    abstract = {k: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=shard[k])
                for k, v in values.items()}
    for step in (1, 2):
        restored, _ = ckpt.restore(step, abstract)
        for k in values:
            assert restored[k].sharding == shard[k], (step, k, restored[k].sharding)
            assert len(restored[k].addressable_shards) == 8
            np.testing.assert_array_equal(np.asarray(restored[k]), values[k])
    # a concrete target works too: its arrays' shardings are used
    restored, _ = ckpt.restore(2, state)
    assert all(restored[k].sharding == shard[k] for k in values)
    ckpt.close()


def test_missing_or_empty_directory_is_a_clear_error(tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(CheckpointNotFoundError, match="does not exist"):
        Checkpointer(missing, create=False)
    with pytest.raises(ValueError, match="nope"):               # also a ValueError
        Checkpointer(missing, read_only=True)
    assert not missing.exists()
    empty = Checkpointer(tmp_path / "empty")
    assert empty.latest_step() is None
    with pytest.raises(FileNotFoundError, match="no committed checkpoint"):
        empty.restore(None, {"x": jax.ShapeDtypeStruct((2,), jnp.float32)})
    empty.close()


@pytest.mark.parametrize("meta, needle", [
    ({"pos": (1, 2)}, "'pos'"),
    ({"pos": np.int64(3)}, "not JSON-serialisable"),
    ({"loss": float("nan")}, "not JSON-serialisable"),
    ({1: "a"}, r"\[1\]"),
    ([1, 2], "must be a dict"),
])
def test_bad_metadata_rejected_before_writing(tmp_path, meta, needle):
    ckpt = Checkpointer(tmp_path)
    with pytest.raises(ValueError, match=needle):
        ckpt.save(0, {"x": jnp.zeros(2)}, meta)
    assert ckpt.latest_step() is None and os.listdir(tmp_path) == []
    ckpt.close()


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="max_to_keep=0"):
        Checkpointer(tmp_path, max_to_keep=0)
    with pytest.raises(ValueError, match="save_interval_steps=0"):
        Checkpointer(tmp_path, save_interval_steps=0)
    with pytest.raises(ValueError, match="step=-1"):
        Checkpointer(tmp_path).save(-1, {"x": jnp.zeros(2)}, {})
    with pytest.raises(ValueError, match="dtype float32"):
        encode_prng_key(jnp.zeros(2))
    with pytest.raises(ValueError, match="not an encoded PRNG key"):
        decode_prng_key({"key_data": [1, 2]})


def test_prng_key_codec_is_exact():
    for key in (jax.random.key(5), jax.random.split(jax.random.key(6), (2, 3)),
                jax.random.key(7, impl="rbg"), jax.random.PRNGKey(8)):
        back = decode_prng_key(encode_prng_key(key))
        assert back.dtype == key.dtype and back.shape == key.shape
        if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
            np.testing.assert_array_equal(jax.random.key_data(back), jax.random.key_data(key))
        else:
            np.testing.assert_array_equal(back, key)


_CHILD = textwrap.dedent("""
    import asyncio, sys, time
    import jax.numpy as jnp
    from orbax.checkpoint._src.path import atomicity
    from maxk_jax.runtime.checkpoint import Checkpointer

    directory, marker = sys.argv[1], sys.argv[2]
    ckpt = Checkpointer(directory, max_to_keep=3)
    ckpt.save(1, {"x": jnp.full((64,), 1.0)}, {"data_position": 10})
    ckpt.wait_until_finished()

    async def stuck_finalize(self):          # all data written, commit (rename) never happens
        open(marker, "w").write(str(self.get()))
        await asyncio.sleep(3600)

    atomicity.AtomicRenameTemporaryPath.finalize = stuck_finalize
    ckpt.save(2, {"x": jnp.full((64,), 2.0)}, {"data_position": 20})
    ckpt.wait_until_finished()
""")


def test_sigkill_mid_save_resumes_from_previous_step(tmp_path):
    directory, marker = tmp_path / "ck", tmp_path / "marker"
    env = dict(os.environ, PYTHONPATH=REPO, JAX_PLATFORMS="cpu")
    env.pop("XLA_FLAGS", None)
    child = subprocess.Popen([sys.executable, "-c", _CHILD, str(directory), str(marker)],
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            if child.poll() is not None:
                pytest.fail(f"child exited early: {child.stderr.read().decode()[-2000:]}")
            assert time.monotonic() < deadline, "child never reached the commit of step 2"
            time.sleep(0.05)
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        child.stderr.close()
    assert child.returncode == -signal.SIGKILL
    leftovers = [n for n in os.listdir(directory) if TMP_MARK in n]
    assert leftovers and leftovers[0].startswith("2"), os.listdir(directory)

    abstract = {"x": jax.ShapeDtypeStruct((64,), jnp.float32)}
    reader = Checkpointer(directory, read_only=True)          # ignores, but keeps, the tmp dir
    assert reader.all_steps() == [1]
    reader.close()
    assert [n for n in os.listdir(directory) if TMP_MARK in n] == leftovers

    writer = Checkpointer(directory, max_to_keep=3)           # resume from step 1
    assert writer.latest_step() == 1
    state, meta = writer.restore(None, abstract)
    np.testing.assert_array_equal(state["x"], np.ones(64))
    assert meta == {"data_position": 10}
    writer.save(2, {"x": jnp.full((64,), 3.0)}, {"data_position": 20})
    writer.wait_until_finished()
    assert sorted(os.listdir(directory)) == ["1", "2"]        # tmp dir cleaned by the writer
    state, meta = writer.restore(None, abstract)
    np.testing.assert_array_equal(state["x"], np.full(64, 3.0))
    writer.close()


def test_leftover_tmp_dir_is_ignored(tmp_path):
    ckpt = Checkpointer(tmp_path)
    ckpt.save(4, {"x": jnp.arange(3.0)}, {"pos": 4})
    ckpt.close()
    junk = tmp_path / f"5{TMP_MARK}-1700000000"
    (junk / "state").mkdir(parents=True)
    (junk / "state" / "half_written").write_bytes(b"\x00" * 17)
    reopened = Checkpointer(tmp_path)
    assert reopened.latest_step() == 4
    state, meta = reopened.restore(None, {"x": jax.ShapeDtypeStruct((3,), jnp.float32)})
    np.testing.assert_array_equal(state["x"], [0.0, 1.0, 2.0])
    assert meta == {"pos": 4}
    reopened.save(5, {"x": jnp.arange(3.0) + 1}, {"pos": 5})
    reopened.wait_until_finished()
    assert not junk.exists() and sorted(os.listdir(tmp_path)) == ["4", "5"]
    reopened.close()
