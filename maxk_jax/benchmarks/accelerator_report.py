"""The report of ``experiments/bench_accelerator.py``: the markdown table, the PNG, and writing both
with the JSON (after every part, so a run cut short keeps what it measured)."""
from __future__ import annotations

import json
import pathlib
from typing import Any


def markdown(res: dict[str, Any]) -> str:
    """The issue's table: decode (tok/s, ms/step, baseline, roofline), train (vs the PyTorch step)."""
    dev = res["device"]
    lines = [f"Device: {dev['kind']} ({dev['platform']}), jax {res['versions']['jax']}; host {res['cpu']}.", ""]
    c = res.get("ceilings")
    if c:
        lines += [f"Ceilings measured in this run: {c['hbm_bytes_per_s'] / 1e12:.2f} TB/s read+write (elementwise), "
                  f"{c['bf16_flops'] / 1e12:.0f} TFLOP/s (bf16 {c['matmul_size']}^3 matmul).", ""]
    lines += ["| work | maxk_jax | baseline on the same chip | roofline |", "|---|---:|---:|---:|"]
    hf = res.get("hf_generate")
    for d in res.get("decode", []):
        base = "—"
        if hf and (hf["prompts"], hf["n"], hf["prompt_len"], hf["new_tokens"], hf["preset"]) == (
                d["prompts"], d["n"], d["prompt_len"], d["new_tokens"], d["preset"]):
            base = f"transformers `generate` {hf['tok_per_s']:,.0f} tok/s"
        roof = (f"{d['roofline_tok_per_s']:,.0f} tok/s ({d['roofline_ms_per_step']:.2f} ms/step): "
                f"**{100 * d['frac_of_roofline']:.0f} %**" if "frac_of_roofline" in d else "—")
        several = len({r.get("decode_attention") for r in res["decode"]}) > 1
        attention = f", {d['decode_attention']} attention" if several else ""
        lines.append(f"| {d['preset']} decode, {d['prompts']} x n = {d['n']}, {d['prompt_len']} / {d['new_tokens']}{attention} | "
                     f"{d['tok_per_s']:,.0f} tok/s ({d['ms_per_step']:.2f} ms/step; prefill {d['prefill_s']:.3f} s) | "
                     f"{base} | {roof} |")
    tt = res.get("torch_train")
    for tr in res.get("train", []):
        ratio = f" ({tr['tokens_per_s'] / tt['tokens_per_s']:.2f}x)" if tt else ""
        peak = f", peak {tr['peak_mem_gb']:.0f} GB" if tr.get("peak_mem_gb") else ""
        base = (f"PyTorch + transformers {tt['tokens_per_s']:,.0f} tok/s" + (
            f", peak {tt['peak_mem_gb']:.0f} GB" if tt.get("peak_mem_gb") else "")) if tt else "—"
        mfu = (f"{tr['model_tflops']:.0f} TFLOP/s = {100 * tr['model_tflops'] * 1e12 / c['bf16_flops']:.0f} % of "
               "the matmul ceiling") if c else f"{tr['model_tflops']:.2f} TFLOP/s"
        remat = f", remat_policy={tr['remat_policy']}" if tr.get("remat_policy", "nothing") != "nothing" else ""
        lines.append(f"| {res['train_preset']} RL train step, maxk_offpolicy, {res['train_shape']}, "
                     f"attention={tr['attention']}{remat} | {tr['tokens_per_s']:,.0f} tok/s{ratio}{peak} | {base} | "
                     f"{mfu} |")
    notes = [f"Skipped: {s}" for s in res.get("skipped", [])] + [f"Failed: {e}" for e in res.get("errors", [])]
    lines += [""] + notes if notes else []
    return "\n".join(lines) + "\n"


def plot(res: dict[str, Any], path: pathlib.Path) -> None:
    """Decode: fraction of the roofline per case; train: tokens/s of each side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8))
    dec = [d for d in res.get("decode", []) if "frac_of_roofline" in d]
    a.barh([f"{d['preset'].split('-')[-1]} {d['prompts']}x{d['n']} {d['prompt_len']}/{d['new_tokens']} "
            f"{d.get('decode_attention', 'xla')}" for d in dec],
           [100 * d["frac_of_roofline"] for d in dec], color="C0")
    a.set_xlabel("% of the memory roofline (measured bandwidth)")
    a.set_title("decode", fontsize=9)
    names = [f"maxk_jax ({t['attention']}, remat {t.get('remat_policy', 'nothing')})" for t in res.get("train", [])]
    vals = [t["tokens_per_s"] for t in res.get("train", [])]
    if res.get("torch_train"):
        names.append("PyTorch + transformers")
        vals.append(res["torch_train"]["tokens_per_s"])
    b.barh(names, vals, color=["C0"] * (len(vals) - bool(res.get("torch_train"))) + ["C1"] * bool(
        res.get("torch_train")))
    b.set_xlabel("train tokens / s")
    b.set_title(f"RL train step, {res.get('train_shape', '')}", fontsize=9)
    fig.suptitle(res["device"]["kind"], fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write(res: dict[str, Any], out: pathlib.Path, png: bool = False) -> str:
    """Write the results so far (``bench_accelerator.json`` and ``.md``; the PNG when ``png``, if
    matplotlib is importable); return the markdown table."""
    import importlib.util

    table = markdown(res)
    (out / "bench_accelerator.json").write_text(json.dumps(res, indent=1))
    (out / "bench_accelerator.md").write_text(table)
    if png:
        if importlib.util.find_spec("matplotlib") is None:
            print("bench_accelerator.png: not drawn (matplotlib is not installed); the JSON and the table hold "
                  "every figure")
        else:
            plot(res, out / "bench_accelerator.png")
    return table
