"""maxk_jax.sampling.sampler: the Sampler object (what travels together), the stop / pad id rules,
and that its samples are exactly those of the functional core `generate`."""
from types import SimpleNamespace

import jax
import numpy as np
import pytest

from maxk_jax.data import synthetic
from maxk_jax.data.prompts import encode_problems
from maxk_jax.sampling import Sampler, SamplerSettings, default_eos_ids, default_pad_id, generate

SETTINGS = SamplerSettings(n=3, max_new_tokens=6, temperature=1.0)


def test_default_eos_ids_union():
    class Tok:
        eos_token_id = 5

    class Cfg:
        eos_token_id = (5, 9)

    assert default_eos_ids(Cfg(), Tok(), [151643]) == [5, 9, 151643]
    with pytest.raises(ValueError, match="pass eos_id"):
        default_eos_ids(object(), object())


def test_default_pad_id_prefers_the_tokenizer():
    assert default_pad_id(SimpleNamespace(pad_token_id=3), SimpleNamespace(pad_token_id=7)) == 7
    assert default_pad_id(SimpleNamespace(pad_token_id=3), SimpleNamespace(pad_token_id=None)) == 3
    assert default_pad_id(SimpleNamespace(pad_token_id=None), None) == 0


def test_create_resolves_stop_and_pad_ids_and_checks_fields():
    cfg, tok = SimpleNamespace(eos_token_id=[2, 7], pad_token_id=3), SimpleNamespace(eos_token_id=2, pad_token_id=None)
    s = Sampler.create(cfg, None, tok, SETTINGS, prompt_format="statement", render_kwargs={"chat": True})
    assert (s.eos_ids, s.pad_id, s.render_kwargs) == ((2, 7), 3, (("chat", True),))
    assert Sampler.create(cfg, None, tok, SETTINGS, eos_ids=[4]).eos_ids == (4,)
    with pytest.raises(ValueError, match="prompt_format='chat' is not one of"):
        Sampler.create(cfg, None, tok, SETTINGS, prompt_format="chat")
    with pytest.raises(ValueError, match="settings=.* must be a sampling.SamplerSettings"):
        Sampler.create(cfg, None, tok, {"n": 2})
    with pytest.raises(ValueError, match="pad_id=-1 must be an int >= 0"):
        Sampler.create(cfg, None, tok, SETTINGS, pad_id=-1)
    with pytest.raises(ValueError, match="has no weights"):
        s.generate([[1, 2]], jax.random.key(0))


def test_samples_are_generates_and_decode_to_texts(tiny_ckpt):
    from maxk_jax.models import convert
    from maxk_jax.models.tokenizer import load_tokenizer

    config, params = convert.load_hf(tiny_ckpt)
    tok = load_tokenizer(tiny_ckpt)
    problems = synthetic.make_split(synthetic.SyntheticConfig(seed=3, num_train=0, num_test=2))[1]
    sampler = Sampler.create(config, params, tok, SETTINGS, prompt_format="statement")
    keys = jax.random.split(jax.random.key(1), (2, 3))
    out = sampler.sample(problems, keys)
    prompts, inside = encode_problems(problems, tok, "statement")
    ref = generate(config, params, prompts, n=3, max_new_tokens=6, key=keys, eos_id=list(sampler.eos_ids),
                   pad_id=sampler.pad_id)
    np.testing.assert_array_equal(out.tokens, np.asarray(ref.tokens))
    np.testing.assert_array_equal(out.logprobs, np.asarray(ref.logprobs))
    assert out.prompts == prompts and out.inside_block == inside and out.tokens.shape == (2, 3, 6)
    assert out.texts[1][2] == tok.decode(out.tokens[1, 2, :out.lengths[1, 2]].tolist(), skip_special_tokens=True)
    two = sampler.replace(settings=SamplerSettings(n=2, max_new_tokens=6)).sample(problems[:1], keys[:1, :2])
    np.testing.assert_array_equal(two.tokens[0], out.tokens[0, :2])   # a sample depends only on its key
