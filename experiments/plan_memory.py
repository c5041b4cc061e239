"""Per-device memory plan of a Qwen2.5-Coder forward+backward on a simulated 8-device mesh.

    .venv/bin/python -m experiments.plan_memory                       # 7B, bf16, 8 x 512, 4 layouts
    .venv/bin/python -m experiments.plan_memory --layers=2 --layouts=fsdp8   # quick check

Nothing is allocated: parameters and the batch are ``jax.ShapeDtypeStruct``s carrying their
``NamedSharding``; ``jax.jit(grad).lower(...).compile()`` (AOT) gives XLA's per-device
``memory_analysis()``. The step is ``jax.grad`` of the mean next-token NLL (float32 logits and
log-softmax) with per-layer rematerialisation, activations constrained by the logical-axis rules
(:func:`maxk_jax.runtime.sharding.activation_sharding`). Optimizer state is NOT included.
Layouts are written ``data2_fsdp4`` / ``fsdp4_tensor2`` / ``fsdp8`` (axes not named are 1).
The planning itself is :mod:`maxk_jax.planning.memory_plan`.
Writes ``plan_memory.{json,md,png}`` to ``--results_dir``.
"""
from __future__ import annotations


# XLA reads its flags when JAX starts: ask for the simulated CPU devices before importing JAX
from maxk_jax.planning.simulated_devices import request_cpu_devices  # isort: skip  (stdlib only: before JAX)

NUM_DEVICES = 8
request_cpu_devices(NUM_DEVICES)

import json  # noqa: E402
import pathlib  # noqa: E402

from absl import app, flags  # noqa: E402
from tqdm import tqdm  # noqa: E402

from maxk_jax import cli  # noqa: E402
from maxk_jax.planning import memory_plan, plan_flags, plan_report  # noqa: E402
from maxk_jax.models import qwen2  # noqa: E402

FLAGS = flags.FLAGS
plan_flags.define_flags(param_dtype="bfloat16", results_dir="runs/plan_memory")
flags.DEFINE_integer("batch", 8, "Global batch size (sequences per step).")
flags.DEFINE_integer("seq", 512, "Tokens per sequence.")


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments {argv[1:]}")
    config = plan_flags.config_from_flags(NUM_DEVICES)
    rows = [memory_plan.plan_nll_grad(config, layout, FLAGS.batch, FLAGS.seq)
            for layout in tqdm(FLAGS.layouts, desc="layouts")]
    header = (f"{FLAGS.preset} ({config.num_layers} layers, {qwen2.param_count(config):,} params), "
              f"grad of mean NLL, batch {FLAGS.batch} x {FLAGS.seq}, dtype {FLAGS.dtype}, "
              f"params {FLAGS.param_dtype}, remat {FLAGS.remat}, {NUM_DEVICES} CPU devices; "
              "per-device bytes from compiled.memory_analysis() (no optimizer state)")
    out = pathlib.Path(FLAGS.results_dir)
    out.mkdir(parents=True, exist_ok=True)
    table = plan_report.to_markdown(rows, header)
    (out / "plan_memory.md").write_text(table)
    (out / "plan_memory.json").write_text(json.dumps(
        {"header": header, "config": config.to_hf_dict(), "batch": FLAGS.batch,
         "seq": FLAGS.seq, "rows": rows}, indent=2))
    title = (f"{FLAGS.preset} ({config.num_layers} layers): grad of NLL, batch {FLAGS.batch} x "
             f"{FLAGS.seq}, {FLAGS.dtype}, remat={FLAGS.remat}")
    plan_report.plot(rows, title, out / "plan_memory.png")
    print(table)
    print(f"wrote {out}/plan_memory.{{md,json,png}}")


if __name__ == "__main__":
    cli.run_main(main)
