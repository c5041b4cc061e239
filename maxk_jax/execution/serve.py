"""Run the judge service: ``python -m maxk_jax.execution.serve --host 127.0.0.1 --port PORT``.

Starts the sandbox supervisor (``--slots`` workers, default os.cpu_count()) and serves the
FastAPI app of :mod:`maxk_jax.execution.service` with uvicorn until SIGTERM, SIGINT, SIGHUP,
SIGUSR1 or SIGUSR2, then kills every sandbox and removes its cgroups and temp directories. The
console gets one line when the service listens, one per client that disconnects mid-request and
one when it stops (uvicorn's own log at --log_level). Refuses to start without bubblewrap/user namespaces unless ``--unsandboxed``;
out-of-range flags (``--port=70000``, ``--max_inflight=0``) are rejected before anything starts.
Temp directories left by a SIGKILLed earlier service (owner process gone) are removed at start.

On a shared network: ``--token_file PATH`` (a file only its owner can read) makes every request
but ``GET /healthz`` need ``Authorization: Bearer <token>`` (401 otherwise); ``--tls_cert`` /
``--tls_key`` serve HTTPS. A non-loopback ``--host`` without ``--token_file`` is refused at start
(one line, non-zero exit) unless ``--insecure_no_auth`` is given, which logs a warning. A non-loopback
``--host`` also needs the system-call filter (:mod:`seccomp`: libseccomp + pyseccomp): without it the
service refuses to start unless ``--insecure_no_seccomp`` (one warning line); on loopback a missing
filter is one warning. Flags and files are checked before anything starts: ``--grace_s`` finite in
(0, 3600], an empty ``--token_file=`` refused (not "no token"), the token file a private regular file
(a FIFO is refused without opening it), TLS files loaded once (a bad certificate or key: one line).
"""
import contextlib
import logging
import math
import os
import signal
import ssl
import sys
import threading
import time

import uvicorn
from absl import app, flags
from maxk_jax import cli

from maxk_jax import cli
from maxk_jax.execution import seccomp
from maxk_jax.execution.auth import TokenFileError, is_loopback, read_token_file
from maxk_jax.execution.sandbox import MAX_GRACE_S, MAX_SLOTS, SandboxConfig, SandboxUnavailableError
from maxk_jax.execution.schema import LIMIT_BOUNDS
from maxk_jax.execution.service import HalfCloseProtocol, create_app
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
flags.DEFINE_float("grace_s", 5.0, "Seconds past a test's wall limit before its worker counts as hung "
                   f"(finite, in (0, {MAX_GRACE_S:g}]).")
flags.DEFINE_string("token_file", None, "File holding the bearer token clients must send (mode 600 or stricter; "
                    "e.g. `openssl rand -hex 32 > FILE`). Required unless --host is a loopback address.")
flags.DEFINE_bool("insecure_no_auth", False, "Serve a non-loopback --host WITHOUT authentication: anyone who reaches "
                  "the port can run code in the sandboxes. Explicit opt-in; logged as a warning.")
flags.DEFINE_string("tls_cert", None, "PEM certificate (chain) to serve HTTPS with; needs --tls_key.")
flags.DEFINE_string("tls_key", None, "PEM private key of --tls_cert.")
flags.DEFINE_bool("insecure_no_seccomp", False, "Serve a non-loopback --host although the system-call filter "
                  "(libseccomp + pyseccomp) is unavailable: programs may then use every system call and socket family. "
                  "Explicit opt-in; logged as a warning.")
flags.DEFINE_enum("log_level", "warning", ["debug", "info", "warning", "error"], "uvicorn log level.")
for _name, _low, _high in (("port", 1, 65535), ("slots", 0, MAX_SLOTS), ("max_pending", 1, None),
                           ("max_inflight", 1, None), ("cache_size", 0, None), ("cache_mb", 0, None),
                           ("max_request_mb", 1, None), ("output_mb", *LIMIT_BOUNDS["output_mb"])):
    flags.register_validator(
        _name, lambda value, low=_low, high=_high: low <= value and (high is None or value <= high),
        message=f"--{_name} must be " + (f"in [{_low}, {_high}]" if _high is not None else f">= {_low}"))
flags.register_validator("grace_s", lambda value: math.isfinite(value) and 0 < value <= MAX_GRACE_S,
                         message=f"--grace_s must be a finite number in (0, {MAX_GRACE_S:g}]")


# Signals that stop the service cleanly (sandboxes killed, cgroups and temp directories removed,
# one log line); without a handler SIGHUP / SIGUSR1 / SIGUSR2 would kill it and leave them behind.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)


