"""GET JSON from a trace backend's HTTP API: timeouts, auth headers, errors that say what failed.

Only the standard library (``urllib``), so reading from Jaeger, Tempo or Phoenix needs no extra
package. Headers (tokens) are sent and never logged or put into error messages.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any

#: Extra headers for every backend request, ``key=value`` pairs separated by commas (the
#: format of OTEL_EXPORTER_OTLP_HEADERS; values may be percent-encoded).
HEADERS_ENV = "AGENTTRACE_EXPORT_HEADERS"
#: A bearer token for every backend request (sent as ``Authorization: Bearer <token>``).
TOKEN_ENV = "AGENTTRACE_EXPORT_TOKEN"

_EXCERPT = 200


class BackendError(RuntimeError):
    """A backend request failed; the message names the URL (never the headers) and why."""

    def __init__(self, message: str, *, url: str, status: int | None = None) -> None:
        super().__init__(message)
        self.url = url
        self.status = status


def parse_headers(text: str) -> dict[str, str]:
    """``"k1=v1,k2=v2"`` (values percent-decoded) -> dict; raises ValueError naming the bad
    pair without showing its value."""
    headers: dict[str, str] = {}
    for index, pair in enumerate(part for part in text.split(",") if part.strip()):
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"header #{index + 1} is not key=value")
        headers[key.strip()] = urllib.parse.unquote(value.strip())
    return headers


def request_headers(
    headers: Mapping[str, str] | None = None, token: str | None = None
) -> dict[str, str]:
    """The headers to send: environment (HEADERS_ENV, TOKEN_ENV) overridden by arguments."""
    result = parse_headers(os.environ.get(HEADERS_ENV, ""))
    token = token or os.environ.get(TOKEN_ENV)
    if token:
        result["Authorization"] = f"Bearer {token}"
    result.update(headers or {})
    return result


class JsonClient:
    """GET requests to one backend, JSON answers."""

    def __init__(
        self,
        base_url: str,
        *,
        headers: Mapping[str, str] | None = None,
        token: str | None = None,
        timeout: float = 30.0,
    ) -> None:
        parsed = urllib.parse.urlsplit(base_url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.headers = {"Accept": "application/json", **request_headers(headers, token)}
        self.timeout = timeout

    def url(self, path: str, params: Mapping[str, Any] | None = None) -> str:
        query = urllib.parse.urlencode(
            [(k, v) for k, v in (params or {}).items() if v is not None], doseq=True
        )
        return f"{self.base_url}{path}" + (f"?{query}" if query else "")

    def get(
        self, path: str, params: Mapping[str, Any] | None = None, *, missing_ok: bool = False
    ) -> Any:
        """The decoded JSON answer; None for a 404 when ``missing_ok``."""
        url = self.url(path, params)
        request = urllib.request.Request(url, headers=self.headers, method="GET")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                body = response.read()
        except urllib.error.HTTPError as error:
            if error.code == 404 and missing_ok:
                return None
            excerpt = _excerpt(error.read())
            raise BackendError(
                f"GET {url} answered {error.code} {error.reason}: {excerpt}",
                url=url,
                status=error.code,
            ) from None
        except (urllib.error.URLError, TimeoutError, OSError) as error:
            reason = getattr(error, "reason", error)
            raise BackendError(f"GET {url} failed: {reason}", url=url) from None
        try:
            return json.loads(body)
        except (ValueError, RecursionError) as error:  # (nested past the stack: not JSON here)
            raise BackendError(
                f"GET {url} did not answer JSON ({error}): {_excerpt(body)}", url=url
            ) from None


def _excerpt(body: bytes) -> str:
    text = body[:_EXCERPT].decode("utf-8", "replace").strip()
    return text + ("…" if len(body) > _EXCERPT else "") if text else "(empty body)"
