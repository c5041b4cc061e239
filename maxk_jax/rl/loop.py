"""The RL loop: sample -> execute -> estimate -> PPO iterations -> evaluate -> checkpoint.

    cfg = RunConfig(model=ModelSettings(path=...), output_dir=..., ...)   # maxk_jax.rl.run_config
    summary = run(cfg, resume=False)          # = setup(...) once, then rl_step(...) per step

(the absl main experiments/train.py converts its ml_collections config once:
``run(from_config_dict(FLAGS.config))``)

One RL step s (0-based; logged and checkpointed as s + 1 = RL steps done):
  1. the next ``rollout.prompts`` problems of the data stream (epoch e = a permutation of the
     problem list drawn from ``np.random.default_rng([seed, e])``; epochs are concatenated, so
     step s always reads stream positions [s*P, (s+1)*P));
  2. ``rng, key = split(rng)``; ``rollout.collect`` (by the `producer.RolloutProducer`: with
     ``rollout.max_staleness`` = s > 0 sampled earlier, from the weights of step max(0, t − s), in a
     thread beside the learner; see producer.py and staleness.py): n samples per problem with ``key``, judged
     by the executor (null rewards masked, counted; more than ``rollout.masked_steps_tolerated``
     steps in a row with every sample masked stop the run: `MaskedRolloutError`);
  3. reference log-probs (a no-grad pass with the initial weights) when kl_beta > 0;
  4. ``algo.ppo_iterations`` calls of ``train_step`` on that batch (each recomputes the
     log-ratios against π_old and feeds them to the estimator); π_old is, by default
     (``algo.behaviour_logprobs="trainer"``), the first iteration's own log-probs, so the
     log-ratios are exactly 0 there; "sampler" uses the sampler's log-probs.  Either way the
     sampler's disagreement with the trainer is logged, ``rollout/logprob_mismatch_{mean,max}``
     (|Δ log p| per counted completion token);
  5. periodic evaluation (``maxk_jax.eval.run.evaluate`` on ``eval.*`` problems, every
     ``eval.interval`` steps and after the last unless ``eval.at_end`` is False (`evaluates_after`),
     a fixed key so checkpoints are compared on the same sample keys);
  6. the metrics record is written, then (every ``checkpoint.interval`` steps and at the end)
     an orbax checkpoint: state ``{"step", "params", "opt_state"}`` plus metadata
     ``{"rl_step", "data_position", "rng", "model_dir", "config_json"}``; with s > 0 the batches
     already sampled for the next steps go to ``<output_dir>/in_flight/`` first.

Multi-host (``distributed.*``, one process per host, see docs/usage/multihost.md): every host reads
the same problem stream and key but samples and judges only its contiguous share of the step's
prompts (``rollout.collect``), contributes its rows to the global batch
(``multihost.global_batch``), and the metrics are computed from all hosts' rollouts
(``rollout.gather_rollout``); process 0 writes metrics, config and evaluation reports. With
``rollout.devices`` d each host samples (and evaluates) its share on its own last d devices, in the
producer thread when s > 0, while the learner's mesh spans every host's other devices.

``resume=True`` restores the newest checkpoint onto the same shardings and continues with the
stored PRNG key and data position; on CPU a killed-and-resumed run logs the same metrics as an
uninterrupted one (timings aside).  Metrics per step (JSONL/TensorBoard/W&B, see metrics_log):
``reward/*``, ``train/{pass_at_k,max_at_k}/{k}`` (k in {1, algo.k, n}), ``length/*``,
``status/*``, ``samples/*`` (masked, no_code, ..., ``judged_host<h>`` = submissions host h's
judge received, ``judged`` = their sum), ``ppo/<metric>`` (mean over PPO
iterations) and ``ppo/it<i>/<metric>`` for each iteration (loss terms, clip_fraction, kl_ref,
approx_kl_old, entropy, advantage_*, is_ratio_*, ratio_*, grad_norm, update_norm,
learning_rate, masked_samples, rows_below_k), ``eval/{pass_at_k,max_at_k}/{k}``, ``time/*``
(sample, judge, ref_logp, train, eval, checkpoint, step seconds) and ``perf/*`` (tokens/s).
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
from tqdm.auto import tqdm

from maxk_jax.runtime import checkpoint as ckpt_lib
from maxk_jax.runtime import multihost
from maxk_jax.rl import rollout as rollout_lib
from maxk_jax.runtime import sharding as sharding_lib
from maxk_jax.rl import producer as producer_lib
from maxk_jax.rl import training
from maxk_jax.data.problem import Problem
from maxk_jax.execution import Executor, JudgeCounter
from maxk_jax.rl.config_dict import to_config_dict
from maxk_jax.rl.problem_stream import epoch_order, load_problem_set, problems_of_eval, step_problems  # noqa: F401
from maxk_jax.rl.run_config import EvalSettings, RunConfig
from maxk_jax.rl.metrics_log import MetricsLogger
from maxk_jax.models.tokenizer_protocol import Tokenizer
from maxk_jax.sampling.rollout_copy import RolloutLayout
from maxk_jax.sampling.sampler import Sampler

EvalFn = Callable[[Any, int], dict[str, float]]


class ResumeError(ValueError):
    """The newest checkpoint cannot be restored (corrupt, or written with another config)."""


class MaskedRolloutError(RuntimeError):
    """Every sample of more RL steps in a row than ``rollout.masked_steps_tolerated`` was masked
    (no reward: the judge is unreachable or broken); the message names the executor and the
    statuses seen."""


# ------------------------------------------------------------------ the loop ----------------

def _to_ckpt(state: training.TrainState) -> dict[str, Any]:
    """Checkpoint layout: a plain dict with a top-level "params" (read by eval_checkpoint)."""
    return {"step": state.step, "params": state.params, "opt_state": state.opt_state}


def _from_ckpt(tree: dict[str, Any]) -> training.TrainState:
    return training.TrainState(step=tree["step"], params=tree["params"], opt_state=tree["opt_state"])


def _mean_over_iterations(per_iter: list[dict[str, float]]) -> dict[str, float]:
    out = {}
    for i, metrics in enumerate(per_iter):
        out.update({f"ppo/it{i}/{k}": v for k, v in metrics.items()})
    for key in per_iter[0]:
        out[f"ppo/{key}"] = float(np.mean([m[key] for m in per_iter]))
    return out


def evaluates_after(settings: EvalSettings, done: int, total: int) -> bool:
    """Whether the periodic evaluation runs after RL step `done` (1-based) of `total`: every
    ``interval`` steps and after the last one, unless ``at_end`` is False (then never after the last);
    never with ``interval`` 0."""
    if not settings.interval:
        return False
    if done == total:
        return settings.at_end
    return done % settings.interval == 0


def make_eval_fn(cfg: RunConfig, problems: Sequence[Problem], executor: Executor, layout: RolloutLayout,
                 sampler: Sampler, share_mesh: jax.sharding.Mesh | None = None) -> EvalFn | None:
    """``eval_fn(params, rl_step) -> {"eval/pass_at_k/<k>": ..., "eval/max_at_k/<k>": ...}``:
    ``maxk_jax.eval.run.evaluate`` of `problems` with the rollout's `sampler` (its prompt format)
    under the eval sampling settings, a fixed key ``eval.seed`` (every checkpoint is scored on the
    same sample keys), sampled from the rollout copy of ``params`` on ``layout``'s mesh, the problems
    split over the processes of ``share_mesh`` (default that mesh; the learner's when each host's rollout
    mesh is its own); the report goes to ``<output_dir>/eval/step_<rl_step>``. None when
    ``eval.interval`` is 0."""
    if not cfg.eval.interval:
        return None
    from maxk_jax.eval.report import write_report
    from maxk_jax.eval.run import EvalOptions, evaluate

    key = jax.random.key(cfg.eval.seed)
    sampler = sampler.replace(settings=cfg.eval_sampler(), mesh=layout.mesh)
    options = EvalOptions(ks=cfg.eval_ks(), batch_size=cfg.eval.batch_size,
                          sandbox_retries=cfg.rollout.sandbox_retries, progress=False,
                          host=multihost.batch_block(layout.mesh if share_mesh is None else share_mesh))

    def eval_fn(params: Any, rl_step: int) -> dict[str, float]:
        result = evaluate(sampler.replace(params=layout.copy(params)), problems, executor=executor, key=key,
                          options=options, run_config={"rl_step": rl_step, "run_name": f"{cfg.name}@{rl_step}"})
        if jax.process_index() == 0:
            write_report(result, os.path.join(cfg.output_dir, "eval", f"step_{rl_step}"))
        means = result.means()
        return {f"eval/{metric}/{k}": (math.nan if v is None else v)
                for metric in ("pass_at_k", "max_at_k") for k, v in means[metric].items()}

    return eval_fn


@dataclasses.dataclass
class RunContext:
    """Everything the steps of one run share, built once by `setup` (then only ``state`` and
    ``rng`` change, in `run`)."""

    cfg: RunConfig
    mesh: jax.sharding.Mesh
    model_config: Any
    tokenizer: Tokenizer
    problems: list[Problem]
    total: int                        # RL steps of the run
    start: int                        # first RL step to run (> 0 when resumed)
    executor: Executor
    sampler: Sampler                  # the rollout settings on the rollout mesh, no weights (a template)
    train_step: Any                   # training.make_train_step(...)
    ref_fn: Any                       # reference log-prob pass (None without a KL term)
    ref_params: Any
    eval_fn: EvalFn | None
    rollout_layout: Any               # sampling.rollout_copy.RolloutLayout: where the sampler's weights live
    checkpointer: ckpt_lib.Checkpointer
    logger: MetricsLogger | None      # process 0 only
    model_dir: str
    state: training.TrainState
    rng: jax.Array
    producer: producer_lib.RolloutProducer   # batch t from the weights of step max(0, t - rollout.max_staleness)
    masked_streak: int = 0            # RL steps in a row with every sample masked


def open_checkpointer(cfg: RunConfig, stack: contextlib.ExitStack, resume: bool
                      ) -> tuple[ckpt_lib.Checkpointer, bool]:
    """The run's Checkpointer on ``<output_dir>/checkpoints`` (closed by ``stack``) and whether it
    restores one (``resume`` and a checkpoint exists); ValueError when checkpoints exist and not
    ``resume``."""
    os.makedirs(cfg.output_dir, exist_ok=True)
    ckpt_dir = os.path.join(cfg.output_dir, "checkpoints")
    ckpt = stack.enter_context(ckpt_lib.Checkpointer(
        ckpt_dir, max_to_keep=cfg.checkpoint.keep, save_interval_steps=cfg.checkpoint.interval))
    if not resume and ckpt.latest_step() is not None:
        raise ValueError(f"{ckpt_dir!r} already holds checkpoints (latest step "
                         f"{ckpt.latest_step()}); pass resume=True (--resume) or a new output_dir")
    return ckpt, resume and ckpt.latest_step() is not None


def load_model(cfg: RunConfig, model_dir: str, mesh: jax.sharding.Mesh,
               weights: tuple[Any, Any, Tokenizer] | None, restoring: bool) -> tuple[Any, Any]:
    """(Qwen2Config with the ``model.*`` overrides and compute dtype, params): ``weights`` given in
    memory, else the HF checkpoint ``model_dir`` on ``mesh``; params None when resuming without a KL
    reference (the checkpoint holds the weights, only config.json is read)."""
    from maxk_jax.models import convert, qwen2

    overrides = {"remat": cfg.model.remat, "remat_policy": cfg.model.remat_policy,
                 "decode_attention": cfg.model.decode_attention}
    if weights is not None:
        model_config, params = weights[0].replace(**overrides), weights[1]
    elif cfg.algo.loss.needs_reference or not restoring:
        model_config, params = convert.load_hf(model_dir, cfg.model.dtype, mesh=mesh, **overrides)
    else:  # resuming without a KL reference: the checkpoint holds the weights
        model_config = qwen2.Qwen2Config.from_json_file(
            os.path.join(model_dir, "config.json"), dtype=cfg.model.dtype,
            param_dtype=cfg.model.dtype, **overrides)
        params = None
    return model_config.replace(dtype=cfg.model.compute_dtype or cfg.model.dtype), params


def restore_state(cfg: RunConfig, ckpt: ckpt_lib.Checkpointer, abstract: training.TrainState
                  ) -> tuple[training.TrainState, int, jax.Array]:
    """(train state, first RL step, PRNG key) of the newest checkpoint, restored onto ``abstract``'s
    shardings; `ResumeError` when it cannot be read, ValueError when its data position does not
    match the config."""
    ckpt_dir = os.path.join(cfg.output_dir, "checkpoints")
    try:
        restored, meta = ckpt.restore(None, _to_ckpt(abstract))
    except Exception as err:  # noqa: BLE001 - orbax's errors on a damaged step name nothing
        raise ResumeError(f"cannot resume from the orbax checkpoint {ckpt_dir}/{ckpt.latest_step()} "
                         f"(corrupt, or written by another config): {type(err).__name__}: "
                         f"{' '.join(str(err).split())[:300]}") from err
    state, start = _from_ckpt(restored), int(meta["rl_step"])
    rng = ckpt_lib.decode_prng_key(meta["rng"])
    if meta["data_position"] != start * cfg.rollout.prompts:
        raise ValueError(f"checkpoint data_position={meta['data_position']} does not match "
                         f"rl_step={start} x rollout.prompts={cfg.rollout.prompts}: the run "
                         "config changed; resume with the original config")
    logging.info("resumed from %s at RL step %d", ckpt_dir, start)
    return state, start, rng


def open_logger(cfg: RunConfig, stack: contextlib.ExitStack, resume_step: int | None) -> MetricsLogger | None:
    """Process 0: the run's MetricsLogger (closed by ``stack``) and ``<output_dir>/config.json``;
    None on the other processes."""
    if jax.process_index() != 0:
        return None
    logger = MetricsLogger(cfg.output_dir, tensorboard=cfg.log.tensorboard,
                           wandb_project=cfg.log.wandb_project or None, run_name=cfg.name,
                           run_config=to_config_dict(cfg).to_dict(), resume_step=resume_step)
    stack.callback(logger.close)
    with open(os.path.join(cfg.output_dir, "config.json"), "w", encoding="utf-8") as f:
        f.write(to_config_dict(cfg).to_json_best_effort(indent=2))
    return logger


def setup(cfg: RunConfig, stack: contextlib.ExitStack, *, resume: bool = False,
          executor: Executor | None = None, eval_fn: EvalFn | None = None,
          weights: tuple[Any, Any, Tokenizer] | None = None, problems: Sequence[Problem] | None = None) -> RunContext:
    """Validate, build the mesh, load tokenizer / weights / problems, restore or create the train
    state, compile the step functions, open the executor and the metrics logger (registered on
    `stack`, which closes them). ``weights`` = (Qwen2Config, params, tokenizer) in memory instead of
    ``model.path`` and ``problems`` instead of the data section (a benchmark's random weights:
    ``maxk_jax.rl.bench``; no resume)."""
    from maxk_jax.models.tokenizer import load_tokenizer

    if not isinstance(cfg, RunConfig):
        raise TypeError(f"the RL loop takes a RunConfig (maxk_jax.rl.config_dict.from_config_dict converts a "
                        f"ConfigDict), got {type(cfg).__name__}")
    cfg.distributed.initialize()  # before anything asks jax for its devices
    if weights is None:
        cfg.require_paths()
    elif resume or not cfg.output_dir:
        raise ValueError("setup(weights=...) needs an output_dir and no resume")
    cfg_step = cfg.validate()
    learner_devices, rollout_devices = cfg.device_split()   # rollout_devices None: shared
    mesh = sharding_lib.make_mesh(cfg.mesh.data, cfg.mesh.fsdp, cfg.mesh.tensor, devices=learner_devices)
    hosts = multihost.batch_block(mesh)[1]
    if cfg.rollout.prompts % hosts:
        raise ValueError(f"rollout.prompts={cfg.rollout.prompts} must be a multiple of the {hosts} "
                         "processes (each host samples and judges an equal share of a step's prompts)")
    ckpt, restoring = open_checkpointer(cfg, stack, resume)

    model_dir = os.path.abspath(cfg.model.path)
    tokenizer = load_tokenizer(cfg.model.tokenizer_path or model_dir) if weights is None else weights[2]
    problems = (load_problem_set(cfg.data, tokenizer) if problems is None   # before the weights: fails fast
                else list(problems))
    model_config, params = load_model(cfg, model_dir, mesh, weights, restoring)
    model_config = cfg.resolved_model_config(model_config, mesh, problems, tokenizer)   # remat "auto": by memory
    total = cfg.num_rl_steps(len(problems))
    tx, schedule = training.make_optimizer(
        cfg.optim.learning_rate, total_steps=total * cfg.algo.ppo_iterations,
        schedule=cfg.optim.schedule, warmup_steps=cfg.optim.warmup_steps, b1=cfg.optim.b1,
        b2=cfg.optim.b2, eps=cfg.optim.eps, weight_decay=cfg.optim.weight_decay,
        max_grad_norm=cfg.optim.max_grad_norm or None, mu_dtype=cfg.optim.mu_dtype or None)
    abstract, shardings = training.abstract_train_state(model_config, tx, mesh)
    state, start, rng = (restore_state(cfg, ckpt, abstract) if restoring
                         else (training.create_train_state(model_config, params, tx, mesh)[0], 0,
                               jax.random.key(cfg.seed)))
    ref_params = params if cfg.algo.loss.needs_reference else None
    if ref_params is not None and cfg.model.reference_dtype:
        ref_params = jax.tree.map(lambda x: x.astype(cfg.model.reference_dtype), ref_params)
    del params
    train_step = training.make_train_step(
        model_config, cfg_step, tx, mesh, shardings, schedule=schedule,
        trainer_old_logp=cfg.algo.behaviour_logprobs == "trainer")
    ref_fn = (training.make_logprob_fn(model_config, cfg_step, mesh, shardings.params)
              if ref_params is not None else None)
    if executor is None:
        from maxk_jax.execution import make_executor

        executor = stack.enter_context(make_executor(cfg.rollout.executor))
    layout = RolloutLayout.create(model_config, mesh, devices=rollout_devices)
    sampler = cfg.rollout_sampler(model_config, tokenizer).replace(mesh=layout.mesh)
    if eval_fn is None:
        eval_fn = make_eval_fn(cfg, problems_of_eval(cfg, tokenizer), executor, layout, sampler, share_mesh=mesh)
    logger = open_logger(cfg, stack, start if restoring else None)
    producer = make_producer(cfg, problems, executor, sampler, mesh, start=start, total=total, rng=rng,
                             ready=(producer_lib.load_in_flight(producer_lib.in_flight_folder(cfg.output_dir), start)
                                    if restoring and cfg.rollout.max_staleness else None))
    stack.callback(producer.close)
    return RunContext(cfg=cfg, mesh=mesh, model_config=model_config, tokenizer=tokenizer,
                      problems=problems, total=total, start=start, executor=executor,
                      sampler=sampler, train_step=train_step, ref_fn=ref_fn, ref_params=ref_params,
                      eval_fn=eval_fn, rollout_layout=layout, checkpointer=ckpt, logger=logger, model_dir=model_dir,
                      state=state, rng=rng, producer=producer)


def make_producer(cfg: RunConfig, problems: Sequence[Problem], executor: Executor, sampler: Sampler,
                  mesh: jax.sharding.Mesh, *, start: int, total: int, rng: jax.Array,
                  ready: dict[int, producer_lib.Produced] | None = None) -> producer_lib.RolloutProducer:
    """The run's `producer.RolloutProducer`: batch t = ``rollout.collect`` of step t's problems (this
    host's share: the processes of the learner's ``mesh`` split them) with the sampler template
    given the weights of step max(0, t − rollout.max_staleness) and the t-th key of the chain from
    ``rng`` (at step ``start``), judged by this host's ``executor``. With s > 0 it produces in a
    thread when its sampler's mesh is this process's alone (one process, or a rollout sub-mesh of
    each host's own devices: its programs are no collectives); inline otherwise."""
    s = cfg.rollout.max_staleness

    def produce(index: int, weights: Any, key: jax.Array) -> producer_lib.Produced:
        judge = JudgeCounter(executor)   # counts what THIS host's judge receives
        batch_problems = step_problems(problems, index, cfg.rollout.prompts, cfg.seed, cfg.data.shuffle)
        ro = rollout_lib.collect(sampler.replace(params=weights), batch_problems, judge, key,
                                 sandbox_retries=cfg.rollout.sandbox_retries,
                                 reward=cfg.rollout.reward, share_mesh=mesh)   # this host's share only
        return producer_lib.Produced(index, producer_lib.weight_version(index, s), ro, judge.count)

    threaded = s > 0 and not multihost.spans_processes(sampler.mesh)
    return producer_lib.RolloutProducer(produce, max_staleness=s, start=start, total=total, rng=rng, ready=ready,
                                        threaded=threaded)


def run(cfg: RunConfig, *, resume: bool = False, executor: Executor | None = None,
        eval_fn: EvalFn | None = None, progress: bool = True) -> dict[str, Any]:
    """Train with the run config ``cfg`` (``maxk_jax.rl.run_config.RunConfig``; the paper's
    settings per method: experiments/configs/base.py); returns the last metrics record.

    executor: an ``Executor`` (default ``make_executor(cfg.rollout.executor)``, closed at the
    end). eval_fn: replaces the ``eval.*`` evaluation (``make_eval_fn``).
    """
    with contextlib.ExitStack() as stack:   # closes checkpointer, executor, logger, bar
        ctx = setup(cfg, stack, resume=resume, executor=executor, eval_fn=eval_fn)
        config_json = to_config_dict(cfg).to_json_best_effort()
        record: dict[str, Any] = {}
        checkpoint_s = 0.0
        in_flight_dir = producer_lib.in_flight_folder(cfg.output_dir)
        bar = stack.enter_context(tqdm(range(ctx.start, ctx.total), initial=ctx.start, total=ctx.total,
                                       desc=cfg.name, disable=not progress))
        for step in bar:
            ctx.state, ctx.rng, metrics = rl_step(ctx, step, ctx.state, ctx.rng)
            metrics["time/prev_checkpoint_s"] = checkpoint_s  # the save issued after the last step
            record = ctx.logger.write(step + 1, metrics) if ctx.logger is not None else metrics
            t0 = time.perf_counter()   # log first: a kill after the save never loses a record
            if ctx.checkpointer.should_save(step + 1) or step + 1 == ctx.total:
                if cfg.rollout.max_staleness:   # first: a kill between the two never leaves a step without it
                    producer_lib.save_in_flight(in_flight_dir, step + 1, ctx.producer.in_flight(step + 1))
                ctx.checkpointer.save(step + 1, _to_ckpt(ctx.state), {
                    "rl_step": step + 1, "data_position": (step + 1) * cfg.rollout.prompts,
                    "rng": ckpt_lib.encode_prng_key(ctx.rng), "model_dir": ctx.model_dir,
                    "config_json": config_json})
                if cfg.rollout.max_staleness:
                    producer_lib.prune_in_flight(in_flight_dir, ctx.checkpointer.all_steps() + [step + 1])
            checkpoint_s = time.perf_counter() - t0
            bar.set_postfix(reward=_fmt(record.get("reward/mean")), loss=_fmt(record.get("ppo/loss")))
    return record


def _fmt(value: float | None) -> str:
    return "nan" if value is None or not math.isfinite(value) else f"{value:.4f}"


def rl_step(ctx: RunContext, step: int, state: training.TrainState, rng: jax.Array
            ) -> tuple[training.TrainState, jax.Array, dict[str, float]]:
    """One RL step (see the module docstring) -> (new state, new rng, metrics)."""
    cfg, mesh, eval_fn = ctx.cfg, ctx.mesh, ctx.eval_fn
    t_step = time.perf_counter()
    rng, _ = jax.random.split(rng)   # the producer draws batch `step`'s key from the same chain
    ctx.producer.publish(step, lambda: ctx.rollout_layout.copy(state.params))   # decode layout, version `step`
    t0 = time.perf_counter()
    produced = ctx.producer.take(step)   # its rollout copy is freed once every batch of its version is made
    wait_s = time.perf_counter() - t0
    ro = produced.rollout
    everyone = rollout_lib.gather_rollout(ro, mesh)   # metrics inputs of all hosts, in problem order
    metrics = rollout_lib.rollout_metrics(everyone, cfg.train_ks())
    ctx.masked_streak = ctx.masked_streak + 1 if metrics["samples/masked"] == metrics["samples/total"] else 0
    if ctx.masked_streak > cfg.rollout.masked_steps_tolerated:
        seen = ", ".join(f"{name[len('status/'):]} {int(v)}" for name, v in sorted(metrics.items())
                         if name.startswith("status/") and v)
        raise MaskedRolloutError(
            f"RL step {step + 1}: all {int(metrics['samples/total'])} samples masked (statuses: {seen}) for "
            f"{ctx.masked_streak} step(s) in a row: the judge {cfg.rollout.executor!r} gave no reward; check "
            f"rollout.executor (or allow more with rollout.masked_steps_tolerated="
            f"{cfg.rollout.masked_steps_tolerated})")
    judged = multihost.allgather_objects(produced.judged)
    metrics.update({f"samples/judged_host{i}": float(c) for i, c in enumerate(judged)})
    metrics["samples/judged"] = float(sum(judged))
    metrics["rollout/weight_version"] = float(produced.version)
    metrics["rollout/staleness"] = float(step - produced.version)
    host_batch = ro.batch.replace(behaviour_logp=ro.batch.old_logp) if cfg.corrects_behaviour else ro.batch
    batch = multihost.global_batch(host_batch, mesh)   # this host's rows of the global batch
    t0 = time.perf_counter()
    if ctx.ref_fn is not None:
        batch = batch.replace(ref_logp=jax.block_until_ready(ctx.ref_fn(ctx.ref_params, batch)))
    ref_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    per_iter = []
    own_old = cfg.algo.behaviour_logprobs == "trainer"
    for it in range(cfg.algo.ppo_iterations):
        if own_old:   # iteration 0's own log-probs are π_old of every iteration (exact ratio 1 at 0)
            state, m, old_logp = ctx.train_step(state, batch, np.bool_(it == 0))
            if it == 0:
                batch = batch.replace(old_logp=old_logp)
        else:
            state, m = ctx.train_step(state, batch)
        per_iter.append({k: float(v) for k, v in jax.device_get(m).items()})
        if it == 0:   # the sampler's log-probs against the trainer's at the rollout's weights
            for key in ("logprob_mismatch_mean", "logprob_mismatch_max"):
                metrics[f"rollout/{key}"] = per_iter[0][key]
        for key in ("logprob_mismatch_mean", "logprob_mismatch_max"):
            del per_iter[-1][key]
        bad = per_iter[-1].get("nonfinite_coefficients", 0.0)
        if bad:
            raise FloatingPointError(
                f"step {step}, PPO iteration {it}: estimator {cfg.algo.estimator!r} gave {int(bad)} "
                f"non-finite coefficients (largest |sequence log-ratio| "
                f"{per_iter[-1].get('is_log_ratio_abs_max', float('nan')):.4g}); set "
                "clamp_delta in algo.estimator_options or lower the learning rate")
    train_s = time.perf_counter() - t0
    metrics.update(_mean_over_iterations(per_iter))
    eval_s = 0.0
    if eval_fn is not None and evaluates_after(cfg.eval, step + 1, ctx.total):
        t0 = time.perf_counter()
        metrics.update(eval_fn(state.params, step + 1))
        eval_s = time.perf_counter() - t0
    generated = float(everyone.lengths.sum())
    seq_tokens = float(math.prod(batch.attention_mask.shape)) * cfg.algo.ppo_iterations
    metrics.update({
        "time/sample_s": everyone.sample_seconds, "time/judge_s": everyone.judge_seconds,
        "time/ref_logp_s": ref_s,
        "time/train_s": train_s, "time/eval_s": eval_s, "time/step_s": time.perf_counter() - t_step,
        "time/wait_rollout_s": wait_s,
        "perf/sample_tokens_per_s": generated / max(everyone.sample_seconds, 1e-9),
        "perf/train_tokens_per_s": seq_tokens / max(train_s, 1e-9),
        "samples/generated_tokens": generated, "data/position": float((step + 1) * cfg.rollout.prompts)})
    return state, rng, metrics
