"""maxk_jax.data.rewards: the module:function spec, the batched marker and the [0, 1] check."""
import math

import numpy as np
import pytest

from maxk_jax.data import rewards


def test_load_reward_fn_imports_module_function_and_dotted_attributes():
    from maxk_jax.data import arithmetic

    assert rewards.load_reward_fn("maxk_jax.data.arithmetic:first_integer_reward") is arithmetic.first_integer_reward
    assert rewards.load_reward_fn(" maxk_jax.data.problem : Problem.from_dict ").__name__ == "from_dict"
    assert rewards.reward_executor_spec("maxk_jax.data.arithmetic:closeness_reward") == (
        "reward:maxk_jax.data.arithmetic:closeness_reward")


@pytest.mark.parametrize("spec, message", [
    ("first_integer_reward", "must be 'module:function'"),
    ("a:b:c", "must be 'module:function'"),
    (":f", "with a module and a function name"),
    ("maxk_jax.data.arithmetic:", "with a module and a function name"),
    ("maxk_jax.data.arithmetic:1x", "with a module and a function name"),
    ("no_such_module_xyz:f", "module 'no_such_module_xyz' cannot be imported (ModuleNotFoundError"),
    ("maxk_jax.data.arithmetic:nope", "has no attribute 'nope'"),
    ("maxk_jax.data.arithmetic:SPLITS", "'SPLITS' is a tuple, not a callable"),
    (None, "must be 'module:function'"),
])
def test_bad_specs_name_the_value(spec, message):
    with pytest.raises(ValueError, match="--reward") as err:
        rewards.load_reward_fn(spec, what="--reward")
    assert message in str(err.value) and repr(spec) in str(err.value)
    assert "\n" not in str(err.value)


def test_batched_marker():
    def f(problems, completions):
        return [0.0] * len(completions)

    assert not rewards.is_batched(f)
    assert rewards.batched_reward(f) is f and rewards.is_batched(f)
    f.batched_reward = "yes"            # only True marks it
    assert not rewards.is_batched(f)


@pytest.mark.parametrize("value", [0, 1, 0.25, np.float32(0.5), np.int64(1), 1.0])
def test_check_reward_accepts_numbers_in_unit_interval(value):
    assert rewards.check_reward(value, "here") == float(value)


@pytest.mark.parametrize("value, message", [
    (1.5, "the reward 1.5 is not a finite number in [0, 1]"),
    (-0.1, "the reward -0.1 is not a finite number in [0, 1]"),
    (math.nan, "the reward nan is not"), (math.inf, "the reward inf is not"),
    (True, "must be a number in [0, 1], got bool"), ("1", "got str '1'"), (None, "got NoneType"),
])
def test_check_reward_refuses_the_rest(value, message):
    with pytest.raises(ValueError, match="^problem 3") as err:
        rewards.check_reward(value, "problem 3")
    assert message in str(err.value)
