"""The random RL rollout batch that the JAX train step and its PyTorch baseline both time."""
from __future__ import annotations

import numpy as np


def train_batch(rng: np.random.Generator, b: int, n: int, sp: int, t: int, vocab: int) -> dict[str, np.ndarray]:
    """A random rollout batch: left-padded prompts (lengths sp/2..sp, shared by a group of n),
    completions of t/2..t tokens, rewards in {0, 1}, behaviour log-probs in [-3, -0.05]."""
    prompt_lens = np.repeat(rng.integers(sp // 2, sp + 1, size=b // n), n)
    comp_lens = rng.integers(t // 2, t + 1, size=b)
    attn = np.zeros((b, sp + t), bool)
    for i in range(b):
        attn[i, sp - prompt_lens[i]:sp] = True
        attn[i, sp:sp + comp_lens[i]] = True
    comp = attn[:, sp:]
    return {"tokens": rng.integers(4, vocab, size=(b, sp + t)).astype(np.int32), "attention_mask": attn,
            "completion_mask": comp, "rewards": rng.integers(0, 2, size=b).astype(np.float32),
            "old_logp": np.where(comp, rng.uniform(-3.0, -0.05, comp.shape), 0.0).astype(np.float32)}
