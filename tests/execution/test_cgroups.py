"""Per-slot cgroups: owner tags, a slot group's limit and counters, stale groups of dead owners."""
import os
import subprocess
import sys

import pytest

from maxk_jax.execution import cgroups


def _dead_tag() -> str:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    tag = cgroups.owner_tag(proc.pid)
    proc.kill()
    proc.wait(timeout=30)
    return tag


def test_owner_tags() -> None:
    assert cgroups.owner_alive(cgroups.owner_tag())
    assert not cgroups.owner_alive(_dead_tag())
    assert cgroups.owner_alive("not-a-tag")          # unknown names are never judged dead


@pytest.fixture
def bases():
    found, reason = cgroups.probe()
    if found is None:
        pytest.skip(f"per-slot cgroups unavailable on this host: {reason}")
    return found


def test_slot_group_limit_counters_and_cleanup(bases) -> None:
    group_set = cgroups.CgroupSet(bases, pids_max=16, slots=1)
    slot = group_set.slot(0)
    slot.begin(64 << 20)
    assert int(open(os.path.join(slot.paths["memory"], "memory.limit_in_bytes")).read()) == 64 << 20
    assert open(os.path.join(slot.paths["pids"], "pids.max")).read().strip() == "16"
    period = int(open(os.path.join(slot.paths["cpu"], "cpu.cfs_period_us")).read())
    assert int(open(os.path.join(slot.paths["cpu"], "cpu.cfs_quota_us")).read()) == period     # one CPU
    code = ("import os, sys\nfor fd in map(int, sys.argv[1:]):\n    os.write(fd, b'0')\n"
            "x = bytearray(200 << 20)")
    proc = subprocess.run([sys.executable, "-c", code, *map(str, slot.fds)], pass_fds=slot.fds, timeout=60,
                          capture_output=True)
    counters = slot.end()
    assert proc.returncode == -9 and counters["oom_kills"] == 1 and counters["peak_bytes"] >= 60 << 20, counters
    slot.begin(64 << 20)
    assert slot.end()["oom_kills"] == 0
    group_set.close()
    assert not any(os.path.exists(p) for p in list(slot.paths.values()) + list(group_set.roots.values()))


def test_stale_groups_of_dead_owners_are_removed(bases) -> None:
    stale = {c: os.path.join(b, f"{cgroups.PREFIX}{_dead_tag()}_0") for c, b in bases.items()}
    for path in stale.values():
        os.makedirs(os.path.join(path, "slot0"))
    live = cgroups.CgroupSet(bases, pids_max=8)
    try:
        assert sorted(live.stale_removed) == sorted(stale.values())
        assert all(os.path.isdir(p) for p in live.roots.values())
    finally:
        live.close()


READ_64MB = ("import os, sys\nfor fd in map(int, sys.argv[1:]):\n    os.write(fd, b'0')\nwant, got = 64 << 20, 0\n"
             "for root, _, names in os.walk('/usr/lib'):\n    for name in names:\n        try:\n"
             "            fd = os.open(os.path.join(root, name), os.O_RDONLY)\n        except OSError:\n"
             "            continue\n        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)\n"
             "        while got < want and (chunk := os.read(fd, 1 << 20)):\n            got += len(chunk)\n"
             "        os.close(fd)\n    if got >= want:\n        break\nprint(got >> 20)")


def test_file_cache_is_measured_and_reclaimed_before_the_next_test(bases) -> None:
    """A reader's page cache stays charged to its group: ``end()`` names it, the next ``begin()``
    empties the group, so the next test's peak starts from (almost) nothing."""
    group_set = cgroups.CgroupSet(bases, pids_max=16, slots=1)
    try:
        slot = group_set.slot(0)
        slot.begin(512 << 20)
        proc = subprocess.run([sys.executable, "-c", READ_64MB, *map(str, slot.fds)], pass_fds=slot.fds, timeout=120,
                              capture_output=True, text=True)
        counters = slot.end()
        assert proc.returncode == 0 and proc.stdout.strip() == "64", proc.stderr
        assert counters["file_cache_bytes"] >= 48 << 20 and counters["peak_bytes"] >= counters["file_cache_bytes"]
        slot.begin(512 << 20)
        assert slot.usage() < 8 << 20 and slot.end()["peak_bytes"] < 8 << 20, slot.stat()
    finally:
        group_set.close()
