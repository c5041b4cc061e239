"""Functional PPO training step for every registered estimator: TrainState, Batch, train_step.

    cfg = StepConfig(estimator="maxk_offpolicy", k=4, micro_batches=2,
                     sampler=SamplerSettings(n=8, max_new_tokens=256),
                     loss=LossConfig(kl_beta=0.01))
    tx, schedule = make_optimizer(5e-6, total_steps=1000)
    mesh = sharding.make_mesh(data=-1)
    state, shardings = create_train_state(model_config, params, tx, mesh)
    train_step = make_train_step(model_config, cfg, tx, mesh, shardings, schedule=schedule)
    for _ in range(ppo_iterations):                 # the SAME rollout batch every iteration
        state, metrics = train_step(state, batch)  # log-ratios recomputed inside, every call

Batch layout (one rollout; B = P prompts x n samples, prompt-major: row p*n + i is sample i of
prompt p; S = Sp + T):  ``tokens [B, S]`` = left-padded prompt (Sp) followed by the completion
(T = max_new_tokens), ``attention_mask [B, S]``, ``completion_mask [B, T]`` (generated tokens
incl. the EOS token), ``old_logp [B, T]`` (behaviour log-probs from the sampler), ``rewards [B]``,
``valid [B]`` (False = reward null, e.g. sandbox_error: the sample is masked out of the estimator
AND the loss, and counted in ``masked_samples``), ``answer_ids [B]`` (majority_vote only),
``ref_logp [B, T]`` (reference policy, needed when kl_beta > 0; see ``make_logprob_fn``).

Loss form (``StepConfig.loss.kind``; ``loss=None`` takes the estimator's registry default
``estimator_info(name).loss_form``), which is the clipped surrogate eq. 4 for every estimator --
what the max@k paper's pipeline does, off-policy BoN included (z-scored r~' as A_i, times the PPO
ratio).  "is_weighted" selects the gradient of the §3.3 derivation instead: the off-policy
coefficients c_i already contain the importance weights, so −sg(c_i)·log π_θ with the PPO
trust-region mask and no extra ratio (losses.py).  Configs name which form they use.

Log-ratios: every call recomputes log π_θ of the sampled tokens under the current params and
the sequence log-ratio Σ_t (log π_θ − old_logp) over completion tokens, and feeds it to the
estimator (``log_ratio=``); the log-ratios, masks, coefficients and loss of a micro-batch are
``wiring.update_loss`` (the same function the exactness enumeration differentiates).  With
``make_train_step(..., trainer_old_logp=True)`` the first PPO iteration takes the step's own
log-probs as π_old, so it is exactly 0 there (against the sampler's ``old_logp`` it is 0 only up
to the sampler's float error).

Temperature / truncation: the policy log-probs are those of the distribution sampled from:
logits / temperature, then (if top_k > 0 / top_p < 1) the same top-k / top-p truncation as the
sampler, computed from the CURRENT logits, renormalised over the kept set.  The sampled token is
always kept in the set (otherwise a token sampled by π_old but outside π_θ's nucleus would have
log-prob −inf).  So at iteration 0 the ratios are 1 for untruncated AND truncated sampling; the
gradient then also flows through the renormaliser (the set itself is not differentiated).

Gradient accumulation: ``micro_batches`` = M splits the P prompts into M groups of whole prompts
(each micro-batch holds all n samples of its prompts, so the estimator sees complete rows) and
``lax.scan``s over them; each micro-batch loss is scaled by its share of the batch normaliser
(counted tokens for aggregation "token", counted sequences otherwise), so the accumulated
gradient equals the full-batch gradient.
"""
from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Mapping
from typing import Any, Callable

import flax
import jax
import jax.numpy as jnp
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from maxk_jax.rl import logprobs, losses, staleness, step_metrics, wiring
from maxk_jax.rl.step_metrics import DELTA_THRESHOLDS
from maxk_jax.runtime import sharding as sharding_lib
from maxk_jax.cli.fields import check_real, is_int
from maxk_jax.estimators import behaviour_refusal, estimator_info, estimator_options, get_estimator
from maxk_jax.models import qwen2
from maxk_jax.sampling import SamplerSettings

Params = Any


def loss_kind(estimator: str) -> str:
    """The registry's default loss form of `estimator` ("clipped" for every registered name)."""
    return estimator_info(estimator).loss_form


