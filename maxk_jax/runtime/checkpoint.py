"""Orbax checkpointing for training: save / latest step / restore onto shardings / resume.

One checkpoint per step ``<directory>/<step>/`` with two orbax items:
  * ``state``    — any pytree of arrays (e.g. a TrainState: params, optax state, step counter),
    written with ``StandardSave`` and restored with ``StandardRestore`` onto the shapes, dtypes
    and **shardings of an abstract target**, so a TrainState sharded over a mesh restores sharded.
    Typed PRNG key arrays (``jax.random.key``) are allowed leaves.
  * ``metadata`` — a JSON dict (``JsonSave``): everything needed to continue a run *exactly*,
    e.g. ``{"data_position": 1234, "rng": encode_prng_key(key), "config": {...}}``.  It is checked
    at save time to survive a JSON round trip unchanged (no tuples, non-str keys, NaN, numpy
    scalars), so what ``restore`` returns equals what was saved.

Crash safety comes from orbax's atomic commit: a step is written into
``<step>.orbax-checkpoint-tmp-*`` and renamed to ``<step>`` only when complete.  A run killed
mid-save (SIGKILL, preemption) leaves just the tmp directory, which ``latest_step``/``restore``
ignore; the next writer ``Checkpointer`` on the directory deletes it (in the background, done
at the latest before its first save starts); the previous step is what resumes.

Typical use in ``training.py``::

    ckpt = Checkpointer(workdir / "checkpoints", max_to_keep=3, save_interval_steps=50)
    if resume and ckpt.latest_step() is not None:
        state, meta = ckpt.restore(None, abstract_state)   # abstract_state: eval_shape + shardings
        key = decode_prng_key(meta["rng"]); data_pos = meta["data_position"]
    for step in range(start, num_steps + 1):
        state, metrics = train_step(state, batch)
        if ckpt.should_save(step):
            ckpt.save(step, state, {"rng": encode_prng_key(key), "data_position": data_pos})
    ckpt.close()                                                # waits for the async save

``save`` is asynchronous (orbax copies device arrays to host, then writes in a background
thread); ``wait_until_finished()`` blocks until the last save is committed.
"""
from __future__ import annotations

import json
import os
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

PyTree = Any

_STATE = "state"
_METADATA = "metadata"


class CheckpointNotFoundError(FileNotFoundError, ValueError):
    """No checkpoint directory / no committed step / the requested step does not exist."""


def encode_prng_key(key: jax.Array) -> dict[str, Any]:
    """A typed key array (any shape) or raw uint32 key [..., 2] -> JSON dict (exact, lossless)."""
    if not isinstance(key, jax.Array):
        raise ValueError(f"expected a jax PRNG key array, got {type(key).__name__}")
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        impl = str(jax.random.key_impl(key))
        data = np.asarray(jax.random.key_data(key))
    elif key.dtype == np.uint32:
        impl, data = "raw_uint32", np.asarray(key)
    else:
        raise ValueError(f"expected a typed PRNG key or a raw uint32 key, got dtype {key.dtype}")
    return {"prng_impl": impl, "key_data": data.tolist(), "shape": list(data.shape)}


def decode_prng_key(obj: dict[str, Any]) -> jax.Array:
    """Inverse of ``encode_prng_key``: JSON dict -> the same typed key (or raw uint32 key)."""
    if not isinstance(obj, dict) or not {"prng_impl", "key_data", "shape"} <= obj.keys():
        raise ValueError(f"not an encoded PRNG key (needs prng_impl, key_data, shape): {obj!r}")
    data = np.asarray(obj["key_data"], dtype=np.uint32).reshape(obj["shape"])
    if obj["prng_impl"] == "raw_uint32":
        return jax.numpy.asarray(data)
    return jax.random.wrap_key_data(data, impl=obj["prng_impl"])


def _check_json_metadata(metadata: dict[str, Any]) -> dict[str, Any]:
    """A private JSON copy of ``metadata``; ValueError unless it survives a round trip exactly."""
    if not isinstance(metadata, dict):
        raise ValueError(f"metadata must be a dict, got {type(metadata).__name__}")
    try:
        text = json.dumps(metadata, allow_nan=False)
    except (TypeError, ValueError) as err:
        raise ValueError(f"metadata is not JSON-serialisable ({err}); store PRNG keys with "
                         "encode_prng_key and numbers as Python int/float") from err
    if json.loads(text) != metadata:
        bad = [k for k in metadata if not isinstance(k, str)
               or json.loads(json.dumps(metadata[k], allow_nan=False)) != metadata[k]]
        raise ValueError(f"metadata does not survive a JSON round trip unchanged (tuples or "
                         f"non-str keys?); offending top-level entries: {bad!r}")
    return json.loads(text)


def _abstract_leaf(leaf: Any) -> Any:
    """Array -> ShapeDtypeStruct keeping its sharding; sharding-less structs -> this process's first local device."""
    if isinstance(leaf, jax.Array):
        return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=leaf.sharding)
    if isinstance(leaf, jax.ShapeDtypeStruct) and leaf.sharding is None:
        return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype,
                                    sharding=jax.sharding.SingleDeviceSharding(jax.local_devices()[0]))
    return leaf


