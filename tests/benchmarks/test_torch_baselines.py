"""maxk_jax/benchmarks/torch_baselines.py: importable without torch (the baselines stay optional); on the
tiny --smoke model (CPU) transformers generate returns every requested token and the PyTorch train step
reports its loss and throughput. The runs skip without torch and transformers."""
import math
import subprocess
import sys

import numpy as np
import pytest

from maxk_jax.benchmarks.decode import smoke_config
from maxk_jax.benchmarks.rollout_batch import train_batch


def test_the_module_imports_without_torch():
    code = ("import sys; sys.modules['torch'] = sys.modules['transformers'] = None\n"
            "import maxk_jax.benchmarks.torch_baselines as t; print(callable(t.hf_generate))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "True", out.stderr[-2000:]


@pytest.mark.slow
def test_generate_and_train_on_the_tiny_model():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from maxk_jax.benchmarks import torch_baselines

    config = smoke_config()
    gen = torch_baselines.hf_generate(config, (1, 2, 8, 4), seed=0)
    assert (gen["prompts"], gen["n"], gen["prompt_len"], gen["new_tokens"]) == (1, 2, 8, 4)
    assert gen["tok_per_s"] == pytest.approx(8 / gen["steady_s"]) and len(gen["all_s"]) == 2
    data = train_batch(np.random.default_rng(0), 4, 2, 8, 4, config.vocab_size)
    train = torch_baselines.torch_train(config, data, n=2, micro=2, repeats=1)
    assert math.isfinite(train["loss0"]) and train["tokens_per_s"] == pytest.approx(data["tokens"].size
                                                                                    / train["steady_s"])
