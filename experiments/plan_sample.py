"""Sampling plan by simulation: AOT-compile the sampler's decode loop on 8 (``--devices``) simulated devices.

    .venv/bin/python -m experiments.plan_sample                   # 1.5B and 7B, three meshes
    .venv/bin/python -m experiments.plan_sample --presets=qwen2.5-coder-7b --layouts=fsdp8

The sampling twin of experiments/plan_train.py (the planning is :mod:`maxk_jax.planning.sample_plan`):
nothing is allocated, the weights, the shared-prefix KV cache and the loop inputs are sharded
``jax.ShapeDtypeStruct``s. For every preset and mesh it compiles the decode loop twice: from the
trainer's weights as they are (``training``: float32, ``embed`` over fsdp -- how the sampler
decoded before the rollout copy) and from the rollout copy (``rollout``:
:mod:`maxk_jax.sampling.rollout_copy`, compute dtype, replicated over data, tensor-parallel on
the rollout mesh), and prints, per mesh, the line

    decode-loop collective bytes per token: <bytes> (<percent> of the bf16 weight bytes)

(bytes per device of every collective in the compiled loop body, times how often it runs per
token), the per-device bytes of weights, KV cache and temporaries, the largest collectives, the
KV cache of the shared-prefix example (``--kv_example``) and a memory-bandwidth roofline of one
decode step. Writes ``plan_sample.{json,md}`` to ``--results_dir``.

``--target=h100``: instead, compile the decode loop for one NVIDIA H100 without a GPU (needs the
CUDA plugin, the ``cuda`` extra's libraries; :mod:`maxk_jax.planning.gpu_plan`) and print, per preset, what one
decode step launches and moves in the optimized GPU HLO: slice/copy bytes materialised (and their
percentage of the bf16 weight bytes), kernels, the estimated bytes moved next to the ideal bytes,
and the compile time; writes ``plan_sample_h100.{json,md}``::

    JAX_SKIP_CUDA_CONSTRAINTS_CHECK=1 python -m experiments.plan_sample --target=h100 \
        --presets=qwen2.5-coder-1.5b

``--target=<TPU slice>`` (``v5e-1``, ``v6e-1``, ``v5e-4``, ...; needs libtpu, docs/usage/tpu.md): the
decode loop from the rollout copy compiled by XLA:TPU for the slice, per chip against its HBM, and
one decode step's HBM bytes against the ideal (:mod:`maxk_jax.planning.tpu_plan`); writes
``plan_sample_<slice>.{json,md}``::

    PYTHONPATH=$LIBTPU_DIR python -m experiments.plan_sample --target=v6e-1 --presets=qwen2.5-coder-7b
"""
from __future__ import annotations


import sys  # isort: skip

from maxk_jax.planning.simulated_devices import devices_flag, request_cpu_devices  # isort: skip  (stdlib only)

from maxk_jax.planning.targets import tpu as tpu_targets  # isort: skip  (stdlib only)

NUM_DEVICES = devices_flag(sys.argv[1:])   # --devices sizes the simulated CPU platform: before JAX starts
request_cpu_devices(NUM_DEVICES)
_TPU = any(a.startswith("--target=") and tpu_targets.is_tpu_target(a.split("=", 1)[1]) for a in sys.argv[1:])
if _TPU:   # the TPU compiler without a TPU
    tpu_targets.setup_environment()
elif any(a.startswith("--target=") and a != "--target=cpu" for a in sys.argv[1:]):
    import os  # isort: skip
    os.environ.setdefault("JAX_SKIP_CUDA_CONSTRAINTS_CHECK", "1")   # a deviceless GPU: no driver to check

import json  # noqa: E402
import pathlib  # noqa: E402

from absl import app, flags  # noqa: E402
from tqdm import tqdm  # noqa: E402

