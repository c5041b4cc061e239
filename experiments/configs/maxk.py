"""On-policy max@k (eq. 9), z-scored like the paper (§3.2; == bon_mean), clipped eq. 4 (ignores PPO staleness).

    python -m experiments.train --config=experiments/configs/maxk.py \
        --config.model.path=MODEL_DIR --config.output_dir=runs/maxk
"""
import ml_collections

from experiments.configs import base


def get_config() -> ml_collections.ConfigDict:
    """base.py with algo.estimator = "maxk"."""
    return base.make("maxk")
