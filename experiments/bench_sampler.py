"""Benchmark: ``maxk_jax.sampling.generate`` vs transformers ``generate`` (PyTorch, CPU).

    .venv/bin/python -m experiments.bench_sampler                     # hidden 256, 4 layers, V 4096
    .venv/bin/python -m experiments.bench_sampler --n=2 --new_tokens=8 --repeats=1   # quick check

One random Qwen2 (``qwen2.init_params``) is saved with ``convert.save_hf`` and loaded by
``transformers.Qwen2ForCausalLM.from_pretrained``, so both samplers run the same weights. Both
generate exactly ``--new_tokens`` tokens for each of ``--n`` samples of ``--prompts`` random prompts
(no stop token: ``eos_id=None`` here, ``min_new_tokens`` there), temperature 1, no top-k/top-p.

* ``transformers``: ONE left-padded batch of all prompts with ``num_return_sequences=n`` and
  ``do_sample=True`` (its strongest usage: the prompts are expanded n times before prefill).
* ``maxk_jax``: ``generate(..., n=n)``: one prefill per prompt, its K/V stored once and read by all n samples (shared-prefix cache),
  ``lax.while_loop`` decode.
* ``maxk_jax_repeated``: ``generate(prompts repeated n times, n=1)``: the n-fold prefill baseline.

Reported (steady state = median of ``--repeats`` calls after the first; the timed calls run in
interleaved rounds, one call of every variant per round): generated tokens/s of
each and the ratio against the baseline = the fastest transformers run measured in the same run
(``--torch_threads``: torch's OpenMP threads spin-wait badly when other jobs share the CPU, so
1 thread can beat 2); the prefill stage alone with
the shared prefix vs the n-fold repeated prompts (``_sampler.prefill_prompts``) and the time it saves;
compile time = first call - steady state. Results go to ``--results_dir`` as
bench_sampler.{json,md,png}. Other jobs sharing the CPU inflate every number; ratios are from
interleaved calls of the same run.
"""
from __future__ import annotations

import json
import pathlib
import platform
import statistics
import tempfile
import time
from typing import Any, Callable, Sequence

from absl import app, flags
import jax
import jax.numpy as jnp
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from tqdm import tqdm  # noqa: E402

from maxk_jax import cli, sampling  # noqa: E402
from maxk_jax.sampling import _sampler  # noqa: E402
from maxk_jax.models import convert, qwen2  # noqa: E402
from maxk_jax.pipelines.phases import cpu_model  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_integer("vocab_size", 4096, "Vocabulary size V of the random model.")
flags.DEFINE_integer("hidden_size", 256, "Hidden size E of the random model.")
flags.DEFINE_integer("num_layers", 4, "Decoder layers L.")
flags.DEFINE_integer("num_heads", 4, "Query heads H.")
flags.DEFINE_integer("num_kv_heads", 2, "Key/value heads K (grouped-query attention).")
flags.DEFINE_integer("intermediate_size", 1024, "SwiGLU width F.")
flags.DEFINE_integer("prompts", 8, "Number of prompts P.")
flags.DEFINE_integer("n", 8, "Samples per prompt n.")
flags.DEFINE_integer("new_tokens", 64, "Tokens generated per sample (no early stop).")
flags.DEFINE_integer("min_prompt_len", 32, "Shortest random prompt (tokens).")
flags.DEFINE_integer("max_prompt_len", 128, "Longest random prompt (tokens).")
flags.DEFINE_integer("repeats", 3, "Timed steady-state calls per variant (median reported).")
flags.DEFINE_integer("seed", 0, "Seed of the weights, prompts and sampling keys.")
flags.DEFINE_list("torch_threads", ["1", "0"],
                  "torch.set_num_threads values to time transformers with (0 = torch's default); "
                  "the fastest is the baseline (OpenMP threads spin badly on a shared CPU).")
flags.DEFINE_string("results_dir", "runs/bench_sampler", "Directory for the JSON/markdown/PNG results.")


def build_models(seed: int, tmp: str) -> tuple[qwen2.Qwen2Config, Any, Any]:
    """Random JAX params -> save_hf -> transformers model (eval, float32) with the same weights."""
    config = qwen2.Qwen2Config(
        vocab_size=FLAGS.vocab_size, hidden_size=FLAGS.hidden_size,
        intermediate_size=FLAGS.intermediate_size, num_layers=FLAGS.num_layers,
        num_heads=FLAGS.num_heads, num_kv_heads=FLAGS.num_kv_heads, rope_theta=10000.0,
        max_position_embeddings=max(256, 2 * (FLAGS.max_prompt_len + FLAGS.new_tokens)),
        pad_token_id=0, eos_token_id=None, bos_token_id=None)
    params = qwen2.init_params(config, jax.random.key(seed))
    convert.save_hf(config, params, tmp)
    model = transformers.Qwen2ForCausalLM.from_pretrained(tmp, dtype=torch.float32).eval()
    return config, params, model


