"""Per-device memory plan of a Qwen2.5-Coder forward+backward on a simulated 8-device mesh.

    .venv/bin/python -m experiments.plan_memory                       # 7B, bf16, 8 x 512, 4 layouts
    .venv/bin/python -m experiments.plan_memory --layers=2 --layouts=fsdp8   # quick check

Nothing is allocated: parameters and the batch are ``jax.ShapeDtypeStruct``s carrying their
``NamedSharding``; ``jax.jit(grad).lower(...).compile()`` (AOT) gives XLA's per-device
``memory_analysis()``. The step is ``jax.grad`` of the mean next-token NLL (float32 logits and
log-softmax) with per-layer rematerialisation, activations constrained by the logical-axis rules
(:func:`maxk_jax.sharding.activation_sharding`). Optimizer state is NOT included.
Layouts are written ``data2_fsdp4`` / ``fsdp4_tensor2`` / ``fsdp8`` (axes not named are 1).
Writes ``plan_memory.{json,md,png}`` to ``--results_dir``.
"""
from __future__ import annotations

import os

NUM_DEVICES = 8
_flags = os.environ.get("XLA_FLAGS", "")
if "xla_force_host_platform_device_count" not in _flags:
    os.environ["XLA_FLAGS"] = f"{_flags} --xla_force_host_platform_device_count={NUM_DEVICES}"
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import json  # noqa: E402
import pathlib  # noqa: E402
import re  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

from absl import app, flags  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from tqdm import tqdm  # noqa: E402

from maxk_jax import sharding as sh  # noqa: E402
from maxk_jax.models import qwen2  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string("preset", "qwen2.5-coder-7b", f"Model preset, one of {sorted(qwen2.PRESETS)}.")
flags.DEFINE_integer("layers", 0, "Override the number of decoder layers (0 = the preset's).")
flags.DEFINE_integer("batch", 8, "Global batch size (sequences per step).")
flags.DEFINE_integer("seq", 512, "Tokens per sequence.")
flags.DEFINE_enum("dtype", "bfloat16", ["bfloat16", "float32"], "Compute dtype of the matmuls.")
flags.DEFINE_enum("param_dtype", "bfloat16", ["bfloat16", "float32"], "Parameter storage dtype.")
flags.DEFINE_bool("remat", True, "Rematerialise each decoder layer in the backward pass.")
flags.DEFINE_list("layouts", ["fsdp8", "fsdp4_tensor2", "fsdp2_tensor4", "data2_fsdp4"],
                  "Mesh layouts to plan, e.g. fsdp4_tensor2 (sizes must multiply to 8).")
flags.DEFINE_string("results_dir", "runs/plan_memory", "Directory for the JSON/markdown/PNG results.")

GIB = 1024 ** 3


def parse_layout(name: str) -> dict[str, int]:
    """``'data2_fsdp4'`` -> ``{'data': 2, 'fsdp': 4, 'tensor': 1}``; ValueError on bad names."""
    sizes = {"data": 1, "fsdp": 1, "tensor": 1}
    for part in name.split("_"):
        m = re.fullmatch(r"(data|fsdp|tensor)(\d+)", part)
        if m is None:
            raise ValueError(f"bad layout {name!r}: parts must look like fsdp4, tensor2, data2")
        sizes[m.group(1)] = int(m.group(2))
    return sizes


def layout_sizes(name: str) -> dict[str, int]:
    """`parse_layout` of a layout that must use exactly NUM_DEVICES devices (ValueError otherwise)."""
    sizes = parse_layout(name)
    if sizes["data"] * sizes["fsdp"] * sizes["tensor"] != NUM_DEVICES:
        raise ValueError(f"layout {name!r} does not use exactly {NUM_DEVICES} devices")
    return sizes


def checked_config_from_flags() -> qwen2.Qwen2Config:
    """The planned model (--preset, --layers, --dtype, --param_dtype, --remat), after checking that
    the NUM_DEVICES simulated devices exist (ValueError naming XLA_FLAGS otherwise)."""
    if jax.device_count() != NUM_DEVICES:
        raise ValueError(f"expected {NUM_DEVICES} simulated devices, got {jax.device_count()} "
                         f"(XLA_FLAGS={os.environ.get('XLA_FLAGS')!r})")
    overrides = dict(dtype=FLAGS.dtype, param_dtype=FLAGS.param_dtype, remat=FLAGS.remat)
    if FLAGS.layers:
        overrides["num_layers"] = FLAGS.layers
    return qwen2.preset(FLAGS.preset, **overrides)


