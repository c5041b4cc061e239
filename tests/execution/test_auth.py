"""Bearer tokens: token files, the constant-time check, the service's 401s and the client's one line."""
import logging
import os
import threading

import httpx
import pytest

from maxk_jax.execution.auth import (TOKEN_FILE_ENV, BearerCheck, JudgeAuthError, TokenFileError, client_token,
                                     is_loopback, read_token_file)
from maxk_jax.execution.http_client import HttpExecutor
from maxk_jax.execution.service import create_app

TOKEN = "0123456789abcdef-secret-token-value"
SUB = {"id": "s", "code": "print(int(input()) + 1)", "mode": "stdio", "tests": [{"stdin": "1", "expected": "2"}]}


def token_file(tmp_path, content: str = TOKEN, mode: int = 0o600, name: str = "token") -> str:
    path = tmp_path / name
    path.write_text(content + "\n")
    os.chmod(path, mode)
    return str(path)


def test_token_file_must_be_private_and_long(tmp_path) -> None:
    assert read_token_file(token_file(tmp_path)) == TOKEN
    assert read_token_file(token_file(tmp_path, mode=0o400, name="ro")) == TOKEN
    for mode in (0o640, 0o604, 0o644, 0o660):
        path = token_file(tmp_path, mode=mode, name=f"m{mode:o}")
        with pytest.raises(TokenFileError, match=f"mode {mode:#o}.*chmod 600") as err:
            read_token_file(path)
        assert TOKEN not in str(err.value) and path in str(err.value)
    for content in ("short", "two words but long enough"):
        with pytest.raises(TokenFileError, match="at least 16 characters") as err:
            read_token_file(token_file(tmp_path, content=content, name="bad"))
        assert content not in str(err.value)
    with pytest.raises(TokenFileError, match="cannot open"):
        read_token_file(str(tmp_path / "missing"))
    os.symlink(token_file(tmp_path), tmp_path / "link")
    with pytest.raises(TokenFileError, match="cannot open"):
        read_token_file(str(tmp_path / "link"))        # O_NOFOLLOW: no symlink to someone else's file


def test_fifos_control_bytes_and_empty_paths_are_refused(tmp_path, monkeypatch) -> None:
    """A FIFO is refused without being opened (no reader blocks on it), control bytes in the token are
    refused without echoing it, an explicit empty path is not "no token" (issue 58)."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    outcome = []
    reader = threading.Thread(target=lambda: outcome.append(_error_of(read_token_file, str(fifo))), daemon=True)
    reader.start()
    reader.join(timeout=30)
    assert outcome and "is not a regular file" in outcome[0], outcome       # no outcome: it blocked
    for control in ("\x01", "\x1b[2J", "\x7f", "\x00"):
        content = TOKEN[:8] + control + TOKEN[8:]
        with pytest.raises(TokenFileError, match="control characters") as err:
            read_token_file(token_file(tmp_path, content=content, name="ctl"))
        assert TOKEN[:8] not in str(err.value) and TOKEN[8:] not in str(err.value)
    with pytest.raises(TokenFileError, match="non-empty path"):
        read_token_file("")
    monkeypatch.setenv(TOKEN_FILE_ENV, token_file(tmp_path))
    with pytest.raises(TokenFileError, match="non-empty path"):
        client_token("")


def _error_of(function, *args) -> str:
    try:
        function(*args)
    except TokenFileError as err:
        return str(err)
    return "no error"


def test_client_errors_never_carry_the_token(tmp_path) -> None:
    with HttpExecutor("http://127.0.0.1:1", token_file=token_file(tmp_path), retries=0) as client:
        assert client._scrub(f"Illegal header value b'Bearer {TOKEN}'") == "Illegal header value b'Bearer <token>'"
        result, = client.judge([SUB])                   # nothing listens on port 1
        assert result["status"] == "sandbox_error" and TOKEN not in str(result)
        assert TOKEN not in str(client.health())


def test_bearer_check_and_loopback() -> None:
    check = BearerCheck(TOKEN)
    assert check.allows(f"Bearer {TOKEN}") and check.allows(f"bearer {TOKEN}".encode())
    for header in (None, "", TOKEN, f"Bearer {TOKEN}x", f"Basic {TOKEN}", "Bearer ", f"Bearer {TOKEN[:-1]}"):
        assert not check.allows(header), header
    assert TOKEN not in repr(check)
    with pytest.raises(ValueError):
        BearerCheck("short")
    assert all(map(is_loopback, ["127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"]))
    assert not any(map(is_loopback, ["0.0.0.0", "::", "", "10.0.0.5", "judge-a", "192.168.1.2"]))


def test_client_token_from_argument_or_environment(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv(TOKEN_FILE_ENV, raising=False)
    assert client_token(None) is None
    path = token_file(tmp_path)
    assert client_token(path) == TOKEN
    monkeypatch.setenv(TOKEN_FILE_ENV, path)
    assert client_token(None) == TOKEN
    monkeypatch.setenv(TOKEN_FILE_ENV, token_file(tmp_path, mode=0o644, name="open"))
    with pytest.raises(TokenFileError, match="chmod 600"):
        HttpExecutor("http://127.0.0.1:1")


def test_service_with_token_401s_and_client_carries_it(executor, serve_app, tmp_path, monkeypatch, caplog) -> None:
    monkeypatch.delenv(TOKEN_FILE_ENV, raising=False)
    url = serve_app(create_app(executor.supervisor, token=TOKEN))
    body = {"submissions": [SUB]}
    with caplog.at_level(logging.DEBUG):
        for headers in ({}, {"authorization": "Bearer wrong-token-0123456789"}, {"authorization": TOKEN},
                        {"authorization": f"Basic {TOKEN}"}):
            response = httpx.post(f"{url}/v1/judge", json=body, headers=headers, timeout=30)
            assert response.status_code == 401, (headers, response.text)
            assert response.json()["field"] == "authorization" and TOKEN not in response.text
            assert response.headers["www-authenticate"] == "Bearer"
        assert httpx.get(f"{url}/openapi.json").status_code == 401
        health = httpx.get(f"{url}/healthz")                       # liveness stays open
        assert health.status_code == 200 and TOKEN not in health.text
        ok = httpx.post(f"{url}/v1/judge", json=body, headers={"authorization": f"Bearer {TOKEN}"}, timeout=60)
        assert ok.status_code == 200 and ok.json()["results"][0]["reward"] == 1.0
        with HttpExecutor(url, token_file=token_file(tmp_path)) as client:
            assert client.judge([SUB])[0]["reward"] == 1.0
        with HttpExecutor(url, retries=3) as client:
            with pytest.raises(JudgeAuthError, match=r"HTTP 401\): it needs a bearer token.*MAXK_JUDGE_TOKEN_FILE"):
                client.judge([SUB])
        monkeypatch.setenv(TOKEN_FILE_ENV, token_file(tmp_path, content="another-token-0123456789", name="other"))
        with HttpExecutor(url) as client:
            with pytest.raises(JudgeAuthError, match="the token sent was not accepted") as err:
                client.judge([SUB])
            assert "\n" not in str(err.value) and "another-token" not in str(err.value)
    assert TOKEN not in caplog.text and "another-token" not in caplog.text
