"""experiments/bench_decode_options.py: entry parsing and a --smoke run on CPU (two variants, one process)."""
import json
import math
import os
import subprocess
import sys

import pytest

from experiments import bench_decode_options as bdo
from tests.cpu_flags import xla_flags

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_entries_parse_and_bad_ones_are_named():
    assert bdo.parse_entry("default/pallas:4") == ("default", "pallas:4")
    assert bdo.parse_entry("no_command_buffers/xla") == ("no_command_buffers", "xla")
    assert bdo.parse_entry("default/pallas+draw") == ("default", "pallas+draw")
    for bad, named in (("default", "default"), ("fast/xla", "fast/xla"), ("default/flash", "flash"),
                       ("default/pallas:0", "pallas:0")):
        with pytest.raises(ValueError, match=f"'{named}'"):
            bdo.parse_entry(bad)


def test_smoke_times_each_variant_with_its_own_compile(tmp_path):
    env = {**os.environ, "XLA_FLAGS": xla_flags(1, fast_compile=True)}
    out = subprocess.run([sys.executable, "-m", "experiments.bench_decode_options", "--smoke", "--repeats=1",
                          "--entries=default/xla,no_command_buffers/xla+draw", f"--results_dir={tmp_path}"],
                         cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = json.loads((tmp_path / "bench_decode_options.json").read_text())
    # the second entry also runs the fused LM head + draw (interpreted here)
    assert [(r["variant"], r["decode_attention"]) for r in rows] == [("default", "xla"),
                                                                     ("no_command_buffers", "xla+draw")]
    assert rows[0]["compiler_options"] is None and rows[1]["compiler_options"] == {"xla_gpu_enable_command_buffer": ""}
    # structure, not timing: ms/step is (steady − prefill) / steps, whose sign a loaded machine can flip
    assert all(r["new_tokens"] == 8 and math.isfinite(r["ms_per_step"]) and math.isfinite(r["frac_of_roofline"])
               for r in rows)
    assert "no_command_buffers" in out.stdout and "% of the roofline" in out.stdout
    bad = subprocess.run([sys.executable, "-m", "experiments.bench_decode_options", "--entries=fast/xla"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)
    assert bad.returncode == 2 and "'fast/xla'" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
