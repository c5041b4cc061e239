"""One RL rollout: sample n completions per prompt -> extract code -> judge -> training Batch.

    sampler = sampling.Sampler.create(config, params, tokenizer, sampling.SamplerSettings(n=8, max_new_tokens=256),
                                      mesh=mesh)
    ro = collect(sampler, problems, executor, key)
    ro.batch          # training.Batch of numpy arrays, B = P*n rows (prompt-major)
    rollout_metrics(ro, ks=(1, 4, 8))   # reward / train pass@k, max@k / lengths / statuses

Sampling is the `maxk_jax.sampling.Sampler` (one key per rollout, split per sample); completions
are decoded without special tokens, code is extracted and judged by
``maxk_jax.execution.completions.judge_completions`` (sandbox errors re-judged ``sandbox_retries`` times).
A sample whose reward stays null (``sandbox_error``, or ``invalid`` = the problem's own tests
are broken) gets ``valid = False``: it is masked out of the estimator and the loss and counted
(``masked_samples``), never turned into a 0 reward.

Batch layout (see ``maxk_jax.rl.training``): prompts are left-padded to ``sampling.prompt_length_bucket``
Sp >= ``min_prompt_bucket`` (powers of two up to 128, then multiples of 128: a new prompt length rarely
recompiles the train step) followed
by the T = max_new_tokens completion slots; ``old_logp`` are the sampler's log-probs (under the
tempered, truncated distribution actually sampled from).  ``answer_ids`` (majority_vote) come
from program BEHAVIOUR, not source text: the judge fingerprints each program's outputs on the
problem's test inputs (`maxk_jax.execution.behaviour`; assert-mode problems expose only the
per-test verdicts), and samples of a prompt with equal fingerprints share an id (0, 1, ... in
order of first appearance).  A sample whose behaviour could not be determined (TLE / MLE / OLE /
SE on some test, a null reward, or a judge that reports no fingerprint) gets id -1, which
majority_vote masks out of the vote instead of guessing its answer.
"""
from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from maxk_jax import sampling
from maxk_jax.runtime import multihost
from maxk_jax.rl import training
from maxk_jax.data.problem import Problem
from maxk_jax.eval.result import ProblemResult, problem_metrics
from maxk_jax.execution.completions import Completions, judge_completions
from maxk_jax.execution import Executor

STATUSES = ("ok", "sandbox_error", "invalid")
# The reward the estimators train on: "fraction" = tests passed / tests run (the max@k paper's
# continuous reward), "binary" = 1 when every test passes, else 0 (its Table 1 binary-reward GRPO).
REWARDS = ("fraction", "binary")


@dataclasses.dataclass
class Rollout:
    """The data of one RL step (P problems x n samples) plus host-side bookkeeping."""

    batch: training.Batch  # numpy arrays, B = P*n
    rewards: np.ndarray  # [P, n] float64, NaN where the reward is null
    passed: np.ndarray  # [P, n] int tests passed
    total: np.ndarray  # [P, n] int tests run
    statuses: list[tuple[str, ...]]  # [P][n] "ok" | "sandbox_error" | "invalid"
    lengths: np.ndarray  # [P, n] generated tokens incl. the stop token
    finished: np.ndarray  # [P, n] bool: ended with a stop token (False = hit the token budget)
    texts: list[tuple[str, ...]]  # [P][n] decoded completions
    no_code: int  # completions from which no code could be extracted
    sandbox_retries: int  # re-judged submissions
    sample_seconds: float
    judge_seconds: float
    answer_ids: np.ndarray | None = None  # [P, n] int32 majority-vote ids (-1 = behaviour unknown)

    @property
    def valid(self) -> np.ndarray:
        """[P, n] bool: reward not null."""
        return ~np.isnan(self.rewards)


def answer_ids(behaviours: Sequence[Sequence[str | None] | None], n: int) -> np.ndarray:
    """Majority-vote answer ids [P, n] int32 from behaviour fingerprints [P][n] (None = undetermined).

    Within each prompt equal fingerprints get equal ids 0, 1, ... (first appearance order);
    undetermined samples, and every sample of a prompt without fingerprints (None row), get -1,
    which `majority_vote` masks.
    """
    out = np.full((len(behaviours), n), -1, np.int32)
    for i, row in enumerate(behaviours):
        if row is None:
            continue
        if len(row) != n:
            raise ValueError(f"behaviours[{i}] has {len(row)} entries, expected n={n}")
        ids: dict[str, int] = {}
        for j, fp in enumerate(row):
            if fp is not None:
                out[i, j] = ids.setdefault(fp, len(ids))
    return out