def make_prompts(rng: np.random.Generator, count: int, lo: int, hi: int, vocab: int
                 ) -> list[list[int]]:
    """count random prompts with lengths uniform in [lo, hi] (token ids in [1, vocab))."""
    return [rng.integers(1, vocab, size=int(rng.integers(lo, hi + 1))).tolist()
            for _ in range(count)]


def hf_generate_fn(model: Any, prompts: list[list[int]], n: int, new_tokens: int,
                   threads: int) -> Callable[[int], Any]:
    """transformers generate over ONE left-padded batch with num_return_sequences=n, run with
    `threads` torch threads."""
    width = max(map(len, prompts))
    ids = torch.zeros((len(prompts), width), dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):] = torch.tensor(p)
        mask[i, width - len(p):] = 1

    def run(i: int) -> Any:
        torch.set_num_threads(threads)
        torch.manual_seed(FLAGS.seed + i)
        with torch.inference_mode():
            out = model.generate(input_ids=ids, attention_mask=mask, do_sample=True,
                                 temperature=1.0, top_k=0, top_p=1.0, num_return_sequences=n,
                                 max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                                 pad_token_id=0, eos_token_id=None)
        if out.shape != (len(prompts) * n, width + new_tokens):
            raise RuntimeError(f"transformers returned shape {tuple(out.shape)}")
        return out
    return run


def jax_generate_fn(config: qwen2.Qwen2Config, params: Any, prompts: list[list[int]], n: int,
                    new_tokens: int) -> Callable[[int], Any]:
    """maxk_jax generate (shared prefix when n > 1)."""
    def run(i: int) -> Any:
        out = sampling.generate(config, params, prompts, n=n, max_new_tokens=new_tokens,
                                key=jax.random.key(FLAGS.seed + i))
        out = jax.block_until_ready(out)
        if int(out.lengths.min()) != new_tokens:
            raise RuntimeError("maxk_jax stopped early although no stop token was set")
        return out
    return run


def prefill_fn(config: qwen2.Qwen2Config, params: Any, prompts: list[list[int]], n: int,
               new_tokens: int, repeat_prompts: bool) -> Callable[[int], Any]:
    """Only the prefill stage of generate: shared (P prompts, the prompt's K/V stored once for its n samples) or n-fold."""
    if repeat_prompts:
        prompts, n = [p for p in prompts for _ in range(n)], 1
    settings = sampling.SamplerSettings(n=n, max_new_tokens=new_tokens, temperature=1.0,
                                        top_k=0, top_p=1.0)
    tp = sampling.next_pow2(max(map(len, prompts)), sampling.MIN_PROMPT_BUCKET)
    tokens, mask = sampling.pad_prompts(prompts, tp, sampling.prompt_batch_bucket(len(prompts)), 0)
    tokens, mask = jnp.asarray(tokens), jnp.asarray(mask)
    return lambda i: jax.block_until_ready(
        _sampler.prefill_prompts(config, settings, None, params, tokens, mask))


def run(prompts: list[list[int]], config: qwen2.Qwen2Config, params: Any, model: Any
        ) -> list[dict[str, Any]]:
    """Time every variant; rows of {name, first_s, steady_s, tokens_per_s, ...}."""
    n, t = FLAGS.n, FLAGS.new_tokens
    generated = len(prompts) * n * t
    default_threads = torch.get_num_threads()
    jobs = [(f"transformers_threads{th or default_threads}",
             hf_generate_fn(model, prompts, n, t, th or default_threads), True)
            for th in sorted({int(x) for x in FLAGS.torch_threads})]
    jobs += [
        ("maxk_jax", jax_generate_fn(config, params, prompts, n, t), True),
        ("maxk_jax_repeated", jax_generate_fn(config, params, [p for p in prompts for _ in range(n)],
                                              1, t), True),
        ("prefill_shared", prefill_fn(config, params, prompts, n, t, False), False),
        ("prefill_repeated", prefill_fn(config, params, prompts, n, t, True), False),
    ]
    firsts, times = {}, {name: [] for name, _, _ in jobs}
    for name, fn, _ in tqdm(jobs, desc="first calls", unit="variant"):
        start = time.perf_counter()
        fn(0)
        firsts[name] = time.perf_counter() - start
    # Interleaved rounds (A, B, C, A, B, C, ...): load from other jobs hits every variant alike.
    for i in tqdm(range(1, FLAGS.repeats + 1), desc="timed rounds", unit="round"):
        for name, fn, _ in jobs:
            start = time.perf_counter()
            fn(i)
            times[name].append(time.perf_counter() - start)
    rows = []
    for name, _, generates in jobs:
        first, steady = firsts[name], statistics.median(times[name])
        rows.append(dict(name=name, first_s=first, steady_s=steady,
                         compile_s=None if name.startswith("transformers") else first - steady,
                         tokens_per_s=generated / steady if generates else None))
    torch.set_num_threads(default_threads)
    return rows


