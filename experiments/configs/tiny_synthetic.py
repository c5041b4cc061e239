"""Laptop-scale run: a tiny Qwen2 (maxk_jax.models.tiny) on the synthetic stdio family, CPU.

    python -m experiments.train --config=experiments/configs/tiny_synthetic.py \
        --config.model.path=TINY_CKPT_DIR --config.output_dir=runs/tiny

Same algorithm as the paper's method (maxk_offpolicy, 3 PPO iterations); sizes and the learning
rate are scaled for a ~1M-parameter model: 8 problems x 8 samples per step, 64 new tokens,
lr 1e-3, float32 math without remat, data-parallel over all (simulated) devices, periodic
evaluation off by default (eval.* points at 32 synthetic test problems: set eval.interval).
"""
import ml_collections

from maxk_jax.rl.config_dict import to_config_dict
from maxk_jax.rl.run_config import RunConfig, replace_fields


def get_run_config() -> RunConfig:
    """The paper's defaults (maxk_offpolicy) with tiny-scale sizes."""
    return replace_fields(RunConfig(), {
        "name": "tiny_synthetic",
        "data.dataset": "synthetic",
        "data.prompt_format": "statement",   # the format maxk_jax.rl.warmup trains the tiny model on
        "model.compute_dtype": "float32", "model.remat": False,   # CPU: float32 math, no remat needed
        "rollout.prompts": 8, "rollout.sampler.n": 8, "rollout.sampler.max_new_tokens": 64,
        "optim.learning_rate": 1e-3,
        "mesh.data": -1, "mesh.fsdp": 1, "mesh.tensor": 1,
        "checkpoint.interval": 10, "checkpoint.keep": 2,
        "eval.dataset": "synthetic", "eval.split": "test", "eval.limit": 32, "eval.sampler.n": 8,
        "eval.sampler.max_new_tokens": 64})


def get_config() -> ml_collections.ConfigDict:
    """`get_run_config` as the command line's ConfigDict."""
    return to_config_dict(get_run_config())
