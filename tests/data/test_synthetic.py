"""Tests of the synthetic partial-credit problem family (maxk_jax/data/synthetic.py).

Programs are judged by the real embedded executor (`maxk_jax.execution`) when it is importable;
otherwise by a plain local subprocess that runs every program in-process with redirected stdin
and compares whitespace-separated tokens (same reward definition: passed / total).
"""
import collections
import json
import subprocess
import sys
import warnings

import numpy as np
import pytest

from maxk_jax.data import synthetic as syn
from maxk_jax.data import synthetic_solutions as sol
from maxk_jax.data.problem import Problem, StdioCase, StdioTests, load_problems, save_problems

CFG = syn.SyntheticConfig(seed=11, num_train=300, num_test=60)


@pytest.fixture(scope="module")
def split():
    return syn.make_split(CFG)


# --- judging --------------------------------------------------------------------------------
_LOCAL_HARNESS = r"""
import contextlib, io, json, sys
jobs = json.load(sys.stdin)
outs = []
for job in jobs:
    buf, old_stdin = io.StringIO(), sys.stdin
    sys.stdin = io.StringIO(job["stdin"])
    try:
        with contextlib.redirect_stdout(buf):
            exec(compile(job["code"], "<candidate>", "exec"), {"__name__": "__main__"})
        outs.append(buf.getvalue())
    except Exception:
        outs.append(None)
    finally:
        sys.stdin = old_stdin
json.dump(outs, sys.__stdout__)
"""


def _make_executor():
    """The real embedded sandbox executor, or None (with a warning) if maxk_jax.execution lacks it."""
    try:
        from maxk_jax.execution import make_executor
    except ModuleNotFoundError as err:
        if err.name != "maxk_jax.execution":
            raise
        warnings.warn("maxk_jax.execution not available: judging with a plain local subprocess")
        return None
    return make_executor("embedded")


def judge(pairs: list[tuple[Problem, str]]) -> list[float]:
    """Reward (passed/total) of each (problem, code)."""
    executor = _make_executor()
    if executor is not None:
        with executor:
            results = executor.judge([p.to_submission(code, f"s{i}") for i, (p, code) in enumerate(pairs)])
        assert [r["status"] for r in results] == ["ok"] * len(pairs), results
        return [r["reward"] for r in results]
    jobs = [{"code": code, "stdin": c.stdin} for p, code in pairs for c in p.tests.cases]
    proc = subprocess.run([sys.executable, "-c", _LOCAL_HARNESS], input=json.dumps(jobs),
                          capture_output=True, text=True, timeout=600, check=True)
    outs, rewards, k = json.loads(proc.stdout), [], 0
    for p, _ in pairs:
        cases = p.tests.cases
        ok = [o is not None and o.split() == c.expected.split() for o, c in zip(outs[k:k + len(cases)], cases)]
        rewards.append(sum(ok) / len(cases))
        k += len(cases)
    return rewards


def _judge_problems(problems, rewrites: int, max_misses: int, rng):
    pairs, want = [], []
    for p in problems:
        pairs.append((p, sol.canonical_solution(p)))
        want.append((1.0, None))
        for s in sol.sample_solutions(p, rng, rewrites, 0.0):
            pairs.append((p, s.code))
            want.append((1.0, None))
        misses = sol.near_misses(p)
        misses.sort(key=lambda m: not 0 < m.reward < 1)  # fractional ones first
        for m in misses[:max_misses]:
            pairs.append((p, m.code))
            want.append((m.reward, m.mutation))
    got = judge(pairs)
    for (p, code), (r, mutation), g in zip(pairs, want, got):
        assert g == pytest.approx(r), (p.prompt, code, mutation, r, g)
    return got, want


def test_judge_canonical_rewrites_and_near_misses(split):
    train, test = split
    problems = train[:10] + test[:6]
    got, want = _judge_problems(problems, rewrites=2, max_misses=4, rng=np.random.default_rng(0))
    fractional = [g for g, (r, m) in zip(got, want) if m is not None and 0 < g < 1]
    assert len(fractional) >= len(problems)  # on average >= 1 fractional near miss per problem


