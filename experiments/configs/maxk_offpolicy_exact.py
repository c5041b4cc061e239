"""Exact importance-weighted off-policy max@k (eq. 10, polynomial DP), z-scored (§3.1), rho clamped to [1-c, 1+c]; clipped eq. 4.

    python -m experiments.train --config=experiments/configs/maxk_offpolicy_exact.py \
        --config.model.path=MODEL_DIR --config.output_dir=runs/maxk_offpolicy_exact
"""
import ml_collections

from experiments.configs import base


def get_config() -> ml_collections.ConfigDict:
    """base.py with algo.estimator = "maxk_offpolicy_exact"."""
    return base.make("maxk_offpolicy_exact")
