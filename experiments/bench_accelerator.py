"""One accelerator (GPU or TPU), one command: decode and RL-train speed against the chip's own ceilings.

    python -m experiments.bench_accelerator                 # the full table (~6 min on an H100)
    python -m experiments.bench_accelerator --smoke         # tiny shapes, any backend (CPU: ~1 min)
    python -m experiments.bench_accelerator --parts=ceilings,decode --presets=qwen2.5-coder-1.5b

Random weights at the Qwen2.5-Coder presets (nothing is downloaded); every figure is measured in
this run on ``jax.devices()[0]``:

* ``ceilings``: read+write bandwidth of an elementwise pass over ``--bandwidth_mib`` of float32
  (``2 x bytes / s``) and the FLOP/s of a ``--matmul_size``-cubed bf16 matmul (median of 10).
* ``decode``: ``sampling.generate`` (bf16 params and compute, no stop token: every sample has
  ``new_tokens`` tokens) at each preset and case (``--cases``, default the RL rollout 16 prompts x
  n = 8 with 512-token prompts, the paper's evaluation 1 x 128 with a 1,024-token prompt, and the RL
  batch sizes 16 x 32 and 4 x 256 with 512-token prompts, all 256 new tokens: ``maxk_jax.benchmarks.decode.DEFAULT_CASES``): tok/s of the whole call (median of ``--repeats`` after a compiling call),
  prefill alone, ms per decode step, and the roofline: (bf16 weight bytes + the KV bytes a step
  must read: each prompt once, each row's own tokens at the average step;
  ``maxk_jax.planning.gpu_plan.ideal_bytes``) / the measured bandwidth; ``frac_of_roofline`` = roofline
  step time / measured step time. Per ``--decode_attention`` (``auto``, the default: ``pallas`` on
  GPU, ``xla`` elsewhere, rows named by what ran; ``xla``, and/or ``pallas``: the Pallas Triton
  decode-attention kernels of ``maxk_jax.models.decode_attention``; ``pallas:S`` with S splits of
  the prompt block, ``Qwen2Config.decode_attention_splits``). The timing is ``maxk_jax.benchmarks.decode``'s.
* ``hf_generate`` (needs torch + a CUDA device, or ``--smoke``; this and ``torch_train`` live in
  ``experiments/torch_baselines.py``): transformers ``generate`` of the
  first preset's first case (bf16, sdpa, ``num_return_sequences=n``, exactly ``new_tokens`` new
  tokens), median of 2 after a first call.
* ``train``: ``rl.training.make_train_step`` (maxk_offpolicy, k = 4, 16 prompts x n = 8, 512 + 256
  tokens, 4 micro-batches, float32 params + bf16 compute, remat, Adam) per ``--train_attention``
  and ``--train_remat`` (the remat policy: ``nothing`` recomputes each layer, ``dots`` keeps the
  projections' outputs, ``auto``, the default, is dots on GPU; the dots step runs first)
  (``auto`` = cuDNN flash attention on GPU); tokens/s = B x S / step time, model FLOP/s = 3 x
  forward matmul FLOPs (projections on B x S tokens, attention on the S x S square, LM head on
  the B x T completion positions), peak device memory (JAX's counter: the process's peak so far).
* ``torch_train`` (needs torch): the same loss form (is_weighted: -sg(c) logp on the trust-region
  tokens, sequence aggregation; c = the group z-scored rewards) in PyTorch + transformers: float32
  params, bf16 autocast, gradient checkpointing, sdpa, ``logits_to_keep``, Adam, the same batch
  and micro-batches.

* ``--profile_dir`` (optional, after the decode): a ``jax.profiler`` trace of a short ``generate``
  of the first case per decode attention, and its per-step kernel breakdown
  (``maxk_jax.planning.trace_summary``: kernels per step, busy time, the largest kernel classes) in the JSON;
  with ``--profile_tokens`` equal to the case's new tokens, also the decode part's unprofiled step
  beside it (the profiler slows the host's graph launches: only the unprofiled step says what is idle).

Order: the torch baselines first (their memory is handed back), then the ceilings, the train step
and the decode; ``XLA_PYTHON_CLIENT_PREALLOCATE=false`` unless set (JAX and torch share the GPU).
Writes ``bench_accelerator.{json,md}`` to ``--results_dir`` after every part and decode case (a run
cut short keeps what it measured), the PNG at the end, and prints the markdown table;
``--time_budget_s`` starts nothing new once spent and lists what it skipped.
Needs jax, flax, optax, chex, numpy and absl-py (not ``datasets`` or ``ml_collections``: GPU images
that lack them run it from a checkout) and, for the baselines, torch + transformers.
"""
from __future__ import annotations

