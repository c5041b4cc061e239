"""Laptop-scale run: a tiny Qwen2 (maxk_jax.models.tiny) on the synthetic stdio family, CPU.

    python -m experiments.train --config=experiments/configs/tiny_synthetic.py \
        --config.model.path=TINY_CKPT_DIR --config.output_dir=runs/tiny

The project's default method (maxk_offpolicy_exact_loo1_rms, 3 PPO iterations); sizes and the learning
rate are scaled for a ~1M-parameter model: 8 problems x 8 samples per step, 64 new tokens,
lr 1e-3, float32 math without remat, data-parallel over all (simulated) devices, periodic
evaluation off by default (eval.* points at 32 synthetic test problems: set eval.interval).
"""
import ml_collections

from maxk_jax.pipelines.config import rl_defaults
from maxk_jax.rl.config_dict import to_config_dict
from maxk_jax.rl.run_config import RunConfig
from maxk_jax.cli.fields import replace_fields


def get_run_config() -> RunConfig:
    """The tiny pipeline's RL run (`maxk_jax.pipelines.config.rl_defaults`: the default method
    maxk_offpolicy_exact_loo1_rms at tiny scale, the sizes written once there) as a stand-alone run: one epoch
    over the synthetic train split, lr 1e-3, checkpoints every 10 steps, TensorBoard on."""
    return replace_fields(rl_defaults(), {
        "name": "tiny_synthetic", "max_steps": 0,
        "data.dataset": "synthetic",
        "optim.learning_rate": 1e-3,
        "checkpoint.interval": 10, "checkpoint.keep": 2,
        "eval.dataset": "synthetic", "eval.limit": 32,
        "log.tensorboard": True})


def get_config() -> ml_collections.ConfigDict:
    """`get_run_config` as the command line's ConfigDict."""
    return to_config_dict(get_run_config())
