"""7B RL train-step memory plan by simulation: AOT-compile ``train_step`` on 8 simulated devices.

    .venv/bin/python -m experiments.plan_train --layers=2          # quick check (2 decoder layers)
    .venv/bin/python -m experiments.plan_train                     # Qwen2.5-Coder-7B, 28 layers

Nothing is allocated: the TrainState (params + Adam moments + step) and the rollout Batch are
``jax.ShapeDtypeStruct``s carrying their ``NamedSharding`` (``training.abstract_train_state``);
``make_train_step(...).lower(state, batch).compile().memory_analysis()`` gives XLA's per-device
bytes of the REAL step (micro-batch scan, estimator, IS-weighted/clipped loss, KL to ref_logp,
entropy metric, grad accumulation in float32, global-norm clipping, Adam, donated state).
The reference-policy log-prob pass (``make_logprob_fn``, a no-grad forward with a second copy of
the weights) is planned too for the shipped layout.  Sampling (KV cache) is not part of this plan.

Shape of one RL step (paper: 8 samples, 256 new tokens, CodeContests prompts <= 512 tokens):
``--prompts`` x ``--n`` sequences of ``--prompt_len + --completion_len`` tokens, split into
``--micro_batches`` micro-batches.  Layouts are named as in experiments/plan_memory.py; ``fsdp8``
is what experiments/configs/base.py ships (mesh fsdp=-1). The planning itself is
:mod:`maxk_jax.planning.memory_plan`. Writes ``plan_train.{json,md,png}`` to ``--results_dir``.

``--target=<TPU slice>`` (``v5e-16``, ``v6e-8``, ``v4-8``, ``v5p-8``, ...; needs libtpu, see
docs/usage/tpu.md): the same programs compiled by XLA:TPU for the slice without a TPU
(:mod:`maxk_jax.planning.tpu_plan`), per chip against its HBM, with matmul FLOPs per step and the time floor
at the chip's bf16 peak; writes ``plan_train_<slice>.{json,md}``::

    PYTHONPATH=$LIBTPU_DIR .venv/bin/python -m experiments.plan_train --target=v6e-8
"""
from __future__ import annotations

import tempfile  # isort: skip

# XLA reads its flags when JAX starts, so before importing JAX: the simulated CPU devices, and where
# XLA writes each planned module's buffer assignment (read by ``memory_plan.temp_breakdown``)
import sys  # isort: skip

from maxk_jax.planning.simulated_devices import devices_flag, request_cpu_devices  # isort: skip  (stdlib only)
from maxk_jax.planning.targets import tpu as tpu_targets  # isort: skip  (stdlib only)

NUM_DEVICES = devices_flag(sys.argv[1:])   # --devices sizes the simulated CPU platform: before JAX starts
_TPU = any(a.startswith("--target=") and tpu_targets.is_tpu_target(a.split("=", 1)[1]) for a in sys.argv[1:])
_DUMP_DIR = tempfile.mkdtemp(prefix="plan_train_xla_")
if _TPU:   # the TPU compiler without a TPU: libtpu's environment, no CPU buffer-assignment dumps
    tpu_targets.setup_environment()
    request_cpu_devices(NUM_DEVICES)
else:
    request_cpu_devices(NUM_DEVICES, f"--xla_dump_to={_DUMP_DIR} --xla_dump_hlo_module_re=^jit_(step|fn)$")

import json  # noqa: E402
import pathlib  # noqa: E402
import shutil  # noqa: E402

from absl import app, flags  # noqa: E402
from tqdm import tqdm  # noqa: E402

from maxk_jax import cli  # noqa: E402
from maxk_jax.planning import memory_plan, plan_flags, plan_report  # noqa: E402
from maxk_jax.models import qwen2  # noqa: E402
from maxk_jax.rl import training  # noqa: E402

