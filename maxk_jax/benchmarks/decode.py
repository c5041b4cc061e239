"""The decode timing that ``experiments/bench_accelerator.py`` and ``experiments/bench_decode_options.py``
share: the measured ceilings, one timed ``sampling.generate`` case against its
roofline, the ``--cases`` and ``--decode_attention`` syntax, and the tiny ``--smoke`` model."""
from __future__ import annotations

import time
from typing import Any

import numpy as np

from maxk_jax.benchmarks.timing import median_time


#: The decode cases of ``bench_accelerator --cases`` by default: the RL rollout of the base config (16 prompts x
#: n = 8, 512-token prompts), the paper's evaluation as first measured (1 x 128, 1,024-token prompt), and the RL
#: batch sizes (`RL_CASES`), all 256 new tokens.
RL_CASES = ("16x32:512/256", "4x256:512/256")   # 512 and 1,024 rows per step: 1.5B decode turns compute-bound
DEFAULT_CASES = ("16x8:512/256", "1x128:1024/256", *RL_CASES)


def parse_case(text: str) -> tuple[int, int, int, int]:
    """``"16x8:512/256"`` -> (prompts, n, prompt_len, new_tokens). ValueError naming the text."""
    try:
        rows, lens = text.split(":")
        p, n = (int(v) for v in rows.split("x"))
        tp, t = (int(v) for v in lens.split("/"))
    except ValueError:
        raise ValueError(f"--cases entry {text!r} is not PROMPTSxN:PROMPT_LEN/NEW_TOKENS, e.g. 16x8:512/256") from None
    if min(p, n, tp, t) < 1:
        raise ValueError(f"--cases entry {text!r}: every number must be >= 1")
    return p, n, tp, t


def cases_or_default(texts: list[str], own: tuple[int, int, int, int]) -> list[tuple[int, int, int, int]]:
    """``texts`` (``--cases`` entries) parsed, or when empty ``own`` followed by `RL_CASES` (each once)."""
    if texts:
        return [parse_case(c) for c in texts]
    return list(dict.fromkeys([own, *(parse_case(c) for c in RL_CASES)]))


