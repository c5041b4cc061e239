"""Benchmark: library max@k reward transforms vs the paper's Listings 2 and 3 (same inputs, one run).

    .venv/bin/python -m experiments.bench_estimators                      # batch 256, n = 8,256,1024
    .venv/bin/python -m experiments.bench_estimators --ns=8,64 --repeats=3  # quick check

For every n it times six jit-compiled functions on the same [batch, n] rewards (a grid of
fractions-of-tests-passed values, so ties occur) and log-ratios:

* ``listing2``      - ``paper_listings.bon_scaler`` (on-policy, O(n^2) weight matrix), given rows
                      already sorted (its contract: the caller sorts, so no sort is timed);
* ``listing2+sort`` - the same plus the sort it needs and the un-sort of its output;
* ``maxk``          - ``maxk_jax.estimators.maxk_reward_transform`` on unsorted rows (its own
                      sort and un-sort are inside the timed function);
* ``listing3``, ``listing3+sort`` - ``paper_listings.bon_scaler_offpolicy`` (corrected
                      Listing 3, O(B n^2) weights) given sorted rows and deltas = expm1(log_ratio),
                      without / with the sort;
* ``maxk_offpolicy`` - ``maxk_reward_transform_offpolicy(rewards, log_ratio, k)``, unsorted rows.

Time: all six functions of one n are compiled and warmed up first, then the repeats are
interleaved (repeat 1 of every function, then repeat 2, ...) so a change in machine load hits
every function alike; a repeat averages enough back-to-back calls to last >= ~20 ms. Reported:
the median over ``--repeats`` of the wall time per call (``ms``) and of the process CPU time per
call (``cpu_ms``, all threads; steadier than wall time on a shared machine), with speed-ups for
both.
Memory: XLA's compiled memory analysis, temp + output bytes (arguments excluded). Each library
row is reported as ratios against both forms of its listing measured in the same run, and the
outputs are compared (max |library - listing|, in the input order).
Results go to ``--results_dir`` as bench_estimators.{json,md,png}.
"""
from __future__ import annotations

import json
import math
import os
import pathlib
import platform
import statistics
import time
from typing import Any, Callable, Sequence

from absl import app, flags
import jax
import jax.numpy as jnp
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from tqdm import tqdm  # noqa: E402

from maxk_jax import cli, estimators  # noqa: E402
from maxk_jax.benchmarks import paper_listings  # noqa: E402
from maxk_jax.pipelines.phases import cpu_model  # noqa: E402

FLAGS = flags.FLAGS


def define_flags() -> None:
    """Defines the command-line flags. Called by ``__main__`` only, so importing this module
    registers no flags and it can share a process with other absl apps (e.g. under pytest)."""
    flags.DEFINE_integer("batch", 256, "Prompts per call (rows B of the [B, n] reward array).")
    flags.DEFINE_list("ns", ["8", "256", "1024"],
                      "Completions per prompt n to benchmark (comma list).")
    flags.DEFINE_integer("k", 4, "The k of max@k (must satisfy 1 <= k <= every n).")
    flags.DEFINE_integer("repeats", 7,
                         "Timed repeats per function (interleaved across the functions of one n) "
                         "after one warm-up; the median is reported.")
    flags.DEFINE_integer("seed", 0, "PRNG seed for the synthetic rewards and log-ratios.")
    flags.DEFINE_float("log_ratio_scale", 0.05,
                       "Std of the synthetic log pi_theta/pi_old per sample.")
    flags.DEFINE_integer("reward_levels", 10,
                         "Rewards are multiples of 1/reward_levels in [0, 1] (ties).")
    flags.DEFINE_float("max_gib", 6.0,
                       "Skip timing (still report memory) when temp + output exceeds this.")
    flags.DEFINE_string("results_dir", "runs/bench_estimators",
                        "Directory for the JSON/markdown/PNG results.")



BASELINES_OF = {"maxk": ("listing2", "listing2+sort"),
                "maxk_offpolicy": ("listing3", "listing3+sort")}


