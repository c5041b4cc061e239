"""The PyTorch + transformers baselines of ``experiments/bench_accelerator.py`` and
``experiments/bench_rl.py``: transformers ``generate`` and the RL train step's loss form in PyTorch,
on the same shapes; see bench_accelerator's docstring. torch and transformers are optional: they are
imported inside the functions (a CUDA device off ``--smoke``), so importing this module needs neither."""
from __future__ import annotations

import time
from typing import Any

import numpy as np

from maxk_jax.benchmarks.timing import median_time


def _torch_device() -> Any:
    import torch
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _torch_sync() -> None:
    import torch
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _torch_free() -> None:
    """Hand the torch caching allocator's memory back to the driver (JAX runs after the baselines)."""
    import gc

    import torch
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _hf_model(config: Any, dtype: Any) -> Any:
    import torch
    import transformers

    hf = transformers.Qwen2Config(**{k: v for k, v in config.to_hf_dict().items() if k != "architectures"})
    torch.manual_seed(0)
    with torch.device(_torch_device()):    # random init on the device (a 1.5B init on the host takes long)
        return transformers.AutoModelForCausalLM.from_config(hf, attn_implementation="sdpa", dtype=dtype)


def hf_generate(config: Any, case: tuple[int, int, int, int], seed: int) -> dict[str, Any]:
    """transformers ``generate`` (bf16, sdpa, sampling, exactly new_tokens tokens per sample)."""
    import torch

    p, n, tp, t = case
    model = _hf_model(config, torch.bfloat16).eval()
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, config.vocab_size, (p, tp), generator=g).to(model.device)

    def gen() -> Any:
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=True,
                                 num_return_sequences=n, max_new_tokens=t, min_new_tokens=t, pad_token_id=0)
        _torch_sync()
        return out

    t0 = time.perf_counter()
    out = gen()
    first = time.perf_counter() - t0
    if tuple(out.shape) != (p * n, tp + t):
        raise RuntimeError(f"transformers generate returned {tuple(out.shape)}, expected {(p * n, tp + t)}")
    steady, all_s = median_time(gen, 2)
    del model, out
    _torch_free()
    return {"prompts": p, "n": n, "prompt_len": tp, "new_tokens": t, "first_call_s": first, "steady_s": steady,
            "all_s": all_s, "tok_per_s": p * n * t / steady}


def torch_train(config: Any, data: dict[str, np.ndarray], n: int, micro: int, repeats: int) -> dict[str, Any]:
    """The same loss form in PyTorch + transformers (see the module docstring)."""
    import torch

    dev = _torch_device()
    model = _hf_model(config, torch.float32)
    model.config.use_cache = False
    (getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable)()
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-6)
    tokens = torch.from_numpy(data["tokens"]).long().to(dev)
    attn = torch.from_numpy(data["attention_mask"]).long().to(dev)
    positions = torch.clamp(attn.cumsum(-1) - 1, min=0)
    mask = torch.from_numpy(data["completion_mask"]).to(dev)
    old = torch.from_numpy(data["old_logp"]).to(dev)
    r = torch.from_numpy(data["rewards"]).view(-1, n).to(dev)
    coef = ((r - r.mean(-1, keepdim=True)) / (r.std(-1, unbiased=False, keepdim=True) + 1e-6)).view(-1)
    b, t = mask.shape
    eps = 0.2

    def step() -> float:
        opt.zero_grad(set_to_none=True)
        total = 0.0
        for rows in torch.arange(b, device=dev).chunk(micro):
            with torch.autocast(dev.type, dtype=torch.bfloat16):
                logits = model(input_ids=tokens[rows], attention_mask=attn[rows], position_ids=positions[rows],
                               logits_to_keep=t + 1).logits
            logp = torch.log_softmax(logits[:, :-1].float(), -1).gather(-1, tokens[rows, -t:, None]).squeeze(-1)
            m, c = mask[rows], coef[rows, None]
            ratio = torch.exp(torch.where(m, logp - old[rows], torch.zeros_like(logp))).detach()
            clipped = ((c > 0) & (ratio > 1 + eps)) | ((c < 0) & (ratio < 1 - eps))
            per_tok = torch.where(m & ~clipped, -c * logp, torch.zeros_like(logp))
            loss = (per_tok.sum(-1) / m.sum(-1).clamp(min=1)).sum() / b
            loss.backward()
            total += float(loss.detach())
        opt.step()
        _torch_sync()
        return total

    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    loss0 = step()
    first = time.perf_counter() - t0
    steady, all_s = median_time(step, repeats)
    out = {"first_call_s": first, "steady_s": steady, "all_s": all_s, "loss0": loss0,
           "tokens_per_s": data["tokens"].size / steady, "peak_mem_gb": None}
    if dev.type == "cuda":
        out["peak_mem_gb"] = torch.cuda.max_memory_allocated() / 1e9
    del model, opt
    _torch_free()
    return out