@dataclasses.dataclass(frozen=True, kw_only=True)
class StepConfig:
    """Static settings of one train step (frozen, hashable, keyword-only).

    estimator / estimator_options / k: the registry entry and its static k (1 <= k <= n);
    sampler: the ``sampling.SamplerSettings`` the rollout sampled with -- n (samples per prompt)
    and the distribution the policy log-probs are computed under (temperature > 0, top_p in
    (0, 1], top_k >= 0); loss: the ``losses.LossConfig`` (None = the defaults with the estimator's
    registry loss form, ``loss_kind(estimator)``; its ``kind`` is the form used); micro_batches:
    gradient accumulation steps (must divide the number of prompts); compute_entropy: entropy
    metric (a softmax pass over V); logprob_chunk: vocabulary columns per chunk of the log-prob
    pass (``logprobs.completion_logprobs``'s vocab_chunk; None = ``logprobs.pick_vocab_chunk(V)``);
    stale_correction / tis_cap: how a batch with ``behaviour_logp`` (a stale or mismatched sampler) is
    corrected, ``staleness.CORRECTIONS`` ("behaviour" only for estimators that read log-ratios, with a
    setting whose expected update stays unbiased: ``estimators.behaviour_refusal``).
    """

    estimator: str
    k: int
    sampler: SamplerSettings
    estimator_options: tuple[tuple[str, Any], ...] = ()
    loss: losses.LossConfig | None = None
    micro_batches: int = 1
    compute_entropy: bool = True
    logprob_chunk: int | None = None
    stale_correction: str = "none"
    tis_cap: float = 2.0

    def __post_init__(self) -> None:
        if isinstance(self.estimator_options, Mapping):
            object.__setattr__(self, "estimator_options", tuple(sorted(self.estimator_options.items())))
        if self.loss is None:
            object.__setattr__(self, "loss", losses.LossConfig(kind=loss_kind(self.estimator)))
        if not isinstance(self.sampler, SamplerSettings):
            raise ValueError(f"sampler={self.sampler!r} must be a sampling.SamplerSettings")
        if not isinstance(self.loss, losses.LossConfig):
            raise ValueError(f"loss={self.loss!r} must be a losses.LossConfig")
        s = self.sampler   # validated by its own constructor; training's one extra rule:
        if not s.temperature > 0:
            raise ValueError(f"temperature={s.temperature!r} must be a finite number > 0 for "
                             "training (greedy sampling has no policy gradient)")
        if not is_int(self.k) or not 1 <= self.k <= s.n:
            raise ValueError(f"k={self.k!r} must be an int with 1 <= k <= n={s.n}")
        if not is_int(self.micro_batches) or self.micro_batches < 1:
            raise ValueError(f"micro_batches={self.micro_batches!r} must be an int >= 1")
        if self.logprob_chunk is not None and (not is_int(self.logprob_chunk) or self.logprob_chunk < 1):
            raise ValueError(f"logprob_chunk={self.logprob_chunk!r} must be an int >= 1 or None")
        if self.stale_correction not in staleness.CORRECTIONS:
            raise ValueError(f"stale_correction={self.stale_correction!r} is not one of {staleness.CORRECTIONS}")
        if self.stale_correction == "behaviour" and not estimator_info(self.estimator).needs_log_ratio:
            raise ValueError(f"stale_correction='behaviour' feeds the behaviour log-ratio to the estimator, but "
                             f"{self.estimator!r} reads no log-ratio (use maxk_offpolicy / maxk_offpolicy_exact, "
                             "or 'tis')")
        if self.stale_correction == "behaviour":
            why = behaviour_refusal(self.estimator, **dict(self.estimator_options))
            if why is not None:
                raise ValueError(f"stale_correction='behaviour' needs an unbiased estimator setting: {why}")
        check_real(self.tis_cap, "tis_cap", "a finite number > 0",
                   isinstance(self.tis_cap, (int, float)) and self.tis_cap > 0)
        fn = self.estimator_fn()
        rows = jax.ShapeDtypeStruct((1, s.n), jnp.float32)
        try:  # abstract evaluation only: checks k against the estimator's own minimum, no compile
            jax.eval_shape(lambda r: fn(r, k=self.k, log_ratio=r, mask=r > 0,
                                        answer_ids=r.astype(jnp.int32)), rows)
        except ValueError as err:
            raise ValueError(f"estimator {self.estimator!r} rejects k={self.k}, n={s.n}: {err}") from err

    @property
    def n(self) -> int:
        """Samples per prompt (``sampler.n``)."""
        return self.sampler.n

    @property
    def kind(self) -> str:
        """The loss form actually used: "clipped" or "is_weighted" (``loss.kind``)."""
        return self.loss.kind

    @property
    def clamp_delta(self) -> float | None:
        """The estimator's ``clamp_delta`` option (its registry default when unset; None = off)."""
        options = {**estimator_options(self.estimator), **dict(self.estimator_options)}
        return options.get("clamp_delta")

    def estimator_fn(self) -> Callable[..., jax.Array]:
        """``get_estimator(estimator, **estimator_options)`` (ValueError for unknown names)."""
        return get_estimator(self.estimator, **dict(self.estimator_options))

    def check_batch(self, num_sequences: int, batch_axis_size: int = 1) -> None:
        """ValueError unless B = num_sequences splits into whole prompt groups of n, the prompts
        into ``micro_batches`` and every micro-batch (B / M rows) across ``batch_axis_size``
        (= data x fsdp) devices."""
        b, n, m = num_sequences, self.n, self.micro_batches
        if b < 1 or b % n:
            raise ValueError(f"batch of {b} sequences is not a whole number of prompt groups of n={n}")
        prompts = b // n
        if prompts % m:
            raise ValueError(f"micro_batches={m} does not divide the {prompts} prompts of the batch "
                             f"(each micro-batch must hold whole prompt groups)")
        if (b // m) % batch_axis_size:
            raise ValueError(f"micro-batch of {b // m} sequences ({prompts // m} prompts x n={n}) is "
                             f"not divisible across the data*fsdp={batch_axis_size} devices")


@flax.struct.dataclass
class Batch:
    """One rollout batch, B = P*n rows prompt-major (see the module docstring)."""

    tokens: jax.Array  # [B, S] int32: left-padded prompt (S - T) + completion (T)
    attention_mask: jax.Array  # [B, S] bool: real tokens
    completion_mask: jax.Array  # [B, T] bool: generated tokens incl. EOS
    old_logp: jax.Array  # [B, T] float32: behaviour log-probs (0 where not generated)
    rewards: jax.Array  # [B] float32 (0 where not valid)
    valid: jax.Array  # [B] bool: reward is not null
    answer_ids: jax.Array  # [B] int32 (majority_vote)
    ref_logp: jax.Array | None = None  # [B, T] float32 reference log-probs (KL)
    behaviour_logp: jax.Array | None = None  # [B, T] float32 μ: the (possibly stale) sampler's log-probs

    @property
    def completion_len(self) -> int:
        """T (static)."""
        return self.completion_mask.shape[1]


@flax.struct.dataclass
class TrainState:
    """step [] int32 (optimizer updates so far), params (model tree), opt_state (optax)."""

    step: jax.Array
    params: Params
    opt_state: optax.OptState


def make_optimizer(learning_rate: float, *, total_steps: int, schedule: str = "constant",
                   warmup_steps: int = 0, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8,
                   weight_decay: float = 0.0, max_grad_norm: float | None = 1.0,
                   final_lr_fraction: float = 0.0, mu_dtype: str | None = None
                   ) -> tuple[optax.GradientTransformation, optax.Schedule]:
    """Adam (paper: lr 5e-6) with optional global-norm clipping, linear warmup and a "constant" |
    "cosine" | "linear" decay over ``total_steps`` updates down to ``final_lr_fraction`` x the
    learning rate; AdamW when weight_decay > 0; ``mu_dtype`` ("bfloat16" / "float32", None = the
    parameters' dtype) stores Adam's first moment.  The one optimizer of the RL step and the warm-up.
    Returns ``(tx, schedule)`` (the schedule maps the update count to the learning rate)."""
    if not (isinstance(learning_rate, numbers.Real) and learning_rate > 0):
        raise ValueError(f"learning_rate={learning_rate!r} must be > 0")
    if not is_int(total_steps) or total_steps < 1:
        raise ValueError(f"total_steps={total_steps!r} must be an int >= 1")
    if not is_int(warmup_steps) or not 0 <= warmup_steps <= total_steps:
        raise ValueError(f"warmup_steps={warmup_steps!r} must be an int in [0, total_steps={total_steps}]")
    if max_grad_norm is not None and not max_grad_norm > 0:
        raise ValueError(f"max_grad_norm={max_grad_norm!r} must be > 0 or None")
    if weight_decay < 0:
        raise ValueError(f"weight_decay={weight_decay!r} must be >= 0")
    if not (isinstance(final_lr_fraction, numbers.Real) and 0 <= final_lr_fraction <= 1):
        raise ValueError(f"final_lr_fraction={final_lr_fraction!r} must be in [0, 1]")
    decay_steps = max(total_steps - warmup_steps, 1)
    if schedule == "constant":
        main = optax.constant_schedule(learning_rate)
    elif schedule == "cosine":
        main = optax.cosine_decay_schedule(learning_rate, decay_steps, alpha=final_lr_fraction)
    elif schedule == "linear":
        main = optax.linear_schedule(learning_rate, final_lr_fraction * learning_rate, decay_steps)
    else:
        raise ValueError(f"schedule={schedule!r} is not one of ('constant', 'cosine', 'linear')")
    sched = main if warmup_steps == 0 else optax.join_schedules(
        [optax.linear_schedule(0.0, learning_rate, warmup_steps), main], [warmup_steps])
    if mu_dtype not in (None, "float32", "bfloat16"):
        raise ValueError(f"mu_dtype={mu_dtype!r} must be None, 'float32' or 'bfloat16'")
    adam = (optax.adamw(sched, b1=b1, b2=b2, eps=eps, weight_decay=weight_decay, mu_dtype=mu_dtype) if weight_decay
            else optax.adam(sched, b1=b1, b2=b2, eps=eps, mu_dtype=mu_dtype))
    parts = ([optax.clip_by_global_norm(max_grad_norm)] if max_grad_norm is not None else []) + [adam]
    return optax.chain(*parts), sched


# ------------------------------------------------------------------ state & shardings -------

def state_shardings(model_config: qwen2.Qwen2Config, tx: optax.GradientTransformation,
                    mesh: Mesh, abstract_state: TrainState) -> TrainState:
    """TrainState of NamedShardings: params from the logical-axis rules, optimizer moments like
    their params, scalars (step, counts) replicated."""
    p_sh = sharding_lib.param_shardings(mesh, qwen2.logical_axes(model_config), abstract_state.params)
    replicated = NamedSharding(mesh, PartitionSpec())
    opt_sh = optax.tree_map_params(tx, lambda _, s: s, abstract_state.opt_state, p_sh,
                                   transform_non_params=lambda _: replicated,
                                   is_leaf=lambda x: isinstance(x, NamedSharding))
    return TrainState(step=replicated, params=p_sh, opt_state=opt_sh)


def _new_state(params: Params, tx: optax.GradientTransformation) -> TrainState:
    return TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=tx.init(params))


