"""HTTP/1.1 to the daemon over TCP, TLS or its unix socket, with the standard
library's http.client: a small pool of kept-alive connections, JSON and
streamed (chunked) request bodies, streamed answers, and the one place an
error answer becomes an SbxError."""

from __future__ import annotations

import email.utils
import http.client
import json
import socket
import ssl
import threading
import time
import urllib.parse
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from . import errors

# A pooled connection idle longer than this is closed rather than reused: the
# daemon drops idle keep-alive connections after two minutes.
_MAX_IDLE_SECONDS = 60.0
_MAX_POOLED = 8
# The most of an error answer read.
_MAX_ERROR_BODY = 64 << 10

Query = Sequence[Tuple[str, str]]
Body = Union[bytes, Iterable[bytes], None]


class Endpoint:
    """Endpoint is where the daemon listens: http(s)://host[:port][/prefix]
    or unix:/path/to/sbx.sock."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.unix_path: Optional[str] = None
        self.scheme = "http"
        self.host = "sbx"
        self.port: Optional[int] = None
        self.prefix = ""
        if url.startswith("unix:"):
            path = url[len("unix:"):]
            if path.startswith("//"):
                path = path[2:]
            if not path:
                raise ValueError("sbx URL %r names no socket" % url)
            self.unix_path = path
            return
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError("sbx URL %r is not http://host:port, https://… or unix:/path/to/sbx.sock" % url)
        self.scheme = u.scheme
        self.host = u.hostname
        self.port = u.port
        self.prefix = u.path.rstrip("/")

    @property
    def base(self) -> str:
        """The URL requests are made to (http://sbx for a unix socket)."""
        if self.unix_path is not None:
            return "http://sbx"
        host = "[%s]" % self.host if ":" in self.host else self.host
        port = "" if self.port is None else ":%d" % self.port
        return "%s://%s%s%s" % (self.scheme, host, port, self.prefix)


class _UnixConnection(http.client.HTTPConnection):
    """An HTTPConnection over a unix socket; its Host header is ``sbx``."""

    def __init__(self, path: str, timeout: Optional[float]) -> None:
        super().__init__("sbx", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.settimeout(self.timeout)
            s.connect(self._path)
        except BaseException:
            s.close()
            raise
        self.sock = s


class Response:
    """Response is a 2xx answer being read. Close it (or read it to the
    end) to hand its connection back to the pool."""

    def __init__(self, transport: "Transport", conn: http.client.HTTPConnection, resp: http.client.HTTPResponse) -> None:
        self._transport = transport
        self._conn: Optional[http.client.HTTPConnection] = conn
        self._resp = resp
        self.status: int = resp.status
        self.headers = resp.headers

    @property
    def content_type(self) -> str:
        """The media type of the answer, without parameters."""
        return (self.headers.get("Content-Type") or "").split(";", 1)[0].strip().lower()

    @property
    def content_length(self) -> Optional[int]:
        """The announced length of the body, or None."""
        v = self.headers.get("Content-Length")
        try:
            return int(v) if v is not None else None
        except ValueError:
            return None

    def read(self, n: int = -1) -> bytes:
        """Read up to n bytes (all when n < 0); b"" at the end. For n > 0 it
        returns fewer only at the end of the body."""
        if n < 0:
            return self._resp.read()
        return self._resp.read(n)

    def read1(self, n: int) -> bytes:
        """Read what is available, at most n bytes, waiting only for the
        first; b"" at the end."""
        return self._resp.read1(n)

    def readline(self, limit: int = -1) -> bytes:
        """Read one line, at most limit bytes."""
        return self._resp.readline(limit)

    def json(self) -> Any:
        """Read the whole body and decode it as JSON (None when empty)."""
        try:
            b = self._resp.read()
        finally:
            self.close()
        if not b.strip():
            return None
        return json.loads(b)

    def close(self) -> None:
        """Release the connection: back to the pool when the body was read
        to its end, else closed."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if self._resp.isclosed() and not self._resp.will_close:
            self._transport._release(conn)
        else:
            self._resp.close()
            conn.close()

    def __enter__(self) -> "Response":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class Transport:
    """Transport sends requests to one daemon; it is safe for concurrent use
    by several threads (each request has a connection of its own)."""

    def __init__(
        self,
        url: str,
        api_key: Optional[str],
        *,
        timeout: Optional[float],
        ssl_context: Optional[ssl.SSLContext] = None,
        user_agent: str = "sbx-python",
        source: str = "",
    ) -> None:
        self.endpoint = Endpoint(url)
        self.api_key = api_key
        self.timeout = timeout
        self.ssl_context = ssl_context
        self.user_agent = user_agent
        self.source = source
        self._mu = threading.Lock()
        # _idle is guarded by _mu: pooled connections and when each was last used.
        self._idle: List[Tuple[http.client.HTTPConnection, float]] = []

    # --- connections

    def _new_conn(self, timeout: Optional[float]) -> http.client.HTTPConnection:
        ep = self.endpoint
        if ep.unix_path is not None:
            return _UnixConnection(ep.unix_path, timeout)
        if ep.scheme == "https":
            ctx = self.ssl_context or ssl.create_default_context()
            return http.client.HTTPSConnection(ep.host, ep.port, timeout=timeout, context=ctx)
        return http.client.HTTPConnection(ep.host, ep.port, timeout=timeout)

    def _acquire(self, timeout: Optional[float]) -> Tuple[http.client.HTTPConnection, bool]:
        """A connection, and whether it was used before."""
        now = time.monotonic()
        stale: List[http.client.HTTPConnection] = []
        conn: Optional[http.client.HTTPConnection] = None
        with self._mu:
            while self._idle:
                c, used = self._idle.pop()
                if now - used < _MAX_IDLE_SECONDS:
                    conn = c
                    break
                stale.append(c)
        for c in stale:
            c.close()
        if conn is None:
            return self._new_conn(timeout), False
        conn.timeout = timeout
        if conn.sock is not None:
            conn.sock.settimeout(timeout)
        return conn, True

    def _release(self, conn: http.client.HTTPConnection) -> None:
        with self._mu:
            if len(self._idle) < _MAX_POOLED:
                self._idle.append((conn, time.monotonic()))
                return
        conn.close()

    def close(self) -> None:
        """Close every pooled connection."""
        with self._mu:
            idle, self._idle = self._idle, []
        for c, _ in idle:
            c.close()

    # --- requests

    def url_path(self, path: str, query: Optional[Query]) -> str:
        """The request target of path (under the endpoint's prefix) with query."""
        target = self.endpoint.prefix + path
        if query:
            target += "?" + urllib.parse.urlencode(list(query))
        return target

    def request(
        self,
        method: str,
        path: str,
        *,
        op: str,
        sandbox_id: Optional[str] = None,
        query: Optional[Query] = None,
        json_body: Any = None,
        body: Body = None,
        content_type: Optional[str] = None,
        accept: Optional[str] = None,
        headers: Optional[Mapping[str, str]] = None,
        timeout: Optional[float] = -1.0,
        auth: bool = True,
    ) -> Response:
        """Send one request and return its 2xx answer, unread; any other
        answer raises the SbxError it describes.

        ``json_body`` is sent as JSON; ``body`` as is: bytes with a
        Content-Length, an iterable of bytes chunked as it is iterated (never
        held whole). ``timeout`` (seconds, None for none) bounds each wait on
        the socket; the default is the client's.
        """
        if timeout is not None and timeout < 0:
            timeout = self.timeout
        hdrs: Dict[str, str] = {"User-Agent": self.user_agent}
        if auth and self.api_key:
            hdrs["Authorization"] = "Bearer " + self.api_key
        if accept:
            hdrs["Accept"] = accept
        data: Optional[bytes] = None
        stream: Optional[Iterable[bytes]] = None
        if json_body is not None:
            data = json.dumps(json_body, separators=(",", ":")).encode("utf-8")
            hdrs["Content-Type"] = "application/json"
        elif isinstance(body, (bytes, bytearray, memoryview)):
            data = bytes(body)
            hdrs["Content-Type"] = content_type or "application/octet-stream"
        elif body is not None:
            stream = body
            hdrs["Content-Type"] = content_type or "application/octet-stream"
        if data is not None:
            hdrs["Content-Length"] = str(len(data))
        elif stream is not None:
            hdrs["Transfer-Encoding"] = "chunked"
        elif method in ("POST", "PUT", "PATCH"):
            hdrs["Content-Length"] = "0"
        if headers:
            hdrs.update(headers)
        target = self.url_path(path, query)

        for attempt in (0, 1):
            conn, reused = self._acquire(timeout)
            try:
                self._send(conn, method, target, hdrs, data, stream)
                try:
                    resp = conn.getresponse()
                except (http.client.HTTPException, OSError) as e:
                    raise _Retry(e) from e
            except _Retry as r:
                conn.close()
                # A kept-alive connection the daemon had closed meanwhile:
                # nothing of this request was read, so it is sent again once.
                if reused and attempt == 0 and stream is None and _stale(r.cause):
                    continue
                raise self._failure(r.cause, op, sandbox_id) from r.cause
            except _Answered as a:
                # The daemon answered before the body was sent (an error,
                # usually): that answer is the result.
                return self._check(a.conn, a.resp, op, sandbox_id, close_after=True)
            except BaseException:
                conn.close()  # the caller's body iterator failed, or an interrupt
                raise
            return self._check(conn, resp, op, sandbox_id)
        raise AssertionError("unreachable")  # pragma: no cover

    def _send(
        self,
        conn: http.client.HTTPConnection,
        method: str,
        target: str,
        hdrs: Mapping[str, str],
        data: Optional[bytes],
        stream: Optional[Iterable[bytes]],
    ) -> None:
        try:
            conn.putrequest(method, target, skip_accept_encoding=True)
            for k, v in hdrs.items():
                conn.putheader(k, v)
            conn.endheaders()
        except (http.client.HTTPException, OSError) as e:
            raise _Retry(e) from e
        if data:
            try:
                conn.send(data)
            except OSError as e:
                raise _answer_or_retry(conn, e) from e
        if stream is None:
            return
        it = iter(stream)
        while True:
            chunk = next(it, None)  # a failure of the caller's iterator propagates as is
            try:
                if chunk is None:
                    conn.send(b"0\r\n\r\n")
                    return
                if not chunk:
                    continue
                conn.send(b"%x\r\n" % len(chunk))
                conn.send(chunk)
                conn.send(b"\r\n")
            except OSError as e:
                raise _answer_or_retry(conn, e) from e

    def _check(
        self,
        conn: http.client.HTTPConnection,
        resp: http.client.HTTPResponse,
        op: str,
        sandbox_id: Optional[str],
        close_after: bool = False,
    ) -> Response:
        if 200 <= resp.status < 300 and not close_after:
            return Response(self, conn, resp)
        try:
            raw = resp.read(_MAX_ERROR_BODY)
        except (OSError, http.client.HTTPException):
            raw = b""
        if resp.isclosed() and not resp.will_close and not close_after:
            self._release(conn)
        else:
            conn.close()
        if 200 <= resp.status < 300:
            raise errors.StreamError(
                "%s: the daemon answered %d before the request body was sent" % (op, resp.status),
                code="unavailable", status=resp.status, op=op, sandbox_id=sandbox_id,
            )
        raise decode_error(resp.status, resp.headers, raw, op, sandbox_id)

    def _failure(self, e: BaseException, op: str, sandbox_id: Optional[str]) -> errors.SbxError:
        """The error of a request that got no answer."""
        if isinstance(e, socket.timeout):
            return errors.TimeoutError(
                "%s: the sbx daemon at %s did not answer in time: %s" % (op, self.endpoint.url, e),
                op=op, sandbox_id=sandbox_id,
            )
        src = " (from %s)" % self.source if self.source else ""
        return errors.DaemonUnreachableError(
            "%s: cannot reach the sbx daemon at %s%s: %s; start one with `sbx serve` (or `make run`), "
            "or set SBX_URL and SBX_API_KEY" % (op, self.endpoint.url, src, e or type(e).__name__),
            code="unavailable", op=op, sandbox_id=sandbox_id,
        )

    def failure(self, e: BaseException, op: str, sandbox_id: Optional[str]) -> errors.SbxError:
        """The SbxError of a connection that failed while its answer was
        being read (a broken stream)."""
        if isinstance(e, socket.timeout):
            return self._failure(e, op, sandbox_id)
        return errors.StreamError(
            "%s: the answer broke off: %s" % (op, e or type(e).__name__), code="unavailable", op=op, sandbox_id=sandbox_id
        )


def _answer_or_retry(conn: http.client.HTTPConnection, e: OSError) -> Exception:
    """What a failure to send a request body means: the daemon may have
    answered already (a refused upload), and its answer says why; else the
    request got no answer."""
    try:
        resp = conn.getresponse()
    except Exception:
        return _Retry(e)
    return _Answered(conn, resp)


def _stale(e: BaseException) -> bool:
    """Whether e is how a kept-alive connection the daemon closed fails."""
    return isinstance(e, (ConnectionResetError, BrokenPipeError, http.client.RemoteDisconnected, http.client.BadStatusLine))


class _Retry(Exception):
    """The request got no answer: cause says why."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


class _Answered(Exception):
    """The daemon answered before the request body was sent."""

    def __init__(self, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse) -> None:
        super().__init__("answered early")
        self.conn = conn
        self.resp = resp


def retry_after(value: Optional[str]) -> Optional[float]:
    """Seconds of a Retry-After header (delta-seconds or an HTTP date)."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(int(value)))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - time.time())


def decode_error(status: int, headers: Any, raw: bytes, op: str, sandbox_id: Optional[str]) -> errors.SbxError:
    """Decode an error answer: the API's ``{"error": {…}}`` body, or a guess
    from the status for any other body."""
    ra = retry_after(headers.get("Retry-After"))
    rid = headers.get("X-Request-Id") or None
    try:
        body = json.loads(raw)
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("error"), dict) and body["error"].get("code"):
        return errors._from_detail(body["error"], status=status, op=op, sandbox_id=sandbox_id, request_id=rid, retry_after=ra)
    return errors._from_status(
        status, raw.decode("utf-8", "replace"), op=op, sandbox_id=sandbox_id, request_id=rid, retry_after=ra
    )
