"""Off-policy BoN with the §3.3 derivation's gradient: sum_i c_i grad log pi(y_i) (loss "is_weighted").

Same estimator as maxk_offpolicy.py (z-scored first-order r~', clamped delta), but the
coefficients already carry the importance weights, so the loss is sg(c_i) * log pi_theta(y_i)
with the PPO trust-region mask and NO extra ratio -- the form the paper derives (§3.3) but does not
run (its pipeline uses eq. 4, maxk_offpolicy.py).

    python -m experiments.train --config=experiments/configs/maxk_offpolicy_is.py \
        --config.model.path=MODEL_DIR --config.output_dir=runs/maxk_offpolicy_is
"""
import ml_collections

from experiments.configs import base


def get_config() -> ml_collections.ConfigDict:
    """base.py with algo.estimator = "maxk_offpolicy", algo.loss_kind = "is_weighted"."""
    c = base.make("maxk_offpolicy", loss_kind="is_weighted")
    c.name = "maxk_offpolicy_is"
    return c
