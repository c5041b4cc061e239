"""Simulated CPU devices for the AOT planners (experiments/plan_*.py), set up before JAX starts.

XLA reads ``XLA_FLAGS`` once, when JAX initialises, so this module imports nothing but the standard
library and is called at the top of a script, before any JAX import::

    from maxk_jax.planning.simulated_devices import request_cpu_devices  # isort: skip
    request_cpu_devices(8)
    import jax  # noqa: E402
"""
from __future__ import annotations

import os

COUNT_FLAG = "xla_force_host_platform_device_count"
# LLVM optimisation level 0 for XLA:CPU: cheaper compiles, slower code (tiny programs compile far longer
# than they run); the HLO passes, fusion included, still run.
FAST_COMPILE_FLAG = "--xla_backend_optimization_level=0"


def request_cpu_devices(count: int, extra_xla_flags: str = "") -> None:
    """Ask XLA for `count` simulated host (CPU) devices unless ``XLA_FLAGS`` already names a count
    (the caller's choice wins), append `extra_xla_flags`, and default ``JAX_PLATFORMS`` to cpu.
    ValueError for a count < 1."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"count must be an int >= 1, got {count!r}")
    flags = os.environ.get("XLA_FLAGS", "")
    if COUNT_FLAG not in flags:
        flags = f"{flags} --{COUNT_FLAG}={count}"
    os.environ["XLA_FLAGS"] = f"{flags} {extra_xla_flags}".strip() if extra_xla_flags else flags
    os.environ.setdefault("JAX_PLATFORMS", "cpu")


def devices_flag(argv: list[str], default: int = 8) -> int:
    """The value of a ``--devices=N`` argument in `argv` (the last one; `default` when absent or not
    a positive int, which absl then reports) -- read before JAX starts, as it sizes the platform."""
    given = [a.split("=", 1)[1] for a in argv if a.startswith("--devices=")]
    return int(given[-1]) if given and given[-1].isdigit() and int(given[-1]) > 0 else default
