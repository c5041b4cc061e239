"""RL fine-tuning: losses, the train step, rollouts, the loop, the supervised warm-up.

Data flow of one RL step: problems -> rollout (sampler + judge, ``rollout``) -> estimator
coefficients and the PPO losses (``losses``) inside the jitted train step (``training``) -> the
loop (``loop``: setup, steps, checkpoints, metrics via ``metrics_log``).  ``warmup`` is the
supervised warm-up of the tiny policy.

Modules: ``run_config`` (the typed RunConfig of a run: frozen sections composing
``sampling.SamplerSettings``, ``losses.LossConfig`` and ``sharding.MeshConfig``), ``config_dict``
(RunConfig <-> the command line's ml_collections ConfigDict), ``config`` (validate_config: the
device checks; the settings derived from a RunConfig), ``losses`` (clipped surrogate, IS-weighted
form, KL, entropy), ``wiring`` (update_loss: the log-ratios to π_old and μ, masks, coefficients
and loss of one update -- what ``training`` and ``exactness`` both differentiate), ``training`` (StepConfig, Batch, TrainState, make_train_step), ``rollout``
(collect: a `sampling.Sampler` + judge -> Batch), ``loop`` (run, validate_config), ``warmup``, ``metrics_log``.
"""
