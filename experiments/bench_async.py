r"""Benchmark: RL step time with synchronous rollouts (s = 0) vs asynchronous ones (s > 0).

    .venv/bin/python -m experiments.bench_async                           # main job's config, s = 0, 1, 2
    .venv/bin/python -m experiments.bench_async --config=experiments/configs/tiny.py:testbed --steps=10

Builds (or reuses, from ``<runs_dir>/_cache``) the config's synthetic split and warmed-up base
exactly as experiments/tiny_pipeline.py does, then runs the RL loop for ``--steps`` steps once per
``rollout.max_staleness`` in ``--staleness`` (no in-loop evaluation, one checkpoint at the end), in
``--rounds`` rounds (the order of the s values alternates between rounds). Per run, over the steps
after the first ``--skip`` (compilation): mean step time, the learner's wait for its batch
(``time/wait_rollout_s``), train, sample and judge seconds. Reported: each s's median step time over
rounds and its speed-up against s = 0 measured in the same run. Results go to ``--results_dir`` as
bench_async.{json,md,png}. What overlaps on one host: the producer thread samples (XLA) and the
sandbox processes judge while the learner's train step runs (XLA): on a 2-core machine the two XLA
programs compete for the same cores, so only the judging and the Python between them overlap for free.
On an accelerator slice ``--rollout_devices=4`` times the s > 0 runs with a rollout sub-mesh of their own
(``rollout.devices``) against the synchronous loop on every device.
"""
from __future__ import annotations

import json
import os
import shutil
import statistics
import time
from collections.abc import Sequence
from typing import Any

from absl import app, flags
from ml_collections import config_flags

from maxk_jax import cli
from maxk_jax.cli import config_overrides
from maxk_jax.pipelines import from_config_dict
from maxk_jax.pipelines.phases import cpu_model

CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs", "tiny.py")
FLAGS = flags.FLAGS
PARTS = ("wait_rollout", "train", "sample", "judge")


def define_flags() -> None:
    """Define the command-line flags (called by ``__main__`` only, so tests can import this module)."""
    with config_overrides.explained_errors("config", CONFIG):
        config_flags.DEFINE_config_file("config", CONFIG, "Pipeline config (ml_collections) whose base and RL "
                                        "settings are timed; override fields with --config.<field>=<value>.",
                                        lock_config=False)
    flags.DEFINE_list("staleness", ["0", "1", "2"], "rollout.max_staleness values to time (0 = synchronous, the baseline).")
    flags.DEFINE_integer("rollout_devices", 0, "Devices given to the rollout alone in the s > 0 runs "
                         "(rollout.devices: a rollout sub-mesh beside the learner's; the s = 0 baseline shares every "
                         "device). 0 = every run shares them.", lower_bound=0)
    flags.DEFINE_integer("steps", 8, "RL steps per run.", lower_bound=2)
    flags.DEFINE_integer("skip", 2, "Leading steps of each run left out of the means (compilation).", lower_bound=0)
    flags.DEFINE_integer("rounds", 2, "Rounds over the s values (alternating order); medians over rounds.", lower_bound=1)
    flags.DEFINE_string("results_dir", "runs/bench_async", "Where bench_async.{json,md,png} go.")
    flags.DEFINE_bool("progress", True, "Show tqdm progress bars.")


def time_run(cfg: Any, base_path: str, train_path: str, out_dir: str, s: int, *, steps: int, skip: int,
             progress: bool, rollout_devices: int = 0) -> dict[str, float]:
    """One RL run of `steps` steps with ``rollout.max_staleness = s`` (and ``rollout.devices =
    rollout_devices``): mean seconds per step (and per part, `PARTS`) over the steps after `skip`,
    and the loop's wall time."""
    from maxk_jax.pipelines.config import rl_config
    from maxk_jax.rl import loop as rl_loop
    from maxk_jax.rl.metrics_log import read_metrics
    from maxk_jax.cli.fields import replace_fields

    shutil.rmtree(out_dir, ignore_errors=True)
    run_cfg = replace_fields(rl_config(cfg, base_path, out_dir, train_path), {
        "name": f"s{s}", "max_steps": steps, "rollout.max_staleness": s, "rollout.devices": rollout_devices,
        "eval.interval": 0,
        "checkpoint.interval": steps, "log.tensorboard": False})
    start = time.perf_counter()
    rl_loop.run(run_cfg, progress=progress)
    wall = time.perf_counter() - start
    rows = read_metrics(os.path.join(out_dir, "metrics.jsonl"))[skip:]
    out = {"step_s": statistics.fmean(r["time/step_s"] for r in rows), "wall_s": wall}
    out.update({f"{p}_s": statistics.fmean(r[f"time/{p}_s"] for r in rows) for p in PARTS})
    return out


