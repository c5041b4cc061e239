"""Figures of a method comparison (`maxk_jax.pipelines.compare.aggregate` output): max@k against k
per method, and max@k against the KL distance each method moved from the reference policy."""
from __future__ import annotations

from typing import Any

import numpy as np

from maxk_jax.pipelines.methods import REFERENCE


def _two_panels() -> tuple[Any, Any]:
    """A headless matplotlib figure with two side-by-side panels (fig, axes)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(1, 2, figsize=(12, 4.6))


def _save(fig: Any, axes: Any, title: str, path: str) -> None:
    """Legend on the left panel, the title, then the PNG at `path`; the figure is closed."""
    import matplotlib.pyplot as plt

    axes[0].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _method_style(i: int) -> dict[str, Any]:
    """Colour, line style and marker of the i-th method (0-based, base excluded): the ten default
    colours, then again with dashed and dotted lines (square and triangle markers), so that no two of
    up to 30 methods look alike."""
    round_ = (i // 10) % 3
    return dict(color=f"C{i % 10}", ls=("-", "--", ":")[round_], marker=("o", "s", "^")[round_])


def plot_max_at_k(agg: dict[str, Any], path: str, title: str) -> None:
    """One figure: max@k vs k per method (left) and its difference to the base model (right), log2 k
    axis; mean over seeds with a +-1 std band; base dashed."""
    ks = agg["ks"]
    base = np.array([agg["methods"]["base"]["max_at_k"]["mean"][k] for k in ks])
    fig, axes = _two_panels()
    for i, (name, entry) in enumerate(m for m in agg["methods"].items() if m[0] != "base"):
        mean = np.array([entry["max_at_k"]["mean"][k] for k in ks])
        std = (np.array([entry["max_at_k"]["std"][k] for k in ks]) if entry["max_at_k"]["std"] is not None
               else None)
        style = {**_method_style(i), "ms": 3, "lw": 2.2 if name == REFERENCE else 1.2}
        if len(ks) > 16:
            style["marker"] = None
        for ax, y in zip(axes, (mean, mean - base)):
            line, = ax.plot(ks, y, label=name, **style)
            if std is not None:
                ax.fill_between(ks, y - std, y + std, color=line.get_color(), alpha=0.12, linewidth=0)
    for ax, y in zip(axes, (base, base - base)):
        ax.plot(ks, y, ls="--", color="black", label="base")
    ticks = [k for k in ks if k & (k - 1) == 0]
    for ax, label in zip(axes, ("max@k", "max@k - base max@k")):
        ax.set_xscale("log", base=2)
        ax.set_xticks(ticks, [str(k) for k in ticks])
        ax.set(xlabel="k", ylabel=label)
        ax.grid(alpha=0.3)
    _save(fig, axes, title, path)


def plot_frontier(agg: dict[str, Any], path: str) -> None:
    """max@1 and max@K against KL to the reference policy at the last RL step, one point per
    (method, seed) and a larger marker at each method's mean: the frontier view that separates a
    better estimator from a larger step (the base model sits at KL = 0)."""
    big = agg["large_k"]
    fig, axes = _two_panels()
    base = agg["methods"]["base"]
    for ax, k in zip(axes, (1, big)):
        ax.scatter([0.0], [base["max_at_k"]["mean"][k]], marker="*", s=140, color="black", label="base")
        for i, (name, entry) in enumerate(m for m in agg["methods"].items() if m[0] != "base"):
            if "train" not in entry:
                continue
            kl = entry["train"]["kl_ref_final"]["per_seed"]
            ys = entry["max_at_k"]["per_seed"]
            seeds = [sd for sd in kl if sd in ys]
            style = _method_style(i)
            color, marker = style["color"], style["marker"]
            ax.scatter([kl[sd] for sd in seeds], [ys[sd][k] for sd in seeds], s=18, alpha=0.6, color=color,
                       marker=marker)
            ax.scatter([np.mean([kl[sd] for sd in seeds])], [entry["max_at_k"]["mean"][k]], s=90,
                       color=color, marker=marker, edgecolor="black", label=name)
        ax.set(xlabel="KL(policy || reference) at the last RL step", ylabel=f"max@{k}")
        ax.grid(alpha=0.3)
    _save(fig, axes, "max@k against the distance moved (one small point per seed, large = mean)", path)



def plot_eval_curves(curves: dict[str, Any], path: str, title: str) -> None:
    """max@1 (left) and max@K (right) against the RL step per method (`compare.eval_curves`): mean
    over seeds with a +-1 std band, the base model as step 0 (and a dashed level) when known."""
    fig, axes = _two_panels()
    base = curves.get("base")
    for ax, k in zip(axes, curves["ks"]):
        if base is not None:
            ax.axhline(base[k], ls="--", color="black", lw=1, label="base")
        for i, (name, entry) in enumerate(curves["methods"].items()):
            steps = ([0] if base is not None else []) + list(entry["steps"])
            mean = np.array(([base[k]] if base is not None else []) + list(entry["mean"][k]))
            std = np.array(([0.0] if base is not None else []) + list(entry["std"][k]))
            line, = ax.plot(steps, mean, ms=3, label=name, **_method_style(i))
            ax.fill_between(steps, mean - std, mean + std, color=line.get_color(), alpha=0.15, linewidth=0)
        ax.set(xlabel="RL step", ylabel=f"max@{k}")
        ax.grid(alpha=0.3)
    _save(fig, axes, title, path)
