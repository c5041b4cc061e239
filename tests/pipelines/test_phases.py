"""maxk_jax.pipelines.phases: phase timings in run order, one process runs lead_first's function
once, JSON records with numpy scalars."""
import json

import numpy as np
import pytest

from maxk_jax.pipelines import PhaseTimer, lead_first, write_json


def test_phase_timer_records_each_phase_in_order(capsys):
    timer = PhaseTimer()
    assert timer.run("first", lambda: 3) == 3
    timer.run("second", lambda: sum(range(200_000)))
    assert list(timer.phases) == ["first", "second"]
    assert all(t["wall_s"] >= 0 and t["cpu_s"] >= 0 for t in timer.phases.values())
    out = capsys.readouterr().out
    assert "== first\n" in out and "== second: " in out and "s CPU" in out


def test_lead_first_runs_once_on_one_process():
    calls = []
    assert lead_first(lambda: calls.append(1) or "done", "barrier") == "done" and calls == [1]


def test_write_json_numpy_scalars_and_clear_errors(tmp_path):
    path = tmp_path / "r.json"
    write_json(str(path), {"a": np.int64(3), "b": [np.float32(0.5)]})
    assert json.loads(path.read_text()) == {"a": 3, "b": [0.5]}
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]          # no temporary file left
    with pytest.raises(TypeError, match="set is not JSON serialisable"):
        write_json(str(tmp_path / "bad.json"), {"a": {1}})

