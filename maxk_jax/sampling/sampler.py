"""The sampler object: what travels together when a model writes completions of problems.

    sampler = Sampler.create(config, params, tokenizer, SamplerSettings(n=8, max_new_tokens=256),
                             mesh=mesh, prompt_format="full")
    out = sampler.sample(problems, keys)      # keys [P, m]: m completions of each of P problems
    out.texts[i][j], out.tokens [P, m, T], out.logprobs [P, m, T], out.lengths [P, m]
    sampler.replace(params=new_params)         # the same sampler with other weights (or a rollout copy)

In the spirit of gemma's ``Sampler``: the model config, the weights (parameters or the RL step's
rollout copy), the tokenizer, the mesh, the `SamplerSettings` and the prompt format are held once,
so the RL rollout (`maxk_jax.rl.rollout.collect`), the periodic evaluation and the evaluation
entry point (`maxk_jax.eval.run.evaluate`) sample completions the same way. The functional core
stays `maxk_jax.sampling.generate`; `Sampler.generate` is that call with the held arguments.

Stop ids default to `default_eos_ids` (tokenizer + model config); the pad id to `default_pad_id`
(the tokenizer's pad token, else the model config's, else 0) -- the one place both rules live.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import jax
import numpy as np

from maxk_jax.data.problem import Problem
from maxk_jax.data.prompts import PROMPT_FORMATS, encode_problems
from maxk_jax.cli.fields import check_int, int_tuple
from maxk_jax.models.tokenizer_protocol import Tokenizer
from maxk_jax.sampling._buckets import MIN_PROMPT_BUCKET
from maxk_jax.sampling._sampler import SampleOutput, SamplerSettings, generate


def default_eos_ids(config: Any, tokenizer: Tokenizer, extra: Iterable[int] = ()) -> list[int]:
    """Stop ids: the tokenizer's eos token, the model config's eos id(s) and `extra` (e.g. the
    ``eos_token_id`` of a checkpoint's generation_config.json), sorted and unique."""
    ids = {int(e) for e in extra}
    for value in (getattr(tokenizer, "eos_token_id", None), getattr(config, "eos_token_id", None)):
        if isinstance(value, (list, tuple)):
            ids.update(int(v) for v in value)
        elif value is not None:
            ids.add(int(value))
    if not ids:
        raise ValueError("neither the tokenizer nor the model config defines an eos token; pass eos_id")
    return sorted(ids)


def default_pad_id(config: Any, tokenizer: Tokenizer | None = None) -> int:
    """The pad id of sampled rows and of training batches: the tokenizer's pad token, else the model
    config's ``pad_token_id``, else 0."""
    pad = getattr(tokenizer, "pad_token_id", None)
    if pad is None:
        pad = getattr(config, "pad_token_id", None) or 0
    return int(pad)


def decode_samples(tokenizer: Tokenizer, tokens: np.ndarray, lengths: np.ndarray) -> list[tuple[str, ...]]:
    """tokens [P, n, T], lengths [P, n] -> texts [P][n] (cut at lengths, special tokens removed)."""
    return [tuple(tokenizer.batch_decode([tokens[i, j, :lengths[i, j]].tolist() for j in range(tokens.shape[1])],
                                         skip_special_tokens=True))
            for i in range(tokens.shape[0])]


@dataclasses.dataclass(frozen=True)
class ProblemSamples:
    """m completions of each of P problems (host numpy arrays, T = max_new_tokens)."""

    prompts: list[list[int]]          # [P][Tp_i] prompt token ids
    inside_block: list[bool]          # [P] the completion starts inside an opened code fence
    tokens: np.ndarray                # [P, m, T] int32, pad id after the stop token
    logprobs: np.ndarray              # [P, m, T] float32 under the sampled-from distribution
    mask: np.ndarray                  # [P, m, T] bool: t < lengths
    lengths: np.ndarray               # [P, m] int32 generated tokens incl. the stop token
    finished: np.ndarray              # [P, m] bool: ended with a stop token
    texts: list[tuple[str, ...]]      # [P][m] decoded completions


@dataclasses.dataclass(frozen=True)
class Sampler:
    """A model that writes completions: `config` (Qwen2Config), `params` (parameters or a rollout
    copy; None in a template that gets its weights by `replace`), `tokenizer`, `settings`
    (`SamplerSettings`: n, max_new_tokens, temperature, top-k, top-p), stop ids `eos_ids`, `pad_id`,
    the `mesh` the weights live on, the prompt format ("full" | "statement") with its
    `render_kwargs` pairs, and the smallest prompt bucket. Build with `create`."""

    config: Any
    params: Any
    tokenizer: Tokenizer
    settings: SamplerSettings
    eos_ids: tuple[int, ...]
    pad_id: int
    mesh: jax.sharding.Mesh | None = None
    prompt_format: str = "full"
    render_kwargs: tuple[tuple[str, Any], ...] = ()
    min_prompt_bucket: int = MIN_PROMPT_BUCKET

    def __post_init__(self) -> None:
        if not isinstance(self.settings, SamplerSettings):
            raise ValueError(f"settings={self.settings!r} must be a sampling.SamplerSettings")
        if self.prompt_format not in PROMPT_FORMATS:
            raise ValueError(f"prompt_format={self.prompt_format!r} is not one of {PROMPT_FORMATS}")
        int_tuple(self, "eos_ids", "eos_ids", 0)
        if not self.eos_ids:
            raise ValueError("eos_ids=() must name at least one stop id")
        check_int(self.pad_id, "pad_id", 0)
        check_int(self.min_prompt_bucket, "min_prompt_bucket")

    @classmethod
    def create(cls, config: Any, params: Any, tokenizer: Tokenizer, settings: SamplerSettings, *,
               mesh: jax.sharding.Mesh | None = None, eos_ids: Sequence[int] = (), pad_id: int | None = None,
               prompt_format: str = "full", render_kwargs: Mapping[str, Any] | None = None,
               min_prompt_bucket: int = MIN_PROMPT_BUCKET) -> Sampler:
        """A `Sampler` with the default stop ids (`default_eos_ids`, when `eos_ids` is empty) and
        pad id (`default_pad_id`, when None)."""
        return cls(config=config, params=params, tokenizer=tokenizer, settings=settings,
                   eos_ids=tuple(eos_ids or default_eos_ids(config, tokenizer)),
                   pad_id=default_pad_id(config, tokenizer) if pad_id is None else pad_id, mesh=mesh,
                   prompt_format=prompt_format, render_kwargs=tuple(dict(render_kwargs or {}).items()),
                   min_prompt_bucket=min_prompt_bucket)

    def replace(self, **changes: Any) -> Sampler:
        """A copy with fields replaced (e.g. ``params=`` the weights of this step, ``settings=``)."""
        return dataclasses.replace(self, **changes)

    def encode(self, problems: Sequence[Problem]) -> tuple[list[list[int]], list[bool]]:
        """Prompt token ids [P][Tp_i] of `problems` in this sampler's format, and whether each
        completion starts inside a code fence [P]."""
        return encode_problems(problems, self.tokenizer, self.prompt_format, dict(self.render_kwargs))

    def generate(self, prompts: Sequence[Sequence[int]], key: jax.Array, *, n: int | None = None) -> SampleOutput:
        """`maxk_jax.sampling.generate` of token-id prompts [P][Tp_i] with the held arguments: n
        (default ``settings.n``) samples each, key one root key or per-sample keys [P, n]."""
        if self.params is None:
            raise ValueError("this Sampler has no weights: sampler.replace(params=...) first")
        s = self.settings
        return generate(self.config, self.params, prompts, n=s.n if n is None else n,
                        max_new_tokens=s.max_new_tokens, key=key, temperature=s.temperature, top_p=s.top_p,
                        top_k=s.top_k, eos_id=list(self.eos_ids), pad_id=self.pad_id, mesh=self.mesh,
                        min_prompt_bucket=self.min_prompt_bucket)

    def sample(self, problems: Sequence[Problem], keys: jax.Array,
               prompts: tuple[list[list[int]], list[bool]] | None = None) -> ProblemSamples:
        """m = ``keys.shape[1]`` completions of each problem with the per-sample keys [P, m],
        fetched to the host and decoded. `prompts`: the `encode` of `problems` when the caller
        already has it."""
        ids, inside = self.encode(problems) if prompts is None else prompts
        out = self.generate(ids, keys, n=int(keys.shape[1]))
        tokens, logprobs, mask, lengths, finished = (np.asarray(x) for x in jax.device_get(
            (out.tokens, out.logprobs, out.mask, out.lengths, out.finished)))
        if tokens.shape[:2] != (len(ids), int(keys.shape[1])):
            raise ValueError(f"sampler returned tokens {tokens.shape}, expected [{len(ids)}, {int(keys.shape[1])}, T]")
        return ProblemSamples(prompts=ids, inside_block=inside, tokens=tokens, logprobs=logprobs, mask=mask,
                              lengths=lengths, finished=finished,
                              texts=decode_samples(self.tokenizer, tokens, lengths))
