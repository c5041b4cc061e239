"""experiments/export_hf.py: --help lists every flag (exit 0); a bad input is one line, exit 2,
before any weight is read; a run directory exports to a folder transformers loads; --push_to_hub
is checked first and uploads the exported folder (the uploader replaced: no network here)."""
import os
import re
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FLAGS = ("checkpoint", "out", "step", "model_dir", "dtype", "overwrite", "push_to_hub", "private")


def export_hf(*args, env=None, code=None):
    """Run the entry point (``code``: Python run first in the same process, e.g. a patch)."""
    argv = ["experiments.export_hf", *args]
    prog = (f"{code or ''}\nimport runpy, sys\nsys.argv = {argv!r}\n"
            "runpy.run_module('experiments.export_hf', run_name='__main__', alter_sys=True)")
    return subprocess.run([sys.executable, "-c", prog], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": ROOT, **(env or {})})


def test_help_lists_every_flag_with_help_text():
    out = subprocess.run([sys.executable, "-m", "experiments.export_hf", "--help"], cwd=ROOT, capture_output=True,
                         text=True, timeout=120, env={**os.environ, "PYTHONPATH": ROOT})
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    for name in FLAGS:
        match = re.search(rf"--(\[no\])?{name}: (.+)", out.stdout)
        assert match and len(match.group(2)) > 20, name


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, tiny_ckpt):
    """A train-style run directory: checkpoints/1 with params = 2 x the tiny model's."""
    import jax

    from maxk_jax.runtime.checkpoint import Checkpointer
    from maxk_jax.models import convert

    _, params = convert.load_hf(tiny_ckpt)
    run = tmp_path_factory.mktemp("run")
    with Checkpointer(run / "checkpoints") as ckpt:
        ckpt.save(1, {"step": np.int32(1), "params": jax.tree.map(lambda x: 2 * x, params), "opt_state": {}},
                  {"rl_step": 1, "data_position": 2, "model_dir": tiny_ckpt, "config_json": "{}"})
    return run


@pytest.mark.parametrize("args, message", [
    ([], "--checkpoint is required"),
    (["--checkpoint={d}/absent", "--out={d}/o"], "--checkpoint '{d}/absent' does not exist"),
    (["--checkpoint={run}", "--out={d}/o", "--step=5"], "--step=5 not found in '{run}/checkpoints'; available steps: [1]"),
    (["--checkpoint={run}", "--out={d}/o", "--dtype=int8"], "--dtype"),
    (["--checkpoint={run}", "--out={d}/o", "--push_to_hub=not a repo"], "--push_to_hub='not a repo' is not a valid"),
    (["--checkpoint={run}", "--out={d}/o", "--push_to_hub=me/m"], "--push_to_hub='me/m': no Hugging Face token"),
])
def test_bad_inputs_are_one_line_before_work(run_dir, tmp_path, args, message):
    env = {"HF_HOME": str(tmp_path / "hf_home"), "HF_TOKEN": "", "HF_HUB_OFFLINE": ""}
    out = export_hf(*(a.format(d=tmp_path, run=run_dir) for a in args), env=env)
    assert out.returncode == 2 and len(out.stderr.splitlines()) == 1, out.stderr[-2000:]
    assert message.format(d=tmp_path, run=run_dir) in out.stderr and out.stderr.startswith("export_hf: error: ")
    assert not (tmp_path / "o").exists()


def test_export_and_push_from_the_command_line(run_dir, tiny_ckpt, tmp_path):
    import transformers

    patch = ("from maxk_jax import export\n"
             "def fake_push(folder, repo_id, private=False):\n"
             "    print('PUSHED', sorted(__import__('os').listdir(folder)), folder, repo_id, private)\n"
             "    return 'https://hf.co/commit/1'\n"
             "export.push_to_hub = fake_push")
    out = export_hf(f"--checkpoint={run_dir}", f"--out={tmp_path / 'hf'}", "--push_to_hub=me/tiny", "--private",
                    env={"HF_TOKEN": "hf_dummy", "HF_HUB_OFFLINE": ""}, code=patch)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.startswith(f"exporting {run_dir / 'checkpoints'} step 1 (float32) -> {tmp_path / 'hf'}")
    [pushed] = [line for line in out.stdout.splitlines() if line.startswith("PUSHED")]
    assert f"{tmp_path / 'hf'} me/tiny True" in pushed and "'model.safetensors'" in pushed
    model = transformers.Qwen2ForCausalLM.from_pretrained(tmp_path / "hf")
    base = transformers.Qwen2ForCausalLM.from_pretrained(tiny_ckpt)
    np.testing.assert_allclose(model.model.norm.weight.detach().numpy(), 2 * base.model.norm.weight.detach().numpy())


@pytest.mark.slow
def test_a_pipeline_run_with_a_reward_exports_and_loads_in_transformers(tmp_path):
    """End to end from the command line: tiny_pipeline trains the tiny model on the arithmetic task
    with --reward, export_hf turns its run directory into a folder transformers loads with the JAX
    model's logits on an arithmetic prompt."""
    import numpy as np
    import torch
    import transformers

    from maxk_jax.data import synthetic as syn
    from maxk_jax.data import synthetic_solutions as sol
    from maxk_jax.eval.checkpoint import load_model
    from maxk_jax.models import qwen2, tiny

    train, _ = syn.make_split(syn.SyntheticConfig(seed=0, num_train=60, num_test=4))
    ckpt = tiny.build_tiny_checkpoint(tmp_path / "ckpt", sol.tokenizer_corpus(train, np.random.default_rng(0)), seed=0,
                                      hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=1,
                                      max_position_embeddings=1024)
    out = subprocess.run([sys.executable, "-m", "experiments.tiny_pipeline", "--config=experiments/configs/tiny.py:smoke",
                          f"--model_path={ckpt}", "--dataset=arithmetic", "--name=arith", f"--runs_dir={tmp_path / 'runs'}",
                          "--reward=maxk_jax.data.arithmetic:closeness_reward", "--noprogress"],
                         cwd=ROOT, capture_output=True, text=True, timeout=900, env={**os.environ, "PYTHONPATH": ROOT})
    assert out.returncode == 0, out.stderr[-3000:]
    run = tmp_path / "runs" / "arith"
    assert "judge: reward:maxk_jax.data.arithmetic:closeness_reward" in (run / "report.md").read_text()
    out = export_hf(f"--checkpoint={run}", f"--out={tmp_path / 'hf'}")
    assert out.returncode == 0, out.stderr[-3000:]
    model = load_model(str(run / "rl" / "checkpoints"))
    ids = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")("What is 17+25?", return_tensors="np")["input_ids"]
    ours = np.asarray(qwen2.logits(model.config, model.params, ids, np.ones_like(ids)))
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    with torch.no_grad():
        ref = hf(input_ids=torch.tensor(ids)).logits.numpy()
    assert np.abs(ours - ref).max() <= 1e-4