FLAGS = flags.FLAGS
plan_flags.define_flags(param_dtype="float32", results_dir="runs/plan_train")
flags.DEFINE_integer("prompts", 16, "Prompts per RL step (experiments/configs/base.py).")
flags.DEFINE_integer("n", 8, "Samples per prompt (paper: 8).")
flags.DEFINE_integer("prompt_len", 512, "Prompt bucket length in tokens (CodeContests filter: 512).")
flags.DEFINE_integer("completion_len", 256, "Completion tokens (paper: 256 new tokens).")
flags.DEFINE_integer("micro_batches", 16, "Gradient-accumulation micro-batches per step.")
flags.DEFINE_string("estimator", "maxk_offpolicy", "Estimator of the planned step.")
flags.DEFINE_integer("k", 4, "Training k of the estimator.")
flags.DEFINE_float("kl_beta", 0.01, "KL coefficient (> 0 adds ref_logp to the batch).")
flags.DEFINE_bool("plan_ref", True, "Also plan the reference log-prob pass for the first layout.")
flags.DEFINE_integer("breakdown", 12, "Largest temp buffers listed per planned module.")
flags.DEFINE_integer("devices", 8, "Simulated devices (chips) of the planned slice; layouts must use all of them.")
flags.DEFINE_enum("mu_dtype", "float32", ["float32", "bfloat16"], "Adam first-moment dtype (optax mu_dtype).")
flags.DEFINE_enum("ref_dtype", "float32", ["float32", "bfloat16"], "Storage dtype of the KL reference weights.")
flags.DEFINE_bool("plan_sampler", True, "Also plan the rollout phase (rollout copy, KV cache, decode loop) and "
                  "print the whole RL step's peak per device.")
flags.DEFINE_list("chip_gib", ["74.5:H100 80GB", "32:TPU v4 (32 GiB)", "16:TPU v5e (16 GiB)"],
                  "GiB:name of chips to check the step's peak against (85 %% of each).")
flags.DEFINE_enum("target", "cpu", ["cpu", "h100", *tpu_targets.SLICES],
                  "cpu: the layouts on simulated CPU devices; h100: the train step alone on one deviceless H100 "
                  "(XLA:GPU's buffer assignment; needs the CUDA plugin, see docs/accelerators.md; --layouts, "
                  "--plan_ref and --plan_sampler do not apply); a TPU slice (v5e-16, v6e-8, v4-8, v5p-8, ...): "
                  "the layouts (default fsdp<chips>) compiled by XLA:TPU for the slice's chips without a TPU "
                  "(needs libtpu, see docs/accelerators.md), per-chip bytes against the chip's HBM, matmul FLOPs "
                  "and the time floor at its bf16 peak (--devices and --chip_gib do not apply).")


def step_phases(config: qwen2.Qwen2Config, rows: list[dict], devices: list | None = None
                ) -> tuple[dict[str, int], dict]:
    """({phase: bytes per device}, the rollout decode's plan row) of the whole RL step for the
    first layout (the one whose reference pass is planned): the train state and the KL reference
    weights live throughout; the rollout phase adds the rollout copy, KV cache and decode temps
    (freed before the update); the reference pass and the update add their own args and temps.
    ``devices``: those of the planned mesh (default JAX's simulated CPU devices)."""
    from maxk_jax.planning import sample_plan

    train = rows[0]
    ref = next((r for r in rows if r["layout"].endswith("ref-logp pass")), None)
    cfg = config.replace(dtype=FLAGS.dtype)
    sample = sample_plan.plan_decode(cfg, train["layout"], "rollout", prompts=FLAGS.prompts, n=FLAGS.n,
                                     prompt_len=FLAGS.prompt_len, new_tokens=FLAGS.completion_len, devices=devices)
    state = train["state_analytic"]
    ref_w = ref["state_analytic"] if ref else 0
    decode_temps = sample["temps"] - sample["cpu_weight_upcast"]
    phases = {
        "rollout (state + reference + rollout copy + KV + decode temps)":
            state + ref_w + sample["weights"] + sample["kv_cache"] + decode_temps,
        "reference pass (state + its args + temps)":
            state + (ref["args"] + ref["temps"] - ref["cpu_weight_upcast"] if ref else 0),
        "update (reference + train step args + temps)": ref_w + train["args"] + train["temps"] - train["alias"]
        + train["outputs"],
    }
    return phases, sample


