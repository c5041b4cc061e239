"""TPU plans from the TPU compiler without a TPU: the RL step and the decode loop for a named slice.

The programs :mod:`maxk_jax.planning.memory_plan` and :mod:`maxk_jax.planning.sample_plan` compile on simulated CPU
devices, compiled instead by XLA:TPU for the compile-only devices of a slice
(:mod:`maxk_jax.planning.targets.tpu`: ``v5e-16``, ``v6e-8``, ``v4-8``, ``v5p-8``, ...). Per chip: the
compiler's ``memory_analysis()`` against the chip's HBM and the project's 85 % rule; a program
over HBM fails to compile (``RESOURCE_EXHAUSTED``) as it would on the chip, and is reported as
such. FLOPs: ``cost_analysis()`` on XLA:TPU counts every while body once, so matmul FLOPs come from
the HLO with each loop's trip count (:func:`maxk_jax.planning.hlo_cost.matmul_flops`); the time floor is
those FLOPs at the chip's bf16 peak. The decode loop's HBM bytes per step come from the TPU HLO's
memory spaces (:func:`maxk_jax.planning.hlo_cost.tpu_step_traffic`) against the ideal
(:func:`maxk_jax.planning.gpu_plan.ideal_bytes`).

Used by ``experiments/plan_train.py --target=<slice>`` and ``experiments/plan_sample.py --target=<slice>``.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from maxk_jax.planning import hlo_cost, memory_plan
from maxk_jax.planning.plan_report import GIB
from maxk_jax.models import qwen2
from maxk_jax.planning.targets import tpu

#: The project's rule: a plan fits when its peak is at most this share of the chip's memory.
BUDGET = 0.85


def layout_devices(devices: list[Any], layout: str) -> list[Any]:
    """The slice's ``devices`` ordered for ``layout``'s (data, fsdp, tensor) mesh."""
    sizes = memory_plan.layout_sizes(layout, len(devices))
    return tpu.ordered(devices, (sizes["data"], sizes["fsdp"], sizes["tensor"]))


def out_of_memory(err: Exception) -> str | None:
    """The compiler's one-line RESOURCE_EXHAUSTED message of ``err``, or None for any other error."""
    text = str(err)
    if "RESOURCE_EXHAUSTED" not in text:
        return None
    return next((line.strip() for line in text.splitlines() if "RESOURCE_EXHAUSTED" in line), text)[:300]


def verdict(peak: int, slice_: tpu.TpuSlice) -> dict[str, Any]:
    """``{"peak", "pct_of_hbm", "fits_hbm", "fits_85pct"}`` of ``peak`` bytes per chip on ``slice_``."""
    return {"peak": int(peak), "pct_of_hbm": round(100 * peak / slice_.hbm_bytes, 1),
            "fits_hbm": peak <= slice_.hbm_bytes, "fits_85pct": peak <= BUDGET * slice_.hbm_bytes}


def plan_train(config: qwen2.Qwen2Config, cfg: Any, slice_: tpu.TpuSlice, devices: list[Any], layouts: list[str], *,
               sequences: int, prompt_len: int, completion_len: int, mu_dtype: str, ref_dtype: str, plan_ref: bool,
               phases: Callable[[list[dict]], tuple[dict[str, int], dict]] | None) -> dict[str, Any]:
    """Each layout's train step (:func:`maxk_jax.planning.memory_plan.plan_train_step`, the first layout's
    reference pass when ``plan_ref``) compiled for ``slice_`` -> ``{"slice", "rows", "out_of_memory":
    {layout: message}, "step": {"phases", "rollout", verdict, "matmul_flops", "time_floor_s"} or
    None}``; ``phases(rows)`` composes the whole step (``experiments/plan_train.py``'s
    ``step_phases``: it compiles the rollout decode too)."""
    rows: list[dict] = []
    oom: dict[str, str] = {}
    for i, layout in enumerate(layouts):
        try:
            got = memory_plan.plan_train_step(
                config, cfg, layout, sequences=sequences, prompt_len=prompt_len, completion_len=completion_len,
                dump_dir="", breakdown=0, ref=plan_ref and i == 0, mu_dtype=mu_dtype, ref_dtype=ref_dtype,
                devices=layout_devices(devices, layout))
        except Exception as err:  # noqa: BLE001  (over HBM is a result; anything else is raised)
            if out_of_memory(err) is None:
                raise
            oom[layout] = out_of_memory(err)
            continue
        for r in got:
            r["matmul_flops"] = hlo_cost.matmul_flops(r.pop("hlo"))["flops"]   # per chip, loops counted
            r.update(verdict(r["total"], slice_), time_floor_s=slice_.time_floor_s(r["matmul_flops"]))
        rows += got
    step = None
    if phases is not None and rows and rows[0]["layout"] == layouts[0]:
        try:
            parts, rollout = phases(rows)
        except Exception as err:  # noqa: BLE001
            if out_of_memory(err) is None:
                raise
            oom[f"{layouts[0]} rollout decode"] = out_of_memory(err)
        else:
            ref = next((r for r in rows if r["layout"].endswith("ref-logp pass")), None)
            flops = rows[0]["matmul_flops"] + (ref["matmul_flops"] if ref else 0) + rollout["matmul_flops"]
            step = {"phases": parts, "rollout": {k: v for k, v in rollout.items() if k != "collectives"},
                    **verdict(max(parts.values()), slice_), "matmul_flops": flops,
                    "time_floor_s": slice_.time_floor_s(flops)}
    return {"slice": {"name": slice_.name, "topology": slice_.topology, "chips": slice_.chips,
                      "kind": slice_.chip.kind, "hbm_gib": slice_.chip.hbm_gib, "bf16_flops": slice_.chip.bf16_flops},
            "rows": rows, "out_of_memory": oom, "step": step}


