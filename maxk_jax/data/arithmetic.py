"""A non-code example task for reward functions: arithmetic questions ("What is 17+25?").

    problems, report = load_dataset("arithmetic", split="train", num_problems=200)
    problems[0].prompt                                      # 'What is 17+25?'
    first_integer_reward(problems[0], "17+25 = 42")         # 0.0: the first integer is 17
    first_integer_reward(problems[0], "42, because ...")    # 1.0

    train --config.data.dataset=arithmetic --reward=maxk_jax.data.arithmetic:first_integer_reward

Each `Problem` keeps its answer in ``metadata["answer"]`` (an int) and one stdio test whose
expected output is the answer (so a program printing it would pass the code judge too; the
reward functions below never run code). Train and test splits are drawn from different seeds
(``default_rng([seed, 0])`` / ``[seed, 1]``); operands are uniform in [0, max_operand].
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Optional

import numpy as np

from maxk_jax.data.problem import Problem, StdioCase, StdioTests
from maxk_jax.data.report import LoadReport
from maxk_jax.data.rewards import batched_reward

OPERATORS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}
SPLITS = ("train", "test")
_INTEGER = re.compile(r"-?\d+")


def make_problems(num_problems: int, seed: int, *, max_operand: int = 50, operators: str = "+-",
                  split: str = "train") -> list[Problem]:
    """`num_problems` questions ``"What is {a}{op}{b}?"`` with a, b uniform in [0, max_operand] and
    op uniform over `operators` (any of ``+-*``), from ``default_rng([seed, SPLITS.index(split)])``."""
    if isinstance(num_problems, bool) or not isinstance(num_problems, int) or num_problems < 1:
        raise ValueError(f"num_problems must be a positive int, got {num_problems!r}")
    if isinstance(max_operand, bool) or not isinstance(max_operand, int) or max_operand < 1:
        raise ValueError(f"max_operand must be a positive int, got {max_operand!r}")
    if not operators or any(op not in OPERATORS for op in operators):
        raise ValueError(f"operators={operators!r} must be a non-empty string of {''.join(OPERATORS)}")
    if split not in SPLITS:
        raise ValueError(f"arithmetic split must be one of {SPLITS}, got {split!r}")
    rng = np.random.default_rng([seed, SPLITS.index(split)])
    out = []
    for i in range(num_problems):
        a, b = (int(x) for x in rng.integers(0, max_operand + 1, size=2))
        op = operators[int(rng.integers(len(operators)))]
        answer = OPERATORS[op](a, b)
        out.append(Problem(id=f"arithmetic/{split}/{i}", source="arithmetic", prompt=f"What is {a}{op}{b}?",
                           tests=StdioTests((StdioCase("", str(answer)),)), metadata={"answer": answer}))
    return out


def load_arithmetic(path: Optional[str] = None, split: str = "train", *, num_problems: int = 200, seed: int = 0,
                    max_operand: int = 50, operators: str = "+-") -> tuple[list[Problem], LoadReport]:
    """The `load_dataset` loader of ``"arithmetic"`` (generated, so `path` must be empty):
    `make_problems` of `split` and its report."""
    if path:
        raise ValueError(f"the arithmetic dataset is generated; path must be empty, got {path!r}")
    problems = make_problems(num_problems, seed, max_operand=max_operand, operators=operators, split=split)
    report = LoadReport(dataset="arithmetic", source="generated", split=split, n_rows=len(problems),
                        n_kept=len(problems), n_returned=len(problems),
                        params={"num_problems": num_problems, "seed": seed, "max_operand": max_operand,
                                "operators": operators})
    return problems, report


def first_integer(text: str) -> Optional[int]:
    """The first integer written in `text` (a leading '-' included), None when there is none."""
    match = _INTEGER.search(text)
    return None if match is None else int(match.group())


def _answer(problem: Problem) -> int:
    answer = problem.metadata.get("answer")
    if isinstance(answer, bool) or not isinstance(answer, int):
        raise ValueError(f"problem {problem.id!r} has no integer metadata['answer'] (got {answer!r}): "
                         "first_integer_reward scores arithmetic problems (maxk_jax.data.arithmetic)")
    return answer


def first_integer_reward(problem: Problem, completion: str) -> float:
    """1.0 when the first integer of `completion` is the problem's answer, else 0.0."""
    return 1.0 if first_integer(completion) == _answer(problem) else 0.0


@batched_reward
def first_integer_rewards(problems: Sequence[Problem], completions: Sequence[str]) -> list[float]:
    """The batched form of `first_integer_reward`: one reward per (problem, completion) pair."""
    return [first_integer_reward(p, c) for p, c in zip(problems, completions)]


def closeness_reward(problem: Problem, completion: str) -> float:
    """A graded reward: 1 / (1 + |first integer - answer|) (1.0 when right, 0.5 when off by one,
    0.0 without an integer), so max@k sees partial credit."""
    value = first_integer(completion)
    return 0.0 if value is None else 1.0 / (1.0 + abs(value - _answer(problem)))