def ceilings(bandwidth_mib: int, matmul_size: int) -> dict[str, float]:
    """Measured ceilings: ``hbm_bytes_per_s`` (elementwise x * a + b over float32, read + write)
    and ``bf16_flops`` (a square bf16 matmul), medians of 10 after a compiling call."""
    import jax
    import jax.numpy as jnp

    x = jnp.ones((bandwidth_mib * 2 ** 20 // 4,), jnp.float32)
    pass_ = jax.jit(lambda v: v * 1.0001 + 1.0)
    pass_(x).block_until_ready()
    bw_s, _ = median_time(lambda: pass_(x).block_until_ready(), 10)
    a = jax.random.normal(jax.random.key(0), (matmul_size, matmul_size), jnp.bfloat16)
    mm = jax.jit(lambda u, v: u @ v)
    mm(a, a).block_until_ready()
    mm_s, _ = median_time(lambda: mm(a, a).block_until_ready(), 10)
    return {"hbm_bytes_per_s": 2 * x.nbytes / bw_s, "bf16_flops": 2 * matmul_size ** 3 / mm_s,
            "bandwidth_mib": bandwidth_mib, "matmul_size": matmul_size}


def decode_case(config: Any, params: Any, case: tuple[int, int, int, int], repeats: int, bandwidth: float,
                seed: int) -> dict[str, Any]:
    """Time ``sampling.generate`` and its prefill alone for one case (see the module docstring)."""
    import jax

    from maxk_jax import sampling
    from maxk_jax.planning import gpu_plan

    p, n, tp, t = case
    rng = np.random.default_rng(seed)
    prompts = [rng.integers(4, config.vocab_size, size=tp).tolist() for _ in range(p)]
    calls = iter(range(10 ** 6))

    def gen() -> Any:
        out = sampling.generate(config, params, prompts, n=n, max_new_tokens=t, key=jax.random.key(next(calls)))
        jax.block_until_ready(out.tokens)
        return out

    t0 = time.perf_counter()
    out = gen()
    first = time.perf_counter() - t0
    steady, all_s = median_time(gen, repeats)
    steps = int(out.num_steps)
    if steps != t:
        raise RuntimeError(f"generate stopped after {steps} of {t} tokens without a stop token")
    settings = sampling.SamplerSettings(n=n, max_new_tokens=t)
    tokens, mask = sampling.pad_prompts(prompts, sampling.prompt_length_bucket(tp), sampling.prompt_batch_bucket(p, 1),
                                        config.pad_token_id or 0)
    prefill = lambda: jax.block_until_ready(sampling.prefill_prompts(config, settings, None, params, tokens, mask))  # noqa: E731
    prefill()
    prefill_s, _ = median_time(prefill, repeats)
    ms_step = 1e3 * (steady - prefill_s) / max(steps - 1, 1)
    ideal = gpu_plan.ideal_bytes(config, p, n, tp, t)["total"]
    roof_ms = 1e3 * ideal / bandwidth
    return {"prompts": p, "n": n, "prompt_len": tp, "new_tokens": t, "first_call_s": first, "steady_s": steady,
            "all_s": all_s, "prefill_s": prefill_s, "ms_per_step": ms_step, "tok_per_s": p * n * t / steady,
            "ideal_gb_per_step": ideal / 1e9, "roofline_ms_per_step": roof_ms,
            "roofline_tok_per_s": p * n / roof_ms * 1e3, "frac_of_roofline": roof_ms / ms_step}


def smoke_config() -> Any:
    """The tiny Qwen2 of every ``--smoke`` run (2 layers, 64 hidden, 512 positions)."""
    from maxk_jax.models import qwen2
    return qwen2.Qwen2Config(vocab_size=512, hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4,
                             num_kv_heads=2, max_position_embeddings=512, rope_theta=10000.0, pad_token_id=0)


def attention_variant(text: str) -> tuple[str, int]:
    """``"xla"`` -> ("xla", 0) (``"auto"`` likewise); ``"pallas"`` / ``"pallas:4"`` -> ("pallas", 0 / 4)
    (prompt-block splits, 0 = chosen per shape); a ``+draw`` suffix (``"pallas+draw"``) selects the
    fused LM head + draw as well (:func:`fused_draw`). ValueError naming the text."""
    from maxk_jax.models.qwen2_config import DECODE_ATTENTION
    base, plus, extra = text.partition("+")
    name, _, splits = base.partition(":")
    if name not in DECODE_ATTENTION or (splits and (name != "pallas" or not splits.isdigit()
                                                               or int(splits) < 1)) or (plus and extra != "draw"):
        raise ValueError(f"--decode_attention: {text!r} is not auto, xla, pallas or pallas:S with S >= 1 splits, "
                         "optionally followed by +draw")
    return name, int(splits or 0)


def fused_draw(text: str) -> bool:
    """Whether a --decode_attention entry asks for the fused LM head + draw (``+draw``:
    ``Qwen2Config.decode_draw="pallas"``)."""
    attention_variant(text)     # ValueError for a malformed entry
    return text.endswith("+draw")


def variant_config(config: Any, text: str) -> Any:
    """``config`` with the decode attention (and splits, and the draw) of a --decode_attention entry."""
    name, splits = attention_variant(text)
    return config.replace(decode_attention=name, decode_attention_splits=splits,
                          decode_draw="pallas" if fused_draw(text) else "xla")


def case_text(case: tuple[int, int, int, int]) -> str:
    """``(16, 8, 512, 256)`` -> ``"16x8:512/256"`` (the --cases syntax)."""
    p, n, tp, t = case
    return f"{p}x{n}:{tp}/{t}"
