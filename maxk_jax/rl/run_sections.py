"""The sections of the RL run config (:class:`maxk_jax.rl.run_config.RunConfig`): one frozen,
keyword-only dataclass per part of a run, each validated on construction.

    ModelSettings (model.*)  DataSettings (data.*)  RolloutConfig (rollout.*)  AlgoSettings (algo.*)
    OptimSettings (optim.*)  DistributedSettings (distributed.*)  CheckpointSettings (checkpoint.*)
    EvalSettings (eval.*)    LogSettings (log.*)   -- the mesh section is a ``sharding.MeshConfig``

Every ``__post_init__`` raises ValueError naming the field and its value (``rollout.prompts=0 must
be an int >= 1``). ``SECTION_TYPES`` maps each section name to its class. What needs more than one
section (the train step's settings, the device checks, the rollout's sampler) belongs to ``RunConfig``.
"""
from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from maxk_jax.estimators import estimator_info, get_estimator
from maxk_jax.eval.bootstrap import max_reported_k
from maxk_jax.rl import losses
from maxk_jax.rl.staleness import CORRECTIONS
from maxk_jax.data.prompts import PROMPT_FORMATS
from maxk_jax.rl.rollout import REWARDS
from maxk_jax.models.qwen2_config import (DECODE_ATTENTION, DEFAULT_DECODE_ATTENTION, DEFAULT_REMAT_POLICY,
                                         REMAT_POLICIES)
from maxk_jax.cli.fields import (Options, check_choice, check_int, check_real, check_type, int_tuple, is_int,
                             option_pairs)
from maxk_jax.sampling import MIN_PROMPT_BUCKET, SamplerSettings
from maxk_jax.runtime.sharding import MeshConfig


DTYPES = ("float32", "bfloat16")
SCHEDULES = ("constant", "cosine", "linear")
BEHAVIOUR_LOGPROBS = ("trainer", "sampler")   # algo.behaviour_logprobs: where π_old comes from


