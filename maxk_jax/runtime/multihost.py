"""Multi-host data flow: which rows a JAX process owns, building and reading global batches,
and exchanging small host-side results between processes.

In a multi-controller run (``jax.distributed``, one process per host) every global array is
split along the mesh batch axes ``('data', 'fsdp')``; process p owns one contiguous block of
rows (its *batch block*). The RL loop and evaluation use these helpers so that each host

* takes only its block of the step's prompts (:func:`host_share`),
* builds its part of a global array from host-local numpy rows (:func:`global_batch`, i.e.
  ``jax.make_array_from_process_local_data``; never ``device_put`` onto a cross-process sharding),
* reads back only the rows it can address (:func:`host_rows`; never ``np.asarray`` of a
  non-addressable array),
* and shares small results (metrics inputs, evaluation records) with the other hosts through a
  collective (:func:`allgather_objects`, JSON over ``multihost_utils.process_allgather``).

With one process every helper is the identity (block 0 of 1) and no collective is issued.

    index, count = batch_block(mesh)             # (1, 2) on the second of two hosts
    mine = host_share(problems, mesh)            # that host's contiguous slice
    batch = global_batch(local_numpy_batch, mesh)  # global [count * B_local, ...] jax.Arrays
    rows = host_rows(global_array, *host_row_range(global_array.shape[0], mesh))
"""
from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any, TypeVar

import jax
import numpy as np
from jax.sharding import Mesh

from maxk_jax.runtime import sharding as sharding_lib

T = TypeVar("T")


def spans_processes(mesh: Mesh | None) -> bool:
    """True when ``mesh`` holds devices of more than one JAX process."""
    if mesh is None:
        return False
    return len({d.process_index for d in mesh.devices.flat}) > 1


def batch_block(mesh: Mesh | None) -> tuple[int, int]:
    """(index, count): this process owns block ``index`` of ``count`` equal, contiguous blocks of
    every array whose leading axis is split over the mesh batch axes. (0, 1) without a mesh or
    when the mesh is local to this process. ValueError when this process's rows are not one
    contiguous block (a device order that interleaves processes along the batch axes)."""
    if not spans_processes(mesh):
        return 0, 1
    ways = math.prod(mesh.shape[a] for a in sharding_lib.BATCH_AXES)
    index_map = sharding_lib.batch_sharding(mesh, 1).addressable_devices_indices_map((ways,))
    rows = sorted({idx[0].indices(ways)[0] for idx in index_map.values()})
    size = len(rows)
    if rows != list(range(rows[0], rows[0] + size)) or ways % size or rows[0] % size:
        raise ValueError(f"process {jax.process_index()} owns batch shards {rows} of {ways}: not one "
                         "contiguous block; build the mesh with each process's devices adjacent along "
                         "('data', 'fsdp') (sharding.make_mesh does this)")
    return rows[0] // size, ways // size


def host_row_range(num_rows: int, mesh: Mesh | None) -> tuple[int, int]:
    """[start, stop) of this process's rows of a leading axis of ``num_rows`` rows split over the
    batch axes; ValueError when the blocks cannot be equal."""
    index, count = batch_block(mesh)
    if num_rows % count:
        raise ValueError(f"{num_rows} rows cannot be split evenly over {count} processes")
    per = num_rows // count
    return index * per, (index + 1) * per


def host_share(items: Sequence[T], mesh: Mesh | None) -> list[T]:
    """This process's contiguous, equal share of ``items`` (all of them with one process);
    ValueError when ``len(items)`` is not a multiple of the number of batch blocks."""
    start, stop = host_row_range(len(items), mesh)
    return list(items[start:stop])


def split_evenly(items: Sequence[T], index: int, count: int) -> list[T]:
    """Part ``index`` of ``count`` contiguous parts whose sizes differ by at most one (earlier parts
    are larger, as ``np.array_split``); parts may be empty."""
    if not 0 <= index < count:
        raise ValueError(f"part index {index} is not in [0, {count})")
    base, extra = divmod(len(items), count)
    start = index * base + min(index, extra)
    return list(items[start:start + base + (index < extra)])


