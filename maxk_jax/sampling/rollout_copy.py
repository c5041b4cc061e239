"""The rollout copy of the policy: the weights in a layout made for decoding, made once per RL step.

The trainer keeps its parameters where training wants them: float32, the ``embed`` axis split
over ``fsdp`` (ZeRO-3). Decoding from that layout makes XLA all-gather every fsdp-split matrix
inside the decode loop, at every generated token (the 7B model on fsdp8: ~27 GB received per
device per token). The rollout copy is the same weights, made once per RL step by ONE jitted
cast-and-reshard (:meth:`RolloutLayout.copy`), on a **rollout mesh** over the same devices:

* **mesh** (:func:`rollout_mesh`): the training mesh's devices in the same order, re-viewed as
  ``data = devices / t``, ``fsdp = 1``, ``tensor = t``, where ``t`` is the most tensor ways that
  divide the KV-head count (and the head count) and one host's devices: tensor parallelism never
  splits a KV head, so each device reads and writes only its own heads' cache, and stays inside
  a host; the rest of the devices split the sample rows. Decoding is memory-bound, and a tensor
  group reads the weights once per step for all its rows, so more tensor ways mean more tokens
  per byte read (7B, 4 KV heads: ``data2 x tensor4`` on 8 chips).
* **layout** (:data:`DECODE_RULES`): weights replicated over ``data`` (no parameter byte moves
  between devices inside the decode loop), tensor-parallel over ``tensor`` (heads, KV heads, MLP
  and vocabulary axes). The loop's only collectives are the activations' all-reduces of
  tensor parallelism and the gather of each row's logits before drawing a token.
* **per-layer weights**: ``copy["layers"]`` is a tuple of L per-layer trees
  (:func:`maxk_jax.models.decode.unstack_layers`'s form), split by the same program that casts and
  reshards, so the decode loop and the prefill use them as they are: one copy of the weights per
  ``generate`` call (splitting stacked weights inside the decode program would hold a second one).
* **dtype**: the model's compute dtype by default (bf16 for the accelerator presets, float32 for
  the CPU configs). The model casts every parameter to its compute dtype before use, so the copy
  gives the same logits as decoding from the trainer's weights (up to the reduction order of a
  different sharding).

**A rollout sub-mesh** (``RolloutLayout.create(..., devices=...)``, the RL loop's ``rollout.devices``):
the same layout over devices of its own, beside the learner's mesh, so decoding (the asynchronous
producer, ``rollout.max_staleness`` > 0) and the update run on different chips at the same time. The
copy is then cast where the weights live and sent across once per weight version. With several
processes each host's sub-mesh is its own last devices (a host-local mesh: its decode programs are
no collectives, so they may run beside the learner's): one weight at a time, the learner's program
gathers its cast copy whole onto every host's learner devices, and each host sends its replica to its
own sub-mesh.

The sampler takes the copy with the rollout mesh (``sampling.generate(config, layout.copy(params),
..., mesh=layout.mesh)``); the caller drops the copy after sampling, so its memory is free again
before the update. Per device it holds ``weight bytes / t``. ``experiments/plan_sample.py``
prints those bytes and the collective bytes of the compiled decode loop.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, Mesh

from maxk_jax.runtime import sharding as sharding_lib
from maxk_jax.runtime import multihost
from maxk_jax.models import decode, qwen2

Params = Any

#: The training rules with the parameters' ``embed`` axis replicated: no fsdp split of any weight.
DECODE_RULES: tuple[tuple[str, Any], ...] = tuple(
    (name, None if name == "embed" else axes) for name, axes in sharding_lib.LOGICAL_RULES)


def rollout_tensor_size(config: qwen2.Qwen2Config, num_devices: int, local_devices: int,
                        max_tensor: int = 0) -> int:
    """Tensor-parallel ways of the rollout mesh: the largest ``t`` that divides the KV-head and
    the head count, the device count and the devices of one process (tensor parallelism stays
    inside a host), and is at most ``max_tensor`` (0 = no cap)."""
    if max_tensor < 0:
        raise ValueError(f"max_tensor must be >= 0 (0 = no cap), got {max_tensor}")
    cap = max_tensor or num_devices
    return max(t for t in range(1, min(cap, local_devices) + 1)
               if config.num_kv_heads % t == 0 and config.num_heads % t == 0 and num_devices % t == 0
               and local_devices % t == 0)


def rollout_mesh(config: qwen2.Qwen2Config, mesh: Mesh, max_tensor: int = 0) -> Mesh:
    """``mesh``'s devices (same order) as a ``(data, 1, t)`` mesh, ``t`` =
    :func:`rollout_tensor_size`; ``mesh`` itself when it already has that shape. Memory-bound
    decoding reads the weights once per step for all rows of a tensor group, so the most tensor
    ways the heads allow give the most tokens per byte read (``experiments/plan_sample.py``)."""
    devices = np.asarray(mesh.devices)
    local = sum(d.process_index == devices.flat[0].process_index for d in devices.flat)
    t = rollout_tensor_size(config, devices.size, local, max_tensor)
    shape = (devices.size // t, 1, t)
    if tuple(devices.shape) == shape:
        return mesh
    return Mesh(devices.reshape(shape), sharding_lib.MESH_AXES, axis_types=(AxisType.Auto,) * 3)


def layer_shardings(stacked: Params, num_layers: int) -> Params:
    """Shardings of stacked params (``layers`` leaves ``[L, ...]``) -> those of their per-layer
    form (:func:`maxk_jax.models.decode.unstack_layers`): ``layers`` becomes a tuple of
    ``num_layers`` trees whose specs drop the leading layer axis (never split: it is the scan's)."""
    def one(s: jax.sharding.NamedSharding) -> jax.sharding.NamedSharding:
        if len(s.spec) and s.spec[0] is not None:
            raise ValueError(f"a stacked layer weight is split over its layer axis ({s.spec}); the rollout "
                             "copy keeps whole layers per device")
        return jax.sharding.NamedSharding(s.mesh, jax.sharding.PartitionSpec(*s.spec[1:]))
    per_layer = jax.tree.map(one, stacked["layers"])
    return {**stacked, "layers": tuple(per_layer for _ in range(num_layers))}


def _send_each(p: Params, stacked: Params, per_layer: Params, send: Any) -> Params:
    """``send(leaf, sharding)`` (a cast whole replica put onto the rollout devices) for every leaf
    of stacked params ``p``, one leaf at a time; each ``layers`` leaf is split into its L per-layer
    arrays (on ``per_layer``'s shardings) right away and its stacked replica dropped, so at most one
    leaf's extra bytes are alive."""
    num_layers = len(per_layer["layers"])

    def split(x: jax.Array, sh: Any, layer_sh: Any) -> list[jax.Array]:
        whole = send(x, sh)
        return jax.block_until_ready([jax.device_put(whole[i], layer_sh) for i in range(num_layers)])
    parts = jax.tree.map(split, p["layers"], stacked["layers"], per_layer["layers"][0])
    others = {k: jax.tree.map(send, v, stacked[k]) for k, v in p.items() if k != "layers"}
    return {**others, "layers": tuple(jax.tree.map(lambda ps, i=i: ps[i], parts, is_leaf=lambda x: isinstance(x, list))
                                      for i in range(num_layers))}


def rollout_dtype(config: qwen2.Qwen2Config, dtype: str = "auto") -> jnp.dtype:
    """The copy's dtype: "auto" = the model's compute dtype (the model casts to it anyway), or
    "bfloat16" / "float32". ValueError names any other value."""
    if dtype == "auto":
        return jnp.dtype(config.compute_dtype)
    if dtype not in ("bfloat16", "float32"):
        raise ValueError(f"rollout copy dtype must be 'auto', 'bfloat16' or 'float32', got {dtype!r}")
    return jnp.dtype(dtype)


@dataclasses.dataclass(frozen=True, eq=False)
class RolloutLayout:
    """Where and how the rollout copy lives: ``mesh`` (the rollout mesh), ``dtype``, ``shardings``
    (a tree of ``NamedSharding`` like the params). Build with :meth:`create`."""

    config: qwen2.Qwen2Config
    mesh: Mesh
    dtype: jnp.dtype
    shardings: Params
    jitted_copy: Any = dataclasses.field(repr=False)

    @classmethod
    def create(cls, config: qwen2.Qwen2Config, mesh: Mesh, dtype: str = "auto", max_tensor: int = 0,
               devices: Sequence[jax.Device] | None = None) -> RolloutLayout:
        """The layout for decoding ``config`` on ``mesh``'s devices, or on ``devices`` of its own
        (a rollout sub-mesh beside the learner's ``mesh``; see the module docstring;
        ``max_tensor`` caps the rollout mesh's tensor ways, 0 = no cap)."""
        target = rollout_dtype(config, dtype)
        own = mesh if devices is None else sharding_lib.make_mesh(-1, 1, 1, devices=devices)
        rmesh = rollout_mesh(config, own, max_tensor)
        stacked = sharding_lib.param_shardings(rmesh, qwen2.logical_axes(config), qwen2.abstract_params(config),
                                               DECODE_RULES)
        shardings = layer_shardings(stacked, config.num_layers)
        cast = lambda p: jax.tree.map(lambda x: x.astype(target), p)  # noqa: E731
        if set(rmesh.devices.flat) == set(np.asarray(mesh.devices).flat):
            # cast, reshard and split into per-layer arrays in one program: its outputs are the copy
            jitted = jax.jit(lambda p: decode.unstack_layers(cast(p)), out_shardings=shardings)
        elif multihost.spans_processes(mesh) and not multihost.spans_processes(rmesh):
            # the learner spans processes, each host's rollout is local: one weight at a time, the learner's
            # program gathers its cast copy whole onto every host's learner devices, and each host sends its
            # replica across; waiting for each send keeps one weight's replica alive at a time (dispatch is
            # asynchronous: without the wait every weight's gather could be in flight at once)
            whole = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
            cast_whole = jax.jit(lambda x: x.astype(target), out_shardings=whole)
            # (then each stacked leaf is split on the rollout devices and dropped: one leaf's extra bytes at a time)
            send = lambda x, sh: jax.block_until_ready(  # noqa: E731
                jax.device_put(cast_whole(x).addressable_data(0), sh))
            jitted = lambda p: _send_each(p, stacked, shardings, send)  # noqa: E731
        else:   # cast and split where the params live (a program spans one device set), then send the copy over
            cast_here = jax.jit(lambda p: decode.unstack_layers(cast(p)))
            jitted = lambda p: jax.device_put(cast_here(p), shardings)  # noqa: E731
        return cls(config=config, mesh=rmesh, dtype=target, shardings=shardings, jitted_copy=jitted)

    @property
    def tensor(self) -> int:
        """Tensor-parallel ways of the rollout mesh."""
        return self.mesh.shape["tensor"]

    def abstract(self) -> Params:
        """The copy as sharded ``jax.ShapeDtypeStruct``s, per-layer like :meth:`copy`'s (AOT plans:
        no weights needed)."""
        shapes = jax.eval_shape(decode.unstack_layers, qwen2.abstract_params(self.config))
        return jax.tree.map(lambda s, d: jax.ShapeDtypeStruct(s.shape, self.dtype, sharding=d), shapes,
                            self.shardings)

    def copy(self, params: Params) -> Params:
        """params (on the learner's mesh, any float dtype, stacked ``[L, ...]`` layers) -> the
        rollout copy: every leaf cast to ``dtype``, resharded onto ``shardings`` and the layers split
        into a tuple of per-layer trees (:func:`maxk_jax.models.decode.unstack_layers`) by one jitted
        program, or, on a rollout sub-mesh,
        cast on the learner's devices and sent to the rollout's (``jax.device_put``; nothing
        donated: the trainer keeps its params)."""
        return self.jitted_copy(params)

    def bytes_per_device(self) -> int:
        """Bytes of one device's shard of the copy."""
        return sum(math.prod(leaf.sharding.shard_shape(leaf.shape)) * self.dtype.itemsize
                   for leaf in jax.tree.leaves(self.abstract()))
