"""Hugging Face Qwen2 checkpoints <-> our params pytree, driven by ONE declarative key table.

Each :data:`KEY_TABLE` row maps a HF tensor name (``{layer}`` = decoder layer index) to a param
path and says how HF axes are made of param axes: ``hf_axes[i]`` is the tuple of param axes
(per layer, i.e. without the leading ``layers`` axis) whose product is HF axis ``i``. Example:
``q_kernel [E, H, D]`` with ``hf_axes=((1, 2), (0,))`` is HF ``q_proj.weight [H*D, E]``. The same
row drives loading (reshape + transpose) and saving (transpose + reshape).

Loading builds the param tree abstractly (``jax.eval_shape``) and places each tensor directly on
its target sharding, one leaf at a time; each distinct device shard is assembled on the host from
the memory-mapped safetensors and put on its device(s). The full model never sits on one device.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
from typing import Any, Iterator, Mapping

import jax
import jax.numpy as jnp
import numpy as np
from safetensors import safe_open
from safetensors.numpy import save_file

from maxk_jax.models import qwen2

Params = Any
SAFETENSORS = "model.safetensors"
INDEX = "model.safetensors.index.json"


@dataclasses.dataclass(frozen=True)
class KeyRule:
    """One HF tensor <-> one param leaf (stacked over layers when ``hf`` contains ``{layer}``)."""

    hf: str
    path: tuple[str, ...]
    hf_axes: tuple[tuple[int, ...], ...]

    @property
    def per_layer(self) -> bool:
        """True when the HF key has a ``{layer}`` placeholder (param has a leading L axis)."""
        return "{layer}" in self.hf

    def to_param(self, x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
        """HF tensor -> one (per-layer) param of ``shape``."""
        order = [a for group in self.hf_axes for a in group]
        expected = tuple(math.prod(shape[a] for a in g) for g in self.hf_axes)
        if tuple(x.shape) != expected:
            raise ValueError(f"{self.hf}: shape {tuple(x.shape)} != expected {expected}")
        return np.transpose(x.reshape([shape[a] for a in order]), np.argsort(order))

    def to_hf(self, p: np.ndarray) -> np.ndarray:
        """One (per-layer) param -> HF tensor."""
        order = [a for group in self.hf_axes for a in group]
        hf_shape = [math.prod(p.shape[a] for a in g) for g in self.hf_axes]
        return np.ascontiguousarray(np.transpose(p, order).reshape(hf_shape))


_T = ((1,), (0,))  # a plain [in, out] kernel stored as HF [out, in]
#: The single source of truth for the HF <-> param naming (used in both directions).
KEY_TABLE: tuple[KeyRule, ...] = (
    KeyRule("model.embed_tokens.weight", ("embed", "embedding"), ((0,), (1,))),
    KeyRule("model.norm.weight", ("final_norm", "scale"), ((0,),)),
    KeyRule("lm_head.weight", ("lm_head", "kernel"), _T),
    KeyRule("model.layers.{layer}.input_layernorm.weight", ("layers", "input_norm", "scale"),
            ((0,),)),
    KeyRule("model.layers.{layer}.post_attention_layernorm.weight",
            ("layers", "post_attn_norm", "scale"), ((0,),)),
    KeyRule("model.layers.{layer}.self_attn.q_proj.weight", ("layers", "attn", "q_kernel"),
            ((1, 2), (0,))),
    KeyRule("model.layers.{layer}.self_attn.q_proj.bias", ("layers", "attn", "q_bias"),
            ((0, 1),)),
    KeyRule("model.layers.{layer}.self_attn.k_proj.weight", ("layers", "attn", "k_kernel"),
            ((1, 2), (0,))),
    KeyRule("model.layers.{layer}.self_attn.k_proj.bias", ("layers", "attn", "k_bias"),
            ((0, 1),)),
    KeyRule("model.layers.{layer}.self_attn.v_proj.weight", ("layers", "attn", "v_kernel"),
            ((1, 2), (0,))),
    KeyRule("model.layers.{layer}.self_attn.v_proj.bias", ("layers", "attn", "v_bias"),
            ((0, 1),)),
    KeyRule("model.layers.{layer}.self_attn.o_proj.weight", ("layers", "attn", "o_kernel"),
            ((2,), (0, 1))),
    KeyRule("model.layers.{layer}.mlp.gate_proj.weight", ("layers", "mlp", "gate_kernel"), _T),
    KeyRule("model.layers.{layer}.mlp.up_proj.weight", ("layers", "mlp", "up_kernel"), _T),
    KeyRule("model.layers.{layer}.mlp.down_proj.weight", ("layers", "mlp", "down_kernel"), _T),
)


def _get(tree: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    for name in path:
        tree = tree[name]
    return tree


def _set(tree: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for name in path[:-1]:
        tree = tree.setdefault(name, {})
    tree[path[-1]] = value


def active_rules(config: qwen2.Qwen2Config) -> list[KeyRule]:
    """Table rows present for this config (``lm_head`` is absent with tied embeddings)."""
    return [r for r in KEY_TABLE if not (config.tie_word_embeddings and r.path[0] == "lm_head")]


def expected_hf_keys(config: qwen2.Qwen2Config) -> list[str]:
    """Every HF tensor name a checkpoint of this config must contain."""
    keys = []
    for rule in active_rules(config):
        layers = range(config.num_layers) if rule.per_layer else [None]
        keys += [rule.hf.format(layer=i) for i in layers]
    return keys


class _TensorSource:
    """Lazy, memory-mapped access to the tensors of a (possibly sharded) safetensors checkpoint."""

    def __init__(self, path: str):
        index_path, single = os.path.join(path, INDEX), os.path.join(path, SAFETENSORS)
        if os.path.exists(index_path):
            with open(index_path) as f:
                weight_map = json.load(f).get("weight_map")
            if not isinstance(weight_map, dict):
                raise ValueError(f"{index_path} has no 'weight_map' dict")
            files = {k: os.path.join(path, v) for k, v in weight_map.items()}
        elif os.path.exists(single):
            files = None
            self._single = single
        else:
            raise ValueError(f"no {SAFETENSORS} or {INDEX} in {path!r}")
        self._handles: dict[str, Any] = {}
        if files is None:
            files = {k: single for k in self._open(single).keys()}
        self.files = files

    def _open(self, file: str) -> Any:
        if file not in self._handles:
            if not os.path.exists(file):
                raise ValueError(f"checkpoint shard {file!r} (listed in the index) is missing")
            self._handles[file] = safe_open(file, framework="numpy")
        return self._handles[file]

    def keys(self) -> set[str]:
        return set(self.files)

    def get(self, key: str) -> np.ndarray:
        handle = self._open(self.files[key])
        if key not in set(handle.keys()):
            raise ValueError(f"tensor {key!r} listed in the index is missing from "
                             f"{self.files[key]!r}")
        return handle.get_tensor(key)


def _load_leaf(src: _TensorSource, rule: KeyRule, shape: tuple[int, ...], dtype: Any,
               sharding: jax.sharding.Sharding) -> jax.Array:
    """Assemble one param leaf directly on ``sharding``, one distinct device shard at a time."""
    inner = shape[1:] if rule.per_layer else shape

    def host_block(index: tuple[slice, ...]) -> np.ndarray:
        if not rule.per_layer:
            return np.asarray(rule.to_param(src.get(rule.hf), inner)[index], dtype=dtype)
        layers = range(shape[0])[index[0]]
        return np.stack([np.asarray(rule.to_param(src.get(rule.hf.format(layer=i)), inner)
                                    [index[1:]], dtype=dtype) for i in layers])

    by_index: dict[tuple, list[Any]] = {}
    for device, index in sharding.addressable_devices_indices_map(shape).items():
        key = tuple((s.start, s.stop, s.step) for s in index)
        by_index.setdefault(key, [index]).append(device)
    arrays = []
    for index, *devices in by_index.values():
        block = host_block(tuple(index))
        arrays += [jax.device_put(block, d) for d in devices]
    return jax.make_array_from_single_device_arrays(shape, sharding, arrays)


def load_hf(path: str | os.PathLike, dtype: Any = jnp.float32, *,
            mesh: jax.sharding.Mesh | None = None, shardings: Params | None = None,
            **config_overrides: Any) -> tuple[qwen2.Qwen2Config, Params]:
    """Load a HF Qwen2 directory (config.json + model.safetensors or a sharded index).

    Returns ``(config, params)`` with params in ``dtype`` (also the config's param_dtype and
    compute dtype unless overridden). ``shardings`` (a tree of ``jax.sharding.Sharding`` like the
    params) or ``mesh`` (uses :func:`maxk_jax.runtime.sharding.param_shardings`) places every tensor
    straight onto its shards; default: this process's first local device. Missing, unexpected or wrongly shaped
    tensors raise a ValueError naming the key.
    """
    path = os.fspath(path)
    dtype = jnp.dtype(dtype)
    name = {jnp.dtype(v): k for k, v in qwen2.DTYPES.items()}.get(dtype)
    if name is None:
        raise ValueError(f"unsupported dtype {dtype}; expected one of {sorted(qwen2.DTYPES)}")
    overrides = {"dtype": name, "param_dtype": name, **config_overrides}
    config_file = os.path.join(path, "config.json")
    if not os.path.isfile(config_file):
        raise ValueError(f"no config.json in checkpoint directory {path!r}")
    config = qwen2.Qwen2Config.from_json_file(config_file, **overrides)
    abstract = qwen2.abstract_params(config)
    if shardings is None and mesh is not None:
        from maxk_jax.runtime import sharding as sharding_lib
        shardings = sharding_lib.param_shardings(mesh, qwen2.logical_axes(config), abstract)
    src = _TensorSource(path)
    expected = set(expected_hf_keys(config))
    present = src.keys()
    if config.tie_word_embeddings and "lm_head.weight" in present:
        present = present - {"lm_head.weight"}  # some exporters store the tied copy too
    missing, unexpected = sorted(expected - present), sorted(present - expected)
    if missing:
        raise ValueError(f"checkpoint {path!r} is missing tensors: {missing[:10]}"
                         f"{' ...' if len(missing) > 10 else ''}")
    if unexpected:
        raise ValueError(f"checkpoint {path!r} has unexpected tensors: {unexpected[:10]}"
                         f"{' ...' if len(unexpected) > 10 else ''}")
    default = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
    params: dict[str, Any] = {}
    for rule in active_rules(config):
        leaf = _get(abstract, rule.path)
        target = _get(shardings, rule.path) if shardings is not None else default
        _set(params, rule.path, _load_leaf(src, rule, tuple(leaf.shape), dtype, target))
    return config, params


def to_hf_tensors(config: qwen2.Qwen2Config, params: Params) -> Iterator[tuple[str, np.ndarray]]:
    """Yield ``(hf_key, numpy tensor)`` for every table row (one leaf fetched at a time)."""
    abstract = qwen2.abstract_params(config)
    for rule in active_rules(config):
        leaf = _get(params, rule.path)
        want = _get(abstract, rule.path).shape
        if tuple(leaf.shape) != tuple(want):
            raise ValueError(f"param {'/'.join(rule.path)} has shape {tuple(leaf.shape)}, "
                             f"config expects {tuple(want)}")
        host = np.asarray(jax.device_get(leaf))
        if rule.per_layer:
            for i in range(config.num_layers):
                yield rule.hf.format(layer=i), rule.to_hf(host[i])
        else:
            yield rule.hf, rule.to_hf(host)


def _parse_size(size: int | str) -> int:
    if isinstance(size, int):
        return size
    units = {"GB": 10**9, "MB": 10**6, "KB": 10**3, "B": 1}
    s = size.strip().upper()
    for unit, mult in units.items():
        if s.endswith(unit):
            return int(float(s[: -len(unit)]) * mult)
    raise ValueError(f"max_shard_size={size!r}: expected an int or e.g. '5GB', '500MB'")


def _shard_plan(config: qwen2.Qwen2Config, params: Params, dtype: Any | None,
                limit: int) -> list[list[str]]:
    """Group HF keys (in table order) into shards of at most ``limit`` bytes (sizes from shapes)."""
    abstract = qwen2.abstract_params(config)
    shards: list[list[str]] = [[]]
    size = 0
    for rule in active_rules(config):
        leaf = _get(params, rule.path)
        shape = _get(abstract, rule.path).shape
        itemsize = jnp.dtype(dtype if dtype is not None else leaf.dtype).itemsize
        per = math.prod(shape[1:] if rule.per_layer else shape) * itemsize
        for i in (range(config.num_layers) if rule.per_layer else [None]):
            if shards[-1] and size + per > limit:
                shards.append([])
                size = 0
            shards[-1].append(rule.hf.format(layer=i))
            size += per
    return shards


def save_hf(config: qwen2.Qwen2Config, params: Params, path: str | os.PathLike,
            max_shard_size: int | str = "5GB", dtype: Any | None = None) -> str:
    """Write ``config.json`` (transformers-5 layout) + safetensors to ``path`` (created).

    Tensors are saved in ``dtype`` (default: the params' dtype). When the total exceeds
    ``max_shard_size`` bytes, writes ``model-0000i-of-0000n.safetensors`` + an index json; each
    shard is written as soon as it is complete (host memory ~ one shard + one param leaf).
    Returns ``str(path)``.
    """
    path = os.fspath(path)
    os.makedirs(path, exist_ok=True)
    plan = _shard_plan(config, params, dtype, _parse_size(max_shard_size))
    names = ([SAFETENSORS] if len(plan) == 1 else
             [f"model-{i + 1:05d}-of-{len(plan):05d}.safetensors" for i in range(len(plan))])
    shard_of = {key: i for i, keys in enumerate(plan) for key in keys}
    pending: dict[str, np.ndarray] = {}
    weight_map: dict[str, str] = {}
    total, saved_dtype = 0, None
    for key, tensor in to_hf_tensors(config, params):
        if dtype is not None:
            tensor = tensor.astype(jnp.dtype(dtype))
        saved_dtype = saved_dtype or str(tensor.dtype)
        pending[key] = tensor
        shard = shard_of[key]
        if len(pending) == len(plan[shard]):
            save_file(pending, os.path.join(path, names[shard]), metadata={"format": "pt"})
            weight_map.update({k: names[shard] for k in pending})
            total += sum(t.nbytes for t in pending.values())
            pending = {}
    hf_config = config.to_hf_dict()
    hf_config["dtype"] = saved_dtype
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(hf_config, f, indent=2)
    if len(plan) > 1:
        with open(os.path.join(path, INDEX), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    return path
