"""Sandbox slots: config validation, uid blocks, raw worker jobs, start failures, orphan reaping."""
import os
import subprocess
import time

import pytest

from maxk_jax.execution import sandbox as sb

LIMITS = {"cpu_s": 1, "wall_s": 2, "memory_bytes": 256 << 20, "output_bytes": 1 << 20, "nofile": 64, "nproc": 16}


def test_config_validation() -> None:
    assert sb.SandboxConfig().num_slots() == os.cpu_count()
    assert sb.SandboxConfig(slots=3).num_slots() == 3
    for bad in (0, -1, sb.MAX_SLOTS + 1, 1.5):
        with pytest.raises(ValueError, match="slots must be"):
            sb.SandboxConfig(slots=bad).num_slots()
    assert "bubblewrap not found" in sb.bwrap_usable(sb.SandboxConfig(bwrap="/nope"))
    assert "does not exist" in sb.bwrap_usable(sb.SandboxConfig(python="/nope/python3"))
    assert sb.bwrap_usable(sb.SandboxConfig()) is None


def test_bwrap_is_found_on_path(tmp_path, monkeypatch) -> None:
    """Not a hard-coded /usr/bin/bwrap (issue 57): the first ``bwrap`` on PATH, or a clear error naming PATH."""
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/nonexistent")
    assert sb.bwrap_path(sb.SandboxConfig()) == str(fake)
    monkeypatch.setenv("PATH", "/nonexistent")
    reason = sb.bwrap_usable(sb.SandboxConfig())
    assert "bubblewrap not found on PATH (/nonexistent)" in reason and "apt-get install bubblewrap" in reason


@pytest.mark.parametrize("value", [float("inf"), float("nan"), 1e7, 0.0, -1.0, True])
def test_grace_must_be_finite_and_bounded(value) -> None:
    with pytest.raises(ValueError, match=r"SandboxConfig.grace_s must be a finite number in \(0, 3600\]"):
        sb.SandboxConfig(grace_s=value)


def test_uid_blocks_are_exclusive() -> None:
    first, second = sb.UidBlock(300000), sb.UidBlock(300000)
    try:
        assert first.base != second.base
        assert first.owns(first.uid(5)) and not first.owns(second.uid(0))
    finally:
        first.release()
        second.release()
    third = sb.UidBlock(300000)
    assert third.base == first.base                      # released blocks are reused
    third.release()


@pytest.fixture
def staged():
    block = sb.UidBlock(300000)
    path = sb.stage_sources()
    yield block, path
    block.release()
    subprocess.run(["rm", "-rf", path], check=True)


def test_sources_are_staged_world_readable(staged) -> None:
    _, path = staged
    assert sorted(os.listdir(path)) == ["harness.py", "harness_assert.py", "protocol.py", "worker.py"]
    assert all(os.stat(os.path.join(path, n)).st_mode & 0o777 == 0o644 for n in os.listdir(path))


def test_raw_job_and_kill(staged) -> None:
    block, path = staged
    box = sb.Sandbox(0, sb.SandboxConfig(), path, block.uid(0), sandboxed=True)
    box.start()
    try:
        header, blobs = box.run({"op": "run", "mode": "stdio", "limits": LIMITS},
                                {"code": b"import os\nprint(os.getpid(), os.getuid(), input())", "stdin": b"hi"}, 30)
        assert header["exit_code"] == 0 and not header["timed_out"]
        pid, uid, word = blobs["stdout"].split()
        assert int(pid) > 1 and int(uid) == block.uid(0) and word == b"hi"
        assert b'"k":"exit"' in blobs["record"]
        assert len(sb.processes_of(block)) == 2          # bwrap + worker, the test child is gone
    finally:
        box.kill()
    assert not box.alive()
    deadline = time.monotonic() + 5
    reaper = sb.Reaper(block, interval_s=0.05)
    while sb.processes_of(block) and time.monotonic() < deadline:
        time.sleep(0.05)
    reaper.stop()
    assert sb.processes_of(block) == []


def test_start_failure_carries_the_reason(staged) -> None:
    block, path = staged
    box = sb.Sandbox(0, sb.SandboxConfig(python="/usr/bin/no-such-python", start_timeout_s=10), path,
                     block.uid(0), sandboxed=True)
    with pytest.raises(sb.SandboxFailure, match="no-such-python"):
        box.start()
    assert not box.alive()


def test_reaper_collects_orphans_of_sandbox_uids(staged) -> None:
    block, _ = staged
    assert sb.become_subreaper()
    uid = block.uid(7)
    code = "import os, time\nif os.fork() == 0:\n    time.sleep(0.3)\n    os._exit(0)\nos._exit(0)"
    subprocess.run(["/usr/bin/python3", "-c", code], user=uid, group=uid, extra_groups=[], check=True)
    reaper = sb.Reaper(block, interval_s=3600)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not any(state == "Z" for _, _, state in sb.processes_of(block)):
        time.sleep(0.05)
    assert [state for _, _, state in sb.processes_of(block)] == ["Z"]
    assert reaper.reap_once() == 1
    assert sb.processes_of(block) == []
    reaper.stop()
