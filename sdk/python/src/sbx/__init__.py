"""sbx: the Python SDK of sbx, the self-hosted code-execution sandbox.

A client of the daemon's HTTP API /v1, in the standard library alone::

    from sbx import Sbx

    client = Sbx()                      # $SBX_URL and $SBX_API_KEY
    with client.create(timeout=300) as sb:
        r = sb.exec("echo hi; exit 3")
        assert r.exit_code == 3 and r.stdout == b"hi\\n"
        sb.files.write_text("a.txt", "hello")
        for ev in sb.exec_stream("cat a.txt; sleep 1; echo done"):
            print(ev.type, ev.data)

Every failure raises an :class:`SbxError` subclass named for the API's error
code (:class:`NotFoundError`, :class:`InvalidArgumentError`, …).
"""

from ._archive import ExtractResult
from ._stream import ExecStream
from .client import Sbx
from .errors import (
    AgentLostError,
    AlreadyExistsError,
    DaemonUnreachableError,
    DeadlineExceededError,
    FailedPreconditionError,
    InsufficientStorageError,
    InternalError,
    InvalidArgumentError,
    IsolationUnavailableError,
    NotFoundError,
    OutOfRangeError,
    PermissionDeniedError,
    ResourceExhaustedError,
    SbxError,
    StreamError,
    TimeoutError,
    UnauthenticatedError,
    UnavailableError,
    UnimplementedError,
)
from .files import Download, Files
from .models import (
    ArchiveResult,
    AuditRecord,
    BackendHealth,
    Event,
    ExecResult,
    FileContent,
    FileInfo,
    GlobResult,
    GrepMatch,
    GrepResult,
    Health,
    Isolation,
    KeyInfo,
    Limits,
    NetworkEvent,
    NetworkEvents,
    NetworkPolicy,
    PoolStatus,
    PreviewURL,
    ProcessInfo,
    SandboxInfo,
    SecretInfo,
    SkippedEntry,
    ToolInfo,
)
from .process import Process
from .sandbox import Sandbox
from .tools import Tools

__version__ = "0.1.0"

__all__ = [
    "Sbx",
    "Sandbox",
    "Process",
    "Files",
    "Tools",
    "Download",
    "ExecStream",
    "ExtractResult",
    # models
    "ArchiveResult",
    "AuditRecord",
    "BackendHealth",
    "Event",
    "ExecResult",
    "FileContent",
    "FileInfo",
    "GlobResult",
    "GrepMatch",
    "GrepResult",
    "Health",
    "Isolation",
    "KeyInfo",
    "Limits",
    "NetworkEvent",
    "NetworkEvents",
    "NetworkPolicy",
    "PoolStatus",
    "PreviewURL",
    "ProcessInfo",
    "SandboxInfo",
    "SecretInfo",
    "SkippedEntry",
    "ToolInfo",
    # errors
    "SbxError",
    "AgentLostError",
    "AlreadyExistsError",
    "DaemonUnreachableError",
    "DeadlineExceededError",
    "FailedPreconditionError",
    "InsufficientStorageError",
    "InternalError",
    "InvalidArgumentError",
    "IsolationUnavailableError",
    "NotFoundError",
    "OutOfRangeError",
    "PermissionDeniedError",
    "ResourceExhaustedError",
    "StreamError",
    "TimeoutError",
    "UnauthenticatedError",
    "UnavailableError",
    "UnimplementedError",
]
