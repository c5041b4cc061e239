"""Laptop-scale run: a tiny Qwen2 (maxk_jax.models.tiny) on the synthetic stdio family, CPU.

    python -m experiments.train --config=experiments/configs/tiny_synthetic.py \
        --config.model.path=TINY_CKPT_DIR --config.output_dir=runs/tiny

Same algorithm as the paper's method (maxk_offpolicy, 3 PPO iterations); sizes and the learning
rate are scaled for a ~1M-parameter model: 8 problems x 8 samples per step, 64 new tokens,
lr 1e-3, float32 math without remat, data-parallel over all (simulated) devices, periodic
evaluation off by default (eval.* points at 32 synthetic test problems: set eval.interval).
"""
import ml_collections

from experiments.configs import base


def get_config() -> ml_collections.ConfigDict:
    """base.make("maxk_offpolicy") with tiny-scale sizes."""
    c = base.make("maxk_offpolicy")
    c.name = "tiny_synthetic"
    c.data.dataset = "synthetic"
    c.data.prompt_format = "statement"   # the format maxk_jax.rl.warmup trains the tiny model on
    c.model.update(compute_dtype="float32", remat=False)   # CPU: float32 math, no remat needed
    c.rollout.update(prompts=8, n=8, max_new_tokens=64)
    c.optim.update(learning_rate=1e-3)
    c.mesh.update(data=-1, fsdp=1, tensor=1)
    c.checkpoint.update(interval=10, keep=2)
    c.eval.update(dataset="synthetic", split="test", limit=32, n=8, max_new_tokens=64)
    return c
