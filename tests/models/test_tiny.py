"""Tiny tokenizer + tiny Qwen2 checkpoint (maxk_jax/models/tiny.py), built on the synthetic corpus."""
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from maxk_jax.data import synthetic as syn
from maxk_jax.data import synthetic_solutions as sol
from maxk_jax.models import convert, qwen2, tiny

MESSAGE = [{"role": "user", "content": "Read an integer x. Add 3 to x. Print x."}]


@pytest.fixture(scope="module")
def problems():
    train, test = syn.make_split(syn.SyntheticConfig(seed=0, num_train=300, num_test=40))
    return train, test


@pytest.fixture(scope="module")
def corpus(problems):
    return sol.tokenizer_corpus(problems[0], np.random.default_rng(0))


@pytest.fixture(scope="module")
def tokenizer(corpus):
    return tiny.train_tokenizer(corpus)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, corpus):
    return tiny.build_tiny_checkpoint(tmp_path_factory.mktemp("tiny"), corpus, seed=0)


def _held_out_texts(problems):
    _, test = problems
    rng = np.random.default_rng(1)
    texts = [p.prompt for p in test]
    for p in test:
        texts += sol.noisy_solutions(p, rng, 8, 0.3)
    return texts + ["héllo wörld ∑ 中文 123456789 \t\r\n  tabs\tand  spaces ", "", "\n\n", "<|im_end|> as text"]


def test_tokenizer_vocab_special_tokens_and_determinism(corpus, tokenizer):
    assert 256 + len(tiny.SPECIAL_TOKENS) < len(tokenizer) <= 768
    assert [tokenizer.convert_tokens_to_ids(t) for t in tiny.SPECIAL_TOKENS] == [0, 1, 2, 3]
    assert (tokenizer.eos_token, tokenizer.pad_token, tokenizer.bos_token) == (tiny.IM_END, tiny.PAD, None)
    again = tiny.train_tokenizer(corpus)
    assert again.get_vocab() == tokenizer.get_vocab()
    for role in ("user", "assistant"):
        assert len(tokenizer.encode(role, add_special_tokens=False)) == 1


def test_round_trip_is_exact(problems, tokenizer):
    for text in _held_out_texts(problems):
        ids = tokenizer.encode(text, add_special_tokens=False)
        assert tokenizer.decode(ids) == text
    # digits are single tokens (Qwen2 pre-tokenisation), so constants copy digit by digit
    assert tokenizer.tokenize("x=x*-27")[-2:] == ["2", "7"]


def test_prompts_and_solutions_fit_in_64_tokens(problems, tokenizer):
    _, test = problems
    rng = np.random.default_rng(2)
    prompt_lens, code_lens = [], []
    for p in test:
        ids = tokenizer.apply_chat_template([{"role": "user", "content": p.prompt}], tokenize=True,
                                            add_generation_prompt=True, return_dict=True)["input_ids"]
        prompt_lens.append(len(ids))
        code_lens += [len(tokenizer.encode(c, add_special_tokens=False))
                      for c in sol.noisy_solutions(p, rng, 8, 0.3) + [sol.canonical_solution(p)]]
    assert max(prompt_lens) <= 64 and max(code_lens) + 1 <= 64  # + <|im_end|>


def test_chat_template(tokenizer):
    text = tokenizer.apply_chat_template(MESSAGE, tokenize=False, add_generation_prompt=True)
    assert text == "<|im_start|>user\nRead an integer x. Add 3 to x. Print x.<|im_end|>\n<|im_start|>assistant\n"
    convo = MESSAGE + [{"role": "assistant", "content": "x=int(input())\nprint(x+3)"}]
    full = tokenizer.apply_chat_template(convo, tokenize=False)
    assert full.endswith("<|im_start|>assistant\nx=int(input())\nprint(x+3)<|im_end|>\n")


