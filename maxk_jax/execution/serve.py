"""Run the judge service: ``python -m maxk_jax.execution.serve --host 127.0.0.1 --port PORT``.

Starts the sandbox supervisor (``--slots`` workers, default os.cpu_count()) and serves the
FastAPI app of :mod:`maxk_jax.execution.service` with uvicorn until SIGINT/SIGTERM, then kills
every sandbox. Refuses to start without bubblewrap/user namespaces unless ``--unsandboxed``;
out-of-range flags (``--port=70000``, ``--max_inflight=0``) are rejected before anything starts.
Temp directories left by a SIGKILLed earlier service (owner process gone) are removed at start.
"""
import logging
import signal
import sys

import uvicorn
from absl import app, flags

from maxk_jax.execution.sandbox import MAX_SLOTS, SandboxConfig, SandboxUnavailableError
from maxk_jax.execution.schema import LIMIT_BOUNDS
from maxk_jax.execution.service import create_app
from maxk_jax.execution.supervisor import Supervisor

FLAGS = flags.FLAGS
flags.DEFINE_string("host", "127.0.0.1", "Interface to listen on (keep 127.0.0.1 unless a proxy guards it).")
flags.DEFINE_integer("port", 8080, "TCP port to listen on.")
flags.DEFINE_integer("slots", 0, "Worker slots (parallel tests); 0 means os.cpu_count().")
flags.DEFINE_bool("unsandboxed", False, "Run candidate code WITHOUT bubblewrap/namespaces (rlimits and a "
                  "separate uid only) when the sandbox is unavailable. Explicit opt-in; unsafe for untrusted code.")
flags.DEFINE_integer("max_pending", 100000, "Queued tests above which requests get 503 + Retry-After.")
flags.DEFINE_integer("max_inflight", 64, "Requests judged at once above which requests get 429 + Retry-After.")
flags.DEFINE_integer("cache_size", 4096, "Results kept for repeated submissions (same id and content).")
flags.DEFINE_integer("cache_mb", 64, "Bytes (MB) of result JSON the repeat cache may hold.")
flags.DEFINE_integer("max_request_mb", 256, "Largest request body accepted (MB); larger -> HTTP 413.")
flags.DEFINE_bool("cgroups", True, "Limit memory/pids/CPU with a cgroup per slot where the host allows it "
                  "(root, cgroup v1); --nocgroups forces per-process rlimits.")
flags.DEFINE_integer("output_mb", 32, "Default stdout/stderr limit per test in MB (limits.output_mb overrides).")
flags.DEFINE_float("grace_s", 5.0, "Seconds past a test's wall limit before its worker counts as hung.")
flags.DEFINE_enum("log_level", "warning", ["debug", "info", "warning", "error"], "uvicorn log level.")
for _name, _low, _high in (("port", 1, 65535), ("slots", 0, MAX_SLOTS), ("max_pending", 1, None),
                           ("max_inflight", 1, None), ("cache_size", 0, None), ("cache_mb", 0, None),
                           ("max_request_mb", 1, None), ("output_mb", *LIMIT_BOUNDS["output_mb"])):
    flags.register_validator(
        _name, lambda value, low=_low, high=_high: low <= value and (high is None or value <= high),
        message=f"--{_name} must be " + (f"in [{_low}, {_high}]" if _high is not None else f">= {_low}"))
flags.register_validator("grace_s", lambda value: value > 0, message="--grace_s must be > 0")


def _terminate(signum: int, frame) -> None:
    """SIGTERM -> SystemExit, so the ``finally`` below kills and reaps every sandbox.

    uvicorn restores this handler after its graceful shutdown and re-raises the signal."""
    del frame
    raise SystemExit(128 + signum)


def main(argv: list) -> None:
    """Start the supervisor, serve until interrupted, then shut the sandboxes down."""
    del argv
    config = SandboxConfig(slots=FLAGS.slots or None, allow_unsandboxed=FLAGS.unsandboxed, grace_s=FLAGS.grace_s,
                           cgroups=FLAGS.cgroups)
    try:
        supervisor = Supervisor(config)
    except SandboxUnavailableError as err:
        sys.exit(f"serve: {err}")
    try:
        if not supervisor.sandboxed:
            logging.warning("serving WITHOUT a sandbox (--unsandboxed)")
        application = create_app(supervisor, max_pending=FLAGS.max_pending, max_inflight=FLAGS.max_inflight,
                                 cache_size=FLAGS.cache_size, cache_bytes=FLAGS.cache_mb << 20,
                                 max_request_bytes=FLAGS.max_request_mb << 20, default_output_mb=FLAGS.output_mb)
        signal.signal(signal.SIGTERM, _terminate)
        uvicorn.run(application, host=FLAGS.host, port=FLAGS.port, log_level=FLAGS.log_level)
    finally:
        supervisor.close()


if __name__ == "__main__":
    app.run(main)