def make_inputs(key: jax.Array, batch: int, n: int, levels: int,
                log_ratio_scale: float) -> dict[str, jax.Array]:
    """Synthetic [B, n] inputs: rewards, log_ratio, deltas; sorted copies and the sort order."""
    k_r, k_l = jax.random.split(key)
    rewards = jax.random.randint(k_r, (batch, n), 0, levels + 1).astype(jnp.float32) / levels
    log_ratio = log_ratio_scale * jax.random.normal(k_l, (batch, n), jnp.float32)
    deltas = jnp.expm1(log_ratio)
    r_sorted, d_sorted, order = paper_listings.sort_rows(rewards, deltas)
    return dict(rewards=rewards, log_ratio=log_ratio, deltas=deltas, r_sorted=r_sorted,
                d_sorted=d_sorted, order=order)


def variants(k: int) -> dict[str, tuple[Callable[..., jax.Array], tuple[str, ...]]]:
    """Name -> (function returning [B, n], names of its input arrays). ``listing2`` and
    ``listing3`` return sorted order; every other function returns the input order."""
    pl = paper_listings

    def listing2_sort(r):
        r_s, order = pl.sort_rows(r)
        return pl.unsort_rows(pl.bon_scaler(r_s, k)[0], order)

    def listing3_sort(r, d):
        r_s, d_s, order = pl.sort_rows(r, d)
        return pl.unsort_rows(pl.bon_scaler_offpolicy(r_s, d_s, k)[0], order)

    return {
        "listing2": (lambda r: pl.bon_scaler(r, k)[0], ("r_sorted",)),
        "listing2+sort": (listing2_sort, ("rewards",)),
        "maxk": (lambda r: estimators.maxk_reward_transform(r, k), ("rewards",)),
        "listing3": (lambda r, d: pl.bon_scaler_offpolicy(r, d, k)[0], ("r_sorted", "d_sorted")),
        "listing3+sort": (listing3_sort, ("rewards", "deltas")),
        "maxk_offpolicy": (lambda r, lr: estimators.maxk_reward_transform_offpolicy(r, lr, k),
                           ("rewards", "log_ratio")),
    }


def prepare(fn: Callable[..., jax.Array], args: Sequence[jax.Array],
            max_bytes: float) -> dict[str, Any]:
    """Compiles ``fn`` for ``args`` and reports its memory; unless temp + output bytes exceed
    ``max_bytes``, also runs one warm-up call (kept as ``output``) and picks ``calls_per_repeat``
    (enough back-to-back calls for >= ~20 ms, like timeit's autorange)."""
    compiled = jax.jit(fn).lower(*args).compile()
    mem = compiled.memory_analysis()
    temp, out_bytes = int(mem.temp_size_in_bytes), int(mem.output_size_in_bytes)
    row: dict[str, Any] = dict(temp_bytes=temp, output_bytes=out_bytes, mem_bytes=temp + out_bytes,
                               seconds=None, cpu_seconds=None, output=None, wall_times=[],
                               cpu_times=[], compiled=compiled, args=list(args))
    if temp + out_bytes > max_bytes:
        return row
    t0 = time.perf_counter()
    row["output"] = np.asarray(jax.block_until_ready(compiled(*args)))  # warm-up
    row["calls_per_repeat"] = int(min(1000, max(1, math.ceil(0.02 / max(time.perf_counter() - t0,
                                                                         1e-6)))))
    return row


def time_repeat(row: dict[str, Any]) -> None:
    """Times one repeat of a ``prepare``d function (no-op when it was not run): appends the wall
    and process-CPU seconds per call to ``wall_times`` / ``cpu_times``."""
    if row["output"] is None:
        return
    compiled, args, number = row["compiled"], row["args"], row["calls_per_repeat"]
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(number):
        result = compiled(*args)
    jax.block_until_ready(result)
    row["wall_times"].append((time.perf_counter() - t0) / number)
    row["cpu_times"].append((time.process_time() - c0) / number)


