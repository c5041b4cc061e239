"""maxk_jax/benchmarks/decode.py: the --cases and --decode_attention syntax (bad entries named).
The timing itself runs in tests/experiments/test_bench_accelerator.py and test_bench_decode_options.py."""
import re

import pytest

from maxk_jax.benchmarks import decode
from maxk_jax.models import qwen2


def test_cases_parse_and_bad_ones_are_named():
    assert decode.parse_case("16x8:512/256") == (16, 8, 512, 256)
    for bad in ("16x8", "16x8:512", "0x8:512/256", "ax8:1/1"):
        with pytest.raises(ValueError, match=f"'{bad}'"):
            decode.parse_case(bad)


def test_decode_attention_entries_parse_and_bad_ones_are_named():
    assert [decode.attention_variant(t) for t in ("auto", "xla", "pallas", "pallas:4")] == [
        ("auto", 0), ("xla", 0), ("pallas", 0), ("pallas", 4)]
    assert decode.variant_config(qwen2.preset("qwen2.5-coder-1.5b"), "pallas:2").decode_attention_splits == 2
    assert decode.attention_variant("pallas:4+draw") == ("pallas", 4) and decode.fused_draw("xla+draw")
    assert decode.variant_config(qwen2.preset("qwen2.5-coder-1.5b"), "pallas+draw").decode_draw == "pallas"
    assert decode.variant_config(qwen2.preset("qwen2.5-coder-1.5b"), "pallas").decode_draw == "xla"
    for bad in ("flash", "xla:2", "pallas:0", "pallas:x", "pallas+fused", "+draw"):
        with pytest.raises(ValueError, match=re.escape(f"'{bad}'")):
            decode.attention_variant(bad)


def test_case_text_round_trips_and_defaults_add_the_rl_cases_once():
    assert decode.case_text(decode.parse_case("16x8:512/256")) == "16x8:512/256"
    rl = [decode.parse_case(c) for c in decode.RL_CASES]
    assert decode.cases_or_default([], (2, 2, 32, 8)) == [(2, 2, 32, 8), *rl]
    assert decode.cases_or_default([], rl[0]) == rl
    assert decode.cases_or_default(["1x4:64/8"], (2, 2, 32, 8)) == [(1, 4, 64, 8)]