def check_sampler(s: Any, section: str, *, min_new_tokens: int) -> None:
    """A section's rules for its ``sampler`` beyond `SamplerSettings`' own validation (which runs in
    its constructor): the type, and the section's minimum ``max_new_tokens`` (named
    ``<section>.sampler.max_new_tokens``, as on the command line)."""
    if not isinstance(s, SamplerSettings):
        raise ValueError(f"{section}.sampler={s!r} must be a sampling.SamplerSettings")
    check_int(s.max_new_tokens, f"{section}.sampler.max_new_tokens", min_new_tokens)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModelSettings:
    """path: HF Qwen2 directory (required to run); tokenizer_path ("" = path); dtype: parameter and
    optimizer-state dtype; compute_dtype: matmul dtype ("" = dtype); reference_dtype: storage of
    the frozen KL reference weights ("" = dtype; "bfloat16" halves them: the reference pass
    computes in compute_dtype anyway); remat: rematerialise decoder
    layers; remat_policy: what a rematerialised layer keeps ("nothing" | "dots": the projections'
    outputs, no matmul recomputed but the attention's, for more memory | "auto", the default: nothing
    off GPU, on a GPU dots when the compiled train step fits the card's memory, else nothing:
    ``memory_plan.train_step_remat``); decode_attention: the sampler's one-token attention ("xla" |
    "pallas": the Pallas GPU kernels of ``models.decode_attention``, interpreted off GPU | "auto", the
    default: pallas on a GPU of compute capability >= 8.0, xla elsewhere); the defaults are
    ``Qwen2Config``'s (``models.qwen2_config.DEFAULT_*``); logprob_chunk: vocabulary columns
    per chunk of the log-prob passes (train step, reference pass; None = ``logprobs.pick_vocab_chunk(V)``,
    divisor of V in [4096, 8192])."""

    SECTION: ClassVar[str] = "model"
    path: str = ""
    tokenizer_path: str = ""
    dtype: str = "float32"
    compute_dtype: str = "bfloat16"
    reference_dtype: str = ""
    remat: bool = True
    remat_policy: str = DEFAULT_REMAT_POLICY
    decode_attention: str = DEFAULT_DECODE_ATTENTION
    logprob_chunk: int | None = None

    def __post_init__(self) -> None:
        check_type(self.path, "model.path", str)
        check_type(self.tokenizer_path, "model.tokenizer_path", str)
        if self.dtype not in DTYPES:
            raise ValueError(f"model.dtype={self.dtype!r} must be 'float32' or 'bfloat16'")
        if self.compute_dtype not in ("",) + DTYPES:
            raise ValueError(f"model.compute_dtype={self.compute_dtype!r} must be '', 'float32' or 'bfloat16'")
        if self.reference_dtype not in ("",) + DTYPES:
            raise ValueError(f"model.reference_dtype={self.reference_dtype!r} must be '', 'float32' or 'bfloat16'")
        check_type(self.remat, "model.remat", bool)
        if self.remat_policy not in REMAT_POLICIES:
            raise ValueError(f"model.remat_policy={self.remat_policy!r} must be one of {REMAT_POLICIES}")
        if self.decode_attention not in DECODE_ATTENTION:
            raise ValueError(f"model.decode_attention={self.decode_attention!r} must be one of {DECODE_ATTENTION}")
        if self.logprob_chunk is not None:
            check_int(self.logprob_chunk, "model.logprob_chunk")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ProblemSource:
    """Where problems come from: ``problems`` (a Problem JSONL cache, wins), ``dataset`` =
    "synthetic" (the generated family: synthetic_seed / _num_train / _num_test), or a
    ``load_dataset`` name with ``path`` / ``split`` / ``options`` (the loader's keyword options as
    (name, value) pairs, e.g. ``(("seed", 0),)``; a mapping is accepted and sorted); ``limit`` keeps the first problems (0 = all)."""

    SECTION: ClassVar[str] = "data"
    dataset: str = ""
    path: str = ""
    split: str = ""
    problems: str = ""
    options: Options = ()
    limit: int = 0
    synthetic_seed: int = 0
    synthetic_num_train: int = 2000
    synthetic_num_test: int = 200

    def __post_init__(self) -> None:
        s = self.SECTION
        for name in ("dataset", "path", "split", "problems"):
            check_type(getattr(self, name), f"{s}.{name}", str)
        object.__setattr__(self, "options", option_pairs(self.options, f"{s}.options", "(('seed', 0),)"))
        check_int(self.limit, f"{s}.limit", 0)
        check_int(self.synthetic_seed, f"{s}.synthetic_seed", 0)
        check_int(self.synthetic_num_train, f"{s}.synthetic_num_train")
        check_int(self.synthetic_num_test, f"{s}.synthetic_num_test")


@dataclasses.dataclass(frozen=True, kw_only=True)
class DataSettings(ProblemSource):
    """The training problems (`ProblemSource`) and how they are used: ``epochs`` over the data,
    ``shuffle`` (a permutation per epoch), ``prompt_format`` ("full": system prompt +
    instructions, "statement": the bare statement), ``chat`` (full prompts: chat template True /
    plain False / None = when the tokenizer has one), ``system_prompt`` ("default", "" = none, or
    any text)."""

    dataset: str = "code_contests"
    split: str = "train"
    epochs: int = 1
    shuffle: bool = True
    prompt_format: str = "full"
    chat: bool | None = None
    system_prompt: str = "default"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int(self.epochs, "data.epochs")
        check_type(self.shuffle, "data.shuffle", bool)
        if self.prompt_format not in PROMPT_FORMATS:
            raise ValueError(f"data.prompt_format={self.prompt_format!r} is not one of {PROMPT_FORMATS}")
        if self.chat is not None and not isinstance(self.chat, bool):
            raise ValueError(f"data.chat={self.chat!r} must be True, False or None (auto)")
        check_type(self.system_prompt, "data.system_prompt", str)