def summarize(row: dict[str, Any]) -> dict[str, Any]:
    """Sets ``seconds`` / ``cpu_seconds`` to the medians of the timed repeats; drops the
    compiled function and its arguments; returns the row."""
    if row["wall_times"]:
        row.update(seconds=statistics.median(row["wall_times"]),
                   cpu_seconds=statistics.median(row["cpu_times"]))
    row.pop("compiled", None)
    row.pop("args", None)
    return row


def measure(fn: Callable[..., jax.Array], args: Sequence[jax.Array], repeats: int,
            max_bytes: float) -> dict[str, Any]:
    """Compiles ``fn`` for ``args``; returns memory bytes, median wall / CPU seconds per call
    (None when temp + output bytes exceed ``max_bytes``: not run) and the output."""
    row = prepare(fn, args, max_bytes)
    for _ in range(repeats):
        time_repeat(row)
    return summarize(row)


def run(batch: int, ns: Sequence[int], k: int, repeats: int, key: jax.Array, levels: int,
        log_ratio_scale: float, max_bytes: float) -> list[dict[str, Any]]:
    """Measures every variant for every n; returns one JSON-able row per (n, variant)."""
    for n in ns:
        if not 1 <= k <= n:
            raise ValueError(f"--k={k} must satisfy 1 <= k <= n for every n; got n = {n}")
    if batch < 1 or repeats < 1 or levels < 1:
        raise ValueError(f"batch={batch}, repeats={repeats}, reward_levels={levels} must be >= 1")
    rows = []
    fns = variants(k)
    results: dict[tuple[int, str], dict[str, Any]] = {}
    bar = tqdm(total=len(ns) * len(fns) * (1 + repeats), desc="bench", unit="step")
    for n in ns:
        inputs = make_inputs(jax.random.fold_in(key, n), batch, n, levels, log_ratio_scale)
        prepared = {}
        for name, (fn, arg_names) in fns.items():  # compile + warm up every variant of this n
            prepared[name] = prepare(fn, [inputs[a] for a in arg_names], max_bytes)
            bar.update()
        for _ in range(repeats):  # interleaved: load changes hit every variant alike
            for res in prepared.values():
                time_repeat(res)
                bar.update()
        for name, res in prepared.items():
            res = summarize(res)
            if res["output"] is not None and name in ("listing2", "listing3"):  # to input order
                unsorted = np.empty_like(res["output"])
                np.put_along_axis(unsorted, np.asarray(inputs["order"]), res["output"], -1)
                res["output"] = unsorted
            results[(n, name)] = res
    bar.close()
    for (n, name), res in results.items():
        row = dict(n=n, batch=batch, k=k, method=name,
                   ms=None if res["seconds"] is None else 1e3 * res["seconds"],
                   cpu_ms=None if res["cpu_seconds"] is None else 1e3 * res["cpu_seconds"],
                   temp_bytes=res["temp_bytes"], output_bytes=res["output_bytes"],
                   mem_bytes=res["mem_bytes"], mem_per_element=res["mem_bytes"] / (batch * n * 4),
                   baseline=None, speedup_vs_listing=None, speedup_vs_listing_sort=None,
                   cpu_speedup_vs_listing=None, cpu_speedup_vs_listing_sort=None,
                   mem_ratio_vs_listing=None, max_abs_diff=None)
        if name in BASELINES_OF:
            plain, with_sort = (results[(n, b)] for b in BASELINES_OF[name])
            row["baseline"] = BASELINES_OF[name][0]
            row["mem_ratio_vs_listing"] = plain["mem_bytes"] / max(res["mem_bytes"], 1)
            if res["seconds"] is not None:
                for key_, base in (("speedup_vs_listing", plain),
                                   ("speedup_vs_listing_sort", with_sort)):
                    if base["seconds"] is not None:
                        row[key_] = base["seconds"] / res["seconds"]
                        row["cpu_" + key_] = base["cpu_seconds"] / max(res["cpu_seconds"], 1e-12)
            diffs = [np.max(np.abs(b["output"] - res["output"])) for b in (plain, with_sort)
                     if b["output"] is not None and res["output"] is not None]
            row["max_abs_diff"] = float(max(diffs)) if diffs else None
        rows.append(row)
    return rows


