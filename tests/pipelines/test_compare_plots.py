"""maxk_jax.pipelines.compare_plots: both figures render from an aggregate with training
statistics (a base-only row and a std-less base line included)."""
import numpy as np

from maxk_jax.pipelines import aggregate, plot_frontier, plot_max_at_k
from tests.pipelines.fixtures import eval_result



def _aggregate():
    rng = np.random.default_rng(1)
    base = rng.choice([0.0, 0.5, 1.0], size=(8, 8))
    runs = {m: {0: eval_result(base), 1: eval_result(np.minimum(base + 0.5, 1.0))} for m in ("grpo", "maxk_offpolicy")}
    st = {"kl_ref_final": 0.04, "grad_norm_mean": 1.0, "update_norm_mean": 0.03, "clip_fraction_mean": 0.2,
          "delta_gt_1_fraction_mean": 0.1}
    stats = {m: {0: st, 1: {**st, "kl_ref_final": 0.08}} for m in runs}
    return aggregate(eval_result(base), runs, large_k=4, train_stats=stats)


def test_frontier_plot(tmp_path):
    plot_frontier(_aggregate(), str(tmp_path / "frontier.png"))
    assert (tmp_path / "frontier.png").stat().st_size > 1000


def test_max_at_k_plot(tmp_path):
    plot_max_at_k(_aggregate(), str(tmp_path / "max_at_k.png"), "title")
    assert (tmp_path / "max_at_k.png").stat().st_size > 1000