import os
import pathlib
import time
from typing import Any, Callable

import numpy as np
from absl import app, flags

from maxk_jax.benchmarks import torch_baselines
from maxk_jax.benchmarks.accelerator_report import write
from maxk_jax.benchmarks.decode import (DEFAULT_CASES, attention_variant, case_text, ceilings, decode_case,
                                        fused_draw, parse_case, smoke_config, variant_config)
from maxk_jax.benchmarks.rollout_batch import train_batch
from maxk_jax.benchmarks.timing import median_time

FLAGS = flags.FLAGS
PARTS = ("ceilings", "decode", "hf_generate", "train", "torch_train")


def define_flags() -> None:
    """Define the command-line flags (called by ``__main__`` only, so tests can import this module)."""
    flags.DEFINE_bool("smoke", False, "Tiny model and shapes (a CPU test of the whole pipeline).")
    flags.DEFINE_list("parts", list(PARTS), f"Parts to run, of {PARTS}.")
    flags.DEFINE_list("presets", ["qwen2.5-coder-1.5b", "qwen2.5-coder-7b"], "Decode presets (--smoke: a tiny model).")
    flags.DEFINE_list("cases", list(DEFAULT_CASES),
                      "Decode cases PROMPTSxN:PROMPT_LEN/NEW_TOKENS (--smoke: 2x2:32/8,1x4:64/8).")
    flags.DEFINE_list("train_remat", ["auto"], "Remat policies of the train step (Qwen2Config.remat_policy: "
                      "auto (the default: dots on GPU, nothing elsewhere), nothing, dots), each timed with every "
                      "--train_attention.")
    flags.DEFINE_list("train_attention", ["auto"], "Attention implementations of the train step (auto, chunked, "
                      "dot_product, xla).")
    flags.DEFINE_list("decode_attention", ["auto"], "Decode attentions timed per case (Qwen2Config.decode_attention): "
                      "auto (the default: pallas on GPU, xla elsewhere), xla and/or pallas (the Pallas Triton "
                      "kernels; interpreted off GPU). xla,pallas compares them; pallas:S sets the prompt "
                      "kernel's splits (Qwen2Config.decode_attention_splits; pallas = "
                      "chosen per shape); a +draw suffix (pallas+draw) also runs the LM head and the draw as "
                      "one Pallas kernel (Qwen2Config.decode_draw=pallas).")
    flags.DEFINE_integer("repeats", 3, "Timed calls per decode case / train step (median reported).")
    flags.DEFINE_integer("bandwidth_mib", 2048, "MiB of float32 of the elementwise bandwidth pass.")
    flags.DEFINE_integer("matmul_size", 8192, "Side of the bf16 matmul of the FLOP/s ceiling.")
    flags.DEFINE_integer("seed", 0, "Seed of the random weights and batches.")
    flags.DEFINE_string("results_dir", "runs/bench_accelerator", "Directory for bench_accelerator.{json,md,png}.")
    flags.DEFINE_float("time_budget_s", 0.0, "Seconds after which no further part or decode case starts (those left "
                       "are listed as skipped in the JSON and the table); 0: no budget. For a machine lent by the "
                       "minute: results are written after every part and decode case either way.")
    flags.DEFINE_string("profile_dir", "", "If set, after the decode part: one jax.profiler trace (perfetto "
                        "JSON) per --decode_attention of a --profile_tokens-token generate of the first preset's "
                        "first case, written under this directory.")
    flags.DEFINE_integer("profile_tokens", 64, "New tokens of each profiled generate (--profile_dir).")


TRAIN_PRESET = "qwen2.5-coder-1.5b"


def model_flops(config: Any, b: int, s: int, t: int) -> float:
    """3 x forward matmul FLOPs of a train step: projections on B x S tokens, attention scores and
    values on the S x S square per head, the LM head on the B x T completion positions."""
    e, f, h, k, d = (config.hidden_size, config.intermediate_size, config.num_heads, config.num_kv_heads,
                     config.head_dim_)
    per_token = 2 * (e * h * d + 2 * e * k * d + h * d * e + 3 * e * f)
    forward = config.num_layers * (b * s * per_token + b * 2 * 2 * s * s * h * d) + 2 * b * t * e * config.vocab_size
    return 3.0 * forward


