"""The typed run config of the RL loop: frozen, keyword-only dataclasses validated on construction.

    run = RunConfig(model=ModelSettings(path="/models/qwen"), output_dir="runs/maxk",
                    algo=AlgoSettings(estimator="grpo", k=2),
                    rollout=RolloutConfig(prompts=8, sampler=SamplerSettings(n=4, max_new_tokens=64)))
    run = replace_fields(run, {"algo.loss.kl_beta": 0.0, "rollout.sampler.temperature": 0.7})   # maxk_jax.cli.fields
    step = run.step_config()          # training.StepConfig of the run
    step = run.validate(num_devices)  # + the checks that need the devices (mesh, batch, optimizer)
    sampler = run.rollout_sampler(model_config, tokenizer)   # sampling.Sampler template of the rollout

Sections compose the settings objects of the library instead of re-declaring their fields: the
sampling distribution is a ``sampling.SamplerSettings`` (rollout and evaluation), the loss a
``losses.LossConfig`` (``algo.loss``; its ``kind`` is the loss form), the mesh a
``sharding.MeshConfig``.  Every ``__post_init__`` raises ValueError naming the field and its value
(``rollout.prompts=0 must be an int >= 1``).  What is derived from a run belongs to the run: the checks
that need the devices (``RunConfig.validate``), the evaluation's sampler and k values, the number
of RL steps, the rollout's `Sampler` (stop ids from the tokenizer) are methods of `RunConfig`;
``DistributedSettings.initialize`` starts jax.distributed.  The command line
holds the same tree as an ml_collections ConfigDict (``maxk_jax.rl.config_dict``: one conversion
each way, the schema generated from these defaults).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from maxk_jax.cli.fields import check_int, check_type
from maxk_jax.rl.training import StepConfig
from maxk_jax.runtime.sharding import MeshConfig
from maxk_jax.sampling import Sampler, SamplerSettings
from maxk_jax.rl.run_sections import (  # noqa: F401  (the sections: re-exported)
    BEHAVIOUR_LOGPROBS, DTYPES, SCHEDULES, SECTION_TYPES, AlgoSettings, CheckpointSettings, DataSettings,
    DistributedSettings, EvalSettings, LogSettings, ModelSettings, OptimSettings, ProblemSource, RolloutConfig,
    check_sampler)


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunConfig:
    """One RL run (defaults: the max@k paper's hyperparameters for Qwen2.5-Coder-7B-Instruct on
    CodeContests, see experiments/configs/base.py). ``seed``: sampling and data-order PRNG seed;
    ``output_dir``: metrics.jsonl, tensorboard/, checkpoints/, eval/ (required to run);
    ``max_steps``: RL steps (0 = data.epochs passes over the data)."""

    name: str = "maxk_offpolicy"
    seed: int = 0
    output_dir: str = ""
    max_steps: int = 0
    model: ModelSettings = dataclasses.field(default_factory=ModelSettings)
    data: DataSettings = dataclasses.field(default_factory=DataSettings)
    rollout: RolloutConfig = dataclasses.field(default_factory=RolloutConfig)
    algo: AlgoSettings = dataclasses.field(default_factory=AlgoSettings)
    optim: OptimSettings = dataclasses.field(default_factory=OptimSettings)
    mesh: MeshConfig = dataclasses.field(default_factory=lambda: MeshConfig(data=1, fsdp=-1, tensor=1))
    distributed: DistributedSettings = dataclasses.field(default_factory=DistributedSettings)
    checkpoint: CheckpointSettings = dataclasses.field(default_factory=CheckpointSettings)
    eval: EvalSettings = dataclasses.field(default_factory=EvalSettings)
    log: LogSettings = dataclasses.field(default_factory=LogSettings)

    def __post_init__(self) -> None:
        check_type(self.name, "name", str)
        check_int(self.seed, "seed", 0)
        check_type(self.output_dir, "output_dir", str)
        check_int(self.max_steps, "max_steps", 0)
        for f in dataclasses.fields(self):
            kind = SECTION_TYPES.get(f.name)
            if kind is not None and not isinstance(getattr(self, f.name), kind):
                raise ValueError(f"{f.name}={getattr(self, f.name)!r} must be a {kind.__name__}")
        self.step_config()   # k vs n, the estimator's minimum k, the train step's sampling checks

    def step_config(self) -> StepConfig:
        """The static train-step settings of the run (``training.StepConfig``)."""
        a = self.algo
        try:
            step = StepConfig(estimator=a.estimator, k=a.k, sampler=self.rollout.sampler,
                              estimator_options=a.estimator_options, loss=a.loss,
                              micro_batches=self.optim.micro_batches, logprob_chunk=self.model.logprob_chunk,
                              stale_correction=a.stale_correction, tis_cap=a.tis_cap)
        except ValueError as err:
            raise ValueError(f"algo.{err}") from err
        if self.rollout.max_staleness and a.behaviour_logprobs != "trainer":
            raise ValueError(f"rollout.max_staleness={self.rollout.max_staleness} needs "
                             f"algo.behaviour_logprobs='trainer' (π_old of the PPO clip is the learner's "
                             f"own weights; the stale sampler's log-probs are the behaviour policy), got "
                             f"{a.behaviour_logprobs!r}")
        return step

    @property
    def corrects_behaviour(self) -> bool:
        """True when the train batches carry the sampler's log-probs as the behaviour policy μ
        (``rollout.max_staleness`` > 0 or a ``algo.stale_correction`` other than "none")."""
        return bool(self.rollout.max_staleness) or self.algo.stale_correction != "none"

    def require_paths(self) -> None:
        """ValueError unless the fields a run needs are set: ``output_dir`` and ``model.path``."""
        if not self.output_dir:
            raise ValueError("output_dir is empty: set --config.output_dir=DIR")
        if not self.model.path:
            raise ValueError("model.path is empty: set --config.model.path=HF_QWEN2_DIR")

    def validate(self, num_devices: int | None = None) -> StepConfig:
        """The checks a RunConfig cannot make on its own (every field was checked when it was built):
        the rollout's devices and the learner's mesh against ``num_devices`` (default
        ``len(jax.devices())``), the batch against the mesh and the micro-batches, the optimizer;
        ValueError naming the field, before any compilation. Returns the `step_config`."""
        import jax

        from maxk_jax.rl.training import make_optimizer

        step = self.step_config()
        total = len(jax.devices()) if num_devices is None else num_devices
        hosts = jax.process_count()
        if self.rollout.devices and self.rollout.devices >= total // hosts:
            raise ValueError(f"rollout.devices={self.rollout.devices} leaves no device of the {total // hosts} of "
                             f"{'each process' if hosts > 1 else 'this process'} to the learner (0 = the rollout "
                             "shares the learner's devices)")
        data, fsdp, _ = self.mesh.resolve(total - self.rollout.devices * hosts)
        step.check_batch(self.rollout.prompts * self.rollout.sampler.n, data * fsdp)
        o = self.optim
        make_optimizer(o.learning_rate, total_steps=max(o.warmup_steps, 1), schedule=o.schedule,
                       warmup_steps=o.warmup_steps, weight_decay=o.weight_decay, max_grad_norm=o.max_grad_norm or None)
        return step

    def device_split(self, devices: Sequence[Any] | None = None) -> tuple[list[Any], list[Any] | None]:
        """(learner devices, rollout devices) of ``devices`` (default ``jax.devices()``): the last
        ``rollout.devices`` of each process are the rollout's — this process's are returned — and
        the learner's mesh spans every process's others; None when it is 0 (the rollout shares the
        learner's). Checked by `validate`."""
        import jax

        devices = list(jax.devices() if devices is None else devices)
        d = self.rollout.devices
        if not d:
            return devices, None
        by_process: dict[int, list[Any]] = {}
        for device in devices:
            by_process.setdefault(device.process_index, []).append(device)
        learner = [x for p in sorted(by_process) for x in by_process[p][:len(by_process[p]) - d]]
        own = by_process[jax.process_index()]
        return learner, own[len(own) - d:]

    def eval_sampler(self) -> SamplerSettings:
        """The evaluation's sampler settings (``eval.sampler.max_new_tokens`` 0 = the rollout's)."""
        s = self.eval.sampler
        return dataclasses.replace(s, max_new_tokens=s.max_new_tokens or self.rollout.sampler.max_new_tokens)

    def eval_ks(self) -> tuple[int, ...]:
        """k values of the periodic evaluation: ``eval.ks`` or 1, 2, 4, ..., eval.sampler.n / 2."""
        from maxk_jax.eval.run import default_ks

        return tuple(self.eval.ks) if self.eval.ks else default_ks(self.eval.sampler.n)

    def train_ks(self) -> list[int]:
        """k values of the train-set pass@k / max@k metrics: {1, algo.k, n}."""
        return sorted({1, self.algo.k, self.rollout.sampler.n})

    def num_rl_steps(self, num_problems: int) -> int:
        """``max_steps`` if set, else floor(epochs * problems / prompts per step); ValueError if 0."""
        steps = self.max_steps or (self.data.epochs * num_problems) // self.rollout.prompts
        if steps < 1:
            raise ValueError(f"{num_problems} problems x {self.data.epochs} epochs give no full step of "
                             f"rollout.prompts={self.rollout.prompts}")
        return steps

    def render_kwargs(self) -> dict[str, Any]:
        """Prompt rendering options of ``data.chat`` / ``data.system_prompt``."""
        from maxk_jax.data.prompts import DEFAULT_SYSTEM_PROMPT

        system = {"default": DEFAULT_SYSTEM_PROMPT, "": None}.get(self.data.system_prompt, self.data.system_prompt)
        return {"chat": self.data.chat, "system_prompt": system}

    def rollout_sampler(self, model_config: Any, tokenizer: Any) -> Sampler:
        """The run's `sampling.Sampler` template (no weights yet; each RL step gives it the rollout copy
        with ``replace(params=...)``): ``rollout.sampler`` settings, stop ids ``rollout.eos_ids`` (empty =
        the tokenizer's and the model's eos), the default pad id, the data section's prompt format and
        rendering, ``rollout.min_prompt_bucket``."""
        return Sampler.create(model_config, None, tokenizer, self.rollout.sampler, eos_ids=self.rollout.eos_ids,
                              prompt_format=self.data.prompt_format, render_kwargs=self.render_kwargs(),
                              min_prompt_bucket=self.rollout.min_prompt_bucket)


    def resolved_model_config(self, model_config: Any, mesh: Any, problems: Sequence[Any], tokenizer: Any) -> Any:
        """``model_config`` with ``remat_policy="auto"`` resolved for this run's train step on ``mesh``
        (``memory_plan.train_step_remat``: off GPU "nothing" at once; on a GPU the fastest policy whose
        step of ``rollout.prompts x n`` rows, the longest of ``problems``' prompt buckets +
        ``max_new_tokens`` columns, fits the card); unchanged when the policy is set or remat is off."""
        if model_config.remat_policy != "auto" or not model_config.remat:
            return model_config
        from maxk_jax.planning import memory_plan
        from maxk_jax.sampling import prompt_length_bucket

        def prompt_len() -> int:
            prompts, _ = self.rollout_sampler(model_config, tokenizer).encode(problems)
            return prompt_length_bucket(max(len(p) for p in prompts), self.rollout.min_prompt_bucket)

        policy = memory_plan.train_step_remat(model_config, self.step_config(), mesh,
                                              sequences=self.rollout.prompts * self.rollout.sampler.n,
                                              prompt_len=prompt_len, completion_len=self.rollout.sampler.max_new_tokens,
                                              mu_dtype=self.optim.mu_dtype or None)
        return model_config.replace(remat_policy=policy)