class Checkpointer:
    """Step-indexed orbax checkpoints of (state pytree, JSON metadata) under one directory.

    Args:
      directory: root directory (made absolute; created if ``create``).
      max_to_keep: keep only the newest M committed steps (None keeps all).
      save_interval_steps: ``should_save(step)`` is True for multiples of N.
      create: create ``directory`` if missing; with False a missing directory is an error.
      read_only: a reader (e.g. an evaluation job next to a running trainer): the directory
        must exist, ``save`` raises, and unfinished tmp saves are left alone (a writer opening
        the directory deletes them, which would break a concurrent writer's in-flight save).
      async_save: write in a background thread (orbax default) or block in ``save``.
    """

    def __init__(self, directory: str | os.PathLike, *, max_to_keep: int | None = 3,
                 save_interval_steps: int = 1, create: bool = True, read_only: bool = False,
                 async_save: bool = True) -> None:
        if max_to_keep is not None and (not isinstance(max_to_keep, int)
                                        or isinstance(max_to_keep, bool) or max_to_keep < 1):
            raise ValueError(f"max_to_keep={max_to_keep!r} must be an int >= 1 or None")
        if (not isinstance(save_interval_steps, int) or isinstance(save_interval_steps, bool)
                or save_interval_steps < 1):
            raise ValueError(f"save_interval_steps={save_interval_steps!r} must be an int >= 1")
        self.directory = os.path.abspath(os.fspath(directory))
        create = create and not read_only
        if not create and not os.path.isdir(self.directory):
            raise CheckpointNotFoundError(f"checkpoint directory {self.directory!r} does not exist")
        self.max_to_keep = max_to_keep
        self.save_interval_steps = save_interval_steps
        self.read_only = read_only
        options = ocp.CheckpointManagerOptions(
            save_decision_policy=ocp.checkpoint_managers.FixedIntervalPolicy(save_interval_steps),
            preservation_policy=ocp.checkpoint_managers.LatestN(max_to_keep),
            create=create,
            cleanup_tmp_directories=not read_only,
            enable_async_checkpointing=async_save,
            read_only=read_only,
        )
        self._manager = ocp.CheckpointManager(self.directory, options=options,
                                              item_names=(_STATE, _METADATA))

    def reload(self) -> None:
        """Re-read the step list from disk (a read-only reader picking up a writer's saves)."""
        self._manager.reload()

    def all_steps(self) -> list[int]:
        """Saved steps, ascending (cached; includes an in-flight async save; see ``reload``)."""
        return sorted(int(s) for s in self._manager.all_steps())

    def latest_step(self) -> int | None:
        """Newest saved step, or None if the directory holds no committed checkpoint."""
        return self._manager.latest_step()

    def should_save(self, step: int) -> bool:
        """True iff ``step`` is a multiple of ``save_interval_steps`` and newer than the latest.

        Deterministic (never depends on whether an async save is still running).
        """
        latest = self.latest_step()
        return step % self.save_interval_steps == 0 and (latest is None or step > latest)

    def save(self, step: int, state: PyTree, metadata: dict[str, Any]) -> None:
        """Write ``state`` (pytree of arrays) and ``metadata`` (JSON dict) as ``step``.

        Always writes (``should_save`` is the caller's schedule); ``step`` must be an int newer
        than ``latest_step()``.  Older steps beyond ``max_to_keep`` are deleted after commit.
        """
        if self.read_only:
            raise ValueError(f"Checkpointer on {self.directory!r} is read_only; cannot save "
                             f"step={step!r}")
        if not isinstance(step, (int, np.integer)) or isinstance(step, bool) or step < 0:
            raise ValueError(f"step={step!r} must be an int >= 0")
        latest = self.latest_step()
        if latest is not None and step <= latest:
            raise ValueError(f"step={step} is not newer than the latest checkpoint {latest} in "
                             f"{self.directory!r}")
        frozen_metadata = _check_json_metadata(metadata)   # caller may mutate theirs later
        self._manager.save(int(step), force=True, args=ocp.args.Composite(**{
            _STATE: ocp.args.StandardSave(state),
            _METADATA: ocp.args.JsonSave(frozen_metadata),
        }))

    def restore(self, step: int | None, abstract_state: PyTree) -> tuple[PyTree, dict[str, Any]]:
        """Load ``step`` (None = latest) -> (state, metadata).

        ``abstract_state`` is the target structure: a pytree of ``jax.ShapeDtypeStruct`` (with
        ``sharding``; e.g. ``jax.eval_shape`` output with shardings attached) or of concrete
        arrays (their shardings are used).  Each leaf is restored onto that sharding; structs
        without a sharding go to this process's first local device.  Raises CheckpointNotFoundError (a
        FileNotFoundError and ValueError) when there is nothing to restore.  Waits for this
        object's pending async save first, then re-reads the step list from disk.
        """
        self._manager.wait_until_finished()
        self._manager.reload()
        steps = self.all_steps()
        if step is None:
            if not steps:
                raise CheckpointNotFoundError(
                    f"no committed checkpoint in {self.directory!r} (directory is empty or only "
                    "holds unfinished tmp saves)")
            step = steps[-1]
        elif step not in steps:
            raise CheckpointNotFoundError(
                f"step={step!r} has no committed checkpoint in {self.directory!r}; "
                f"available steps: {steps}")
        target = jax.tree.map(_abstract_leaf, abstract_state)
        restored = self._manager.restore(int(step), args=ocp.args.Composite(**{
            _STATE: ocp.args.StandardRestore(target),
            _METADATA: ocp.args.JsonRestore(),
        }))
        return restored[_STATE], dict(restored[_METADATA])

    def wait_until_finished(self) -> None:
        """Block until every pending async save is committed (renamed into place)."""
        self._manager.wait_until_finished()

    def close(self) -> None:
        """Wait for pending saves and release orbax's background resources."""
        self._manager.wait_until_finished()
        self._manager.close()

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
