"""The default backend: the sandbox supervisor in this process (``make_executor("embedded")``).

Nothing to start; ready in well under a second. Submissions are validated here (ValueError
naming the field, as the service would answer HTTP 400) and judged by :class:`Supervisor`.
"""
import dataclasses
from collections.abc import Sequence

from maxk_jax.execution import schema
from maxk_jax.execution.executor import Executor, JudgeResult, SubmissionDict
from maxk_jax.execution.sandbox import SandboxConfig
from maxk_jax.execution.supervisor import Supervisor


class EmbeddedExecutor(Executor):
    """The supervisor in this process: ``slots`` sandboxed workers (default os.cpu_count())."""

    def __init__(self, slots: int | None = None, *, allow_unsandboxed: bool = False,
                 config: SandboxConfig | None = None):
        base = config or SandboxConfig()
        if slots is not None:
            base = dataclasses.replace(base, slots=slots)
        if allow_unsandboxed:
            base = dataclasses.replace(base, allow_unsandboxed=True)
        self.supervisor = Supervisor(base)

    def judge(self, submissions: Sequence[SubmissionDict]) -> list[JudgeResult]:
        """Validate (ValueError naming the field) and judge in-process; S submissions -> S results."""
        return self.supervisor.judge(schema.parse_submissions(submissions))

    def health(self) -> dict:
        """Slots alive, restarts, queue depth."""
        return self.supervisor.health()

    def close(self) -> None:
        """Kill the workers and release their uids."""
        self.supervisor.close()
