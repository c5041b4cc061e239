"""SandboxFusionExecutor against a stand-in /run_code: verdicts, unsupported checkers, failures."""
import pytest

from maxk_jax.execution.factory import make_executor
from maxk_jax.execution.sandboxfusion import SandboxFusionExecutor

from tests.execution.judge_fixtures import SUBS, WANT, fake_sandboxfusion, verdicts


def test_sandboxfusion_backend(serve_app) -> None:
    extra = [{"id": "ce", "code": "print(", "mode": "stdio", "tests": [{"stdin": "", "expected": ""}]},
             {"id": "tle", "code": "while True: pass", "mode": "stdio", "tests": [{"stdin": "", "expected": ""}],
              "limits": {"cpu_s": 0.5, "wall_s": 1}},
             {"id": "re", "code": "raise KeyError", "mode": "stdio", "tests": [{"stdin": "", "expected": ""}]}]
    with make_executor("sandboxfusion+" + serve_app(fake_sandboxfusion())) as client:
        results = client.judge(SUBS + extra)
        assert verdicts(results) == WANT + [["CE"], ["TLE"], ["RE"]]
        assert [r["status"] for r in results] == ["ok"] * 6
        with pytest.raises(ValueError, match="checker"):
            client.judge([dict(SUBS[0], checker={"code": "pass"})])
    with SandboxFusionExecutor(serve_app(fake_sandboxfusion(fail=True)), retries=1, backoff_s=0.01) as client:
        result = client.judge(SUBS[:1])[0]
        assert result["status"] == "sandbox_error" and result["reward"] is None