def step_peak_markdown(config: qwen2.Qwen2Config, rows: list[dict]) -> str:
    """The whole RL step per device, phase by phase (:func:`step_phases`), peak against each --chip_gib."""
    phases, sample = step_phases(config, rows)
    train = rows[0]
    peak = max(phases.values())
    out = (f"\n**Whole RL step per device, {train['layout']}** (Adam mu {FLAGS.mu_dtype}, reference weights "
           f"{FLAGS.ref_dtype}, remat {FLAGS.remat}; rollout copy {sample['decode_mesh']}, decode and reference-pass "
           "temps without XLA:CPU's float32 copies of bf16 weights, which GPU / TPU compilers do not make; the "
           "update's temps as compiled, a conservative figure when the params are bf16):\n\n| phase | GiB per device |\n|---|---:|\n")
    out += "".join(f"| {name} | {v / GIB:.2f} |\n" for name, v in phases.items())
    out += f"| **peak** | **{peak / GIB:.2f}** |\n\n" + chips_markdown(peak)
    return out


def chips_markdown(peak: float) -> str:
    """Markdown table: does ``peak`` bytes per device fit 85 % of each --chip_gib chip's memory."""
    out = "| chip | 85 % of memory GiB | fits |\n|---|---:|---|\n"
    for spec in FLAGS.chip_gib:
        gib, name = spec.split(":", 1)
        budget = 0.85 * float(gib)
        out += f"| {name} | {budget:.1f} | {'yes' if peak / GIB <= budget else 'no'} |\n"
    return out


GIB = 1024 ** 3


def gpu_target(config: qwen2.Qwen2Config, cfg: training.StepConfig) -> None:
    """--target=h100: the train step on one deviceless GPU, its per-device bytes against --chip_gib."""
    from maxk_jax.planning import gpu_plan

    b = FLAGS.prompts * FLAGS.n
    with cli.user_errors():
        cfg.check_batch(b, 1)
        if not gpu_plan.plugin_available():
            raise ValueError(gpu_plan.PLUGIN_HINT)
    row = gpu_plan.gpu_train_memory(config, cfg, b, FLAGS.prompt_len, FLAGS.completion_len, FLAGS.target,
                                    mu_dtype=FLAGS.mu_dtype)
    table = (f"{FLAGS.preset} ({config.num_layers} layers): RL train_step ({FLAGS.estimator}, k={FLAGS.k}) on {b} "
             f"sequences of {FLAGS.prompt_len}+{FLAGS.completion_len} tokens, {FLAGS.micro_batches} micro-batches; "
             f"params {FLAGS.param_dtype}, compute {FLAGS.dtype}, remat {FLAGS.remat} (policy {config.remat_policy}), "
             f"attention {config.attention}, Adam (mu {FLAGS.mu_dtype}); one deviceless {row['target_source']}; "
             "compiled.memory_analysis(), state donated\n\n"
             "| args GiB | outputs GiB | temps GiB | alias GiB | total GiB | compile s |\n"
             "|---:|---:|---:|---:|---:|---:|\n"
             f"| {row['args'] / GIB:.2f} | {row['outputs'] / GIB:.2f} | {row['temps'] / GIB:.2f} | "
             f"{row['alias'] / GIB:.2f} | **{row['total'] / GIB:.2f}** | {row['compile_s']} |\n\n"
             + chips_markdown(row["total"]))
    out = pathlib.Path(FLAGS.results_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"plan_train_{FLAGS.target}.md").write_text(table)
    (out / f"plan_train_{FLAGS.target}.json").write_text(json.dumps(
        {"config": config.to_hf_dict(), "step_config": repr(cfg), "row": row}, indent=2))
    print(table)
    print(f"wrote {out}/plan_train_{FLAGS.target}.{{md,json}}")
    shutil.rmtree(_DUMP_DIR, ignore_errors=True)


