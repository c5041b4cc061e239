"""maxk_jax.planning.step_roofline: the decode step's floors (bytes, FLOPs, the bound) and the RL step prediction."""
import pytest

from maxk_jax.planning import step_roofline as sr
from maxk_jax.models import qwen2

H200 = sr.H200_MEASURED   # the highest measured (docs/accelerators.md section 4)


def test_floors_of_a_small_model_by_hand():
    c = qwen2.Qwen2Config(vocab_size=100, hidden_size=16, intermediate_size=32, num_layers=2, num_heads=4,
                          num_kv_heads=2, tie_word_embeddings=False)
    d = sr.decode_step(c, 2, 3, 10, 4, bandwidth=1e9, peak_flops=1e12)
    params = qwen2.param_count(c)
    assert sr.matmul_params(c) == params - 100 * 16                              # the lookup table is not multiplied
    assert sr.matmul_params(c.replace(tie_word_embeddings=True)) == qwen2.param_count(c.replace(tie_word_embeddings=True))
    assert d["weight_bytes"] == 2 * params
    per_token = 2 * 2 * 2 * 4 * 2             # K and V, layers, KV heads, head dim 4, bf16
    assert d["kv_bytes"] == per_token * (2 * 10 + 6 * 4 // 2)
    assert d["matmul_flops"] == 2 * 6 * (params - 1600)
    assert d["attention_flops"] == 4 * 6 * 2 * 4 * 4 * (10 + 2)
    assert d["memory_s"] == pytest.approx((d["weight_bytes"] + d["kv_bytes"]) / 1e9)
    assert d["roofline_s"] == max(d["memory_s"], d["compute_s"]) and d["tokens_per_s"] == 6 / d["roofline_s"]
    with pytest.raises(ValueError, match="n=0"):
        sr.decode_step(c, 2, 0, 10, 4, bandwidth=1e9, peak_flops=1e12)


def test_the_documented_roofline_steps_and_what_bounds_the_rl_batch_sizes():
    small, large = qwen2.preset("qwen2.5-coder-1.5b"), qwen2.preset("qwen2.5-coder-7b")
    # docs/accelerators.md: a roofline step of 1.06 ms at 1.5B and 4.66 ms at 7B (16 x 8, 512 / 256)
    assert sr.decode_step(small, 16, 8, 512, 256, **H200)["roofline_s"] == pytest.approx(1.06e-3, abs=5e-6)
    assert sr.decode_step(large, 16, 8, 512, 256, **H200)["roofline_s"] == pytest.approx(4.66e-3, abs=5e-6)
    assert sr.decode_step(small, 16, 8, 512, 256, **H200)["bound"] == "weights"
    for prompts, n in ((16, 32), (4, 256)):      # RL and evaluation batch sizes: the projections' FLOPs
        d = sr.decode_step(small, prompts, n, 512, 256, **H200)
        assert d["bound"] == "matmul" and d["compute_s"] > d["memory_s"]
    d = sr.decode_step(small, 4, 256, 512, 256, **H200)
    assert d["kv_s"] > d["weights_s"]            # 1,024 rows' own KV outweighs the weights


def test_rl_step_prediction():
    # docs/accelerators.md section 6: 1.5B, 16 x 32 rows, the judge's 15.7 programs/s per core on 16 cores
    c = qwen2.preset("qwen2.5-coder-1.5b")
    r = sr.rl_step(c, 16, 32, 512, 256, ppo_iterations=3, judge_per_s_per_core=15.7, host_cores=16, **H200)
    assert r["rows"] == 512 and r["judge_s"] == pytest.approx(512 / (15.7 * 16)) == pytest.approx(2.04, abs=0.005)
    assert r["rollout_s"] == pytest.approx(256 * r["decode"]["roofline_s"]) == pytest.approx(0.643, abs=0.001)
    assert r["logprob_s"] == pytest.approx(1.862, abs=0.001)
    assert r["update_s"] == pytest.approx(3 * 3 * r["logprob_s"]) == pytest.approx(16.76, abs=0.01)
    assert r["update_basis"] == "matmul floor"
    assert r["step_s"] == pytest.approx(r["rollout_s"] + r["judge_s"] + r["logprob_s"] + r["update_s"])
    assert r["bound"] == "update" and 0.78 < r["update_s"] / r["step_s"] < 0.80
    measured = sr.rl_step(c, 16, 32, 512, 256, ppo_iterations=3, judge_per_s_per_core=15.7, host_cores=16,
                          train_tokens_per_s=44_333.0, **H200)
    assert measured["update_s"] == pytest.approx(3 * 512 * 768 / 44_333.0) == pytest.approx(26.61, abs=0.01)
    assert measured["bound"] == "update" and 0.85 < measured["update_s"] / measured["step_s"] < 0.86
    two_cores = sr.rl_step(c, 16, 32, 512, 256, ppo_iterations=3, judge_per_s_per_core=15.7, host_cores=2, **H200)
    assert two_cores["judge_s"] == pytest.approx(16.3, abs=0.05)
    slow = sr.rl_step(c, 16, 32, 512, 256, ppo_iterations=3, judge_per_s_per_core=0.1, host_cores=16, **H200)
    assert slow["bound"] == "judge"
    with pytest.raises(ValueError, match="host_cores=0"):
        sr.rl_step(c, 1, 2, 8, 8, ppo_iterations=1, judge_per_s_per_core=1.0, host_cores=0, **H200)