def abstract_train_state(model_config: qwen2.Qwen2Config, tx: optax.GradientTransformation,
                         mesh: Mesh) -> tuple[TrainState, TrainState]:
    """(abstract state of ShapeDtypeStructs carrying shardings, shardings) — no allocation; the
    restore target of checkpoints and the input of AOT compilation."""
    abstract = jax.eval_shape(lambda p: _new_state(p, tx), qwen2.abstract_params(model_config))
    shardings = state_shardings(model_config, tx, mesh, abstract)
    with_sh = jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
                           abstract, shardings)
    return with_sh, shardings


def create_train_state(model_config: qwen2.Qwen2Config, params: Params,
                       tx: optax.GradientTransformation, mesh: Mesh) -> tuple[TrainState, TrainState]:
    """maxtext-style: eval_shape -> shardings from the logical rules -> jit(init, out_shardings).
    ``params`` are not donated (the caller may keep them as the KL reference).
    Returns (state, state shardings)."""
    _, shardings = abstract_train_state(model_config, tx, mesh)
    init = jax.jit(lambda p: _new_state(p, tx), in_shardings=(shardings.params,),
                   out_shardings=shardings)
    return init(params), shardings


# ------------------------------------------------------------------ log-probs ---------------

def policy_logprobs(model_config: qwen2.Qwen2Config, cfg: StepConfig, params: Params,
                    batch: Batch, *, with_entropy: bool = False
                    ) -> tuple[jax.Array, jax.Array | None]:
    """(log π_θ of the completion tokens [B, T] under the sampling distribution, entropy [B, T]
    of the tempered distribution or None): ``logprobs.completion_logprobs`` -- the LM head only at
    completion positions, over vocabulary chunks, no [B, T, V] tensor.  Equals
    ``logprobs.truncated_logprobs(logprobs.completion_logits(...), ...)`` (the full-logits reference path)."""
    return logprobs.completion_logprobs(
        model_config, params, batch.tokens, batch.attention_mask, batch.completion_len,
        temperature=cfg.sampler.temperature, top_k=cfg.sampler.top_k, top_p=cfg.sampler.top_p,
        with_entropy=with_entropy, vocab_chunk=cfg.logprob_chunk)