def _peak_memory() -> float | None:
    import jax
    stats = jax.devices()[0].memory_stats() or {}
    return stats.get("peak_bytes_in_use")


def jax_train(config: Any, data: dict[str, np.ndarray], n: int, k: int, micro: int, repeats: int,
              seed: int) -> dict[str, Any]:
    """make_train_step (maxk_offpolicy, Adam) on ``data``: first call, median step, peak memory."""
    import jax
    import optax

    from maxk_jax.runtime import sharding
    from maxk_jax.models import qwen2
    from maxk_jax.rl import training
    from maxk_jax.sampling import SamplerSettings

    params = jax.jit(qwen2.init_params, static_argnums=0)(config, jax.random.key(seed))
    tx = optax.adam(1e-6)
    mesh = sharding.make_mesh(1, 1, 1, devices=jax.devices()[:1])
    box = {}
    box["state"], shardings = training.create_train_state(config, params, tx, mesh)
    del params
    cfg = training.StepConfig(estimator="maxk_offpolicy", k=k, micro_batches=micro, compute_entropy=False,
                              sampler=SamplerSettings(n=n, max_new_tokens=data["completion_mask"].shape[1]))
    step = training.make_train_step(config, cfg, tx, mesh, shardings)
    b = data["tokens"].shape[0]
    batch = sharding.shard_batch(training.Batch(
        tokens=data["tokens"], attention_mask=data["attention_mask"], completion_mask=data["completion_mask"],
        old_logp=data["old_logp"], rewards=data["rewards"], valid=np.ones(b, bool),
        answer_ids=np.zeros(b, np.int32)), mesh)

    def run() -> float:
        box["state"], metrics = step(box["state"], batch)
        return float(metrics["loss"])

    t0 = time.perf_counter()
    loss0 = run()
    first = time.perf_counter() - t0
    steady, all_s = median_time(run, repeats)
    tokens = data["tokens"].size
    flops = model_flops(config, b, data["tokens"].shape[1], data["completion_mask"].shape[1])
    out = {"attention": config.attention, "remat_policy": config.remat_policy, "first_call_s": first,
           "steady_s": steady, "all_s": all_s, "loss0": loss0,
           "tokens_per_s": tokens / steady, "model_tflops": flops / steady / 1e12, "peak_mem_gb": None}
    peak = _peak_memory()
    if peak is not None:
        out["peak_mem_gb"] = peak / 1e9
    del box
    return out


def _check_flags() -> list[tuple[int, int, int, int]]:
    bad = [p for p in FLAGS.parts if p not in PARTS]
    if bad:
        raise ValueError(f"--parts: {bad} not among {PARTS}")
    from maxk_jax.models import qwen2
    from maxk_jax.models import decode_attention
    # what each entry runs here ("auto": pallas on GPU, xla elsewhere), the name its rows carry
    FLAGS.decode_attention = list(dict.fromkeys(   # (once each: auto,pallas on a GPU is pallas)
        decode_attention.resolve("auto") + ("+draw" if fused_draw(a) else "") if attention_variant(a)[0] == "auto"
        else a for a in FLAGS.decode_attention))
    for a in FLAGS.train_attention:
        if a not in ("auto", "xla", "chunked", "dot_product"):
            raise ValueError(f"--train_attention: {a!r} is not auto, xla, chunked or dot_product")
    for r in FLAGS.train_remat:
        if r not in qwen2.REMAT_POLICIES:
            raise ValueError(f"--train_remat: {r!r} is not one of {qwen2.REMAT_POLICIES}")
    FLAGS.train_remat = list(dict.fromkeys(qwen2.resolve_remat_policy(r) for r in FLAGS.train_remat))   # auto: here
    if FLAGS.time_budget_s < 0 or FLAGS.profile_tokens < 2:
        raise ValueError(f"--time_budget_s={FLAGS.time_budget_s} must be >= 0 and --profile_tokens="
                         f"{FLAGS.profile_tokens} >= 2")
    if FLAGS.repeats < 1 or FLAGS.bandwidth_mib < 1 or FLAGS.matmul_size < 1:
        raise ValueError(f"--repeats={FLAGS.repeats}, --bandwidth_mib={FLAGS.bandwidth_mib} and "
                         f"--matmul_size={FLAGS.matmul_size} must be >= 1")
    if not FLAGS.smoke:
        for p in FLAGS.presets:
            if p not in qwen2.PRESETS:
                raise ValueError(f"--presets: unknown preset {p!r}; available: {sorted(qwen2.PRESETS)}")
    return [parse_case(c) for c in FLAGS.cases]


