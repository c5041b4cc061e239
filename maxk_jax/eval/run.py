"""Evaluation harness: sample N completions per problem -> extract code -> judge -> pass@k / max@k.

Library entry points (no files)::

    sampler = Sampler.create(config, params, tokenizer, SamplerSettings(n=256, max_new_tokens=256))
    result = evaluate(sampler, problems, executor=ex, key=jax.random.key(0))
    result.means()            # {"pass_at_k": {1: ..., 2: ...}, "max_at_k": {...}, ...}
    maxk_jax.eval.report.write_report(result, out_dir)     # JSONL + summary JSON + table + PNG

`run_evaluation(problems, source, ...)` is the same loop with an injectable *completion source*
(``source(problems, keys [P, m], first_sample) -> [Completions of m texts] * P``):
`SamplerCompletionSource` samples with a `maxk_jax.sampling.Sampler` (what `evaluate` uses);
`StaticCompletionSource` replays given texts (judge completions produced elsewhere, or canonical solutions in tests).

Rewards (paper §2 / App. C.1): the judge returns, per completion, ``passed`` of ``total`` tests.
max@k uses the continuous reward ``passed / total``; pass@k uses the binary reward "all tests
passed" (``passed == total``).

Sampling keys: sample j of problem i (its position in the problem list) is drawn with the key
``jax.random.split(jax.random.fold_in(key, i), n)[j]`` (`problem_sample_keys`), passed to the
sampler as a per-sample key array. A sample therefore depends only on (key, i, j), not on the
batch it was sampled in or on which problems an interrupted run had already finished, and a
resumed run reproduces an uninterrupted one. Problems are sampled in fixed groups
(`plan_groups`) of at most `batch_size` completions per sampler call on each host (memory bound); a group
with some problems already done is re-sampled whole, so even floating-point effects of the
batch composition are reproduced.

Null rewards: a completion whose judgement has status ``sandbox_error`` (infrastructure failure)
is re-judged up to `sandbox_retries` times. If it still fails -- or has status ``invalid`` (the
problem's own test code or checker is broken; not retried, it is deterministic) -- the sample is
EXCLUDED: its reward is recorded as null, the problem's valid sample count ``n`` drops below
``n_sampled``, its pass@k/max@k use only the valid samples (the unbiased estimators on n valid
samples), and k > n gives no value for that problem (dataset means per k then cover fewer
problems; `EvalResult.means` reports how many). Nothing becomes a silent 0. With
``fail_on_excluded=True`` the run raises instead.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NoReturn, Optional

import jax
import numpy as np
from tqdm.auto import tqdm

from maxk_jax.data.problem import Problem
from maxk_jax.eval.bootstrap import max_reported_k
from maxk_jax.eval.result import EvalResult, ProblemResult
from maxk_jax.execution.completions import Completions, judge_completions
from maxk_jax.execution import Executor
from maxk_jax.cli.fields import check_int
from maxk_jax.sampling.sampler import Sampler


def _positive_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return int(value)


# ----------------------------------------------------------------------------------------------
# k values and batching plan
# ----------------------------------------------------------------------------------------------
def default_ks(n: int) -> tuple[int, ...]:
    """k = 1, 2, 4, ... up to n/2 (`maxk_jax.eval.bootstrap.max_reported_k`), plus n/2 itself when
    it is not a power of two: the k values an n-sample evaluation reports."""
    top = max_reported_k(_positive_int(n, "n"))
    ks = [1 << i for i in range(top.bit_length()) if (1 << i) <= top]
    if ks[-1] != top:
        ks.append(top)
    return tuple(ks)


def check_ks(ks: Iterable[int], n: int) -> tuple[int, ...]:
    """Validate k values (ints in 1..n/2, no duplicates: an n-sample evaluation reports k <= n/2)
    and return them sorted."""
    top = max_reported_k(_positive_int(n, "n"))
    out = []
    for k in ks:
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= int(k) <= top:
            raise ValueError(f"every k must be an int in [1, n/2={top}] (n={n}: k <= n/2 keeps every estimate an "
                             f"average over many k-subsets; raise n to 2k), got k={k!r}")
        out.append(int(k))
    if not out:
        raise ValueError("ks is empty")
    if len(set(out)) != len(out):
        raise ValueError(f"ks has duplicates: {out}")
    return tuple(sorted(out))


@dataclasses.dataclass(frozen=True)
class Group:
    """One unit of sampling: consecutive problem `indices` sampled together, in sample chunks.

    Each chunk is one sampler call over all problems of the group with ``chunk`` samples each;
    ``len(indices) * max(chunks) <= batch_size``.
    """

    indices: tuple[int, ...]
    chunks: tuple[int, ...]


def plan_groups(num_problems: int, n: int, batch_size: int, hosts: int = 1) -> list[Group]:
    """Fixed sampling groups: ``hosts x (batch_size // n)`` problems per group when n <= batch_size
    (each host samples ``batch_size // n`` of them per call), else one problem per group with its
    n samples in chunks of at most `batch_size` rows (split across the hosts by `host_calls`).
    `batch_size` bounds the completions of one sampler call on one host."""
    _positive_int(num_problems, "num_problems")
    n, batch_size = _positive_int(n, "n"), _positive_int(batch_size, "batch_size")
    hosts = _positive_int(hosts, "hosts")
    if n <= batch_size:
        per = (batch_size // n) * hosts
        return [Group(tuple(range(s, min(s + per, num_problems))), (n,)) for s in range(0, num_problems, per)]
    chunks = (batch_size,) * (n // batch_size) + ((n % batch_size,) if n % batch_size else ())
    return [Group((i,), chunks) for i in range(num_problems)]


@dataclasses.dataclass(frozen=True)
class HostCall:
    """One sampler call of one host: samples ``first .. first + size - 1`` of each problem in
    `indices` (empty: the host takes part in the call with no rows of its own)."""

    indices: tuple[int, ...]
    first: int
    size: int


def host_calls(group: Group, n: int, index: int, count: int) -> list[HostCall]:
    """Host `index` of `count`'s sampler calls for `group` (a `plan_groups` group); every host
    gets the same number of calls with the same sizes (multi-host sampler calls are collectives
    over equal per-host shapes).

    * one call for all n samples (``group.chunks == (n,)``): the group's PROBLEMS are split into
      `count` contiguous parts (``multihost.split_evenly``), each host sampling all n of its own;
    * a problem whose n samples take several chunks: its SAMPLES are split, host h owning the
      contiguous part ``split_evenly(range(n), h, count)``: ``n // count`` samples in chunks of
      at most ``max(group.chunks)`` rows, then, when count does not divide n, one call of one
      sample in which hosts h < n % count sample their last sample and the others have no rows.
    With ``count == 1`` these are the group's own chunks."""
    n = _positive_int(n, "n")
    if not (isinstance(count, int) and isinstance(index, int) and 0 <= index < count):
        raise ValueError(f"host must be (index, count) with 0 <= index < count, got {(index, count)!r}")
    if sum(group.chunks) != n:
        raise ValueError(f"group chunks {group.chunks} do not add up to n={n}")
    if count == 1:
        starts = np.cumsum((0,) + group.chunks[:-1])
        return [HostCall(group.indices, int(s), c) for s, c in zip(starts, group.chunks)]
    if group.chunks == (n,):
        from maxk_jax.runtime.multihost import split_evenly

        return [HostCall(tuple(split_evenly(group.indices, index, count)), 0, n)]
    if len(group.indices) != 1:
        raise ValueError(f"a group sampled in chunks {group.chunks} must hold one problem, got {group.indices}")
    base, extra = divmod(n, count)
    first = index * base + min(index, extra)
    per = max(group.chunks)
    calls = [HostCall(group.indices, first + s, min(per, base - s)) for s in range(0, base, per)]
    if extra:
        calls.append(HostCall(group.indices if index < extra else (), first + base, 1))
    return calls


def problem_sample_keys(key: jax.Array, index: int, n: int) -> jax.Array:
    """The [n] per-sample keys of problem `index`: ``split(fold_in(key, index), n)``."""
    return jax.random.split(jax.random.fold_in(key, index), n)


# ----------------------------------------------------------------------------------------------
# Completion sources
# ----------------------------------------------------------------------------------------------
CompletionSource = Callable[[Sequence[Problem], jax.Array, int], list[Completions]]
"""``source(problems, keys, first_sample) -> list[Completions]``: keys [P, m] (typed keys, or raw
uint32 [P, m, 2]) are the per-sample keys of samples ``first_sample .. first_sample + m - 1`` of
each problem; one `Completions` with m texts per problem."""


class StaticCompletionSource:
    """Replays given completion texts ``{problem id: [text, ...]}`` (keys are not used).

    Samples ``first_sample .. first_sample + m - 1`` of a problem are its texts at those
    positions; a problem needs at least n texts. Use it for canonical solutions, or to judge
    completions produced elsewhere. `lengths` optionally gives token counts per text.
    """

    def __init__(self, texts: Mapping[str, Sequence[str]], *, inside_block: bool = False,
                 lengths: Optional[Mapping[str, Sequence[int]]] = None):
        self.texts = {pid: tuple(ts) for pid, ts in texts.items()}
        self.lengths = None if lengths is None else {pid: tuple(ls) for pid, ls in lengths.items()}
        self.inside_block = inside_block

    def __call__(self, problems: Sequence[Problem], keys: jax.Array, first_sample: int) -> list[Completions]:
        """Texts ``[first_sample, first_sample + keys.shape[1])`` of each problem."""
        m = int(keys.shape[1])
        out = []
        for p in problems:
            if p.id not in self.texts:
                raise ValueError(f"StaticCompletionSource has no completions for problem {p.id!r}")
            texts = self.texts[p.id][first_sample:first_sample + m]
            if len(texts) != m:
                raise ValueError(f"problem {p.id!r}: samples [{first_sample}, {first_sample + m}) requested but "
                                 f"only {len(self.texts[p.id])} texts were given")
            lengths = None if self.lengths is None else self.lengths[p.id][first_sample:first_sample + m]
            out.append(Completions(texts, lengths, self.inside_block))
        return out


class SamplerCompletionSource:
    """A `maxk_jax.sampling.Sampler` as a completion source: one ``sampler.sample`` call per source
    call (the sampler's prompt format, settings, stop / pad ids and mesh); the RL rollout samples
    through the same ``Sampler.sample``."""

    def __init__(self, sampler: Sampler):
        if not isinstance(sampler, Sampler):
            raise ValueError(f"SamplerCompletionSource needs a sampling.Sampler, got {type(sampler).__name__}")
        self.sampler = sampler

    def __call__(self, problems: Sequence[Problem], keys: jax.Array, first_sample: int) -> list[Completions]:
        """``keys.shape[1]`` completions of each problem with the given per-sample keys [P, m]."""
        del first_sample  # the keys identify the samples
        return Completions.of_samples(self.sampler.sample(problems, keys))


# ----------------------------------------------------------------------------------------------
# The evaluation loop
# ----------------------------------------------------------------------------------------------
def sample_group(source: CompletionSource, problems: Sequence[Problem], group: Group, key: jax.Array,
                 n: int) -> list[Completions]:
    """All n completions of each problem of `group`: one `source` call per sample chunk with the
    chunk's slice of `problem_sample_keys`, concatenated per problem."""
    got = sample_calls(source, problems, host_calls(group, n, 0, 1), key, n)
    return [got[i] for i in group.indices]


def sample_calls(source: CompletionSource, problems: Sequence[Problem], calls: Sequence[HostCall],
                 key: jax.Array, n: int) -> dict[int, Completions]:
    """Run `calls` (`host_calls`) in order -> {problem index: its completions of these calls,
    concatenated in call order}.  Each call passes the slice ``[first, first + size)`` of the
    problems' `problem_sample_keys` (a call without problems still calls `source`, with keys
    [0, size], so a multi-host sampler's collectives line up)."""
    merged: dict[int, Completions] = {}
    for call in calls:
        batch = [problems[i] for i in call.indices]
        keys = (jax.numpy.stack([problem_sample_keys(key, i, n)[call.first:call.first + call.size]
                                 for i in call.indices]) if batch     # [P, size]
                else jax.random.split(key, (0, call.size)))
        out = list(source(batch, keys, call.first))
        if len(out) != len(batch) or any(len(x.texts) != call.size for x in out):
            raise ValueError(f"completion source returned {[len(x.texts) for x in out]} texts for "
                             f"{len(batch)} problems x {call.size} samples")
        for i, comps in zip(call.indices, out):
            merged[i] = comps if i not in merged else merged[i].concat(comps)
    return merged


def _gather_samples(mine: dict[int, Completions], index: int) -> dict[int, Completions]:
    """Every host's completions of sample-split problems, concatenated in host order (= sample
    order, `host_calls`); a collective.  Hosts holding the same block contribute it once."""
    from maxk_jax.runtime.multihost import allgather_objects

    by_host: dict[int, Any] = {}
    for h, part in allgather_objects([index, {str(i): [list(c.texts), None if c.lengths is None else
                                                     list(c.lengths), c.inside_block]
                                              for i, c in mine.items()}]):
        by_host.setdefault(int(h), part)
    out: dict[int, Completions] = {}
    for h in sorted(by_host):
        for i, (texts, lengths, inside) in by_host[h].items():
            comps = Completions(tuple(texts), None if lengths is None else tuple(lengths), inside)
            out[int(i)] = comps if int(i) not in out else out[int(i)].concat(comps)
    return out


def _check_done(done: Iterable[ProblemResult], problems: Sequence[Problem], n: int,
                keep_completions: bool) -> dict[int, ProblemResult]:
    out: dict[int, ProblemResult] = {}
    for r in done:
        if not 0 <= r.index < len(problems) or problems[r.index].id != r.problem_id:
            raise ValueError(f"finished result {r.problem_id!r} at index {r.index} does not match the problem list "
                             "(different dataset or order?)")
        if r.n_sampled != n:
            raise ValueError(f"finished result {r.problem_id!r} has {r.n_sampled} samples, this run has n={n}")
        if (r.completions is not None) != keep_completions:
            raise ValueError(f"finished result {r.problem_id!r} {'has' if r.completions else 'lacks'} completions "
                             f"but keep_completions={keep_completions}")
        if r.index in out:
            raise ValueError(f"two finished results for problem {r.problem_id!r}")
        out[r.index] = r
    return out


@dataclasses.dataclass(frozen=True)
class EvalOptions:
    """How an evaluation runs (not what is sampled): ``ks`` (None = `default_ks`), ``batch_size``
    completions per sampler call on each host, ``sandbox_retries`` re-judgings of a sandbox error,
    ``fail_on_excluded`` (raise instead of excluding a sample that cannot be judged),
    ``keep_completions`` (texts and verdicts in each `ProblemResult`), ``progress`` (tqdm bar) and
    ``host`` = (index, count) of a multi-host run (``multihost.batch_block(mesh)``)."""

    ks: Optional[tuple[int, ...]] = None
    batch_size: int = 64
    sandbox_retries: int = 2
    fail_on_excluded: bool = False
    keep_completions: bool = False
    progress: bool = True
    host: tuple[int, int] = (0, 1)

    def __post_init__(self) -> None:
        if self.ks is not None:
            object.__setattr__(self, "ks", tuple(self.ks))
        _positive_int(self.batch_size, "batch_size")
        check_int(self.sandbox_retries, "sandbox_retries", 0)
        index, count = self.host
        if not (isinstance(count, int) and isinstance(index, int) and 0 <= index < count):
            raise ValueError(f"host must be (index, count) with 0 <= index < count, got {self.host!r}")


def run_evaluation(problems: Sequence[Problem], source: CompletionSource, *, executor: Executor, n: int,
                   key: jax.Array, options: EvalOptions = EvalOptions(), done: Iterable[ProblemResult] = (),
                   on_result: Optional[Callable[[ProblemResult], None]] = None,
                   config: Optional[Mapping[str, Any]] = None) -> EvalResult:
    """Sample `n` completions per problem from `source`, judge them, and collect the results.

    Problems are processed in order, in the fixed groups of `plan_groups(len(problems), n,
    batch_size)`; at most `batch_size` completions are sampled per source call. Judging group g
    (in a background thread) overlaps with sampling group g+1. `done` holds results of an earlier,
    interrupted run (skipped; a group with some problems done is re-sampled with the same key and
    only the missing problems are judged). `on_result(r)` is called for every new result, in
    index order (the CLI appends it to the JSONL). Raises RuntimeError on excluded samples when
    `fail_on_excluded`. Returns the `EvalResult` of all problems (done + new).

    `options` (`EvalOptions`): ks, batch_size, sandbox_retries, fail_on_excluded,
    keep_completions, progress, host.

    Multi-host (``options.host = (index, count)``, e.g. ``multihost.batch_block(mesh)``; every process
    calls this at the same time with the same arguments): `batch_size` is per host and the work
    of each group is split by `host_calls` -- its problems into `count` contiguous parts, or,
    when n > batch_size, the samples of its one problem (gathered afterwards; problem i is judged
    by host i % count).  The source is called on every host for every call, even with no rows
    of its own, so a sampler's collectives line up; each host judges only its own problems, and
    the new results of all hosts are exchanged after each group
    (``multihost.allgather_objects``), so every host returns the same `EvalResult` and
    `on_result` sees every result in index order. ``done`` is taken from process 0. With
    ``count == 1`` no collective is issued (each process evaluates everything on its own).
    """
    problems = _checked_problems(problems, key, options)
    n = _positive_int(n, "n")
    ks = check_ks(default_ks(n) if options.ks is None else options.ks, n)
    count = options.host[1]
    batch_size, fail_on_excluded, keep_completions = options.batch_size, options.fail_on_excluded, options.keep_completions
    if count > 1:   # every host resumes from process 0's finished results
        from maxk_jax.runtime.multihost import broadcast_object

        done = [ProblemResult.from_json(r) for r in broadcast_object([r.to_json() for r in done])]
    finished = _check_done(done, problems, n, keep_completions)
    groups = plan_groups(len(problems), n, batch_size, count)
    bar = tqdm(total=len(problems), initial=len(finished), desc="evaluate", unit="problem", disable=not options.progress)
    judge_kw = dict(sandbox_retries=options.sandbox_retries, keep_completions=keep_completions)
    reward_sum = [sum(x for r in finished.values() for x in r.rewards if x is not None),
                  sum(r.n for r in finished.values())]

    def collect(future: concurrent.futures.Future) -> None:
        new = future.result()
        if count > 1:   # every host's new results, merged in index order
            new = _allgathered(new)
        for r in new:
            if fail_on_excluded and r.n < r.n_sampled:
                _refuse_excluded(r)
            finished[r.index] = r
            if on_result is not None:
                on_result(r)
            reward_sum[0] += sum(x for x in r.rewards if x is not None)
            reward_sum[1] += r.n
            bar.update(1)
        bar.set_postfix(mean_reward=f"{reward_sum[0] / reward_sum[1]:.3f}" if reward_sum[1] else "-")

    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="maxk-judge") as pool:
            pending = None
            for group in groups:
                todo = [slot for slot, i in enumerate(group.indices) if i not in finished]
                if not todo:
                    continue
                comps = _sample_group(source, problems, group, key, n, options.host)
                idx = [i for i in sorted(comps) if i not in finished]
                job = pool.submit(judge_completions, executor, [problems[i] for i in idx], idx,
                                  [comps[i] for i in idx], **judge_kw)
                if pending is not None:
                    collect(pending)
                pending = job
            if pending is not None:
                collect(pending)
    finally:
        bar.close()
    return EvalResult(tuple(finished.values()), n, ks, dict(config or {}))


def evaluate(sampler: Sampler, problems: Sequence[Problem], *, executor: Executor, key: jax.Array,
             options: EvalOptions = EvalOptions(), done: Iterable[ProblemResult] = (),
             on_result: Optional[Callable[[ProblemResult], None]] = None,
             run_config: Optional[Mapping[str, Any]] = None) -> EvalResult:
    """The evaluation entry point: ``sampler.settings.n`` samples per problem from `sampler` (its
    weights, settings, prompt format, mesh), judged by `executor`, pass@k / max@k for
    ``options.ks`` (default 1, 2, 4, ..., n/2). No files are written
    (`maxk_jax.eval.report.write_report` does that). The RL loop's periodic evaluation, the
    pipelines' evaluations and experiments/evaluate.py all call this.

    `key` is the root key of `problem_sample_keys`. The returned `EvalResult.config` records the
    sampling settings (plus `run_config`; everything in it must be JSON). `done` / `on_result`:
    see `run_evaluation`; multi-host: ``options.host = multihost.batch_block(sampler.mesh)``.
    """
    s = sampler.settings
    settings = {"n": s.n, "max_new_tokens": s.max_new_tokens, "temperature": s.temperature, "top_p": s.top_p,
                "top_k": s.top_k, "eos_id": list(sampler.eos_ids), "batch_size": options.batch_size,
                "render_kwargs": {**dict(sampler.render_kwargs), "prompt_format": sampler.prompt_format},
                "sandbox_retries": options.sandbox_retries}
    return run_evaluation(problems, SamplerCompletionSource(sampler), executor=executor, n=s.n, key=key,
                          options=options, done=done, on_result=on_result,
                          config={**settings, **dict(run_config or {})})


def _checked_problems(problems: Sequence[Problem], key: jax.Array, options: EvalOptions) -> list[Problem]:
    """`run_evaluation`'s input checks (one ValueError naming the bad value); the problems as a list."""
    problems = list(problems)
    if not problems:
        raise ValueError("no problems to evaluate")
    bad = [i for i, p in enumerate(problems) if not isinstance(p, Problem)]
    if bad:
        raise ValueError(f"problems[{bad[0]}] is a {type(problems[bad[0]]).__name__}, expected Problem")
    if len({p.id for p in problems}) != len(problems):
        raise ValueError("problem ids are not unique")
    if not isinstance(key, jax.Array):
        raise ValueError(f"key must be a jax PRNG key array (jax.random.key(seed)), got {type(key).__name__}")
    if not isinstance(options, EvalOptions):
        raise ValueError(f"options must be an EvalOptions, got {type(options).__name__}")
    return problems


def _sample_group(source: CompletionSource, problems: list[Problem], group: Group, key: jax.Array, n: int,
                  host: tuple[int, int]) -> dict[int, Completions]:
    """This host's completions of one group (problem index -> Completions): its source calls
    (`host_calls`); when a problem's samples are split over hosts they are gathered and kept by the
    problem's host (i % count), which judges it."""
    index, count = host
    comps = sample_calls(source, problems, host_calls(group, n, index, count), key, n)
    if count > 1 and group.chunks != (n,):
        comps = {i: c for i, c in _gather_samples(comps, index).items() if i % count == index}
    return comps


def _allgathered(new: Sequence[ProblemResult]) -> list[ProblemResult]:
    """Every host's new results (``multihost.allgather_objects``), merged in index order (of replicated
    results the first copy)."""
    from maxk_jax.runtime.multihost import allgather_objects

    merged = {}
    for part in allgather_objects([r.to_json() for r in new]):
        for obj in part:
            merged.setdefault(int(obj["index"]), obj)
    return [ProblemResult.from_json(merged[i]) for i in sorted(merged)]


def _refuse_excluded(r: ProblemResult) -> NoReturn:
    """``fail_on_excluded``: a problem with samples that could not be judged stops the evaluation."""
    bad_status = sorted(set(r.statuses) - {"ok"})
    raise RuntimeError(f"problem {r.problem_id!r}: {r.n_sampled - r.n} of {r.n_sampled} samples could "
                       f"not be judged (status {bad_status}) and fail_on_excluded is set")
