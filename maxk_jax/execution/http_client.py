"""Client backend of one or more judge services (``make_executor("http://host:port[,...]")``).

Each service is ``python -m maxk_jax.execution.serve``. Submissions are validated locally first
(ValueError naming the field); large batches are split into chunks of ``max_batch`` and spread
across the URLs; failed calls are retried with backoff (honouring Retry-After) on the next URL,
a 413 splits the chunk in half. If every attempt fails, the affected submissions come back with
status ``sandbox_error`` and reward None -- never a silent 0.

Authentication: ``token_file`` (else ``$MAXK_JUDGE_TOKEN_FILE``) names the file holding the bearer
token of ``serve --token_file``; an HTTP 401 raises :class:`JudgeAuthError` with one line (no retry:
it is a configuration error). HTTPS URLs are verified against the system CAs or ``ca_file`` (else
``$MAXK_JUDGE_CA_FILE``), e.g. a self-signed service certificate.
"""
import concurrent.futures
import itertools
import json
import os
import ssl
import threading
import time
from collections.abc import Sequence

import httpx

from maxk_jax.execution import schema
from maxk_jax.execution.auth import CA_FILE_ENV, TOKEN_FILE_ENV, JudgeAuthError, client_token
from maxk_jax.execution.executor import Executor, JudgeResult, SubmissionDict, sandbox_error_result


