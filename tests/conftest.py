"""Test session setup: 8 simulated CPU devices for mesh tests and fast (unoptimised) CPU compiles, see
tests/cpu_flags.py (must precede the first jax import)."""
import os

from tests.cpu_flags import xla_flags

os.environ.setdefault("XLA_FLAGS", xla_flags(8))
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


import pytest  # noqa: E402


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test marked ``gpu_plugin`` (a deviceless XLA:GPU compile) skips where no CUDA plugin is installed."""
    if item.get_closest_marker("gpu_plugin") is not None:
        from maxk_jax.planning import gpu_plan
        if not gpu_plan.plugin_available():
            pytest.skip("the CUDA plugin (the cuda extra's libraries) is not installed")


@pytest.fixture(scope="session")
def tiny_ckpt(tmp_path_factory):
    """A 2-layer, 32-wide random tiny Qwen2 checkpoint (HF format) with a BPE tokenizer trained on 60
    synthetic problems: shared by the RL-loop and multi-host tests."""
    import numpy as np

    from maxk_jax.data import synthetic as syn
    from maxk_jax.data import synthetic_solutions as sol
    from maxk_jax.models import tiny

    train, _ = syn.make_split(syn.SyntheticConfig(seed=0, num_train=60, num_test=4))
    corpus = sol.tokenizer_corpus(train, np.random.default_rng(0))
    return tiny.build_tiny_checkpoint(tmp_path_factory.mktemp("tiny"), corpus, seed=0, hidden_size=32,
                                      num_layers=2, num_heads=2, num_kv_heads=1)
