"""Data and base-model preparation of the laptop pipeline, cached by a hash of their settings.

* `prepare_data`: the synthetic family's train / test split as Problem JSONL files under
  ``<cache_root>/data-<hash of cfg.synthetic>``.

The hashes are of the sections' command-line form (`config_dict.section_dict`), so a cache entry
keeps its key as long as the settings' names and values are unchanged.
* `prepare_base`: a byte-level BPE tokenizer + tiny Qwen2 (`maxk_jax.models.tiny`) and the
  supervised warm-up (`maxk_jax.rl.warmup`) on noisy generated solutions, saved as a HF-format
  checkpoint under ``<cache_root>/base-<base_key(cfg)>`` (the key covers every setting that
  changes it) and reused by every later run with the same settings. The warm-up is bit-reproducible
  on one CPU model, not across models (float rounding of XLA's CPU kernels), so its record names the
  CPU it was built on (`phases.cpu_model`).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
from maxk_jax.data.problem import Problem
from maxk_jax.pipelines.config import PipelineConfig
from maxk_jax.pipelines.config_dict import section_dict
from maxk_jax.pipelines.phases import cpu_model, write_json

BASE_FORMAT_VERSION = 1  # bump when the warm-up recipe changes in a way the hash cannot see


def settings_hash(obj: Any) -> str:
    """First 12 hex digits of the SHA-256 of `obj` as canonical JSON (sorted keys)."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:12]


def prepare_data(cfg: PipelineConfig, cache_root: str) -> tuple[str, list[Problem], list[Problem]]:
    """Synthetic split as Problem JSONL caches under ``cache_root/data-<hash>`` (made unless both
    files exist): returns (train JSONL path, train problems, test problems)."""
    from maxk_jax.data import load_problems, save_problems
    from maxk_jax.data.synthetic import make_split

    out = os.path.join(cache_root, f"data-{settings_hash(section_dict(cfg.synthetic))}")
    train_path, test_path = os.path.join(out, "train.jsonl"), os.path.join(out, "test.jsonl")
    if os.path.isfile(train_path) and os.path.isfile(test_path):
        return train_path, load_problems(train_path), load_problems(test_path)
    train, test = make_split(cfg.synthetic)
    os.makedirs(out, exist_ok=True)
    save_problems(train, train_path)
    save_problems(test, test_path)
    return train_path, train, test


def base_settings(cfg: PipelineConfig) -> dict[str, dict[str, Any]]:
    """The settings that determine the warmed-up base checkpoint, by section (synthetic,
    tokenizer, model except ``path``, warmup; ``warmup.config.logprob_chunk`` only when set: it came
    after the first cache entries and its default leaves their keys unchanged; the warm-up's
    ``config`` fields flat beside ``per_problem`` and ``noise``, as the keys were first made)."""
    warmup = section_dict(cfg.warmup)
    warmup = {**warmup.pop("config"), **warmup}
    if warmup.get("logprob_chunk") is None:
        warmup.pop("logprob_chunk", None)
    return {"synthetic": section_dict(cfg.synthetic), "tokenizer": section_dict(cfg.tokenizer),
            "model": {k: v for k, v in section_dict(cfg.model).items() if k != "path"}, "warmup": warmup}


def base_key(cfg: PipelineConfig) -> str:
    """Hash of every setting that determines the warmed-up base checkpoint (`base_settings` and
    `BASE_FORMAT_VERSION`); RL and evaluation settings excluded."""
    return settings_hash({**base_settings(cfg), "version": BASE_FORMAT_VERSION})


def plot_warmup_losses(losses: np.ndarray, path: str) -> None:
    """PNG of the warm-up loss per step (losses [S], log scale) with a running mean of S // 30."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(np.arange(1, len(losses) + 1), losses, lw=0.8, alpha=0.5, label="per step")
    w = max(1, len(losses) // 30)
    if len(losses) >= w:
        ax.plot(np.arange(w, len(losses) + 1), np.convolve(losses, np.ones(w) / w, "valid"), label=f"mean of {w}")
    ax.set(xlabel="warm-up step", ylabel="completion NLL (nats/token)", yscale="log", title="supervised warm-up")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def build_base(cfg: PipelineConfig, train: Sequence[Problem], out_dir: str, *, progress: bool = True) -> dict[str, Any]:
    """Tokenizer + tiny Qwen2 + warm-up, written as a HF checkpoint to `out_dir` (see
    `prepare_base`). Returns the warm-up record (also written to ``out_dir/warmup.json``, the loss
    curve to ``out_dir/warmup_loss.png``)."""
    from maxk_jax.data.synthetic_solutions import tokenizer_corpus
    from maxk_jax.models import convert, qwen2, tiny
    from maxk_jax.models.tokenizer import load_tokenizer
    from maxk_jax.rl import warmup

    t0 = time.perf_counter()
    tc, mc, wc = cfg.tokenizer, cfg.model, cfg.warmup
    corpus = tokenizer_corpus(train[:tc.corpus_problems], np.random.default_rng(tc.corpus_seed))
    tiny.build_tiny_checkpoint(out_dir, corpus, mc.init_seed, vocab_size=tc.vocab_size, **mc.dims())
    model_config, params = convert.load_hf(out_dir)
    tokenizer = load_tokenizer(out_dir)
    examples = warmup.synthetic_examples(train, tokenizer, np.random.default_rng(wc.config.seed),
                                         per_problem=wc.per_problem, noise=wc.noise)
    build_s = time.perf_counter() - t0
    result = warmup.run_warmup(model_config, params, examples, wc.config, progress=progress)
    convert.save_hf(model_config, result.params, out_dir)
    lengths = np.array([len(e.completion) for e in examples])
    record = {
        "key": base_key(cfg), "cpu": cpu_model(), "param_count": qwen2.param_count(model_config),
        "vocab_size": model_config.vocab_size,
        "examples": len(examples), "completion_tokens_mean": float(lengths.mean()),
        "completion_tokens_max": int(lengths.max()), "build_s": build_s,
        "warmup_s": result.total_s, "warmup_first_step_s": result.first_step_s,
        "loss_first": float(result.losses[0]), "loss_last50": float(result.losses[-50:].mean()),
        "losses": [float(x) for x in result.losses], "mean_batch_tokens": float(result.batch_tokens.mean()),
        "config": {k: section_dict(getattr(cfg, k)) for k in ("synthetic", "tokenizer", "model", "warmup")}}
    write_json(os.path.join(out_dir, "warmup.json"), record)
    plot_warmup_losses(result.losses, os.path.join(out_dir, "warmup_loss.png"))
    return record


def prepare_base(cfg: PipelineConfig, train: Sequence[Problem], cache_root: str, *,
                 progress: bool = True) -> tuple[str, dict[str, Any], bool]:
    """The warmed-up base checkpoint ``cache_root/base-<base_key>``: built (into a temporary
    directory, renamed when complete) unless it exists. Returns (path, warm-up record, cached)."""
    path = os.path.join(cache_root, f"base-{base_key(cfg)}")
    record_path = os.path.join(path, "warmup.json")
    if os.path.isfile(record_path):
        with open(record_path, encoding="utf-8") as f:
            return path, json.load(f), True
    tmp = f"{path}.tmp{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    record = build_base(cfg, train, tmp, progress=progress)
    if os.path.isdir(path):  # a concurrent run finished first: keep theirs
        shutil.rmtree(tmp)
        with open(record_path, encoding="utf-8") as f:
            return path, json.load(f), True
    os.replace(tmp, path)
    return path, record, False