def _fits(r: dict[str, Any]) -> str:
    return "yes" if r["fits_85pct"] else "HBM yes, 85 % rule no" if r["fits_hbm"] else "no"


def train_markdown(plan: dict[str, Any], header: str) -> str:
    """Markdown of :func:`plan_train`'s result under ``header``."""
    hbm = plan["slice"]["hbm_gib"]
    out = [header, "", f"| program | args GiB | outputs GiB | temps GiB | total GiB | % of {hbm:g} GiB | fits (85 %) "
           "| matmul FLOPs / chip | floor at bf16 peak s | compile s |", "|---|---:|---:|---:|---:|---:|---|---:|---:|---:|"]
    for r in plan["rows"]:
        out.append(f"| {r['layout']} | {r['args'] / GIB:.2f} | {r['outputs'] / GIB:.2f} | {r['temps'] / GIB:.2f} | "
                   f"{r['total'] / GIB:.2f} | {r['pct_of_hbm']} | {_fits(r)} | {r['matmul_flops']:.4g} | "
                   f"{r['time_floor_s']:.3g} | {r['compile_s']} |")
    for layout, msg in plan["out_of_memory"].items():
        out.append(f"| {layout} | | | | | | **no: does not compile** ({msg}) | | | |")
    step = plan["step"]
    if step:
        out += ["", f"**Whole RL step per chip, {plan['rows'][0]['layout']}** (rollout copy "
                f"{step['rollout']['decode_mesh']}; every figure the TPU compiler's):", "",
                "| phase | GiB per chip |", "|---|---:|"]
        out += [f"| {name} | {v / GIB:.2f} |" for name, v in step["phases"].items()]
        out += [f"| **peak** | **{step['peak'] / GIB:.2f}** ({step['pct_of_hbm']} % of {hbm:g} GiB: {_fits(step)}) |",
                "", f"Matmul FLOPs per chip per RL step (train step + reference pass + rollout decode at its "
                f"new-token bound): {step['matmul_flops']:.4g}; at the "
                f"{plan['slice']['kind']}'s bf16 peak ({plan['slice']['bf16_flops'] / 1e12:g} TFLOP/s) at least "
                f"**{step['time_floor_s']:.3g} s** per step."]
    return "\n".join(out) + "\n"


def decode_row(config: qwen2.Qwen2Config, slice_: tpu.TpuSlice, devices: list[Any], layout: str, *, prompts: int,
               n: int, prompt_len: int, new_tokens: int) -> dict[str, Any]:
    """The sampler's decode loop from the rollout copy (the rollout mesh over ``layout``'s devices)
    compiled by XLA:TPU -> :func:`maxk_jax.planning.sample_plan.plan_decode`'s row plus :func:`verdict`,
    ``over_weights_kv`` (total / (weights + KV cache) per chip), ``ideal_bytes`` (per chip and step:
    its weights + its share of :func:`maxk_jax.planning.gpu_plan.ideal_bytes`'s KV) and ``hbm_over_ideal``;
    or ``{"layout", "out_of_memory": message}`` when the program does not fit."""
    from maxk_jax.planning import gpu_plan, sample_plan

    try:
        r = sample_plan.plan_decode(config, layout, "rollout", prompts=prompts, n=n, prompt_len=prompt_len,
                                    new_tokens=new_tokens, devices=layout_devices(devices, layout))
    except Exception as err:  # noqa: BLE001  (over HBM is a result)
        if out_of_memory(err) is None:
            raise
        return {"layout": layout, "out_of_memory": out_of_memory(err)}
    r.update(verdict(r["total"], slice_))
    r["over_weights_kv"] = round(r["total"] / (r["weights"] + r["kv_cache"]), 3)
    ideal = r["weights"] + gpu_plan.ideal_bytes(config, prompts, n, prompt_len, new_tokens)["kv"] // len(devices)
    r["ideal_bytes"] = ideal
    r["hbm_over_ideal"] = round(r["tpu_step"]["hbm_bytes"] / ideal, 3)
    return r


def decode_markdown(rows: list[dict[str, Any]], slice_: tpu.TpuSlice, header: str) -> str:
    """Markdown of :func:`decode_row` rows (``preset`` set by the caller) under ``header``."""
    out = [header, "", f"| preset | decode mesh | weights GiB | KV GiB | temps GiB | total GiB | % of "
           f"{slice_.chip.hbm_gib:g} GiB | total / (weights + KV) | HBM bytes / step | ideal | vs ideal | "
           "ops / step | collective B / token | compile s |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
           "---:|---:|---:|"]
    for r in rows:
        if "out_of_memory" in r:
            out.append(f"| {r['preset']} | {r['layout']} | | | | | | **does not compile**: {r['out_of_memory']} "
                       "| | | | | | |")
            continue
        s = r["tpu_step"]
        out.append(f"| {r['preset']} | {r['decode_mesh']} | {r['weights'] / GIB:.2f} | {r['kv_cache'] / GIB:.2f} | "
                   f"{r['temps'] / GIB:.2f} | {r['total'] / GIB:.2f} | {r['pct_of_hbm']} | {r['over_weights_kv']} | "
                   f"{s['hbm_bytes'] / 1e9:.3f} GB | {r['ideal_bytes'] / 1e9:.3f} GB | **{r['hbm_over_ideal']}x** | "
                   f"{s['ops']:,} | {r['collective_bytes_per_token']:,} | {r['compile_s']} |")
    return "\n".join(out) + "\n"