# ------------------------------------------------------------------ the step ----------------

def _normaliser(counted: jax.Array, aggregation: str) -> jax.Array:
    """The quantity the aggregation divides by: counted tokens ("token") or sequences with >= 1
    counted token (otherwise).  counted [B, T] -> scalar float32."""
    if aggregation == "token":
        return jnp.sum(counted).astype(jnp.float32)
    return jnp.sum(jnp.any(counted, axis=-1)).astype(jnp.float32)


def _microbatch_loss(params: Params, mb: Batch, weight: jax.Array, own_old: jax.Array, *,
                     model_config: qwen2.Qwen2Config, cfg: StepConfig
                     ) -> tuple[jax.Array, tuple[dict[str, jax.Array], jax.Array]]:
    """weight * loss of one micro-batch of whole prompt groups, and ((unweighted) metrics, the
    policy's log-probs [Bm, T] with no gradient).  own_old (bool scalar): π_old = those log-probs
    themselves (``stop_gradient``, so the log-ratios are exactly 0 and the ratios exactly 1)
    instead of ``mb.old_logp``; the mismatch metrics always compare against ``mb.old_logp``."""
    logp, entropy = policy_logprobs(model_config, cfg, params, mb,
                                    with_entropy=cfg.compute_entropy or cfg.loss.entropy_coef > 0)
    wired = wiring.update_loss(
        logp, old_logp=mb.old_logp, completion_mask=mb.completion_mask, valid=mb.valid, rewards=mb.rewards,
        answer_ids=mb.answer_ids, behaviour_logp=mb.behaviour_logp, own_old=own_old, estimator=cfg.estimator_fn(),
        k=cfg.k, n=cfg.n, correction=cfg.stale_correction, tis_cap=cfg.tis_cap, loss=cfg.loss,
        ref_logp=mb.ref_logp, entropy=entropy)
    loss, metrics, coef, log_ratio, fixed = wired.loss, dict(wired.metrics), wired.coef, wired.log_ratio, wired.logp
    gap = jnp.where(wired.counted, jnp.abs(fixed - mb.old_logp), 0.0)
    stale: dict[str, jax.Array] = {}
    if mb.behaviour_logp is not None:   # a stale / mismatched sampler μ: staleness.py
        stale = staleness.stale_sums(wired.log_w, wired.to_behaviour, mb.valid, cfg.n,
                                     correction=cfg.stale_correction, tis_cap=cfg.tis_cap,
                                     clamp_delta=cfg.clamp_delta)
    nonfinite = jnp.sum(mb.valid & ~jnp.isfinite(coef)).astype(jnp.float32)
    rows = lambda x: x.reshape(-1, cfg.n)  # noqa: E731  [Bm] -> [Pm, n]
    v = mb.valid
    seq_ratio = jnp.exp(log_ratio)
    big = jnp.float32(jnp.inf)
    metrics.update(
        coef_sum=jnp.sum(jnp.where(v, coef, 0.0)), coef_sq_sum=jnp.sum(jnp.where(v, coef ** 2, 0.0)),
        coef_min=jnp.min(jnp.where(v, coef, big)), coef_max=jnp.max(jnp.where(v, coef, -big)),
        coef_nonzero=jnp.sum(v & (coef != 0)).astype(jnp.float32),
        valid_samples=jnp.sum(v).astype(jnp.float32),
        mismatch_sum=jnp.sum(gap), mismatch_max=jnp.max(gap, initial=0.0),
        counted_tokens=jnp.sum(wired.counted).astype(jnp.float32),
        seq_ratio_sum=jnp.sum(jnp.where(v, seq_ratio, 0.0)),
        seq_ratio_min=jnp.min(jnp.where(v, seq_ratio, big)),
        seq_ratio_max=jnp.max(jnp.where(v, seq_ratio, -big)),
        seq_log_ratio_abs_max=jnp.max(jnp.where(v, jnp.abs(log_ratio), 0.0)),
        nonfinite_coefficients=nonfinite,
        **{f"delta_gt_{t:g}_count": jnp.sum(v & (jnp.abs(seq_ratio - 1.0) > t)).astype(jnp.float32)
           for t in DELTA_THRESHOLDS},
        rows_below_k=jnp.sum(jnp.sum(rows(v), axis=-1) < cfg.k).astype(jnp.float32), **stale)
    return loss * weight, (metrics, jnp.where(mb.completion_mask, fixed, 0.0))


