"""Errors of the sbx SDK: one class per API error code.

Every failed call raises an :class:`SbxError` subclass chosen by the API's error
code (``not_found`` raises :class:`NotFoundError`, and so on). The error carries
what the daemon said: ``code``, HTTP ``status``, ``message``, ``op`` (the
operation that failed), ``sandbox_id`` and ``request_id`` (also in the daemon's
log). A daemon that cannot be reached at all raises
:class:`DaemonUnreachableError`.
"""

from __future__ import annotations

import builtins
import re
from typing import Any, Dict, Mapping, Optional, Type

__all__ = [
    "SbxError",
    "NotFoundError",
    "AlreadyExistsError",
    "InvalidArgumentError",
    "FailedPreconditionError",
    "PermissionDeniedError",
    "ResourceExhaustedError",
    "UnavailableError",
    "DaemonUnreachableError",
    "TimeoutError",
    "DeadlineExceededError",
    "OutOfRangeError",
    "IsolationUnavailableError",
    "AgentLostError",
    "InsufficientStorageError",
    "UnauthenticatedError",
    "UnimplementedError",
    "InternalError",
    "StreamError",
    "error_class",
]


class SbxError(Exception):
    """SbxError is the base of every error the SDK raises for a failed call.

    Attributes:
        code: the API's error code (``not_found``, ``invalid_argument``, …),
            ``internal`` for an unknown one.
        status: the HTTP status of the answer; 200 for an error that arrived
            inside a stream, 0 when no answer came.
        message: the daemon's message, written for the caller; it names the
            operation and sandbox (``get 3xq…: sandbox not found``).
        op: the operation that failed (``create``, ``exec``, ``read_file``…).
        sandbox_id: the sandbox the failure concerns, or None.
        request_id: the request's id in the daemon's log, or None.
        retry_after: seconds the daemon asked to wait before a retry (the
            ``Retry-After`` header), or None.
    """

    code: str = "internal"

    def __init__(
        self,
        message: str,
        *,
        code: Optional[str] = None,
        status: int = 0,
        op: Optional[str] = None,
        sandbox_id: Optional[str] = None,
        request_id: Optional[str] = None,
        retry_after: Optional[float] = None,
    ) -> None:
        super().__init__(message)
        self.message: str = message
        if code is not None:
            self.code = code
        self.status: int = status
        self.op: Optional[str] = op
        self.sandbox_id: Optional[str] = sandbox_id
        self.request_id: Optional[str] = request_id
        self.retry_after: Optional[float] = retry_after

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return "%s(code=%r, status=%r, message=%r, sandbox_id=%r)" % (
            type(self).__name__,
            self.code,
            self.status,
            self.message,
            self.sandbox_id,
        )


class NotFoundError(SbxError):
    """NotFoundError: no such sandbox, process, file, tool, key or secret (404).

    A sandbox of another API key reads exactly as an unknown one.
    """

    code = "not_found"


class AlreadyExistsError(SbxError):
    """AlreadyExistsError: the thing exists already, or an Idempotency-Key was
    reused with another request (409)."""

    code = "already_exists"


_FIELD = re.compile(r"invalid argument: ([A-Za-z0-9_.\[\]-]+): ")


class InvalidArgumentError(SbxError):
    """InvalidArgumentError: the request was refused as invalid (400).

    The daemon's message names the field; :attr:`field` holds it when the
    message has the usual ``invalid argument: <field>: why`` form, else None.
    """

    code = "invalid_argument"

    @property
    def field(self) -> Optional[str]:
        """The field the daemon's message names (``timeout``,
        ``network.mode``…), or None when it names none."""
        m = _FIELD.search(self.message)
        return m.group(1) if m else None


class FailedPreconditionError(SbxError):
    """FailedPreconditionError: the sandbox or process is in the wrong state
    for the call (409)."""

    code = "failed_precondition"


class PermissionDeniedError(SbxError):
    """PermissionDeniedError: the API key lacks the capability (403); the
    message says which (``access denied: sandbox.exec``)."""

    code = "permission_denied"


class ResourceExhaustedError(SbxError):
    """ResourceExhaustedError: a limit was reached (429): live sandboxes per
    key, create or exec rate. :attr:`retry_after` says how long to wait."""

    code = "resource_exhausted"


class UnavailableError(SbxError):
    """UnavailableError: the daemon cannot serve the call now (503), for
    instance a full admission queue; :attr:`retry_after` is often set."""

    code = "unavailable"


