"""One HTTP request from a test or a benchmark, with nothing done behind its back.

`call` uses http.client directly, so a 307 comes back as a 307 (a redirect is never
followed unless the caller follows it) and the connection is closed after each request.
A JSON answer is parsed; any other body comes back as text.
"""

from __future__ import annotations

import http.client
import json
import ssl
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

__all__ = ["HTTP_TIMEOUT_S", "Reply", "call"]

HTTP_TIMEOUT_S = 10.0


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: Any


def call(
    method: str,
    url: str,
    body: Any = None,
    *,
    token: str | None = None,
    headers: dict[str, str] | None = None,
    raw: bytes | None = None,
    timeout_s: float = HTTP_TIMEOUT_S,
    context: ssl.SSLContext | None = None,
) -> Reply:
    """One request; https:// URLs are verified with `context` (a test CA's)."""
    parts = urlsplit(url)
    if parts.hostname is None:
        raise ValueError(f"no host in {url!r}")
    conn: http.client.HTTPConnection
    if parts.scheme == "https":
        conn = http.client.HTTPSConnection(
            parts.hostname, parts.port, timeout=timeout_s, context=context
        )
    else:
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout_s)
    hdrs = dict(headers or {})
    data = raw
    if body is not None:
        data = json.dumps(body).encode()
        hdrs["Content-Type"] = "application/json"
    if token:
        hdrs["Authorization"] = f"Bearer {token}"
    path = parts.path + (f"?{parts.query}" if parts.query else "")
    try:
        conn.request(method, path, body=data, headers=hdrs)
        resp = conn.getresponse()
        payload = resp.read()
    finally:
        conn.close()
    try:
        parsed: Any = json.loads(payload) if payload else None
    except ValueError:
        parsed = payload.decode(errors="replace")
    return Reply(resp.status, {k: v for k, v in resp.getheaders()}, parsed)
