r"""Evaluate a checkpoint: N samples per problem -> sandboxed judge -> pass@k / max@k tables.

    .venv/bin/python -m experiments.evaluate --checkpoint=/models/qwen2.5-coder-7b-instruct \
        --dataset=code_contests --path=/data/code_contests --split=test \
        --out_dir=results/base_cc --n=256 --seed=0
    .venv/bin/python -m experiments.evaluate --checkpoint=runs/maxk/checkpoints --step=800 \
        --model_dir=/models/qwen2.5-coder-7b-instruct --problems=cache/cc_test.jsonl.gz \
        --out_dir=results/maxk_cc --n=256 --seed=0 --executor=http://judge-host:8000

--checkpoint is a Hugging Face directory or our orbax checkpoint (root or step directory; the
architecture and tokenizer come from --model_dir or the checkpoint metadata's "model_dir").
Problems come from --dataset (any `maxk_jax.data.load_dataset` name, with --path/--split/
--options) or a Problem JSONL cache (--problems, see experiments.prepare_data).

The prompt format (--prompt_format: "full" or "statement"), chat template, system prompt and stop
ids default to those of the training run that wrote an orbax checkpoint (its stored run config), so
`--checkpoint=runs/tiny/rl/checkpoints` on the pipeline's test problems with its eval settings
reproduces the pipeline's numbers.

All flags, the problem file, the checkpoint (and its model directory), --out_dir's writability
and the judge (GET /healthz) are checked before anything is loaded or written, and every prompt
plus --max_new_tokens must fit the model's context before anything is written (a rejected run
leaves no files; a user's mistake is one line on stderr, exit status 2: `maxk_jax.cli`).
Writes to --out_dir: run_config.json (written first, once the model and problems are loaded),
per_problem.jsonl (one line per problem, appended as problems finish), and at the end
summary.json, table.md and curves.png (see
`maxk_jax.eval.report`). Re-running the same command after an interruption resumes: finished
problems are skipped (a torn last line is dropped), and the final files are identical to those
of an uninterrupted run. A run whose settings differ from run_config.json is refused unless
--overwrite is given (which discards the old results).

Multi-host: start the same command on every host with --distributed (plus --coordinator_address,
--num_processes, --process_id unless the cluster is auto-detected); each host samples and judges
its share of every sampling group, process 0 writes --out_dir (docs/usage/multihost.md).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from typing import Any

from absl import app, flags

from maxk_jax import cli

FLAGS = flags.FLAGS
flags.DEFINE_string("checkpoint", None, "Hugging Face Qwen2 directory, or an orbax checkpoint directory written by "
                    "training (its root, or a step directory).")
flags.DEFINE_integer("step", None, "Orbax checkpoint step to evaluate (default: the latest).")
flags.DEFINE_string("model_dir", None, "Hugging Face directory with the model's config.json and tokenizer, for orbax "
                    "checkpoints (default: the checkpoint metadata's 'model_dir').")
flags.DEFINE_string("tokenizer", None, "Tokenizer directory (default: the HF directory of the model).")
flags.DEFINE_enum("dtype", "auto", ["auto", "float32", "bfloat16"], "Parameter / compute dtype for sampling: "
                  "auto = bfloat16 on accelerators (GPU/TPU), float32 on CPU.")
flags.DEFINE_string("dataset", None, "Dataset name for maxk_jax.data.load_dataset: code_contests, livecodebench, "
                    "livebench, codeforces, mbpp, humaneval (or an alias). Exclusive with --problems.")
flags.DEFINE_string("path", None, "Dataset path: hub name or local file/directory (default: the loader's default).")
flags.DEFINE_string("split", None, "Dataset split (default: the loader's default split).")
flags.DEFINE_string("options", "{}", "JSON object of extra loader options, e.g. '{\"test_size\": 276, \"seed\": 0}'.")
flags.DEFINE_string("problems", None, "Problem JSONL cache (from experiments.prepare_data). Exclusive with --dataset.")
flags.DEFINE_integer("limit", 0, "Evaluate only the first LIMIT problems (0 = all).")
flags.DEFINE_string("out_dir", None, "Output directory for the results (created if missing).")
flags.DEFINE_string("run_name", None, "Name of this run in tables and plots (default: the out_dir name).")
flags.DEFINE_integer("n", 256, "Completions sampled per problem (the paper uses 256).")
flags.DEFINE_list("ks", [], "k values of the tables (default: 1, 2, 4, ..., n/2; every k <= n/2).")
flags.DEFINE_integer("batch_size", 64, "Maximum completions per sampler call on each host (problems x samples); "
                     "bounds memory. Does not change which completions are drawn. Multi-host: when n exceeds it, "
                     "each problem's n samples are split evenly across the hosts.")
flags.DEFINE_integer("max_new_tokens", 256, "Generated tokens per completion (the paper uses 256).")
flags.DEFINE_float("temperature", 1.0, "Sampling temperature (0 = greedy).")
flags.DEFINE_float("top_p", 1.0, "Nucleus sampling threshold (1 = disabled).")
flags.DEFINE_integer("top_k", 0, "Top-k sampling (0 = disabled).")
flags.DEFINE_list("eos_id", [], "Stop token ids (default: the tokenizer's eos token, the model config's eos ids "
                  "and generation_config.json's eos_token_id).")
flags.DEFINE_integer("seed", 0, "Seed of the sampling key (sample j of problem i uses "
                     "split(fold_in(key(seed), i), n)[j]); the same seed gives every model the same keys.")
flags.DEFINE_enum("prompt_format", "auto", ["auto", "full", "statement"], "Prompt format (maxk_jax.rl.rollout): "
                  "'full' (system prompt + instructions + answer format), 'statement' (the bare statement in the "
                  "chat template, as the tiny pipeline trains), or 'auto': the training run's data.prompt_format "
                  "for an orbax checkpoint written by training, else 'full'.")
flags.DEFINE_enum("chat", "auto", ["auto", "true", "false"], "Full prompts: chat template (true), plain text "
                  "ending in an opened ```python fence (false), or (auto) the training run's data.chat, else chat "
                  "when the tokenizer has a template.")
flags.DEFINE_string("system_prompt", None, "System prompt (default: the training run's data.system_prompt, else "
                    "maxk_jax.data.prompts.DEFAULT_SYSTEM_PROMPT; empty string = no system message).")
flags.DEFINE_bool("use_upstream_prompt", False, "Use the dataset's own formatted prompt (LiveBench) as the user message.")
flags.DEFINE_string("executor", "embedded", "Judge: 'embedded' (in-process sandbox), 'embedded:N' (N slots), "
                    "'http://host:port[,http://...]' (judge services) or 'sandboxfusion+http://host:port'.")
flags.DEFINE_integer("sandbox_retries", 2, "Re-judge a sample with status sandbox_error up to this many times; "
                     "samples still failing are excluded (null reward, n reduced, reported).")
flags.DEFINE_bool("fail_on_excluded", False, "Stop with an error instead of excluding unjudgeable samples.")
flags.DEFINE_bool("keep_completions", False, "Also store the completion texts in per_problem.jsonl.")
flags.DEFINE_string("mesh", "", "Shard sampling over devices: 'data,fsdp,tensor' sizes over all devices (e.g. "
                    "'-1,1,2': tensor-parallel pairs); empty = the rollout layout over every device (of every "
                    "host): data x tensor with the most tensor ways the KV heads and one host allow "
                    "(maxk_jax.sampling.rollout_copy).")
flags.DEFINE_bool("distributed", False, "Multi-host: call jax.distributed.initialize first (one process per host; "
                  "problems are split across hosts, process 0 writes the files). Without --coordinator_address "
                  "the cluster is auto-detected (Cloud TPU / SLURM / k8s).")
flags.DEFINE_string("coordinator_address", "", "Multi-host: host:port of process 0's coordinator service.")
flags.DEFINE_integer("num_processes", 1, "Multi-host: number of processes (with --coordinator_address).")
flags.DEFINE_integer("process_id", 0, "Multi-host: this process's id in [0, num_processes).")
flags.DEFINE_bool("overwrite", False, "Discard existing results in --out_dir instead of resuming.")
flags.DEFINE_bool("progress", True, "Show a tqdm progress bar.")
flags.mark_flags_as_required(["checkpoint", "out_dir"])

# Settings that change which results are produced: a resumed run must match them exactly.
RESULT_KEYS = ("checkpoint", "dataset", "problem_ids_sha256", "num_problems", "n", "seed", "max_new_tokens",
               "temperature", "top_p", "top_k", "eos_id", "render_kwargs", "keep_completions", "dtype")


def _problems() -> tuple[list, dict]:
    """Problems and their JSON description from --dataset/--problems (+ --limit)."""
    from maxk_jax.data import load_dataset, load_problems
    from maxk_jax.data.loaders import parse_options_json

    if FLAGS.problems:
        problems = load_problems(FLAGS.problems)
        spec = {"problems": os.path.abspath(FLAGS.problems)}
    else:
        try:
            options = parse_options_json(FLAGS.options)
        except ValueError as e:
            raise app.UsageError(str(e)) from e
        problems, report = load_dataset(FLAGS.dataset, FLAGS.path, FLAGS.split, **options)
        print(report.summary(), flush=True)
        spec = {"name": FLAGS.dataset, "path": FLAGS.path, "split": FLAGS.split, "options": options}
    if FLAGS.limit:
        problems = problems[:FLAGS.limit]
        spec["limit"] = FLAGS.limit
    if not problems:
        raise ValueError(f"no problems to evaluate from {spec}")
    return problems, spec


def _int_list(values: list[str], name: str) -> list[int]:
    try:
        return [int(v) for v in values]
    except ValueError as e:
        raise app.UsageError(f"--{name} must be a comma-separated list of ints, got {values!r}") from e


def _check_flags() -> None:
    """Every check of the flags alone, before anything is loaded or written (so a rejected run
    leaves no run_config.json behind that would refuse the corrected re-run)."""
    from maxk_jax.data.loaders import parse_options_json
    from maxk_jax.eval.run import check_ks
    from maxk_jax.sampling import SamplerSettings

    if bool(FLAGS.dataset) == bool(FLAGS.problems):
        raise app.UsageError("give exactly one of --dataset and --problems")
    for name, minimum in (("n", 1), ("batch_size", 1), ("max_new_tokens", 1), ("limit", 0), ("sandbox_retries", 0)):
        if getattr(FLAGS, name) < minimum:
            raise app.UsageError(f"--{name} must be >= {minimum}, got {getattr(FLAGS, name)}")
    if FLAGS.step is not None and FLAGS.step < 0:
        raise app.UsageError(f"--step must be >= 0, got {FLAGS.step}")
    checks = (("", lambda: SamplerSettings(n=FLAGS.n, max_new_tokens=FLAGS.max_new_tokens, temperature=FLAGS.temperature,
                                           top_k=FLAGS.top_k, top_p=FLAGS.top_p)),
              ("--ks", lambda: check_ks(_int_list(FLAGS.ks, "ks"), FLAGS.n) if FLAGS.ks else None),
              ("--options", lambda: parse_options_json(FLAGS.options) if FLAGS.dataset else None))
    for flag, check in checks:
        try:
            check()
        except ValueError as e:
            raise app.UsageError(f"{flag}: {e}" if flag else f"--{e}") from e   # e names the flag
    if any(e < 0 for e in _int_list(FLAGS.eos_id, "eos_id")):
        raise app.UsageError(f"--eos_id must be token ids >= 0, got {FLAGS.eos_id}")
    if FLAGS.mesh and len(_int_list(FLAGS.mesh.split(","), "mesh")) != 3:
        raise app.UsageError(f"--mesh must be three comma-separated sizes 'data,fsdp,tensor', got {FLAGS.mesh!r}")


def _training_run_config() -> dict[str, Any]:
    """The run config of the training run that wrote --checkpoint (an orbax checkpoint of
    `maxk_jax.rl.loop`), {} for a Hugging Face directory; checks the checkpoint and its model
    directory on the way (ValueError naming what is missing or corrupt)."""
    from maxk_jax.cli import preflight
    from maxk_jax.runtime.checkpoint import Checkpointer
    from maxk_jax.eval.checkpoint import is_hf_dir

    path = os.path.abspath(FLAGS.checkpoint)
    if not os.path.exists(path):
        raise ValueError(f"--checkpoint {path!r} does not exist")
    if not os.path.isdir(path):
        raise ValueError(f"--checkpoint {path!r} is not a directory")
    if is_hf_dir(path):
        preflight.check_model_dir(path, tokenizer=not FLAGS.tokenizer)
        return {}
    if os.path.isdir(os.path.join(path, "state")):   # a step directory
        step_dir = path
    else:
        with Checkpointer(path, read_only=True) as ckpt:
            steps = ckpt.all_steps()
        if not steps:
            raise ValueError(f"--checkpoint {path!r} is neither a Hugging Face model directory (no config.json) nor "
                             "an orbax checkpoint with a committed step")
        if FLAGS.step is not None and FLAGS.step not in steps:
            raise ValueError(f"--step={FLAGS.step} not found in {path!r}; available steps: {steps}")
        step_dir = os.path.join(path, str(steps[-1] if FLAGS.step is None else FLAGS.step))
    meta = preflight.check_orbax_step(step_dir)
    model_dir = FLAGS.model_dir or meta.get("model_dir")
    if model_dir:
        preflight.check_model_dir(model_dir, weights=False, tokenizer=not FLAGS.tokenizer)
    return json.loads(meta["config_json"]) if isinstance(meta.get("config_json"), str) else {}


def _prompt_settings(run_config: dict[str, Any]) -> dict[str, Any]:
    """Prompt format and render settings: the flags, else the training run's ``data.*``."""
    from maxk_jax.data.prompts import DEFAULT_SYSTEM_PROMPT

    data = run_config.get("data", {})
    fmt = data.get("prompt_format", "full") if FLAGS.prompt_format == "auto" else FLAGS.prompt_format
    chat = {"true": True, "false": False}.get(FLAGS.chat, data.get("chat"))
    system = FLAGS.system_prompt
    if system is None:
        trained = data.get("system_prompt", "default")
        system = DEFAULT_SYSTEM_PROMPT if trained == "default" else trained
    return {"prompt_format": fmt, "system_prompt": system, "chat": chat,
            "use_upstream_prompt": FLAGS.use_upstream_prompt}


