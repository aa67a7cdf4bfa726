"""Ripple's exception hierarchy, translated to the JSON error shape at the HTTP boundary.

RippleError                      root; carries an HTTP status hint and an error code
+-- ConfigError                  bad configuration (400 when it reaches HTTP at all)
+-- RequestError                 the caller misused the API: 400/401/403/404/409/413
+-- UnavailableError             no leader, not ready, or outcome unknown: 503 + Retry-After
+-- ClientError                  raised by coordinator.client for a failed remote call

Rejected commands from the state machine become RequestError with the machine's code.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ClientError",
    "ConfigError",
    "RequestError",
    "RippleError",
    "UnavailableError",
]


class RippleError(Exception):
    status = 500
    code = "internal"

    def __init__(
        self,
        message: str,
        *,
        field: str | None = None,
        code: str | None = None,
        status: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        if code is not None:
            self.code = code
        if status is not None:
            self.status = status

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"error": self.code, "message": self.message}
        if self.field is not None:
            body["field"] = self.field
        return body


class ConfigError(RippleError):
    status = 400
    code = "invalid_config"


class RequestError(RippleError):
    status = 400
    code = "invalid"


class UnavailableError(RippleError):
    status = 503
    code = "unavailable"

    def __init__(self, message: str, *, retry_after_s: int = 1, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.retry_after_s = retry_after_s


class ClientError(RippleError):
    code = "client"
