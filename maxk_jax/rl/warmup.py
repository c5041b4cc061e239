"""Supervised warm-up: next-token cross-entropy on (prompt, completion) pairs, prompt tokens masked.

Used to turn a randomly initialised tiny Qwen2 (``maxk_jax.models.tiny``) into an imperfect but not
hopeless base policy for the synthetic task before RL::

    examples = synthetic_examples(train, tokenizer, np.random.default_rng(0), per_problem=4, noise=0.3)
    cfg = WarmupConfig(steps=400, batch_size=32, learning_rate=3e-3, seed=0)
    result = run_warmup(model_config, params, examples, cfg)      # tqdm progress bar
    result.params, result.losses                                     # trained params, loss per step

Data layout. An `Example` is ``prompt`` token ids (the chat-template prompt, ending with the
assistant header) and ``completion`` token ids (the answer, ending with the end-of-turn token). A
batch row is ``prompt + completion`` RIGHT-padded to the batch length; the loss counts only the
positions whose *target* is a completion token (the first completion token is predicted from the
last prompt token), so the model is never trained to produce prompts.

Bucketing. Each epoch the examples are shuffled (``numpy`` generator seeded by
`WarmupConfig.seed`), cut into windows of ``sort_window`` batches, sorted by length inside each
window and cut into batches; batches are padded to the next multiple of `WarmupConfig.length_bucket`
and visited in random order. So a batch of short examples costs a short step, and only a handful
of distinct shapes (one compilation each) ever reach the jitted step.

The step (`make_warmup_step`) is one ``jax.jit`` (params and optimizer state donated) of
loss -> grad -> optax update (global-norm clipping + Adam(W) with linear warm-up then cosine decay).
"""
from __future__ import annotations

import dataclasses
import math
import numbers
import time
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
import optax
from tqdm.auto import tqdm

from maxk_jax.data.prompts import chat_prompt_ids  # noqa: F401  (re-exported: the warm-up prompt format)
from maxk_jax.rl import logprobs
from maxk_jax.models import qwen2
from maxk_jax.rl import training
from maxk_jax.models.tokenizer_protocol import Tokenizer

Params = Any


class Example(NamedTuple):
    """One supervised pair: ``prompt`` and ``completion`` token ids (completion ends with eos)."""

    prompt: tuple[int, ...]
    completion: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class WarmupConfig:
    """Warm-up hyper-parameters. `seed` (data order) is required: no silent default seed.

    steps: optimizer updates; batch_size: rows per step; learning_rate: peak Adam lr (linear
    warm-up over ``lr_warmup_steps``, then cosine decay to ``final_lr_fraction * learning_rate``);
    weight_decay > 0 uses AdamW; max_grad_norm: global-norm clipping (None = off);
    length_bucket: batch lengths are multiples of this; sort_window: batches per length-sorted
    window (1 = no length sorting); logprob_chunk: vocabulary columns per chunk of the LM-head
    pass (``logprobs.token_logprobs``'s vocab_chunk; None = ``logprobs.pick_vocab_chunk(V)``).
    """

    steps: int
    seed: int
    batch_size: int = 32
    learning_rate: float = 3e-3
    lr_warmup_steps: int = 0
    final_lr_fraction: float = 0.1
    weight_decay: float = 0.0
    max_grad_norm: Optional[float] = 1.0
    length_bucket: int = 32
    sort_window: int = 16
    logprob_chunk: Optional[int] = None

    def __post_init__(self) -> None:
        for name in ("steps", "seed", "batch_size", "lr_warmup_steps", "length_bucket", "sort_window"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, numbers.Integral):
                raise ValueError(f"WarmupConfig.{name} must be an int, got {v!r}")
        checks = [("steps", self.steps >= 1), ("batch_size", self.batch_size >= 1),
                  ("learning_rate", isinstance(self.learning_rate, numbers.Real)
                   and math.isfinite(self.learning_rate) and self.learning_rate > 0),
                  ("lr_warmup_steps", 0 <= self.lr_warmup_steps <= self.steps),
                  ("final_lr_fraction", 0.0 <= self.final_lr_fraction <= 1.0),
                  ("weight_decay", self.weight_decay >= 0),
                  ("max_grad_norm", self.max_grad_norm is None or self.max_grad_norm > 0),
                  ("length_bucket", self.length_bucket >= 1), ("sort_window", self.sort_window >= 1),
                  ("logprob_chunk", self.logprob_chunk is None or (
                      isinstance(self.logprob_chunk, numbers.Integral) and not isinstance(self.logprob_chunk, bool)
                      and self.logprob_chunk >= 1))]
        for name, ok in checks:
            if not ok:
                raise ValueError(f"WarmupConfig.{name}={getattr(self, name)!r} is out of range "
                                 f"(steps={self.steps})")


