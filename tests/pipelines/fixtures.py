"""Shared test inputs of the pipelines: hand-made evaluation results, and the real-checkpoint route
of the laptop pipeline (used by tests/pipelines/test_tiny.py in process and by
tests/experiments/test_tiny_pipeline.py from the command line): a three-problem MBPP train / test
split in the upstream schema, a tiny HF-format Qwen2 with a tokenizer trained on it, and the checks
of a finished run."""
import json
import os
import pathlib

import numpy as np
import pytest

from maxk_jax.eval.result import EvalResult, ProblemResult


def eval_result(rewards: np.ndarray, tests: int = 4) -> EvalResult:
    """EvalResult of a reward matrix [P, n] (reward 1 = all `tests` tests passed), k = 1, 2, 4."""
    probs = [ProblemResult(index=i, problem_id=f"p{i}", rewards=tuple(float(r) for r in row),
                           passed=tuple(int(round(r * tests)) for r in row), total=(tests,) * len(row),
                           statuses=("ok",) * len(row), verdict_counts={}) for i, row in enumerate(rewards)]
    return EvalResult(tuple(probs), rewards.shape[1], (1, 2, 4))


def _mbpp_row(task_id, text, code, tests):
    return {"task_id": task_id, "text": text, "code": code, "test_list": tests, "test_setup_code": "",
            "challenge_test_list": []}


MBPP_TRAIN = [
    _mbpp_row(601, "Write a function to add two numbers.", "def add(a, b):\n    return a + b",
              ["assert add(1, 2) == 3", "assert add(0, 0) == 0", "assert add(-1, 5) == 4"]),
    _mbpp_row(602, "Write a function to double a number.", "def double(x):\n    return 2 * x",
              ["assert double(2) == 4", "assert double(0) == 0", "assert double(-3) == -6"]),
    _mbpp_row(603, "Write a function to reverse a list.", "def rev(xs):\n    return xs[::-1]",
              ["assert rev([1, 2, 3]) == [3, 2, 1]", "assert rev([]) == []"]),
]
MBPP_TEST = [
    _mbpp_row(11, "Write a function to find the maximum of two numbers.",
              "def maximum(a, b):\n    return max(a, b)",
              ["assert maximum(1, 2) == 2", "assert maximum(5, 3) == 5", "assert maximum(-1, -4) == -1"]),
    _mbpp_row(12, "Write a function to square a number.", "def square(x):\n    return x * x",
              ["assert square(3) == 9", "assert square(0) == 0"]),
    _mbpp_row(13, "Write a function to negate a number.", "def neg(x):\n    return -x",
              ["assert neg(3) == -3"]),
]
TRAIN_FUNCS, TEST_FUNCS = {"add", "double", "rev"}, ["maximum", "square", "neg"]


@pytest.fixture(scope="module")
def mbpp_route(tmp_path_factory):
    """(MBPP directory in the upstream ``full`` schema with train.jsonl / test.jsonl, tiny HF-format
    Qwen2 checkpoint + tokenizer trained on the fixture text)."""
    from maxk_jax.models import tiny

    root = tmp_path_factory.mktemp("mbpp_route")
    data = root / "mbpp"
    data.mkdir()
    for split, rows in (("train", MBPP_TRAIN), ("test", MBPP_TEST)):
        (data / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    corpus = [r["text"] + "\n" + r["code"] + "\n" + "\n".join(r["test_list"]) for r in MBPP_TRAIN + MBPP_TEST] * 4
    # MBPP prompts are a few hundred byte-level tokens: room for prompt + completion
    ckpt = tiny.build_tiny_checkpoint(root / "ckpt", corpus, seed=0, vocab_size=300, hidden_size=32, num_layers=1,
                                      num_heads=2, num_kv_heads=1, intermediate_size=64, max_position_embeddings=1024)
    return str(data), ckpt


def check_mbpp_run(run: pathlib.Path, ckpt: str, n: int) -> None:
    """Asserts on a finished ``--model_path=ckpt --dataset=mbpp --estimator=grpo`` run directory
    (eval.num_problems = 2, eval.sampler.n = n, 2 RL steps)."""
    report = (run / "report.md").read_text()
    assert "estimator `grpo`" in report and f"model: HF checkpoint {os.path.abspath(ckpt)}" in report
    assert "every submission judged" in report
    assert "| rl |" in report and "| eval base |" in report and "| eval trained |" in report
    assert "base (tokenizer + model + warm-up)" not in report  # --model_path skips the tiny build
    for which in ("base", "trained"):
        rows = [json.loads(line) for line in (run / which / "per_problem.jsonl").read_text().splitlines()]
        # the first eval.num_problems = 2 rows of the fixture's test split, judged on their own asserts
        assert [r["id"] for r in rows] == ["mbpp/11", "mbpp/12"]
        assert [r["n"] for r in rows] == [n, n]
        assert all(s == "ok" for r in rows for s in r["statuses"])
        assert [set(r["total"]) for r in rows] == [{3}, {2}]
    comparison = json.loads((run / "comparison.json").read_text())
    assert comparison["num_problems"] == 2 and set(comparison["means"]) == {"base", "grpo"}
    metrics = [json.loads(line) for line in (run / "rl/metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2]
    rl = json.loads((run / "rl/config.json").read_text())
    assert (rl["data"]["dataset"], rl["data"]["split"], rl["data"]["prompt_format"]) == ("mbpp", "train", "full")
    assert rl["algo"]["estimator"] == "grpo" and rl["model"]["path"] == os.path.abspath(ckpt)


def method_table() -> dict:
    """A method table shaped like experiments/configs/base.py's METHODS (the library's tests do not
    import the experiment configs): the Table-2 names, each its registry estimator with the
    registry's loss form, except maxk_offpolicy_is (the §3.3 IS-weighted form), plus the on-policy
    maxk (a variant's parent)."""
    from maxk_jax.pipelines import TABLE2_METHODS
    from maxk_jax.rl.method import Method

    table = {name: Method(name) for name in TABLE2_METHODS}
    table["maxk_offpolicy_is"] = Method("maxk_offpolicy", loss_kind="is_weighted")
    table["maxk"] = Method("maxk")
    return table