class DaemonUnreachableError(UnavailableError, builtins.ConnectionError):
    """DaemonUnreachableError: no answer from the daemon at all (refused,
    reset, unknown host, TLS failure). :attr:`status` is 0. It is also a
    builtin ``ConnectionError``."""


class TimeoutError(SbxError, builtins.TimeoutError):
    """TimeoutError: the call ran out of time (504 ``deadline_exceeded``), or
    the daemon did not answer within the client's request timeout (status 0).

    It is also the builtin ``TimeoutError``. A command that hits its own exec
    timeout is not an error: its result says ``reason == "timeout"``.
    """

    code = "deadline_exceeded"


DeadlineExceededError = TimeoutError
"""DeadlineExceededError is another name of :class:`TimeoutError`."""


class OutOfRangeError(SbxError):
    """OutOfRangeError: a request body or value is too large (413)."""

    code = "out_of_range"


class IsolationUnavailableError(SbxError):
    """IsolationUnavailableError: the host cannot apply an isolation layer the
    policy demands (503)."""

    code = "isolation_unavailable"


class AgentLostError(SbxError):
    """AgentLostError: the sandbox's agent died or stopped answering (502);
    the sandbox is in state ``error``."""

    code = "agent_lost"


class InsufficientStorageError(SbxError):
    """InsufficientStorageError: the daemon's disk is nearly full (507)."""

    code = "insufficient_storage"


class UnauthenticatedError(SbxError):
    """UnauthenticatedError: no API key, or an unknown or revoked one (401)."""

    code = "unauthenticated"


class UnimplementedError(SbxError):
    """UnimplementedError: the daemon or backend does not offer the call
    (501, or 405 for a method a path does not serve)."""

    code = "unimplemented"


class InternalError(SbxError):
    """InternalError: the daemon failed (500), or answered with an unknown
    code; the cause is in its log under :attr:`request_id`."""

    code = "internal"


class StreamError(UnavailableError):
    """StreamError: a streamed answer (exec, attach, download) broke off or
    could not be decoded: the connection ended before the result, or a frame
    was malformed."""


_BY_CODE: Dict[str, Type[SbxError]] = {
    c.code: c
    for c in (
        NotFoundError,
        AlreadyExistsError,
        InvalidArgumentError,
        FailedPreconditionError,
        PermissionDeniedError,
        ResourceExhaustedError,
        UnavailableError,
        TimeoutError,
        OutOfRangeError,
        IsolationUnavailableError,
        AgentLostError,
        InsufficientStorageError,
        UnauthenticatedError,
        UnimplementedError,
        InternalError,
    )
}

# Codes guessed from the status of an answer without an error body (a
# proxy's page, say), as the Go client does.
_BY_STATUS: Dict[int, str] = {
    400: "invalid_argument",
    401: "unauthenticated",
    403: "permission_denied",
    404: "not_found",
    405: "unimplemented",
    408: "deadline_exceeded",
    409: "failed_precondition",
    413: "out_of_range",
    429: "resource_exhausted",
    501: "unimplemented",
    502: "unavailable",
    503: "unavailable",
    504: "deadline_exceeded",
    507: "insufficient_storage",
}


def error_class(code: str) -> Type[SbxError]:
    """Return the error class of API error code ``code`` (InternalError for
    a code this SDK does not know)."""
    return _BY_CODE.get(code, InternalError)


def _from_detail(
    detail: Mapping[str, Any],
    *,
    status: int,
    op: str,
    sandbox_id: Optional[str],
    request_id: Optional[str] = None,
    retry_after: Optional[float] = None,
) -> SbxError:
    """Build the error an ``{"code", "message", …}`` object describes."""
    code = str(detail.get("code") or "internal")
    cls = error_class(code)
    return cls(
        str(detail.get("message") or code),
        code=code,
        status=status,
        op=str(detail.get("op") or op),
        sandbox_id=str(detail.get("sandbox_id") or "") or sandbox_id,
        request_id=str(detail.get("request_id") or "") or request_id,
        retry_after=retry_after,
    )


def _from_status(
    status: int,
    body: str,
    *,
    op: str,
    sandbox_id: Optional[str],
    request_id: Optional[str],
    retry_after: Optional[float],
) -> SbxError:
    """Build the error of an answer whose body is not the API's error."""
    code = _BY_STATUS.get(status, "internal")
    line = body.strip().split("\n", 1)[0][:200]
    return error_class(code)(
        "%s: HTTP %d: %s" % (op, status, line),
        code=code,
        status=status,
        op=op,
        sandbox_id=sandbox_id,
        request_id=request_id,
        retry_after=retry_after,
    )