class WarmupResult(NamedTuple):
    """Output of `run_warmup`: trained params, the loss of every step [steps] (float64 numpy),
    tokens per step [steps] (padded batch size B*L), and wall time split into the first step
    (compilation included) and the rest."""

    params: Params
    losses: np.ndarray
    batch_tokens: np.ndarray
    first_step_s: float
    total_s: float


# ----------------------------------------------------------------------------------------------
# Examples
# ----------------------------------------------------------------------------------------------
def encode_example(tokenizer: Tokenizer, user_message: str, completion: str) -> Example:
    """`Example` of a user message and an answer: chat prompt ids, answer ids + the eos id."""
    eos = tokenizer.eos_token_id
    if eos is None:
        raise ValueError("the tokenizer has no eos token: completions must end with one")
    if not isinstance(completion, str) or not completion.strip():
        raise ValueError(f"completion must be a non-empty str, got {completion!r:.80}")
    ids = list(tokenizer(completion, add_special_tokens=False)["input_ids"]) + [int(eos)]
    return Example(tuple(chat_prompt_ids(tokenizer, user_message)), tuple(ids))


def synthetic_examples(problems: Sequence[Any], tokenizer: Tokenizer, rng: np.random.Generator, *,
                       per_problem: int, noise: float) -> list[Example]:
    """Warm-up pairs for synthetic problems: the raw statement as the user message and
    ``per_problem`` solutions from `maxk_jax.data.synthetic_solutions.noisy_solutions` (diverse rewrites,
    a `noise` fraction of near misses) as bare-code answers. Problem-major order."""
    from maxk_jax.data import synthetic_solutions

    eos = tokenizer.eos_token_id
    if eos is None:
        raise ValueError("the tokenizer has no eos token: completions must end with one")
    prompts, codes = [], []
    for p in problems:
        prompt = tuple(chat_prompt_ids(tokenizer, p.prompt))
        for code in synthetic_solutions.noisy_solutions(p, rng, per_problem, noise):
            prompts.append(prompt)
            codes.append(code)
    encoded = tokenizer(codes, add_special_tokens=False)["input_ids"] if codes else []
    out = [Example(prompt, tuple(ids) + (int(eos),)) for prompt, ids in zip(prompts, encoded)]
    return out