@dataclasses.dataclass(frozen=True, kw_only=True)
class RolloutConfig:
    """One RL step's rollout: ``prompts`` problems, sampled with ``sampler`` (n samples each,
    max_new_tokens, temperature > 0, top_k, top_p); ``eos_ids`` stop ids (() = the tokenizer's
    and the model's eos); ``executor`` (embedded | embedded:N | http://host:port[,...] |
    sandboxfusion+http://...); ``sandbox_retries`` re-judgings of sandbox errors before masking;
    ``masked_steps_tolerated`` RL steps in a row in which every sample may be masked (no reward:
    an unreachable or broken judge) before the run stops with an error (0: at the first);
    ``reward`` what the estimators train on: "fraction" of tests passed (the paper's continuous
    reward) or "binary" (1 when all pass); ``max_staleness`` s: batch t is sampled with the weights
    of step max(0, t − s) by a producer that overlaps with training (0 = synchronous; see
    ``maxk_jax.rl.producer`` and ``algo.stale_correction``); ``devices`` d: the last d devices of
    each process are the rollout's alone (sampling and the in-loop evaluation, on the rollout copy's
    mesh: with several processes each host's own d devices, sampling its share of the problems), the
    learner's mesh spans the others, and the copy of each weight version is sent across (0 = both
    share every device); prompts are left-padded to ``sampling.prompt_length_bucket`` lengths >= ``min_prompt_bucket`` (powers of two up to 128, then multiples of 128)."""

    SECTION: ClassVar[str] = "rollout"
    prompts: int = 16
    sampler: SamplerSettings = dataclasses.field(
        default_factory=lambda: SamplerSettings(n=8, max_new_tokens=256, temperature=1.0, top_k=0, top_p=1.0))
    eos_ids: tuple[int, ...] = ()
    executor: str = "embedded"
    sandbox_retries: int = 1
    masked_steps_tolerated: int = 0
    min_prompt_bucket: int = MIN_PROMPT_BUCKET
    reward: str = "fraction"
    max_staleness: int = 0
    devices: int = 0

    def __post_init__(self) -> None:
        check_int(self.prompts, "rollout.prompts")
        check_int(self.max_staleness, "rollout.max_staleness", 0)
        check_int(self.devices, "rollout.devices", 0)
        check_choice(self.reward, "rollout.reward", REWARDS)
        check_sampler(self.sampler, "rollout", min_new_tokens=1)
        if not self.sampler.temperature > 0:
            raise ValueError(f"rollout.sampler.temperature={self.sampler.temperature!r} must be a finite number > 0 "
                             "for training (greedy sampling has no policy gradient)")
        int_tuple(self, "eos_ids", "rollout.eos_ids", 0)
        if not isinstance(self.executor, str) or not self.executor:
            raise ValueError(f"rollout.executor={self.executor!r} must be a non-empty string")
        check_int(self.sandbox_retries, "rollout.sandbox_retries", 0)
        check_int(self.masked_steps_tolerated, "rollout.masked_steps_tolerated", 0)
        check_int(self.min_prompt_bucket, "rollout.min_prompt_bucket")


