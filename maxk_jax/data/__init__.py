"""Problem schema, dataset loaders, prompt formatting, code extraction (synthetic tasks: synthetic.py,
their programs: synthetic_solutions.py).

Main entry points::

    from maxk_jax.data import load_dataset, render_prompt, extract_code
    problems, report = load_dataset("code_contests", path=None, split="train", token_count=...)
    prompt = render_prompt(problems[0], tokenizer)
    submission = problems[0].to_submission(extract_code(completion), "sub-0")
"""
from maxk_jax.data.extract import extract_code
from maxk_jax.data.loaders import LOADERS, load_dataset
from maxk_jax.data.problem import (AssertTests, FunctionCase, FunctionTests, Limits, Problem, StdioCase,
                                   StdioTests, load_problems, save_problems)
from maxk_jax.data.prompts import build_messages, encode_prompts, make_token_counter, render_prompt
from maxk_jax.data.report import LoadReport

__all__ = [
    "AssertTests", "FunctionCase", "FunctionTests", "LOADERS", "Limits", "LoadReport", "Problem", "StdioCase",
    "StdioTests", "build_messages", "encode_prompts", "extract_code", "load_dataset", "load_problems",
    "make_token_counter", "render_prompt", "save_problems",
]