def _check_context(problems: list, tokenizer: Any, model_config: Any, prompt: dict[str, Any]) -> None:
    """Every prompt plus --max_new_tokens fits the model's context (before anything is written)."""
    from maxk_jax.data.prompts import encode_problems

    render = {k: v for k, v in prompt.items() if k != "prompt_format"}
    ids, _ = encode_problems(problems, tokenizer, prompt["prompt_format"], render)
    longest = max(range(len(ids)), key=lambda i: len(ids[i]))
    context = model_config.max_position_embeddings
    if len(ids[longest]) >= context:
        raise ValueError(f"problem {problems[longest].id!r} has a {len(ids[longest])}-token prompt in the "
                         f"{prompt['prompt_format']!r} format (--prompt_format), no shorter than the model's context "
                         f"of {context} tokens (max_position_embeddings); use another prompt format or other problems")
    if len(ids[longest]) + FLAGS.max_new_tokens > context:
        raise ValueError(f"--max_new_tokens={FLAGS.max_new_tokens} does not fit: problem {problems[longest].id!r} has "
                         f"a {len(ids[longest])}-token prompt and the model's context is {context} tokens "
                         f"(max_position_embeddings); use --max_new_tokens <= {context - len(ids[longest])} "
                         "or fewer / shorter problems")