def _global_norm(tree: Params) -> jax.Array:
    return jnp.sqrt(sum(jnp.sum(jnp.square(x.astype(jnp.float32))) for x in jax.tree.leaves(tree)))


def batch_sharding(mesh: Mesh) -> NamedSharding:
    """Sharding (a pytree prefix) of every Batch field: rows over ('data', 'fsdp')
    (``sharding.batch_sharding`` with only the leading axis named, so it fits every rank)."""
    return sharding_lib.batch_sharding(mesh, 1)


def batch_axis_size(mesh: Mesh) -> int:
    """Number of ways the batch is split: data x fsdp."""
    return mesh.shape["data"] * mesh.shape["fsdp"]


class MeshFunction:
    """A jitted function called (and lowered) inside ``sharding.activation_sharding(mesh)`` so the
    model's logical activation constraints resolve to the mesh."""

    def __init__(self, jitted: Any, mesh: Mesh) -> None:
        self.jitted, self.mesh = jitted, mesh

    def __call__(self, *args: Any) -> Any:
        with sharding_lib.activation_sharding(self.mesh):
            return self.jitted(*args)

    def lower(self, *args: Any) -> Any:
        """AOT lowering (e.g. ``.lower(abstract_state, abstract_batch).compile()``)."""
        with sharding_lib.activation_sharding(self.mesh):
            return self.jitted.lower(*args)