def build_batch(prompts: Sequence[Sequence[int]], tokens: np.ndarray, logprobs: np.ndarray,
                mask: np.ndarray, rewards: np.ndarray, answer_ids: np.ndarray, *, pad_id: int,
                min_prompt_bucket: int = sampling.MIN_PROMPT_BUCKET) -> training.Batch:
    """prompts (P token lists), tokens / logprobs / mask [P, n, T], rewards [P, n] (NaN = null),
    answer_ids [P, n] -> training.Batch of numpy arrays with B = P*n rows, S = Sp + T."""
    p, n, t = tokens.shape
    if len(prompts) != p or logprobs.shape != tokens.shape or mask.shape != tokens.shape:
        raise ValueError(f"{len(prompts)} prompts, tokens {tokens.shape}, logprobs {logprobs.shape}, "
                         f"mask {mask.shape}: expected P prompts and [P, n, T] arrays")
    if rewards.shape != (p, n) or answer_ids.shape != (p, n):
        raise ValueError(f"rewards {rewards.shape} / answer_ids {answer_ids.shape} must be [P, n] = {(p, n)}")
    sp = sampling.prompt_length_bucket(max(len(x) for x in prompts), min_prompt_bucket)
    prompt_tok = np.full((p, sp), pad_id, np.int32)
    prompt_mask = np.zeros((p, sp), bool)
    for i, ids in enumerate(prompts):
        prompt_tok[i, sp - len(ids):] = ids
        prompt_mask[i, sp - len(ids):] = True
    rows = lambda x: np.repeat(x, n, axis=0)  # noqa: E731  [P, ...] -> [P*n, ...]
    comp_mask = mask.reshape(p * n, t).astype(bool)
    valid = ~np.isnan(rewards).reshape(-1)
    return training.Batch(
        tokens=np.concatenate([rows(prompt_tok), tokens.reshape(p * n, t).astype(np.int32)], axis=1),
        attention_mask=np.concatenate([rows(prompt_mask), comp_mask], axis=1),
        completion_mask=comp_mask,
        old_logp=np.where(comp_mask, logprobs.reshape(p * n, t), 0.0).astype(np.float32),
        rewards=np.where(valid, np.nan_to_num(rewards.reshape(-1)), 0.0).astype(np.float32),
        valid=valid, answer_ids=answer_ids.reshape(-1).astype(np.int32))


def _rewards(results: Sequence[ProblemResult]) -> tuple[np.ndarray, ...]:
    rewards = np.array([[np.nan if r is None else r for r in res.rewards] for res in results], np.float64)
    passed = np.array([res.passed for res in results], np.int64)
    total = np.array([res.total for res in results], np.int64)
    return rewards, passed, total


def collect(sampler: sampling.Sampler, problems: Sequence[Problem], executor: Executor, key: jax.Array, *,
            sandbox_retries: int = 1, reward: str = "fraction", share_mesh: jax.sharding.Mesh | None = None) -> Rollout:
    """Sample ``sampler.settings.n`` completions of every problem with ``key``, judge them (sandbox
    errors re-judged `sandbox_retries` times), build the Batch. `reward` (`REWARDS`): what the
    batch's rewards are -- the fraction of tests passed, or 1 / 0 for all tests passed; the
    Rollout's ``rewards`` (its metrics) are always the fraction.

    Sample j of problem i uses ``jax.random.split(key, (P, n))[i, j]``. On a ``sampler.mesh``
    spanning several processes every host passes the same ``problems`` and ``key`` but samples,
    judges and returns only its own contiguous share of the problems (``multihost.host_share``):
    the Rollout is host-local (``gather_rollout`` collects the metrics inputs of all hosts; the
    batch rows are this host's block of the global batch, ``multihost.global_batch``). The prompt
    bucket is that of all P problems, so every host's batch has the same width. ``share_mesh`` (default
    ``sampler.mesh``): the mesh whose processes split the problems — the learner's, when each host
    samples on a rollout mesh of its own devices.
    """
    if not problems:
        raise ValueError("collect needs at least one problem")
    if reward not in REWARDS:
        raise ValueError(f"reward={reward!r} is not one of {REWARDS}")
    start = time.perf_counter()
    all_prompts, all_inside = sampler.encode(problems)
    first, stop = multihost.host_row_range(len(problems), sampler.mesh if share_mesh is None else share_mesh)
    problems = problems[first:stop]
    n = sampler.settings.n
    keys = jax.random.split(key, (len(all_prompts), n))[first:stop]
    out = sampler.sample(problems, keys, (all_prompts[first:stop], all_inside[first:stop]))
    sample_s = time.perf_counter() - start

    start = time.perf_counter()
    results = judge_completions(executor, problems, list(range(first, stop)), Completions.of_samples(out),
                                sandbox_retries=sandbox_retries, keep_behaviours=True)
    judge_s = time.perf_counter() - start
    rewards, passed, total = _rewards(results)
    ids = answer_ids([r.behaviours for r in results], n)
    bucket = sampling.prompt_length_bucket(max(len(x) for x in all_prompts), sampler.min_prompt_bucket)
    trained = rewards if reward == "fraction" else np.where(
        np.isnan(rewards), np.nan, np.array([r.correct_array() for r in results], np.float64))
    batch = build_batch(out.prompts, out.tokens, out.logprobs, out.mask, trained, ids, pad_id=sampler.pad_id,
                        min_prompt_bucket=bucket)
    return Rollout(batch=batch, rewards=rewards, passed=passed, total=total,
                   statuses=[tuple(r.statuses) for r in results], lengths=out.lengths,
                   finished=out.finished, texts=out.texts, no_code=sum(r.n_no_code for r in results),
                   sandbox_retries=sum(r.sandbox_retries for r in results),
                   sample_seconds=sample_s, judge_seconds=judge_s, answer_ids=ids)


