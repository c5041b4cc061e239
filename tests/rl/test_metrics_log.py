"""MetricsLogger's W&B sink (``log.wandb_project``): a real offline run when wandb is installed
(skipped otherwise: wandb is optional, not in the lock), the calls it makes (a stand-in module),
and the install advice when it is missing."""
import glob
import json
import os
import re
import sys
import types

import pytest

from maxk_jax.rl.metrics_log import MetricsLogger, read_metrics


def test_wandb_offline_run_holds_the_logged_metrics(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    logger = MetricsLogger(tmp_path, tensorboard=False, wandb_project="maxk-test", run_name="offline-run",
                           run_config={"algo": {"k": 4}})
    logger.write(1, {"reward/mean": 0.25, "train/max_at_k/4": 0.5})
    logger.write(2, {"reward/mean": 0.75, "train/max_at_k/4": 0.875})
    logger.close()
    [run] = glob.glob(str(tmp_path / "wandb" / "offline-run-*"))   # what `wandb sync <run>` uploads later
    [records] = glob.glob(os.path.join(run, "run-*.wandb"))
    data = open(records, "rb").read()   # protobuf records: each history item is its key, then its JSON value
    for key, value in [("reward/mean", "0.25"), ("reward/mean", "0.75"), ("train/max_at_k/4", "0.875")]:
        assert re.search(re.escape(key.encode()) + rb"[^/]{1,4}" + re.escape(value.encode()), data), (key, value)
    assert b"maxk-test" in data and b"offline-run" in data
    assert [r["reward/mean"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [0.25, 0.75]


def test_wandb_calls(tmp_path, monkeypatch):
    """init(project, name, config, resume="allow", dir=out_dir), one log per step without "step"
    (the step is W&B's step), finish on close."""
    calls = []

    class Run:
        def log(self, data, step):
            calls.append(("log", data, step))

        def finish(self):
            calls.append(("finish",))

    fake = types.ModuleType("wandb")
    fake.init = lambda **kwargs: calls.append(("init", kwargs)) or Run()
    monkeypatch.setitem(sys.modules, "wandb", fake)
    logger = MetricsLogger(tmp_path, tensorboard=False, wandb_project="proj", run_name="r1", run_config={"seed": 3})
    logger.write(7, {"reward/mean": 0.5, "eval/max_at_k/1": float("nan")})
    logger.close()
    assert calls == [("init", {"project": "proj", "name": "r1", "config": {"seed": 3}, "resume": "allow",
                               "dir": str(tmp_path)}),
                     ("log", {"eval/max_at_k/1": None, "reward/mean": 0.5}, 7), ("finish",)]


def test_without_wandb_the_error_says_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)   # import wandb -> ImportError
    with pytest.raises(ImportError, match=r"log.wandb_project is set but the optional package `wandb` is not "
                                          r"installed \(pip install wandb\)"):
        MetricsLogger(tmp_path, tensorboard=False, wandb_project="proj")
    MetricsLogger(tmp_path, tensorboard=False, wandb_project="").close()   # empty: no W&B at all
