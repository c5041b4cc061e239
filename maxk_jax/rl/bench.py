"""The RL step end to end, timed part by part: what ``python -m experiments.bench_rl`` runs.

Real steps of the project's loop (``rl.loop.setup`` + ``rl.loop.rl_step``: the run config, the rollout
copy, the sampler, the embedded judge with one slot per host core, the estimator, the PPO iterations,
the reference pass; no checkpoint, no evaluation) on synthetic stdin/stdout problems
(``data.synthetic``) with random weights of a preset (``qwen2.5-coder-1.5b``, ``-7b``, ...; ``tiny``:
a 2-layer model with its own tokenizer, the ``--smoke`` model). Random weights write programs that fail
at once; ``reference_share`` replaces that share of every problem's completions (samples ``j <
round(share * n)``) by the problem's reference solution before judging (`ReferenceShare`), so the judge
runs programs that pass. The replaced samples are counted in the result.

Each step's parts, each closed by a host transfer or ``block_until_ready`` (so they add up to the step,
up to the loop's bookkeeping, reported as ``other_s``): ``weight_copy_s`` (the rollout copy, `TimedLayout`),
``rollout_s`` (prompt encoding + sampling), ``judge_s``, ``logprob_s`` (the reference pass), ``update_s``
(the PPO iterations). ``tokens_per_s_per_device`` counts as NeMo-RL does: (generated + trained tokens) /
step seconds / devices, trained tokens = the prompt + completion tokens of the step's sequences, once
(not once per PPO iteration).
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import time
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from maxk_jax.data.problem import Problem
from maxk_jax.cli.fields import check_choice, check_int, check_real, replace_fields
from maxk_jax.models import qwen2
from maxk_jax.rl.method import DEFAULT_METHOD, apply_method, check_method
from maxk_jax.rl.run_config import RunConfig

PRESETS = ("tiny", *qwen2.PRESETS)
PARTS = ("weight_copy_s", "rollout_s", "judge_s", "logprob_s", "update_s")


@dataclasses.dataclass(frozen=True, kw_only=True)
class BenchSettings:
    """One benchmark: ``preset`` (`PRESETS`), ``steps`` timed RL steps after ``warmup`` untimed ones
    (the first compiles), ``prompts`` x ``n`` completions of ``max_new_tokens`` per step, ``ppo_iterations``,
    ``micro_batches`` of the update (dividing ``prompts``), ``reference_share`` in [0, 1], ``judge_slots``
    (0 = one per host core), parameter / Adam ``dtype``, matmul ``compute_dtype``, the model's
    ``decode_attention`` / ``remat_policy``, ``seed``, the RL ``method`` (a `maxk_jax.rl.method` name)."""

    preset: str = "qwen2.5-coder-1.5b"
    steps: int = 3
    warmup: int = 1
    prompts: int = 16
    n: int = 32
    max_new_tokens: int = 256
    ppo_iterations: int = 3
    micro_batches: int = 1
    reference_share: float = 0.0
    judge_slots: int = 0
    dtype: str = "float32"
    compute_dtype: str = "bfloat16"
    decode_attention: str = "auto"
    remat_policy: str = "auto"
    seed: int = 0
    method: str = DEFAULT_METHOD

    def __post_init__(self) -> None:
        check_choice(self.preset, "preset", PRESETS)
        check_method(self.method)
        for name, low in (("steps", 1), ("warmup", 1), ("prompts", 1), ("n", 2), ("max_new_tokens", 1),
                          ("ppo_iterations", 1), ("micro_batches", 1), ("judge_slots", 0), ("seed", 0)):
            check_int(getattr(self, name), name, low)
        check_real(self.reference_share, "reference_share", "in [0, 1]",
                   isinstance(self.reference_share, (int, float)) and 0 <= self.reference_share <= 1)
        check_choice(self.dtype, "dtype", ("float32", "bfloat16"))
        check_choice(self.compute_dtype, "compute_dtype", ("float32", "bfloat16"))


def smoke_settings(**changes: Any) -> BenchSettings:
    """The ``--smoke`` benchmark: the tiny model, 2 steps of 2 prompts x 4 completions of 16 tokens,
    2 PPO iterations, float32 math (CPU)."""
    base = dict(preset="tiny", steps=2, prompts=2, n=4, max_new_tokens=16, ppo_iterations=2,
                compute_dtype="float32")
    return BenchSettings(**{**base, **changes})


def run_config(s: BenchSettings, output_dir: str) -> RunConfig:
    """The RL run of the benchmark: the project's defaults (``RunConfig()``: KL reference, remat) with
    ``s.method`` (the default method unless given) and the benchmark's shape, no evaluation, checkpoints never due, one process's
    devices all along ``data`` x ``fsdp`` as the defaults lay them out."""
    slots = s.judge_slots or os.cpu_count() or 1
    return replace_fields(apply_method(RunConfig(), s.method), {
        "name": "bench_rl", "output_dir": output_dir, "seed": s.seed, "max_steps": s.warmup + s.steps,
        "model.dtype": s.dtype, "model.compute_dtype": s.compute_dtype,
        "model.decode_attention": s.decode_attention, "model.remat_policy": s.remat_policy,
        "rollout.prompts": s.prompts, "rollout.sampler.n": s.n, "rollout.sampler.max_new_tokens": s.max_new_tokens,
        "rollout.executor": f"embedded:{slots}", "algo.ppo_iterations": s.ppo_iterations,
        "optim.micro_batches": s.micro_batches,
        "algo.k": min(RunConfig().algo.k, s.n // 2),
        "checkpoint.interval": 10 ** 9, "eval.interval": 0, "eval.at_end": False, "log.tensorboard": False})


def bench_problems(s: BenchSettings) -> list[Problem]:
    """Synthetic stdin/stdout problems, enough for every step without repeating one."""
    from maxk_jax.data import synthetic
    return synthetic.make_split(synthetic.SyntheticConfig(seed=s.seed, num_train=s.prompts * (s.warmup + s.steps),
                                                          num_test=1))[0]


def bench_model(s: BenchSettings, problems: Sequence[Problem]) -> tuple[qwen2.Qwen2Config, Any]:
    """(model config, tokenizer): a `qwen2.PRESETS` entry with the offline Qwen2.5 tokenizer, or the
    tiny model with a byte-level BPE tokenizer trained on ``problems``."""
    if s.preset != "tiny":
        from maxk_jax.models.tokenizer import build_qwen25_tokenizer
        tokenizer = build_qwen25_tokenizer()
        return qwen2.preset(s.preset, eos_token_id=tokenizer.eos_token_id), tokenizer
    from maxk_jax.data.synthetic_solutions import tokenizer_corpus
    from maxk_jax.models import tiny
    tokenizer = tiny.train_tokenizer(tokenizer_corpus(problems[:32], np.random.default_rng(s.seed), 1),
                                     vocab_size=512, model_max_length=1024)
    config = qwen2.Qwen2Config(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_layers=2,
                               num_heads=4, num_kv_heads=2, max_position_embeddings=1024, rope_theta=10000.0,
                               tie_word_embeddings=True, eos_token_id=tokenizer.eos_token_id,
                               pad_token_id=tokenizer.pad_token_id)
    return config, tokenizer


class ReferenceShare:
    """An executor that judges samples ``j < round(share * n)`` of every problem (submission ids
    ``"<problem>/<j>"``, ``judging.judge_completions``) with the problem's reference solution instead of
    the completion's code; counts them in ``replaced``. Problems are recognised by their tests."""

    def __init__(self, inner: Any, problems: Sequence[Problem], share: float, n: int) -> None:
        from maxk_jax.data.synthetic_solutions import canonical_solution
        self.inner, self.first = inner, round(share * n)
        self.replaced = 0
        self._reference = {self._key(p.to_submission("", "x")): p.assemble_code(canonical_solution(p))
                           for p in problems} if self.first else {}

    @staticmethod
    def _key(sub: Any) -> str:
        return json.dumps(sub["tests"], sort_keys=True, default=str)

    def judge(self, submissions: Sequence[Any]) -> list[Any]:
        """``inner.judge`` of the submissions, the first samples' code replaced."""
        out = []
        for sub in submissions:
            if self.first and int(str(sub["id"]).rsplit("/", 1)[-1]) < self.first:
                sub = {**sub, "code": self._reference[self._key(sub)]}
                self.replaced += 1
            out.append(sub)
        return self.inner.judge(out)

    def close(self) -> None:
        self.inner.close()

    def __enter__(self) -> "ReferenceShare":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class TimedLayout:
    """A ``RolloutLayout`` whose ``copy`` blocks until the copy is done and records its seconds."""

    def __init__(self, layout: Any) -> None:
        self.layout, self.seconds = layout, 0.0

    def copy(self, params: Any) -> Any:
        t0 = time.perf_counter()
        out = jax.block_until_ready(self.layout.copy(params))
        self.seconds = time.perf_counter() - t0
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self.layout, name)


