"""Sampling: jit generation of n samples per prompt from one shared-prefix prefill, with the exact
log-probs of the distribution sampled from (temperature, top-k, top-p).

    out = generate(config, params, prompts, n=8, max_new_tokens=256, key=jax.random.key(0))
    out.tokens [P, n, T], out.logprobs [P, n, T] (float32), out.lengths [P, n]

Private modules: ``_sampler`` (prefill, decode loop, keys), ``_buckets`` (padding / bucketing of the
prompt batch), ``_filters`` (the sampling distribution: temperature, top-k / top-p truncation and its
log-probs) and ``_draw`` (the Gumbel-max draw of one token per row: three passes on CPU, one on GPU / TPU);
``lm_head_draw``: the decode step's LM head and draw as one Pallas GPU kernel (``Qwen2Config.decode_draw``);
``sampler``: the `Sampler` object (model config, weights, tokenizer, mesh, settings, prompt format)
that the RL rollout and the evaluation sample completions of problems with; ``rollout_copy``: the
weights in a layout made for decoding, made once per RL step.
"""
from maxk_jax.sampling._filters import (filtered_logits, greedy_logprobs, log_softmax_parts, sampling_logprobs,
                                        top_k_mask, top_p_mask, validate_filters)
from maxk_jax.sampling._buckets import (MIN_PROMPT_BUCKET, PROMPT_BUCKET_STEP, batch_shards, next_pow2,
                                        pad_prompts, prompt_batch_bucket, prompt_length_bucket)
from maxk_jax.sampling._draw import draw_one_pass, draw_three_pass, draw_tokens, first_argmax, gumbel_max
from maxk_jax.sampling._sampler import (SampleOutput, SamplerSettings, cache_shardings, decode_loop, draw, generate,
                                        prefill_prompts, is_stop, record, to_token_lists)
from maxk_jax.sampling._inputs import stop_id_array
from maxk_jax.sampling.sampler import (ProblemSamples, Sampler, decode_samples, default_eos_ids,
                                       default_pad_id)

__all__ = [
    "MIN_PROMPT_BUCKET", "PROMPT_BUCKET_STEP", "ProblemSamples", "SampleOutput", "Sampler", "SamplerSettings",
    "batch_shards", "decode_samples", "default_eos_ids", "default_pad_id",
    "cache_shardings", "decode_loop", "prefill_prompts", "draw", "draw_one_pass", "draw_three_pass", "draw_tokens",
    "first_argmax", "generate", "greedy_logprobs", "gumbel_max", "is_stop", "next_pow2",
    "filtered_logits", "log_softmax_parts", "pad_prompts", "prompt_batch_bucket", "prompt_length_bucket", "record", "sampling_logprobs",
    "stop_id_array", "to_token_lists", "top_k_mask", "top_p_mask", "validate_filters",
]