def global_batch(tree: Any, mesh: Mesh) -> Any:
    """Host-local numpy rows -> global jax.Arrays on ``sharding.batch_sharding``: every leaf's
    leading axis is this process's block; the global leading size is block size x count. With a
    mesh local to this process it is ``sharding.shard_batch`` (a plain ``device_put``)."""
    if not spans_processes(mesh):
        return sharding_lib.shard_batch(tree, mesh)
    _, count = batch_block(mesh)

    def put(x: Any) -> jax.Array:
        x = np.asarray(x)
        if x.ndim == 0:
            raise ValueError("global_batch needs arrays with a leading batch axis, got a scalar")
        return jax.make_array_from_process_local_data(sharding_lib.batch_sharding(mesh, x.ndim), x,
                                                      (x.shape[0] * count,) + x.shape[1:])

    return jax.tree.map(put, tree)


def host_rows(x: Any, start: int, stop: int) -> np.ndarray:
    """Rows [start, stop) of the leading axis of ``x`` as numpy, assembled from this process's
    addressable shards only (works for any sharding that gives this process those rows; a
    numpy / fully addressable input is simply sliced). RuntimeError when a row is not here."""
    if not isinstance(x, jax.Array) or x.is_fully_addressable:
        return np.asarray(x)[start:stop]
    out = np.zeros((stop - start,) + x.shape[1:], x.dtype)
    filled = np.zeros(stop - start, bool)
    for shard in x.addressable_shards:
        a, b, _ = shard.index[0].indices(x.shape[0]) if x.ndim else (0, 1, 1)
        lo, hi = max(a, start), min(b, stop)
        if lo >= hi:
            continue
        data = np.asarray(shard.data)
        out[(slice(lo - start, hi - start),) + tuple(shard.index[1:])] = data[lo - a:hi - a]
        filled[lo - start:hi - start] = True
    if not filled.all():
        raise RuntimeError(f"rows {np.flatnonzero(~filled)[:5] + start} of an array of shape {x.shape} "
                           f"are not addressable by process {jax.process_index()}")
    return out


def replicated_value(x: Any) -> np.ndarray:
    """A fully replicated (e.g. scalar) jax.Array as numpy, read from a local shard."""
    if not isinstance(x, jax.Array) or x.is_fully_addressable:
        return np.asarray(x)
    if not x.is_fully_replicated:
        raise ValueError(f"array of shape {x.shape} with sharding {x.sharding} is not replicated")
    return np.asarray(x.addressable_data(0))


def allgather_objects(obj: Any) -> list[Any]:
    """[obj of process 0, obj of process 1, ...] on every process (a collective: every process
    must call it, in the same order). ``obj`` must be JSON-serialisable (NaN allowed); it travels
    as UTF-8 JSON through ``multihost_utils.process_allgather``. One process: ``[obj]``."""
    if jax.process_count() == 1:
        return [obj]
    from jax.experimental import multihost_utils

    data = np.frombuffer(json.dumps(obj).encode("utf-8"), np.uint8)
    sizes = np.asarray(multihost_utils.process_allgather(np.array([data.size], np.int32))).reshape(-1)
    buf = np.zeros(int(sizes.max()), np.uint8)
    buf[:data.size] = data
    every = np.asarray(multihost_utils.process_allgather(buf))
    return [json.loads(every[i, :int(n)].tobytes().decode("utf-8")) for i, n in enumerate(sizes)]


def allgather_blocks(obj: Any, mesh: Mesh | None) -> list[Any]:
    """One ``obj`` per batch block, in block order (a collective over all processes when the batch
    is split across them; ``[obj]`` otherwise). Processes holding the same block (a batch
    replicated across processes) contribute it once."""
    index, count = batch_block(mesh)
    if count == 1:
        return [obj]
    by_block: dict[int, Any] = {}
    for block, value in allgather_objects([index, obj]):
        by_block.setdefault(int(block), value)
    return [by_block[i] for i in range(count)]


def broadcast_object(obj: Any) -> Any:
    """Process 0's ``obj`` on every process (a collective; JSON-serialisable)."""
    return allgather_objects(obj)[0]