from maxk_jax import cli  # noqa: E402
from maxk_jax.planning import memory_plan, sample_plan  # noqa: E402
from maxk_jax.models import qwen2  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_list("presets", ["qwen2.5-coder-1.5b", "qwen2.5-coder-7b"], f"Model presets, of {sorted(qwen2.PRESETS)}.")
flags.DEFINE_integer("devices", 8, "Simulated devices (chips) of the planned mesh, e.g. a rollout sub-mesh of "
                     "a slice; layouts must use all of them.")
flags.DEFINE_list("layouts", ["fsdp8", "fsdp4_tensor2", "data2_tensor4"],
                  "Training meshes to plan (sizes multiply to --devices), e.g. fsdp4_tensor2.")
flags.DEFINE_list("params_layouts", ["training", "rollout"],
                  "Weights to decode from: 'training' (the trainer's, as before the rollout copy), 'rollout'.")
flags.DEFINE_enum("dtype", "bfloat16", ["bfloat16", "float32"], "Compute dtype (the rollout copy's dtype).")
flags.DEFINE_integer("prompts", 16, "Prompts per rollout (experiments/configs/base.py: 16).")
flags.DEFINE_integer("n", 8, "Samples per prompt (paper: 8).")
flags.DEFINE_integer("prompt_len", 512, "Prompt length in tokens (bucketed as the sampler does).")
flags.DEFINE_integer("new_tokens", 256, "New tokens per sample (paper: 256).")
flags.DEFINE_list("kv_example", ["1", "128", "1024", "256"],
                  "prompts,n,prompt_len,new_tokens of the KV-cache example printed for the 7B preset.")
flags.DEFINE_integer("top", 5, "Largest collectives listed per plan.")
flags.DEFINE_string("results_dir", "runs/plan_sample", "Directory for plan_sample.{json,md}.")
flags.DEFINE_enum("target", "cpu", ["cpu", "h100", *tpu_targets.SLICES],
                  "cpu: plan on --devices simulated CPU devices; h100: compile for one H100 without a GPU (CUDA "
                  "plugin needed) and report the decode step's copies, kernels and bytes (--layouts, "
                  "--params_layouts, --devices and --kv_example unused); a TPU slice (v5e-1, v6e-1, v5e-4, ...): "
                  "the decode loop from the rollout copy compiled by XLA:TPU for the slice without a TPU (libtpu "
                  "needed), per chip against its HBM, and its HBM bytes per decode step against the ideal "
                  "(--layouts default fsdp<chips>; --params_layouts, --devices and --kv_example unused).")
flags.DEFINE_list("xla_options", [],
                  "--target=h100: XLA options of the compile as name=value pairs (e.g. "
                  "xla_gpu_experimental_force_split_k=1: GEMMs without split-K partial sums), what XLA_FLAGS would "
                  "set on a GPU; the defaults when empty.")
flags.DEFINE_list("cases", [],
                  "--target=h100: decode cases PROMPTSxN:PROMPT_LEN/NEW_TOKENS to compile (default: the --prompts x --n "
                  "case, then the RL batch sizes of maxk_jax.benchmarks.decode.RL_CASES, 16x32 and 4x256 rows).")
flags.DEFINE_list("decode_attention", ["xla", "pallas"],
                  "--target=h100: decode attentions to compile (Qwen2Config.decode_attention): xla (XLA fusions) "
                  "and/or pallas (the Pallas Triton kernels of maxk_jax.models.decode_attention).")

GIB = 1024 ** 3


