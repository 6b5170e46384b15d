"""Processes in a sandbox: the exec request, and the handle of a process
started in the background (wait, stdin, signal, attach)."""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING, Any, Dict, Mapping, Optional, Sequence, Tuple, Union

from ._paths import process_path
from ._stream import FRAMES, NDJSON, ExecStream
from .models import ProcessInfo

if TYPE_CHECKING:  # pragma: no cover
    from .sandbox import Sandbox

__all__ = ["Process", "Command", "exec_body", "stream_accept"]

Command = Union[str, Sequence[str]]
"""A shell command line (run by ``/bin/sh -c``), or a program and its
arguments (run verbatim, without a shell)."""


def exec_body(
    command: Command,
    *,
    cwd: Optional[str] = None,
    env: Optional[Mapping[str, str]] = None,
    secrets: Optional[Mapping[str, str]] = None,
    stdin: Union[str, bytes, None] = None,
    timeout: Optional[int] = None,
    output_limit_bytes: Optional[int] = None,
    tag: Optional[str] = None,
    pty: Optional[Tuple[int, int]] = None,
    keep_stdin_open: bool = False,
    stream_bounded: bool = False,
    background: bool = False,
) -> Dict[str, Any]:
    """The JSON body of ``POST /v1/sandboxes/{id}/exec``."""
    body: Dict[str, Any] = {}
    if isinstance(command, str):
        body["command"] = command
    elif isinstance(command, (bytes, bytearray)):
        raise TypeError("command must be str or a sequence of str, not bytes")
    else:
        body["argv"] = [str(a) for a in command]
    if cwd is not None:
        body["cwd"] = cwd
    if env is not None:
        body["env"] = dict(env)
    if secrets is not None:
        body["secrets"] = dict(secrets)
    if isinstance(stdin, str):
        body["stdin"] = stdin
    elif stdin is not None:
        body["stdin_base64"] = base64.b64encode(bytes(stdin)).decode("ascii")
    if timeout is not None:
        body["timeout"] = timeout
    if output_limit_bytes is not None:
        body["output_limit_bytes"] = output_limit_bytes
    if tag is not None:
        body["tag"] = tag
    if pty is not None:
        body["pty"] = {"rows": pty[0], "cols": pty[1]}
    if keep_stdin_open:
        body["keep_stdin_open"] = True
    if stream_bounded:
        body["stream_bounded"] = True
    if background:
        body["background"] = True
    return body


def stream_accept(format: str) -> str:
    """The Accept header of a stream in ``format``: ``frames`` (binary,
    the default and fastest) or ``ndjson``."""
    if format == "frames":
        return FRAMES
    if format == "ndjson":
        return NDJSON
    raise ValueError("stream format %r is not frames or ndjson" % format)


class Process:
    """Process is a handle on a process in a sandbox, by its process id
    (``exec_background`` returns one; ``Sandbox.process`` makes one)."""

    def __init__(self, sandbox: "Sandbox", process_id: str, pid: Optional[int] = None) -> None:
        self.sandbox = sandbox
        """The sandbox the process runs in."""
        self.process_id = process_id
        """The agent's id of the process, for the process routes."""
        self.pid = pid
        """The PID inside the sandbox, when known."""

    def __repr__(self) -> str:
        return "Process(%r, pid=%r, sandbox=%r)" % (self.process_id, self.pid, self.sandbox.id)

    @property
    def _path(self) -> str:
        return process_path(self.sandbox.id, self.process_id)

    def info(self) -> ProcessInfo:
        """Describe the process: its state and, once it exited, its result."""
        c = self.sandbox.client
        return ProcessInfo.from_json(c._call("GET", self._path, op="get_process", sandbox_id=self.sandbox.id))

    def wait(self, timeout: int = 60) -> ProcessInfo:
        """Wait up to ``timeout`` seconds (0–3600; 0 answers at once) for the
        process to exit and describe it: ``running`` says whether it still
        runs, ``result`` how it ended."""
        c = self.sandbox.client
        d = c._call("POST", self._path + "/wait", op="wait_process", sandbox_id=self.sandbox.id,
                    json_body={"timeout": timeout}, timeout=c._wait_timeout(float(timeout)))
        return ProcessInfo.from_json(d)

    def attach(self, *, replay: bool = True, format: str = "frames") -> ExecStream:
        """Follow the process's output until it ends, as a stream of events;
        ``replay`` first sends what it printed so far (as much as the agent
        still holds)."""
        c = self.sandbox.client
        resp = c._request("GET", self._path + "/output", op="attach", sandbox_id=self.sandbox.id,
                          query=[("replay", "true" if replay else "false")], accept=stream_accept(format),
                          timeout=c._wait_timeout(None))
        return ExecStream(c._t, resp, "attach", self.sandbox.id)

    def write_stdin(self, data: Union[str, bytes], *, eof: bool = False) -> None:
        """Write ``data`` to the process's stdin (it must have been started
        with ``keep_stdin_open``), closing stdin after it when ``eof``."""
        body: Dict[str, Any] = {}
        if isinstance(data, str):
            if data:
                body["data"] = data
        elif data:
            body["data_base64"] = base64.b64encode(bytes(data)).decode("ascii")
        if eof:
            body["eof"] = True
        self.sandbox.client._call("POST", self._path + "/stdin", op="write_stdin", sandbox_id=self.sandbox.id, json_body=body)

    def close_stdin(self) -> None:
        """Close the process's stdin (it reads end of file)."""
        self.write_stdin(b"", eof=True)

    def signal(self, signal: Union[str, int] = "SIGTERM") -> str:
        """Send ``signal`` (a name like ``"SIGTERM"``/``"TERM"`` or a number)
        and return the outcome: ``signaled``, ``stopped`` or
        ``already_exited``."""
        d = self.sandbox.client._call("POST", self._path + "/signal", op="signal", sandbox_id=self.sandbox.id,
                                      json_body={"signal": signal})
        return str(d.get("outcome") or "")

    def kill(self) -> str:
        """Send SIGKILL; the outcome as for :meth:`signal`."""
        return self.signal("SIGKILL")
