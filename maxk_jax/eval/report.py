"""Evaluation files: the resumable per-problem JSONL, summary JSON, markdown table, curve PNG.

A result directory (written by `write_report`, read back by `read_report`) holds::

    per_problem.jsonl  one `ProblemResult.to_json()` line per problem, in problem-index order
    summary.json       `EvalResult.summary()`: config, n, ks, dataset means per k (+ standard
                       errors, problems counted per k), totals (statuses, verdicts, exclusions)
    table.md           pass@k and max@k tables for k = ks, like the paper's Tables 5-14
    curves.png         pass@k and max@k against k (log2 x-axis)
    run_config.json    (experiments.evaluate) the settings of the run, checked on resume

During a run the JSONL is an append-only log (`ResultLog`): each record is one ``os.write`` of
a complete line followed by fsync, so an interruption leaves at most a torn last line, which
`read_results` cuts off (``repair=True``) before the run resumes.
"""
from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any, Optional

import numpy as np
from absl import logging

from maxk_jax.eval.result import METRICS, EvalResult, ProblemResult

PER_PROBLEM = "per_problem.jsonl"
SUMMARY = "summary.json"
TABLE = "table.md"
CURVES = "curves.png"
RUN_CONFIG = "run_config.json"
METRIC_LABELS = {"pass_at_k": "pass@{k}", "max_at_k": "max@{k}"}