def _check_before_work() -> dict[str, Any]:
    """Every flag, file and directory check before work (one line per mistake, nothing written);
    returns the training run's config (``{}`` without one)."""
    from maxk_jax.cli import preflight

    with cli.user_errors():
        _check_flags()
        if FLAGS.problems:
            preflight.check_problem_file(FLAGS.problems, "--problems file")
        run_config = _training_run_config()
        preflight.check_writable_dir(FLAGS.out_dir, "--out_dir")
        preflight.check_executor(FLAGS.executor)
    return run_config


def _load_inputs(run_config: dict[str, Any]) -> dict[str, Any]:
    """Problems, ks, mesh, dtype, model, tokenizer and prompt settings; a bad file is named in one line."""
    import jax
    import jax.numpy as jnp

    from maxk_jax.eval.checkpoint import load_model, resolve_dtype
    from maxk_jax.eval.run import check_ks, default_ks
    from maxk_jax.models.tokenizer import load_tokenizer
    from maxk_jax.runtime import sharding

    with cli.user_errors():
        problems, dataset = _problems()
        ks = check_ks(_int_list(FLAGS.ks, "ks"), FLAGS.n) if FLAGS.ks else default_ks(FLAGS.n)
        mesh = sharding.make_mesh(*_int_list((FLAGS.mesh or "-1,1,1").split(","), "mesh"))
        dtype = resolve_dtype(FLAGS.dtype, jax.default_backend())
        model = load_model(FLAGS.checkpoint, step=FLAGS.step, model_dir=FLAGS.model_dir, tokenizer_dir=FLAGS.tokenizer,
                           dtype=getattr(jnp, dtype), mesh=mesh)
        tokenizer = load_tokenizer(model.tokenizer_dir)
        render_kwargs = _prompt_settings(run_config)
        _check_context(problems, tokenizer, model.config, render_kwargs)
    return {"problems": problems, "dataset": dataset, "ks": ks, "mesh": mesh, "dtype": dtype, "model": model,
            "tokenizer": tokenizer, "render_kwargs": render_kwargs}


