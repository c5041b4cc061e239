"""Where the time goes: a ``jax.profiler`` perfetto trace summed per kernel and per decode step.

``jax.profiler.trace(dir, create_perfetto_trace=True)`` writes a Chrome-trace JSON
(``perfetto_trace.json.gz``) whose complete events (``"ph": "X"``) carry ``args.hlo_module`` (the
XLA program, e.g. ``jit_decode_loop``) and ``args.hlo_op``. On a GPU the kernels are the events of
the process named ``/device:GPU:N``; on CPU, the host's. :func:`kernel_breakdown` sums one
program's events by kernel name and divides by the number of loop iterations it ran (decode steps),
the breakdown ``bench_accelerator --profile_dir`` stores beside its timings.
"""
from __future__ import annotations

import collections
import gzip
import json
import pathlib
import re
from typing import Any


def load_events(path: str | pathlib.Path) -> list[dict[str, Any]]:
    """The complete (``ph == "X"``) events of a Chrome/perfetto trace (``.json`` or ``.json.gz``) on
    the device processes (``/device:...``), or on every process when the trace has none (CPU)."""
    path = pathlib.Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        data = json.load(f)
    events = data["traceEvents"] if isinstance(data, dict) else data
    names = {e["pid"]: e.get("args", {}).get("name", "") for e in events
             if e.get("ph") == "M" and e.get("name") == "process_name"}
    devices = {pid for pid, name in names.items() if name.startswith("/device:")}
    return [e for e in events if e.get("ph") == "X" and (not devices or e.get("pid") in devices)]


def kernel_class(name: str) -> str:
    """A kernel's name without its instance number: ``gemm_fusion_dot_15`` / ``loop_add_fusion.3`` ->
    ``gemm_fusion_dot`` / ``loop_add_fusion`` (XLA numbers fusions of one kind in a program)."""
    return re.sub(r"[._]\d+$", "", name)


def kernel_breakdown(events: list[dict[str, Any]], module: str, steps: int, top: int = 15) -> dict[str, Any]:
    """Per-step time of ``module``'s events (microseconds; ``steps``: loop iterations the trace holds).

    Returns ``events_per_step``, ``busy_us_per_step`` (summed durations), ``span_us_per_step``
    (first start to last end / steps; on a GPU busy < span means idle gaps; on CPU host events nest,
    a loop's event holding its body's, so busy can exceed span), and ``top_kernels`` /
    ``top_classes``: the ``top`` largest ``{"name", "us_per_step", "per_step", "median_us"}`` by
    summed time, per exact kernel name and per :func:`kernel_class`.
    """
    if steps < 1:
        raise ValueError(f"steps={steps} must be >= 1")
    mine = [e for e in events if e.get("args", {}).get("hlo_module") == module]
    if not mine:
        known = sorted({str(e.get("args", {}).get("hlo_module")) for e in events})
        raise ValueError(f"no events of module {module!r} in the trace; modules there: {known}")
    start = min(float(e["ts"]) for e in mine)
    end = max(float(e["ts"]) + float(e.get("dur", 0.0)) for e in mine)

    def table(key) -> list[dict[str, Any]]:
        durations: dict[str, list[float]] = collections.defaultdict(list)
        for e in mine:
            durations[key(e["name"])].append(float(e.get("dur", 0.0)))
        rows = [{"name": k, "us_per_step": sum(v) / steps, "per_step": len(v) / steps,
                 "median_us": sorted(v)[len(v) // 2]} for k, v in durations.items()]
        return sorted(rows, key=lambda r: -r["us_per_step"])[:top]

    return {"module": module, "steps": steps, "events_per_step": len(mine) / steps,
            "busy_us_per_step": sum(float(e.get("dur", 0.0)) for e in mine) / steps,
            "span_us_per_step": (end - start) / steps,
            "top_kernels": table(lambda n: n), "top_classes": table(kernel_class)}


def breakdown_lines(summary: dict[str, Any], rows: int = 10) -> list[str]:
    """A printable summary of :func:`kernel_breakdown` (per-step figures, the largest classes), with the
    idle time an ``unprofiled_us_per_step`` entry (the same loop timed without the profiler) implies:
    the GPU idles ~(unprofiled step - traced kernel time) per step; the rest of the traced span is the
    profiler's own (it slows the host's graph launches)."""
    s = summary
    lines = [f"{s['module']}: {s['events_per_step']:.0f} kernels per step, {s['busy_us_per_step']:.0f} us busy of "
             f"{s['span_us_per_step']:.0f} us per step ({s['steps']} steps)"]
    if s.get("unprofiled_us_per_step"):
        u = s["unprofiled_us_per_step"]
        lines.append(f"  unprofiled, the same decode takes {u:.0f} us per step: ~{max(u - s['busy_us_per_step'], 0):.0f} "
                     f"us of it idle; {s['span_us_per_step'] - u:+.0f} us per step of the traced span is the profiler's")
    for r in s["top_classes"][:rows]:
        lines.append(f"  {r['us_per_step']:9.1f} us/step  x{r['per_step']:6.1f}  median {r['median_us']:7.2f} us  "
                     f"{r['name']}")
    return lines
