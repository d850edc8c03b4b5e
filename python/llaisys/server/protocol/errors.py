"""API errors: one exception type the routes raise, one JSON shape the client sees.

Every error response is ``{"error": {"message", "type", "param", "code"}}`` (OpenAI's shape),
with extra fields only where a client needs numbers (``n_prompt_tokens`` and ``n_ctx`` for a
prompt beyond the context). ``type`` follows the status: 4xx are the caller's mistakes,
5xx ours.
"""

from __future__ import annotations

import json
from typing import Optional

# status -> OpenAI-style error type
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    409: "conflict_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    503: "service_unavailable_error",
    504: "timeout_error",
}


class APIError(Exception):
    """An error answered as JSON with `status`; raise it anywhere under a route."""

    def __init__(self, status: int, message: str, *, code: Optional[str] = None, param: Optional[str] = None,
                 headers: Optional[dict] = None, **extra):
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.param = param
        self.headers = dict(headers or {})  # e.g. Retry-After on 429
        self.extra = extra  # more fields of the error object (n_prompt_tokens, n_ctx)

    def body(self) -> dict:
        err = {"message": self.message, "type": ERROR_TYPES.get(self.status, "server_error" if self.status >= 500
                                                                  else "invalid_request_error"),
               "param": self.param, "code": self.code}
        err.update(self.extra)
        return {"error": err}

    def json_bytes(self) -> bytes:
        return json.dumps(self.body(), ensure_ascii=False).encode("utf-8")


def bad_request(message: str, param: Optional[str] = None, code: str = "invalid_value", **extra) -> APIError:
    return APIError(400, message, param=param, code=code, **extra)


def missing(param: str) -> APIError:
    return APIError(400, f"'{param}' is a required field", param=param, code="missing_required_parameter")


def not_found(message: str, code: str = "not_found", param: Optional[str] = None) -> APIError:
    return APIError(404, message, code=code, param=param)


def unavailable(message: str, code: str = "unavailable", retry_after: Optional[int] = None) -> APIError:
    headers = {"Retry-After": str(retry_after)} if retry_after else None
    return APIError(503, message, code=code, headers=headers)


def too_many(message: str, code: str, retry_after: int) -> APIError:
    return APIError(429, message, code=code, headers={"Retry-After": str(max(1, int(retry_after)))})


def escape_controls(text: str) -> str:
    """`text` with control characters (newlines, ESC, ...) written as escapes: a log line stays
    one line and a client cannot forge log entries or terminal sequences."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)
