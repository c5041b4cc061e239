"""Train-step throughput: our jitted train_step vs the same GRPO step in PyTorch / transformers.

    .venv/bin/python -m experiments.bench_train                    # hidden 256, 4 layers, 64 x 128
    .venv/bin/python -m experiments.bench_train --steps=2 --hidden=64 --layers=2   # quick check

Both sides do one optimizer update per step on the SAME rollout batch with the SAME weights
(random Qwen2 saved with ``convert.save_hf`` and loaded by ``Qwen2ForCausalLM.from_pretrained``):
forward over prompt + completion, log-probs of the completion tokens, GRPO advantages (z-scored
rewards), clipped surrogate (eps 0.2) averaged per sequence then over sequences, backward,
global-norm clipping to 1.0, Adam.  The JAX side is ``training.make_train_step`` (estimator
"grpo", entropy metric off, one micro-batch); the PyTorch side is written out below.  The step-0
losses of both sides are compared (same computation -> same number).  Reported: sequence tokens
(B x S) per second over ``--steps`` timed steps after ``--warmup`` untimed ones (compile time of
the first JAX call reported separately), and the ratio ours / PyTorch (goal >= 1).
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
flags.DEFINE_integer("steps", 5, "Timed steps per side.")
flags.DEFINE_float("learning_rate", 1e-5, "Adam learning rate (both sides).")
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
    """Time training.make_train_step; returns step-0 loss, compile and per-step seconds."""
    from maxk_jax import sharding
    from maxk_jax.rl import training

    cfg = training.StepConfig(estimator="grpo", k=1, n=FLAGS.n, eps_low=EPS, eps_high=EPS,
                              compute_entropy=False)
    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(FLAGS.learning_rate))
    mesh = sharding.make_mesh(1, 1, 1, devices=jax.devices()[:1])
    state, sh = training.create_train_state(config, params, tx, mesh)
    step = training.make_train_step(config, cfg, tx, mesh, sh)
    b = data["tokens"].shape[0]
    batch = training.shard_batch(training.Batch(
        tokens=data["tokens"], attention_mask=data["attention_mask"], completion_mask=data["completion_mask"],
        old_logp=old_logp, rewards=data["rewards"], valid=np.ones(b, bool),
        answer_ids=np.zeros(b, np.int32)), mesh)
    t0 = time.perf_counter()
    state, metrics = step(state, batch)
    loss0 = float(metrics["loss"])
    compile_s = time.perf_counter() - t0
    for _ in range(FLAGS.warmup - 1):
        state, metrics = step(state, batch)
    jax.block_until_ready(state)
    t0 = time.perf_counter()
    for _ in range(FLAGS.steps):
        state, metrics = step(state, batch)
    jax.block_until_ready(state)
    return {"loss_step0": loss0, "first_call_s": compile_s, "step_s": (time.perf_counter() - t0) / FLAGS.steps}


def torch_side(path: str, data: dict[str, np.ndarray], old_logp: np.ndarray) -> dict[str, Any]:
    """The same GRPO step with transformers' Qwen2ForCausalLM + torch.optim.Adam."""
    import torch
    import transformers

    model = transformers.Qwen2ForCausalLM.from_pretrained(path, dtype=torch.float32,
                                                          attn_implementation="eager")
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
        logits = model(input_ids=tokens, attention_mask=attn, position_ids=positions).logits
        logits = logits[:, -t - 1:-1].float()
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

    loss0 = step()
    for _ in range(FLAGS.warmup - 1):
        step()
    t0 = time.perf_counter()
    for _ in range(FLAGS.steps):
        step()
    return {"loss_step0": loss0, "step_s": (time.perf_counter() - t0) / FLAGS.steps,
            "torch_threads": torch.get_num_threads()}


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments {argv[1:]}")
    if FLAGS.warmup < 1 or FLAGS.steps < 1:
        raise ValueError(f"--warmup={FLAGS.warmup} and --steps={FLAGS.steps} must be >= 1")
    from maxk_jax import sharding
    from maxk_jax.rl import training
    from maxk_jax.models import convert, qwen2

    config = qwen2.Qwen2Config(vocab_size=FLAGS.vocab, hidden_size=FLAGS.hidden,
                               intermediate_size=4 * FLAGS.hidden, num_layers=FLAGS.layers,
                               num_heads=FLAGS.heads, num_kv_heads=FLAGS.kv_heads, rope_theta=10000.0,
                               max_position_embeddings=max(256, FLAGS.prompt_len + FLAGS.completion_len),
                               pad_token_id=0)
    params = qwen2.init_params(config, jax.random.key(FLAGS.seed))
    rng = np.random.default_rng(FLAGS.seed)
    data = make_batch(rng, FLAGS.prompts, FLAGS.n, FLAGS.prompt_len, FLAGS.completion_len, FLAGS.vocab)
    # behaviour log-probs = current policy's + noise, so some tokens fall outside the trust region
    cfg = training.StepConfig(estimator="grpo", k=1, n=FLAGS.n)
    mesh = sharding.make_mesh(1, 1, 1, devices=jax.devices()[:1])
    b = data["tokens"].shape[0]
    probe = training.Batch(tokens=data["tokens"], attention_mask=data["attention_mask"],
                           completion_mask=data["completion_mask"], old_logp=np.zeros(data["completion_mask"].shape, np.float32),
                           rewards=data["rewards"], valid=np.ones(b, bool), answer_ids=np.zeros(b, np.int32))
    _, sh = training.abstract_train_state(config, optax.adam(1e-3), mesh)
    lp = np.asarray(training.make_logprob_fn(config, cfg, mesh, sh.params)(params, training.shard_batch(probe, mesh)))
    old_logp = np.where(data["completion_mask"], lp + rng.uniform(-0.3, 0.3, lp.shape), 0.0).astype(np.float32)

    with tempfile.TemporaryDirectory() as tmp:
        convert.save_hf(config, params, tmp)
        torch_res = torch_side(tmp, data, old_logp)
    jax_res = jax_side(config, params, data, old_logp)
    tokens = float(data["tokens"].size)
    ours, ref = tokens / jax_res["step_s"], tokens / torch_res["step_s"]
    result = {
        "config": {k: FLAGS[k].value for k in ("hidden", "layers", "heads", "kv_heads", "vocab", "prompts", "n",
                                               "prompt_len", "completion_len", "warmup", "steps", "seed")},
        "params": qwen2.param_count(config), "tokens_per_step": tokens,
        "jax": {**jax_res, "tokens_per_s": ours}, "torch": {**torch_res, "tokens_per_s": ref},
        "ratio_jax_over_torch": ours / ref,
        "loss_step0_abs_diff": abs(jax_res["loss_step0"] - torch_res["loss_step0"]),
        "cpu_count": os.cpu_count(), "load_avg": os.getloadavg(),
    }
    out = pathlib.Path(FLAGS.results_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench_train.json").write_text(json.dumps(result, indent=2))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.bar(["maxk_jax train_step", "PyTorch / transformers"], [ours, ref], color=["C0", "C1"])
    ax.set_ylabel("sequence tokens / s")
    ax.set_title(f"GRPO train step, {result['params']:,} params, {int(tokens)} tokens/step\n"
                 f"ratio {ours / ref:.2f}x", fontsize=9)
    fig.tight_layout()
    fig.savefig(out / "bench_train.png", dpi=120)
    plt.close(fig)
    print(f"params {result['params']:,}; batch {b} x {data['tokens'].shape[1]} = {int(tokens)} tokens/step")
    print(f"| side | step s | tokens/s | step-0 loss |\n|---|---:|---:|---:|\n"
          f"| maxk_jax | {jax_res['step_s']:.4f} | {ours:,.0f} | {jax_res['loss_step0']:.6f} |\n"
          f"| PyTorch | {torch_res['step_s']:.4f} | {ref:,.0f} | {torch_res['loss_step0']:.6f} |")
    print(f"ratio ours / PyTorch: {ours / ref:.2f}x (first JAX call incl. compile: "
          f"{jax_res['first_call_s']:.1f} s); wrote {out}/bench_train.{{json,png}}")


if __name__ == "__main__":
    app.run(main)
