"""The decode loop compiled with different XLA options, timed in one process (on one GPU).

    python -m experiments.bench_decode_options                       # 1.5B, 16 x 8, 512 / 256, the variants below
    python -m experiments.bench_decode_options --entries=default/pallas:1,default/pallas --preset=qwen2.5-coder-7b
    python -m experiments.bench_decode_options --smoke               # tiny shapes, any backend (the CPU test)

Each ``--entries`` item is ``VARIANT/ATTENTION``: a named set of XLA compiler options (``VARIANTS``),
given to ``sampling.decode_loop`` by re-jitting it with ``compiler_options`` (nothing else changes:
the prefill keeps the process's options), and a ``bench_accelerator --decode_attention`` entry
(``auto``, ``xla``, ``pallas`` or ``pallas:S``). Every entry is timed like ``bench_accelerator``'s
decode cases (``maxk_jax.benchmarks.decode.decode_case``: ms per decode step, tok/s, the roofline
fraction against the bandwidth measured at the start of the run), so the rows of one run share their
ceiling and machine.
Writes ``bench_decode_options.json`` to ``--results_dir`` after every entry and prints one line per entry.
Where XLA's while loop costs time on a GPU (the host launching each step's CUDA graph while the GPU
waits), these are the switches to try: no command buffers, the loop itself in one, or no small graphs.
"""
from __future__ import annotations

import json
import pathlib
import time
from typing import Any

from absl import flags

from maxk_jax.benchmarks import decode as bench

FLAGS = flags.FLAGS
#: XLA compiler options of each variant (None: the process's own).
VARIANTS: dict[str, dict[str, Any] | None] = {
    "default": None,
    "no_command_buffers": {"xla_gpu_enable_command_buffer": ""},
    "while_command_buffers": {"xla_gpu_enable_command_buffer": "FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,CUDNN,WHILE,"
                                                                 "CONDITIONAL"},
    "no_small_graphs": {"xla_gpu_graph_min_graph_size": 100000},
}
DEFAULT_ENTRIES = ["default/pallas:1", "default/pallas", "no_command_buffers/pallas", "while_command_buffers/pallas",
                   "no_small_graphs/pallas", "default/xla"]


def define_flags() -> None:
    """Define the command-line flags (called by ``__main__`` only, so tests can import this module)."""
    flags.DEFINE_bool("smoke", False, "Tiny model and shapes (a CPU test of the whole run).")
    flags.DEFINE_string("preset", "qwen2.5-coder-1.5b", "Model preset (--smoke: a tiny model).")
    flags.DEFINE_string("case", "16x8:512/256", "Decode case PROMPTSxN:PROMPT_LEN/NEW_TOKENS (--smoke: 2x2:32/8).")
    flags.DEFINE_list("entries", DEFAULT_ENTRIES, f"VARIANT/ATTENTION items, VARIANT of {sorted(VARIANTS)}, "
                      "ATTENTION a bench_accelerator --decode_attention entry (auto, xla, pallas, pallas:S).")
    flags.DEFINE_integer("repeats", 3, "Timed calls per entry (median reported).")
    flags.DEFINE_integer("seed", 0, "Seed of the random weights and prompts.")
    flags.DEFINE_string("results_dir", "runs/bench_decode_options", "Directory for bench_decode_options.json.")


def parse_entry(text: str) -> tuple[str, str]:
    """``"default/pallas:4"`` -> ("default", "pallas:4"). ValueError naming the text."""
    variant, sep, attention = text.partition("/")
    if not sep or variant not in VARIANTS:
        raise ValueError(f"--entries item {text!r} is not VARIANT/ATTENTION with VARIANT one of {sorted(VARIANTS)}")
    bench.attention_variant(attention)
    return variant, attention


def run(config: Any, entries: list[tuple[str, str]], case: tuple[int, int, int, int], repeats: int, seed: int,
        bandwidth: float, out: pathlib.Path | None = None) -> list[dict[str, Any]]:
    """Time each (variant, attention) entry with ``maxk_jax.benchmarks.decode.decode_case``; the decode loop is
    re-jitted once per variant with its compiler options. Rows are written to ``out`` (if given)
    after every entry. Returns the rows ({"variant", "decode_attention", **decode_case's})."""
    import jax

    from maxk_jax.models import qwen2
    from maxk_jax.sampling import _sampler

    original = _sampler.decode_loop
    params = jax.jit(qwen2.init_params, static_argnums=0)(config, jax.random.key(seed))
    jitted: dict[str, Any] = {}
    rows = []
    try:
        for variant, attention in entries:
            options = VARIANTS[variant]
            if variant not in jitted:
                jitted[variant] = original if options is None else jax.jit(
                    original.__wrapped__, static_argnums=(0, 1, 2), donate_argnums=(5,), compiler_options=options)
            _sampler.decode_loop = jitted[variant]
            row = bench.decode_case(bench.variant_config(config, attention), params, case, repeats, bandwidth, seed)
            rows.append({"variant": variant, "decode_attention": attention, "compiler_options": options, **row})
            print(f"{variant:22s} {attention:9s} {row['ms_per_step']:8.3f} ms/step {row['tok_per_s']:10,.0f} tok/s "
                  f"{100 * row['frac_of_roofline']:5.1f} % of the roofline (first call {row['first_call_s']:.1f} s)",
                  flush=True)
            if out is not None:
                out.write_text(json.dumps(rows, indent=1))
    finally:
        _sampler.decode_loop = original
    return rows


def main(argv: list[str]) -> None:
    from absl import app

    from maxk_jax import cli
    from maxk_jax.models import qwen2
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments {argv[1:]}")
    with cli.user_errors():
        entries = [parse_entry(e) for e in FLAGS.entries]
        case = bench.parse_case("2x2:32/8" if FLAGS.smoke and FLAGS["case"].using_default_value else FLAGS.case)
        if FLAGS.repeats < 1:
            raise ValueError(f"--repeats={FLAGS.repeats} must be >= 1")
        if not FLAGS.smoke and FLAGS.preset not in qwen2.PRESETS:
            raise ValueError(f"--preset: unknown preset {FLAGS.preset!r}; available: {sorted(qwen2.PRESETS)}")
    import jax

    t0 = time.perf_counter()
    base = bench.smoke_config() if FLAGS.smoke else qwen2.preset(FLAGS.preset)
    config = base.replace(dtype="bfloat16", param_dtype="bfloat16")
    ceil = bench.ceilings(4 if FLAGS.smoke else 2048, 128 if FLAGS.smoke else 8192)
    dev = jax.devices()[0]
    print(f"{dev.device_kind} ({dev.platform}), jax {jax.__version__}: {ceil['hbm_bytes_per_s'] / 1e12:.2f} TB/s "
          f"read+write measured; {'tiny' if FLAGS.smoke else FLAGS.preset} {bench.case_text(case)}", flush=True)
    out = pathlib.Path(FLAGS.results_dir)
    out.mkdir(parents=True, exist_ok=True)
    run(config, entries, case, FLAGS.repeats, FLAGS.seed, ceil["hbm_bytes_per_s"], out / "bench_decode_options.json")
    print(f"total {time.perf_counter() - t0:.0f} s; wrote {out}/bench_decode_options.json")


if __name__ == "__main__":
    import os
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    from maxk_jax import cli
    define_flags()
    cli.run_main(main)
