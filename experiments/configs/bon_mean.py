"""BoN mean (paper §4.3, App. A, Table 2): on-policy max@k transform r~ (eq. 9), z-scored (eq. 5); clipped eq. 4.

    python -m experiments.train --config=experiments/configs/bon_mean.py \
        --config.model.path=MODEL_DIR --config.output_dir=runs/bon_mean
"""
import ml_collections

from experiments.configs import base


def get_config() -> ml_collections.ConfigDict:
    """base.py with algo.estimator = "bon_mean"."""
    return base.make("bon_mean")