def _fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def markdown_table(rows: Sequence[dict[str, Any]]) -> str:
    """The results as a markdown table (one line per (n, method))."""
    lines = ["| n | method | time ms | CPU ms | speed-up vs listing (pre-sorted) "
             "| speed-up vs listing+sort | CPU speed-up vs listing+sort "
             "| temp+out MiB | mem bytes / (B·n·4) | listing mem / ours | max abs diff vs listing |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    times = lambda v: "-" if v is None else f"{v:.2f}×"  # noqa: E731
    for r in rows:
        lines.append(
            f"| {r['n']} | {r['method']} | {_fmt(r['ms'], '.3f')} | {_fmt(r['cpu_ms'], '.3f')} "
            f"| {times(r['speedup_vs_listing'])} | {times(r['speedup_vs_listing_sort'])} "
            f"| {times(r['cpu_speedup_vs_listing_sort'])} "
            f"| {r['mem_bytes'] / 2**20:.2f} | {r['mem_per_element']:.1f} "
            f"| {_fmt(r['mem_ratio_vs_listing'], '.1f')} | {_fmt(r['max_abs_diff'], '.2e')} |")
    return "\n".join(lines)


def plot(rows: Sequence[dict[str, Any]], path: pathlib.Path) -> None:
    """Time and memory against n (log-log), one line per method, saved as PNG."""
    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(10, 4))
    for method in dict.fromkeys(r["method"] for r in rows):
        sel = [r for r in rows if r["method"] == method]
        timed = [r for r in sel if r["ms"] is not None]
        ax_t.plot([r["n"] for r in timed], [r["ms"] for r in timed], "o-", label=method)
        ax_m.plot([r["n"] for r in sel], [r["mem_bytes"] / 2**20 for r in sel], "o-", label=method)
    for ax, label in ((ax_t, "median wall time [ms]"), (ax_m, "XLA temp + output [MiB]")):
        ax.set(xscale="log", yscale="log", xlabel="n (completions per prompt)", ylabel=label)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.suptitle(f"max@k transforms, batch {rows[0]['batch']}, k = {rows[0]['k']}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: Sequence[str]) -> None:
    """Runs the benchmark and writes bench_estimators.{json,md,png} to --results_dir."""
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    try:
        ns = [int(x) for x in FLAGS.ns]
    except ValueError as err:
        raise ValueError(f"--ns must be a comma list of ints, got {FLAGS.ns!r}") from err
    rows = run(FLAGS.batch, ns, FLAGS.k, FLAGS.repeats, jax.random.key(FLAGS.seed),
               FLAGS.reward_levels, FLAGS.log_ratio_scale, FLAGS.max_gib * 2**30)
    out_dir = pathlib.Path(FLAGS.results_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    table = markdown_table(rows)
    meta = dict(jax=jax.__version__, backend=jax.default_backend(), cpu=cpu_model(), cpus=os.cpu_count(),
                platform=platform.platform(), load_avg_at_end=os.getloadavg(),
                repeats=FLAGS.repeats, seed=FLAGS.seed, log_ratio_scale=FLAGS.log_ratio_scale,
                reward_levels=FLAGS.reward_levels)
    (out_dir / "bench_estimators.json").write_text(json.dumps(dict(meta=meta, rows=rows), indent=2))
    (out_dir / "bench_estimators.md").write_text(
        f"batch {FLAGS.batch}, k = {FLAGS.k}, median of {FLAGS.repeats} interleaved repeats after warm-up "
        f"({meta['backend']}, {meta['cpus']} CPUs, load avg {meta['load_avg_at_end'][0]:.2f})\n\n"
        + table + "\n")
    plot(rows, out_dir / "bench_estimators.png")
    print(table)
    print(f"\nwrote {out_dir / 'bench_estimators.json'}, {out_dir / 'bench_estimators.md'}, "
          f"{out_dir / 'bench_estimators.png'}")


if __name__ == "__main__":
    define_flags()
    cli.run_main(main)