class HttpExecutor(Executor):
    """Client of one or more ``maxk_jax.execution.serve`` services."""

    def __init__(self, urls: Sequence[str] | str, *, retries: int = 4, backoff_s: float = 0.25, max_batch: int = 256,
                 timeout_s: float | None = None, connect_timeout_s: float = 5.0, token_file: str | None = None,
                 ca_file: str | None = None):
        urls = [u.strip().rstrip("/") for u in (urls.split(",") if isinstance(urls, str) else urls) if u.strip()]
        if not urls:
            raise ValueError("HttpExecutor needs at least one service URL")
        for url in urls:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"service URL must start with http:// or https://, got {url!r}")
        if retries < 0 or max_batch < 1:
            raise ValueError(f"retries must be >= 0 and max_batch >= 1, got {retries}, {max_batch}")
        self.urls, self.retries, self.backoff_s, self.max_batch = urls, retries, backoff_s, max_batch
        self.timeout_s = timeout_s
        token = client_token(token_file)
        self.authenticated = token is not None
        self._secret = token            # only to scrub it from error messages (see _scrub)
        headers = {"authorization": f"Bearer {token}"} if token else {}
        ca_file = ca_file or os.environ.get(CA_FILE_ENV) or None
        if ca_file is not None and not os.path.isfile(ca_file):
            raise ValueError(f"ca_file {ca_file!r} is not a file")
        verify = ssl.create_default_context(cafile=ca_file) if ca_file else True
        self._client = httpx.Client(timeout=httpx.Timeout(timeout_s or 60.0, connect=connect_timeout_s),
                                    limits=httpx.Limits(max_connections=64, max_keepalive_connections=16),
                                    headers=headers, verify=verify)
        self._next = itertools.count()
        self._lock = threading.Lock()
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=max(4, 2 * len(urls)),
                                                           thread_name_prefix="maxk-http")

    def _request_timeout(self, subs: list[schema.Submission]) -> float:
        if self.timeout_s is not None:
            return self.timeout_s
        return 30.0 + sum(s.limits.wall_s * len(s.tests) for s in subs)

    def _post(self, raw: list[SubmissionDict], subs: list[schema.Submission], first_url: int) -> list[JudgeResult]:
        """POST one chunk, retrying across URLs; sandbox_error results when all attempts fail."""
        try:
            body = json.dumps({"submissions": raw}, allow_nan=True).encode("utf-8")
        except (TypeError, ValueError) as err:
            raise ValueError(f"submissions cannot be sent as JSON (bytes are only accepted in-process): {err}") from None
        error = "no attempt made"
        for attempt in range(self.retries + 1):
            url = self.urls[(first_url + attempt) % len(self.urls)]
            try:
                response = self._client.post(f"{url}/v1/judge", content=body, timeout=self._request_timeout(subs),
                                             headers={"content-type": "application/json"})
            except httpx.HTTPError as err:
                error, delay = f"{url}: {type(err).__name__}: {self._scrub(str(err))}", self.backoff_s * 2 ** attempt
            else:
                if response.status_code == 200:
                    results = self._checked(response, subs)
                    if results is not None:
                        return results
                    error, delay = f"{url}: malformed response", self.backoff_s * 2 ** attempt
                elif response.status_code == 401:
                    raise JudgeAuthError(self._auth_message(url))
                elif response.status_code == 400:
                    raise ValueError(f"{url} rejected the request: {response.text[:500]}")
                elif response.status_code == 413 and len(subs) > 1:
                    half = len(subs) // 2
                    return (self._post(raw[:half], subs[:half], first_url)
                            + self._post(raw[half:], subs[half:], first_url + 1))
                elif response.status_code == 413:
                    raise ValueError(f"{url} refused submission {subs[0].id!r} as too large: {response.text[:300]}")
                else:
                    error = f"{url}: HTTP {response.status_code} {response.text[:200]}"
                    delay = self._retry_after(response, self.backoff_s * 2 ** attempt)
            if attempt < self.retries:
                time.sleep(min(delay, 30.0))
        return [sandbox_error_result(s, f"judge service unavailable after {self.retries + 1} attempts: {error}")
                for s in subs]

    def _scrub(self, text: str) -> str:
        """``text`` with the token (should a library quote the request's headers) replaced by ``<token>``."""
        return text.replace(self._secret, "<token>") if self._secret else text

    def _auth_message(self, url: str) -> str:
        if not self.authenticated:
            return (f"judge service {url} refused the request (HTTP 401): it needs a bearer token; give the "
                    f"client its token file (HttpExecutor(token_file=...) or ${TOKEN_FILE_ENV})")
        return (f"judge service {url} refused the request (HTTP 401): the token sent was not accepted; check that "
                f"the client's token file matches the service's --token_file")

    @staticmethod
    def _retry_after(response: httpx.Response, default: float) -> float:
        try:
            return max(default, float(response.headers.get("retry-after", default)))
        except ValueError:
            return default

    @staticmethod
    def _checked(response: httpx.Response, subs: list[schema.Submission]) -> list[JudgeResult] | None:
        try:
            results = response.json()["results"]
        except (ValueError, KeyError, TypeError):
            return None
        if not isinstance(results, list) or len(results) != len(subs):
            return None
        if any(not isinstance(r, dict) or r.get("id") != s.id for r, s in zip(results, subs)):
            return None
        return results

    def judge(self, submissions: Sequence[SubmissionDict]) -> list[JudgeResult]:
        """Validate locally, then judge chunks of ``max_batch`` concurrently across the services;
        S submissions -> S results in order."""
        subs = schema.parse_submissions(submissions)
        raw = list(submissions)
        chunks = [(raw[i:i + self.max_batch], subs[i:i + self.max_batch]) for i in range(0, len(raw), self.max_batch)]
        with self._lock:
            start = next(self._next)
        futures = [self._pool.submit(self._post, chunk_raw, chunk_subs, start + i)
                   for i, (chunk_raw, chunk_subs) in enumerate(chunks)]
        return [result for future in futures for result in future.result()]

    def health(self) -> list:
        """``GET /healthz`` of every service (an error dict for unreachable ones)."""
        report = []
        for url in self.urls:
            try:
                report.append(dict(self._client.get(f"{url}/healthz", timeout=5.0).json(), url=url))
            except (httpx.HTTPError, ValueError) as err:
                report.append({"url": url, "status": "unreachable", "error": self._scrub(str(err))})
        return report

    def close(self) -> None:
        """Close connections and the request pool."""
        self._pool.shutdown(wait=False)
        self._client.close()