class Run:
    """The results so far (``res``, written after every part and case) and the rules of a run on a
    lent machine: --parts, --time_budget_s, a failure recorded while the other parts go on."""

    def __init__(self, res: dict[str, Any], out: pathlib.Path, has_torch: bool, torch_ok: bool,
                 t_start: float) -> None:
        self.res, self.out, self.has_torch, self.torch_ok, self.t_start = res, out, has_torch, torch_ok, t_start

    def over_budget(self, what: str) -> bool:
        """True (and ``what`` listed in res["skipped"]) when --time_budget_s is spent."""
        spent = time.perf_counter() - self.t_start
        if not FLAGS.time_budget_s or spent < FLAGS.time_budget_s:
            return False
        self.res.setdefault("skipped", []).append(
            f"{what}: time budget {FLAGS.time_budget_s:.0f} s spent ({spent:.0f} s)")
        print(f"{what}: skipped (time budget {FLAGS.time_budget_s:.0f} s spent)", flush=True)
        return True

    def part(self, name: str, fn: Callable[[], Any]) -> None:
        """Run one of --parts (the torch ones only where torch can run) and write the results."""
        res = self.res
        if name not in FLAGS.parts:
            return
        if name in ("hf_generate", "torch_train") and not self.torch_ok:
            res[name + "_skipped"] = "torch/transformers not importable" if not self.has_torch else "no CUDA device"
            print(f"{name}: skipped ({res[name + '_skipped']})")
            return
        t0 = time.perf_counter()
        status, result = self.attempt(name, fn)
        if status == "skipped":
            return
        if status == "done":
            res[name] = result
        res["parts_s"][name] = time.perf_counter() - t0
        print(f"{name}: {status} in {res['parts_s'][name]:.1f} s", flush=True)
        write(res, self.out)

    def attempt(self, what: str, fn: Callable[[], Any]) -> tuple[str, Any]:
        """("done", fn()); ("skipped", None) once --time_budget_s is spent; ("failed", None) when fn
        raises: on a lent machine's minutes a failure is recorded and the other parts and cases run."""
        if self.over_budget(what):
            return "skipped", None
        try:
            return "done", fn()
        except Exception as e:  # noqa: BLE001 -- e.g. out of memory, a compile failure
            self.failed(what, e)
            return "failed", None

    def failed(self, what: str, e: Exception) -> None:
        """Record (JSON ``errors``, the table's footer) and print a failed part or case; the run
        goes on and exits with status 1 at the end."""
        line = f"{what}: {type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"[:500]
        self.res.setdefault("errors", []).append(line)
        print(f"FAILED {line}", flush=True)


def _start_run(smoke: bool) -> Run:
    """The device, versions and host of the results, and whether the torch baselines can run."""
    import importlib.util

    import jax

    from maxk_jax.runtime.machine import cpu_model

    t_start = time.perf_counter()
    has_torch = importlib.util.find_spec("torch") is not None and importlib.util.find_spec("transformers") is not None
    dev = jax.devices()[0]
    res: dict[str, Any] = {
        "device": {"kind": dev.device_kind, "platform": dev.platform, "count": jax.device_count()},
        "versions": {"jax": jax.__version__}, "cpu": cpu_model(), "cpu_count": os.cpu_count(), "smoke": smoke,
        "parts_s": {}}
    if has_torch:
        import torch
        import transformers
        res["versions"].update(torch=torch.__version__, transformers=transformers.__version__)
    torch_ok = has_torch and (smoke or __import__("torch").cuda.is_available())
    out = pathlib.Path(FLAGS.results_dir)
    out.mkdir(parents=True, exist_ok=True)
    return Run(res, out, has_torch, torch_ok, t_start)