def step_record(metrics: dict[str, float], copy_s: float, trained_tokens: int) -> dict[str, float]:
    """One step's parts (`PARTS`, ``other_s`` = the rest of ``step_s``) and token counts from
    ``rl_step``'s metrics and the timed rollout copy."""
    rec = {"weight_copy_s": copy_s, "rollout_s": metrics["time/sample_s"], "judge_s": metrics["time/judge_s"],
           "logprob_s": metrics["time/ref_logp_s"], "update_s": metrics["time/train_s"],
           "step_s": metrics["time/step_s"]}
    rec["other_s"] = rec["step_s"] - sum(rec[p] for p in PARTS)
    rec["generated_tokens"] = int(metrics["samples/generated_tokens"])
    rec["trained_tokens"] = int(trained_tokens)
    rec["reward_mean"] = float(metrics.get("reward/mean", math.nan))
    return rec


def peak_memory() -> tuple[int | None, str]:
    """(largest ``peak_bytes_in_use`` over local devices, "") or (None, why not)."""
    peaks = []
    for d in jax.local_devices():
        try:
            stats = d.memory_stats()
        except Exception:  # noqa: BLE001 - unimplemented on some backends
            stats = None
        if stats and "peak_bytes_in_use" in stats:
            peaks.append(int(stats["peak_bytes_in_use"]))
    if not peaks:
        return None, f"{jax.default_backend()} devices report no memory_stats()"
    return max(peaks), ""


