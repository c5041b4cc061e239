"""BoN-max second (paper App. A, Table 2): reward only on the best samples, second-best baseline; clipped eq. 4.

    python -m experiments.train --config=experiments/configs/bon_max_second.py \
        --config.model.path=MODEL_DIR --config.output_dir=runs/bon_max_second
"""
import ml_collections

from experiments.configs import base


def get_config() -> ml_collections.ConfigDict:
    """base.py with algo.estimator = "bon_max_second"."""
    return base.make("bon_max_second")
