"""maxk_jax.export: an RL run's orbax checkpoint -> a Hugging Face folder that transformers loads
back with the same logits and tokenizer; the checks before any weight is read; the hub upload."""
import json
import os

import jax
import numpy as np
import pytest
import torch
import transformers

from maxk_jax import export
from maxk_jax.runtime.checkpoint import Checkpointer
from maxk_jax.models import convert, qwen2
from maxk_jax.models.tokenizer import load_tokenizer


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, tiny_ckpt):
    """A run directory as the RL loop writes it: checkpoints/<step> with {"step", "params",
    "opt_state"} and the metadata's model_dir; the params differ from the base model's per step."""
    config, params = convert.load_hf(tiny_ckpt)
    run = tmp_path_factory.mktemp("run")
    with Checkpointer(run / "checkpoints", max_to_keep=None) as ckpt:
        for step in (1, 2):
            trained = jax.tree.map(lambda x, s=step: x * (1.0 + 0.25 * s), params)
            ckpt.save(step, {"step": np.int32(step), "params": trained, "opt_state": {}},
                      {"rl_step": step, "data_position": 2 * step, "model_dir": tiny_ckpt, "config_json": "{}"})
    return run, config, params


def _logits_both(out, config, params):
    tokens = np.random.default_rng(0).integers(0, config.vocab_size, (2, 7))
    mask = np.ones_like(tokens)
    mask[1, :2] = 0
    ours = np.asarray(qwen2.logits(config, params, tokens, mask))
    model = transformers.Qwen2ForCausalLM.from_pretrained(out, attn_implementation="eager").to(torch.float32).eval()
    with torch.no_grad():
        ref = model(input_ids=torch.tensor(tokens), attention_mask=torch.tensor(mask),
                    position_ids=torch.tensor(np.maximum(np.cumsum(mask, -1) - 1, 0))).logits.numpy()
    return ours[mask.astype(bool)], ref[mask.astype(bool)]


def test_run_directory_exports_the_latest_step_with_same_logits_and_tokenizer(run_dir, tiny_ckpt, tmp_path):
    run, config, params = run_dir
    plan = export.plan_export(run, tmp_path / "hf")
    assert (plan.source, plan.step, plan.model_dir, plan.dtype) == (str(run / "checkpoints"), 2, tiny_ckpt, "float32")
    info = export.export_hf(plan)
    out = tmp_path / "hf"
    assert {"config.json", "model.safetensors", "tokenizer.json", "maxk_export.json"} <= set(os.listdir(out))
    assert info["step"] == 2 and json.loads((out / "maxk_export.json").read_text())["step"] == 2
    ours, ref = _logits_both(out, config, jax.tree.map(lambda x: x * 1.5, params))   # step 2's weights
    assert np.abs(ours - ref).max() <= 1e-4
    base = transformers.Qwen2ForCausalLM.from_pretrained(tiny_ckpt).state_dict()
    exported = transformers.Qwen2ForCausalLM.from_pretrained(out).state_dict()
    assert not torch.equal(base["model.norm.weight"], exported["model.norm.weight"])   # not the base's weights
    text = "def f(x):\n    return x + 1"
    assert transformers.AutoTokenizer.from_pretrained(out).encode(text) == load_tokenizer(tiny_ckpt).encode(text)


def test_step_directory_and_bfloat16(run_dir, tmp_path):
    run, config, params = run_dir
    assert export.plan_export(run, tmp_path / "hf", step=1).step == 1     # --step picks an older step
    plan = export.plan_export(run / "checkpoints" / "1", tmp_path / "hf", dtype="bfloat16")
    assert plan.step == 1 and plan.dtype == "bfloat16"
    export.export_hf(plan)
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["dtype"] == "bfloat16"
    ours, ref = _logits_both(tmp_path / "hf", config, jax.tree.map(lambda x: x * 1.25, params))
    assert np.abs(ours - ref).max() <= 0.1 * np.abs(ours).max()   # bfloat16 weights: close, not equal


def test_bad_inputs_are_named_before_any_weight_is_read(run_dir, tiny_ckpt, tmp_path):
    run, _, _ = run_dir
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    (tmp_path / "file").write_text("")
    (tmp_path / "empty").mkdir()
    cases = [
        ((tmp_path / "absent", tmp_path / "o"), {}, f"--checkpoint {str(tmp_path / 'absent')!r} does not exist"),
        ((tmp_path / "file", tmp_path / "o"), {}, "is not a directory"),
        ((tmp_path / "empty", tmp_path / "o"), {}, "nor an orbax checkpoint with a committed step"),
        ((run, tmp_path / "o"), {"step": 7}, "--step=7 not found in"),
        ((run, tmp_path / "o"), {"dtype": "int8"}, "--dtype='int8' is not one of ('auto', 'float32', 'bfloat16')"),
        ((run, tmp_path / "full"), {}, "is not empty; pass --overwrite to replace it"),
        ((run, tmp_path / "file"), {}, "exists and is not a directory"),
        ((run, run / "checkpoints" / "hf"), {"overwrite": True}, "overlaps the checkpoint or model directory"),
        ((tiny_ckpt, tmp_path / "o"), {"step": 1}, "is a Hugging Face directory, not an orbax checkpoint"),
        ((run, tmp_path / "o"), {"model_dir": str(tmp_path / "empty")}, "is empty"),
    ]
    for args, kwargs, message in cases:
        with pytest.raises(ValueError) as err:
            export.plan_export(*args, **kwargs)
        assert message in str(err.value), (args, kwargs, str(err.value))
    assert not (tmp_path / "o").exists()
    plan = export.plan_export(run, tmp_path / "full", overwrite=True)   # replaced on export, not at the check
    assert (tmp_path / "full" / "x").exists() and plan.overwrite


def test_hugging_face_directory_and_overwrite(tiny_ckpt, tmp_path):
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "stale.safetensors").write_text("")
    plan = export.plan_export(tiny_ckpt, tmp_path / "hf", overwrite=True)
    assert plan.step is None and plan.model_dir == tiny_ckpt
    export.export_hf(plan)
    assert "stale.safetensors" not in os.listdir(tmp_path / "hf")
    config, params = convert.load_hf(tiny_ckpt)
    ours, ref = _logits_both(tmp_path / "hf", config, params)
    assert np.abs(ours - ref).max() <= 1e-4


def test_push_uploads_the_folder(tmp_path, monkeypatch):
    calls = []

    class FakeApi:
        def create_repo(self, repo_id, **kwargs):
            calls.append(("create_repo", repo_id, kwargs))

        def upload_folder(self, **kwargs):
            calls.append(("upload_folder", kwargs))
            return type("Commit", (), {"commit_url": "https://hf.co/me/m/commit/1"})()

    url = export.push_to_hub(tmp_path, "me/m", private=True, api=FakeApi())
    assert url == "https://hf.co/me/m/commit/1"
    assert calls[0] == ("create_repo", "me/m", {"repo_type": "model", "private": True, "exist_ok": True})
    assert calls[1][1]["folder_path"] == str(tmp_path) and calls[1][1]["repo_id"] == "me/m"


def test_hub_repo_checks(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_TOKEN", "hf_test")
    export.check_hub_repo("me/model")
    for repo, message in [("bad repo!", "is not a valid repository id"), ("model", "must be 'namespace/name'")]:
        with pytest.raises(ValueError, match=message):
            export.check_hub_repo(repo)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ValueError, match="HF_HUB_OFFLINE is set"):
        export.check_hub_repo("me/model")