def run_bench(s: BenchSettings, output_dir: str, *, progress: bool = True) -> dict[str, Any]:
    """Run ``s`` (see the module docstring) with scratch files under ``output_dir`` -> the result
    dict (``steps``: one `step_record` per timed step; medians, tokens per second per device,
    ``first_step_s`` (compiles included), ``compile_s`` = first step - median step, peak memory)."""
    from tqdm.auto import tqdm

    from maxk_jax.runtime import sharding as sharding_lib
    from maxk_jax.execution import make_executor
    from maxk_jax.rl import loop

    t_setup = time.perf_counter()
    cfg = run_config(s, output_dir)
    problems = bench_problems(s)
    config, tokenizer = bench_model(s, problems)
    config = config.replace(param_dtype=s.dtype, dtype=s.compute_dtype)
    learner, _ = cfg.device_split()
    mesh = sharding_lib.make_mesh(cfg.mesh.data, cfg.mesh.fsdp, cfg.mesh.tensor, devices=learner)
    shardings = sharding_lib.param_shardings(mesh, qwen2.logical_axes(config), qwen2.abstract_params(config))
    params = jax.jit(qwen2.init_params, static_argnums=0, out_shardings=shardings)(config, jax.random.key(s.seed))
    executor = ReferenceShare(make_executor(cfg.rollout.executor), problems, s.reference_share, s.n)
    with contextlib.ExitStack() as stack:
        stack.enter_context(executor)
        ctx = loop.setup(cfg, stack, executor=executor, eval_fn=lambda *_: {}, weights=(config, params, tokenizer),
                         problems=problems)
        del params
        layout = ctx.rollout_layout = TimedLayout(ctx.rollout_layout)
        prompt_tokens = [len(p) for p in ctx.sampler.encode(problems)[0]]
        setup_s = time.perf_counter() - t_setup
        records, first = [], []
        bar = tqdm(range(ctx.total), desc=f"bench_rl {s.preset}", disable=not progress)
        for step in bar:
            ctx.state, ctx.rng, metrics = loop.rl_step(ctx, step, ctx.state, ctx.rng)
            order = loop.step_problems(list(range(len(problems))), step, s.prompts, cfg.seed, cfg.data.shuffle)
            trained = s.n * sum(prompt_tokens[i] for i in order) + int(metrics["samples/generated_tokens"])
            rec = step_record(metrics, layout.seconds, trained)
            (first if step < s.warmup else records).append(rec)
            bar.set_postfix(step_s=f"{rec['step_s']:.2f}")
        peak, why = peak_memory()
    return summarize(s, cfg, records, first, setup_s, peak, why, executor.replaced, ctx.model_config)


