"""experiments/tiny_pipeline.py: toy-size end-to-end runs (synthetic route; --model_path + --dataset=mbpp
route, in process and from the command line), the base-model cache, judging cache, flag validation."""
import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

from experiments import tiny_pipeline as tp
from experiments.configs import tiny as tiny_config

ROOT = pathlib.Path(__file__).resolve().parents[2]


def toy_config(runs_dir: str):
    c = tiny_config.get_toy_config()
    c.runs_dir = runs_dir
    return c


def test_toy_pipeline_writes_the_report(tmp_path):
    cfg = toy_config(str(tmp_path))
    out = tp.run_pipeline(cfg, progress=False)
    run = pathlib.Path(out["run_dir"])
    for rel in ("report.md", "curves.png", "comparison.json", "comparison.md", "timings.json",
                "pipeline_config.json", "base/table.md", "base/per_problem.jsonl", "trained/table.md",
                "trained/summary.json", "rl/metrics.jsonl"):
        assert (run / rel).is_file(), rel
    report = (run / "report.md").read_text()
    for text in ("maxk_offpolicy", "| rl |", "| eval base |", "| eval trained |", "pass@1", "max@4",
                 "Wilcoxon"):
        assert text in report, text
    comparison = json.loads((run / "comparison.json").read_text())
    assert comparison["ks"] == [1, 2, 4] and comparison["num_problems"] == 2
    assert set(comparison["means"]) == {"base", "trained (maxk_offpolicy)"}
    metrics = [json.loads(line) for line in (run / "rl/metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2]
    timings = json.loads((run / "timings.json").read_text())
    assert timings["judge"]["judged"] <= timings["judge"]["submissions"]
    # the warmed-up base model is cached: the next run with the same settings reuses it
    cache = [p for p in (tmp_path / "_cache").iterdir() if p.name.startswith("base-")]
    assert len(cache) == 1 and (cache[0] / "config.json").is_file() and (cache[0] / "warmup_loss.png").is_file()
    train_path, train, _ = tp.prepare_data(cfg, str(tmp_path / "_cache"))
    path, record, cached = tp.prepare_base(cfg, train, str(tmp_path / "_cache"))
    assert cached and path == str(cache[0]) and len(record["losses"]) == 4
    # an existing run directory is refused without overwrite
    with pytest.raises(ValueError, match="exists"):
        tp.run_pipeline(cfg, progress=False)


def test_base_key_changes_with_every_section():
    c = tiny_config.get_config()
    keys = {tp.base_key(c)}
    for section, field, value in (("synthetic", "seed", 1), ("tokenizer", "vocab_size", 700),
                                  ("model", "hidden_size", 96), ("warmup", "noise", 0.1)):
        changed = tiny_config.get_config()
        changed[section][field] = value
        keys.add(tp.base_key(changed))
    assert len(keys) == 5
    moved = tiny_config.get_config()
    moved.rl.algo.estimator = "grpo"  # RL settings do not change the base model
    assert tp.base_key(moved) == tp.base_key(c)


class _FakeExecutor:
    def __init__(self, statuses):
        self.statuses, self.calls = list(statuses), []

    def judge(self, subs):
        self.calls.append([s["id"] for s in subs])
        out = []
        for s in subs:
            status = self.statuses.pop(0)
            out.append({"id": s["id"], "status": status, "reward": 1.0 if status == "ok" else None,
                        "passed": 1 if status == "ok" else 0, "total": 1, "tests": []})
        return out


def test_judge_cache_is_used_for_synthetic_data_only():
    cfg = tiny_config.get_config()
    assert tp.uses_judge_cache(cfg)
    cfg.executor_cache = False
    assert not tp.uses_judge_cache(cfg)
    real = tp.apply_flags(tiny_config.get_config(), model_path="/ckpt", dataset="mbpp")
    assert real.executor_cache and not tp.uses_judge_cache(real)


def test_caching_executor_judges_each_program_once_and_never_caches_failures():
    inner = _FakeExecutor(["ok", "sandbox_error", "ok"])
    ex = tp.CachingExecutor(inner)
    sub = lambda i, code: {"id": i, "code": code, "mode": "stdio", "tests": [{"stdin": "", "expected": "1"}]}  # noqa: E731
    first = ex.judge([sub("a", "print(1)"), sub("b", "print(1)"), sub("c", "bad")])
    assert inner.calls == [["a", "c"]]
    assert [r["id"] for r in first] == ["a", "b", "c"]
    assert [r["status"] for r in first] == ["ok", "ok", "sandbox_error"]
    second = ex.judge([sub("d", "bad"), sub("e", "print(1)")])
    assert inner.calls[-1] == ["d"]  # the sandbox_error is judged again, the ok result reused
    assert [r["id"] for r in second] == ["d", "e"] and second[1]["reward"] == 1.0
    assert ex.stats == {"submissions": 5, "judged": 3}


@pytest.mark.parametrize("kwargs,match", [
    (dict(estimator="nope"), "estimator='nope' is unknown"),
    (dict(k=9), "k=9"),
    (dict(dataset="mbpp"), "needs --model_path"),
    (dict(dataset="no_such_set"), "neither 'synthetic'"),
    (dict(dataset_path="/data/mbpp"), "dataset_path='/data/mbpp' is set but dataset='synthetic'"),
    (dict(model_path="/nonexistent"), "not a Hugging Face directory"),
    (dict(name="a/b"), "plain directory name"),
])
def test_flag_validation(kwargs, match):
    cfg = tp.apply_flags(tiny_config.get_config(), **kwargs)
    with pytest.raises(ValueError, match=match):
        tp.validate(cfg)


@pytest.mark.parametrize("section,field,value,match", [
    ("eval", "n", 0, "eval.n"), ("eval", "temperature", 0.0, "eval.temperature"),
    ("eval", "top_p", 2.0, "eval.top_p must lie in"), ("eval", "top_k", -1, "eval.top_k must be an int >= 0"),
    ("eval", "temperature", float("inf"), "eval.temperature must be a finite float"),
    ("warmup", "steps", 0, "WarmupConfig.steps"), ("warmup", "noise", 1.5, "warmup.noise"),
    ("synthetic", "max_ops", 9, "max_ops"), ("rl", "max_steps", -1, "max_steps"),
])
def test_config_validation(section, field, value, match):
    cfg = tiny_config.get_config()
    cfg[section][field] = value
    with pytest.raises(ValueError, match=match):
        tp.validate(cfg)


def test_help_lists_every_flag():
    out = subprocess.run([sys.executable, "-m", "experiments.tiny_pipeline", "--helpshort"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode in (0, 1), out.stderr  # absl exits 1 after printing the help
    for name in ("config", "name", "runs_dir", "estimator", "k", "model_path", "dataset", "dataset_path",
                 "overwrite", "progress"):
        match = re.search(rf"--(\[no\])?{name}: (.+)", out.stdout)
        assert match and len(match.group(2)) > 20, name



def test_unknown_config_field_names_it_and_the_valid_ones():
    out = subprocess.run([sys.executable, "-m", "experiments.tiny_pipeline", "--config.rl.algo.kk=3"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr[-2000:]
    assert "--config.rl.algo.kk: config.rl.algo has no field 'kk'; valid fields: " in out.stderr
    assert "(did you mean 'k'?)" in out.stderr


# ----------------------------------------------------------------------------------------------
# The real-checkpoint route: --model_path (a HF Qwen2 directory) + --dataset=mbpp --dataset_path
# ----------------------------------------------------------------------------------------------
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


@pytest.fixture
def hf_datasets_cache(tmp_path, monkeypatch):
    """Keep the `datasets` cache of the fixture files out of the user's HF cache."""
    import datasets

    cache = str(tmp_path / "hf_datasets_cache")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", cache)
    return cache


class _RecordingExecutor:
    """The embedded judge, recording the entry point of every submission it judges."""

    def __init__(self):
        from maxk_jax.execution import make_executor

        self.inner, self.entry_points = make_executor("embedded:2"), []

    def judge(self, subs):
        self.entry_points += [s["tests"]["entry_point"] for s in subs]
        return self.inner.judge(subs)

    def close(self):
        self.inner.close()


def _check_mbpp_run(run: pathlib.Path, ckpt: str, n: int) -> None:
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
    assert comparison["num_problems"] == 2 and set(comparison["means"]) == {"base", "trained (grpo)"}
    metrics = [json.loads(line) for line in (run / "rl/metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2]
    rl = json.loads((run / "rl/config.json").read_text())
    assert (rl["data"]["dataset"], rl["data"]["split"], rl["data"]["prompt_format"]) == ("mbpp", "train", "full")
    assert rl["algo"]["estimator"] == "grpo" and rl["model"]["path"] == os.path.abspath(ckpt)


def test_real_checkpoint_and_mbpp_route(tmp_path, mbpp_route, hf_datasets_cache):
    data, ckpt = mbpp_route
    cfg = tp.apply_flags(toy_config(str(tmp_path / "runs")), name="toy_mbpp", model_path=ckpt, dataset="mbpp",
                         dataset_path=data, estimator="grpo")
    cfg.data.update(train_split="train", eval_split="test")
    judge = _RecordingExecutor()
    try:
        out = tp.run_pipeline(cfg, progress=False, executor=judge)
    finally:
        judge.close()
    _check_mbpp_run(pathlib.Path(out["run_dir"]), ckpt, cfg.eval.n)
    assert not (tmp_path / "runs" / "_cache").exists()  # no synthetic data, no tiny base model built
    # RL sampled the train split (2 steps x 2 problems of 3), evaluation the first two test problems
    rl_funcs, eval_funcs = set(judge.entry_points) & TRAIN_FUNCS, set(judge.entry_points) - TRAIN_FUNCS
    assert len(rl_funcs) >= 2 and eval_funcs == set(TEST_FUNCS[:2])


@pytest.mark.slow
def test_real_checkpoint_and_mbpp_route_from_the_command_line(tmp_path, mbpp_route):
    data, ckpt = mbpp_route
    toy = tiny_config.get_toy_config()
    overrides = {"rl.max_steps": toy.rl.max_steps, "rl.rollout.prompts": toy.rl.rollout.prompts,
                 "rl.rollout.n": toy.rl.rollout.n, "rl.rollout.max_new_tokens": toy.rl.rollout.max_new_tokens,
                 "rl.algo.ppo_iterations": toy.rl.algo.ppo_iterations, "eval.n": toy.eval.n,
                 "eval.num_problems": toy.eval.num_problems, "eval.max_new_tokens": toy.eval.max_new_tokens,
                 "eval.batch_size": toy.eval.batch_size, "data.train_split": "train", "data.eval_split": "test"}
    cmd = [sys.executable, "-m", "experiments.tiny_pipeline", f"--model_path={ckpt}", "--dataset=mbpp",
           f"--dataset_path={data}", "--estimator=grpo", f"--k={toy.rl.algo.k}", "--name=cli_mbpp",
           f"--runs_dir={tmp_path / 'runs'}", "--noprogress"] + [f"--config.{k}={v}" for k, v in overrides.items()]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_DATASETS_CACHE": str(tmp_path / "hf_datasets_cache")}
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    run = tmp_path / "runs" / "cli_mbpp"
    assert f"Report: {run / 'report.md'}" in out.stdout
    _check_mbpp_run(run, ckpt, toy.eval.n)
