"""BoN LOO-1 (Walder & Karkhanis; paper App. A, §4.5, Table 2): unbiased on-policy max@k, LOO-1 baseline; clipped eq. 4.

    python -m experiments.train --config=experiments/configs/bon_loo1.py \
        --config.model.path=MODEL_DIR --config.output_dir=runs/bon_loo1
"""
import ml_collections

from experiments.configs import base


def get_config() -> ml_collections.ConfigDict:
    """base.py with algo.estimator = "bon_loo1"."""
    return base.make("bon_loo1")
