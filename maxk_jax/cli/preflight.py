"""Checks before work: the inputs of a run, checked in seconds before a model is loaded or a
file is written, each failure a `ValueError` naming the offending path / address and what is wrong
with it (the entry points turn it into one line on stderr, see `maxk_jax.cli`).

    check_problem_file("cache/cc_test.jsonl.gz")        # exists, parses, not empty -> #problems
    check_model_dir("/models/qwen", weights=True)       # config.json, tokenizer, safetensors headers
    check_orbax_step("runs/x/checkpoints/800")          # committed, metadata readable
    check_writable_dir("runs/x")                        # creatable / writable (nothing left behind)
    check_executor("http://judge:8000")                 # GET /healthz of every service, short timeout
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import struct
import tempfile
import urllib.error
import urllib.request
from typing import Any

HEALTH_TIMEOUT_S = 3.0
_TOKENIZER_FILES = (("tokenizer.json",), ("vocab.json", "merges.txt"), ("tokenizer.model",))


def check_problem_file(path: str | os.PathLike, what: str = "problems file") -> int:
    """Number of problems in the Problem JSONL cache `path` (.jsonl or .jsonl.gz); ValueError
    when it is missing, not a file, empty, or does not parse (naming the line's error)."""
    from maxk_jax.data import load_problems

    path = os.fspath(path)
    if not os.path.exists(path):
        raise ValueError(f"{what} {path!r} does not exist")
    if not os.path.isfile(path):
        raise ValueError(f"{what} {path!r} is not a file")
    if os.path.getsize(path) == 0:
        raise ValueError(f"{what} {path!r} is empty")
    try:
        problems = load_problems(path)
    except Exception as err:  # noqa: BLE001 - any parse failure is the file's fault: name it
        raise ValueError(f"{what} {path!r} is not a Problem JSONL file: {type(err).__name__}: "
                         f"{' '.join(str(err).split())[:300]}") from err
    if not problems:
        raise ValueError(f"{what} {path!r} holds no problems")
    return len(problems)


def check_model_dir(path: str | os.PathLike, *, weights: bool = True, tokenizer: bool = True) -> None:
    """`path` is a Hugging Face Qwen2 directory: it exists, has a readable config.json, tokenizer
    files (when `tokenizer`) and (when `weights`) safetensors files whose headers are intact."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise ValueError(f"model directory {path!r} does not exist")
    if not os.path.isdir(path):
        raise ValueError(f"model directory {path!r} is not a directory")
    if not os.listdir(path):
        raise ValueError(f"model directory {path!r} is empty (expected a Hugging Face model: config.json, "
                         "tokenizer files, model.safetensors)")
    config = os.path.join(path, "config.json")
    if not os.path.isfile(config):
        raise ValueError(f"model directory {path!r} has no config.json (not a Hugging Face model directory)")
    _read_json(config, "model config")
    if tokenizer and not any(all(os.path.isfile(os.path.join(path, f)) for f in group)
                             for group in _TOKENIZER_FILES):
        raise ValueError(f"model directory {path!r} has no tokenizer (tokenizer.json, or vocab.json + "
                         "merges.txt)")
    if weights:
        for file in safetensors_files(path):
            check_safetensors(file)


def safetensors_files(path: str) -> list[str]:
    """The weight files of the HF directory `path`: model.safetensors, or the shards listed in
    model.safetensors.index.json; ValueError when there are none or a listed shard is missing."""
    index = os.path.join(path, "model.safetensors.index.json")
    if os.path.isfile(index):
        weight_map = _read_json(index, "safetensors index").get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise ValueError(f"safetensors index {index!r} has no 'weight_map'")
        files = [os.path.join(path, f) for f in sorted(set(weight_map.values()))]
        missing = [f for f in files if not os.path.isfile(f)]
        if missing:
            raise ValueError(f"safetensors shard {missing[0]!r} (listed in {index!r}) is missing")
        return files
    single = os.path.join(path, "model.safetensors")
    if not os.path.isfile(single):
        raise ValueError(f"model directory {path!r} has no model.safetensors (nor an index of shards)")
    return [single]


def check_safetensors(file: str) -> None:
    """The header of the safetensors `file` is intact: an 8-byte length, a JSON table of tensors,
    and every tensor's byte range inside the file (a truncated or garbled file is named)."""
    size = os.path.getsize(file)
    with open(file, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise ValueError(f"corrupt safetensors file {file!r}: {size} bytes, shorter than its header")
        (length,) = struct.unpack("<Q", head)
        if length > size - 8:
            raise ValueError(f"corrupt safetensors file {file!r}: header of {length} bytes in a file of {size} "
                             "bytes (truncated or not a safetensors file)")
        try:
            table = json.loads(f.read(length))
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise ValueError(f"corrupt safetensors file {file!r}: its header is not JSON ({err})") from err
    if not isinstance(table, dict):
        raise ValueError(f"corrupt safetensors file {file!r}: its header is not a JSON object")
    data = size - 8 - length
    for name, entry in table.items():
        if name == "__metadata__":
            continue
        offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
        if (not isinstance(offsets, list) or len(offsets) != 2 or not 0 <= offsets[0] <= offsets[1] <= data):
            raise ValueError(f"corrupt safetensors file {file!r}: tensor {name!r} has data_offsets {offsets} "
                             f"outside its {data} data bytes (truncated?)")


def check_orbax_step(step_dir: str | os.PathLike) -> dict[str, Any]:
    """The committed orbax checkpoint step `step_dir` (written by `maxk_jax.runtime.checkpoint`) has its
    ``state`` and ``metadata`` items with readable metadata; returns the JSON metadata dict."""
    step_dir = os.fspath(step_dir)
    state_meta = os.path.join(step_dir, "state", "_METADATA")
    if not os.path.isfile(state_meta):
        raise ValueError(f"corrupt orbax checkpoint {step_dir!r}: no state/_METADATA (not a complete "
                         "checkpoint step)")
    tree = _read_json(state_meta, "orbax checkpoint state metadata", corrupt=True)
    if not isinstance(tree, dict) or not tree.get("tree_metadata"):
        raise ValueError(f"corrupt orbax checkpoint {step_dir!r}: state/_METADATA describes no arrays")
    meta_file = os.path.join(step_dir, "metadata", "metadata")
    if not os.path.isfile(meta_file):
        return {}
    meta = _read_json(meta_file, "orbax checkpoint metadata", corrupt=True)
    if not isinstance(meta, dict):
        raise ValueError(f"corrupt orbax checkpoint metadata {meta_file!r}: not a JSON object")
    return meta


def _read_json(path: str, what: str, corrupt: bool = False) -> Any:
    try:
        with open(path, "rb") as f:
            return json.loads(f.read())
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{'corrupt ' if corrupt else ''}{what} {path!r} is not valid JSON ({err})") from err


def check_writable_dir(path: str | os.PathLike, what: str = "output directory") -> None:
    """`path` is (or can be created as) a writable directory: a probe file is created and removed
    in it, or in its nearest existing ancestor when it does not exist yet; nothing is left behind."""
    path = os.path.abspath(os.fspath(path))
    probe_dir = path
    while not os.path.exists(probe_dir):
        parent = os.path.dirname(probe_dir)
        if parent == probe_dir:
            break
        probe_dir = parent
    if not os.path.isdir(probe_dir):
        raise ValueError(f"{what} {path!r} cannot be created: {probe_dir!r} is not a directory")
    try:
        fd, name = tempfile.mkstemp(prefix=".write-probe-", dir=probe_dir)
    except OSError as err:
        where = "is" if probe_dir == path else f"cannot be created in {probe_dir!r}:"
        raise ValueError(f"{what} {path!r} {where} not writable ({err.strerror})") from err
    os.close(fd)
    os.remove(name)


def executor_urls(spec: str) -> list[str]:
    """The service base URLs of an executor spec (``http://a[,http://b]`` or
    ``sandboxfusion+http://a``); [] for the embedded executors and reward functions
    (``reward:module:function``, imported here to check it). ValueError for a malformed spec
    (the syntax of `maxk_jax.execution.make_executor`)."""
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"executor spec must be a non-empty string, got {spec!r}")
    spec = spec.strip()
    if spec.startswith("reward:"):   # a Python reward function (maxk_jax.data.rewards): it must import
        from maxk_jax.data.rewards import REWARD_PREFIX, load_reward_fn

        load_reward_fn(spec[len(REWARD_PREFIX):], what="executor spec reward function")
        return []
    name, _, slots = spec.partition(":")
    if name in ("embedded", "embedded-unsandboxed"):
        if slots and (not slots.isdigit() or int(slots) < 1):
            raise ValueError(f"executor spec {spec!r}: slots after ':' must be a positive integer")
        return []
    urls = spec[len("sandboxfusion+"):] if spec.startswith("sandboxfusion+") else spec
    out = [u.strip().rstrip("/") for u in urls.split(",")]
    for url in out:
        if not re.match(r"^https?://[^/\s:]+(:\d+)?(/\S*)?$", url):
            raise ValueError(f"unknown executor spec {spec!r}: use 'embedded', 'embedded:N', "
                             "'http://host:port[,...]', 'sandboxfusion+http://host:port' or 'reward:module:function'")
    return out


def check_executor(spec: str, timeout_s: float = HEALTH_TIMEOUT_S) -> None:
    """The judge of executor `spec` answers: one ``GET /healthz`` per HTTP judge service (a
    SandboxFusion server: ``GET /``) with a `timeout_s` timeout; the embedded executor is checked
    for syntax only (it is started in-process). ValueError names the executor and the failure."""
    urls = executor_urls(spec)
    fusion = spec.strip().startswith("sandboxfusion+")
    for url in urls:
        probe = url + ("/" if fusion else "/healthz")
        try:
            with urllib.request.urlopen(probe, timeout=timeout_s) as response:  # noqa: S310 - http(s) only
                status = response.status
        except urllib.error.HTTPError as err:
            status = err.code
            if fusion and status < 500:   # the server answers; its root page need not exist
                continue
            raise ValueError(f"executor {url!r} is not healthy: GET {probe} answered HTTP {status}") from err
        except (urllib.error.URLError, OSError, ValueError) as err:
            reason = getattr(err, "reason", err)
            raise ValueError(f"executor {url!r} is unreachable: GET {probe} failed within {timeout_s:g} s "
                             f"({reason})") from err
        if status >= 400:
            raise ValueError(f"executor {url!r} is not healthy: GET {probe} answered HTTP {status}")



def check_training_run(cfg: Any, *, resume: bool = False) -> None:
    """Every input of ``maxk_jax.rl.loop.run(cfg, resume=resume)`` (cfg: a RunConfig) that can be
    checked without loading a model: the model directory (weights unless a resume without a KL
    reference needs none), the problem files, the output directory, existing checkpoints (refused
    without `resume`; with it the newest step must be intact), the executor's health and, with
    ``log.wandb_project``, that wandb is installed."""
    from maxk_jax.runtime.checkpoint import Checkpointer

    ckpt_dir = os.path.join(cfg.output_dir, "checkpoints")
    latest = None
    if os.path.isdir(ckpt_dir) and os.listdir(ckpt_dir):
        with Checkpointer(ckpt_dir, read_only=True) as ckpt:
            latest = ckpt.latest_step()
    if latest is not None and not resume:
        raise ValueError(f"{ckpt_dir!r} already holds checkpoints (latest step {latest}); pass --resume to "
                         "continue, or choose a new output_dir")
    if latest is not None:
        check_orbax_step(os.path.join(ckpt_dir, str(latest)))
    restoring = latest is not None
    check_model_dir(cfg.model.path, weights=cfg.algo.loss.kl_beta > 0 or not restoring,
                    tokenizer=not cfg.model.tokenizer_path)
    if cfg.model.tokenizer_path and not os.path.isdir(cfg.model.tokenizer_path):
        raise ValueError(f"tokenizer directory {cfg.model.tokenizer_path!r} (model.tokenizer_path) does not exist")
    if cfg.data.problems:
        check_problem_file(cfg.data.problems, "problems file (data.problems)")
    if cfg.eval.interval and cfg.eval.problems:
        check_problem_file(cfg.eval.problems, "evaluation problems file (eval.problems)")
    check_writable_dir(cfg.output_dir, "output directory (output_dir)")
    check_executor(cfg.rollout.executor)
    if cfg.log.wandb_project and importlib.util.find_spec("wandb") is None:
        raise ValueError(f"log.wandb_project={cfg.log.wandb_project!r} needs the optional package wandb, which is not "
                         "installed (pip install wandb), or leave log.wandb_project empty")