def gather_rollout(ro: Rollout, mesh: jax.sharding.Mesh | None = None) -> Rollout:
    """The rollout of ALL hosts of ``collect(..., mesh=mesh)`` (a collective; identity when the
    batch is not split across processes): per-problem arrays and lists concatenated in block order
    (= problem order), counts summed, seconds the slowest block's. ``batch`` stays this host's
    block (the global batch is ``multihost.global_batch``)."""
    if multihost.batch_block(mesh)[1] == 1:
        return ro
    changes: dict[str, Any] = {}
    for field in dataclasses.fields(ro):
        value = getattr(ro, field.name)
        if isinstance(value, training.Batch):
            continue
        if isinstance(value, np.ndarray):
            parts = multihost.allgather_blocks(value.tolist(), mesh)
            changes[field.name] = np.concatenate([np.asarray(p, value.dtype).reshape((-1,) + value.shape[1:])
                                                  for p in parts])
        elif isinstance(value, list):
            parts = multihost.allgather_blocks([list(x) if isinstance(x, tuple) else x for x in value], mesh)
            changes[field.name] = [tuple(x) if isinstance(x, list) else x for p in parts for x in p]
        elif isinstance(value, (int, np.integer)) and not isinstance(value, bool):
            changes[field.name] = int(sum(multihost.allgather_blocks(int(value), mesh)))
        elif isinstance(value, float):
            changes[field.name] = float(max(multihost.allgather_blocks(value, mesh)))
        else:
            raise TypeError(f"gather_rollout does not know how to combine Rollout.{field.name} "
                            f"({type(value).__name__})")
    return dataclasses.replace(ro, **changes)


def rollout_metrics(ro: Rollout, ks: Sequence[int]) -> dict[str, float]:
    """Scalar metrics of a rollout: rewards, train pass@k / max@k (unbiased, over prompts with
    >= k valid samples), completion lengths, statuses, masked samples and valid samples whose
    behaviour is unknown (``samples/behaviour_unknown``: masked out of majority_vote)."""
    valid = ro.valid
    r = ro.rewards[valid]
    nan = float("nan")
    per_prompt_max = np.array([np.max(row[v]) for row, v in zip(ro.rewards, valid) if v.any()])
    out = {
        "reward/mean": float(r.mean()) if r.size else nan,
        "reward/std": float(r.std()) if r.size else nan,
        "reward/max": float(r.max()) if r.size else nan,
        "reward/min": float(r.min()) if r.size else nan,
        "reward/best_of_n_mean": float(per_prompt_max.mean()) if per_prompt_max.size else nan,
        "reward/solved_fraction": float(np.mean(r == 1.0)) if r.size else nan,
        "samples/total": float(ro.rewards.size),
        "samples/masked": float((~valid).sum()),
        "samples/no_code": float(ro.no_code),
        "samples/sandbox_retries": float(ro.sandbox_retries),
        "length/mean": float(ro.lengths.mean()),
        "length/max": float(ro.lengths.max()),
        "length/min": float(ro.lengths.min()),
        "length/truncated_fraction": float(np.mean(~ro.finished)),
    }
    if ro.answer_ids is not None:   # judged samples whose behaviour is unknown: masked out of majority_vote
        out["samples/behaviour_unknown"] = float(np.sum(valid & (ro.answer_ids < 0)))
    flat = [s for row in ro.statuses for s in row]
    for status in STATUSES:
        out[f"status/{status}"] = float(sum(s == status for s in flat))
    correct = valid & (ro.passed == ro.total) & (ro.total > 0)
    per = problem_metrics(correct, np.nan_to_num(ro.rewards), valid, list(ks))
    for name, table in per.items():
        for j, k in enumerate(ks):
            col = table[:, j][~np.isnan(table[:, j])]
            out[f"train/{name}/{k}"] = float(col.mean()) if col.size else nan
    return out
