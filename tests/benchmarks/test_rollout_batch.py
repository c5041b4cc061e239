"""maxk_jax/benchmarks/rollout_batch.py: the random RL batch has the shapes and masks the train step expects."""
import numpy as np

from maxk_jax.benchmarks.rollout_batch import train_batch


def test_train_batch_shapes_groups_and_masks():
    b, n, sp, t, vocab = 12, 4, 16, 8, 50
    d = train_batch(np.random.default_rng(0), b, n, sp, t, vocab)
    assert d["tokens"].shape == (b, sp + t) and d["tokens"].dtype == np.int32
    assert d["tokens"].min() >= 4 and d["tokens"].max() < vocab
    prompt_lens = d["attention_mask"][:, :sp].sum(1)
    assert (prompt_lens.reshape(-1, n) == prompt_lens.reshape(-1, n)[:, :1]).all()      # a group shares its prompt
    assert ((prompt_lens >= sp // 2) & (prompt_lens <= sp)).all()
    assert d["attention_mask"][np.arange(b), sp - 1].all()                               # left-padded prompts
    comp_lens = d["completion_mask"].sum(1)
    assert ((comp_lens >= t // 2) & (comp_lens <= t)).all()
    assert (d["completion_mask"] == d["attention_mask"][:, sp:]).all()
    assert (d["old_logp"][~d["completion_mask"]] == 0).all()
    assert ((d["old_logp"][d["completion_mask"]] >= -3) & (d["old_logp"][d["completion_mask"]] <= -0.05)).all()
    assert set(np.unique(d["rewards"])) <= {0.0, 1.0}
