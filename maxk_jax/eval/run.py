"""Evaluation harness: sample N completions per problem -> extract code -> judge -> pass@k / max@k.

Library entry points (no files)::

    result = evaluate_problems(config, params, tokenizer, problems, executor=ex, n=256,
                               max_new_tokens=256, key=jax.random.key(0))
    result.means()            # {"pass_at_k": {1: ..., 2: ...}, "max_at_k": {...}, ...}
    maxk_jax.eval.report.write_report(result, out_dir)     # JSONL + summary JSON + table + PNG

`run_evaluation(problems, source, ...)` is the same loop with an injectable *completion source*
(``source(problems, keys [P, m], first_sample) -> [Completions of m texts] * P``):
`ModelCompletionSource` samples with `maxk_jax.sampling.generate`; `StaticCompletionSource`
replays given texts (judge completions produced elsewhere, or canonical solutions in tests).

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
from typing import Any, Optional

import jax
import numpy as np
from tqdm.auto import tqdm

from maxk_jax.data.problem import Problem
from maxk_jax.data.prompts import encode_prompts, prompt_opens_code_block, render_prompt
from maxk_jax.eval.bootstrap import max_reported_k
from maxk_jax.eval.result import EvalResult, ProblemResult
from maxk_jax.judging import Completions, judge_completions
from maxk_jax.execution import Executor
from maxk_jax.models.tokenizer_protocol import Tokenizer


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
        from maxk_jax.multihost import split_evenly

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


class ModelCompletionSource:
    """Samples completions with `maxk_jax.sampling.generate` from a Qwen2 config + params.

    Prompts are rendered with `render_prompt(problem, tokenizer, **render_kwargs)` and encoded
    with `encode_prompts`; generated tokens [P, m, T] are cut at ``lengths`` [P, m] and decoded
    with special tokens removed. `eos_id` (int or list) defaults to `default_eos_ids`.
    `generate_kwargs` go to generate (e.g. ``mesh``); `generate_fn` replaces it (same signature).
    """

    def __init__(self, config: Any, params: Any, tokenizer: Tokenizer, *, max_new_tokens: int,
                 temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0,
                 eos_id: Optional[int | Sequence[int]] = None, render_kwargs: Optional[Mapping[str, Any]] = None,
                 generate_kwargs: Optional[Mapping[str, Any]] = None, generate_fn: Optional[Callable] = None):
        self.config, self.params, self.tokenizer = config, params, tokenizer
        self.max_new_tokens = _positive_int(max_new_tokens, "max_new_tokens")
        from maxk_jax.sampling import validate_filters

        validate_filters(temperature, top_k, top_p)   # fail at construction, not at the first sample
        self.temperature, self.top_p, self.top_k = temperature, top_p, top_k
        self.eos_id = default_eos_ids(config, tokenizer) if eos_id is None else eos_id
        self.render_kwargs = dict(render_kwargs or {})
        self.generate_kwargs = dict(generate_kwargs or {})
        if generate_fn is None:
            from maxk_jax.sampling import generate as generate_fn
        self.generate_fn = generate_fn

    def __call__(self, problems: Sequence[Problem], keys: jax.Array, first_sample: int) -> list[Completions]:
        """Sample ``keys.shape[1]`` completions of each problem in one sampler call."""
        del first_sample  # the keys already identify the samples
        m = int(keys.shape[1])
        texts = [render_prompt(p, self.tokenizer, **self.render_kwargs) for p in problems]
        prompts = encode_prompts(problems, self.tokenizer, **self.render_kwargs)
        out = self.generate_fn(self.config, self.params, prompts, n=m, max_new_tokens=self.max_new_tokens,
                               key=keys, temperature=self.temperature, top_p=self.top_p, top_k=self.top_k,
                               eos_id=self.eos_id, **self.generate_kwargs)
        tokens, lengths = np.asarray(out.tokens), np.asarray(out.lengths)
        if tokens.shape[:2] != (len(problems), m) or lengths.shape != (len(problems), m):
            raise ValueError(f"sampler returned tokens {tokens.shape} / lengths {lengths.shape}, "
                             f"expected [{len(problems)}, {m}, T] / [{len(problems)}, {m}]")
        result = []
        for i, text in enumerate(texts):
            seqs = [tokens[i, j, :int(lengths[i, j])].tolist() for j in range(m)]
            decoded = self.tokenizer.batch_decode(seqs, skip_special_tokens=True)
            result.append(Completions(tuple(decoded), tuple(int(x) for x in lengths[i]),
                                      prompt_opens_code_block(text)))
        return result


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
    from maxk_jax.multihost import allgather_objects

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


def run_evaluation(problems: Sequence[Problem], source: CompletionSource, *, executor: Executor, n: int,
                   key: jax.Array, ks: Optional[Sequence[int]] = None, batch_size: int = 64,
                   sandbox_retries: int = 2, fail_on_excluded: bool = False, keep_completions: bool = False,
                   done: Iterable[ProblemResult] = (), on_result: Optional[Callable[[ProblemResult], None]] = None,
                   config: Optional[Mapping[str, Any]] = None, progress: bool = True,
                   host: tuple[int, int] = (0, 1)) -> EvalResult:
    """Sample `n` completions per problem from `source`, judge them, and collect the results.

    Problems are processed in order, in the fixed groups of `plan_groups(len(problems), n,
    batch_size)`; at most `batch_size` completions are sampled per source call. Judging group g
    (in a background thread) overlaps with sampling group g+1. `done` holds results of an earlier,
    interrupted run (skipped; a group with some problems done is re-sampled with the same key and
    only the missing problems are judged). `on_result(r)` is called for every new result, in
    index order (the CLI appends it to the JSONL). Raises RuntimeError on excluded samples when
    `fail_on_excluded`. Returns the `EvalResult` of all problems (done + new).

    Multi-host (``host = (index, count)``, e.g. ``multihost.batch_block(mesh)``; every process
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
    n = _positive_int(n, "n")
    ks = check_ks(default_ks(n) if ks is None else ks, n)
    index, count = host
    if not (isinstance(count, int) and isinstance(index, int) and 0 <= index < count):
        raise ValueError(f"host must be (index, count) with 0 <= index < count, got {host!r}")
    if count > 1:   # every host resumes from process 0's finished results
        from maxk_jax.multihost import broadcast_object

        done = [ProblemResult.from_json(r) for r in broadcast_object([r.to_json() for r in done])]
    finished = _check_done(done, problems, n, keep_completions)
    groups = plan_groups(len(problems), n, batch_size, count)
    bar = tqdm(total=len(problems), initial=len(finished), desc="evaluate", unit="problem", disable=not progress)
    judge_kw = dict(sandbox_retries=sandbox_retries, keep_completions=keep_completions)
    reward_sum = [sum(x for r in finished.values() for x in r.rewards if x is not None),
                  sum(r.n for r in finished.values())]

    def collect(future: concurrent.futures.Future) -> None:
        new = future.result()
        if count > 1:   # every host's new results, merged in index order
            from maxk_jax.multihost import allgather_objects

            merged = {}
            for part in allgather_objects([r.to_json() for r in new]):
                for obj in part:
                    merged.setdefault(int(obj["index"]), obj)   # replicated hosts: first copy
            new = [ProblemResult.from_json(merged[i]) for i in sorted(merged)]
        for r in new:
            if fail_on_excluded and r.n < r.n_sampled:
                bad_status = sorted(set(r.statuses) - {"ok"})
                raise RuntimeError(f"problem {r.problem_id!r}: {r.n_sampled - r.n} of {r.n_sampled} samples could "
                                   f"not be judged (status {bad_status}) and fail_on_excluded is set")
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
                calls = host_calls(group, n, index, count)
                comps = sample_calls(source, problems, calls, key, n)
                if count > 1 and group.chunks != (n,):   # samples split: the problem's host judges it
                    comps = {i: c for i, c in _gather_samples(comps, index).items() if i % count == index}
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


def evaluate_problems(config: Any, params: Any, tokenizer: Tokenizer, problems: Sequence[Problem], *, executor: Executor,
                      n: int, max_new_tokens: int, key: jax.Array, ks: Optional[Sequence[int]] = None,
                      temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0,
                      eos_id: Optional[int | Sequence[int]] = None, batch_size: int = 64, render_kwargs: Optional[Mapping[str, Any]] = None,
                      sandbox_retries: int = 2, fail_on_excluded: bool = False, keep_completions: bool = False,
                      progress: bool = True, generate_kwargs: Optional[Mapping[str, Any]] = None,
                      generate_fn: Optional[Callable] = None,
                      run_config: Optional[Mapping[str, Any]] = None,
                      host: tuple[int, int] = (0, 1)) -> EvalResult:
    """Evaluate a Qwen2 model (`config`, `params`) on `problems`: `n` samples per problem, judged
    by `executor`, pass@k / max@k for `ks` (default 1, 2, 4, ..., n). No files are written
    (`maxk_jax.eval.report.write_report` does that). For periodic evaluation in training.

    `key` is the root key of `problem_sample_keys`. The returned `EvalResult.config` records the
    sampling settings (plus `run_config`; everything in it must be JSON). `host`: see
    `run_evaluation` (multi-host: pass ``multihost.batch_block(mesh)`` and the mesh in
    `generate_kwargs`).
    """
    source = ModelCompletionSource(config, params, tokenizer, max_new_tokens=max_new_tokens,
                                   temperature=temperature, top_p=top_p, top_k=top_k, eos_id=eos_id,
                                   render_kwargs=render_kwargs, generate_kwargs=generate_kwargs,
                                   generate_fn=generate_fn)
    eos = source.eos_id if isinstance(source.eos_id, (int, np.integer)) else [int(e) for e in source.eos_id]
    settings = {"n": n, "max_new_tokens": max_new_tokens, "temperature": temperature, "top_p": top_p,
                "top_k": top_k, "eos_id": eos, "batch_size": batch_size,
                "render_kwargs": dict(render_kwargs or {}), "sandbox_retries": sandbox_retries}
    return run_evaluation(problems, source, executor=executor, n=n, key=key, ks=ks, batch_size=batch_size,
                          sandbox_retries=sandbox_retries, fail_on_excluded=fail_on_excluded,
                          keep_completions=keep_completions, config={**settings, **dict(run_config or {})},
                          progress=progress, host=host)


def _positive_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return int(value)