def _check_flags() -> None:
    if FLAGS.devices != NUM_DEVICES:
        raise ValueError(f"--devices={FLAGS.devices} must be given as --devices=N (got {NUM_DEVICES} devices)")
    memory_plan.check_device_count(NUM_DEVICES)
    for preset in FLAGS.presets:
        if preset not in qwen2.PRESETS:
            raise ValueError(f"--presets: unknown preset {preset!r}; available: {sorted(qwen2.PRESETS)}")
    for layout in FLAGS.layouts:
        memory_plan.layout_sizes(layout, NUM_DEVICES)
    for p in FLAGS.params_layouts:
        if p not in ("training", "rollout"):
            raise ValueError(f"--params_layouts: {p!r} is not 'training' or 'rollout'")
    for attention in FLAGS.decode_attention:
        if attention not in qwen2.DECODE_ATTENTION:
            raise ValueError(f"--decode_attention: {attention!r} is not one of {qwen2.DECODE_ATTENTION}")
    _xla_options()
    _cases()
    for name in ("prompts", "n", "prompt_len", "new_tokens"):
        if getattr(FLAGS, name) < 1:
            raise ValueError(f"--{name} must be >= 1, got {getattr(FLAGS, name)}")
    if len(FLAGS.kv_example) != 4 or not all(v.isdigit() and int(v) > 0 for v in FLAGS.kv_example):
        raise ValueError(f"--kv_example must be four positive ints prompts,n,prompt_len,new_tokens, "
                         f"got {FLAGS.kv_example}")


def _xla_options() -> dict[str, str]:
    """--xla_options as {name: value}; ValueError naming a pair without '=' or a name not starting with xla_."""
    out = {}
    for pair in FLAGS.xla_options:
        name, sep, value = pair.partition("=")
        if not sep or not name.startswith("xla_") or not value:
            raise ValueError(f"--xla_options: {pair!r} is not name=value with an xla_ option name")
        out[name] = value
    return out


def _cases() -> list[tuple[int, int, int, int]]:
    """--cases as (prompts, n, prompt_len, new_tokens); default the flags' case, then the RL batch sizes."""
    from maxk_jax.benchmarks.decode import cases_or_default
    return cases_or_default(FLAGS.cases, (FLAGS.prompts, FLAGS.n, FLAGS.prompt_len, FLAGS.new_tokens))


def _bound_line(config: qwen2.Qwen2Config, case: tuple[int, int, int, int]) -> str:
    """The analytic floors of one decode step of ``case`` (``maxk_jax.planning.step_roofline``) at the H200's measured
    ceilings."""
    from maxk_jax.planning import step_roofline
    d = step_roofline.decode_step(config, *case, **step_roofline.H200_MEASURED)
    return (f"  floors at {step_roofline.H200_TEXT}: weights {1e3 * d['weights_s']:.3f} ms, KV {1e3 * d['kv_s']:.3f} ms, "
            f"matmul {1e3 * d['matmul_s']:.3f} ms, attention {1e3 * d['attention_s']:.3f} ms per step: "
            f"{d['bound']}-bound, roofline {1e3 * d['roofline_s']:.3f} ms")


def _row_markdown(preset: str, r: dict) -> str:
    return (f"| {preset} | {r['mesh']} | {r['params_layout']} | {r['decode_mesh']} | "
            f"{r['weights'] / GIB:.2f} | {r['kv_cache'] / GIB:.3f} | {r['temps'] / GIB:.2f} | "
            f"{(r['temps'] - r['cpu_weight_upcast']) / GIB:.2f} | {r['collective_bytes_per_token']:,} | "
            f"{100 * r['collective_bytes_per_token'] / r['weight_bytes_bf16']:.3f} |")


def _roofline_markdown(rows: list[dict]) -> list[str]:
    """Before (training weights, the n-fold power-of-two KV cache) vs after (rollout copy, shared
    prefix) per preset and mesh: bytes read per decode step per device and the tokens/s bound."""
    chips = list(sample_plan.BANDWIDTH)
    out = ["", f"Roofline of one decode step ({FLAGS.prompts * FLAGS.n} rows): bytes read per device = weights + "
           "KV cache + collective results; tokens/s <= rows x bandwidth / bytes read (interconnect time "
           "not included).", "",
           "| preset | mesh | before GiB/step | after GiB/step | " + " | ".join(
               f"before tok/s {c} | after tok/s {c}" for c in chips) + " |",
           "|---|---|---:|---:|" + "---:|---:|" * len(chips)]
    by_key = {(r["preset"], r["mesh"], r["params_layout"]): r for r in rows}
    for (preset, mesh, layout), before in by_key.items():
        after = by_key.get((preset, mesh, "rollout"))
        if layout != "training" or after is None:
            continue
        sizes = memory_plan.parse_layout(mesh)
        config = qwen2.preset(preset, dtype=FLAGS.dtype)
        old_kv = sample_plan.repeated_kv_bytes(config, FLAGS.prompts, FLAGS.n, FLAGS.prompt_len,
                                               FLAGS.new_tokens) // (sizes["data"] * sizes["fsdp"])
        b, a = sample_plan.roofline(before, kv_cache=old_kv), sample_plan.roofline(after)
        out.append(f"| {preset} | {mesh} | {b['bytes_read'] / GIB:.2f} | {a['bytes_read'] / GIB:.2f} | "
                   + " | ".join(f"{b[c]:,.0f} | {a[c]:,.0f}" for c in chips) + " |")
    return out


