"""Worker internals that can be checked outside a sandbox: safety guard, scratch wipe, records."""
import os
import subprocess

import pytest

from maxk_jax.execution import worker

WORKER = worker.__file__


def test_refuses_kill_all_as_root_outside_a_pid_namespace(tmp_path) -> None:
    if os.geteuid() != 0:
        pytest.skip("the guard is about root")
    proc = subprocess.run(["/usr/bin/python3", "-I", WORKER, os.path.dirname(WORKER), "all", str(tmp_path)],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode != 0 and "refusing kill mode 'all'" in proc.stderr


def test_usage_error(tmp_path) -> None:
    proc = subprocess.run(["/usr/bin/python3", "-I", WORKER, os.path.dirname(WORKER), "everything", str(tmp_path)],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode != 0 and "usage" in proc.stderr


def test_wipe_removes_locked_down_trees(tmp_path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "f").write_text("x")
    (tmp_path / "a" / "link").symlink_to("/etc")
    for i in range(50):
        (tmp_path / f"file{i}").write_bytes(b"0")
    os.chmod(tmp_path / "a" / "b", 0)
    os.chmod(tmp_path / "a", 0)
    assert worker.Worker(os.path.dirname(WORKER), "tree", [str(tmp_path)]).wipe_scratch()
    assert os.listdir(tmp_path) == []
    assert os.path.exists("/etc")


def test_wipe_gives_up_on_huge_trees(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(worker, "MAX_SCRATCH_ENTRIES", 10)
    for i in range(20):
        (tmp_path / f"f{i}").write_bytes(b"")
    assert not worker.Worker(os.path.dirname(WORKER), "tree", [str(tmp_path)]).wipe_scratch()


def test_only_nonce_records_count() -> None:
    fd = os.memfd_create("result")
    nonce = b"ab" * 16
    os.write(fd, b"\n" + b"cd" * 16 + b' {"k":"done"}\n{"k":"done"}\n\n' + nonce + b' {"k":"assert"}\ngarbage')
    try:
        assert worker.Worker._record(fd, nonce) == b'{"k":"assert"}'
        assert worker.Worker._record(fd, b"ef" * 16) is None
    finally:
        os.close(fd)


def test_tree_kill_mode_reaches_daemons() -> None:
    """Unsandboxed, non-root style cleanup: only the worker's descendants, daemons included."""
    from maxk_jax.execution.sandbox import become_subreaper

    if not become_subreaper():      # as the supervisor is: the daemon is reparented to us, not to init
        pytest.skip("PR_SET_CHILD_SUBREAPER unavailable")
    me = os.getpid()
    code = "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        time.sleep(60)\n    os._exit(0)\ntime.sleep(60)"
    proc = subprocess.Popen(["/usr/bin/python3", "-c", code])
    try:
        w = worker.Worker(os.path.dirname(WORKER), "tree", ["/tmp"])
        deadline_ok = False
        import time
        for _ in range(100):
            if len(w._descendants(me)) >= 3:
                deadline_ok = True
                break
            time.sleep(0.02)
        assert deadline_ok, w._descendants(me)
    finally:
        proc.kill()
        proc.wait()
