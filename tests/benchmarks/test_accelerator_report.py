"""maxk_jax/benchmarks/accelerator_report.py: the table names each measured row against its baseline and
roofline, the footer lists what was skipped or failed, and write() leaves the JSON and the table."""
import json

from maxk_jax.benchmarks.accelerator_report import markdown, write


def _res():
    decode = {"preset": "tiny", "prompts": 2, "n": 4, "prompt_len": 32, "new_tokens": 8, "decode_attention": "xla",
              "tok_per_s": 1000.0, "ms_per_step": 2.0, "prefill_s": 0.01, "roofline_tok_per_s": 4000.0,
              "roofline_ms_per_step": 0.5, "frac_of_roofline": 0.25}
    return {"device": {"kind": "cpu", "platform": "cpu"}, "versions": {"jax": "x"}, "cpu": "host",
            "ceilings": {"hbm_bytes_per_s": 1e11, "bf16_flops": 1e15, "matmul_size": 128},
            "decode": [decode], "hf_generate": {**{k: decode[k] for k in ("preset", "prompts", "n", "prompt_len",
                                                                           "new_tokens")}, "tok_per_s": 500.0},
            "train": [{"attention": "chunked", "tokens_per_s": 300.0, "model_tflops": 500.0}],
            "torch_train": {"tokens_per_s": 100.0}, "train_preset": "tiny", "train_shape": "8 x 48 tokens",
            "skipped": ["profile: time budget"], "errors": ["decode tiny 1x2:600/4 xla: ValueError: too long"]}


def test_markdown_rows_ratios_and_footer():
    table = markdown(_res())
    assert "| tiny decode, 2 x n = 4, 32 / 8 | 1,000 tok/s (2.00 ms/step; prefill 0.010 s) | " \
           "transformers `generate` 500 tok/s | 4,000 tok/s (0.50 ms/step): **25 %** |" in table
    assert "300 tok/s (3.00x)" in table and "PyTorch + transformers 100 tok/s" in table
    assert "500 TFLOP/s = 50 % of the matmul ceiling" in table
    assert "Skipped: profile: time budget" in table and "Failed: decode tiny 1x2:600/4 xla" in table


def test_write_leaves_the_json_and_the_table(tmp_path):
    res = _res()
    table = write(res, tmp_path)
    assert json.loads((tmp_path / "bench_accelerator.json").read_text()) == res
    assert (tmp_path / "bench_accelerator.md").read_text() == table
    assert not (tmp_path / "bench_accelerator.png").exists()