def summarize(s: BenchSettings, cfg: RunConfig, records: list[dict[str, float]], first: list[dict[str, float]],
              setup_s: float, peak: int | None, why: str, replaced: int, model_config: Any) -> dict[str, Any]:
    """The result dict of `run_bench` from its step records."""
    median = {k: float(np.median([r[k] for r in records])) for k in (*PARTS, "other_s", "step_s")}
    devices = len(jax.devices())
    tokens = float(np.median([(r["generated_tokens"] + r["trained_tokens"]) / r["step_s"] for r in records]))
    judged = s.prompts * s.n * (s.warmup + s.steps)
    device = jax.devices()[0]
    return {
        "settings": dataclasses.asdict(s), "run": {"estimator": cfg.algo.estimator, "k": cfg.algo.k,
                                                    "executor": cfg.rollout.executor,
                                                    "decode_attention_resolved": _resolved_attention(model_config),
                                                    "remat": model_config.remat,
                                                    "remat_policy_resolved": model_config.remat_policy},
        "device": {"platform": device.platform, "kind": device.device_kind, "count": devices},
        "host_cores": os.cpu_count(), "versions": {"jax": jax.__version__},
        "reference_share": s.reference_share, "replaced_completions": replaced, "judged_completions": judged,
        "setup_s": setup_s, "first_step_s": first[0]["step_s"],
        "compile_s": max(first[0]["step_s"] - median["step_s"], 0.0), "warmup_steps": first,
        "steps": records, "median": median,
        "shares": {k: median[k] / median["step_s"] for k in (*PARTS, "other_s")},
        "tokens_per_s_per_device": tokens / devices,
        "judge_programs_per_s_per_slot": float(np.median([s.prompts * s.n / r["judge_s"] for r in records]))
        / int(cfg.rollout.executor.split(":")[1]),
        "peak_device_memory_bytes": peak, "peak_device_memory_note": why,
    }


def _resolved_attention(config: Any) -> str:
    from maxk_jax.models import decode_attention
    return decode_attention.resolve(config.decode_attention, jax.default_backend())


