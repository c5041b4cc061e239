"""Prompt construction: one system + one user message per `Problem`, rendered for a tokenizer.

The user message holds the statement, mode-specific I/O instructions (stdin/stdout program,
function/method to implement, function to complete, partial solution to continue), the starter
code or partial solution in a ```python block, and the request to answer in one ```python block.

Rendering (`render_prompt`):
  * tokenizer with a chat template (instruct models): ``tokenizer.apply_chat_template(messages,
    tokenize=False, add_generation_prompt=True)``; templates that reject a system role get the
    system text merged into the user message.
  * otherwise (base models, tokenizers without a template): a plain-text prompt ending with an
    opened ```python fence so the model continues with code; extract completions of such
    prompts with ``extract_code(completion, inside_block=True)`` (`prompt_opens_code_block`
    tells which case applies).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from maxk_jax.data.problem import AssertTests, FunctionTests, Problem
from maxk_jax.models.tokenizer_protocol import Tokenizer

DEFAULT_SYSTEM_PROMPT = ("You are an expert Python programmer. You solve programming problems with correct, "
                         "efficient Python 3 code.")
ANSWER_FORMAT = "Answer with the complete solution in a single ```python code block."
PLAIN_SOLUTION_HEADER = "### Solution\n```python\n"


def _code_block(code: str) -> str:
    return "```python\n" + code.rstrip() + "\n```"


def format_instructions(problem: Problem) -> str:
    """Mode-specific instructions (and starter/partial code) for `problem`."""
    tests = problem.tests
    parts: list[str] = []
    if problem.code_prefix and problem.code_prefix != problem.starter_code:
        parts.append("Complete the following partial solution. Your answer must start with exactly this code "
                     "and continue it into a full solution:\n" + _code_block(problem.code_prefix))
        if problem.mode == "stdio":
            parts.append("The program reads the input from standard input and prints the answer to standard output.")
        return "\n\n".join(parts)
    if problem.mode == "stdio":
        parts.append("Write a Python 3 program that reads the input from standard input and prints the answer "
                     "to standard output. Do not print anything else.")
    elif isinstance(tests, FunctionTests):
        if tests.class_name:
            parts.append(f"Implement the method `{tests.entry_point}` of class `{tests.class_name}` in the "
                         f"starter code below. It is called with the test arguments and its return value is checked.")
        elif problem.starter_code:
            parts.append(f"Complete the function `{tests.entry_point}` in the starter code below. It is called "
                         f"with the test arguments and its return value is checked.")
        else:
            parts.append(f"Write a Python function named `{tests.entry_point}`. It is called with the test "
                         f"arguments and its return value is checked.")
    elif isinstance(tests, AssertTests):
        if problem.starter_code:
            parts.append("Complete the Python function below (its signature and docstring are given). Answer "
                         "with the full function definition, including any imports it needs.")
        else:
            name = problem.metadata.get("entry_point")
            parts.append("Write the Python code needed so that the tests above pass"
                         + (f" (define `{name}`)." if name else "."))
    if problem.starter_code:
        parts.append(_code_block(problem.starter_code))
    return "\n\n".join(parts)


def build_messages(problem: Problem, *, system_prompt: str | None = DEFAULT_SYSTEM_PROMPT,
                   use_upstream_prompt: bool = False) -> list[dict[str, str]]:
    """Chat messages ``[{"role": "system"|"user", "content": str}]`` for `problem`.

    With `use_upstream_prompt`, the dataset's own formatted prompt (``metadata["upstream_prompt"]``,
    LiveBench) is used verbatim as the user message; ValueError if the problem has none.
    """
    if use_upstream_prompt:
        user = problem.metadata.get("upstream_prompt")
        if not isinstance(user, str) or not user.strip():
            raise ValueError(f"problem {problem.id!r} has no metadata['upstream_prompt']")
    else:
        statement = problem.prompt.strip()
        if problem.starter_code and statement == problem.starter_code.strip():
            statement = ""  # HumanEval: the statement IS the starter code, shown once below
        sections = [s for s in (statement, format_instructions(problem), ANSWER_FORMAT) if s]
        user = "\n\n".join(sections)
    messages = []
    if system_prompt:
        messages.append({"role": "system", "content": system_prompt})
    messages.append({"role": "user", "content": user})
    return messages


def has_chat_template(tokenizer: Tokenizer) -> bool:
    """True when `tokenizer` has a chat template usable by ``apply_chat_template``."""
    return tokenizer is not None and bool(getattr(tokenizer, "chat_template", None)) \
        and hasattr(tokenizer, "apply_chat_template")


def _apply_template(tokenizer: Tokenizer, messages: list[dict[str, str]]) -> str:
    import jinja2  # transformers renders templates with jinja2

    try:
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    except jinja2.exceptions.TemplateError:
        if messages[0]["role"] != "system":
            raise
        merged = [{"role": "user", "content": messages[0]["content"] + "\n\n" + messages[1]["content"]}]
        return tokenizer.apply_chat_template(merged, tokenize=False, add_generation_prompt=True)


def render_plain(messages: Sequence[dict[str, str]]) -> str:
    """Plain-text prompt for base models: message contents, then an opened ```python fence."""
    body = "\n\n".join(m["content"].strip() for m in messages)
    return body + "\n\n" + PLAIN_SOLUTION_HEADER


def render_prompt(problem: Problem, tokenizer: Tokenizer | None = None, *, system_prompt: str | None = DEFAULT_SYSTEM_PROMPT,
                  use_upstream_prompt: bool = False, chat: bool | None = None) -> str:
    """Prompt text for `problem`.

    Args:
      tokenizer: a transformers tokenizer (or None for plain text).
      chat: None = chat template if the tokenizer has one, else plain text; True = require a
        chat template (ValueError if missing); False = always plain text.
    """
    messages = build_messages(problem, system_prompt=system_prompt, use_upstream_prompt=use_upstream_prompt)
    use_chat = has_chat_template(tokenizer) if chat is None else chat
    if use_chat:
        if not has_chat_template(tokenizer):
            raise ValueError("chat=True but the tokenizer has no chat_template")
        return _apply_template(tokenizer, messages)
    return render_plain(messages)


def prompt_opens_code_block(prompt: str) -> bool:
    """True when `prompt` ends inside an opened code fence (plain-text prompts): pass
    ``inside_block=True`` to `extract_code` for its completions."""
    return prompt.endswith(PLAIN_SOLUTION_HEADER)


def encode_prompts(problems: Sequence[Problem], tokenizer: Tokenizer, **render_kwargs: Any) -> list[list[int]]:
    """Token ids of `render_prompt` for each problem (the sampler's ``prompts`` argument).

    Chat-template prompts already contain their special tokens, so they are encoded with
    ``add_special_tokens=False``; plain prompts with the tokenizer's default special tokens.
    """
    out = []
    for p in problems:
        text = render_prompt(p, tokenizer, **render_kwargs)
        special = not (render_kwargs.get("chat") is not False and has_chat_template(tokenizer))
        out.append(list(tokenizer(text, add_special_tokens=special)["input_ids"]))
    return out


PROMPT_FORMATS = ("full", "statement")


def encode_problems(problems: Sequence[Problem], tokenizer: Tokenizer, prompt_format: str = "full",
                    render_kwargs: Mapping[str, Any] | None = None) -> tuple[list[list[int]], list[bool]]:
    """Prompt token ids of each problem [P][Tp_i] and whether its completion starts inside a code
    fence [P] (the one place a prompt format is turned into tokens).

    "full": `render_prompt` / `encode_prompts` (system prompt, instructions, answer format;
    ``render_kwargs`` such as chat / system_prompt).  "statement": the chat template around the
    bare statement (`chat_prompt_ids`), the format the tiny synthetic runs warm up on.
    """
    if prompt_format == "statement":
        return [chat_prompt_ids(tokenizer, p.prompt) for p in problems], [False] * len(problems)
    if prompt_format != "full":
        raise ValueError(f"prompt_format={prompt_format!r} is not one of {PROMPT_FORMATS}")
    render = dict(render_kwargs or {})
    inside = [prompt_opens_code_block(render_prompt(p, tokenizer, **render)) for p in problems]
    return encode_prompts(problems, tokenizer, **render), inside


def make_token_counter(tokenizer: Tokenizer) -> Callable[[str], int]:
    """``text -> number of tokens`` (no special tokens), e.g. for CodeContests' 512-token filter."""
    if tokenizer is None or not callable(tokenizer):
        raise ValueError(f"make_token_counter needs a callable tokenizer, got {tokenizer!r:.80}")

    def count(text: str) -> int:
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    return count


def chat_prompt_ids(tokenizer: Tokenizer, user_message: str) -> list[int]:
    """Token ids of a one-user-message conversation with the generation prompt (the prompt an
    instruct model is sampled from): ``apply_chat_template`` then encode without extra specials."""
    text = tokenizer.apply_chat_template([{"role": "user", "content": user_message}], tokenize=False,
                                         add_generation_prompt=True)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])
