"""A trained model in Hugging Face format: checkpoint -> config.json + safetensors + tokenizer.

    plan = plan_export("runs/maxk", "exported/maxk")     # cheap checks, nothing loaded
    export_hf(plan)                                       # transformers loads the folder back
    push_to_hub(plan.out, "me/maxk-qwen")                 # where online (huggingface_hub)

``checkpoint`` is a run directory (``train``'s ``output_dir``: its ``checkpoints/``; a
``tiny_pipeline`` run: its ``rl/checkpoints/``), an orbax checkpoint root or step directory written
by the RL loop, or a Hugging Face directory. Only the trained ``params`` are read
(`maxk_jax.eval.checkpoint.load_model`); the architecture, tokenizer and ``generation_config.json``
come from the Hugging Face directory the run started from (the checkpoint metadata's
``model_dir``, or ``model_dir``). The folder gets ``config.json`` and ``model.safetensors``
(`maxk_jax.models.convert.save_hf`; sharded with an index past 5 GB), the tokenizer files, the
model directory's ``generation_config.json`` when it has one, and ``maxk_export.json`` (where the
weights came from).
"""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
from typing import Any, Optional

from maxk_jax.cli import preflight
from maxk_jax.runtime.checkpoint import CheckpointNotFoundError, Checkpointer
from maxk_jax.eval.checkpoint import is_hf_dir

DTYPE_CHOICES = ("auto", "float32", "bfloat16")
EXPORT_INFO = "maxk_export.json"
GENERATION_CONFIG = "generation_config.json"


@dataclasses.dataclass(frozen=True)
class ExportPlan:
    """What `export_hf` reads and writes (every path absolute): ``source`` = the HF directory or
    orbax root, ``step`` (None for HF), ``model_dir`` (architecture + tokenizer), ``dtype`` of the
    saved tensors, ``out`` and whether an existing ``out`` is replaced."""

    source: str
    step: Optional[int]
    model_dir: str
    dtype: str
    out: str
    overwrite: bool = False


def find_checkpoint(path: str | os.PathLike) -> str:
    """The checkpoint inside `path`: ``<path>/checkpoints`` (a train run), ``<path>/rl/checkpoints``
    (a tiny_pipeline run), else `path` itself. ValueError when `path` is no directory."""
    path = os.path.abspath(os.fspath(path))
    if not os.path.exists(path):
        raise ValueError(f"--checkpoint {path!r} does not exist")
    if not os.path.isdir(path):
        raise ValueError(f"--checkpoint {path!r} is not a directory")
    for sub in ("checkpoints", os.path.join("rl", "checkpoints")):
        if not is_hf_dir(path) and os.path.isdir(os.path.join(path, sub)):
            return os.path.join(path, sub)
    return path


def _orbax_step(root: str, step: Optional[int]) -> tuple[str, int]:
    """(root, step) of an orbax root or step directory: the latest committed step unless `step`."""
    base = os.path.basename(root)
    if base.isdigit() and os.path.isdir(os.path.join(root, "state")):
        if step is not None and step != int(base):
            raise ValueError(f"--checkpoint {root!r} is step {base} but --step={step} was given")
        return os.path.dirname(root), int(base)
    try:
        with Checkpointer(root, read_only=True) as ckpt:
            steps = ckpt.all_steps()
    except CheckpointNotFoundError as err:
        raise ValueError(f"--checkpoint {root!r} is neither a run directory, a Hugging Face model directory "
                         f"(no config.json) nor an orbax checkpoint: {err}") from err
    if not steps:
        raise ValueError(f"--checkpoint {root!r} is neither a run directory, a Hugging Face model directory (no "
                         "config.json) nor an orbax checkpoint with a committed step")
    if step is not None and step not in steps:
        raise ValueError(f"--step={step} not found in {root!r}; available steps: {steps}")
    return root, steps[-1] if step is None else step


def _saved_dtype(root: str, step: int) -> str:
    """The parameter dtype stored in an orbax step ("float32" when it is not one of DTYPE_CHOICES)."""
    import orbax.checkpoint as ocp

    tree = ocp.StandardCheckpointer().metadata(os.path.join(root, str(step), "state")).item_metadata.tree
    import jax

    leaves = jax.tree.leaves(tree.get("params", {}) if isinstance(tree, dict) else {})
    name = str(getattr(leaves[0], "dtype", "float32")) if leaves else "float32"
    return name if name in DTYPE_CHOICES else "float32"


