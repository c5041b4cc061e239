"""Frame encoding between supervisor and worker: round trips, deadlines, malformed frames."""
import os
import struct
import time

import pytest

from maxk_jax.execution import protocol


def test_round_trip_with_binary_blobs() -> None:
    read_fd, write_fd = os.pipe()
    try:
        blobs = {"code": b"print(1)", "stdin": b"\xff\x00\r\n", "empty": b""}
        protocol.write_frame(write_fd, {"op": "run", "n": [1, 2]}, blobs)
        header, got = protocol.read_frame(read_fd, time.monotonic() + 5)
        assert header == {"op": "run", "n": [1, 2]}
        assert got == blobs
    finally:
        os.close(read_fd)
        os.close(write_fd)


def test_large_frame_through_nonblocking_pipe() -> None:
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    payload = os.urandom(3 << 20)
    pid = os.fork()
    if pid == 0:  # reader child echoes nothing, just drains and checks
        os.close(write_fd)
        try:
            _, blobs = protocol.read_frame(read_fd, time.monotonic() + 30)
            os._exit(0 if blobs["x"] == payload else 1)
        except BaseException:  # noqa: BLE001
            os._exit(2)
    os.close(read_fd)
    protocol.write_frame(write_fd, {}, {"x": payload}, time.monotonic() + 30)
    os.close(write_fd)
    assert os.waitpid(pid, 0)[1] == 0


def test_read_deadline_and_eof(monkeypatch) -> None:
    read_fd, write_fd = os.pipe()
    waits = []

    class Poller:                       # records how long the reader would wait (structure, not timing)
        def register(self, fd, events):
            assert fd == read_fd

        def poll(self, timeout_ms):
            waits.append(timeout_ms)
            return []                   # nothing arrived before the deadline

    try:
        with pytest.raises(protocol.ProtocolError, match="deadline"):
            protocol.read_frame(read_fd, time.monotonic() + 0.2)     # the real poll: the deadline fires
        with monkeypatch.context() as patch:
            patch.setattr(protocol.select, "poll", Poller)
            with pytest.raises(protocol.ProtocolError, match="deadline"):
                protocol.read_frame(read_fd, time.monotonic() + 0.2)
            with pytest.raises(protocol.ProtocolError, match="deadline"):
                protocol.read_frame(read_fd, time.monotonic() - 1)  # already past: no wait at all
        assert len(waits) == 1 and 1 <= waits[0] <= 200, waits     # the wait is what is left of the deadline
        os.close(write_fd)
        write_fd = None
        with pytest.raises(protocol.ProtocolError, match="closed"):
            protocol.read_frame(read_fd, time.monotonic() + 1)
    finally:
        os.close(read_fd)
        if write_fd is not None:
            os.close(write_fd)


def test_write_deadline_when_peer_does_not_read() -> None:
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    try:
        with pytest.raises(protocol.ProtocolError, match="deadline"):
            protocol.write_frame(write_fd, {}, {"x": b"0" * (4 << 20)}, time.monotonic() + 0.3)
    finally:
        os.close(read_fd)
        os.close(write_fd)


@pytest.mark.parametrize("raw", [
    struct.pack(">I", 5) + b"nojso",
    struct.pack(">I", 2) + b"[]",
    struct.pack(">I", 30) + b'{"blobs": [["x", -1]]}'.ljust(30),
    struct.pack(">I", protocol.MAX_HEADER_BYTES + 1),
])
def test_malformed_frames(raw: bytes) -> None:
    read_fd, write_fd = os.pipe()
    try:
        os.write(write_fd, raw)
        os.close(write_fd)
        write_fd = None
        with pytest.raises(protocol.ProtocolError):
            protocol.read_frame(read_fd, time.monotonic() + 1)
    finally:
        os.close(read_fd)
        if write_fd is not None:
            os.close(write_fd)