def test_checkpoint_loads_with_auto_tokenizer_and_load_hf(checkpoint, corpus, tokenizer, problems):
    from transformers import AutoTokenizer

    assert {"tokenizer.json", "tokenizer_config.json", "config.json", "model.safetensors"} <= set(
        os.listdir(checkpoint))
    loaded = AutoTokenizer.from_pretrained(checkpoint)
    assert len(loaded) == len(tokenizer) and loaded.eos_token == tiny.IM_END and loaded.pad_token == tiny.PAD
    for text in _held_out_texts(problems):
        assert loaded.encode(text, add_special_tokens=False) == tokenizer.encode(text, add_special_tokens=False)
    rendered = loaded.apply_chat_template(MESSAGE, tokenize=False, add_generation_prompt=True)
    assert rendered == tokenizer.apply_chat_template(MESSAGE, tokenize=False, add_generation_prompt=True)
    ids = loaded.apply_chat_template(MESSAGE, tokenize=True, add_generation_prompt=True,
                                     return_dict=True)["input_ids"]
    assert ids[0] == loaded.convert_tokens_to_ids(tiny.IM_START) and loaded.decode(ids) == rendered
    with open(os.path.join(checkpoint, "config.json")) as f:
        hf_config = json.load(f)
    assert hf_config["vocab_size"] == len(tokenizer) and hf_config["model_type"] == "qwen2"
    assert (hf_config["bos_token_id"], hf_config["eos_token_id"], hf_config["pad_token_id"]) == (0, 2, 3)
    config, params = convert.load_hf(checkpoint)
    n_params = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(params))
    assert n_params == tiny.count_params(hf_config) == qwen2.param_count(config)
    assert 1_000_000 <= n_params <= 3_000_000


@pytest.mark.slow
def test_checkpoint_matches_transformers_and_flax(checkpoint):
    import torch
    import transformers

    model = transformers.Qwen2ForCausalLM.from_pretrained(checkpoint, attn_implementation="eager").eval()
    config, params = convert.load_hf(checkpoint)
    with open(os.path.join(checkpoint, "config.json")) as f:
        n_params = tiny.count_params(json.load(f))
    assert sum(p.numel() for p in model.parameters()) == n_params == qwen2.param_count(config)
    tokens = np.random.default_rng(0).integers(0, config.vocab_size, (2, 24))
    with torch.no_grad():
        want = model(input_ids=torch.tensor(tokens)).logits.numpy()
    got = np.asarray(qwen2.logits(config, params, jnp.asarray(tokens)))
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-4)
    assert float(np.std(want)) > 0  # random init, not zeros


@pytest.mark.parametrize("vocab", [512, 768, 1024])
def test_default_config_param_count(vocab):
    cfg = tiny.tiny_qwen2_config(vocab)
    n = tiny.count_params(cfg)
    assert 1_000_000 <= n <= 3_000_000
    assert n == qwen2.param_count(qwen2.Qwen2Config.from_hf_dict(cfg))
    untied = tiny.tiny_qwen2_config(vocab, hidden_size=192, num_heads=6, num_kv_heads=2, tie_word_embeddings=False)
    assert tiny.count_params(untied) == qwen2.param_count(qwen2.Qwen2Config.from_hf_dict(untied))
    assert (cfg["num_hidden_layers"], cfg["num_attention_heads"], cfg["num_key_value_heads"]) == (4, 4, 2)
    assert cfg["tie_word_embeddings"] and cfg["max_position_embeddings"] == 256
    assert cfg["intermediate_size"] == 4 * cfg["hidden_size"]


def test_bad_inputs_raise(corpus, tmp_path):
    with pytest.raises(ValueError, match="vocab_size"):
        tiny.train_tokenizer(corpus, vocab_size=100)
    with pytest.raises(ValueError, match="corpus is empty"):
        tiny.train_tokenizer([])
    with pytest.raises(ValueError, match=r"corpus\[1\]"):
        tiny.train_tokenizer(["ok", 3])
    with pytest.raises(ValueError, match="min_frequency"):
        tiny.train_tokenizer(corpus, min_frequency=0)
    with pytest.raises(ValueError, match="hidden_size"):
        tiny.tiny_qwen2_config(512, hidden_size=130)
    with pytest.raises(ValueError, match="num_layers"):
        tiny.tiny_qwen2_config(512, num_layers=0)
    with pytest.raises(ValueError, match="rope_theta"):
        tiny.tiny_qwen2_config(512, rope_theta=-1.0)
    with pytest.raises(ValueError, match="seed"):
        tiny.build_tiny_checkpoint(tmp_path, corpus, seed=None)
    with pytest.raises(ValueError, match="eos_token_id is taken from the trained tokenizer"):
        tiny.build_tiny_checkpoint(tmp_path, corpus, seed=0, eos_token_id=5)


def test_tokenizer_satisfies_the_tokenizer_protocol(tokenizer):
    from maxk_jax.models import tokenizer_protocol

    assert set(tokenizer_protocol.MEMBERS) >= {"eos_token_id", "pad_token_id", "__call__", "encode", "batch_decode",
                                               "apply_chat_template", "convert_tokens_to_ids"}
    assert tokenizer_protocol.missing_members(tokenizer) == []   # ids served by __getattr__ included
    assert "encode" in tokenizer_protocol.missing_members(object())
