"""XLA flags of the test processes and of the programs they launch (``python -m experiments.*``).

The tests' programs are tiny models on a 2-core CPU, so XLA compiling them costs far more than running
them: LLVM optimisation level 0 (``maxk_jax.planning.simulated_devices.FAST_COMPILE_FLAG``, which ``experiments.bandit
--fast_compile`` sets too) cut the default run from 1,036 s to 791 s, every test passing. The HLO passes (fusion
included) still run; only the CPU code generation changes, so the code is slower and float results can
differ from an optimised build in the last bits. Hence a test process and the runs it launches use the
same flags (a multi-process comparison once tripped over a checkpoint built at the other level), and a
test that checks measured speed (the benchmark's smoke run) launches it with ``fast_compile=False``.
"""
from __future__ import annotations

from maxk_jax.planning.simulated_devices import COUNT_FLAG, FAST_COMPILE_FLAG   # no jax import


def xla_flags(devices: int = 8, fast_compile: bool = True) -> str:
    """``XLA_FLAGS`` for a test process: ``devices`` simulated CPU devices, ``FAST_COMPILE_FLAG`` when
    ``fast_compile``."""
    flags = f"--{COUNT_FLAG}={devices}"
    return f"{flags} {FAST_COMPILE_FLAG}" if fast_compile else flags
