r"""Export a trained model in Hugging Face format (config.json, model.safetensors, tokenizer).

    .venv/bin/python -m experiments.export_hf --checkpoint=runs/maxk --out=exported/maxk
    .venv/bin/python -m experiments.export_hf --checkpoint=runs/tiny/rl/checkpoints --step=16 \
        --out=exported/tiny --dtype=bfloat16 --push_to_hub=me/tiny-maxk

--checkpoint is a run directory (train's output_dir, a tiny_pipeline run), an orbax checkpoint
root or step directory, or a Hugging Face directory; the architecture, tokenizer and
generation_config.json come from the Hugging Face directory the run started from (recorded in the
checkpoint; --model_dir overrides). The folder loads with
``transformers.AutoModelForCausalLM.from_pretrained(out)`` (same logits) and
``AutoTokenizer.from_pretrained(out)``; maxk_export.json records where the weights came from.
Everything is checked before any weight is read (one line on stderr, exit 2): the checkpoint and
step, the model directory, --out (new or empty, or --overwrite), and with --push_to_hub the
repository id and a Hugging Face token (HF_TOKEN or `hf auth login`).
"""
from __future__ import annotations

from collections.abc import Sequence

from absl import app, flags

from maxk_jax import cli

FLAGS = flags.FLAGS


def define_flags() -> None:
    """Define the command-line flags (called by ``__main__`` only, so tests can import this module)."""
    flags.DEFINE_string("checkpoint", None, "Run directory (train's output_dir or a tiny_pipeline run), orbax "
                        "checkpoint root or step directory, or Hugging Face directory to export.")
    flags.DEFINE_string("out", None, "Folder to write config.json, model.safetensors, the tokenizer files and "
                        "maxk_export.json to (new or empty; see --overwrite).")
    flags.DEFINE_integer("step", None, "Orbax checkpoint step to export (default: the latest committed step).")
    flags.DEFINE_string("model_dir", None, "Hugging Face directory giving the architecture (config.json) and tokenizer "
                        "(default: the model directory recorded in the checkpoint's metadata).")
    flags.DEFINE_enum("dtype", "auto", ["auto", "float32", "bfloat16"], "Dtype of the saved tensors: 'auto' keeps "
                      "the dtype the checkpoint stores its parameters in.")
    flags.DEFINE_bool("overwrite", False, "Replace a non-empty --out folder (never the checkpoint or model directory).")
    flags.DEFINE_string("push_to_hub", None, "Also upload the folder to this Hugging Face model repository "
                        "('namespace/name', created if missing; needs HF_TOKEN or `hf auth login` and network).")
    flags.DEFINE_bool("private", False, "With --push_to_hub: create the repository as private.")


def main(argv: Sequence[str]) -> None:
    """Check every input, export, then (with --push_to_hub) upload."""
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {list(argv[1:])}")
    from maxk_jax import export

    with cli.user_errors():   # every check before work: one line per mistake, nothing written
        if not FLAGS.checkpoint:
            raise ValueError("--checkpoint is required (a run directory, orbax checkpoint or Hugging Face directory)")
        if not FLAGS.out:
            raise ValueError("--out is required (the folder to write the Hugging Face model to)")
        if FLAGS.push_to_hub is not None:
            export.check_hub_repo(FLAGS.push_to_hub)
        plan = export.plan_export(FLAGS.checkpoint, FLAGS.out, step=FLAGS.step, model_dir=FLAGS.model_dir,
                                  dtype=FLAGS.dtype, overwrite=FLAGS.overwrite)
    where = plan.source if plan.step is None else f"{plan.source} step {plan.step}"
    print(f"exporting {where} ({plan.dtype}) -> {plan.out}", flush=True)
    info = export.export_hf(plan)
    print(f"wrote {', '.join(info['files'])}")
    if FLAGS.push_to_hub is not None:
        url = export.push_to_hub(plan.out, FLAGS.push_to_hub, private=FLAGS.private)
        print(f"pushed to https://huggingface.co/{FLAGS.push_to_hub} ({url})")


if __name__ == "__main__":
    define_flags()
    cli.run_main(main)