@pytest.mark.slow
def test_judge_many_problems(split):
    train, test = split
    _judge_problems(train[:120] + test, rewrites=4, max_misses=100, rng=np.random.default_rng(1))


# --- splits ---------------------------------------------------------------------------------
def test_make_split_deterministic(split):
    train, test = split
    again_train, again_test = syn.make_split(CFG)
    assert [p.to_dict() for p in train + test] == [p.to_dict() for p in again_train + again_test]
    other_train, other_test = syn.make_split(syn.SyntheticConfig(seed=12, num_train=300, num_test=60))
    assert {p.prompt for p in other_test} != {p.prompt for p in test}
    assert len(train) == CFG.num_train and len(test) == CFG.num_test


def test_test_split_does_not_depend_on_num_train(split):
    _, test = split
    _, test_small = syn.make_split(syn.SyntheticConfig(seed=11, num_train=5, num_test=60))
    assert [p.to_dict() for p in test_small] == [p.to_dict() for p in test]


def test_splits_disjoint(split):
    train, test = split
    for key in (lambda p: p.id, lambda p: p.prompt, lambda p: sol.spec_of(p), sol.canonical_solution):
        tr, te = [key(p) for p in train], [key(p) for p in test]
        assert len(set(tr)) == len(tr) and len(set(te)) == len(te)
        assert not set(tr) & set(te)


def test_problems_well_formed_and_cached(split, tmp_path):
    train, test = split
    kinds = collections.Counter()
    for p in train + test:
        spec = sol.spec_of(p)
        kinds[spec.kind] += 1
        assert p.source == syn.SOURCE and p.mode == "stdio" and p.num_tests == CFG.num_tests
        assert CFG.min_ops <= p.difficulty == len(spec.ops) <= CFG.max_ops
        assert p.prompt == syn.statement(spec)
        assert len({c.stdin for c in p.tests.cases}) == CFG.num_tests
        assert len({c.expected for c in p.tests.cases}) >= 3
        for name, c in spec.ops:
            if c is not None:
                assert str(c) in p.prompt
        # every operation is tested: dropping any one of them fails some hidden test
        drops = {m.mutation for m in sol.near_misses(p) if m.mutation.startswith("drop@")}
        assert drops == {f"drop@{i}" for i in range(len(spec.ops))}, p.prompt
    assert kinds["scalar"] > 0 and kinds["list"] > 0
    path = tmp_path / "syn.jsonl"
    save_problems(test, path)
    reloaded = load_problems(path)
    assert [sol.canonical_solution(p) for p in reloaded] == [sol.canonical_solution(p) for p in test]


def test_docstring_example():
    spec = syn.Spec("scalar", (("add", 3), ("mul", -2), ("max", 5)))
    assert syn.statement(spec) == ("Read an integer x. Add 3 to x, then multiply x by -2, then clamp x to "
                                   "at least 5. Print x.")
    assert syn.render(spec) == "x=int(input())\nx=x+3\nx=x*-2\nx=max(x,5)\nprint(x)"
    inputs = [-30, -9, -7, -6, -5, 0, 4, 20]  # the clamp is a no-op exactly for x <= -6
    cases = tuple(StdioCase(f"{x}\n", f"{max(-2 * (x + 3), 5)}\n") for x in inputs)
    problem = Problem("synthetic/example", syn.SOURCE, syn.statement(spec), StdioTests(cases),
                      metadata={"spec": spec.to_json()})
    drop = {m.mutation: m for m in sol.near_misses(problem)}["drop@2"]
    assert drop.code == "x=int(input())\nx=x+3\nx=x*-2\nprint(x)" and drop.reward == 4 / 8


# --- partial credit and noisy solutions ----------------------------------------------------
def test_near_misses_give_partial_credit(split):
    train, _ = split
    with_fraction = 0
    for p in train:
        misses = sol.near_misses(p)
        assert misses and all(0.0 <= m.reward < 1.0 for m in misses)
        assert len({m.code for m in misses}) == len(misses)
        with_fraction += any(0.0 < m.reward < 1.0 for m in misses)
        spec = sol.spec_of(p)
        if spec.reduce in ("max", "min") and any(n in ("gt", "lt", "even", "odd") for n, _ in spec.ops):
            forgot_empty = [m for m in misses if m.mutation == f"{spec.reduce}->{spec.reduce}_nodefault"]
            assert len(forgot_empty) == 1 and 0.0 < forgot_empty[0].reward < 1.0
    assert with_fraction / len(train) >= 0.8