class _Server(uvicorn.Server):
    """uvicorn's server with every `STOP_SIGNALS` as a graceful stop, remembering which arrived."""

    stopped_by: str = ""

    def handle_exit(self, sig: int, frame) -> None:
        self.stopped_by = self.stopped_by or signal.Signals(sig).name
        super().handle_exit(sig, frame)

    def install_signal_handlers(self) -> None:   # uvicorn < 0.29 spelling
        for sig in STOP_SIGNALS:
            signal.signal(sig, self.handle_exit)

    @contextlib.contextmanager
    def capture_signals(self):                    # uvicorn >= 0.29 spelling
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in STOP_SIGNALS}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def _announce(server: _Server, url: str, slots: int, sandboxed: bool, auth: str) -> None:
    """One line on stderr once the socket is listening (polled from a daemon thread)."""
    while not server.started and not server.should_exit:
        time.sleep(0.05)
    if server.started:
        print(f"serve: listening on {url} ({slots} slots, {'sandboxed' if sandboxed else 'UNSANDBOXED'}, "
              f"{auth}); stop with SIGTERM/SIGINT/SIGHUP/SIGUSR1/SIGUSR2", file=sys.stderr, flush=True)


def security_settings(host: str, token_file: str | None, insecure_no_auth: bool, tls_cert: str | None,
                      tls_key: str | None) -> tuple:
    """``(token or None, uvicorn TLS kwargs, auth description)`` from the flags; SystemExit with one
    line for a refused combination (non-loopback host without a token, half a TLS pair, bad files)."""
    if bool(tls_cert) != bool(tls_key):
        cli.fail("--tls_cert and --tls_key go together (give both or neither)")
    tls = {}
    for name, path in (("--tls_cert", tls_cert), ("--tls_key", tls_key)):
        if path is not None and not os.path.isfile(path):
            cli.fail(f"{name}={path} is not a file")
    if tls_cert:
        try:        # what uvicorn does at start, here before anything starts: a bad file is one line
            ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(tls_cert, tls_key)
        except (ssl.SSLError, OSError, ValueError) as err:
            cli.fail(f"--tls_cert={tls_cert} / --tls_key={tls_key} cannot be loaded as a PEM certificate chain "
                     f"and its private key ({getattr(err, 'reason', None) or err})")
        tls = {"ssl_certfile": tls_cert, "ssl_keyfile": tls_key}
    token = None
    if token_file is not None:          # an empty --token_file= (an unset variable) is refused, not "no auth"
        try:
            token = read_token_file(token_file)
        except TokenFileError as err:
            cli.fail(str(err))
    elif not is_loopback(host):
        if not insecure_no_auth:
            cli.fail(f"refusing to listen on {host!r} (not a loopback address) without authentication: give "
                     "--token_file=PATH (or --insecure_no_auth to expose it anyway)")
        logging.warning("serve: listening on %s WITHOUT authentication (--insecure_no_auth): anyone who reaches "
                        "the port can run code in the sandboxes", host)
    auth = "bearer token" if token else "NO AUTHENTICATION" if not is_loopback(host) else "no authentication"
    return token, tls, auth


def require_filter(host: str, insecure_no_seccomp: bool, active: bool | None = None) -> None:
    """One line, exit 2, for a non-loopback ``host`` without the seccomp filter (:func:`seccomp.refusal_for_host`)."""
    refusal = seccomp.refusal_for_host(host, insecure_no_seccomp, active)
    if refusal is not None:
        cli.fail(refusal)


def main(argv: list) -> None:
    """Start the supervisor, serve until a stop signal, then shut the sandboxes down."""
    del argv
    require_filter(FLAGS.host, FLAGS.insecure_no_seccomp)
    token, tls, auth = security_settings(FLAGS.host, FLAGS.token_file, FLAGS.insecure_no_auth, FLAGS.tls_cert,
                                         FLAGS.tls_key)
    config = SandboxConfig(slots=FLAGS.slots or None, allow_unsandboxed=FLAGS.unsandboxed, grace_s=FLAGS.grace_s,
                           cgroups=FLAGS.cgroups)
    try:
        supervisor = Supervisor(config)
    except SandboxUnavailableError as err:
        sys.exit(f"serve: {err}")
    server = None
    try:
        if seccomp.filter_program()[0] is not None:      # else require_filter has refused or warned already
            require_filter(FLAGS.host, FLAGS.insecure_no_seccomp, supervisor.seccomp_active())
        if not supervisor.sandboxed:
            logging.warning("serving WITHOUT a sandbox (--unsandboxed)")
        application = create_app(supervisor, max_pending=FLAGS.max_pending, max_inflight=FLAGS.max_inflight,
                                 cache_size=FLAGS.cache_size, cache_bytes=FLAGS.cache_mb << 20,
                                 max_request_bytes=FLAGS.max_request_mb << 20, default_output_mb=FLAGS.output_mb,
                                 token=token)
        server = _Server(uvicorn.Config(application, host=FLAGS.host, port=FLAGS.port, log_level=FLAGS.log_level,
                                        http=HalfCloseProtocol, **tls))
        url = f"{'https' if tls else 'http'}://{FLAGS.host}:{FLAGS.port}"
        threading.Thread(target=_announce, args=(server, url, supervisor.num_slots, supervisor.sandboxed, auth),
                         daemon=True).start()
        server.run()
    finally:
        supervisor.close()
        why = f"stopped by {server.stopped_by}" if server is not None and server.stopped_by else "stopped"
        print(f"serve: {why}; sandboxes, cgroups and temp directories removed", file=sys.stderr, flush=True)


if __name__ == "__main__":
    cli.run_main(main)
