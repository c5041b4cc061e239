"""maxk_jax.data.arithmetic: the generated questions, the loader and the example rewards."""
import pytest

from maxk_jax.data import arithmetic, load_dataset


def test_problems_hold_their_answer_and_splits_differ():
    train = arithmetic.make_problems(50, seed=3, max_operand=9, operators="+-*")
    assert len({p.id for p in train}) == 50 and all(p.source == "arithmetic" for p in train)
    for p in train:
        a, op, b = p.prompt[len("What is "):-1].partition(next(o for o in "+-*" if o in p.prompt[8:]))
        assert p.prompt.startswith("What is ") and p.prompt.endswith("?")
        assert p.metadata["answer"] == arithmetic.OPERATORS[op](int(a), int(b))
        assert 0 <= int(a) <= 9 and 0 <= int(b) <= 9
        assert p.tests.cases[0].expected == str(p.metadata["answer"])
    assert {p.prompt[8:].strip("0123456789?") for p in train} == {"+", "-", "*"}
    again = arithmetic.make_problems(50, seed=3, max_operand=9, operators="+-*")
    assert [p.prompt for p in again] == [p.prompt for p in train]
    test = arithmetic.make_problems(50, seed=3, max_operand=9, operators="+-*", split="test")
    assert [p.prompt for p in test] != [p.prompt for p in train]


def test_loader_through_load_dataset():
    problems, report = load_dataset("arithmetic", split="test", num_problems=7, seed=1)
    assert len(problems) == 7 and report.n_returned == 7 and report.split == "test"
    assert report.params == {"num_problems": 7, "seed": 1, "max_operand": 50, "operators": "+-"}
    with pytest.raises(ValueError, match="path must be empty, got 'x.jsonl'"):
        load_dataset("arithmetic", "x.jsonl")


@pytest.mark.parametrize("kwargs, message", [
    ({"num_problems": 0}, "num_problems must be a positive int, got 0"),
    ({"max_operand": 0}, "max_operand must be a positive int, got 0"),
    ({"operators": "/"}, "operators='/' must be a non-empty string of +-*"),
    ({"split": "val"}, "arithmetic split must be one of ('train', 'test'), got 'val'"),
])
def test_bad_options_are_named(kwargs, message):
    with pytest.raises(ValueError) as err:
        arithmetic.make_problems(**{"num_problems": 3, "seed": 0, **kwargs})
    assert message in str(err.value)


def _question(prompt, answer):
    from maxk_jax.data import Problem, StdioCase, StdioTests

    return Problem(id="a/0", source="arithmetic", prompt=prompt, tests=StdioTests((StdioCase("", str(answer)),)),
                   metadata={"answer": answer})


def test_rewards_score_the_first_integer():
    p = _question("What is 17+25?", 42)
    assert arithmetic.first_integer_reward(p, "42") == 1.0
    assert arithmetic.first_integer_reward(p, "The answer is 42, since 17+25=42.") == 1.0
    assert arithmetic.first_integer_reward(p, "17+25 = 42") == 0.0          # first integer: 17
    assert arithmetic.first_integer_reward(p, "forty-two") == 0.0
    assert arithmetic.first_integer_reward(p, "420") == 0.0
    assert arithmetic.closeness_reward(p, "41") == 0.5 and arithmetic.closeness_reward(p, "42") == 1.0
    assert arithmetic.closeness_reward(p, "no idea") == 0.0
    assert arithmetic.first_integer_rewards([p, p], ["42", "-42"]) == [1.0, 0.0]
    neg = _question("What is 3-10?", -7)
    assert arithmetic.first_integer_reward(neg, "-7") == 1.0 and arithmetic.first_integer_reward(neg, "7") == 0.0


def test_a_problem_without_answer_is_named():
    from maxk_jax.data import Problem, StdioCase, StdioTests

    p = Problem(id="x/1", source="x", prompt="Hi", tests=StdioTests((StdioCase("", "1"),)))
    with pytest.raises(ValueError, match=r"problem 'x/1' has no integer metadata\['answer'\]"):
        arithmetic.first_integer_reward(p, "1")
