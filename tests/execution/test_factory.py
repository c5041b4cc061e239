"""make_executor: every spec form builds its backend; bad specs are refused naming the spec."""
import time

import pytest

from maxk_jax.execution.embedded import EmbeddedExecutor
from maxk_jax.execution.executor import Executor
from maxk_jax.execution.factory import make_executor
from maxk_jax.execution.http_client import HttpExecutor
from maxk_jax.execution.sandboxfusion import SandboxFusionExecutor

from tests.execution.judge_fixtures import SUBS, WANT, verdicts


def test_make_executor_specs() -> None:
    with make_executor("embedded:1") as ex:
        assert isinstance(ex, EmbeddedExecutor) and ex.health()["slots"] == 1
        assert ex.judge([]) == []
        assert verdicts(ex.judge(SUBS)) == WANT
    http = make_executor("http://127.0.0.1:1, http://127.0.0.1:2/")
    assert isinstance(http, HttpExecutor) and http.urls == ["http://127.0.0.1:1", "http://127.0.0.1:2"]
    http.close()
    sf = make_executor("sandboxfusion+http://127.0.0.1:3")
    assert isinstance(sf, SandboxFusionExecutor) and isinstance(sf, Executor)
    sf.close()
    for bad in ("", "embedded:0", "embedded:x", "ftp://x", "local", None):
        with pytest.raises(ValueError):
            make_executor(bad)


def test_bad_spec_error_names_the_spec() -> None:
    with pytest.raises(ValueError, match="'embedded:0'"):
        make_executor("embedded:0")
    with pytest.raises(ValueError, match="unknown executor spec 'local'"):
        make_executor("local")


def test_embedded_is_the_default_and_starts_fast() -> None:
    start = time.monotonic()
    with make_executor() as ex:
        elapsed = time.monotonic() - start
        assert isinstance(ex, EmbeddedExecutor)
        assert ex.health()["sandboxed"] is True
    print(f"embedded executor start-up: {elapsed:.3f}s")
