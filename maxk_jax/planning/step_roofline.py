"""What bounds a decode step and an RL step, from the model's shapes alone (no compile, no device).

``decode_step`` splits one decode step's floor at the average step (``new_tokens / 2`` own tokens
generated) into the bytes it must read (bf16 weights once, the KV of every prompt once and of each row's
own tokens: ``gpu_plan.ideal_bytes``) and the FLOPs it must run (the projections and LM head over every
row, the attention over each row's context), each in seconds at a ``bandwidth`` and a matmul ``peak``;
the step's roofline is the larger of the memory time and the compute time, and ``bound`` names the
largest single term ("weights", "kv", "matmul" or "attention").

``rl_step`` predicts the parts of one RL step (``rl.loop.rl_step``) at their floors: the rollout =
``new_tokens`` decode steps at the roofline, the judge = rows / (programs per second per core x host
cores), the reference pass = one forward (2 FLOPs per parameter per token), the update = PPO iterations x
a forward + backward (6 FLOPs per parameter per token, as for the model FLOPs of ``bench_train``) over
every sequence's prompt + completion tokens; or, given ``train_tokens_per_s`` (a measured train step),
the update at that rate. ``bound`` is the largest part.
"""
from __future__ import annotations

from typing import Any

from maxk_jax.planning import gpu_plan
from maxk_jax.models import qwen2

#: The highest ceilings measured on one H200 (docs/accelerators.md section 4: an elementwise pass, a bf16
#: 8192-cubed matmul), the roofline's denominators there.
H200_MEASURED = {"bandwidth": 3.57e12, "peak_flops": 652e12}
H200_TEXT = "3.57 TB/s and 652 TFLOP/s (H200, measured)"


def matmul_params(config: qwen2.Qwen2Config) -> int:
    """Parameters a token's forward pass multiplies with: every parameter but the embedding table's
    lookup (a tied table is the LM head, counted once)."""
    total = qwen2.param_count(config)
    return total if config.tie_word_embeddings else total - config.vocab_size * config.hidden_size


def decode_step(config: qwen2.Qwen2Config, prompts: int, n: int, prompt_len: int, new_tokens: int, *,
                bandwidth: float, peak_flops: float) -> dict[str, Any]:
    """Floors of one decode step of ``prompts x n`` rows at the average step (see the module docstring):
    bytes (``weight_bytes``, ``kv_bytes``), FLOPs (``matmul_flops``, ``attention_flops``), each term's
    seconds (``weights_s``, ``kv_s``, ``matmul_s``, ``attention_s``), ``memory_s``, ``compute_s``,
    ``roofline_s`` (their max), ``bound`` (the largest term) and ``tokens_per_s`` (rows / roofline_s)."""
    for name, value in (("prompts", prompts), ("n", n), ("prompt_len", prompt_len), ("new_tokens", new_tokens)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}={value!r} must be an int >= 1")
    if not (bandwidth > 0 and peak_flops > 0):
        raise ValueError(f"bandwidth={bandwidth!r} and peak_flops={peak_flops!r} must be > 0")
    rows = prompts * n
    ideal = gpu_plan.ideal_bytes(config, prompts, n, prompt_len, new_tokens)
    context = prompt_len + new_tokens // 2
    out: dict[str, Any] = {
        "rows": rows, "weight_bytes": ideal["weights"], "kv_bytes": ideal["kv"],
        "matmul_flops": 2 * rows * matmul_params(config),
        # q.k and p.v over the context, per query head and layer
        "attention_flops": 4 * rows * config.num_layers * config.num_heads * config.head_dim_ * context}
    out.update(weights_s=out["weight_bytes"] / bandwidth, kv_s=out["kv_bytes"] / bandwidth,
               matmul_s=out["matmul_flops"] / peak_flops, attention_s=out["attention_flops"] / peak_flops)
    out["memory_s"] = out["weights_s"] + out["kv_s"]
    out["compute_s"] = out["matmul_s"] + out["attention_s"]
    out["roofline_s"] = max(out["memory_s"], out["compute_s"])
    out["bound"] = max(("weights", "kv", "matmul", "attention"), key=lambda k: out[f"{k}_s"])
    out["tokens_per_s"] = rows / out["roofline_s"]
    return out


def rl_step(config: qwen2.Qwen2Config, prompts: int, n: int, prompt_len: int, new_tokens: int, *,
            ppo_iterations: int, bandwidth: float, peak_flops: float, judge_per_s_per_core: float,
            host_cores: int, train_tokens_per_s: float | None = None) -> dict[str, Any]:
    """Predicted seconds of one RL step's parts (see the module docstring): ``rollout_s``, ``judge_s``,
    ``logprob_s``, ``update_s`` (``update_basis`` says which rule), ``step_s`` (their sum, the parts run
    one after the other), ``bound`` (the largest part) and ``decode`` (the `decode_step` floors)."""
    if isinstance(ppo_iterations, bool) or not isinstance(ppo_iterations, int) or ppo_iterations < 1:
        raise ValueError(f"ppo_iterations={ppo_iterations!r} must be an int >= 1")
    if not (judge_per_s_per_core > 0 and host_cores >= 1):
        raise ValueError(f"judge_per_s_per_core={judge_per_s_per_core!r} must be > 0 and host_cores="
                         f"{host_cores!r} >= 1")
    step = decode_step(config, prompts, n, prompt_len, new_tokens, bandwidth=bandwidth, peak_flops=peak_flops)
    rows = prompts * n
    tokens = rows * (prompt_len + new_tokens)
    forward = 2 * matmul_params(config) * tokens
    out: dict[str, Any] = {
        "rows": rows, "sequence_tokens": tokens, "decode": step,
        "rollout_s": new_tokens * step["roofline_s"],
        "judge_s": rows / (judge_per_s_per_core * host_cores),
        "logprob_s": forward / peak_flops}
    if train_tokens_per_s:
        out["update_s"], out["update_basis"] = ppo_iterations * tokens / train_tokens_per_s, "measured train rate"
    else:
        out["update_s"], out["update_basis"] = ppo_iterations * 3 * forward / peak_flops, "matmul floor"
    parts = ("rollout_s", "judge_s", "logprob_s", "update_s")
    out["step_s"] = sum(out[p] for p in parts)
    out["bound"] = max(parts, key=lambda p: out[p])[:-2]
    return out