def markdown(r: dict[str, Any]) -> str:
    """The result as a markdown table: one row per timed step and the median, seconds and shares."""
    cols = (*PARTS, "other_s", "step_s")
    s = r["settings"]
    lines = [f"# bench_rl: {s['preset']} on {r['device']['count']} x {r['device']['kind']}", "",
             f"{s['prompts']} prompts x n = {s['n']}, {s['max_new_tokens']} new tokens, {s['ppo_iterations']} PPO "
             f"iterations, {s.get('method', r['run']['estimator'])} (k = {r['run']['k']}), judge {r['run']['executor']}, decode "
             f"attention {r['run']['decode_attention_resolved']}, remat {r['run']['remat']} "
             f"({r['run']['remat_policy_resolved']}); reference share {r['reference_share']} "
             f"({r['replaced_completions']} of {r['judged_completions']} completions judged as the reference "
             "solution)", "",
             "| step | " + " | ".join(cols) + " | tokens/s/device |", "|" + "---|" * (len(cols) + 2)]
    for i, rec in enumerate(r["steps"]):
        tps = (rec["generated_tokens"] + rec["trained_tokens"]) / rec["step_s"] / r["device"]["count"]
        lines.append(f"| {i + 1} | " + " | ".join(f"{rec[c]:.3f}" for c in cols) + f" | {tps:,.0f} |")
    lines.append("| median | " + " | ".join(f"{r['median'][c]:.3f}" for c in cols)
                 + f" | {r['tokens_per_s_per_device']:,.0f} |")
    lines.append("| share | " + " | ".join(f"{100 * r['shares'][c]:.0f} %" for c in cols[:-1]) + " | 100 % | |")
    peak = r["peak_device_memory_bytes"]
    lines += ["", f"First step (compiles) {r['first_step_s']:.1f} s, compile ~{r['compile_s']:.1f} s, setup "
              f"{r['setup_s']:.1f} s; peak device memory "
              + (f"{peak / 2**30:.1f} GiB" if peak is not None else f"n/a ({r['peak_device_memory_note']})")
              + f"; judge {r['judge_programs_per_s_per_slot']:.1f} programs/s per slot."]
    peer = r.get("peer")
    if peer:
        lines += ["", f"PyTorch peer ({peer['what']}): {peer['model_s']:.3f} s per step against ours "
                  f"{r['model_s']:.3f} s (rollout + copy + log-probs + update): **{r['ratio_peer_over_ours']:.2f}x**"]
    return "\n".join(lines) + "\n"


def judge_rate(s: BenchSettings, *, rounds: int = 3) -> dict[str, Any]:
    """The embedded judge alone (``--judge_only``): ``rounds`` timed calls (after one untimed) judging one step's
    ``prompts x n`` submissions, every one the problem's reference solution (it runs every test) -> programs per
    second (median), per slot, the slots and the host's load average before and after."""
    from maxk_jax.data.synthetic_solutions import canonical_solution
    from maxk_jax.execution import make_executor
    check_int(rounds, "rounds")
    problems = bench_problems(s)[:s.prompts]
    subs = [p.to_submission(canonical_solution(p), f"{i}/{j}") for i, p in enumerate(problems) for j in range(s.n)]
    slots = s.judge_slots or os.cpu_count() or 1
    load = os.getloadavg()
    times = []
    with make_executor(f"embedded:{slots}") as executor:
        results = executor.judge(subs)
        bad = [r["id"] for r in results if r.get("status") != "ok" or r.get("passed") != r.get("total")]
        if bad:
            raise RuntimeError(f"reference solutions failed the judge: {bad[:5]}")
        for _ in range(rounds):
            t0 = time.perf_counter()
            executor.judge(subs)
            times.append(time.perf_counter() - t0)
    rate = len(subs) / float(np.median(times))
    return {"programs": len(subs), "tests_per_program": float(np.mean([len(r.get("tests") or ()) for r in results])),
            "seconds": times, "programs_per_s": rate, "slots": slots, "programs_per_s_per_slot": rate / slots,
            "loadavg_before": load, "loadavg_after": os.getloadavg()}


def peer_case(s: BenchSettings, prompt_len: int) -> tuple[int, int, int, int]:
    """(prompts, n, prompt length, new tokens) of the PyTorch peer: the benchmark's step shape."""
    return s.prompts, s.n, prompt_len, s.max_new_tokens


def with_peer(result: dict[str, Any], peer: dict[str, Any] | None) -> dict[str, Any]:
    """``result`` with the peer's row and, when there is one, ``model_s`` (our median rollout + copy +
    log-probs + update: the accelerator's share of the step, the judge being the same host work on both
    sides) and ``ratio_peer_over_ours`` = the peer's ``model_s`` / ours (> 1: ours is faster)."""
    m = result["median"]
    result["model_s"] = m["rollout_s"] + m["weight_copy_s"] + m["logprob_s"] + m["update_s"]
    result["peer"] = peer
    result["ratio_peer_over_ours"] = peer["model_s"] / result["model_s"] if peer else None
    return result
