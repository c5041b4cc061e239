"""Off-policy BoN -- the paper's method as the paper ran it (§3.3 + §3.1/§4.3, Listing 3, Table 2).

First-order IS-corrected max@k transform r~' (§3.3) with delta = rho - 1 clamped to
[-clamp_delta, clamp_delta] (Listing 3), z-scored like GRPO's eq. 5 (§3.1: "the advantage is
GRPO's z-score"; §4.5: mean preferred to LOO-1), plugged into GRPO's clipped objective eq. 4
(loss form "clipped": ratio x advantage).  The §3.3 derivation's own gradient (no extra ratio) is
maxk_offpolicy_is.py.

    python -m experiments.train --config=experiments/configs/maxk_offpolicy.py \
        --config.model.path=MODEL_DIR --config.output_dir=runs/maxk_offpolicy
"""
import ml_collections

from experiments.configs import base


def get_config() -> ml_collections.ConfigDict:
    """base.py with algo.estimator = "maxk_offpolicy" (z-score, clamped delta, clipped loss)."""
    return base.make("maxk_offpolicy", loss_kind="clipped")