def _gpu_main() -> None:
    """--target=h100: the deviceless GPU compile of the decode loop per preset."""
    from maxk_jax.planning import gpu_plan
    from maxk_jax.sampling import SamplerSettings
    reports, lines = [], []
    options = _xla_options()
    jobs = [(preset, case, attention) for preset in FLAGS.presets for case in _cases()
            for attention in FLAGS.decode_attention]
    for preset, (prompts, n, prompt_len, new_tokens), attention in tqdm(jobs, desc="deviceless compiles"):
        settings = SamplerSettings(n=n, max_new_tokens=new_tokens)
        config = qwen2.preset(preset, dtype=FLAGS.dtype, decode_attention=attention)
        r = gpu_plan.gpu_decode_report(config, settings, prompts, prompt_len, FLAGS.target,
                                       compiler_options=options)
        reports.append({"preset": preset, **{k: v for k, v in r.items() if k != "traffic"},
                        "traffic": r["traffic"][:20]})
        lines += [f"{preset}, decode_attention={attention}: {prompts} prompts x n={n}, "
                  f"{prompt_len}-token prompts, {new_tokens} new tokens, {FLAGS.dtype}",
                  *gpu_plan.report_lines(r, FLAGS.top), _bound_line(config, (prompts, n, prompt_len, new_tokens)), ""]
    out = pathlib.Path(FLAGS.results_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"plan_sample_{FLAGS.target}.md").write_text("\n".join(lines) + "\n")
    (out / f"plan_sample_{FLAGS.target}.json").write_text(json.dumps(reports, indent=1))
    print("\n".join(lines))
    print(f"wrote {out}/plan_sample_{FLAGS.target}.{{md,json}}")


