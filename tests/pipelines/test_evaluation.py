"""maxk_jax.pipelines.evaluation: the run's judge (cache on synthetic data only; only an owned
judge is the caller's to close), and the evaluation sampling settings."""
from maxk_jax.pipelines import default_config
from maxk_jax.sampling import SamplerSettings
from maxk_jax.execution import CachingExecutor
from maxk_jax.pipelines import apply_overrides, eval_sampler, open_judge
from maxk_jax.cli.fields import replace_fields


class _Closable:
    def __init__(self):
        self.closed = False

    def judge(self, subs):
        return []

    def close(self):
        self.closed = True


def test_open_judge_wraps_a_given_executor_in_the_cache_on_synthetic_data_only():
    inner = _Closable()
    judge, owned = open_judge(default_config(), inner)
    assert isinstance(judge, CachingExecutor) and judge.inner is inner and not owned
    real = apply_overrides(default_config(), model_path="/ckpt", dataset="mbpp")
    judge, owned = open_judge(real, inner)
    assert judge is inner and not owned and not inner.closed


def test_open_judge_makes_an_owned_executor_from_the_config():
    cfg = replace_fields(default_config(), {"executor": "http://127.0.0.1:9"})   # built lazily: nothing is
    # contacted until judge()
    judge, owned = open_judge(cfg)
    try:
        assert owned and isinstance(judge, CachingExecutor)
    finally:
        judge.close()


def test_eval_sampler_follows_the_eval_section_and_the_rl_prompt_format():
    from types import SimpleNamespace

    cfg = replace_fields(default_config(), {"eval.sampler": SamplerSettings(
        n=16, max_new_tokens=32, temperature=0.7, top_p=0.9, top_k=5)})
    model_config = SimpleNamespace(pad_token_id=3, eos_token_id=[2, 7])
    s = eval_sampler(cfg, model_config, None, SimpleNamespace(pad_token_id=None, eos_token_id=2))
    assert s.settings == SamplerSettings(n=16, max_new_tokens=32, temperature=0.7, top_p=0.9, top_k=5)
    assert (s.eos_ids, s.pad_id, s.prompt_format) == ((2, 7), 3, "statement")   # tiny model: bare statements
    s = eval_sampler(apply_overrides(cfg, model_path="/ckpt"), model_config, None,
                     SimpleNamespace(pad_token_id=0, eos_token_id=9))
    assert (s.eos_ids, s.pad_id, s.prompt_format) == ((2, 7, 9), 0, "full")      # a HF checkpoint: full prompts