def summarise(runs: dict[int, list[dict[str, float]]]) -> list[dict[str, float]]:
    """Per s: medians over rounds of every timing, and ``speedup`` = s=0's median step time / s's."""
    base = statistics.median(r["step_s"] for r in runs[0])
    rows = []
    for s, rounds in sorted(runs.items()):
        row = {"s": s, **{key: statistics.median(r[key] for r in rounds) for key in rounds[0]}}
        row["speedup"] = base / row["step_s"]
        rows.append(row)
    return rows


def markdown(rows: list[dict[str, float]], header: str) -> str:
    """The results table."""
    lines = [header, "", "| s | step s | speed-up vs s=0 | learner waits s | train s | sample s | judge s |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['s']} | {r['step_s']:.2f} | {r['speedup']:.2f}x | {r['wait_rollout_s']:.2f} | "
                     f"{r['train_s']:.2f} | {r['sample_s']:.2f} | {r['judge_s']:.2f} |")
    return "\n".join(lines) + "\n"


def plot(rows: list[dict[str, float]], path: str, title: str) -> None:
    """Stacked bars per s: the learner's wait and its train time (the rest of a step: metrics, I/O)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    labels = [f"s={r['s']}" for r in rows]
    wait = [r["wait_rollout_s"] for r in rows]
    train = [r["train_s"] for r in rows]
    other = [max(r["step_s"] - w - t, 0.0) for r, w, t in zip(rows, wait, train)]
    ax.bar(labels, wait, label="learner waits for its batch")
    ax.bar(labels, train, bottom=wait, label="train (PPO iterations)")
    ax.bar(labels, other, bottom=[w + t for w, t in zip(wait, train)], label="other")
    ax.set_ylabel("seconds per RL step")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: Sequence[str]) -> None:
    """absl entry point."""
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    with cli.user_errors():
        cfg = from_config_dict(FLAGS.config)
        values = sorted({int(v) for v in FLAGS.staleness})
        if 0 not in values or values[0] < 0:
            raise ValueError(f"--staleness={','.join(FLAGS.staleness)} must hold 0 (the baseline) and no negative value")
        if FLAGS.skip >= FLAGS.steps:
            raise ValueError(f"--skip={FLAGS.skip} leaves none of --steps={FLAGS.steps}")
    from maxk_jax.pipelines.base_model import prepare_base, prepare_data

    cache = os.path.join(cfg.runs_dir, "_cache")
    train_path, train, _ = prepare_data(cfg, cache)
    base_path, _, _ = prepare_base(cfg, train, cache, progress=FLAGS.progress)
    os.makedirs(FLAGS.results_dir, exist_ok=True)
    runs: dict[int, list[dict[str, float]]] = {s: [] for s in values}
    for r in range(FLAGS.rounds):
        for s in (values if r % 2 == 0 else values[::-1]):
            out = time_run(cfg, base_path, train_path, os.path.join(FLAGS.results_dir, f"run_s{s}"), s,
                           steps=FLAGS.steps, skip=FLAGS.skip, progress=FLAGS.progress,
                           rollout_devices=FLAGS.rollout_devices if s else 0)
            runs[s].append(out)
            print(f"round {r} s={s}: {out['step_s']:.2f} s/step (learner waited {out['wait_rollout_s']:.2f} s)")
    rows = summarise(runs)
    import jax

    split = (f", s > 0 with {FLAGS.rollout_devices} of {jax.device_count()} devices for the rollout"
             if FLAGS.rollout_devices else "")
    header = (f"RL step time, {cfg.name} config{split}, {FLAGS.steps} steps (first {FLAGS.skip} left out), "
              f"median of {FLAGS.rounds} rounds; {cpu_model()}, {os.cpu_count()} CPUs")
    text = markdown(rows, header)
    print("\n" + text)
    with open(os.path.join(FLAGS.results_dir, "bench_async.md"), "w", encoding="utf-8") as f:
        f.write(text)
    with open(os.path.join(FLAGS.results_dir, "bench_async.json"), "w", encoding="utf-8") as f:
        json.dump({"rows": rows, "runs": {str(s): v for s, v in runs.items()}, "steps": FLAGS.steps,
                   "skip": FLAGS.skip, "config": cfg.name, "rollout_devices": FLAGS.rollout_devices}, f, indent=2)
    plot(rows, os.path.join(FLAGS.results_dir, "bench_async.png"), header[:90])


if __name__ == "__main__":
    define_flags()
    cli.run_main(main)
