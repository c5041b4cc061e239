"""Train-step throughput: our jitted train_step vs the same GRPO step in PyTorch / transformers.

    .venv/bin/python -m experiments.bench_train                    # hidden 256, 4 layers, 64 x 128
    .venv/bin/python -m experiments.bench_train --steps=2 --hidden=64 --layers=2   # quick check

Both sides do one optimizer update per step on the SAME rollout batch with the SAME weights
(random Qwen2 saved with ``convert.save_hf`` and loaded by ``Qwen2ForCausalLM.from_pretrained``):
forward over prompt + completion, log-probs of the completion tokens, GRPO advantages (z-scored
rewards), clipped surrogate (eps 0.2) averaged per sequence then over sequences, backward,
global-norm clipping to 1.0, Adam.  The JAX side is ``training.make_train_step`` (estimator
"grpo", entropy metric off, one micro-batch: the LM head only at completion positions, see
``maxk_jax.rl.logprobs``); the PyTorch side is written out below and made equally lean the way TRL
does it: ``logits_to_keep = completion_len + 1`` (the LM head and log-softmax only where
completion tokens are predicted), attention ``--torch_attn`` (default sdpa, transformers' own
default).  The step-0 losses of both sides are compared (same
computation -> same number).

Timing: after ``--warmup`` untimed steps per side (the first JAX call compiles; reported
separately) the sides alternate for ``--rounds`` rounds of ``--steps`` timed steps each, so a
change of machine load hits both; the per-side median over rounds is reported as sequence tokens
(B x S) per second, with the ratio ours / PyTorch (goal >= 1) and every round's ratio.

MFU: model FLOPs of one step (the same for both sides: 3 x forward matmul FLOPs -- the decoder
projections over all B x S tokens, attention scores and values over the S x S causal-free
square, the LM head over the B x T completion positions) divided by the step time, against a
float32 matmul peak measured in the same run (the best of ``jnp.dot`` and ``torch.mm`` on
``--peak_size``-square matrices, both using every core).
Writes ``bench_train.{json,png}`` to ``--results_dir``.
"""
from __future__ import annotations

import json
import os
import pathlib
import tempfile
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl import app, flags

from maxk_jax import cli
from maxk_jax.pipelines.phases import cpu_model

FLAGS = flags.FLAGS
flags.DEFINE_integer("hidden", 256, "Hidden size of the random Qwen2.")
flags.DEFINE_integer("layers", 4, "Decoder layers.")
flags.DEFINE_integer("heads", 4, "Query heads.")
flags.DEFINE_integer("kv_heads", 2, "Key/value heads.")
flags.DEFINE_integer("vocab", 4096, "Vocabulary size.")
flags.DEFINE_integer("prompts", 8, "Prompts per batch.")
flags.DEFINE_integer("n", 8, "Samples per prompt (batch = prompts x n sequences).")
flags.DEFINE_integer("prompt_len", 64, "Prompt tokens (left-padded).")
flags.DEFINE_integer("completion_len", 64, "Completion tokens.")
flags.DEFINE_integer("warmup", 2, "Untimed steps per side (the first JAX one compiles).")
flags.DEFINE_integer("steps", 3, "Timed steps per side and round.")
flags.DEFINE_integer("rounds", 3, "Alternating timing rounds (median over rounds is reported).")
flags.DEFINE_integer("peak_size", 1024, "Square float32 matmul size of the peak measurement.")
flags.DEFINE_float("learning_rate", 1e-5, "Adam learning rate (both sides).")
flags.DEFINE_enum("torch_attn", "sdpa", ["sdpa", "eager"], "transformers attention implementation.")
flags.DEFINE_integer("seed", 0, "Seed of the weights and the batch.")
flags.DEFINE_string("results_dir", "runs/bench_train", "Directory for bench_train.{json,png}.")

EPS = 0.2


