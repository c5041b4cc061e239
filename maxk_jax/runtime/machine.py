"""The host a run or benchmark ran on, as the records name it (no heavy imports: the benchmarks use it
on accelerator images that lack the pipelines' dependencies)."""
from __future__ import annotations


def cpu_model() -> str:
    """The host CPU's model name (``/proc/cpuinfo``'s first "model name", else `platform.processor()`
    or the machine type), e.g. "AMD EPYC" or "Intel(R) Xeon(R) Processor"."""
    import platform

    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"