def train_all(run: Run, train_config: Any, data: dict[str, np.ndarray], n: int, k: int,
              micro: int) -> list[dict[str, Any]]:
    """The train step per --train_remat x --train_attention, each row written as it lands."""
    rows = []
    # the larger step first: JAX's allocator keeps the memory it took, in which the smaller then fits (on
    # an H200, nothing (37 GB) then dots (67 GB) ran out of memory in one process; dots first did not)
    for policy in sorted(FLAGS.train_remat, key=lambda p: p != "dots"):
        for attention in FLAGS.train_attention:
            what = f"train remat_policy={policy} attention={attention}"
            status, row = run.attempt(what, lambda: jax_train(train_config.replace(
                attention=attention, remat_policy=policy), data, n, k, micro, FLAGS.repeats, FLAGS.seed))
            if status != "done":
                continue
            rows.append(row)
            print(f"  {what}: {rows[-1]['tokens_per_s']:,.0f} tok/s (first call {rows[-1]['first_call_s']:.1f} s)",
                  flush=True)
            write({**run.res, "train": rows}, run.out)
    return rows


def decode_all(run: Run, presets: dict[str, Any], cases: list[tuple[int, int, int, int]],
               bandwidth: float | None) -> list[dict[str, Any]]:
    """Every preset x case x --decode_attention (no roofline without a measured bandwidth)."""
    import jax

    from maxk_jax.models import qwen2

    rows = []
    for name, base in presets.items():
        config = base.replace(dtype="bfloat16", param_dtype="bfloat16")
        params = jax.jit(qwen2.init_params, static_argnums=0)(config, jax.random.key(FLAGS.seed))
        for case in cases:
            for attention in FLAGS.decode_attention:
                status, row = run.attempt(f"decode {name} {case_text(case)} {attention}", lambda: decode_case(
                    variant_config(config, attention), params, case, FLAGS.repeats,
                    bandwidth or float("nan"), FLAGS.seed))
                if status != "done":
                    continue
                if bandwidth is None:
                    row = {k: v for k, v in row.items() if not k.startswith("roofline") and k != "frac_of_roofline"}
                rows.append({"preset": name, "decode_attention": attention, **row})
                print(f"  {name} {case_text(case)} {attention}: {row['tok_per_s']:,.0f} tok/s, "
                      f"{row['ms_per_step']:.2f} ms/step (first call {row['first_call_s']:.1f} s)", flush=True)
                write({**run.res, "decode": rows}, run.out)
        del params
    return rows


def profile_first_case(run: Run, first_name: str, first_config: Any, case: tuple[int, int, int, int]) -> None:
    """--profile_dir: the traces of the first preset's first case, beside its unprofiled step."""
    res = run.res
    config = first_config.replace(dtype="bfloat16", param_dtype="bfloat16")
    # the same case's unprofiled step (the decode part), when the trace decodes as many tokens
    unprofiled = {r["decode_attention"]: r["ms_per_step"] for r in res.get("decode", [])
                  if r["preset"] == first_name and (r["prompts"], r["n"], r["prompt_len"], r["new_tokens"])
                  == case and r["new_tokens"] == FLAGS.profile_tokens}
    status, profiles = run.attempt("profile", lambda: profile_decode(
        config, case, FLAGS.decode_attention, FLAGS.profile_tokens, pathlib.Path(FLAGS.profile_dir),
        FLAGS.seed, unprofiled))
    if status == "done":
        res["profiles"] = [{"preset": first_name, **r} for r in profiles]


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments {argv[1:]}")
    from maxk_jax import cli
    with cli.user_errors():
        cases = _check_flags()
    from maxk_jax.models import qwen2

    smoke = FLAGS.smoke
    if smoke:
        FLAGS.bandwidth_mib, FLAGS.matmul_size = min(FLAGS.bandwidth_mib, 4), min(FLAGS.matmul_size, 128)
        cases = [parse_case(c) for c in ("2x2:32/8", "1x4:64/8")] if FLAGS["cases"].using_default_value else cases
    run = _start_run(smoke)
    res, out = run.res, run.out

    # order: the torch baselines first (their memory goes back to the driver after them), then JAX's
    # parts: the train step before the decode, as JAX's peak-memory counter never resets
    presets = {"tiny": smoke_config()} if smoke else {p: qwen2.preset(p) for p in FLAGS.presets}
    first_name, first_config = next(iter(presets.items()))
    p, n, k, micro, sp, t = (4, 2, 2, 2, 32, 16) if smoke else (16, 8, 4, 4, 512, 256)
    data = train_batch(np.random.default_rng(FLAGS.seed), p * n, n, sp, t, first_config.vocab_size)
    train_config = (first_config if smoke else qwen2.preset(TRAIN_PRESET)).replace(
        dtype="bfloat16", param_dtype="float32", remat=True)
    res["train_preset"] = "tiny" if smoke else TRAIN_PRESET
    res["train_shape"] = f"{p * n} x {sp + t} tokens, {micro} micro-batches, k = {k}"
    run.part("hf_generate", lambda: {"preset": first_name,
                                     **torch_baselines.hf_generate(first_config, cases[0], FLAGS.seed)})
    run.part("torch_train", lambda: torch_baselines.torch_train(train_config, data, n, micro, FLAGS.repeats))
    run.part("ceilings", lambda: ceilings(FLAGS.bandwidth_mib, FLAGS.matmul_size))
    bandwidth = res.get("ceilings", {}).get("hbm_bytes_per_s")
    run.part("train", lambda: train_all(run, train_config, data, n, k, micro))
    run.part("decode", lambda: decode_all(run, presets, cases, bandwidth))
    if FLAGS.profile_dir:
        profile_first_case(run, first_name, first_config, cases[0])
    res["total_s"] = time.perf_counter() - run.t_start
    table = write(res, out, png=True)
    print(table)
    print(f"total {res['total_s']:.0f} s; wrote {out}/bench_accelerator.{{json,md,png}}")
    if res.get("errors"):
        raise SystemExit(f"{len(res['errors'])} part(s) or case(s) failed: " + "; ".join(res["errors"]))


