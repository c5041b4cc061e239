"""Reports of memory plans: markdown tables of per-device bytes and a stacked-bar PNG; the one ``GIB``.

A row is :func:`maxk_jax.planning.memory_plan.memory_row`'s ``{"layout", "compile_s", "args",
"outputs", "temps", "alias", "total"}`` (bytes per device), optionally with ``state_analytic`` and
``temp_breakdown`` (:func:`maxk_jax.planning.memory_plan.plan_train_step`). Used by
``experiments/plan_memory.py``, ``experiments/plan_train.py`` and :mod:`maxk_jax.planning.tpu_plan`.
"""
from __future__ import annotations

import pathlib
from typing import Any

from maxk_jax.planning import hlo

#: bytes in a GiB, the unit of every plan table
GIB = 1024 ** 3
Row = dict[str, Any]


def to_markdown(rows: list[Row], header: str) -> str:
    """Markdown table of per-device GiB per layout, under ``header``."""
    lines = [header, "", "| layout | args GiB | outputs GiB | temps GiB | total GiB | compile s |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['layout']} | {r['args'] / GIB:.2f} | {r['outputs'] / GIB:.2f} | "
                     f"{r['temps'] / GIB:.2f} | {r['total'] / GIB:.2f} | {r['compile_s']} |")
    return "\n".join(lines) + "\n"


def state_markdown(rows: list[Row]) -> str:
    """Markdown table of every row's analytic params (+ Adam state) GiB per device."""
    return "\n| layout | params+Adam state per device (analytic) GiB |\n|---|---:|\n" + "".join(
        f"| {r['layout']} | {r['state_analytic'] / GIB:.2f} |\n" for r in rows)


def breakdown_markdown(rows: list[Row], vocab: int, seq_lens: tuple[int, ...]) -> str:
    """Markdown of every row's largest temp buffers and of its float32 vocabulary-sized temps; a
    [micro-batch, T, V] logits buffer is one whose second-to-last axis is a sequence length
    (``seq_lens``: T and S)."""
    out = ""
    is_logits = lambda shape: len(hlo.dims(shape)) >= 2 and hlo.dims(shape)[-2] in seq_lens  # noqa: E731
    for r in rows:
        bd = r.get("temp_breakdown")
        if not bd:
            continue
        out += (f"\n**{r['layout']}**: temps {bd['temp_bytes'] / GIB:.2f} GiB per device; largest temp "
                "buffers (shape, count, JAX op):\n\n| GiB | shape | count | op |\n|---:|---|---:|---|\n")
        out += "".join(f"| {v['bytes'] / GIB:.3f} | `{v['shape']}` | {v['count']} | {v['op']} |\n"
                       for v in bd["largest"])
        logits = [v for v in bd["vocab_f32"] if is_logits(v["shape"])]
        out += (f"\nfloat32 temps with a vocabulary (V = {vocab}) last axis: "
                + (", ".join(f"`{v['shape']}` {v['bytes'] / GIB:.3f} GiB" + (" (**[mb, T, V] logits**)"
                                                                           if is_logits(v["shape"]) else "")
                             for v in bd["vocab_f32"]) or "none")
                + f". [micro-batch, T, V] float32 logits buffers: {len(logits)}.\n")
    return out


def plot(rows: list[Row], title: str, path: pathlib.Path) -> None:
    """Stacked bars (args / outputs / temps) per layout, GiB per device, saved as a PNG at ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    names = [r["layout"] for r in rows]
    bottom = [0.0] * len(rows)
    for part in ("args", "outputs", "temps"):
        vals = [r[part] / GIB for r in rows]
        ax.bar(names, vals, bottom=bottom, label=part)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_ylabel("GiB per device")
    ax.set_title(title, fontsize=9)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