def make_train_step(model_config: qwen2.Qwen2Config, cfg: StepConfig, tx: optax.GradientTransformation,
                    mesh: Mesh, shardings: TrainState, *,
                    schedule: optax.Schedule | None = None,
                    trainer_old_logp: bool = False) -> MeshFunction:
    """``train_step(state, batch) -> (state, metrics)``: one optimizer update on a rollout batch.

    ``trainer_old_logp=True`` (π_old from the trainer, ``algo.behaviour_logprobs="trainer"``):
    ``train_step(state, batch, first) -> (state, metrics, logp)`` with ``first`` a bool scalar.
    With first=True the step takes its own log-probs (``stop_gradient``) as π_old instead of
    ``batch.old_logp`` -- the same values its loss sees, so the sequence log-ratios are exactly 0
    and the token ratios exactly 1 -- and ``logp`` [B, T] (0 outside completion_mask) is what
    the next PPO iterations pass as ``batch.old_logp`` (with first=False).

    jit-compiled with ``in_shardings=(shardings, batch rows over data*fsdp)``, replicated metric
    outputs, and the state donated.  Batch-shape checks (``StepConfig.check_batch``) run at trace
    time, before compilation.  Metrics (float32 scalars): the loss terms and trust-region stats of
    ``losses.policy_loss`` combined over micro-batches (loss terms weighted like the loss,
    token means by token counts), ``advantage_{mean,std,min,max,nonzero_fraction}`` of the
    estimator's coefficients over valid samples, ``is_ratio_{mean,min,max}`` (sequence ratios
    exp(log_ratio)), ``is_log_ratio_abs_max``, ``valid_samples``, ``masked_samples`` (null
    rewards), ``rows_below_k``, ``grad_norm`` (before clipping), ``update_norm``,
    ``learning_rate`` (if ``schedule`` is given), ``logprob_mismatch_{mean,max}`` (|policy
    log-prob − batch.old_logp| over counted tokens: at the first iteration, the sampler's
    disagreement with the trainer).
    """
    ways = batch_axis_size(mesh)
    rows_spec = PartitionSpec(None, sharding_lib.BATCH_AXES)

    def step(state: TrainState, batch: Batch, first: jax.Array
             ) -> tuple[TrainState, dict[str, jax.Array], jax.Array]:
        b = batch.tokens.shape[0]
        cfg.check_batch(b, ways)
        m = cfg.micro_batches
        if cfg.loss.needs_reference and batch.ref_logp is None:
            raise ValueError(f"kl_beta={cfg.loss.kl_beta} > 0 needs batch.ref_logp, got None")
        counted = batch.completion_mask & batch.valid[:, None]
        total = _normaliser(counted, cfg.loss.aggregation)
        split = jax.tree.map(
            lambda x: jax.lax.with_sharding_constraint(x.reshape(m, b // m, *x.shape[1:]),
                                                       NamedSharding(mesh, rows_spec)), batch)
        loss_grad = jax.value_and_grad(
            lambda p, mb, w: _microbatch_loss(p, mb, w, first, model_config=model_config, cfg=cfg),
            has_aux=True)

        def body(acc: Params, mb: Batch) -> tuple[Params, tuple[dict[str, jax.Array], jax.Array]]:
            mb_counted = mb.completion_mask & mb.valid[:, None]
            weight = _normaliser(mb_counted, cfg.loss.aggregation) / jnp.maximum(total, 1.0)
            (_, (metrics, logp)), grads = loss_grad(state.params, mb, weight)
            acc = jax.tree.map(lambda a, g: a + g.astype(jnp.float32), acc, grads)
            return acc, (dict(metrics, weight=weight), logp)

        zeros = jax.tree.map(lambda p: jnp.zeros(p.shape, jnp.float32), state.params)
        grads, (mb_metrics, logp) = jax.lax.scan(body, zeros, split)
        grads = jax.tree.map(lambda g, p: g.astype(p.dtype), grads, state.params)
        updates, opt_state = tx.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        metrics = step_metrics.combine(mb_metrics, mb_metrics["weight"])
        metrics.update(grad_norm=_global_norm(grads), update_norm=_global_norm(updates),
                       masked_samples=jnp.float32(b) - metrics["valid_samples"])
        if schedule is not None:
            metrics["learning_rate"] = jnp.asarray(schedule(state.step), jnp.float32)
        new_state = TrainState(step=state.step + 1, params=params, opt_state=opt_state)
        return (new_state, {k: v.astype(jnp.float32) for k, v in metrics.items()},
                logp.reshape(b, batch.completion_len))

    replicated = NamedSharding(mesh, PartitionSpec())
    rows = batch_sharding(mesh)
    if trainer_old_logp:
        jitted = jax.jit(step, in_shardings=(shardings, rows, replicated),
                         out_shardings=(shardings, replicated, rows), donate_argnums=(0,))
    else:  # π_old = batch.old_logp; the log-probs are not returned (XLA drops them)
        def step_given_old_logp(state: TrainState, batch: Batch) -> tuple[TrainState, dict[str, jax.Array]]:
            return step(state, batch, jnp.bool_(False))[:2]

        step_given_old_logp.__name__ = "step"   # one XLA module name (jit_step) for both modes
        jitted = jax.jit(step_given_old_logp, in_shardings=(shardings, rows), out_shardings=(shardings, replicated),
                         donate_argnums=(0,))
    return MeshFunction(jitted, mesh)


def make_logprob_fn(model_config: qwen2.Qwen2Config, cfg: StepConfig, mesh: Mesh,
                    param_shardings: Params) -> MeshFunction:
    """``logprob_fn(params, batch) -> [B, T]`` float32 log-probs of the completion tokens under
    the sampling distribution of ``params`` (0 outside completion_mask), computed micro-batch by
    micro-batch without gradients — e.g. the reference policy's ``ref_logp``."""
    ways = batch_axis_size(mesh)
    rows_spec = PartitionSpec(None, sharding_lib.BATCH_AXES)

    def fn(params: Params, batch: Batch) -> jax.Array:
        b, t = batch.tokens.shape[0], batch.completion_len
        cfg.check_batch(b, ways)
        m = cfg.micro_batches
        split = jax.tree.map(
            lambda x: jax.lax.with_sharding_constraint(x.reshape(m, b // m, *x.shape[1:]),
                                                       NamedSharding(mesh, rows_spec)), batch)
        logp = jax.lax.map(lambda mb: jnp.where(mb.completion_mask,
                                                policy_logprobs(model_config, cfg, params, mb)[0], 0.0),
                           split)
        return logp.reshape(b, t)

    jitted = jax.jit(fn, in_shardings=(param_shardings, batch_sharding(mesh)),
                     out_shardings=batch_sharding(mesh))
    return MeshFunction(jitted, mesh)

