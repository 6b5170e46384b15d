"""A sandbox: exec, processes, network, preview URLs; its files and tools
hang off it as ``sandbox.files`` and ``sandbox.tools``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from ._paths import sandbox_path
from ._stream import ExecStream, drain
from .errors import NotFoundError
from .files import Files
from .models import Event, ExecResult, NetworkEvents, NetworkPolicy, PreviewURL, ProcessInfo, SandboxInfo, network_json
from .process import Command, Process, exec_body, stream_accept
from .tools import Tools

if TYPE_CHECKING:  # pragma: no cover
    from .client import Sbx

__all__ = ["Sandbox"]


class Sandbox:
    """Sandbox is one sandbox, its methods bound to its id.

    ``Sbx.create`` and ``Sbx.get`` return one; as a context manager it is
    deleted on exit. ``info`` is what the daemon last said about it
    (``refresh`` asks again).
    """

    def __init__(self, client: "Sbx", info: Optional[SandboxInfo] = None, *, sandbox_id: Optional[str] = None) -> None:
        if info is None and not sandbox_id:
            raise ValueError("a Sandbox needs its info or its id")
        self.client = client
        """The client the sandbox is reached through."""
        self.id: str = info.id if info is not None else str(sandbox_id)
        """The sandbox's id."""
        self._info = info
        self.files = Files(self)
        """The sandbox's files: read, write, upload, download, archives…"""
        self.tools = Tools(self)
        """The agent tools, called on this sandbox."""

    def __repr__(self) -> str:
        return "Sandbox(%r)" % self.id

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sandbox) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.delete(missing_ok=True)

    @property
    def _path(self) -> str:
        return sandbox_path(self.id)

    # --- lifecycle

    @property
    def info(self) -> SandboxInfo:
        """What the daemon last said about the sandbox (fetched once when
        the Sandbox was made from an id alone)."""
        if self._info is None:
            self._info = self.client.get_info(self.id)
        return self._info

    def refresh(self) -> SandboxInfo:
        """Ask the daemon about the sandbox again."""
        self._info = self.client.get_info(self.id)
        return self._info

    @property
    def state(self) -> str:
        """The sandbox's state as last seen (see ``refresh``)."""
        return self.info.state

    def update(self, *, timeout: Optional[int] = None, labels: Optional[Mapping[str, str]] = None) -> SandboxInfo:
        """Extend the sandbox's life to ``timeout`` seconds from now, and/or
        replace its labels."""
        self._info = self.client.update(self.id, timeout=timeout, labels=labels)
        return self._info

    def set_timeout(self, seconds: int) -> SandboxInfo:
        """Make the sandbox expire ``seconds`` from now."""
        return self.update(timeout=seconds)

    def delete(self, *, missing_ok: bool = False) -> None:
        """Delete the sandbox with everything in it; NotFoundError when it
        is already gone, unless ``missing_ok``."""
        self.client.delete(self.id, missing_ok=missing_ok)

    # --- exec

    def exec(
        self,
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
        on_stdout: Optional[Callable[[bytes], Any]] = None,
        on_stderr: Optional[Callable[[bytes], Any]] = None,
        on_event: Optional[Callable[[Event], Any]] = None,
    ) -> ExecResult:
        """Run a command to completion and return how it ended.

        ``command`` is a shell command line (``/bin/sh -c``) or a list: the
        program and its arguments, without a shell. A non-zero exit, a
        timeout or a signal is not an error: see ``exit_code``, ``reason``.

        Args:
            cwd: working directory (default ``/workspace``).
            env: extra environment variables.
            secrets: environment variable → name of one of the caller's
                secrets, for this command only.
            stdin: the command's stdin, text or bytes (then closed).
            timeout: seconds, 1–3600 (default the daemon's, 60); the whole
                process tree is killed when it passes.
            output_limit_bytes: per-stream cap of the result (head and tail
                are kept beyond it).
            tag: a free-form label of the process.
            pty: (rows, cols) to run it in a terminal.
            on_stdout, on_stderr: called with each chunk of output as it
                comes (the call then streams); every byte, in order.
            on_event: called with every stream event.
        """
        body = exec_body(command, cwd=cwd, env=env, secrets=secrets, stdin=stdin, timeout=timeout,
                         output_limit_bytes=output_limit_bytes, tag=tag, pty=pty)
        if on_stdout is None and on_stderr is None and on_event is None:
            d = self.client._call("POST", self._path + "/exec", op="exec", sandbox_id=self.id, json_body=body,
                                  timeout=self.client._wait_timeout(timeout))
            return ExecResult.from_json(d)
        return drain(self._stream(body, timeout, "frames"), on_stdout, on_stderr, on_event)

    def exec_stream(
        self,
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
        stream_bounded: bool = False,
        format: str = "frames",
    ) -> ExecStream:
        """Run a command and return its events as they happen: iterate the
        ExecStream for ``started``, ``stdout``/``stderr`` chunks and the
        ``result``.

        The stream is complete: every byte, in order, however slowly it is
        read (a slow reader slows the command). With ``stream_bounded`` a
        reader too slow misses output instead, reported by ``dropped``
        events. ``format`` is ``frames`` (binary, default) or ``ndjson``.
        Other arguments as for :meth:`exec`.
        """
        body = exec_body(command, cwd=cwd, env=env, secrets=secrets, stdin=stdin, timeout=timeout,
                         output_limit_bytes=output_limit_bytes, tag=tag, pty=pty, stream_bounded=stream_bounded)
        return self._stream(body, timeout, format)

    def _stream(self, body: Dict[str, Any], timeout: Optional[int], format: str) -> ExecStream:
        resp = self.client._request("POST", self._path + "/exec", op="exec", sandbox_id=self.id, json_body=body,
                                    accept=stream_accept(format), timeout=self.client._wait_timeout(timeout))
        return ExecStream(self.client._t, resp, "exec", self.id)

    def exec_background(
        self,
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
    ) -> Process:
        """Start a command and return its Process as soon as it runs (wait,
        attach, write stdin, signal through it). ``keep_stdin_open`` leaves
        stdin open for ``Process.write_stdin``. Other arguments as for
        :meth:`exec`; ``timeout`` still bounds the command's life."""
        body = exec_body(command, cwd=cwd, env=env, secrets=secrets, stdin=stdin, timeout=timeout,
                         output_limit_bytes=output_limit_bytes, tag=tag, pty=pty,
                         keep_stdin_open=keep_stdin_open, background=True)
        d = self.client._call("POST", self._path + "/exec", op="exec", sandbox_id=self.id, json_body=body)
        return Process(self, str(d.get("process_id")), int(d.get("pid") or 0))

    # --- processes

    def processes(self) -> List[ProcessInfo]:
        """The processes the agent started and still remembers, running and
        exited."""
        d = self.client._call("GET", self._path + "/processes", op="list_processes", sandbox_id=self.id)
        return [ProcessInfo.from_json(p) for p in d.get("processes") or []]

    def process(self, process_id: str) -> Process:
        """A handle on process ``process_id`` (no request is made)."""
        return Process(self, process_id)

    def get_process(self, process_id: str) -> ProcessInfo:
        """Describe process ``process_id``."""
        return Process(self, process_id).info()

    # --- network

    def set_network(
        self,
        network: Union[str, NetworkPolicy, Mapping[str, Any], None] = None,
        *,
        allow: Optional[Sequence[str]] = None,
        block: Optional[Sequence[str]] = None,
    ) -> SandboxInfo:
        """Change the sandbox's network tier and lists while it runs (its
        connections through the egress proxy are cut)."""
        body = network_json(network, allow, block) or {}
        d = self.client._call("PUT", self._path + "/network", op="set_network", sandbox_id=self.id, json_body=body)
        self._info = SandboxInfo.from_json(d)
        return self._info

    def network_events(self) -> NetworkEvents:
        """The egress decisions about the sandbox's traffic (the latest
        512), with totals."""
        d = self.client._call("GET", self._path + "/network/events", op="network_events", sandbox_id=self.id)
        return NetworkEvents.from_json(d)

    # --- preview URLs

    def preview_url(self, port: int) -> PreviewURL:
        """How to reach ``port`` of the sandbox from outside: by host, by
        path, and the preview token unless the port is public."""
        d = self.client._call("GET", self._path + "/ports/%d/url" % port, op="preview_url", sandbox_id=self.id)
        return PreviewURL.from_json(d)

    def set_port_public(self, port: int, public: bool = True) -> PreviewURL:
        """Serve ``port`` without the preview token (``public``), or require
        it again."""
        d = self.client._call("PUT", self._path + "/ports/%d" % port, op="set_port_public", sandbox_id=self.id,
                              json_body={"public": public})
        return PreviewURL.from_json(d)
