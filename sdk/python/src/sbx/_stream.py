"""Exec and attach streams: the binary frames form
(``application/vnd.sbx.frames``) and NDJSON (``application/x-ndjson``)
decoded into Events as they arrive."""

from __future__ import annotations

import http.client
import json
from typing import Any, Callable, Dict, Iterator, Optional

from . import errors
from ._transport import Response, Transport
from .models import Event, ExecResult

FRAMES = "application/vnd.sbx.frames"
NDJSON = "application/x-ndjson"

# Frame kinds: 8-byte header (kind, three zero bytes, big-endian uint32
# length) then the payload.
_FRAME_EVENT, _FRAME_STDOUT, _FRAME_STDERR = 0, 1, 2
# The largest frame or NDJSON line accepted: output chunks are far smaller.
_MAX_EVENT = 16 << 20


class ExecStream:
    """ExecStream is a running command's events, in order, as they happen.

    Iterate it for :class:`~sbx.models.Event` values (``started``,
    ``stdout``, ``stderr``, ``dropped``, ``result``); the iteration ends
    after the result, which is then in :attr:`result`. An error event raises
    its SbxError. Use it as a context manager, or call :meth:`close`, to
    drop the connection early: the command goes on in the sandbox.
    """

    def __init__(self, transport: Transport, resp: Response, op: str, sandbox_id: str) -> None:
        self._transport = transport
        self._resp: Optional[Response] = resp
        self._op = op
        self._sandbox_id = sandbox_id
        self._frames = resp.content_type == FRAMES
        self.result: Optional[ExecResult] = None
        """How the command ended, once the stream reached its end."""
        self.process_id: Optional[str] = None
        """The agent's process id, from the started event."""
        self.pid: Optional[int] = None
        """The PID inside the sandbox, from the started event."""

    @property
    def format(self) -> str:
        """The media type the daemon streams in: frames or NDJSON."""
        return FRAMES if self._frames else NDJSON

    def __iter__(self) -> Iterator[Event]:
        return self

    def __next__(self) -> Event:
        if self._resp is None:
            raise StopIteration
        try:
            ev = self._read_frame() if self._frames else self._read_line()
        except errors.SbxError:
            self.close()
            raise
        except (OSError, http.client.HTTPException, ValueError) as e:
            self.close()
            raise self._transport.failure(e, self._op, self._sandbox_id) from e
        if ev is None:
            self.close()
            raise errors.StreamError(
                "%s %s: the stream ended without a result" % (self._op, self._sandbox_id),
                code="unavailable", op=self._op, sandbox_id=self._sandbox_id,
            )
        if ev.type == "error":
            self.close()
            err = ev.raw.get("error")
            detail: Dict[str, Any] = err if isinstance(err, dict) else {"code": "internal", "message": str(ev.raw)}
            raise errors._from_detail(detail, status=200, op=self._op, sandbox_id=self._sandbox_id)
        if ev.type == "started":
            self.process_id, self.pid = ev.process_id, ev.pid
        elif ev.type == "result":
            self.result = ev.result
            self.close()
        return ev

    def _read_frame(self) -> Optional[Event]:
        assert self._resp is not None
        while True:
            hdr = self._resp.read(8)
            if not hdr:
                return None
            if len(hdr) < 8:
                raise self._broken("a frame header cut short")
            n = int.from_bytes(hdr[4:8], "big")
            if n > _MAX_EVENT:
                raise self._broken("a frame of %d bytes" % n)
            payload = self._resp.read(n) if n else b""
            if len(payload) < n:
                raise self._broken("a frame cut short")
            kind = hdr[0]
            if kind == _FRAME_STDOUT:
                return Event("stdout", payload)
            if kind == _FRAME_STDERR:
                return Event("stderr", payload)
            if kind == _FRAME_EVENT:
                return self._event(payload)
            # A kind this SDK does not know: skipped, as the API allows.

    def _read_line(self) -> Optional[Event]:
        assert self._resp is not None
        while True:
            line = self._resp.readline(_MAX_EVENT + 1)
            if not line:
                return None
            if len(line) > _MAX_EVENT:
                raise self._broken("an event line over %d bytes" % _MAX_EVENT)
            if line.strip():
                return self._event(line)

    def _event(self, b: bytes) -> Event:
        try:
            d: Any = json.loads(b)
        except ValueError as e:
            raise self._broken("an event that is not JSON: %s" % e) from e
        if not isinstance(d, dict):
            raise self._broken("an event that is not a JSON object")
        return Event.from_json(d)

    def _broken(self, what: str) -> errors.StreamError:
        return errors.StreamError(
            "%s %s: decoding the stream: %s" % (self._op, self._sandbox_id, what),
            code="unavailable", op=self._op, sandbox_id=self._sandbox_id,
        )

    def wait(self) -> ExecResult:
        """Read the rest of the stream and return the result."""
        for _ in self:
            pass
        assert self.result is not None
        return self.result

    def close(self) -> None:
        """Drop the connection (the command itself goes on)."""
        resp, self._resp = self._resp, None
        if resp is not None:
            resp.close()

    def __enter__(self) -> "ExecStream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def drain(
    stream: ExecStream,
    on_stdout: Optional[Callable[[bytes], Any]],
    on_stderr: Optional[Callable[[bytes], Any]],
    on_event: Optional[Callable[[Event], Any]],
) -> ExecResult:
    """Read stream to its end, handing each chunk to the callbacks, and
    return its result. A callback that raises ends the call with its error
    (the command goes on)."""
    with stream:
        for ev in stream:
            if on_event is not None:
                on_event(ev)
            if ev.type == "stdout" and on_stdout is not None:
                on_stdout(ev.data)
            elif ev.type == "stderr" and on_stderr is not None:
                on_stderr(ev.data)
    assert stream.result is not None
    return stream.result
