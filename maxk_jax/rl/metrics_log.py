"""Metric logging of the RL loop: JSONL (always), TensorBoard (tensorboardX), W&B (optional).

    log = MetricsLogger(out_dir, tensorboard=True, wandb_project=None, run_config=cfg_dict,
                        resume_step=None)
    log.write(step, {"reward/mean": 0.3, "time/sample_s": 1.2})
    log.close()

``metrics.jsonl`` holds one JSON object per RL step: ``{"step": s, <name>: value, ...}``; NaN /
inf values are written as null (strict JSON).  Resuming from a checkpoint of step s
(``resume_step=s``) first drops every line with step > s (the killed run may have logged steps
after its last checkpoint), so the file of a resumed run equals that of an uninterrupted one
up to the timing entries (``time/*``, ``perf/*``).  TensorBoard event files are written under
``<out_dir>/tensorboard`` with ``purge_step = s + 1`` on resume.  W&B is used only when a
project is given; ``wandb`` is an optional dependency (ImportError with install advice).
"""
from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from typing import Any

METRICS_FILE = "metrics.jsonl"
NONDETERMINISTIC_PREFIXES = ("time/", "perf/")


def _clean(value: Any) -> Any:
    """float/int scalars -> JSON-safe numbers (NaN/inf -> None)."""
    value = float(value)
    return value if math.isfinite(value) else None


def read_metrics(path: str | os.PathLike) -> list[dict[str, Any]]:
    """All complete records of a metrics.jsonl (a torn last line is ignored)."""
    records = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.endswith("\n"):
                break
            records.append(json.loads(line))
    return records


def deterministic(record: Mapping[str, Any]) -> dict[str, Any]:
    """A record without its timing / throughput entries (for run-to-run comparisons)."""
    return {k: v for k, v in record.items() if not k.startswith(NONDETERMINISTIC_PREFIXES)}


class MetricsLogger:
    """Writes scalar metrics per RL step to JSONL, TensorBoard and (optionally) W&B."""

    def __init__(self, out_dir: str | os.PathLike, *, tensorboard: bool = True,
                 wandb_project: str | None = None, run_name: str | None = None,
                 run_config: Mapping[str, Any] | None = None, resume_step: int | None = None) -> None:
        self.out_dir = os.fspath(out_dir)
        os.makedirs(self.out_dir, exist_ok=True)
        self.path = os.path.join(self.out_dir, METRICS_FILE)
        if resume_step is not None and os.path.exists(self.path):
            kept = [r for r in read_metrics(self.path) if r["step"] <= resume_step]
            tmp = self.path + ".tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                f.writelines(json.dumps(r, allow_nan=False) + "\n" for r in kept)
            os.replace(tmp, self.path)
        elif resume_step is None and os.path.exists(self.path):
            os.remove(self.path)  # a fresh run owns the directory
        self._file = open(self.path, "a", encoding="utf-8")
        self._tb = None
        if tensorboard:
            from tensorboardX import SummaryWriter

            self._tb = SummaryWriter(os.path.join(self.out_dir, "tensorboard"),
                                     purge_step=None if resume_step is None else resume_step + 1)
        self._wandb = None
        if wandb_project:
            try:
                import wandb
            except ImportError as err:
                raise ImportError("log.wandb_project is set but the optional package `wandb` is not "
                                  "installed (pip install wandb), or leave wandb_project empty") from err
            self._wandb = wandb.init(project=wandb_project, name=run_name, config=dict(run_config or {}),
                                     resume="allow", dir=self.out_dir)

    def write(self, step: int, metrics: Mapping[str, Any]) -> dict[str, Any]:
        """Log scalar ``metrics`` for RL ``step``; returns the JSON record written."""
        record = {"step": int(step), **{k: _clean(v) for k, v in sorted(metrics.items())}}
        self._file.write(json.dumps(record, allow_nan=False) + "\n")
        self._file.flush()
        if self._tb is not None:
            for key, value in record.items():
                if key != "step" and value is not None:
                    self._tb.add_scalar(key, value, step)
        if self._wandb is not None:
            self._wandb.log({k: v for k, v in record.items() if k != "step"}, step=int(step))
        return record

    def close(self) -> None:
        """Flush and close every sink."""
        self._file.close()
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()
