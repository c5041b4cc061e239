"""Bearer-token authentication between judge clients and ``maxk_jax.execution.serve``.

The token lives in a file that only its owner may read (mode ``0600`` or stricter: a file that
the group or others can read is refused, naming the path and its mode, never the content).
The service compares ``Authorization: Bearer <token>`` in constant time (``hmac.compare_digest``
of SHA-256 digests, so not even the length leaks); clients find the file through a ``token_file``
argument or the ``MAXK_JUDGE_TOKEN_FILE`` environment variable. No message here ever carries the
token itself.
"""
import hashlib
import hmac
import ipaddress
import os
import stat

TOKEN_FILE_ENV = "MAXK_JUDGE_TOKEN_FILE"
CA_FILE_ENV = "MAXK_JUDGE_CA_FILE"
MIN_TOKEN_CHARS = 16
UNAUTHORIZED_BODY = {"error": "missing or invalid bearer token (Authorization: Bearer <token>)",
                     "field": "authorization"}


class TokenFileError(ValueError):
    """The token file is missing, readable by others, empty or too short (the token is never named)."""


class JudgeAuthError(PermissionError):
    """A judge service refused the client's credentials (HTTP 401)."""


def read_token_file(path: str) -> str:
    """The token in ``path`` (surrounding whitespace stripped); TokenFileError naming the problem.

    Refuses a path that is empty, a symbolic link or not a regular file (checked with ``lstat``
    before opening, so a FIFO never blocks the caller; the open is non-blocking too), a file
    readable or writable by group or others (``chmod 600 PATH``), and content that is empty,
    non-ASCII, holds control characters or whitespace, or has fewer than MIN_TOKEN_CHARS characters.
    """
    if not isinstance(path, str) or not path:
        raise TokenFileError(f"token file must be a non-empty path, got {path!r}")
    try:
        info = os.lstat(path)
    except OSError as err:
        raise TokenFileError(f"token file {path}: cannot open ({err.strerror})") from None
    if stat.S_ISLNK(info.st_mode):
        raise TokenFileError(f"token file {path}: cannot open (a symbolic link; name the file itself)")
    if not stat.S_ISREG(info.st_mode):
        raise TokenFileError(f"token file {path} is not a regular file")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as err:
        raise TokenFileError(f"token file {path}: cannot open ({err.strerror})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise TokenFileError(f"token file {path} is not a regular file")
        mode = stat.S_IMODE(info.st_mode)
        if mode & 0o077:
            raise TokenFileError(f"token file {path} has mode {mode:#o}: group or others can access it; "
                                 f"chmod 600 {path}")
        data = os.read(fd, 65536)
    finally:
        os.close(fd)
    try:
        token = data.decode("ascii").strip()
    except UnicodeDecodeError:
        raise TokenFileError(f"token file {path} holds non-ASCII bytes; use e.g. `openssl rand -hex 32`") from None
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in token if not c.isspace()):
        raise TokenFileError(f"token file {path} holds control characters; use e.g. `openssl rand -hex 32 > FILE`")
    if len(token) < MIN_TOKEN_CHARS or any(c.isspace() for c in token):
        raise TokenFileError(f"token file {path} must hold one token of at least {MIN_TOKEN_CHARS} characters "
                             "without whitespace (e.g. `openssl rand -hex 32 > FILE`)")
    return token


def client_token(token_file: str | None) -> str | None:
    """The token a client sends: from ``token_file``, else from $MAXK_JUDGE_TOKEN_FILE, else None.
    An explicit empty ``token_file`` is refused (TokenFileError), not read as "no token"."""
    if token_file is not None and not token_file:
        raise TokenFileError("token_file must be a non-empty path, got ''")
    path = token_file or os.environ.get(TOKEN_FILE_ENV) or None
    return None if path is None else read_token_file(path)


class BearerCheck:
    """Constant-time check of an ``Authorization`` header value against the service's token."""

    def __init__(self, token: str):
        if not isinstance(token, str) or len(token) < MIN_TOKEN_CHARS:
            raise ValueError(f"the service token must be a string of at least {MIN_TOKEN_CHARS} characters")
        self._digest = hashlib.sha256(token.encode("utf-8")).digest()

    def __repr__(self) -> str:          # never the token or its digest
        return "BearerCheck(<token>)"

    def allows(self, header: str | bytes | None) -> bool:
        """True if ``header`` is ``Bearer <the token>`` (scheme case-insensitive)."""
        if isinstance(header, bytes):
            header = header.decode("latin-1")
        scheme, _, given = (header or "").strip().partition(" ")
        offered = hashlib.sha256(given.strip().encode("utf-8", "surrogateescape")).digest()
        return hmac.compare_digest(offered, self._digest) and scheme.lower() == "bearer"


def is_loopback(host: str) -> bool:
    """True if ``host`` (an address or ``localhost``) only listens on the loopback interface."""
    if host.lower() in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False          # a host name other than localhost, "", "0.0.0.0", "::" ...