def markdown_table(rows: Sequence[dict[str, Any]], base: dict[str, Any]) -> str:
    """Rows -> markdown table with the ratio against the baseline (fastest transformers) row."""
    lines = ["| variant | first call s | steady s | compile s | tokens/s | vs transformers |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        tps = r["tokens_per_s"]
        lines.append("| {} | {:.3f} | {:.3f} | {} | {} | {} |".format(
            r["name"], r["first_s"], r["steady_s"],
            "-" if r["compile_s"] is None else f"{r['compile_s']:.2f}",
            "-" if tps is None else f"{tps:.0f}",
            "-" if tps is None else f"{tps / base['tokens_per_s']:.2f}x"))
    return "\n".join(lines)


def plot(rows: Sequence[dict[str, Any]], path: pathlib.Path, title: str) -> None:
    """Bar chart of generated tokens/s per sampler."""
    gen = [r for r in rows if r["tokens_per_s"] is not None]
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.bar([r["name"] for r in gen], [r["tokens_per_s"] for r in gen],
           color=["tab:gray" if r["name"].startswith("transformers") else "tab:blue" for r in gen])
    ax.tick_params(axis="x", labelsize=7)
    ax.set_ylabel("generated tokens / s (steady state)")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: Sequence[str]) -> None:
    """Runs the benchmark and writes bench_sampler.{json,md,png} to --results_dir."""
    del argv
    for name in ("prompts", "n", "new_tokens", "repeats", "min_prompt_len"):
        if getattr(FLAGS, name) < 1:
            raise app.UsageError(f"--{name} must be >= 1, got {getattr(FLAGS, name)}")
    if FLAGS.max_prompt_len < FLAGS.min_prompt_len:
        raise app.UsageError(f"--max_prompt_len={FLAGS.max_prompt_len} < --min_prompt_len="
                             f"{FLAGS.min_prompt_len}")
    if not FLAGS.torch_threads or any(not x.isdigit() for x in FLAGS.torch_threads):
        raise app.UsageError(f"--torch_threads must be non-negative ints, got {FLAGS.torch_threads}")
    rng = np.random.default_rng(FLAGS.seed)
    with tempfile.TemporaryDirectory() as tmp:
        config, params, model = build_models(FLAGS.seed, tmp)
    prompts = make_prompts(rng, FLAGS.prompts, FLAGS.min_prompt_len, FLAGS.max_prompt_len,
                           FLAGS.vocab_size)
    rows = run(prompts, config, params, model)
    by = {r["name"]: r for r in rows}
    base = max((r for r in rows if r["name"].startswith("transformers")),
               key=lambda r: r["tokens_per_s"])
    summary = dict(
        baseline_tokens_per_s=base["tokens_per_s"],
        maxk_jax_tokens_per_s=by["maxk_jax"]["tokens_per_s"],
        speedup_vs_transformers=by["maxk_jax"]["tokens_per_s"] / base["tokens_per_s"],
        repeated_speedup_vs_transformers=(by["maxk_jax_repeated"]["tokens_per_s"]
                                          / base["tokens_per_s"]),
        prefill_shared_s=by["prefill_shared"]["steady_s"],
        prefill_repeated_s=by["prefill_repeated"]["steady_s"],
        prefill_saved_s=by["prefill_repeated"]["steady_s"] - by["prefill_shared"]["steady_s"],
        prefill_ratio=by["prefill_repeated"]["steady_s"] / by["prefill_shared"]["steady_s"],
        generate_saved_s=by["maxk_jax_repeated"]["steady_s"] - by["maxk_jax"]["steady_s"],
        compile_s=by["maxk_jax"]["compile_s"])
    meta = dict(flags={k: getattr(FLAGS, k) for k in (
        "vocab_size", "hidden_size", "num_layers", "num_heads", "num_kv_heads",
        "intermediate_size", "prompts", "n", "new_tokens", "min_prompt_len", "max_prompt_len",
        "repeats", "seed", "torch_threads")}, baseline=base["name"],
        prompt_lengths=[len(p) for p in prompts], param_count=qwen2.param_count(config),
        jax=jax.__version__, torch=torch.__version__, transformers=transformers.__version__,
        torch_default_threads=torch.get_num_threads(), devices=str(jax.devices()),
        machine=platform.platform(), cpu=cpu_model(), cpu_count=__import__("os").cpu_count())
    table = markdown_table(rows, base)
    print(table)
    print(f"\nbaseline: {base['name']}")
    print("\n".join(f"{k}: {v:.3f}" for k, v in summary.items()))
    out_dir = pathlib.Path(FLAGS.results_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "bench_sampler.json").write_text(
        json.dumps(dict(meta=meta, rows=rows, summary=summary), indent=2))
    (out_dir / "bench_sampler.md").write_text(table + "\n")
    plot(rows, out_dir / "bench_sampler.png",
         f"P={FLAGS.prompts} x n={FLAGS.n} x {FLAGS.new_tokens} tokens, E={FLAGS.hidden_size}, "
         f"L={FLAGS.num_layers}, V={FLAGS.vocab_size}")
    print(f"\nwrote {out_dir}/bench_sampler.{{json,md,png}}")


if __name__ == "__main__":
    cli.run_main(main)