def tpu_target(config: qwen2.Qwen2Config, cfg: training.StepConfig) -> None:
    """--target=<TPU slice>: every layout's train step (and the first's reference pass and rollout
    decode) compiled by XLA:TPU for the slice, per chip against its HBM (85 % rule), matmul FLOPs per
    step (loops counted) and the time floor at the chip's bf16 peak. A program over HBM is a result
    (the compiler's RESOURCE_EXHAUSTED), not an error."""
    from maxk_jax.planning import tpu_plan

    b = FLAGS.prompts * FLAGS.n
    with cli.user_errors():
        slice_ = tpu_targets.get_slice(FLAGS.target)
        layouts = FLAGS.layouts if FLAGS["layouts"].present else [f"fsdp{slice_.chips}"]
        for layout in layouts:   # validate every layout before the first (slow) compile
            sizes = memory_plan.layout_sizes(layout, slice_.chips)
            cfg.check_batch(b, sizes["data"] * sizes["fsdp"])
        devices = tpu_targets.devices(slice_)
    plan = tpu_plan.plan_train(config, cfg, slice_, devices, layouts, sequences=b, prompt_len=FLAGS.prompt_len,
                               completion_len=FLAGS.completion_len, mu_dtype=FLAGS.mu_dtype,
                               ref_dtype=FLAGS.ref_dtype, plan_ref=FLAGS.plan_ref,
                               phases=(lambda rows: step_phases(config, rows, tpu_plan.layout_devices(
                                   devices, rows[0]["layout"]))) if FLAGS.plan_sampler else None)
    header = (f"{FLAGS.preset} ({config.num_layers} layers): RL train_step ({FLAGS.estimator}, k={FLAGS.k}, KL beta "
              f"{FLAGS.kl_beta}) on {b} sequences of {FLAGS.prompt_len}+{FLAGS.completion_len} tokens, "
              f"{FLAGS.micro_batches} micro-batches; params {FLAGS.param_dtype}, compute {FLAGS.dtype}, remat "
              f"{FLAGS.remat}, Adam (mu {FLAGS.mu_dtype}), reference weights {FLAGS.ref_dtype}; compiled by XLA:TPU "
              f"for {slice_.name} ({slice_.chips} x {slice_.chip.kind}, {slice_.chip.hbm_gib:g} GiB HBM each) without "
              "a TPU; per-chip bytes from compiled.memory_analysis() (state donated)")
    table = tpu_plan.train_markdown(plan, header)
    out = pathlib.Path(FLAGS.results_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"plan_train_{FLAGS.target}.md").write_text(table)
    (out / f"plan_train_{FLAGS.target}.json").write_text(json.dumps(
        {"header": header, "config": config.to_hf_dict(), "step_config": repr(cfg), **plan}, indent=2, default=str))
    print(table)
    print(f"wrote {out}/plan_train_{FLAGS.target}.{{md,json}}")
    shutil.rmtree(_DUMP_DIR, ignore_errors=True)


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments {argv[1:]}")
    if FLAGS.devices != NUM_DEVICES:
        raise app.UsageError(f"--devices={FLAGS.devices} must be given as --devices=N (got {NUM_DEVICES} devices)")
    from maxk_jax.rl.losses import LossConfig
    from maxk_jax.sampling import SamplerSettings

    if _TPU:   # the layouts are checked against the slice's chips (tpu_target)
        with cli.user_errors():
            config = memory_plan.planned_config(FLAGS.preset, layers=FLAGS.layers, dtype=FLAGS.dtype,
                                                param_dtype=FLAGS.param_dtype, remat=FLAGS.remat,
                                                attention=FLAGS.attention, attention_chunk=FLAGS.attention_chunk,
                                                remat_policy=FLAGS.remat_policy)
    else:
        config = plan_flags.config_from_flags(NUM_DEVICES)

    cfg = training.StepConfig(estimator=FLAGS.estimator, k=FLAGS.k,
                              sampler=SamplerSettings(n=FLAGS.n, max_new_tokens=FLAGS.completion_len),
                              loss=LossConfig(kind=training.loss_kind(FLAGS.estimator), kl_beta=FLAGS.kl_beta),
                              micro_batches=FLAGS.micro_batches)
    if _TPU:
        tpu_target(config, cfg)
        return
    if FLAGS.target != "cpu":
        gpu_target(config, cfg)
        return
    with cli.user_errors():
        for layout in FLAGS.layouts:   # validate every layout before the first (slow) compile
            sizes = memory_plan.layout_sizes(layout, NUM_DEVICES)
            cfg.check_batch(FLAGS.prompts * FLAGS.n, sizes["data"] * sizes["fsdp"])
    b, m = FLAGS.prompts * FLAGS.n, FLAGS.micro_batches
    rows = []
    for i, layout in enumerate(tqdm(FLAGS.layouts, desc="layouts")):
        rows += memory_plan.plan_train_step(
            config, cfg, layout, sequences=b, prompt_len=FLAGS.prompt_len,
            completion_len=FLAGS.completion_len, dump_dir=_DUMP_DIR, breakdown=FLAGS.breakdown,
            ref=FLAGS.plan_ref and i == 0, mu_dtype=FLAGS.mu_dtype, ref_dtype=FLAGS.ref_dtype)
    for r in rows:
        r.pop("hlo", None)   # the optimized HLO texts: not part of the written plan
    header = (f"{FLAGS.preset} ({config.num_layers} layers, {qwen2.param_count(config):,} params): RL "
              f"train_step ({FLAGS.estimator}, k={FLAGS.k}, {cfg.kind} loss, KL beta {FLAGS.kl_beta}) on "
              f"{FLAGS.prompts} prompts x n={FLAGS.n} = {b} sequences of {FLAGS.prompt_len}+"
              f"{FLAGS.completion_len} tokens, {m} micro-batches of {b // m}; params {FLAGS.param_dtype}, "
              f"compute {FLAGS.dtype}, remat {FLAGS.remat}, Adam (mu {FLAGS.mu_dtype}), reference weights "
              f"{FLAGS.ref_dtype}; {NUM_DEVICES} simulated CPU devices; "
              "per-device bytes from compiled.memory_analysis() (state donated: outputs alias args)")
    table = plan_report.to_markdown(rows, header) + plan_report.state_markdown(rows)
    table += plan_report.breakdown_markdown(rows, config.vocab_size,
                                            (FLAGS.completion_len, FLAGS.prompt_len + FLAGS.completion_len))
    if FLAGS.plan_sampler:
        table += step_peak_markdown(config, rows)
    out = pathlib.Path(FLAGS.results_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "plan_train.md").write_text(table)
    (out / "plan_train.json").write_text(json.dumps(
        {"header": header, "config": config.to_hf_dict(), "step_config": repr(cfg), "rows": rows}, indent=2))
    plan_report.plot(rows, f"{FLAGS.preset} ({config.num_layers} layers): RL train_step, {b} x "
                     f"{FLAGS.prompt_len + FLAGS.completion_len}, {m} micro-batches", out / "plan_train.png")
    print(table)
    print(f"wrote {out}/plan_train.{{md,json,png}}")
    shutil.rmtree(_DUMP_DIR, ignore_errors=True)


if __name__ == "__main__":
    cli.run_main(main)
