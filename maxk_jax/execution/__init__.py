"""Sandboxed execution of model-written code: judge, sandbox, HTTP service, client.

Start with ``client.make_executor(spec)`` ("embedded" by default, or "http://host:port[,...]")
and ``Executor.judge(submissions)`` in the DESIGN.md schema. Modules: ``judge`` (output
comparison, verdicts), ``schema`` (request validation), ``sandbox`` (bubblewrap slots, uid blocks,
reaper), ``cgroups`` (per-slot memory/pids/CPU groups), ``worker``/``harness``/``harness_assert``/
``protocol`` (the stdlib-only code that runs inside the sandbox),
``supervisor`` (slots, queue, results), ``service``/``serve`` (FastAPI app and its entry point),
``sandboxfusion`` (backend for an existing SandboxFusion deployment).
"""
