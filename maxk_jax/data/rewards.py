"""Reward functions of your own: the callable forms, the ``module:function`` spec and the checks.

A reward function scores one completion of one problem::

    def my_reward(problem: Problem, completion: str) -> float:    # in [0, 1]
        ...

or, to score a whole batch in one call (e.g. a reward model), marked with `batched_reward`::

    @batched_reward
    def my_rewards(problems: Sequence[Problem], completions: Sequence[str]) -> Sequence[float]:
        ...                                                           # len(completions) values

``completion`` is the decoded text the model generated after the prompt (special tokens
removed), ``problem`` the `Problem` it answers (its ``metadata`` can carry the reference answer).
Rewards must be finite numbers in [0, 1]: the max@k / pass@k estimators assume them there
(pass@k counts a reward of exactly 1 as solved). The judge backend that calls a reward function
is ``maxk_jax.execution.RewardFunctionExecutor``; its executor spec is ``"reward:module:function"``
(`REWARD_PREFIX` + `load_reward_fn`'s spec), so every entry point that takes an executor spec
takes a reward function too. See docs/usage/rewards.md.
"""
from __future__ import annotations

import importlib
import math
import numbers
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from maxk_jax.data.problem import Problem

REWARD_PREFIX = "reward:"   # executor spec of a reward function: "reward:module:function"
BATCHED_ATTRIBUTE = "batched_reward"

RewardFn = Callable[[Problem, str], float]
BatchedRewardFn = Callable[[Sequence[Problem], Sequence[str]], Sequence[float]]
F = TypeVar("F", bound=Callable[..., Any])


def batched_reward(fn: F) -> F:
    """Mark ``fn(problems, completions) -> rewards`` as batched (sets ``fn.batched_reward = True``;
    any callable with that attribute true is treated the same)."""
    setattr(fn, BATCHED_ATTRIBUTE, True)
    return fn


def is_batched(fn: Callable[..., Any]) -> bool:
    """Whether `fn` takes lists ``(problems, completions)`` (`batched_reward`), not one pair."""
    return getattr(fn, BATCHED_ATTRIBUTE, False) is True


def load_reward_fn(spec: str, *, what: str = "reward function") -> Callable[..., Any]:
    """Import ``"package.module:function"`` (the part after ':' may be a dotted attribute path,
    e.g. ``module:Class.method``) and return the callable. ValueError naming `what` and the value
    when the spec is malformed, the module cannot be imported, or the attribute is missing or
    not callable."""
    if not isinstance(spec, str) or spec.count(":") != 1:
        raise ValueError(f"{what} {spec!r} must be 'module:function' (e.g. "
                         "'maxk_jax.data.arithmetic:first_integer_reward')")
    module_name, _, attr = (s.strip() for s in spec.partition(":"))
    if not module_name or not attr or not all(p.isidentifier() for p in attr.split(".")):
        raise ValueError(f"{what} {spec!r} must be 'module:function' with a module and a function name")
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as err:  # noqa: BLE001 - any import failure of user code is the user's mistake
        raise ValueError(f"{what} {spec!r}: module {module_name!r} cannot be imported "
                         f"({type(err).__name__}: {err})") from err
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"{what} {spec!r}: {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ValueError(f"{what} {spec!r}: {attr!r} is a {type(obj).__name__}, not a callable")
    return obj


def reward_executor_spec(spec: str, *, what: str = "reward function") -> str:
    """The executor spec ``"reward:<spec>"`` of a ``module:function`` reward, after checking that
    it imports (`load_reward_fn`; ValueError naming `what`)."""
    load_reward_fn(spec, what=what)
    return REWARD_PREFIX + spec.strip()


def check_reward(value: Any, where: str) -> float:
    """`value` as a float when it is a real number in [0, 1] (bools refused); ValueError naming
    `where` otherwise."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{where}: the reward must be a number in [0, 1], got {type(value).__name__} {value!r:.60}")
    reward = float(value)
    if not math.isfinite(reward) or not 0.0 <= reward <= 1.0:
        raise ValueError(f"{where}: the reward {reward!r} is not a finite number in [0, 1] (the max@k and "
                         "pass@k estimators assume rewards in [0, 1])")
    return reward
