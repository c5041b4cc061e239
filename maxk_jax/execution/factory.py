"""``make_executor(spec)``: an :class:`Executor` from a spec string (the only module importing every backend)."""
from typing import Any

from maxk_jax.execution.embedded import EmbeddedExecutor
from maxk_jax.execution.executor import Executor
from maxk_jax.execution.http_client import HttpExecutor
from maxk_jax.execution.reward_executor import RewardFunctionExecutor
from maxk_jax.execution.sandboxfusion import SandboxFusionExecutor


def make_executor(spec: str = "embedded", **kwargs: Any) -> Executor:
    """Build an executor from a spec string.

    ``"embedded"`` (default) or ``"embedded:N"`` (N slots); ``"embedded-unsandboxed"`` (explicit
    opt-in to run without bubblewrap); ``"http://host:port[,http://host2:port]"``;
    ``"sandboxfusion+http://host:port"``; ``"reward:module:function"`` (a Python reward function
    scores the completions: `RewardFunctionExecutor`, docs/usage/rewards.md). ``kwargs`` go to the backend's constructor. A judge
    service started with ``--token_file`` needs the client's token: ``token_file=PATH`` here or,
    for every entry point that takes a spec (``--executor``, ``rollout.executor``), the environment
    variable ``MAXK_JUDGE_TOKEN_FILE=PATH`` (and ``MAXK_JUDGE_CA_FILE`` for a self-signed HTTPS cert).
    """
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"executor spec must be a non-empty string, got {spec!r}")
    spec = spec.strip()
    if spec in ("embedded", "embedded-unsandboxed") or spec.startswith(("embedded:", "embedded-unsandboxed:")):
        name, _, slots = spec.partition(":")
        if slots:
            if not slots.isdigit() or int(slots) < 1:
                raise ValueError(f"executor spec {spec!r}: slots after ':' must be a positive integer")
            kwargs.setdefault("slots", int(slots))
        if name == "embedded-unsandboxed":
            kwargs["allow_unsandboxed"] = True
        return EmbeddedExecutor(**kwargs)
    if spec.startswith("reward:"):   # maxk_jax.data.rewards.REWARD_PREFIX (imported here only: the judge stays light)
        from maxk_jax.data.rewards import load_reward_fn

        return RewardFunctionExecutor(load_reward_fn(spec[len("reward:"):], what="executor spec reward function"),
                                      **kwargs)
    if spec.startswith("sandboxfusion+"):
        return SandboxFusionExecutor(spec[len("sandboxfusion+"):], **kwargs)
    if spec.startswith(("http://", "https://")):
        return HttpExecutor(spec, **kwargs)
    raise ValueError(f"unknown executor spec {spec!r}: use 'embedded', 'embedded:N', 'embedded-unsandboxed', "
                     "'http://host:port[,...]', 'sandboxfusion+http://host:port' or 'reward:module:function'")
