"""Programs for the synthetic problems (`maxk_jax.data.synthetic`): the canonical program, equivalent
rewrites and near misses, each with the exact reward the judge will give it.

Every synthetic program is rendered from the problem's `Spec`, and the same spec is interpreted in
Python, so a mutated program's reward is known without running it (tests check it against the real
sandbox). A near miss is one edit of the spec: a constant off by one, a confused operation (``add`` for
``sub``, truncating for floor division, a reduction that forgets the empty case), a dropped operation,
two neighbours swapped.

Use::

    train, test = make_split(SyntheticConfig(seed=0, num_train=2000, num_test=200, max_ops=3))
    canonical_solution(train[0])                       # the reference program (reward 1)
    noisy_solutions(train[0], np.random.default_rng(0), n=8, noise=0.2)   # warm-up targets
    near_misses(train[0])                              # every one-edit wrong program + its reward
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple, Optional

import numpy as np

from maxk_jax.data.problem import Problem
from maxk_jax.data.synthetic import (CONFUSE, CONFUSE_REDUCE, CONST_OPS, SOURCE, Spec, expected_output, parse_stdin,
                                     render, valid_const)


def spec_of(problem: Problem) -> Spec:
    """The `Spec` stored in a synthetic problem's metadata; ValueError for other problems."""
    if not isinstance(problem, Problem) or problem.source != SOURCE or "spec" not in problem.metadata:
        raise ValueError(f"not a synthetic problem: {getattr(problem, 'id', problem)!r}")
    return Spec.from_json(problem.metadata["spec"])


def _cases(problem: Problem, spec: Spec) -> tuple[list[Any], list[str]]:
    cases = problem.tests.cases
    return [parse_stdin(spec.kind, c.stdin) for c in cases], [c.expected.strip() for c in cases]


def canonical_solution(problem: Problem) -> str:
    """The canonical program of a synthetic problem (passes every hidden test)."""
    return render(spec_of(problem))


def _mutations(spec: Spec) -> list[tuple[str, Spec]]:
    """All single-edit near misses: constant +-1, confused op, dropped op, swapped neighbours,
    confused reduction (incl. forgetting the empty case)."""
    ops, out = spec.ops, []
    for i, (name, c) in enumerate(ops):
        def put(*new: tuple[str, Optional[int]], j: int = i + 1) -> tuple:
            return ops[:i] + tuple(new) + ops[j:]
        if c is not None:
            out += [(f"const{d:+d}@{i}", put((name, c + d))) for d in (-1, 1) if valid_const(name, c + d)]
        out += [(f"{name}->{o}@{i}", put((o, c if o in CONST_OPS else None))) for o in CONFUSE.get(name, ())]
        out.append((f"drop@{i}", put()))
        if i + 1 < len(ops) and ops[i + 1] != ops[i]:
            out.append((f"swap@{i}", put(ops[i + 1], ops[i], j=i + 2)))
    muts = [(m, Spec(spec.kind, new, spec.reduce)) for m, new in out]
    muts += [(f"{spec.reduce}->{o}", Spec(spec.kind, ops, o)) for o in CONFUSE_REDUCE.get(spec.reduce, ())]
    return muts


class Solution(NamedTuple):
    """A program for a synthetic problem and the reward it gets (exact, from the spec interpreter)."""

    code: str
    mutation: Optional[str]  # None for a correct program, else e.g. "drop@2", "const+1@0", "max->max_nodefault"
    reward: float            # fraction of the problem's hidden tests passed (a crash fails the test)


def _scored(problem: Problem) -> tuple[Spec, list[tuple[str, Spec, float]]]:
    spec = spec_of(problem)
    inputs, expected = _cases(problem, spec)
    scored, seen = [], {spec}
    for name, mut in _mutations(spec):
        if mut in seen:
            continue
        seen.add(mut)
        reward = float(np.mean([expected_output(mut, v) == e for v, e in zip(inputs, expected)]))
        if reward < 1.0:  # a mutation equivalent on every hidden test is not wrong
            scored.append((name, mut, reward))
    return spec, scored


def near_misses(problem: Problem) -> list[Solution]:
    """Every distinct wrong single-edit mutation of the problem's program (canonical rendering),
    with its exact reward in [0, 1), in a fixed order."""
    return [Solution(render(mut), name, r) for name, mut, r in _scored(problem)[1]]


def sample_solutions(problem: Problem, rng: np.random.Generator, n: int, noise: float) -> list[Solution]:
    """`n` diverse solutions: each independently, with probability `noise`, a near miss (drawn
    uniformly from those with reward strictly in (0, 1), or from all wrong ones when none is
    fractional) rendered in a random style, else a random equivalent rewrite of the canonical program."""
    if not isinstance(rng, np.random.Generator):
        raise ValueError(f"rng must be a numpy Generator, got {type(rng).__name__}")
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"n must be a non-negative int, got {n!r}")
    if not 0.0 <= noise <= 1.0:
        raise ValueError(f"noise must be in [0, 1], got {noise!r}")
    spec, scored = _scored(problem)
    partial = [s for s in scored if 0.0 < s[2] < 1.0] or scored
    out = []
    for _ in range(n):
        if rng.random() < noise:
            if not partial:
                raise ValueError(f"problem {problem.id} has no wrong near miss to sample")
            name, mut, reward = partial[int(rng.integers(len(partial)))]
            out.append(Solution(render(mut, rng), name, reward))
        else:
            out.append(Solution(render(spec, rng), None, 1.0))
    return out


def noisy_solutions(problem: Problem, rng: np.random.Generator, n: int, noise: float) -> list[str]:
    """Codes of `sample_solutions(problem, rng, n, noise)`: diverse rewrites, a `noise` fraction
    (in expectation) of them near misses with partial credit."""
    return [s.code for s in sample_solutions(problem, rng, n, noise)]


def tokenizer_corpus(problems: Sequence[Problem], rng: np.random.Generator,
                     solutions_per_problem: int = 4, noise: float = 0.3) -> list[str]:
    """Texts to train the tiny tokenizer on: each statement, its canonical program and
    `solutions_per_problem` noisy solutions."""
    texts: list[str] = []
    for p in problems:
        texts += [p.prompt, canonical_solution(p)] + noisy_solutions(p, rng, solutions_per_problem, noise)
    return texts
