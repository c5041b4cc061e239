"""Behaviour fingerprints: which submissions of a problem gave the same answer (majority voting).

Tang et al.'s majority voting votes over final answers; for a program the answer is its
*behaviour* on the problem's test inputs (AlphaCode's clustering idea), never its source text.
The judge computes, outside the sandbox where the outputs are seen, one token per test:

  AC            ``AC`` -- the output is equivalent to the expected one under the judge's own
                comparison (float tolerance, checker), so all accepted outputs of a test agree;
  WA (stdio)    ``WA`` + a hash of stdout, whitespace-normalised as the comparison mode does
                ("tokens": split on whitespace; "lines": trailing blanks / blank tail dropped;
                "exact": the bytes);
  WA (function) ``WA`` + a hash of the canonical return value (ints exact, floats by repr, dicts
                by sorted key), or of the harness's report when no plain value came back;
  WA (assert)   ``WA`` -- assert mode reports only pass/fail per test, so the per-test verdict
                vector is the only behaviour available there;
  RE / CE       the verdict (the program crashed / does not compile on that input);
  TLE, MLE, OLE, SE -> undetermined: the program's answer on that input was not seen in full.

`run_token` gives the token of one test, ``fingerprint(tokens)`` hashes the tokens of all tests (blake2b, 64 bits, 16 hex digits); it is
None when any test is undetermined, and the trainer then MASKS the sample out of the vote rather
than guessing its answer. Because every token contains the test's verdict, two submissions with
the same fingerprint have the same verdicts, hence the same reward (majority_vote requires the
reward to be a function of the answer). Results carry it as the optional field ``behaviour``
(str or null); expected outputs never enter the sandbox for this.
"""
from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

from maxk_jax.execution.judge import HugeInt

UNDETERMINED = ("TLE", "MLE", "OLE", "SE")
FIELD = "_behaviour"  # private per-test key, turned into the result's "behaviour" by `summarise`


def _digest(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=16).digest()


def normalise_output(stdout: bytes, compare_mode: str = "tokens") -> bytes:
    """stdout as the comparison `compare_mode` sees it (whitespace-insensitive where it is)."""
    if compare_mode == "tokens":
        return b" ".join(stdout.split())
    if compare_mode == "lines":
        lines = [line.rstrip(b" \t\r") for line in stdout.replace(b"\r\n", b"\n").split(b"\n")]
        while lines and not lines[-1]:
            lines.pop()
        return b"\n".join(lines)
    return stdout


def canonical_value(value: Any) -> Any:
    """A JSON-able canonical form of a reported return value: type-tagged, dict keys sorted."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, (int, HugeInt)):
        return ["int", str(value)]
    if isinstance(value, float):
        return ["float", repr(value) if math.isfinite(value) else str(value)]
    if isinstance(value, str):
        return ["str", value]
    if isinstance(value, (list, tuple)):
        return ["list", [canonical_value(v) for v in value]]
    if isinstance(value, Mapping):
        return ["dict", sorted([str(k), canonical_value(v)] for k, v in value.items())]
    return [type(value).__name__, repr(value)]


def run_token(mode: str, verdict: str, *, stdout: bytes | None = None, record: Mapping | None = None,
               compare_mode: str = "tokens") -> bytes | None:
    """The behaviour token of one test (see the module doc); None = undetermined.

    mode: "stdio" | "function" | "assert"; stdout: the program's stdout (stdio); record: the
    harness record of a function-mode run (``{"k": "value", "v": ...}`` or another report).
    """
    if verdict in UNDETERMINED or verdict is None:
        return None
    if verdict != "WA" or mode == "assert":
        return verdict.encode("ascii")
    if mode == "stdio":
        if stdout is None:
            return None
        return b"WA:" + _digest(normalise_output(stdout, compare_mode))
    try:
        if record is not None and record.get("k") == "value":
            shown: Any = canonical_value(record.get("v"))
        else:
            shown = {key: str(record[key]) for key in ("k", "msg", "code") if record and key in record}
        text = json.dumps(shown, sort_keys=True, allow_nan=True)
    except (TypeError, ValueError, RecursionError):
        return None
    return b"WA:" + _digest(text.encode("utf-8", "surrogatepass"))


def fingerprint(tokens: Iterable[bytes | None]) -> str | None:
    """blake2b-64 hex digest of the per-test tokens in test order; None if any is None (or none)."""
    h = hashlib.blake2b(digest_size=8)
    count = 0
    for token in tokens:
        if token is None:
            return None
        h.update(len(token).to_bytes(4, "little") + token)
        count += 1
    return h.hexdigest() if count else None


def summarise(tests: list[dict]) -> str | None:
    """Pop each test result's private token (tests without one -- CE before running, SE -- fall
    back to their verdict) and return the submission's fingerprint."""
    tokens = []
    for test in tests:
        token = test.pop(FIELD, None)
        if token is None and test.get("verdict") in ("AC", "RE", "CE"):
            token = test["verdict"].encode("ascii")
        tokens.append(token)
    return fingerprint(tokens)