def _make_sampler(inputs: dict[str, Any], run_config: dict[str, Any]) -> tuple[Any, list[int], Any, Any]:
    """The sampler over the loaded model (stop ids: --eos_id, else the training run's, else the
    model's); returns (sampler, eos ids, model without its params when they were copied, mesh)."""
    from maxk_jax.eval.checkpoint import generation_eos_ids
    from maxk_jax.sampling import Sampler, SamplerSettings, default_eos_ids
    from maxk_jax.sampling.rollout_copy import RolloutLayout

    model, tokenizer, mesh, render_kwargs = (inputs["model"], inputs["tokenizer"], inputs["mesh"],
                                             inputs["render_kwargs"])
    hf_dir = model.description.get("model_dir", model.description["checkpoint"])
    trained_eos = [int(e) for e in run_config.get("rollout", {}).get("eos_ids", [])]
    eos = (_int_list(FLAGS.eos_id, "eos_id") or trained_eos
           or default_eos_ids(model.config, tokenizer, generation_eos_ids(hf_dir)))
    params = model.params   # already on mesh
    if not FLAGS.mesh:      # decode layout: weights split over tensor, rows over the other devices
        layout = RolloutLayout.create(model.config, mesh)
        params, mesh = layout.copy(params), layout.mesh
        model = dataclasses.replace(model, params=None)
    settings = SamplerSettings(n=FLAGS.n, max_new_tokens=FLAGS.max_new_tokens, temperature=FLAGS.temperature,
                               top_k=FLAGS.top_k, top_p=FLAGS.top_p)
    sampler = Sampler.create(model.config, params, tokenizer, settings, mesh=mesh, eos_ids=eos,
                             prompt_format=render_kwargs["prompt_format"],
                             render_kwargs={k: v for k, v in render_kwargs.items() if k != "prompt_format"})
    return sampler, eos, model, mesh


