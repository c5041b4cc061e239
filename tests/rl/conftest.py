"""Fixtures of the RL tests: a warmed-up tiny checkpoint and a file of fixture problems."""
import pytest

from maxk_jax.data import save_problems
from tests.rl.fixtures import WARM_ANSWERS, echo_problem


@pytest.fixture(scope="module")
def warm_ckpt(tmp_path_factory, tiny_ckpt):
    """The tiny checkpoint after a short supervised warm-up on a mix of right, partly right
    (1/3 of the tests) and wrong answers to the fixture problems, so sampled rewards vary within
    a prompt group (real judged rewards, non-zero advantages)."""
    from maxk_jax.rl import warmup
    from maxk_jax.models import convert
    from maxk_jax.models.tokenizer import load_tokenizer

    config, params = convert.load_hf(tiny_ckpt)
    tok = load_tokenizer(tiny_ckpt)
    examples = [warmup.encode_example(tok, echo_problem(i).prompt, a)
                for i in range(6) for a in WARM_ANSWERS]
    result = warmup.run_warmup(config, params, examples, warmup.WarmupConfig(
        steps=60, seed=0, batch_size=24, learning_rate=1e-2, length_bucket=16), progress=False)
    out = tmp_path_factory.mktemp("warm")
    convert.save_hf(config, result.params, out)
    tok.save_pretrained(out)
    return str(out)


@pytest.fixture(scope="module")
def problems_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("problems") / "fixture.jsonl"
    save_problems([echo_problem(i) for i in range(6)], path)
    return str(path)
