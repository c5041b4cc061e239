"""`python -m maxk_jax.execution.serve` as a real process: starts, judges, shuts its sandboxes down."""
import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import httpx
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _children(pid: int) -> list:
    found = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            found += [int(p) for p in f.read().split()]
    return found


def test_help_lists_every_flag() -> None:
    out = subprocess.run([sys.executable, "-m", "maxk_jax.execution.serve", "--helpfull"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120).stdout
    for flag in ("--host", "--port", "--slots", "--unsandboxed", "--max_pending", "--max_inflight", "--cache_size",
                 "--output_mb", "--grace_s", "--log_level", "--token_file", "--insecure_no_auth", "--tls_cert",
                 "--tls_key"):
        assert flag in out, flag


def test_serve_process_lifecycle() -> None:
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "maxk_jax.execution.serve", "--host", "127.0.0.1",
                             "--port", str(port), "--slots", "2"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                health = httpx.get(f"{url}/healthz", timeout=2)
                break
            except httpx.HTTPError:
                assert proc.poll() is None, proc.stdout.read().decode()
                assert time.monotonic() < deadline, "service did not come up"
                time.sleep(0.2)
        assert health.status_code == 200 and health.json()["slots"] == 2
        body = {"submissions": [{"id": "x", "code": "print(input()[::-1])", "mode": "stdio",
                                 "tests": [{"stdin": "abc", "expected": "cba"}]}]}
        result = httpx.post(f"{url}/v1/judge", json=body, timeout=60).json()["results"][0]
        assert result["reward"] == 1.0 and result["tests"][0]["verdict"] == "AC"
        bad = httpx.post(f"{url}/v1/judge", json={"submissions": [{"id": "x"}]}, timeout=10)
        assert bad.status_code == 400 and bad.json()["field"] == "submissions[0].code"
        sandboxes = _children(proc.pid)
        assert len(sandboxes) == 2
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    for pid in sandboxes:
        assert not os.path.exists(f"/proc/{pid}"), f"sandbox {pid} outlived the service"


@pytest.mark.parametrize("flag, message", [("--port=70000", "--port must be in [1, 65535]"),
                                           ("--max_inflight=0", "--max_inflight must be >= 1"),
                                           ("--grace_s=inf", "--grace_s must be a finite number in (0, 3600]"),
                                           ("--grace_s=1e7", "--grace_s must be a finite number in (0, 3600]")])
def test_out_of_range_flags_are_rejected(flag: str, message: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "maxk_jax.execution.serve", flag], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr[-2000:]


def test_leftovers_of_a_killed_service_are_removed_at_next_start() -> None:
    from maxk_jax.execution import cgroups
    from maxk_jax.execution.embedded import EmbeddedExecutor

    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "maxk_jax.execution.serve", "--port", str(port), "--slots", "1"],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 90
    while True:
        try:
            httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
            break
        except httpx.HTTPError:
            assert proc.poll() is None and time.monotonic() < deadline, "service did not come up"
            time.sleep(0.2)
    tag = cgroups.owner_tag(proc.pid)
    proc.kill()
    proc.wait(timeout=30)
    left = glob.glob(f"{tempfile.gettempdir()}/maxk_jax_worker_{tag}_*")
    assert left, "the killed service left no worker directory (nothing to test)"
    bases, _ = cgroups.probe()
    groups = [g for b in (bases or {}).values() for g in glob.glob(os.path.join(b, f"{cgroups.PREFIX}{tag}_*"))]
    assert groups or bases is None, "the killed service left no cgroup (nothing to test)"
    mine = tempfile.mkdtemp(prefix=f"maxk_jax_worker_{cgroups.owner_tag()}_")   # live owner: kept
    try:
        with EmbeddedExecutor(slots=1):
            assert not any(os.path.exists(p) for p in left + groups), left + groups
            assert os.path.isdir(mine)
    finally:
        os.rmdir(mine)