def _tpu_main() -> None:
    """--target=<TPU slice>: the decode loop per preset and layout, compiled by XLA:TPU for the slice."""
    from maxk_jax.planning import tpu_plan

    with cli.user_errors():
        slice_ = tpu_targets.get_slice(FLAGS.target)
        layouts = FLAGS.layouts if FLAGS["layouts"].present else [f"fsdp{slice_.chips}"]
        for layout in layouts:
            memory_plan.layout_sizes(layout, slice_.chips)
        devices = tpu_targets.devices(slice_)
    rows = []
    for preset, layout in tqdm([(p, lay) for p in FLAGS.presets for lay in layouts], desc="plans"):
        config = qwen2.preset(preset, dtype=FLAGS.dtype, param_dtype="float32")
        r = tpu_plan.decode_row(config, slice_, devices, layout, prompts=FLAGS.prompts, n=FLAGS.n,
                                prompt_len=FLAGS.prompt_len, new_tokens=FLAGS.new_tokens)
        rows.append({"preset": preset, **r})
    header = (f"Decode loop from the rollout copy, {FLAGS.prompts} prompts x n={FLAGS.n} rows, {FLAGS.prompt_len}-token "
              f"prompts, {FLAGS.new_tokens} new tokens, compute {FLAGS.dtype}; compiled by XLA:TPU for {slice_.name} "
              f"({slice_.chips} x {slice_.chip.kind}) without a TPU; per chip. HBM bytes / step: one decode step's "
              "reads + writes of HBM in the optimized TPU HLO (VMEM-resident operands cost none); ideal: the chip's "
              "weights + its share of the KV cache a step must read (own slots half full on average).")
    report = tpu_plan.decode_markdown(rows, slice_, header)
    out = pathlib.Path(FLAGS.results_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"plan_sample_{FLAGS.target}.md").write_text(report)
    (out / f"plan_sample_{FLAGS.target}.json").write_text(json.dumps(rows, indent=1, default=str))
    print(report)
    print(f"wrote {out}/plan_sample_{FLAGS.target}.{{md,json}}")


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments {argv[1:]}")
    if _TPU:
        _tpu_main()
        return
    with cli.user_errors():
        _check_flags()
    if FLAGS.target != "cpu":
        from maxk_jax.planning import gpu_plan
        if not gpu_plan.plugin_available():
            raise cli.UserError(f"--target={FLAGS.target}: {gpu_plan.PLUGIN_HINT}")
        _gpu_main()
        return
    rows, lines = [], []
    table = [f"Decode loop, {FLAGS.prompts} prompts x n={FLAGS.n} = {FLAGS.prompts * FLAGS.n} rows, "
             f"{FLAGS.prompt_len}-token prompts, {FLAGS.new_tokens} new tokens, compute {FLAGS.dtype}; "
             f"{NUM_DEVICES} simulated CPU devices, per-device bytes from the compiled loop.", "",
             f"| preset | mesh | weights | decode mesh | weights GiB | KV GiB | temps GiB (XLA:CPU) | "
             f"temps GiB w/o CPU bf16->f32 weight copies | collective B/token | % of bf16 weights |",
             "|---|---|---|---|---:|---:|---:|---:|---:|---:|"]
    jobs = [(p, lay, pl) for p in FLAGS.presets for lay in FLAGS.layouts for pl in FLAGS.params_layouts]
    for preset, layout, params_layout in tqdm(jobs, desc="plans"):
        config = qwen2.preset(preset, dtype=FLAGS.dtype, param_dtype="float32")
        r = sample_plan.plan_decode(config, layout, params_layout, prompts=FLAGS.prompts, n=FLAGS.n,
                                    prompt_len=FLAGS.prompt_len, new_tokens=FLAGS.new_tokens)
        r["preset"] = preset
        rows.append(r)
        lines.append(f"{preset} {sample_plan.collective_line(r)}")
        lines += [f"    {op} {shape} {b:,} B x {times}" for op, shape, b, times in
                  sample_plan.summarize_collectives(r)[:FLAGS.top]]
        table.append(_row_markdown(preset, r))
    p, n, tp, t = (int(v) for v in FLAGS.kv_example)
    kv = "qwen2.5-coder-7b"
    config = qwen2.preset(kv, dtype=FLAGS.dtype)
    shared = sample_plan.kv_cache_bytes(config, p, n, tp, t)
    repeated = sample_plan.repeated_kv_bytes(config, p, n, tp, t)
    kv_line = (f"{kv} KV cache, {p} prompt(s) of {tp} tokens x n={n}, {t} new tokens, {FLAGS.dtype}: "
               f"{shared / GIB:.3f} GiB shared-prefix (before: {repeated / GIB:.3f} GiB, the prompt copied n "
               f"times at a power-of-two bucket)")
    report = "\n".join(lines + ["", kv_line, ""] + table + _roofline_markdown(rows)) + "\n"
    out = pathlib.Path(FLAGS.results_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "plan_sample.md").write_text(report)
    (out / "plan_sample.json").write_text(json.dumps({"rows": rows, "kv_example": {
        "shared": shared, "repeated": repeated, "shape": [p, n, tp, t]}}, indent=1))
    print(report)
    print(f"wrote {out}/plan_sample.{{md,json}}")


if __name__ == "__main__":
    cli.run_main(main)
