"""Load a model to evaluate: a Hugging Face Qwen2 directory or one of our orbax checkpoints.

* HF directory (has ``config.json``): `maxk_jax.models.convert.load_hf`; the tokenizer is read
  from the same directory unless another one is given.
* Orbax checkpoint written by `maxk_jax.runtime.checkpoint.Checkpointer` (the training run's
  ``<dir>/<step>/{state,metadata}``; pass the root -- latest or ``step`` -- or a step directory).
  Only the ``params`` subtree of the saved state (``TrainState.params`` of
  `maxk_jax.rl.training`, or any state pytree with a top-level ``params`` entry) is read, with an
  orbax partial restore onto the model's abstract params (shapes checked, cast to `dtype`); the
  optimizer state is never loaded. The model architecture and tokenizer come from an HF
  directory: `model_dir` if given, else the checkpoint metadata's ``"model_dir"`` entry
  (convention: the trainer stores the HF directory it started from there).
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Optional

import jax
import jax.numpy as jnp
import orbax.checkpoint as ocp

from maxk_jax.runtime.checkpoint import CheckpointNotFoundError, Checkpointer
from maxk_jax.models import convert, qwen2

METADATA_MODEL_DIR = "model_dir"


@dataclasses.dataclass(frozen=True)
class LoadedModel:
    """A model ready for sampling: config, params pytree, tokenizer directory, and a JSON
    description of where it came from (``kind``: "hf" | "orbax", paths, step)."""

    config: qwen2.Qwen2Config
    params: Any
    tokenizer_dir: str
    description: dict[str, Any]


def resolve_dtype(flag: str, backend: str) -> str:
    """--dtype flag -> "float32" | "bfloat16": "auto" is bfloat16 on an accelerator backend ("gpu",
    "tpu", ...) and float32 on "cpu"; explicit values are kept."""
    if flag == "auto":
        return "float32" if backend == "cpu" else "bfloat16"
    if flag not in ("float32", "bfloat16"):
        raise ValueError(f"--dtype={flag!r} is not one of ('auto', 'float32', 'bfloat16')")
    return flag


def is_hf_dir(path: str | os.PathLike) -> bool:
    """True when `path` is a directory with a ``config.json`` (Hugging Face layout)."""
    return os.path.isfile(os.path.join(os.fspath(path), "config.json"))


def _split_orbax_path(path: str, step: Optional[int]) -> tuple[str, Optional[int]]:
    """(root, step) for a checkpoint root or a ``<root>/<step>`` directory."""
    base = os.path.basename(os.path.normpath(path))
    if base.isdigit() and os.path.isdir(os.path.join(path, "state")):
        if step is not None and step != int(base):
            raise ValueError(f"checkpoint {path!r} is step {base} but step={step} was requested")
        return os.path.dirname(os.path.normpath(path)), int(base)
    return path, step


def _step_metadata(step_dir: str) -> dict[str, Any]:
    meta_dir = os.path.join(step_dir, "metadata")
    if not os.path.isdir(meta_dir):
        return {}
    meta = ocp.Checkpointer(ocp.JsonCheckpointHandler()).restore(meta_dir)
    return dict(meta or {})


def restore_params(state_dir: str | os.PathLike, abstract_params: Any) -> Any:
    """Read only the ``params`` subtree of an orbax state item onto `abstract_params`
    (ShapeDtypeStructs; placed on their ``sharding`` or this process's first local device, cast to their dtype)."""
    state_dir = os.fspath(state_dir)
    tree = ocp.StandardCheckpointer().metadata(state_dir).item_metadata.tree
    if not isinstance(tree, dict) or "params" not in tree:
        keys = sorted(tree) if isinstance(tree, dict) else type(tree).__name__
        raise ValueError(f"orbax state {state_dir!r} has no top-level 'params' entry (found {keys})")
    default = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
    target = {"params": jax.tree.map(
        lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=getattr(a, "sharding", None) or default),
        abstract_params)}
    saved = jax.tree_util.tree_structure(tree["params"])
    wanted = jax.tree_util.tree_structure(target["params"])
    if saved != wanted:
        raise ValueError(f"params in {state_dir!r} do not match the model config's parameter tree: "
                         f"saved {saved}, expected {wanted}")
    bad = [(jax.tree_util.keystr(path), tuple(have.shape), tuple(want.shape))
           for (path, have), want in zip(jax.tree_util.tree_flatten_with_path(tree["params"])[0],
                                         jax.tree.leaves(target["params"]))
           if tuple(have.shape) != tuple(want.shape)]
    if bad:
        raise ValueError(f"params in {state_dir!r} have wrong shapes (path, saved, expected): {bad[:5]}")
    restored = ocp.PyTreeCheckpointer().restore(state_dir, args=ocp.args.PyTreeRestore(
        item=target, restore_args=ocp.checkpoint_utils.construct_restore_args(target), partial_restore=True))
    return restored["params"]