def _line(obj: Any) -> bytes:
    return (json.dumps(obj, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")


def atomic_write(path: str | os.PathLike, data: bytes) -> None:
    """Write `data` to `path` via a fsynced temporary file renamed into place."""
    path = os.fspath(path)
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


class ResultLog:
    """Append-only per-problem JSONL: one complete line per ``append``, written with a single
    ``os.write`` on an O_APPEND descriptor and fsynced."""

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        self._fd: Optional[int] = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def append(self, result: ProblemResult) -> None:
        """Append `result` as one line and fsync."""
        if self._fd is None:
            raise ValueError(f"ResultLog {self.path!r} is closed")
        data = _line(result.to_json())
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view):]
        os.fsync(self._fd)

    def close(self) -> None:
        """Close the descriptor (idempotent)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> ResultLog:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def read_results(path: str | os.PathLike, *, repair: bool = False) -> list[ProblemResult]:
    """Read a per-problem JSONL. A torn last line (no final newline) is an interrupted append:
    with `repair` the file is truncated to its last complete line (logged), otherwise ValueError.
    Any other malformed line raises ValueError naming its line number."""
    path = os.fspath(path)
    with open(path, "rb") as f:
        data = f.read()
    end = data.rfind(b"\n") + 1
    if end < len(data):
        if not repair:
            raise ValueError(f"{path}: last line is incomplete ({len(data) - end} bytes without a newline)")
        logging.warning("%s: dropping an incomplete last line of %d bytes (interrupted write)", path, len(data) - end)
        with open(path, "r+b") as f:
            f.truncate(end)
            f.flush()
            os.fsync(f.fileno())
    out = []
    for lineno, line in enumerate(data[:end].splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(ProblemResult.from_json(json.loads(line)))
        except (json.JSONDecodeError, UnicodeDecodeError, ValueError) as e:
            raise ValueError(f"{path}:{lineno}: malformed problem result: {e}") from e
    return out


def write_results(results: Sequence[ProblemResult], path: str | os.PathLike) -> None:
    """Write per-problem results as JSONL in index order, atomically."""
    atomic_write(path, b"".join(_line(r.to_json()) for r in sorted(results, key=lambda r: r.index)))


# ----------------------------------------------------------------------------------------------
# Tables and plots
# ----------------------------------------------------------------------------------------------
def _fmt(value: Optional[float]) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _fmt_ci(value: Optional[float], ci: Optional[Sequence[float]]) -> str:
    return _fmt(value) if value is None or ci is None else f"{value:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]"


def markdown_table(rows: Sequence[tuple[str, Mapping[int, Optional[float]]]], ks: Sequence[int], metric: str,
                   cis: Optional[Sequence[Mapping[int, Optional[Sequence[float]]]]] = None) -> str:
    """One paper-style table: ``| Method | pass@1 | pass@2 | ... |`` with one row per (name, {k: value});
    with `cis` (one {k: [low, high]} per row) each cell also shows its confidence interval."""
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {METRICS}, got {metric!r}")
    if cis is not None and len(cis) != len(rows):
        raise ValueError(f"{len(cis)} confidence-interval rows for {len(rows)} rows")
    header = ["Method"] + [METRIC_LABELS[metric].format(k=k) for k in ks]
    lines = ["| " + " | ".join(header) + " |", "|:--" + "|--:" * len(ks) + "|"]
    for i, (name, values) in enumerate(rows):
        cells = [_fmt(values.get(k)) if cis is None else _fmt_ci(values.get(k), cis[i].get(k)) for k in ks]
        lines.append("| " + " | ".join([name.replace("|", "\\|")] + cells) + " |")
    return "\n".join(lines)


def _counts_note(name: str, means: Mapping[str, Any], ks: Sequence[int], num_problems: int) -> str:
    counts = means["num_problems"]
    short = {k: counts[k] for k in ks if counts[k] != num_problems}
    if not short:
        return ""
    detail = ", ".join(f"k={k}: {c}" for k, c in short.items())
    return (f"\n\n{name}: some problems have fewer valid samples than k after excluding unjudgeable samples; "
            f"means cover only problems with at least k valid samples ({detail} of {num_problems}).")


def report_markdown(result: EvalResult, name: str) -> str:
    """table.md for one run: header facts, pass@k and max@k tables, exclusion notes."""
    means, totals = result.means(), result.totals()
    cfg = result.config
    facts = [f"- problems: {totals['num_problems']}, samples per problem n = {result.n}",
             f"- valid samples: {totals['valid_samples']} of {totals['samples']} "
             f"(excluded: {totals['excluded_samples']}; statuses: {totals['status_counts']})"]
    for key in ("checkpoint", "dataset", "temperature", "top_p", "top_k", "max_new_tokens", "seed"):
        if key in cfg:
            facts.append(f"- {key}: {cfg[key]}")
    parts = [f"# Evaluation: {name}", "\n".join(facts)]
    ks = result.reported_ks
    for metric in METRICS:
        parts.append(f"## {METRIC_LABELS[metric].format(k='k')}\n\n"
                     + markdown_table([(name, means[metric])], ks, metric, [means[metric + "_ci"]]))
    parts.append(f"Reported for k <= n/2 = {max(ks)} (each estimate averages many k-subsets); "
                 "[low, high]: 95 % bootstrap interval over problems.")
    return "\n\n".join(parts) + _counts_note(name, means, ks, totals["num_problems"]) + "\n"


def plot_curves(runs: Sequence[tuple[str, Mapping[str, Any]]], ks: Sequence[int], path: str | os.PathLike,
                title: str = "") -> None:
    """PNG with pass@k (left) and max@k (right) against k on a log2 axis; one line per
    (name, means) run, shaded by its 95 % bootstrap interval (``<metric>_ci``) when available,
    else +-1 standard error."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, metric in zip(axes, METRICS):
        for name, means in runs:
            ys = np.array([np.nan if means[metric].get(k) is None else means[metric][k] for k in ks], dtype=float)
            se = np.array([np.nan if means.get(metric + "_stderr", {}).get(k) is None
                           else means[metric + "_stderr"][k] for k in ks], dtype=float)
            ci = means.get(metric + "_ci") or {}
            lo = np.array([np.nan if ci.get(k) is None else ci[k][0] for k in ks], dtype=float) if ci else ys - se
            hi = np.array([np.nan if ci.get(k) is None else ci[k][1] for k in ks], dtype=float) if ci else ys + se
            line, = ax.plot(ks, ys, marker="o", label=name)
            ax.fill_between(ks, lo, hi, color=line.get_color(), alpha=0.15, linewidth=0)
        ax.set_xscale("log", base=2)
        ax.set_xticks(list(ks), [str(k) for k in ks])
        ax.set(xlabel="k", ylabel=METRIC_LABELS[metric].format(k="k"), title=METRIC_LABELS[metric].format(k="k"))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(os.fspath(path), dpi=110)
    plt.close(fig)