def make_batch(rng: np.random.Generator, p: int, n: int, sp: int, t: int, vocab: int) -> dict[str, np.ndarray]:
    """Random rollout batch: left-padded prompts, completions with random lengths, rewards."""
    b = p * n
    prompt_lens = np.repeat(rng.integers(sp // 2, sp + 1, size=p), n)
    comp_lens = rng.integers(t // 2, t + 1, size=b)
    tokens = rng.integers(4, vocab, size=(b, sp + t)).astype(np.int32)
    attn = np.zeros((b, sp + t), bool)
    for i in range(b):
        attn[i, sp - prompt_lens[i]:sp] = True
        attn[i, sp:sp + comp_lens[i]] = True
    rewards = rng.integers(0, 5, size=b).astype(np.float32) / 4
    return {"tokens": tokens, "attention_mask": attn, "completion_mask": attn[:, sp:], "rewards": rewards}


def jax_side(config: Any, params: Any, data: dict[str, np.ndarray], old_logp: np.ndarray) -> dict[str, Any]:
    """training.make_train_step, warmed up; returns step-0 loss, first-call seconds and ``run(k)``
    (k timed steps -> seconds per step)."""
    from maxk_jax.runtime import sharding
    from maxk_jax.rl import training


    from maxk_jax.rl.losses import LossConfig
    from maxk_jax.sampling import SamplerSettings

    cfg = training.StepConfig(estimator="grpo", k=1,
                              sampler=SamplerSettings(n=FLAGS.n, max_new_tokens=FLAGS.completion_len),
                              loss=LossConfig(eps_low=EPS, eps_high=EPS), compute_entropy=False)
    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(FLAGS.learning_rate))
    mesh = sharding.make_mesh(1, 1, 1, devices=jax.devices()[:1])
    box = {}
    box["state"], sh = training.create_train_state(config, params, tx, mesh)
    step = training.make_train_step(config, cfg, tx, mesh, sh)
    b = data["tokens"].shape[0]
    batch = sharding.shard_batch(training.Batch(
        tokens=data["tokens"], attention_mask=data["attention_mask"], completion_mask=data["completion_mask"],
        old_logp=old_logp, rewards=data["rewards"], valid=np.ones(b, bool),
        answer_ids=np.zeros(b, np.int32)), mesh)

    def run(k: int) -> float:
        t0 = time.perf_counter()
        for _ in range(k):
            box["state"], _ = step(box["state"], batch)
        jax.block_until_ready(box["state"])
        return (time.perf_counter() - t0) / k

    t0 = time.perf_counter()
    box["state"], metrics = step(box["state"], batch)
    loss0 = float(metrics["loss"])
    first = time.perf_counter() - t0
    if FLAGS.warmup > 1:
        run(FLAGS.warmup - 1)
    return {"loss_step0": loss0, "first_call_s": first, "run": run}


def torch_side(path: str, data: dict[str, np.ndarray], old_logp: np.ndarray) -> dict[str, Any]:
    """The same GRPO step with transformers' Qwen2ForCausalLM + torch.optim.Adam, warmed up."""
    import torch
    import transformers

    model = transformers.Qwen2ForCausalLM.from_pretrained(path, dtype=torch.float32,
                                                          attn_implementation=FLAGS.torch_attn)
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=FLAGS.learning_rate)
    tokens = torch.from_numpy(data["tokens"]).long()
    attn = torch.from_numpy(data["attention_mask"]).long()
    positions = torch.clamp(attn.cumsum(-1) - 1, min=0)
    mask = torch.from_numpy(data["completion_mask"])
    old = torch.from_numpy(old_logp)
    r = torch.from_numpy(data["rewards"]).view(-1, FLAGS.n)
    adv = ((r - r.mean(-1, keepdim=True)) / (r.std(-1, unbiased=False, keepdim=True) + 1e-6)).view(-1)
    t = mask.shape[1]

    def step() -> float:
        # TRL's GRPO: logits only for the positions predicting completion tokens (+1, dropped)
        logits = model(input_ids=tokens, attention_mask=attn, position_ids=positions,
                       logits_to_keep=t + 1).logits
        logits = logits[:, :-1].float()
        logp = torch.log_softmax(logits, -1).gather(-1, tokens[:, -t:, None]).squeeze(-1)
        ratio = torch.exp(torch.where(mask, logp - old, torch.zeros_like(logp)))
        a = adv[:, None]
        per_tok = -torch.min(ratio * a, torch.clamp(ratio, 1 - EPS, 1 + EPS) * a)
        per_tok = torch.where(mask, per_tok, torch.zeros_like(per_tok))
        per_seq = per_tok.sum(-1) / mask.sum(-1).clamp(min=1)
        loss = per_seq[mask.any(-1)].mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return float(loss.detach())

    def run(k: int) -> float:
        t0 = time.perf_counter()
        for _ in range(k):
            step()
        return (time.perf_counter() - t0) / k

    loss0 = step()
    if FLAGS.warmup > 1:
        run(FLAGS.warmup - 1)
    return {"loss_step0": loss0, "run": run, "torch_threads": torch.get_num_threads()}


def model_flops(config: Any, b: int, s: int, t: int) -> float:
    """Matmul FLOPs of one train step (3 x forward): decoder projections on B x S tokens,
    attention scores + weighted values on the S x S square per head, LM head on B x T."""
    e, f, h, k = config.hidden_size, config.intermediate_size, config.num_heads, config.num_kv_heads
    d = config.head_dim_
    per_token = 2 * (e * h * d + 2 * e * k * d + h * d * e + 3 * e * f)  # q, k, v, o, gate/up/down
    attention = 2 * 2 * s * s * h * d  # per sequence and layer
    forward = config.num_layers * (b * s * per_token + b * attention) + 2 * b * t * e * config.vocab_size
    return 3.0 * forward


def matmul_peak(size: int) -> dict[str, float]:
    """float32 matmul FLOP/s of jnp.dot and torch.mm on size x size matrices (best of 5 each)."""
    import torch

    a = jnp.asarray(np.random.default_rng(0).standard_normal((size, size), np.float32))
    dot = jax.jit(jnp.dot)
    dot(a, a).block_until_ready()
    ta = torch.from_numpy(np.array(a))
    torch.mm(ta, ta)
    best = {"jax": float("inf"), "torch": float("inf")}
    for _ in range(5):
        t0 = time.perf_counter()
        dot(a, a).block_until_ready()
        best["jax"] = min(best["jax"], time.perf_counter() - t0)
        t0 = time.perf_counter()
        torch.mm(ta, ta)
        best["torch"] = min(best["torch"], time.perf_counter() - t0)
    return {k: 2.0 * size ** 3 / v for k, v in best.items()}


def behaviour_logp(config: Any, params: Any, data: dict[str, np.ndarray], rng: np.random.Generator) -> np.ndarray:
    """Behaviour log-probs [B, T] float32: the current policy's (one train-step log-prob pass) plus
    uniform noise in [-0.3, 0.3] on completion tokens, so some tokens fall outside the trust region."""
    from maxk_jax.runtime import sharding
    from maxk_jax.rl import training
    from maxk_jax.sampling import SamplerSettings

    cfg = training.StepConfig(estimator="grpo", k=1,
                              sampler=SamplerSettings(n=FLAGS.n, max_new_tokens=FLAGS.completion_len))
    mesh = sharding.make_mesh(1, 1, 1, devices=jax.devices()[:1])
    b = data["tokens"].shape[0]
    probe = training.Batch(tokens=data["tokens"], attention_mask=data["attention_mask"],
                           completion_mask=data["completion_mask"], old_logp=np.zeros(data["completion_mask"].shape, np.float32),
                           rewards=data["rewards"], valid=np.ones(b, bool), answer_ids=np.zeros(b, np.int32))
    _, sh = training.abstract_train_state(config, optax.adam(1e-3), mesh)
    lp = np.asarray(training.make_logprob_fn(config, cfg, mesh, sh.params)(params, sharding.shard_batch(probe, mesh)))
    return np.where(data["completion_mask"], lp + rng.uniform(-0.3, 0.3, lp.shape), 0.0).astype(np.float32)


def plot(path: pathlib.Path, ours: float, ref: float, params: int, tokens: float) -> None:
    """The two sides' sequence tokens / s as a bar chart (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.bar(["maxk_jax train_step", "PyTorch / transformers"], [ours, ref], color=["C0", "C1"])
    ax.set_ylabel("sequence tokens / s")
    ax.set_title(f"GRPO train step, {params:,} params, {int(tokens)} tokens/step\n"
                 f"ratio {ours / ref:.2f}x", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def report(result: dict[str, Any], sides: dict[str, dict[str, Any]], b: int, s_len: int, out: pathlib.Path) -> None:
    """The console summary: sizes, the matmul peak, one table row per side, the ratio and its rounds."""
    peak, tokens, flops = result["matmul_peak_flops"], result["tokens_per_step"], result["model_flops_per_step"]
    ours, ref = sides["jax"]["tokens_per_s"], sides["torch"]["tokens_per_s"]
    print(f"params {result['params']:,}; batch {b} x {s_len} = {int(tokens)} tokens/step; "
          f"{flops / 1e9:.1f} model GFLOP/step; matmul peak {max(peak.values()) / 1e9:.1f} GFLOP/s "
          f"(jax {peak['jax'] / 1e9:.1f}, torch {peak['torch'] / 1e9:.1f})")
    print("| side | step s (median of rounds) | tokens/s | MFU | step-0 loss |\n|---|---:|---:|---:|---:|")
    for name, label in (("jax", "maxk_jax"), ("torch", f"PyTorch ({FLAGS.torch_attn}, logits_to_keep)")):
        r = sides[name]
        print(f"| {label} | {r['step_s']:.4f} | {r['tokens_per_s']:,.0f} | {r['mfu']:.1%} | "
              f"{r['loss_step0']:.6f} |")
    print(f"ratio ours / PyTorch: {ours / ref:.2f}x (rounds: "
          f"{', '.join(f'{x:.2f}' for x in result['round_ratios'])}; first JAX call incl. compile: "
          f"{sides['jax']['first_call_s']:.1f} s; step-0 loss |diff| {result['loss_step0_abs_diff']:.2e}; "
          f"load avg {' '.join(f'{x:.2f}' for x in result['load_avg'])}); wrote {out}/bench_train.{{json,png}}")


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments {argv[1:]}")
    if FLAGS.warmup < 1 or FLAGS.steps < 1 or FLAGS.rounds < 1:
        raise ValueError(f"--warmup={FLAGS.warmup}, --steps={FLAGS.steps} and --rounds={FLAGS.rounds} "
                         "must be >= 1")
    from maxk_jax.models import convert, qwen2

    config = qwen2.Qwen2Config(vocab_size=FLAGS.vocab, hidden_size=FLAGS.hidden,
                               intermediate_size=4 * FLAGS.hidden, num_layers=FLAGS.layers,
                               num_heads=FLAGS.heads, num_kv_heads=FLAGS.kv_heads, rope_theta=10000.0,
                               max_position_embeddings=max(256, FLAGS.prompt_len + FLAGS.completion_len),
                               pad_token_id=0)
    params = qwen2.init_params(config, jax.random.key(FLAGS.seed))
    rng = np.random.default_rng(FLAGS.seed)
    data = make_batch(rng, FLAGS.prompts, FLAGS.n, FLAGS.prompt_len, FLAGS.completion_len, FLAGS.vocab)
    old_logp = behaviour_logp(config, params, data, rng)

    with tempfile.TemporaryDirectory() as tmp:
        convert.save_hf(config, params, tmp)
        torch_res = torch_side(tmp, data, old_logp)
    jax_res = jax_side(config, params, data, old_logp)
    times: dict[str, list[float]] = {"jax": [], "torch": []}
    for _ in range(FLAGS.rounds):  # alternate, so load changes hit both sides
        times["torch"].append(torch_res["run"](FLAGS.steps))
        times["jax"].append(jax_res["run"](FLAGS.steps))
    peak = matmul_peak(FLAGS.peak_size)
    peak_flops = max(peak.values())
    b, s_len = data["tokens"].shape
    flops = model_flops(config, b, s_len, FLAGS.completion_len)
    tokens = float(data["tokens"].size)
    sides = {}
    for name, res in (("jax", jax_res), ("torch", torch_res)):
        step_s = float(np.median(times[name]))
        sides[name] = {k: v for k, v in res.items() if k != "run"}
        sides[name].update(step_s=step_s, round_step_s=times[name], tokens_per_s=tokens / step_s,
                           model_flops_per_s=flops / step_s, mfu=flops / step_s / peak_flops)
    ours, ref = sides["jax"]["tokens_per_s"], sides["torch"]["tokens_per_s"]
    result = {
        "config": {k: FLAGS[k].value for k in ("hidden", "layers", "heads", "kv_heads", "vocab", "prompts", "n",
                                               "prompt_len", "completion_len", "warmup", "steps", "rounds",
                                               "seed", "peak_size", "torch_attn")},
        "params": qwen2.param_count(config), "tokens_per_step": tokens, "model_flops_per_step": flops,
        "matmul_peak_flops": peak, "jax": sides["jax"], "torch": sides["torch"],
        "ratio_jax_over_torch": ours / ref,
        "round_ratios": [tt / tj for tj, tt in zip(times["jax"], times["torch"])],
        "loss_step0_abs_diff": abs(jax_res["loss_step0"] - torch_res["loss_step0"]),
        "cpu": cpu_model(), "cpu_count": os.cpu_count(), "load_avg": os.getloadavg(),
    }
    out = pathlib.Path(FLAGS.results_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench_train.json").write_text(json.dumps(result, indent=2))
    plot(out / "bench_train.png", ours, ref, result["params"], tokens)
    report(result, sides, b, s_len, out)

if __name__ == "__main__":
    cli.run_main(main)
