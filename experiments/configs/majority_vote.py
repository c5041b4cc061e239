"""Tang et al. §3.1 majority voting (answer = the program's judged behaviour on the test inputs, see
maxk_jax/execution/behaviour.py; undetermined behaviour is masked), clipped surrogate.

    python -m experiments.train --config=experiments/configs/majority_vote.py \
        --config.model.path=MODEL_DIR --config.output_dir=runs/majority_vote
"""
import ml_collections

from experiments.configs import base


def get_config() -> ml_collections.ConfigDict:
    """base.py with algo.estimator = "majority_vote"."""
    return base.make("majority_vote")