def _start(port: int, *extra: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "maxk_jax.execution.serve", "--port", str(port), "--slots", "1",
                             *extra], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 90
    while True:
        try:
            httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
            return proc
        except httpx.HTTPError:
            assert proc.poll() is None and time.monotonic() < deadline, "service did not come up"
            time.sleep(0.2)


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2, signal.SIGINT])
def test_every_stop_signal_shuts_down_cleanly_with_one_line(sig) -> None:
    """SIGHUP / SIGUSR1 / SIGUSR2 / SIGINT: sandboxes gone, no worker dir or cgroup left, one line
    when listening, one per disconnected client, one when stopped -- no traceback."""
    from maxk_jax.execution import cgroups

    port = _free_port()
    proc = _start(port)
    tag = cgroups.owner_tag(proc.pid)
    sandboxes = _children(proc.pid)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:   # a client that gives up mid-body
        sock.sendall(b"POST /v1/judge HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 1000\r\n\r\n{\"submissions\": [")
        time.sleep(0.5)
    time.sleep(0.5)
    proc.send_signal(sig)
    out = proc.communicate(timeout=60)[0].decode()
    assert f"stopped by {signal.Signals(sig).name}" in out, out
    assert "listening on http://127.0.0.1:" in out and "disconnected after sending" in out, out
    assert "Traceback" not in out and len(out.strip().splitlines()) <= 4, out
    for pid in sandboxes:
        assert not os.path.exists(f"/proc/{pid}"), f"sandbox {pid} outlived the service"
    assert not glob.glob(f"{tempfile.gettempdir()}/maxk_jax_worker_{tag}_*")
    bases, _ = cgroups.probe()
    assert not [g for b in (bases or {}).values() for g in glob.glob(os.path.join(b, f"{cgroups.PREFIX}{tag}_*"))]


@pytest.mark.parametrize("extra, message", [
    ((), "serve: error: refusing to listen on '0.0.0.0' (not a loopback address) without authentication"),
    (("--token_file=/nonexistent/token",), "serve: error: token file /nonexistent/token: cannot open"),
    (("--token_file=",), "serve: error: token file must be a non-empty path"),
    (("--insecure_no_auth", "--tls_cert=/etc/hostname"), "serve: error: --tls_cert and --tls_key go together"),
    (("--insecure_no_auth", "--tls_cert=/etc/hostname", "--tls_key=/etc/hostname"),
     "serve: error: --tls_cert=/etc/hostname / --tls_key=/etc/hostname cannot be loaded as a PEM certificate"),
])
def test_exposed_host_without_token_is_refused_with_one_line(extra: tuple, message: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "maxk_jax.execution.serve", "--host", "0.0.0.0",
                           "--port", str(_free_port()), *extra], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [proc.stderr.strip()], proc.stderr[-2000:]
    assert proc.stderr.startswith(message), proc.stderr


def test_fifo_token_file_is_refused_without_blocking(tmp_path) -> None:
    fifo = tmp_path / "token"
    os.mkfifo(fifo, 0o600)
    proc = subprocess.run([sys.executable, "-m", "maxk_jax.execution.serve", f"--token_file={fifo}",
                           "--port", str(_free_port())], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.strip() == f"serve: error: token file {fifo} is not a regular file"


def test_non_loopback_without_the_filter_is_refused_with_one_line() -> None:
    """serve as a process where libseccomp 'is missing' (patched before main runs): one line, exit 2."""
    code = ("import sys\nfrom absl import app\nfrom maxk_jax.execution import seccomp, serve\n"
            "seccomp.filter_program = lambda: (None, 'no seccomp filter: libseccomp is missing')\n"
            "app.run(serve.main, argv=['serve', '--host=0.0.0.0', '--insecure_no_auth', '--port=%d'])" % _free_port())
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr[-2000:]
    assert "refusing to listen on '0.0.0.0' (not a loopback address) without the system-call filter" in proc.stderr
