"""Benchmark: forward tokens/s of the jit-compiled Flax Qwen2 vs transformers' PyTorch Qwen2.

    .venv/bin/python -m experiments.bench_model                          # batch 8 x 256, small model
    .venv/bin/python -m experiments.bench_model --batch=2 --seq=32 --repeats=2   # quick check

Both sides run the SAME weights: random params from ``init_params`` are exported with
``save_hf`` and loaded with ``transformers.Qwen2ForCausalLM.from_pretrained`` (float32, CPU,
``torch.inference_mode``, ``--torch_attn`` implementation). Each side is timed over
``--repeats`` calls after one warm-up call (jit compile excluded); the median is reported as
tokens/s = batch * seq / seconds, with the ratio JAX / torch (the baseline) and max |Δlogit|.
Writes ``bench_model.{json,png}`` to ``--results_dir``.
"""
from __future__ import annotations

import json
import pathlib
import platform
import statistics
import tempfile
import time
from typing import Any, Callable

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

from maxk_jax import cli  # noqa: E402
from maxk_jax.models import convert, qwen2  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_integer("batch", 8, "Sequences per forward call.")
flags.DEFINE_integer("seq", 256, "Tokens per sequence.")
flags.DEFINE_integer("vocab", 32000, "Vocabulary size of the benchmark model.")
flags.DEFINE_integer("hidden", 512, "Hidden size E.")
flags.DEFINE_integer("intermediate", 1408, "MLP size F.")
flags.DEFINE_integer("layers", 4, "Decoder layers L.")
flags.DEFINE_integer("heads", 8, "Attention heads H.")
flags.DEFINE_integer("kv_heads", 2, "Key/value heads K (H must be a multiple).")
flags.DEFINE_bool("tie", True, "Tie the embedding and the lm_head.")
flags.DEFINE_integer("repeats", 5, "Timed calls per side after one warm-up; the median is reported.")
flags.DEFINE_integer("seed", 0, "PRNG seed of the random weights and tokens.")
flags.DEFINE_enum("torch_attn", "sdpa", ["sdpa", "eager"], "transformers attention implementation.")
flags.DEFINE_integer("torch_threads", 0, "torch.set_num_threads (0 = leave torch's default).")
flags.DEFINE_string("results_dir", "runs/bench_model", "Directory for the JSON/PNG results.")


def time_calls(fn: Callable[[], Any], repeats: int, desc: str) -> list[float]:
    """Seconds of ``repeats`` calls of ``fn`` (which must block until done) after a warm-up."""
    fn()
    times = []
    for _ in tqdm(range(repeats), desc=desc):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments {argv[1:]}")
    if FLAGS.repeats < 1 or FLAGS.batch < 1 or FLAGS.seq < 1:
        raise ValueError(f"repeats, batch and seq must be >= 1, got {FLAGS.repeats}, "
                         f"{FLAGS.batch}, {FLAGS.seq}")
    if FLAGS.torch_threads:
        torch.set_num_threads(FLAGS.torch_threads)
    config = qwen2.Qwen2Config(
        vocab_size=FLAGS.vocab, hidden_size=FLAGS.hidden, intermediate_size=FLAGS.intermediate,
        num_layers=FLAGS.layers, num_heads=FLAGS.heads, num_kv_heads=FLAGS.kv_heads,
        tie_word_embeddings=FLAGS.tie, max_position_embeddings=max(4096, FLAGS.seq))
    key_p, key_t = jax.random.split(jax.random.key(FLAGS.seed))
    params = qwen2.init_params(config, key_p)
    tokens = np.asarray(jax.random.randint(key_t, (FLAGS.batch, FLAGS.seq), 0, config.vocab_size))

    with tempfile.TemporaryDirectory() as tmp:
        convert.save_hf(config, params, tmp)
        model = transformers.Qwen2ForCausalLM.from_pretrained(
            tmp, attn_implementation=FLAGS.torch_attn, dtype=torch.float32).eval()

    jax_tokens = jnp.asarray(tokens)
    jax_fn = lambda: qwen2.logits(config, params, jax_tokens).block_until_ready()  # noqa: E731
    torch_tokens = torch.tensor(tokens)

    def torch_fn() -> torch.Tensor:
        with torch.inference_mode():
            return model(input_ids=torch_tokens).logits

    jax_times = time_calls(jax_fn, FLAGS.repeats, "jax")
    torch_times = time_calls(torch_fn, FLAGS.repeats, "torch")
    max_diff = float(np.abs(np.asarray(jax_fn()) - torch_fn().numpy()).max())
    n_tok = FLAGS.batch * FLAGS.seq
    jax_tps = n_tok / statistics.median(jax_times)
    torch_tps = n_tok / statistics.median(torch_times)
    result = {
        "config": config.to_hf_dict(), "params": qwen2.param_count(config),
        "batch": FLAGS.batch, "seq": FLAGS.seq, "repeats": FLAGS.repeats,
        "torch_attn": FLAGS.torch_attn, "torch_threads": torch.get_num_threads(),
        "jax_seconds": jax_times, "torch_seconds": torch_times,
        "jax_tokens_per_s": jax_tps, "torch_tokens_per_s": torch_tps,
        "ratio_jax_over_torch": jax_tps / torch_tps, "max_abs_logit_diff": max_diff,
        "platform": platform.platform(), "jax": jax.__version__, "torch": torch.__version__,
        "devices": [str(d) for d in jax.devices()[:1]],
    }
    out = pathlib.Path(FLAGS.results_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench_model.json").write_text(json.dumps(result, indent=2))
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.bar(["jax (jit)", f"torch ({FLAGS.torch_attn})"], [jax_tps, torch_tps],
           color=["tab:blue", "tab:orange"])
    ax.set_ylabel("forward tokens / s")
    ax.set_title(f"{result['params']:,} params, batch {FLAGS.batch} x {FLAGS.seq}, CPU",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(out / "bench_model.png", dpi=120)
    plt.close(fig)
    print(f"model: {result['params']:,} params; batch {FLAGS.batch} x {FLAGS.seq} tokens")
    print(f"jax   : {jax_tps:10.1f} tokens/s (median of {FLAGS.repeats})")
    print(f"torch : {torch_tps:10.1f} tokens/s (median of {FLAGS.repeats}, {FLAGS.torch_attn}, "
          f"{torch.get_num_threads()} threads)")
    print(f"ratio jax/torch = {jax_tps / torch_tps:.2f}x; max |delta logit| = {max_diff:.2e}")
    print(f"wrote {out}/bench_model.{{json,png}}")


if __name__ == "__main__":
    cli.run_main(main)