# ----------------------------------------------------------------------------------------------
# Batching
# ----------------------------------------------------------------------------------------------
def pad_batch(examples: Sequence[Example], length: int, pad_id: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Right-pad ``prompt + completion`` rows to `length`: (tokens [B, L] int32, attention_mask
    [B, L] bool, loss_mask [B, L-1] bool where ``loss_mask[b, t]`` = token t+1 is a completion
    token, i.e. the target of position t counts)."""
    b = len(examples)
    tokens = np.full((b, length), pad_id, np.int32)
    attn = np.zeros((b, length), bool)
    loss_mask = np.zeros((b, length - 1), bool)
    for i, ex in enumerate(examples):
        row = ex.prompt + ex.completion
        if len(row) > length:
            raise ValueError(f"example {i} has {len(row)} tokens > batch length {length}")
        tokens[i, :len(row)] = row
        attn[i, :len(row)] = True
        loss_mask[i, len(ex.prompt) - 1: len(row) - 1] = True
    return tokens, attn, loss_mask


def bucketed_batches(examples: Sequence[Example], cfg: WarmupConfig, pad_id: int,
                     max_len: Optional[int] = None) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Endless stream of padded batches (see the module docstring): each epoch shuffles, sorts by
    length within windows of ``sort_window`` batches, pads every batch to a multiple of
    ``length_bucket`` (capped at `max_len`) and yields the batches in random order. The last
    partial batch of an epoch is filled with examples from the start of the epoch's order."""
    n, bsz = len(examples), cfg.batch_size
    lengths = np.array([len(e.prompt) + len(e.completion) for e in examples])
    rng = np.random.default_rng(cfg.seed)
    while True:
        order = rng.permutation(n)
        if n % bsz:
            order = np.concatenate([order, order[: bsz - n % bsz]])
        window = bsz * cfg.sort_window
        batches = []
        for s in range(0, len(order), window):
            chunk = order[s: s + window]
            chunk = chunk[np.argsort(lengths[chunk], kind="stable")]
            batches += [chunk[j: j + bsz] for j in range(0, len(chunk), bsz)]
        for bi in rng.permutation(len(batches)):
            idx = batches[bi]
            longest = int(lengths[idx].max())
            length = -(-longest // cfg.length_bucket) * cfg.length_bucket
            if max_len is not None:
                length = min(length, max_len)
            yield pad_batch([examples[i] for i in idx], length, pad_id)


# ----------------------------------------------------------------------------------------------
# Loss and step
# ----------------------------------------------------------------------------------------------
def masked_nll(logits: jax.Array, tokens: jax.Array, loss_mask: jax.Array) -> jax.Array:
    """Mean next-token NLL over counted targets. logits [B, L, V] (position t predicts token t+1),
    tokens [B, L], loss_mask [B, L-1] -> scalar float32 (0 if nothing counts). Positions whose
    target is not counted (prompt, padding) get exactly zero gradient."""
    logp = jax.nn.log_softmax(logits[:, :-1].astype(jnp.float32), axis=-1)
    nll = -jnp.take_along_axis(logp, tokens[:, 1:, None], axis=-1)[..., 0]
    weight = loss_mask.astype(jnp.float32)
    return jnp.sum(jnp.where(loss_mask, nll, 0.0)) / jnp.maximum(jnp.sum(weight), 1.0)


def completion_nll(model_config: qwen2.Qwen2Config, params: Params, tokens: jax.Array,
                   attention_mask: jax.Array, loss_mask: jax.Array,
                   completion_width: Optional[int] = None, vocab_chunk: Optional[int] = None) -> jax.Array:
    """`masked_nll` of the model, computed by ``maxk_jax.rl.logprobs`` (hidden states, LM head over
    vocabulary chunks, no [B, L, V] float32 logits). tokens / attention_mask [B, L], loss_mask
    [B, L-1] -> scalar float32.

    completion_width = W (static): the LM head only sees W positions per row, gathered from the
    row's first counted position -- the completion (``pad_batch`` makes the counted targets of a
    row one contiguous run).  W must be >= every row's number of counted targets (`run_warmup`
    passes the longest completion); None = every position goes through the LM head.
    vocab_chunk: vocabulary columns per LM-head chunk (None = ``logprobs.pick_vocab_chunk(V)``)."""
    hidden = qwen2.hidden_states(model_config, params, tokens, attention_mask)[:, :-1]
    targets, counted = tokens[:, 1:], loss_mask
    if completion_width is not None:
        if isinstance(completion_width, bool) or not isinstance(completion_width, int) or completion_width < 1:
            raise ValueError(f"completion_width={completion_width!r} must be an int >= 1 or None")
        last = hidden.shape[1] - 1
        width = min(completion_width, last + 1)
        start = jnp.argmax(loss_mask, axis=1)  # first counted position of each row
        idx = jnp.minimum(start[:, None] + jnp.arange(width), last)  # [B, W]
        in_run = jnp.arange(width)[None, :] < jnp.sum(loss_mask, axis=1)[:, None]
        hidden = jnp.take_along_axis(hidden, idx[..., None], axis=1)
        targets = jnp.take_along_axis(targets, idx, axis=1)
        counted = jnp.take_along_axis(loss_mask, idx, axis=1) & in_run
    weight, axis = qwen2.lm_head_weight(model_config, params)
    logp, _ = logprobs.token_logprobs(hidden, weight, axis, targets, vocab_chunk=vocab_chunk)
    total = jnp.sum(loss_mask.astype(jnp.float32))
    return -jnp.sum(jnp.where(counted, logp, 0.0)) / jnp.maximum(total, 1.0)


def make_optimizer(cfg: WarmupConfig) -> optax.GradientTransformation:
    """The RL step's optimizer (`training.make_optimizer`) with the warm-up's settings: global-norm
    clipping + Adam (AdamW if weight_decay > 0), linear warm-up then cosine decay to
    ``final_lr_fraction`` x the learning rate over ``steps`` updates."""
    tx, _ = training.make_optimizer(cfg.learning_rate, total_steps=cfg.steps, schedule="cosine",
                                    warmup_steps=cfg.lr_warmup_steps, weight_decay=cfg.weight_decay,
                                    max_grad_norm=cfg.max_grad_norm or None,
                                    final_lr_fraction=cfg.final_lr_fraction)
    return tx


def make_warmup_step(model_config: qwen2.Qwen2Config, tx: optax.GradientTransformation,
                     completion_width: Optional[int] = None, vocab_chunk: Optional[int] = None) -> Any:
    """``step(params, opt_state, tokens, attention_mask, loss_mask) -> (params, opt_state, loss)``:
    one jit-compiled update (params and opt_state donated); shapes, ``completion_width`` and
    ``vocab_chunk`` (``WarmupConfig.logprob_chunk``) as in `completion_nll`."""

    def step(params: Params, opt_state: Any, tokens: jax.Array, attention_mask: jax.Array,
             loss_mask: jax.Array) -> tuple[Params, Any, jax.Array]:
        loss, grads = jax.value_and_grad(completion_nll, argnums=1)(
            model_config, params, tokens, attention_mask, loss_mask, completion_width, vocab_chunk)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return jax.jit(step, donate_argnums=(0, 1))


def run_warmup(model_config: qwen2.Qwen2Config, params: Params, examples: Sequence[Example],
               cfg: WarmupConfig, *, progress: bool = True) -> WarmupResult:
    """Train `params` for ``cfg.steps`` updates on `examples` (see the module docstring).

    The input params are copied first (the step donates its buffers; the caller's tree stays
    valid). Raises ValueError for an empty example list, an example without completion tokens or
    longer than ``max_position_embeddings``, and a non-finite loss (naming the step).
    """
    if not examples:
        raise ValueError("no warm-up examples")
    for i, ex in enumerate(examples):
        if not isinstance(ex, Example) or not ex.prompt or not ex.completion:
            raise ValueError(f"examples[{i}] must be an Example with non-empty prompt and completion, "
                             f"got {ex!r:.120}")
        if len(ex.prompt) + len(ex.completion) > model_config.max_position_embeddings:
            raise ValueError(f"examples[{i}] has {len(ex.prompt) + len(ex.completion)} tokens > "
                             f"max_position_embeddings={model_config.max_position_embeddings}")
    pad_id = model_config.pad_token_id if model_config.pad_token_id is not None else 0
    tx = make_optimizer(cfg)
    params = jax.tree.map(jnp.copy, params)
    opt_state = tx.init(params)
    # every row's counted targets = its completion, so the longest completion bounds them all
    step_fn = make_warmup_step(model_config, tx, max(len(ex.completion) for ex in examples), cfg.logprob_chunk)
    batches = bucketed_batches(examples, cfg, pad_id, model_config.max_position_embeddings)
    losses, sizes = np.zeros(cfg.steps), np.zeros(cfg.steps, np.int64)
    start = time.perf_counter()
    first = 0.0
    pending: list[tuple[int, jax.Array]] = []
    bar = tqdm(range(cfg.steps), desc="warm-up", unit="step", disable=not progress)
    for i in bar:
        tokens, attn, mask = next(batches)
        sizes[i] = tokens.size
        params, opt_state, loss = step_fn(params, opt_state, tokens, attn, mask)
        pending.append((i, loss))
        if i == 0:
            loss.block_until_ready()
            first = time.perf_counter() - start
        if i == 0 or len(pending) >= 10 or i == cfg.steps - 1:
            for j, value in pending:  # fetch in groups: keeps the device queue busy
                losses[j] = float(value)
                if not math.isfinite(losses[j]):
                    raise ValueError(f"warm-up loss is {losses[j]} at step {j} (lr={cfg.learning_rate})")
            pending = []
            bar.set_postfix(loss=f"{losses[i]:.3f}")
    bar.close()
    jax.block_until_ready(params)
    return WarmupResult(params, losses, sizes, first, time.perf_counter() - start)