@dataclasses.dataclass(frozen=True, kw_only=True)
class AlgoSettings:
    """The RL algorithm: ``estimator`` (a registry name) with ``estimator_options`` (name/value
    pairs; a mapping is accepted and sorted; unset options take the registry's defaults), the
    training ``k``, ``ppo_iterations`` per rollout, and the ``loss`` (``losses.LossConfig``: its
    ``kind`` is the loss form -- the registry's ``estimator_info(estimator).loss_form`` unless a
    method deviates -- and ``norm_length`` the fixed length of "seq_sum_norm"), and
    ``behaviour_logprobs``: where π_old of the PPO ratio and of the log-ratio δ comes from --
    "trainer" (the first PPO iteration's own forward pass: δ = 0 and ratio 1 exactly there) or
    "sampler" (the sampler's cached-decode log-probs); ``stale_correction`` how batches from an
    older sampler (``rollout.max_staleness`` > 0) are corrected -- "none", "tis" (coefficients times
    min(π_old/μ, ``tis_cap``)) or "behaviour" (the off-policy estimators' δ is taken to the sampler μ:
    first-order r̃′ for maxk_offpolicy, eq. 10 for maxk_offpolicy_exact); see ``maxk_jax.rl.staleness``."""

    SECTION: ClassVar[str] = "algo"
    estimator: str = "maxk_offpolicy"
    k: int = 4
    estimator_options: Options = ()
    ppo_iterations: int = 3
    loss: losses.LossConfig = dataclasses.field(
        default_factory=lambda: losses.LossConfig(kl_beta=0.01))
    behaviour_logprobs: str = "trainer"
    stale_correction: str = "none"
    tis_cap: float = 2.0

    def __post_init__(self) -> None:
        info = estimator_info(self.estimator)   # ValueError "unknown estimator ..." naming the valid ones
        options = option_pairs(self.estimator_options, "algo.estimator_options", "(('clamp_delta', 0.5),)")
        object.__setattr__(self, "estimator_options", options)
        try:
            get_estimator(info.name, **dict(options))
        except (ValueError, TypeError) as err:
            raise ValueError(f"algo.estimator_options={options!r}: {err}") from err
        check_int(self.k, "algo.k")
        check_int(self.ppo_iterations, "algo.ppo_iterations")
        check_choice(self.behaviour_logprobs, "algo.behaviour_logprobs", BEHAVIOUR_LOGPROBS)
        check_choice(self.stale_correction, "algo.stale_correction", CORRECTIONS)
        check_real(self.tis_cap, "algo.tis_cap", "a finite number > 0",
                   isinstance(self.tis_cap, (int, float)) and self.tis_cap > 0)
        if not isinstance(self.loss, losses.LossConfig):
            raise ValueError(f"algo.loss={self.loss!r} must be a losses.LossConfig")
        if self.stale_correction == "behaviour" and self.ppo_iterations > 1 and self.loss.kind == "clipped":
            raise ValueError(f"algo.stale_correction='behaviour' with algo.ppo_iterations={self.ppo_iterations} needs "
                             "algo.loss.kind='is_weighted' (the clipped loss multiplies the importance-weighted "
                             "coefficients by π_θ/π_old again at PPO iterations > 0: a biased update)")


@dataclasses.dataclass(frozen=True, kw_only=True)
class OptimSettings:
    """Adam (AdamW when weight_decay > 0): learning_rate, ``schedule`` (constant | cosine |
    linear) after ``warmup_steps`` linear warm-up updates, b1 / b2 / eps, global-norm clipping
    ``max_grad_norm`` (0 = off), gradient accumulation ``micro_batches`` (divides the prompts),
    ``mu_dtype`` of Adam's first moment ("" = the parameters' dtype; "bfloat16" saves 2 bytes per
    parameter, optax's ``mu_dtype``)."""

    SECTION: ClassVar[str] = "optim"
    learning_rate: float = 5e-6
    schedule: str = "constant"
    warmup_steps: int = 0
    b1: float = 0.9
    b2: float = 0.999
    eps: float = 1e-8
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    micro_batches: int = 1
    mu_dtype: str = ""

    def __post_init__(self) -> None:
        check_real(self.learning_rate, "optim.learning_rate", "a finite number > 0", self.learning_rate > 0)
        check_choice(self.schedule, "optim.schedule", SCHEDULES)
        check_int(self.warmup_steps, "optim.warmup_steps", 0)
        for name in ("b1", "b2"):
            v = getattr(self, name)
            check_real(v, f"optim.{name}", "in [0, 1)", 0 <= v < 1)
        check_real(self.eps, "optim.eps", "a finite number > 0", self.eps > 0)
        check_real(self.weight_decay, "optim.weight_decay", "a finite number >= 0", self.weight_decay >= 0)
        check_real(self.max_grad_norm, "optim.max_grad_norm", "a finite number >= 0 (0 = off)",
                    self.max_grad_norm >= 0)
        check_int(self.micro_batches, "optim.micro_batches")
        if self.mu_dtype not in ("",) + DTYPES:
            raise ValueError(f"optim.mu_dtype={self.mu_dtype!r} must be '', 'float32' or 'bfloat16'")