def test_noisy_solutions_rate_diversity_and_determinism(split):
    train, _ = split
    problems = train[:100]
    rng = np.random.default_rng(3)
    sols = [s for p in problems for s in sol.sample_solutions(p, rng, 16, 0.25)]
    wrong = np.mean([s.mutation is not None for s in sols])
    assert abs(wrong - 0.25) < 4 * np.sqrt(0.25 * 0.75 / len(sols))
    assert all(s.reward == 1.0 for s in sols if s.mutation is None)
    assert all(0.0 <= s.reward < 1.0 for s in sols if s.mutation is not None)
    clean = [sol.noisy_solutions(p, np.random.default_rng(4), 16, 0.0) for p in problems]
    assert np.mean([len(set(c)) for c in clean]) >= 10
    assert clean[0] == sol.noisy_solutions(problems[0], np.random.default_rng(4), 16, 0.0)
    all_wrong = sol.sample_solutions(problems[0], np.random.default_rng(5), 8, 1.0)
    fractional = any(0 < m.reward < 1 for m in sol.near_misses(problems[0]))
    assert all(s.mutation is not None and (0 < s.reward < 1 or not fractional) for s in all_wrong)


def test_tokenizer_corpus(split):
    train, _ = split
    corpus = sol.tokenizer_corpus(train[:10], np.random.default_rng(0), solutions_per_problem=3)
    assert len(corpus) == 10 * 5 and corpus[0] == train[0].prompt


# --- bad input ------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs,field", [
    (dict(seed=1.5), "seed"), (dict(seed=True), "seed"), (dict(num_train=-1), "num_train"),
    (dict(min_ops=0), "min_ops"), (dict(min_ops=3, max_ops=2), "min_ops"), (dict(max_ops=9), "max_ops"),
    (dict(max_const=1), "max_const"), (dict(num_tests=1), "num_tests"),
    (dict(num_tests=20, input_range=5), "num_tests"), (dict(list_fraction=1.5), "list_fraction"),
    (dict(max_list_len=0), "max_list_len")])
def test_config_rejects_bad_values(kwargs, field):
    with pytest.raises(ValueError, match=field):
        syn.SyntheticConfig(**{"seed": 0, **kwargs})


def test_bad_inputs_raise(split):
    train, _ = split
    p = train[0]
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="noise"):
        sol.noisy_solutions(p, rng, 4, 1.5)
    with pytest.raises(ValueError, match="noise"):
        sol.noisy_solutions(p, rng, 4, float("nan"))
    with pytest.raises(ValueError, match="n must"):
        sol.noisy_solutions(p, rng, -1, 0.1)
    with pytest.raises(ValueError, match="rng"):
        sol.noisy_solutions(p, 0, 4, 0.1)
    other = Problem("x/1", "code_contests", "stmt", StdioTests((StdioCase("1\n", "1\n"),)))
    with pytest.raises(ValueError, match="not a synthetic problem"):
        sol.canonical_solution(other)
    with pytest.raises(ValueError, match="invalid constant"):
        syn.Spec("scalar", (("mod", 1),))
    with pytest.raises(ValueError, match="unknown scalar op"):
        syn.Spec("scalar", (("gt", 1),))
    with pytest.raises(ValueError, match="reduce"):
        syn.Spec("list", (("abs", None),), None)
    with pytest.raises(ValueError, match="malformed synthetic spec"):
        syn.Spec.from_json({"kind": "scalar"})
    with pytest.raises(ValueError, match="could only generate"):
        syn.make_split(syn.SyntheticConfig(seed=0, num_train=500, num_test=0, min_ops=1, max_ops=1,
                                           max_const=2, list_fraction=0.0))
