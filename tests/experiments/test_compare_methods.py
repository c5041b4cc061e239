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
    for name in ("config", "methods", "seeds", "name", "runs_dir", "large_k", "overwrite", "aggregate_only",
                 "progress"):
        match = re.search(rf"--(\[no\])?{name}: (.+)", out.stdout)
        assert match and len(match.group(2)) > 20, name


def test_aggregate_only_and_overwrite_contradict(tmp_path):
    out = subprocess.run([sys.executable, "-m", "experiments.compare_methods", "--aggregate_only", "--overwrite",
                          f"--runs_dir={tmp_path}"], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode != 0 and "--aggregate_only reads the finished runs" in out.stderr + out.stdout
    assert not any(tmp_path.iterdir())     # failed before any work