@dataclasses.dataclass(frozen=True, kw_only=True)
class DistributedSettings:
    """Multi-host: ``enabled`` calls ``jax.distributed.initialize`` (coordinator_address "" =
    auto-detected on Cloud TPU / SLURM / k8s; else with num_processes and process_id)."""

    SECTION: ClassVar[str] = "distributed"
    enabled: bool = False
    coordinator_address: str = ""
    num_processes: int = 1
    process_id: int = 0

    def initialize(self) -> bool:
        """``jax.distributed.initialize`` when ``enabled`` (explicit coordinator / process count / id
        when ``coordinator_address`` is set, else auto-detected); call before jax sees its devices."""
        from maxk_jax.runtime.sharding import maybe_initialize_distributed

        kwargs = ({"coordinator_address": self.coordinator_address, "num_processes": self.num_processes,
                   "process_id": self.process_id} if self.coordinator_address else {})
        return maybe_initialize_distributed(bool(self.enabled), **kwargs)

    def __post_init__(self) -> None:
        check_type(self.enabled, "distributed.enabled", bool)
        check_type(self.coordinator_address, "distributed.coordinator_address", str)
        check_int(self.num_processes, "distributed.num_processes")
        if not is_int(self.process_id) or not 0 <= self.process_id < self.num_processes:
            raise ValueError(f"distributed.process_id={self.process_id!r} must be an int in "
                             f"[0, num_processes={self.num_processes})")


@dataclasses.dataclass(frozen=True, kw_only=True)
class CheckpointSettings:
    """An orbax checkpoint every ``interval`` RL steps (and at the end), the last ``keep`` kept."""

    SECTION: ClassVar[str] = "checkpoint"
    interval: int = 50
    keep: int = 3

    def __post_init__(self) -> None:
        check_int(self.interval, "checkpoint.interval")
        check_int(self.keep, "checkpoint.keep")


@dataclasses.dataclass(frozen=True, kw_only=True)
class EvalSettings(ProblemSource):
    """Periodic evaluation every ``interval`` RL steps (0 = never) and, with ``at_end``, after the
    last step, on a `ProblemSource`, sampled
    with ``sampler`` (n per problem; max_new_tokens 0 = rollout's; temperature 0 = greedy), k
    values ``ks`` (() = 1, 2, 4, ..., n/2; every k <= n/2), ``batch_size`` problems per sampler call, and the fixed
    key ``seed`` (every checkpoint scored on the same sample keys). ``at_end=False`` skips the
    evaluation after the last step, even when it is a multiple of ``interval``: for a caller that
    evaluates the final model anyway (``compare_methods``' final evaluation samples the same keys)."""

    SECTION: ClassVar[str] = "eval"
    split: str = "test"
    interval: int = 0
    sampler: SamplerSettings = dataclasses.field(
        default_factory=lambda: SamplerSettings(n=8, max_new_tokens=0, temperature=1.0, top_k=0, top_p=1.0))
    ks: tuple[int, ...] = ()
    batch_size: int = 64
    seed: int = 0
    at_end: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int(self.interval, "eval.interval", 0)
        check_type(self.at_end, "eval.at_end", bool)
        check_sampler(self.sampler, "eval", min_new_tokens=0)
        int_tuple(self, "ks", "eval.ks", 1)
        top = max_reported_k(self.sampler.n)
        for k in self.ks:
            if k > top:
                raise ValueError(f"eval.ks has k={k} outside [1, eval.sampler.n/2={top}] (k <= n/2 keeps every "
                                 f"estimate an average over many k-subsets; raise eval.sampler.n to 2k)")
        check_int(self.batch_size, "eval.batch_size")
        check_int(self.seed, "eval.seed", 0)
        if self.interval and not (self.dataset or self.problems):
            raise ValueError("eval.interval > 0 needs eval.dataset or eval.problems")


@dataclasses.dataclass(frozen=True, kw_only=True)
class LogSettings:
    """Metrics sinks besides metrics.jsonl: TensorBoard, W&B project ("" = off)."""

    SECTION: ClassVar[str] = "log"
    tensorboard: bool = True
    wandb_project: str = ""

    def __post_init__(self) -> None:
        check_type(self.tensorboard, "log.tensorboard", bool)
        check_type(self.wandb_project, "log.wandb_project", str)


SECTION_TYPES: dict[str, type] = {
    "model": ModelSettings, "data": DataSettings, "rollout": RolloutConfig, "algo": AlgoSettings,
    "optim": OptimSettings, "mesh": MeshConfig, "distributed": DistributedSettings,
    "checkpoint": CheckpointSettings, "eval": EvalSettings, "log": LogSettings}