def plan_export(checkpoint: str | os.PathLike, out: str | os.PathLike, *, step: Optional[int] = None,
                model_dir: Optional[str] = None, dtype: str = "auto", overwrite: bool = False) -> ExportPlan:
    """Check everything `export_hf` needs without loading weights (ValueError naming the value):
    the checkpoint and step, its model directory (config.json and tokenizer), the dtype, and an
    ``out`` that is new or empty (or replaced with `overwrite`, never the checkpoint or model
    directory)."""
    if dtype not in DTYPE_CHOICES:
        raise ValueError(f"--dtype={dtype!r} is not one of {DTYPE_CHOICES}")
    if step is not None and (isinstance(step, bool) or not isinstance(step, int) or step < 0):
        raise ValueError(f"--step={step!r} must be an int >= 0")
    source = find_checkpoint(checkpoint)
    if is_hf_dir(source):
        if step is not None:
            raise ValueError(f"--step={step} given but {source!r} is a Hugging Face directory, not an orbax checkpoint")
        preflight.check_model_dir(source, tokenizer=False)
        model_dir = os.path.abspath(model_dir) if model_dir else source
        chosen = "float32" if dtype == "auto" else dtype
    else:
        source, step = _orbax_step(source, step)
        meta = preflight.check_orbax_step(os.path.join(source, str(step)))
        model_dir = model_dir or meta.get("model_dir")
        if not model_dir:
            raise ValueError(f"orbax checkpoint {source}/{step} does not record its model directory: pass --model_dir")
        model_dir = os.path.abspath(model_dir)
        chosen = _saved_dtype(source, step) if dtype == "auto" else dtype
    preflight.check_model_dir(model_dir, weights=False, tokenizer=True)
    out = os.path.abspath(os.fspath(out))
    for protected in (source, model_dir):
        if os.path.commonpath([out, protected]) in (out, protected):
            raise ValueError(f"--out {out!r} overlaps the checkpoint or model directory {protected!r}")
    if os.path.exists(out):
        if not os.path.isdir(out):
            raise ValueError(f"--out {out!r} exists and is not a directory")
        if os.listdir(out) and not overwrite:
            raise ValueError(f"--out {out!r} is not empty; pass --overwrite to replace it")
    else:
        preflight.check_writable_dir(os.path.dirname(out), "--out's parent directory")
    return ExportPlan(source=source, step=step, model_dir=model_dir, dtype=chosen, out=out, overwrite=overwrite)


def export_hf(plan: ExportPlan) -> dict[str, Any]:
    """Write the Hugging Face folder of `plan` (module docstring); returns the ``maxk_export.json``
    record (source, step, model_dir, dtype, files)."""
    import jax.numpy as jnp

    from maxk_jax.eval.checkpoint import load_model
    from maxk_jax.models import convert
    from maxk_jax.models.tokenizer import load_tokenizer

    model = load_model(plan.source, step=plan.step, model_dir=plan.model_dir, dtype=getattr(jnp, plan.dtype))
    if plan.overwrite and os.path.isdir(plan.out):
        shutil.rmtree(plan.out)
    os.makedirs(plan.out, exist_ok=True)
    load_tokenizer(model.tokenizer_dir).save_pretrained(plan.out)
    generation = os.path.join(plan.model_dir, GENERATION_CONFIG)
    if os.path.isfile(generation):
        shutil.copyfile(generation, os.path.join(plan.out, GENERATION_CONFIG))
    convert.save_hf(model.config, model.params, plan.out)   # config.json last: it marks a complete folder
    info = {**model.description, "model_dir": plan.model_dir, "dtype": plan.dtype,
            "files": sorted(os.listdir(plan.out)) + [EXPORT_INFO]}
    with open(os.path.join(plan.out, EXPORT_INFO), "w", encoding="utf-8") as f:
        json.dump(info, f, indent=2)
    return info


def check_hub_repo(repo_id: str) -> None:
    """`repo_id` is a valid ``namespace/name`` model repository id and a Hugging Face token is
    available (``HF_TOKEN`` or ``hf auth login``), and the hub is not switched off
    (``HF_HUB_OFFLINE``): ValueError naming what is missing, before any work."""
    from huggingface_hub import get_token
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(repo_id)
    except HFValidationError as err:
        raise ValueError(f"--push_to_hub={repo_id!r} is not a valid repository id: {err}") from err
    if "/" not in repo_id:
        raise ValueError(f"--push_to_hub={repo_id!r} must be 'namespace/name' (your user or organisation name first)")
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        raise ValueError(f"--push_to_hub={repo_id!r}: HF_HUB_OFFLINE is set, the hub cannot be reached")
    if not get_token():
        raise ValueError(f"--push_to_hub={repo_id!r}: no Hugging Face token; set HF_TOKEN or run `hf auth login`")


def push_to_hub(folder: str | os.PathLike, repo_id: str, *, private: bool = False, api: Any = None) -> str:
    """Create model repository `repo_id` if needed (``private`` on creation) and upload `folder`
    in one commit; returns the commit URL. ``api``: a ``huggingface_hub.HfApi`` (default a new one)."""
    if api is None:
        from huggingface_hub import HfApi

        api = HfApi()
    api.create_repo(repo_id, repo_type="model", private=private, exist_ok=True)
    commit = api.upload_folder(folder_path=os.fspath(folder), repo_id=repo_id, repo_type="model",
                               commit_message="Upload model exported by maxk_jax (experiments.export_hf)")
    return str(getattr(commit, "commit_url", commit))