def load_model(checkpoint: str | os.PathLike, *, step: Optional[int] = None, model_dir: Optional[str] = None,
               tokenizer_dir: Optional[str] = None, dtype: Any = jnp.float32,
               mesh: Optional[jax.sharding.Mesh] = None) -> LoadedModel:
    """Load `checkpoint` (HF directory or orbax checkpoint root / step directory) for evaluation.

    step: orbax step (None = latest). model_dir: HF directory giving config.json (and tokenizer)
    for orbax checkpoints (default: metadata["model_dir"]). tokenizer_dir: overrides where the
    tokenizer is read from. dtype: parameter dtype. mesh: place the params straight onto
    ``sharding.param_shardings`` of that mesh (needed on a mesh spanning processes; default:
    this process's first local device). ValueError names whatever is missing.
    """
    path = os.path.abspath(os.fspath(checkpoint))
    if not os.path.isdir(path):
        raise ValueError(f"checkpoint {path!r} is not a directory")
    if is_hf_dir(path):
        if step is not None:
            raise ValueError(f"step={step} given but {path!r} is a Hugging Face directory, not an orbax checkpoint")
        config, params = convert.load_hf(path, dtype, mesh=mesh)
        return LoadedModel(config, params, tokenizer_dir or path, {"kind": "hf", "checkpoint": path})
    root, step = _split_orbax_path(path, step)
    try:
        ckpt = Checkpointer(root, read_only=True)
    except CheckpointNotFoundError as e:
        raise ValueError(f"{path!r} is neither a Hugging Face directory (no config.json) nor an orbax "
                         f"checkpoint: {e}") from e
    try:
        steps = ckpt.all_steps()
    finally:
        ckpt.close()
    if not steps:
        raise ValueError(f"{path!r} has no config.json and no committed orbax checkpoint step")
    if step is None:
        step = steps[-1]
    elif step not in steps:
        raise ValueError(f"step={step} not found in {root!r}; available steps: {steps}")
    step_dir = os.path.join(root, str(step))
    meta = _step_metadata(step_dir)
    model_dir = model_dir or meta.get(METADATA_MODEL_DIR)
    if not model_dir:
        raise ValueError(f"orbax checkpoint {step_dir!r} does not record {METADATA_MODEL_DIR!r} in its metadata; "
                         "pass the Hugging Face directory of the model (--model_dir)")
    model_dir = os.path.abspath(model_dir)
    if not is_hf_dir(model_dir):
        raise ValueError(f"model_dir {model_dir!r} has no config.json")
    name = {jnp.dtype(v): k for k, v in qwen2.DTYPES.items()}.get(jnp.dtype(dtype))
    if name is None:
        raise ValueError(f"unsupported dtype {dtype}; expected one of {sorted(qwen2.DTYPES)}")
    config = qwen2.Qwen2Config.from_json_file(os.path.join(model_dir, "config.json"), dtype=name, param_dtype=name)
    abstract = qwen2.abstract_params(config)
    if mesh is not None:
        from maxk_jax.runtime import sharding

        shardings = sharding.param_shardings(mesh, qwen2.logical_axes(config), abstract)
        abstract = jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
                                abstract, shardings)
    params = restore_params(os.path.join(step_dir, "state"), abstract)
    return LoadedModel(config, params, tokenizer_dir or model_dir,
                       {"kind": "orbax", "checkpoint": root, "step": step, "model_dir": model_dir})


def generation_eos_ids(model_dir: str | os.PathLike) -> list[int]:
    """``eos_token_id`` of ``<model_dir>/generation_config.json`` as a list ([] if the file or the
    field is absent). Instruct checkpoints list their end-of-turn token there (Qwen2.5: both
    ``<|im_end|>`` and ``<|endoftext|>``)."""
    path = os.path.join(os.fspath(model_dir), "generation_config.json")
    if not os.path.isfile(path):
        return []
    with open(path, encoding="utf-8") as f:
        value = json.load(f).get("eos_token_id")
    values = value if isinstance(value, list) else [] if value is None else [value]
    if any(isinstance(v, bool) or not isinstance(v, int) for v in values):
        raise ValueError(f"{path}: eos_token_id must be an int or a list of ints, got {value!r}")
    return values


def describe(model: LoadedModel) -> str:
    """One-line JSON description of a loaded model (for logs and run configs)."""
    return json.dumps(model.description, sort_keys=True)