def nll_loss(config: qwen2.Qwen2Config, params: Any, tokens: jax.Array,
             mask: jax.Array) -> jax.Array:
    """Mean next-token NLL over real target tokens. tokens, mask: [B, T] -> scalar float32."""
    logits = qwen2.logits(config, params, tokens, mask)[:, :-1]
    logp = jax.nn.log_softmax(logits, axis=-1)
    nll = -jnp.take_along_axis(logp, tokens[:, 1:, None], axis=-1)[..., 0]
    weights = mask[:, 1:].astype(jnp.float32)
    return jnp.sum(nll * weights) / jnp.maximum(jnp.sum(weights), 1.0)


def plan(config: qwen2.Qwen2Config, layout: str, batch: int, seq: int) -> dict[str, Any]:
    """AOT-compile grad(nll_loss) for one layout; returns per-device memory in bytes."""
    mesh = sh.make_mesh(**parse_layout(layout))
    shapes = qwen2.abstract_params(config)
    p_shard = sh.param_shardings(mesh, qwen2.logical_axes(config), shapes)
    params = jax.tree.map(lambda s, d: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=d),
                          shapes, p_shard)
    b_shard = sh.batch_sharding(mesh, 2)
    tokens = jax.ShapeDtypeStruct((batch, seq), jnp.int32, sharding=b_shard)
    mask = jax.ShapeDtypeStruct((batch, seq), jnp.int32, sharding=b_shard)
    step = jax.jit(jax.grad(nll_loss, argnums=1), static_argnums=0, out_shardings=p_shard)
    t0 = time.perf_counter()
    with sh.activation_sharding(mesh):
        compiled = step.lower(config, params, tokens, mask).compile()
    seconds = time.perf_counter() - t0
    mem = compiled.memory_analysis()
    row = {
        "layout": layout, "compile_s": round(seconds, 1),
        "args": int(mem.argument_size_in_bytes), "outputs": int(mem.output_size_in_bytes),
        "temps": int(mem.temp_size_in_bytes), "alias": int(mem.alias_size_in_bytes),
    }
    row["total"] = row["args"] + row["outputs"] + row["temps"] - row["alias"]
    return row


def to_markdown(rows: list[dict[str, Any]], header: str) -> str:
    """Markdown table of per-device GiB per layout."""
    lines = [header, "", "| layout | args GiB | outputs GiB | temps GiB | total GiB | compile s |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['layout']} | {r['args'] / GIB:.2f} | {r['outputs'] / GIB:.2f} | "
                     f"{r['temps'] / GIB:.2f} | {r['total'] / GIB:.2f} | {r['compile_s']} |")
    return "\n".join(lines) + "\n"


def plot(rows: list[dict[str, Any]], title: str, path: pathlib.Path) -> None:
    """Stacked bars (args / outputs / temps) per layout, GiB per device."""
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


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments {argv[1:]}")
    config = checked_config_from_flags()
    for layout in FLAGS.layouts:
        layout_sizes(layout)
    rows = [plan(config, layout, FLAGS.batch, FLAGS.seq)
            for layout in tqdm(FLAGS.layouts, desc="layouts")]
    header = (f"{FLAGS.preset} ({config.num_layers} layers, {qwen2.param_count(config):,} params), "
              f"grad of mean NLL, batch {FLAGS.batch} x {FLAGS.seq}, dtype {FLAGS.dtype}, "
              f"params {FLAGS.param_dtype}, remat {FLAGS.remat}, {NUM_DEVICES} CPU devices; "
              "per-device bytes from compiled.memory_analysis() (no optimizer state)")
    out = pathlib.Path(FLAGS.results_dir)
    out.mkdir(parents=True, exist_ok=True)
    table = to_markdown(rows, header)
    (out / "plan_memory.md").write_text(table)
    (out / "plan_memory.json").write_text(json.dumps(
        {"header": header, "config": config.to_hf_dict(), "batch": FLAGS.batch,
         "seq": FLAGS.seq, "rows": rows}, indent=2))
    title = (f"{FLAGS.preset} ({config.num_layers} layers): grad of NLL, batch {FLAGS.batch} x "
             f"{FLAGS.seq}, {FLAGS.dtype}, remat={FLAGS.remat}")
    plot(rows, title, out / "plan_memory.png")
    print(table)
    print(f"wrote {out}/plan_memory.{{md,json,png}}")


if __name__ == "__main__":
    app.run(main)
