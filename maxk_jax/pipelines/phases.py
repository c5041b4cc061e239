"""Running a pipeline's phases: wall / CPU seconds per phase (`PhaseTimer`), process 0 first on
multi-host runs (`lead_first`), the JSON records the phases write (`write_json`), and the host CPU
they ran on (`cpu_model`, from `maxk_jax.runtime.machine`: the warm-up base and timings are reproducible per CPU
model only)."""
from __future__ import annotations

import json
import os
import resource
import time
from collections.abc import Callable
from typing import Any, TypeVar

import jax
import numpy as np
from absl import logging

from maxk_jax.runtime.machine import cpu_model  # noqa: F401  (re-exported: the phases' records name the CPU)

T = TypeVar("T")


class PhaseTimer:
    """Wall and process CPU seconds per named phase (CPU time includes all threads); ``phases``
    maps each name to ``{"wall_s", "cpu_s"}`` in the order the phases ran."""

    def __init__(self) -> None:
        self.phases: dict[str, dict[str, float]] = {}

    @staticmethod
    def _cpu() -> float:
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime

    def run(self, name: str, fn: Callable[[], T]) -> T:
        """Call fn() and record its wall / CPU seconds under `name` (a line on stdout before and
        after)."""
        logging.info("phase %s ...", name)
        print(f"== {name}", flush=True)
        w, c = time.perf_counter(), self._cpu()
        out = fn()
        self.phases[name] = {"wall_s": time.perf_counter() - w, "cpu_s": self._cpu() - c}
        print(f"== {name}: {self.phases[name]['wall_s']:.1f} s wall, {self.phases[name]['cpu_s']:.1f} s CPU",
              flush=True)
        return out


def lead_first(fn: Callable[[], T], name: str) -> T:
    """Multi-host: process 0 runs ``fn`` (e.g. builds a cache on shared storage), the others wait
    at the barrier `name` and then run it too (reusing that cache, or building their own without
    shared storage). One process: just ``fn()``."""
    if jax.process_count() == 1:
        return fn()
    from jax.experimental import multihost_utils

    out = fn() if jax.process_index() == 0 else None
    multihost_utils.sync_global_devices(name)
    return out if jax.process_index() == 0 else fn()


def _json_default(obj: Any) -> Any:
    if isinstance(obj, (np.integer, np.floating)):
        return obj.item()
    raise TypeError(f"{type(obj).__name__} is not JSON serialisable")


def write_json(path: str, obj: Any) -> None:
    """Write `obj` as indented JSON (numpy scalars as numbers; atomic rename)."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, default=_json_default)
        f.write("\n")
    os.replace(tmp, path)
