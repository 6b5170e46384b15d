"""The agent tools on one sandbox: any tool by name, and typed helpers for
the common ones. Results are the tools' structured results, as dicts whose
keys the TypedDicts below name."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, TypedDict, cast

from ._paths import q, sandbox_path
from .models import ToolInfo

if TYPE_CHECKING:  # pragma: no cover
    from .sandbox import Sandbox

__all__ = [
    "Tools",
    "BashResult",
    "ReplResult",
    "ReplError",
    "EditResult",
    "ReadFileResult",
    "WriteFileResult",
    "LsResult",
    "GlobToolResult",
    "GrepToolResult",
    "SessionResult",
    "CodeResult",
]


class BashResult(TypedDict, total=False):
    """BashResult is ``sandbox_bash``'s result."""

    stdout: str
    stderr: str
    exit_code: int
    truncated: bool
    files: List[Any]
    """Workspace files the command created or changed."""
    file_count: int
    local_paths: Dict[str, str]
    """Each such file → its download route."""
    files_truncated: bool


class ReplError(TypedDict, total=False):
    """ReplError is the exception a REPL cell raised."""

    name: str
    """The exception's type: ZeroDivisionError."""
    value: str
    traceback: str


class ReplResult(TypedDict, total=False):
    """ReplResult is ``repl_execute``'s result."""

    stdout: str
    stderr: str
    value: str
    """The repr of the cell's last expression."""
    error: ReplError
    images: List[Any]
    """PNG/SVG images of matplotlib figures."""
    final: str
    execution_count: int
    duration_ms: int
    truncated: bool
    timed_out: bool
    restarted: bool
    message: str


class EditResult(TypedDict, total=False):
    """EditResult is ``edit_file``'s result: which match was replaced."""

    file_path: str
    replacements: int
    strategy: str
    """exact, whitespace, indentation or fuzzy."""
    score: float
    start_line: int
    end_line: int


class ReadFileResult(TypedDict, total=False):
    """ReadFileResult is ``read_file``'s result: numbered lines (cat -n)."""

    file_path: str
    content: str
    offset: int
    lines: int
    eof: bool
    total_lines: int
    cut_lines: int


class WriteFileResult(TypedDict, total=False):
    """WriteFileResult is ``write_file``'s result."""

    file_path: str
    bytes: int


class LsResult(TypedDict, total=False):
    """LsResult is ``ls``'s result."""

    path: str
    entries: List[Any]


class GlobToolResult(TypedDict, total=False):
    """GlobToolResult is the ``glob`` tool's result."""

    paths: List[str]
    truncated: bool


class GrepToolResult(TypedDict, total=False):
    """GrepToolResult is the ``grep`` tool's result, by ``output_mode``."""

    output_mode: str
    files: List[str]
    matches: List[Any]
    counts: List[Any]
    truncated: bool


class SessionResult(TypedDict, total=False):
    """SessionResult is the result of ``exec_command`` and ``write_stdin``:
    a PTY session's output after a cursor."""

    session_id: str
    pid: int
    stdout: str
    cursor: int
    status: str
    exit_code: Optional[int]
    alive: bool
    skipped: int
    more: bool


class CodeResult(TypedDict, total=False):
    """CodeResult is ``sandbox.exec``'s result."""

    stdout: str
    stderr: str
    exit_code: int


def _args(**kw: Any) -> Dict[str, Any]:
    return {k: v for k, v in kw.items() if v is not None}


