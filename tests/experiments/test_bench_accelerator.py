"""experiments/bench_accelerator.py: the model-FLOP count of the issue's train step,
and the --smoke run on CPU (ceilings + decode fast; every part, torch baselines included, slow)."""
import json
import math
import os
import subprocess
import sys

import pytest

from experiments import bench_accelerator as ba
from maxk_jax.models import qwen2
from tests.cpu_flags import xla_flags

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_model_flops_of_the_issue_train_step():
    c = qwen2.preset("qwen2.5-coder-1.5b")
    layer = 1536 * 1536 * 2 + 2 * 1536 * 256 + 3 * 1536 * 8960          # q, o; k, v; gate, up, down
    forward_per_token = 2 * (28 * layer + 1536 * 151936 * 256 / 768) + 4 * 28 * 768 * 1536   # LM head on T of S
    assert ba.model_flops(c, 128, 768, 256) == pytest.approx(3 * forward_per_token * 128 * 768, rel=1e-12)


def _run(tmp_path, *args, timeout=900, missing=(), fast_compile=False):
    """The smoke run in a subprocess; ``missing``: packages made unimportable there (as on a GPU image).
    Optimised CPU code unless ``fast_compile`` (a test of the bookkeeping, not of what is measured)."""
    env = dict(os.environ, XLA_FLAGS=xla_flags(fast_compile=fast_compile))
    if missing:
        stubs = tmp_path / "missing_packages"
        for name in missing:
            (stubs / name).mkdir(parents=True)
            (stubs / name / "__init__.py").write_text(f"raise ImportError('{name} is not installed here')\n")
        env["PYTHONPATH"] = os.pathsep.join([str(stubs), ROOT] + [p for p in [env.get("PYTHONPATH")] if p])
    return subprocess.run([sys.executable, "-m", "experiments.bench_accelerator", "--smoke", *args,
                           f"--results_dir={tmp_path}"], cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env=env)


def test_smoke_ceilings_and_decode(tmp_path):
    # without datasets and ml_collections, which the GPU images lack: the benchmark needs neither
    # auto,xla: one row on CPU (auto is xla here, and each attention runs once)
    out = _run(tmp_path, "--parts=ceilings,decode", "--cases=1x2:16/4", "--repeats=1", "--decode_attention=auto,xla",
               f"--profile_dir={tmp_path / 'profile'}", "--profile_tokens=4", missing=("datasets", "ml_collections"))
    assert out.returncode == 0, out.stderr[-3000:]
    res = json.loads((tmp_path / "bench_accelerator.json").read_text())
    (d,) = res["decode"]
    assert (d["prompts"], d["n"], d["prompt_len"], d["new_tokens"]) == (1, 2, 16, 4)
    # structure, not timing (a loaded machine may make prefill slower than the decode loop): both measured
    assert all(math.isfinite(d[key]) and d[key] > 0 for key in ("prefill_s", "steady_s"))
    assert math.isfinite(d["ms_per_step"])      # (steady − prefill) / steps: its sign is the machine's load
    assert d["tok_per_s"] == pytest.approx(8 / d["steady_s"])
    assert d["roofline_ms_per_step"] == pytest.approx(1e3 * d["ideal_gb_per_step"] * 1e9
                                                      / res["ceilings"]["hbm_bytes_per_s"])
    assert d["frac_of_roofline"] == pytest.approx(d["roofline_ms_per_step"] / d["ms_per_step"])
    table = (tmp_path / "bench_accelerator.md").read_text()
    assert "| tiny decode, 1 x n = 2, 16 / 4 |" in table and table in out.stdout
    assert (tmp_path / "bench_accelerator.png").stat().st_size > 0
    (prof,) = res["profiles"]                   # the decode loop's kernels per step, from the written trace
    assert (tmp_path / "profile" / prof["trace"]).is_file() and prof["new_tokens"] == 4
    assert prof["breakdown"]["module"] == "jit_decode_loop" and prof["breakdown"]["steps"] == 3
    assert prof["breakdown"]["events_per_step"] > 0 and prof["breakdown"]["top_classes"]
    assert prof["breakdown"]["unprofiled_us_per_step"] == pytest.approx(1e3 * d["ms_per_step"])   # the same case
    assert "profile xla" in out.stdout and "kernels per step" in out.stdout and "unprofiled, the same" in out.stdout