def _run_record(inputs: dict[str, Any], model: Any, eos: list[int], run_name: str) -> dict[str, Any]:
    """The evaluation's settings as written to run_config.json (a resumed run must match them)."""
    problems = inputs["problems"]
    ids = "\n".join(p.id for p in problems).encode("utf-8")
    return {"run_name": run_name, "checkpoint": model.description, "dataset": inputs["dataset"],
            "num_problems": len(problems), "problem_ids_sha256": hashlib.sha256(ids).hexdigest(),
            "n": FLAGS.n, "ks": list(inputs["ks"]), "seed": FLAGS.seed, "max_new_tokens": FLAGS.max_new_tokens,
            "temperature": FLAGS.temperature, "top_p": FLAGS.top_p, "top_k": FLAGS.top_k,
            "eos_id": eos,
            "render_kwargs": inputs["render_kwargs"], "keep_completions": FLAGS.keep_completions,
            "dtype": inputs["dtype"], "batch_size": FLAGS.batch_size, "executor": FLAGS.executor,
            "sandbox_retries": FLAGS.sandbox_retries, "fail_on_excluded": FLAGS.fail_on_excluded}


def _report(result: Any, out_dir: str, jsonl: str, run_name: str) -> None:
    """Refuse a run the judge gave no verdict for, else write and print the report (process 0)."""
    from maxk_jax.eval import report as eval_report

    totals = result.totals()
    if totals["samples"] and not totals["valid_samples"]:   # no verdict at all: the judge, not the model
        raise cli.UserError(f"every one of the {totals['samples']} samples was excluded (statuses: "
                            f"{totals['status_counts']}): the judge {FLAGS.executor!r} gave no verdict; the "
                            f"per-problem records are in {jsonl}, no report was written")
    paths = eval_report.write_report(result, out_dir, name=run_name)
    with open(paths["table"], encoding="utf-8") as f:
        print(f.read())
    print(f"results: {out_dir}")


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    run_config = _check_before_work()
    import contextlib

    import jax

    from maxk_jax.eval import report as eval_report
    from maxk_jax.eval.run import EvalOptions, evaluate
    from maxk_jax.execution import make_executor
    from maxk_jax.runtime import multihost, sharding

    kwargs = ({"coordinator_address": FLAGS.coordinator_address, "num_processes": FLAGS.num_processes,
               "process_id": FLAGS.process_id} if FLAGS.coordinator_address else {})
    sharding.maybe_initialize_distributed(FLAGS.distributed, **kwargs)   # before jax sees its devices
    lead = jax.process_index() == 0
    inputs = _load_inputs(run_config)
    sampler, eos, model, mesh = _make_sampler(inputs, run_config)
    out_dir = os.path.abspath(FLAGS.out_dir)
    run_name = FLAGS.run_name or os.path.basename(out_dir)
    config = _run_record(inputs, model, eos, run_name)
    jsonl = os.path.join(out_dir, eval_report.PER_PROBLEM)
    # Multi-host: process 0 owns out_dir (reads the finished results, writes every file); the other
    # hosts get its finished results inside run_evaluation and write nothing.
    if lead:
        with cli.user_errors():   # a finished run with other settings in --out_dir: refused in one line
            done = _prepare_out_dir(out_dir, jsonl, config)
    else:
        done = []
    with make_executor(FLAGS.executor) as executor, \
            (eval_report.ResultLog(jsonl) if lead else contextlib.nullcontext()) as log:
        options = EvalOptions(ks=tuple(inputs["ks"]), batch_size=FLAGS.batch_size,
                              sandbox_retries=FLAGS.sandbox_retries, fail_on_excluded=FLAGS.fail_on_excluded,
                              keep_completions=FLAGS.keep_completions, progress=FLAGS.progress and lead,
                              host=multihost.batch_block(mesh))
        result = evaluate(sampler, inputs["problems"], executor=executor, key=jax.random.key(FLAGS.seed),
                          options=options, done=done, on_result=log.append if lead else None, run_config=config)
    if lead:
        _report(result, out_dir, jsonl, run_name)