def profile_decode(config: Any, case: tuple[int, int, int, int], attentions: list[str], tokens: int,
                   directory: pathlib.Path, seed: int, unprofiled_ms: dict[str, float] | None = None
                   ) -> list[dict[str, Any]]:
    """One ``jax.profiler`` trace (perfetto JSON under ``directory/<attention>``) of a ``tokens``-token
    ``generate`` of ``case`` per decode attention, after a compiling call; returns where each went.
    ``unprofiled_ms``: attention -> the same decode's ms per step without the profiler, stored in the
    breakdown (``unprofiled_us_per_step``) beside the traced kernel time: what of the traced step's
    span is idle on the GPU, and what is the profiler's."""
    import jax

    from maxk_jax import sampling
    from maxk_jax.planning import trace_summary
    from maxk_jax.models import qwen2

    p, n, tp, _ = case
    params = jax.jit(qwen2.init_params, static_argnums=0)(config, jax.random.key(seed))
    rng = np.random.default_rng(seed)
    prompts = [rng.integers(4, config.vocab_size, size=tp).tolist() for _ in range(p)]
    rows = []
    for attention in attentions:
        cfg = variant_config(config, attention)
        gen = lambda: jax.block_until_ready(sampling.generate(  # noqa: E731
            cfg, params, prompts, n=n, max_new_tokens=tokens, key=jax.random.key(1)).tokens)
        gen()
        where = directory / attention
        with jax.profiler.trace(str(where), create_perfetto_trace=True):
            gen()
        perfetto = sorted(where.rglob("perfetto_trace.json.gz"))
        if not perfetto:
            raise RuntimeError(f"jax.profiler wrote no perfetto_trace.json.gz under {where}")
        summary = trace_summary.kernel_breakdown(trace_summary.load_events(perfetto[-1]), "jit_decode_loop",
                                                 tokens - 1)
        if attention in (unprofiled_ms or {}):
            summary["unprofiled_us_per_step"] = 1e3 * unprofiled_ms[attention]
        rows.append({"decode_attention": attention, "case": case_text(case), "new_tokens": tokens,
                     "trace": str(perfetto[-1].relative_to(directory)), "breakdown": summary})
        print(f"profile {attention} ({perfetto[-1]}):", *trace_summary.breakdown_lines(summary), sep="\n  ", flush=True)
    return rows


if __name__ == "__main__":
    # JAX would take 75 % of the GPU at start-up; the torch baselines in this process need theirs
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    from maxk_jax import cli
    define_flags()
    cli.run_main(main)