class Tools:
    """Tools are the agent tools called on one sandbox
    (``sandbox.tools``). ``call`` calls any tool by name; the other
    methods are typed helpers for common ones. A bad call raises
    InvalidArgumentError naming the parameter; an unknown tool,
    NotFoundError; a key without the tool's capability,
    PermissionDeniedError."""

    def __init__(self, sandbox: "Sandbox") -> None:
        self._sb = sandbox

    def list(self) -> List[ToolInfo]:
        """Every tool, with its JSON Schemas."""
        return self._sb.client.tools()

    def call(self, name: str, args: Optional[Mapping[str, Any]] = None, **kwargs: Any) -> Dict[str, Any]:
        """Call tool ``name`` with ``args`` (and/or keyword arguments) and
        return its structured result."""
        body: Dict[str, Any] = dict(args or {})
        body.update(kwargs)
        c = self._sb.client
        wait = body.get("timeout_seconds") or body.get("timeout")
        d = c._call("POST", sandbox_path(self._sb.id) + "/tools/" + q(name), op="call_tool", sandbox_id=self._sb.id,
                    json_body=body, timeout=c._wait_timeout(float(wait) if isinstance(wait, (int, float)) else None))
        return dict(d or {})

    def sandbox_bash(self, command: str, *, timeout_seconds: Optional[int] = None, cwd: Optional[str] = None,
                     description: Optional[str] = None) -> BashResult:
        """Run a shell command; also lists the workspace files it changed."""
        return cast(BashResult, self.call("sandbox_bash", _args(command=command, timeout_seconds=timeout_seconds,
                                                                 cwd=cwd, description=description)))

    def repl_execute(self, code: str, *, timeout_seconds: Optional[int] = None, restart: bool = False) -> ReplResult:
        """Run ``code`` in the sandbox's persistent Python session: its
        variables live on between calls; ``value`` is the last expression's."""
        return cast(ReplResult, self.call("repl_execute", _args(code=code, timeout_seconds=timeout_seconds,
                                                                 restart=restart or None)))

    def run_code(self, runtime: str, code: str, *, stdin: Optional[str] = None, timeout_ms: Optional[int] = None,
                 secrets: Optional[Mapping[str, str]] = None) -> CodeResult:
        """The ``sandbox.exec`` tool: run ``code`` with ``runtime`` (``sh``,
        ``python3`` or ``node``)."""
        return cast(CodeResult, self.call("sandbox.exec", _args(runtime=runtime, code=code, stdin=stdin,
                                                                 timeout_ms=timeout_ms,
                                                                 secrets=dict(secrets) if secrets else None)))

    def read_file(self, file_path: str, *, offset: Optional[int] = None, limit: Optional[int] = None) -> ReadFileResult:
        """Read lines of a text file, numbered as ``cat -n`` does."""
        return cast(ReadFileResult, self.call("read_file", _args(file_path=file_path, offset=offset, limit=limit)))

    def write_file(self, file_path: str, content: str) -> WriteFileResult:
        """Create a new file (an existing one is refused: use ``edit_file``)."""
        return cast(WriteFileResult, self.call("write_file", _args(file_path=file_path, content=content)))

    def edit_file(self, file_path: str, old_string: str, new_string: str, *, replace_all: bool = False) -> EditResult:
        """Replace ``old_string`` by ``new_string`` in a file; an ambiguous or
        missing match is refused and nothing is written."""
        return cast(EditResult, self.call("edit_file", _args(file_path=file_path, old_string=old_string,
                                                               new_string=new_string, replace_all=replace_all or None)))

    def ls(self, path: Optional[str] = None) -> LsResult:
        """The entries of a directory (default ``/workspace``)."""
        return cast(LsResult, self.call("ls", _args(path=path)))

    def glob(self, pattern: str, path: Optional[str] = None) -> GlobToolResult:
        """Paths matching a glob pattern."""
        return cast(GlobToolResult, self.call("glob", _args(pattern=pattern, path=path)))

    def grep(self, pattern: str, path: Optional[str] = None, *, glob: Optional[str] = None,
             output_mode: Optional[str] = None, regex: Optional[bool] = None,
             ignore_case: Optional[bool] = None) -> GrepToolResult:
        """Search files for ``pattern`` (literal unless ``regex``);
        ``output_mode`` is ``files_with_matches``, ``content`` or ``count``."""
        return cast(GrepToolResult, self.call("grep", _args(pattern=pattern, path=path, glob=glob,
                                                             output_mode=output_mode, regex=regex,
                                                             ignore_case=ignore_case)))

    def exec_command(self, command: str, *, rows: Optional[int] = None, cols: Optional[int] = None,
                     grace_seconds: Optional[float] = None) -> SessionResult:
        """Run a command in a PTY: a quick one returns its output and exit
        code, a long one a ``session_id`` for ``write_stdin``."""
        return cast(SessionResult, self.call("exec_command", _args(command=command, rows=rows, cols=cols,
                                                                    grace_seconds=grace_seconds)))

    def write_stdin(self, session_id: str, input: str = "", *, since: Optional[int] = None,
                    wait_seconds: Optional[float] = None) -> SessionResult:
        """Type ``input`` into a PTY session (``""`` only reads) and return
        the output after the cursor."""
        return cast(SessionResult, self.call("write_stdin", _args(session_id=session_id, input=input, since=since,
                                                                   wait_seconds=wait_seconds)))