# ----------------------------------------------------------------------------------------------
# Result directories
# ----------------------------------------------------------------------------------------------
def write_report(result: EvalResult, out_dir: str | os.PathLike, *, name: Optional[str] = None,
                 plot: bool = True) -> dict[str, str]:
    """Write per_problem.jsonl, summary.json, table.md (and curves.png) to `out_dir`.

    `name` labels the run in tables and plots (default: ``config["run_name"]`` or the directory
    name). Returns ``{"per_problem", "summary", "table", "curves"}`` paths.
    """
    out_dir = os.fspath(out_dir)
    os.makedirs(out_dir, exist_ok=True)
    name = name or result.config.get("run_name") or os.path.basename(os.path.abspath(out_dir))
    paths = {"per_problem": os.path.join(out_dir, PER_PROBLEM), "summary": os.path.join(out_dir, SUMMARY),
             "table": os.path.join(out_dir, TABLE)}
    write_results(result.problems, paths["per_problem"])
    summary = dict(result.summary(), name=name)
    atomic_write(paths["summary"], (json.dumps(summary, indent=2, ensure_ascii=False, allow_nan=False)
                                    + "\n").encode("utf-8"))
    atomic_write(paths["table"], report_markdown(result, name).encode("utf-8"))
    if plot:
        paths["curves"] = os.path.join(out_dir, CURVES)
        plot_curves([(name, result.means())], result.reported_ks, paths["curves"], title=name)
    return paths


def check_resumable(out_dir: str | os.PathLike, config: Mapping[str, Any], keys: Sequence[str]) -> bool:
    """May a run with `config` continue the results in `out_dir`?

    True when out_dir holds run_config.json whose entries for `keys` (the settings that decide the
    results) equal `config`'s; False when it holds no earlier run. ValueError naming the differing
    settings ``{key: (old, new)}``, or when per_problem.jsonl exists without run_config.json.
    """
    out_dir = os.fspath(out_dir)
    path = os.path.join(out_dir, RUN_CONFIG)
    if not os.path.exists(path):
        if os.path.exists(os.path.join(out_dir, PER_PROBLEM)):
            raise ValueError(f"{out_dir!r} has {PER_PROBLEM} but no {RUN_CONFIG}; use --overwrite or another --out_dir")
        return False
    with open(path, encoding="utf-8") as f:
        old = json.load(f)
    diff = {k: (old.get(k), config.get(k)) for k in keys if old.get(k) != config.get(k)}
    if diff:
        raise ValueError(f"{out_dir!r} holds a run with different settings (setting: (old, new)): {diff}; "
                         "use --overwrite to discard it or choose another --out_dir")
    return True


def read_report(out_dir: str | os.PathLike) -> tuple[EvalResult, str]:
    """Load a result directory written by `write_report` -> (EvalResult, run name)."""
    out_dir = os.fspath(out_dir)
    summary_path = os.path.join(out_dir, SUMMARY)
    if not os.path.isfile(summary_path):
        raise ValueError(f"{out_dir!r} is not a finished evaluation directory: {SUMMARY} is missing")
    with open(summary_path, encoding="utf-8") as f:
        summary = json.load(f)
    for key in ("n", "ks", "config"):
        if key not in summary:
            raise ValueError(f"{summary_path}: missing field {key!r}")
    results = read_results(os.path.join(out_dir, PER_PROBLEM))
    result = EvalResult(tuple(results), int(summary["n"]), tuple(summary["ks"]), dict(summary["config"]))
    return result, str(summary.get("name") or os.path.basename(os.path.abspath(out_dir)))
