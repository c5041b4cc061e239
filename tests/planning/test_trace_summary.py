"""maxk_jax/planning/trace_summary.py: per-step kernel time from a profiler trace (device events preferred)."""
import gzip
import json

import pytest

from maxk_jax.planning import trace_summary as ts


def _trace(tmp_path, events, gz=True):
    meta = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "/device:GPU:0"}},
            {"ph": "M", "name": "process_name", "pid": 7, "args": {"name": "/host:CPU"}}]
    path = tmp_path / ("t.json.gz" if gz else "t.json")
    data = json.dumps({"traceEvents": meta + events})
    if gz:
        with gzip.open(path, "wt") as f:
            f.write(data)
    else:
        path.write_text(data)
    return path


def _ev(name, ts_, dur, module="jit_decode_loop", pid=1):
    return {"ph": "X", "pid": pid, "tid": 1, "ts": ts_, "dur": dur, "name": name, "args": {"hlo_module": module}}


def test_breakdown_per_step_on_device_events_only(tmp_path):
    events = [_ev("gemm_fusion_dot_3", 0, 10), _ev("loop_add_fusion.1", 10, 2), _ev("loop_add_fusion.2", 12, 4),
              _ev("gemm_fusion_dot_3", 20, 30), _ev("loop_add_fusion.1", 50, 2),
              _ev("prefill", 100, 99, module="jit_prefill_prompts"),
              _ev("host_side", 0, 1000, pid=7)]                         # a host event: not a kernel
    for gz in (True, False):
        got = ts.kernel_breakdown(ts.load_events(_trace(tmp_path, events, gz)), "jit_decode_loop", steps=2)
        assert got["events_per_step"] == 2.5 and got["busy_us_per_step"] == 24.0 and got["span_us_per_step"] == 26.0
        assert got["top_kernels"][0] == {"name": "gemm_fusion_dot_3", "us_per_step": 20.0, "per_step": 1.0,
                                         "median_us": 30.0}
        assert [(r["name"], r["us_per_step"], r["per_step"]) for r in got["top_classes"]] == [
            ("gemm_fusion_dot", 20.0, 1.0), ("loop_add_fusion", 4.0, 1.5)]
    lines = ts.breakdown_lines(got)
    assert lines[0].startswith("jit_decode_loop: 2 kernels per step, 24 us busy of 26 us") and len(lines) == 3
    # timed without the profiler at 25 us per step: 1 us idle, and 1 us of the 26 us span is the profiler's
    lines = ts.breakdown_lines({**got, "unprofiled_us_per_step": 25.0})
    assert lines[1] == ("  unprofiled, the same decode takes 25 us per step: ~1 us of it idle; +1 us per step of "
                        "the traced span is the profiler's") and len(lines) == 4
    assert "~0 us of it idle" in ts.breakdown_lines({**got, "unprofiled_us_per_step": 20.0})[1]


def test_host_events_are_used_when_the_trace_has_no_device():
    events = [{"ph": "X", "pid": 7, "ts": 0, "dur": 5, "name": "ynn_fusion.2", "args": {"hlo_module": "m"}}]
    got = ts.kernel_breakdown(events, "m", steps=1)
    assert got["top_classes"] == [{"name": "ynn_fusion", "us_per_step": 5.0, "per_step": 1.0, "median_us": 5.0}]


def test_bad_module_and_steps_are_named(tmp_path):
    events = ts.load_events(_trace(tmp_path, [_ev("k", 0, 1)]))
    with pytest.raises(ValueError, match=r"'jit_nope'.*\['jit_decode_loop'\]"):
        ts.kernel_breakdown(events, "jit_nope", steps=1)
    with pytest.raises(ValueError, match="steps=0"):
        ts.kernel_breakdown(events, "jit_decode_loop", steps=0)


def test_kernel_class_strips_the_instance_number_only():
    assert ts.kernel_class("gemm_fusion_dot_15") == "gemm_fusion_dot"
    assert ts.kernel_class("loop_add_fusion.3") == "loop_add_fusion"
    assert ts.kernel_class("nvjet_sm90_tss_96x128_64x6_2x1_v_bz_NNN") == "nvjet_sm90_tss_96x128_64x6_2x1_v_bz_NNN"
    assert ts.kernel_class("memcpy128") == "memcpy128"