def test_a_spent_time_budget_skips_what_is_left_and_says_so(tmp_path):
    out = _run(tmp_path, "--parts=ceilings,decode", "--cases=1x2:16/4", "--time_budget_s=1e-9",
               f"--profile_dir={tmp_path / 'profile'}")
    assert out.returncode == 0, out.stderr[-3000:]
    res = json.loads((tmp_path / "bench_accelerator.json").read_text())
    assert "ceilings" not in res and "decode" not in res and "profiles" not in res
    assert [s.split(":")[0] for s in res["skipped"]] == ["ceilings", "decode", "profile"]
    assert "Skipped: ceilings: time budget" in (tmp_path / "bench_accelerator.md").read_text()


def test_a_failing_case_is_recorded_and_the_others_still_run(tmp_path):
    # a 600-token prompt does not fit the smoke model's 512 positions: that case fails, the next one runs
    out = _run(tmp_path, "--parts=decode", "--cases=1x2:600/4,1x2:16/4", "--repeats=1", fast_compile=True)
    assert out.returncode == 1 and "1 part(s) or case(s) failed" in out.stderr
    res = json.loads((tmp_path / "bench_accelerator.json").read_text())
    assert [d["prompt_len"] for d in res["decode"]] == [16]
    (err,) = res["errors"]
    assert err.startswith("decode tiny 1x2:600/4 xla: ValueError: prompts[0] has 600 tokens")
    assert f"Failed: {err}" in (tmp_path / "bench_accelerator.md").read_text()


def test_bad_flags_fail_in_one_line(tmp_path):
    out = _run(tmp_path, "--parts=decode,nope")
    assert out.returncode == 2 and "'nope'" in out.stderr and len(out.stderr.strip().splitlines()) == 1
    out = _run(tmp_path, "--time_budget_s=-1")
    assert out.returncode == 2 and "--time_budget_s=-1" in out.stderr and len(out.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_smoke_every_part(tmp_path):
    pytest.importorskip("torch")
    out = _run(tmp_path, "--repeats=1", "--train_attention=auto,chunked")
    assert out.returncode == 0, out.stderr[-3000:]
    res = json.loads((tmp_path / "bench_accelerator.json").read_text())
    assert len(res["decode"]) == 2 and res["hf_generate"]["tok_per_s"] > 0
    assert [t["attention"] for t in res["train"]] == ["auto", "chunked"]
    assert res["train"][0]["loss0"] == res["train"][1]["loss0"]          # auto is chunked on CPU
    assert res["torch_train"]["tokens_per_s"] > 0
    assert "PyTorch + transformers" in (tmp_path / "bench_accelerator.md").read_text()


@pytest.mark.slow
def test_smoke_decode_compares_the_decode_attentions(tmp_path):
    # 20 new tokens: 19 own slots and a 16-slot prompt bucket, so the Pallas kernels run (interpreted on CPU)
    out = _run(tmp_path, "--parts=decode", "--cases=1x2:16/20", "--repeats=1", "--decode_attention=xla,pallas")
    assert out.returncode == 0, out.stderr[-3000:]
    res = json.loads((tmp_path / "bench_accelerator.json").read_text())
    assert [d["decode_attention"] for d in res["decode"]] == ["xla", "pallas"]
    assert all(d["tok_per_s"] > 0 for d in res["decode"])
    assert "| tiny decode, 1 x n = 2, 16 / 20, pallas attention |" in (tmp_path / "bench_accelerator.md").read_text()
