"""Device mesh, logical-axis rules and param/batch shardings (maxtext style).

Mesh axes are ``('data', 'fsdp', 'tensor')``: ``data`` replicates parameters and splits the
batch, ``fsdp`` splits both the batch and the parameters' ``embed`` axis (ZeRO-3 style), and
``tensor`` splits heads / MLP / vocab (Megatron style). Parameters carry logical axis names
(:func:`maxk_jax.models.qwen2.logical_axes`); :data:`LOGICAL_RULES` maps each logical name to mesh
axes. Typical use::

    mesh = make_mesh(data=1, fsdp=4, tensor=2)
    params = shard_params(params, mesh, qwen2.logical_axes(config))
    tokens = shard_batch(tokens, mesh)
    with activation_sharding(mesh):      # optional: also constrain activations inside jit
        out = qwen2.logits(config, params, tokens)

A parameter dimension that a mesh axis does not divide (e.g. 14 heads on tensor=4) is left
replicated along that axis (logged once per leaf) instead of failing.
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
from typing import Any, Iterator, Mapping, Sequence

import flax.linen as nn
import jax
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

MESH_AXES = ("data", "fsdp", "tensor")
BATCH_AXES = ("data", "fsdp")

#: Logical axis name -> mesh axis (or tuple of axes, or None = replicated).
LOGICAL_RULES: tuple[tuple[str, str | tuple[str, ...] | None], ...] = (
    # parameters
    ("vocab", "tensor"),
    ("embed", "fsdp"),
    ("heads", "tensor"),
    ("kv_heads", "tensor"),
    ("head_dim", None),
    ("mlp", "tensor"),
    ("layers", None),
    ("norm", None),
    # activations / batches
    ("batch", BATCH_AXES),
    ("length", None),
    ("activation_batch", BATCH_AXES),
    ("activation_length", None),
    ("activation_embed", None),
    ("activation_heads", "tensor"),
    ("activation_mlp", "tensor"),
    ("activation_vocab", "tensor"),
    # KV cache
    ("cache_batch", BATCH_AXES),
    ("cache_length", None),
    ("cache_kv_heads", "tensor"),
)


@dataclasses.dataclass(frozen=True)
class MeshConfig:
    """Sizes of the ``data``, ``fsdp`` and ``tensor`` mesh axes; at most one may be -1 (= the
    remaining devices)."""

    data: int = -1
    fsdp: int = 1
    tensor: int = 1

    def __post_init__(self) -> None:
        """The one check of mesh sizes: positive ints, at most one -1."""
        sizes = {"data": self.data, "fsdp": self.fsdp, "tensor": self.tensor}
        bad = {k: v for k, v in sizes.items() if isinstance(v, bool) or not isinstance(v, int) or (v < 1 and v != -1)}
        if bad:
            raise ValueError(f"mesh={sizes}: mesh axis sizes must be positive ints or -1, got {bad}")
        rest = [k for k, v in sizes.items() if v == -1]
        if len(rest) > 1:
            raise ValueError(f"mesh={sizes}: only one mesh axis may be -1 (= the rest), got {rest}")

    def resolve(self, num_devices: int) -> tuple[int, int, int]:
        """Concrete ``(data, fsdp, tensor)`` for ``num_devices``; ValueError when impossible."""
        sizes = {"data": self.data, "fsdp": self.fsdp, "tensor": self.tensor}
        rest = [k for k, v in sizes.items() if v == -1]
        known = math.prod(v for v in sizes.values() if v != -1)
        if num_devices % known:
            raise ValueError(f"mesh {sizes} does not divide the {num_devices} devices "
                             f"(product of fixed sizes = {known})")
        if rest:
            sizes[rest[0]] = num_devices // known
        elif known != num_devices:
            raise ValueError(f"mesh {sizes} uses {known} devices but {num_devices} are given")
        return sizes["data"], sizes["fsdp"], sizes["tensor"]


def make_mesh(data: int = -1, fsdp: int = 1, tensor: int = 1,
              devices: Sequence[jax.Device] | None = None) -> Mesh:
    """A ``Mesh`` with axes ``('data', 'fsdp', 'tensor')`` (Auto axis types) over ``devices``
    (default: all devices)."""
    devices = list(jax.devices() if devices is None else devices)
    shape = MeshConfig(data, fsdp, tensor).resolve(len(devices))
    auto = (AxisType.Auto,) * 3
    if len(devices) == len(jax.devices()):
        try:
            return jax.make_mesh(shape, MESH_AXES, axis_types=auto, devices=devices)
        except (ValueError, NotImplementedError):
            pass  # fall back to the plain device order below
    return Mesh(np.asarray(devices, dtype=object).reshape(shape), MESH_AXES, axis_types=auto)


def logical_to_mesh(spec: PartitionSpec | Sequence[str | None],
                    rules: Sequence[tuple[str, Any]] = LOGICAL_RULES) -> PartitionSpec:
    """Map a spec of logical names to mesh axes; a mesh axis already used by an earlier dimension
    is not reused (that dimension stays replicated). Unknown names raise ValueError."""
    table = dict(rules)
    used: set[str] = set()
    out: list[Any] = []
    for name in spec:
        if name is None:
            out.append(None)
            continue
        if name not in table:
            raise ValueError(f"logical axis {name!r} has no sharding rule; known: {sorted(table)}")
        axes = table[name]
        axes = () if axes is None else (axes,) if isinstance(axes, str) else tuple(axes)
        axes = tuple(a for a in axes if a not in used)
        used.update(axes)
        out.append(None if not axes else axes[0] if len(axes) == 1 else axes)
    return PartitionSpec(*out)


def fit_spec(spec: PartitionSpec, shape: Sequence[int], axis_sizes: Mapping[str, int],
             where: str) -> PartitionSpec:
    """``spec`` with mesh axes dropped (innermost first) from the dimensions of ``shape`` they do
    not divide; ``axis_sizes``: mesh axis name -> size (``mesh.shape``); ``where`` names the array
    in the INFO log of a drop."""
    out = []
    for dim, axes in zip(shape, tuple(spec) + (None,) * (len(shape) - len(spec))):
        axes = () if axes is None else (axes,) if isinstance(axes, str) else tuple(axes)
        kept = list(axes)
        while kept and dim % math.prod(axis_sizes[a] for a in kept):
            kept.pop()
        if len(kept) != len(axes):
            logging.info("sharding: %s dim %d not divisible by %s; using %s", where, dim, axes,
                         tuple(kept) or "replicated")
        out.append(None if not kept else kept[0] if len(kept) == 1 else tuple(kept))
    return PartitionSpec(*out)


def _is_spec(x: Any) -> bool:
    return isinstance(x, PartitionSpec)


def param_shardings(mesh: Mesh, logical_axes_tree: Any, shapes: Any | None = None,
                    rules: Sequence[tuple[str, Any]] = LOGICAL_RULES) -> Any:
    """Tree of ``NamedSharding`` for a tree of logical ``PartitionSpec``s. With ``shapes`` (a tree
    of arrays / ShapeDtypeStructs of the same structure), axes that do not divide a dimension
    are dropped for that leaf."""
    if shapes is None:
        return jax.tree.map(lambda s: NamedSharding(mesh, logical_to_mesh(s, rules)),
                            logical_axes_tree, is_leaf=_is_spec)
    specs = jax.tree_util.tree_leaves_with_path(logical_axes_tree, is_leaf=_is_spec)
    leaves, treedef = jax.tree.flatten(shapes)
    if len(specs) != len(leaves):
        raise ValueError(f"logical axes tree has {len(specs)} leaves, shapes tree {len(leaves)}")
    out = []
    for (path, spec), leaf in zip(specs, leaves):
        if len(spec) != len(leaf.shape):
            raise ValueError(f"{jax.tree_util.keystr(path)}: logical axes {spec} do not match "
                             f"shape {leaf.shape}")
        mesh_spec = fit_spec(logical_to_mesh(spec, rules), leaf.shape, mesh.shape,
                         jax.tree_util.keystr(path))
        out.append(NamedSharding(mesh, mesh_spec))
    return jax.tree.unflatten(treedef, out)


def shard_params(params: Any, mesh: Mesh, logical_axes_tree: Any,
                 rules: Sequence[tuple[str, Any]] = LOGICAL_RULES) -> Any:
    """``device_put`` every parameter onto its sharding (see :func:`param_shardings`)."""
    return jax.device_put(params, param_shardings(mesh, logical_axes_tree, params, rules))


def batch_sharding(mesh: Mesh, ndim: int = 2) -> NamedSharding:
    """Sharding of a batch array [B, ...]: leading axis over ``('data', 'fsdp')``."""
    if ndim < 1:
        raise ValueError(f"batch arrays need ndim >= 1, got {ndim}")
    return NamedSharding(mesh, PartitionSpec(BATCH_AXES, *([None] * (ndim - 1))))


def shard_batch(batch: Any, mesh: Mesh) -> Any:
    """Put every array of a batch pytree on :func:`batch_sharding`; the leading (batch) size must
    be divisible by data*fsdp. ``batch`` is the GLOBAL batch: on a mesh spanning processes every
    process passes the same whole batch (for host-local rows use ``multihost.global_batch``)."""
    ways = mesh.shape["data"] * mesh.shape["fsdp"]

    def put(x: Any) -> jax.Array:
        x = np.asarray(x) if not isinstance(x, jax.Array) else x
        if x.ndim == 0 or x.shape[0] % ways:
            raise ValueError(f"batch array of shape {x.shape} cannot be split over data*fsdp = "
                             f"{ways} devices")
        if multi:   # every process holds the whole global batch; each keeps its own rows
            return jax.make_array_from_process_local_data(batch_sharding(mesh, x.ndim),
                                                          np.asarray(x), x.shape)
        return jax.device_put(x, batch_sharding(mesh, x.ndim))

    multi = len({d.process_index for d in mesh.devices.flat}) > 1
    return jax.tree.map(put, batch)


@contextlib.contextmanager
def activation_sharding(mesh: Mesh, rules: Sequence[tuple[str, Any]] = LOGICAL_RULES
                        ) -> Iterator[Mesh]:
    """Context in which the model's ``nn.with_logical_constraint`` calls take effect (sets the
    mesh with ``jax.set_mesh`` and the flax logical-axis rules)."""
    with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
        yield mesh


def maybe_initialize_distributed(enabled: bool, **kwargs: Any) -> bool:
    """Call ``jax.distributed.initialize(**kwargs)`` when ``enabled`` (multi-host runs; on Cloud
    TPU / SLURM / k8s the arguments are auto-detected). Returns whether it is initialised."""
    if not enabled:
        return False
    if not jax.distributed.is_initialized():
        jax.distributed.initialize(**kwargs)
    return True
