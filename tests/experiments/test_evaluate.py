"""experiments.evaluate: end to end on a tiny random checkpoint (real tokenizer, sampler, sandboxed
judge), consistent output files, and resume after an interruption giving identical files."""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from maxk_jax.data.problem import Problem, StdioCase, StdioTests, save_problems
from maxk_jax.eval.report import read_report
from maxk_jax.models.tiny import build_tiny_checkpoint

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUTPUTS = ("per_problem.jsonl", "summary.json", "table.md", "curves.png", "run_config.json")


def _run(*args, cache_dir=None):
    env = {**os.environ, "PYTHONPATH": ROOT}
    if cache_dir is not None:  # share compiled programs between the runs of one test
        env.update(JAX_COMPILATION_CACHE_DIR=str(cache_dir), JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
                   JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")
    return subprocess.run([sys.executable, "-m", "experiments.evaluate", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=600, env=env)


@pytest.fixture(scope="module")
def fixture_dir(tmp_path_factory):
    """3 stdio problems (x + i for 3 inputs) as a JSONL cache + a tiny random Qwen2 checkpoint."""
    d = tmp_path_factory.mktemp("eval_cli")
    problems = [Problem(id=f"fx/{i}", source="fx", prompt=f"Read x and print x + {i}.",
                        tests=StdioTests(tuple(StdioCase(f"{x}\n", f"{x + i}\n") for x in range(3))))
                for i in range(3)]
    save_problems(problems, d / "problems.jsonl")
    corpus = [p.prompt for p in problems] + ["x = int(input())\nprint(x + 1)\n", "```python\nprint(1)\n```"] * 3
    build_tiny_checkpoint(d / "model", corpus, seed=0, vocab_size=300, hidden_size=32, num_layers=1, num_heads=2,
                          num_kv_heads=1, max_position_embeddings=512)
    return d


def _args(d, out, *extra):
    return (f"--checkpoint={d / 'model'}", f"--problems={d / 'problems.jsonl'}", f"--out_dir={out}", "--n=4",
            "--seed=0", "--max_new_tokens=12", "--batch_size=4", "--system_prompt=", "--keep_completions",
            "--run_name=tiny", "--noprogress", *extra)


def test_help_lists_every_flag():
    res = subprocess.run([sys.executable, "-m", "experiments.evaluate", "--help"], cwd=ROOT, capture_output=True,
                         text=True, timeout=120, env={**os.environ, "PYTHONPATH": ROOT})
    assert res.returncode == 0 and "--checkpoint" in res.stdout, res.stderr
    for flag in ("checkpoint", "step", "model_dir", "dataset", "problems", "out_dir", "n", "ks", "batch_size",
                 "max_new_tokens", "temperature", "top_p", "top_k", "seed", "executor", "sandbox_retries",
                 "fail_on_excluded", "keep_completions", "overwrite", "mesh"):
        assert f"--{flag}:" in res.stdout or f"--[no]{flag}:" in res.stdout, flag


def test_dtype_defaults_to_bfloat16_on_accelerators_and_float32_on_cpu():
    from maxk_jax.eval.checkpoint import resolve_dtype

    assert [resolve_dtype("auto", b) for b in ("cpu", "gpu", "tpu")] == ["float32", "bfloat16", "bfloat16"]
    assert resolve_dtype("float32", "gpu") == "float32" and resolve_dtype("bfloat16", "cpu") == "bfloat16"
    with pytest.raises(ValueError, match="--dtype='float16'"):
        resolve_dtype("float16", "gpu")


@pytest.mark.parametrize("bad, message", [("--temperature=-1", "--temperature must be a finite float >= 0"),
                                          ("--top_p=2", "--top_p must lie in (0, 1]"),
                                          ("--ks=1,9", "--ks: every k must be an int in [1, n/2=2]"),
                                          ("--executor=http://127.0.0.1:1", "executor 'http://127.0.0.1:1' is "
                                                                            "unreachable"),
                                          ("--problems={d}/absent.jsonl", "--problems file '{d}/absent.jsonl' "
                                                                          "does not exist"),
                                          ("--checkpoint={d}/absent", "--checkpoint '{d}/absent' does not exist"),
                                          ("--checkpoint={d}", "--checkpoint '{d}' is neither a Hugging Face"),
                                          ("--out_dir={d}/problems.jsonl/out", "--out_dir '{d}/problems.jsonl/out' "
                                                                               "cannot be created"),
                                          ("--max_new_tokens=500", "--max_new_tokens=500 does not fit: problem "
                                                                   "'fx/0' has a ")])
def test_bad_flags_fail_before_writing_anything(fixture_dir, tmp_path, bad, message):
    """A rejected flag, file or judge is one line on stderr (exit status 2) and leaves no files,
    so the corrected re-run in the same --out_dir is not refused as 'different settings'."""
    res = _run(*_args(fixture_dir, tmp_path / "out", bad.format(d=fixture_dir)))
    assert res.returncode == 2 and message.format(d=fixture_dir) in res.stderr, res.stderr[-2000:]
    assert len(res.stderr.splitlines()) == 1, res.stderr
    assert not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def full_run(fixture_dir, tmp_path_factory):
    """One uninterrupted CLI run: (result dir, JAX compilation cache dir)."""
    d = tmp_path_factory.mktemp("full")
    (d / "a").mkdir()   # left by a run that was rejected after writing its settings: not a conflict
    (d / "a" / "run_config.json").write_text(json.dumps({"seed": 99, "n": 1}))
    res = _run(*_args(fixture_dir, d / "a"), cache_dir=d / "jax_cache")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "| Method | pass@1 | pass@2 |\n" in res.stdout         # n = 4: k <= n/2
    return d / "a", d / "jax_cache"


def test_end_to_end_output_files_are_consistent(fixture_dir, full_run):
    a, _ = full_run
    result, name = read_report(a)
    assert name == "tiny" and result.n == 4 and result.ks == (1, 2) and len(result.problems) == 3
    summary = json.loads((a / "summary.json").read_text())
    assert summary["totals"]["samples"] == 12 and summary["n"] == 4
    assert summary["config"]["checkpoint"] == {"kind": "hf", "checkpoint": str(fixture_dir / "model")}
    assert json.loads((a / "run_config.json").read_text()) == summary["config"]
    assert summary["config"]["dtype"] == "float32"   # --dtype=auto on CPU
    for r in result.problems:   # consistent records: rewards = passed/total, lengths within the budget
        assert r.n_sampled == 4 and len(r.completions) == 4 and set(r.total) == {3}
        assert all(1 <= x <= 12 for x in r.lengths)
        assert list(r.rewards) == [p / 3 if s == "ok" else None for p, s in zip(r.passed, r.statuses)]
        assert sum(r.verdict_counts.values()) == 4 * 3
    per = result.per_problem()
    for j, k in enumerate(result.ks):
        assert summary["max_at_k"][str(k)] == pytest.approx(float(np.nanmean(per["max_at_k"][:, j])))
        assert summary["pass_at_k"][str(k)] == pytest.approx(float(np.nanmean(per["pass_at_k"][:, j])))
    table = (a / "table.md").read_text()
    assert "| tiny |" in table and "| Method | max@1 | max@2 |\n" in table
    assert (a / "curves.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow
def test_cli_resume_after_interruption_gives_identical_files(fixture_dir, full_run, tmp_path):
    a, cache = full_run
    b = tmp_path / "b"
    # Interrupt: keep one record and half of the next (a torn append), drop the final files.
    shutil.copytree(a, b)
    lines = (b / "per_problem.jsonl").read_bytes().splitlines(keepends=True)
    (b / "per_problem.jsonl").write_bytes(lines[0] + lines[1][:len(lines[1]) // 2])
    for name in ("summary.json", "table.md", "curves.png"):
        (b / name).unlink()
    res = _run(*_args(fixture_dir, b), cache_dir=cache)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "1 of 3 problems already done" in res.stdout
    for name in OUTPUTS:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    torn = (b / "per_problem.jsonl").read_bytes()
    res = _run(*_args(fixture_dir, b, "--seed=1"), cache_dir=cache)   # changed settings are refused
    assert res.returncode == 2 and "different settings" in res.stderr and "'seed': (0, 1)" in res.stderr
    assert (b / "per_problem.jsonl").read_bytes() == torn


@pytest.mark.slow
def test_evaluates_the_pipelines_own_checkpoint_as_the_pipeline_does(tmp_path):
    """The toy pipeline's trained checkpoint, evaluated with default prompt flags (read from the
    checkpoint's run config: the "statement" format), gives the completions the pipeline's own
    evaluation samples (same keys) and its per-problem results; --prompt_format=full (the
    evaluator's old fixed format) does not fit the tiny model's context and is refused in one line."""
    import glob

    import jax

    from maxk_jax.data import load_problems
    from maxk_jax.eval.run import problem_sample_keys
    from maxk_jax.models.tokenizer import load_tokenizer
    from maxk_jax.pipelines.config import smoke_config
    from maxk_jax.eval.run import SamplerCompletionSource
    from maxk_jax.pipelines.evaluation import eval_sampler, load_trained

    runs = tmp_path / "runs"
    res = subprocess.run([sys.executable, "-m", "experiments.tiny_pipeline", "--config=experiments/configs/tiny.py:smoke",
                          f"--runs_dir={runs}", "--name=toy", "--noprogress"], cwd=ROOT, capture_output=True,
                         text=True, timeout=600, env={**os.environ, "PYTHONPATH": ROOT})
    assert res.returncode == 0, res.stderr[-3000:]
    cfg = smoke_config()
    ev = cfg.eval
    (test_file,) = glob.glob(str(runs / "_cache" / "data-*" / "test.jsonl"))
    (model_dir,) = glob.glob(str(runs / "_cache" / "base-*"))
    common = (f"--checkpoint={runs / 'smoke' / 'rl' / 'checkpoints'}", f"--problems={test_file}",
              f"--limit={ev.num_problems}", f"--n={ev.sampler.n}", f"--max_new_tokens={ev.sampler.max_new_tokens}",
              f"--temperature={ev.sampler.temperature}", f"--seed={ev.seed}", "--noprogress", "--keep_completions")
    res = _run(*common, f"--out_dir={tmp_path / 'auto'}")
    assert res.returncode == 0, res.stderr[-3000:]
    auto, _ = read_report(tmp_path / "auto")
    res = _run(*common, "--prompt_format=full", f"--out_dir={tmp_path / 'full'}")   # not what the model learnt:
    assert res.returncode == 2 and "-token prompt in the 'full' format (--prompt_format), no shorter than the " \
        "model's context of 256 tokens" in res.stderr and len(res.stderr.splitlines()) == 1, res.stderr[-3000:]
    assert not (tmp_path / "full").exists()   # rejected before anything is written

    model = load_trained(str(runs / "toy" / "rl"), model_dir)
    tokenizer = load_tokenizer(model.tokenizer_dir)
    source = SamplerCompletionSource(eval_sampler(cfg, model.config, model.params, tokenizer))
    problems = load_problems(test_file)[:ev.num_problems]
    key = jax.random.key(ev.seed)
    keys = jax.numpy.stack([problem_sample_keys(key, i, ev.sampler.n) for i in range(len(problems))])
    pipeline = [c.texts for c in source(problems, keys, 0)]
    assert [tuple(r.completions) for r in auto.problems] == pipeline
    trained = [json.loads(line) for line in (runs / "toy" / "trained" / "per_problem.jsonl").read_text().splitlines()]
    assert [list(r.rewards) for r in auto.problems] == [t["rewards"] for t in trained]
    assert [list(r.lengths) for r in auto.problems] == [t["completion_lengths"] for t in trained]
    config = json.loads((tmp_path / "auto" / "run_config.json").read_text())
    assert config["render_kwargs"]["prompt_format"] == "statement"


@pytest.mark.slow
def test_a_judge_that_answers_health_but_judges_nothing_is_one_line(fixture_dir, tmp_path):
    """The judge passes the health check, then fails every submission: no report (no plot crash),
    one line naming the judge and the statuses, exit status 2."""
    import http.server
    import threading

    class Broken(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"{}")

        def do_POST(self):  # noqa: N802
            self.rfile.read(int(self.headers.get("content-length", 0)))
            self.send_response(503)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Broken)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        res = _run(*_args(fixture_dir, tmp_path / "out", f"--executor={url}", "--sandbox_retries=0", "--n=2",
                          "--batch_size=6"))
    finally:
        server.shutdown()
    assert res.returncode == 2 and len(res.stderr.splitlines()) == 1, res.stderr[-3000:]
    assert (f"every one of the 6 samples was excluded (statuses: {{'sandbox_error': 6}}): the judge {url!r} gave no "
            "verdict") in res.stderr
    assert not (tmp_path / "out" / "summary.json").exists() and not (tmp_path / "out" / "curves.png").exists()


def test_corrupt_orbax_checkpoint_is_named_in_one_line(fixture_dir, tmp_path):
    step = tmp_path / "ckpt" / "3"
    (step / "state").mkdir(parents=True)
    (step / "metadata").mkdir()
    (step / "state" / "_METADATA").write_bytes(b"\x00garbage")
    (step / "metadata" / "metadata").write_text(json.dumps({"model_dir": str(fixture_dir / "model")}))
    res = _run(*_args(fixture_dir, tmp_path / "out", f"--checkpoint={tmp_path / 'ckpt'}"))
    assert res.returncode == 2 and len(res.stderr.splitlines()) == 1, res.stderr[-2000:]
    assert f"corrupt orbax checkpoint state metadata '{step}/state/_METADATA' is not valid JSON" in res.stderr
    assert not (tmp_path / "out").exists()
