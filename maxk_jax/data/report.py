"""`LoadReport`: what a dataset loader read, kept, skipped (per reason) and noted.

Every upstream row is accounted for: ``n_rows == n_kept + sum(skipped.values())`` (checked by
`LoadReport.finalize`). `n_returned` is the number of problems handed back after an optional
train/test split of the kept rows. Nothing is dropped without a counted reason.
"""
from __future__ import annotations

import collections
import dataclasses
import logging
from typing import Any

_LOG = logging.getLogger(__name__)
_MAX_EXAMPLES = 5


@dataclasses.dataclass
class LoadReport:
    """Counts for one `load_dataset` call.

    Attributes:
      dataset: loader name (``"code_contests"``...).
      source: hub name or local path read.
      split: requested split.
      n_rows: upstream rows read.
      n_kept: rows that became problems (before any train/test split).
      n_returned: problems returned (after the split).
      skipped: reason -> number of rows dropped for that reason (first failing check wins).
      info: other counters that do not drop rows (e.g. ``tests_capped``, ``assert_fallback``).
      notes: human-readable remarks (e.g. a filter that could not be applied).
      examples: reason -> up to 5 upstream row ids, to find the rows again.
      params: the loader options that shaped the result (version, seed, test size, ...).
    """

    dataset: str
    source: str
    split: str
    n_rows: int = 0
    n_kept: int = 0
    n_returned: int = 0
    skipped: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    info: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    notes: list[str] = dataclasses.field(default_factory=list)
    examples: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    params: dict[str, Any] = dataclasses.field(default_factory=dict)

    def skip(self, reason: str, row_id: Any = None) -> None:
        """Count one dropped row under `reason` (remember its id as an example)."""
        self.skipped[reason] += 1
        if row_id is not None:
            ex = self.examples.setdefault(reason, [])
            if len(ex) < _MAX_EXAMPLES:
                ex.append(str(row_id))

    def keep_new(self, problem_id: str, seen: set[str], row_id: Any = None) -> bool:
        """True the first time `problem_id` comes (it joins `seen`); False for a repeat, which is
        skipped as ``duplicate_id`` under `row_id`."""
        if problem_id in seen:
            self.skip("duplicate_id", row_id)
            return False
        seen.add(problem_id)
        return True

    def count(self, key: str, n: int = 1) -> None:
        """Increment an informational counter (the row is still kept)."""
        self.info[key] += n

    def note(self, message: str) -> None:
        """Record (and log) a remark."""
        self.notes.append(message)
        _LOG.warning("%s: %s", self.dataset, message)

    @property
    def n_skipped(self) -> int:
        """Total rows dropped."""
        return sum(self.skipped.values())

    def finalize(self, n_returned: int) -> LoadReport:
        """Set `n_returned`, check the row accounting, log the summary; returns self."""
        self.n_returned = n_returned
        if self.n_rows != self.n_kept + self.n_skipped:
            raise RuntimeError(f"{self.dataset}: row accounting broken: {self.n_rows} rows read != "
                               f"{self.n_kept} kept + {self.n_skipped} skipped")
        self.log()
        return self

    def summary(self) -> str:
        """One multi-line human-readable summary."""
        lines = [f"{self.dataset} [{self.source}, split={self.split}]: read {self.n_rows} rows, "
                 f"kept {self.n_kept}, returned {self.n_returned}, skipped {self.n_skipped}"]
        if self.params:
            lines.append("  params: " + ", ".join(f"{k}={v!r}" for k, v in self.params.items()))
        for reason, n in sorted(self.skipped.items()):
            ex = self.examples.get(reason)
            lines.append(f"  skipped {reason}: {n}" + (f" (e.g. {', '.join(ex[:3])})" if ex else ""))
        for key, n in sorted(self.info.items()):
            lines.append(f"  {key}: {n}")
        for note in self.notes:
            lines.append(f"  note: {note}")
        return "\n".join(lines)

    def log(self, logger: logging.Logger | None = None) -> None:
        """Log `summary()` at INFO level."""
        (logger or _LOG).info("%s", self.summary())

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form."""
        return {"dataset": self.dataset, "source": self.source, "split": self.split,
                "n_rows": self.n_rows, "n_kept": self.n_kept, "n_returned": self.n_returned,
                "skipped": dict(self.skipped), "info": dict(self.info), "notes": list(self.notes),
                "examples": {k: list(v) for k, v in self.examples.items()}, "params": dict(self.params)}
