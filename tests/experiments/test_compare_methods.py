"""experiments/compare_methods.py, the absl main of `maxk_jax.pipelines.compare`: --help lists every
flag, --seeds parsing names the bad entry. The library is tested in tests/pipelines."""
import os
import pathlib
import re
import subprocess
import sys

import pytest

from experiments import compare_methods as cm

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("seeds,match", [(["a"], "not an int"), (["-1"], ">= 0"), (["0", "0"], "distinct"),
                                         ([], "non-empty")])
def test_seed_validation(seeds, match):
    with pytest.raises(ValueError, match=match):
        cm.parse_seeds(seeds)


def test_help_lists_every_flag():
    out = subprocess.run([sys.executable, "-m", "experiments.compare_methods", "--helpshort"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    for name in ("config", "methods", "reference", "seeds", "name", "runs_dir", "large_k", "overwrite", "resume",
                 "aggregate_only", "progress"):
        match = re.search(rf"--(\[no\])?{name}: (.+)", out.stdout)
        assert match and len(match.group(2)) > 20, name


def test_aggregate_only_and_overwrite_contradict(tmp_path):
    out = subprocess.run([sys.executable, "-m", "experiments.compare_methods", "--aggregate_only", "--overwrite",
                          f"--runs_dir={tmp_path}"], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode != 0 and "--aggregate_only reads the finished runs" in out.stderr + out.stdout
    assert not any(tmp_path.iterdir())     # failed before any work


@pytest.mark.parametrize("args,message", [
    (["--methods=grpo,nope"], "compare_methods: error: method 'nope' is unknown; valid methods: grpo, "),
    (["--methods=grpo,maxk_offpolicy_exact_loo1_rms", "--resume"],   # the default method's name is accepted
     "compare_methods: error: --resume: '{d}/compare_methods' holds no comparison (no compare_config.json); drop "
     "--resume to start one"),
])
def test_bad_methods_and_resume_fail_in_one_line_before_any_work(tmp_path, args, message):
    out = subprocess.run([sys.executable, "-m", "experiments.compare_methods", f"--runs_dir={tmp_path}", *args],
                         cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 2 and len(out.stderr.splitlines()) == 1, out.stderr[-2000:]
    assert out.stderr.startswith(message.format(d=tmp_path)), out.stderr
    assert not any(tmp_path.iterdir())


def test_the_reference_defaults_to_the_default_method_then_the_papers():
    from maxk_jax.pipelines import default_reference

    assert default_reference(["grpo", "maxk_offpolicy_exact_loo1_rms"]) == "maxk_offpolicy_exact_loo1_rms"
    assert default_reference(["grpo", "maxk_offpolicy", "maxk_offpolicy_exact_loo1_rms"]) == \
        "maxk_offpolicy_exact_loo1_rms"
    assert default_reference(list(cm.TABLE2_METHODS)) == "maxk_offpolicy"    # the stored comparisons' reference
    assert default_reference(["grpo", "rloo"]) == "grpo"
