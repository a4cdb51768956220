"""Errors as the OpenAI API answers them: an HTTP status and a JSON body
``{"error": {"message", "type", "param", "code"}}``, where ``param`` names the request field
at fault (``"max_tokens"``, ``"messages[1].content"``) or is null."""

from __future__ import annotations

from typing import Any, Dict, Optional

__all__ = ["APIError", "error_body"]


def error_body(message: str, type: str, param: Optional[str] = None, code: Optional[str] = None) -> Dict[str, Any]:
    """The JSON body of an error answer."""
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


class APIError(Exception):
    """A request the server answers with ``status`` and an OpenAI-style error body.

    ``type`` is OpenAI's error type (``invalid_request_error`` for a 4xx, ``server_error``
    for a 5xx); ``param`` the field at fault; ``code`` a short machine-readable reason
    (``model_not_found``, ``context_length_exceeded``, ``invalid_api_key``, ...);
    ``headers`` extra response headers (``Retry-After`` on a 503).
    """

    def __init__(self, status: int, message: str, *, param: Optional[str] = None, code: Optional[str] = None,
                 type: Optional[str] = None, headers: Optional[Dict[str, str]] = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.type = type or ("invalid_request_error" if status < 500 else "server_error")
        self.headers = dict(headers or {})

    def body(self) -> Dict[str, Any]:
        return error_body(self.message, self.type, self.param, self.code)


def invalid(message: str, param: Optional[str], code: Optional[str] = None) -> APIError:
    """A 400 naming the field ``param``."""
    return APIError(400, message, param=param, code=code)