def _prepare_out_dir(out_dir: str, jsonl: str, config: dict) -> list:
    """--overwrite / resume check, then run_config.json; returns the finished results to skip."""
    from maxk_jax.eval import report as eval_report

    os.makedirs(out_dir, exist_ok=True)
    config_path = os.path.join(out_dir, eval_report.RUN_CONFIG)
    if os.path.exists(config_path) and not (os.path.exists(jsonl) and os.path.getsize(jsonl)):
        os.remove(config_path)   # a run that finished no problem: nothing to resume or protect
    if FLAGS.overwrite:
        for name in (eval_report.PER_PROBLEM, eval_report.SUMMARY, eval_report.TABLE, eval_report.CURVES,
                     eval_report.RUN_CONFIG):
            if os.path.exists(os.path.join(out_dir, name)):
                os.remove(os.path.join(out_dir, name))
    resume = eval_report.check_resumable(out_dir, config, RESULT_KEYS)
    done = eval_report.read_results(jsonl, repair=True) if resume and os.path.exists(jsonl) else []
    print(f"{out_dir}: {len(done)} of {config['num_problems']} problems already done", flush=True)
    eval_report.atomic_write(os.path.join(out_dir, eval_report.RUN_CONFIG),
                             (json.dumps(config, indent=2, allow_nan=False) + "\n").encode("utf-8"))
    return done


if __name__ == "__main__":
    cli.run_main(main)
