"""GRPO (paper §3.1, eq. 4-5): z-scored rewards, clipped surrogate eq. 4 -- the pure RLVR baseline of Table 2.

    python -m experiments.train --config=experiments/configs/grpo.py \
        --config.model.path=MODEL_DIR --config.output_dir=runs/grpo
"""
import ml_collections

from experiments.configs import base


def get_config() -> ml_collections.ConfigDict:
    """base.py with algo.estimator = "grpo"."""
    return base.make("grpo")
