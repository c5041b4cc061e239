"""Shared fixtures for the execution tests: a 2-slot embedded executor, in-thread HTTP servers."""
import os

# Set before any sandbox starts: the hostile corpus checks it never becomes visible inside.
os.environ.setdefault("MAXK_TEST_SECRET", "top-secret-canary-4f2a")

import socket  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

import pytest  # noqa: E402
import uvicorn  # noqa: E402

from maxk_jax.execution.embedded import EmbeddedExecutor  # noqa: E402
from maxk_jax.execution.service import HalfCloseProtocol  # noqa: E402


@pytest.fixture(scope="session")
def executor():
    """A 2-slot sandboxed embedded executor shared by the execution tests."""
    with EmbeddedExecutor(slots=2) as ex:
        yield ex


class ServerThread:
    """A uvicorn server for ``app`` on an ephemeral 127.0.0.1 port, run in a background thread."""

    def __init__(self, app):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", http=HalfCloseProtocol))   # as serve
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.01)

    def stop(self) -> None:
        """Shut the server down and wait for its thread."""
        self.server.should_exit = True
        self.thread.join(timeout=30)
        self.sock.close()


@pytest.fixture
def serve_app():
    """Factory ``serve_app(app) -> base URL``; every server started is stopped after the test."""
    servers = []

    def start(app) -> str:
        servers.append(ServerThread(app))
        return servers[-1].url

    yield start
    for server in servers:
        server.stop()
