"""Tests that need no daemon: the error table against the API document,
route coverage, the transport against a fake daemon on loopback (errors,
Retry-After, streams cut short, kept-alive connections the server closed,
chunked uploads, timeouts, the unix socket and discovery), the tar helpers,
and the grammar of Python 3.9."""

from __future__ import annotations

import ast
import builtins
import datetime as dt
import io
import json
import os
import socket
import socketserver
import tarfile
import tempfile
import threading
import unittest
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Dict, List, Optional, Tuple

import sbx
from sbx import errors
from sbx._archive import extract_tar, tar_directory
from sbx._discover import data_dir
from sbx.models import network_json, parse_time
from sbx.process import exec_body

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(os.path.dirname(HERE), "src", "sbx")
OPENAPI = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(HERE))), "api", "openapi", "openapi.json")

Script = Callable[["Handler"], None]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: "FakeServer"

    def log_message(self, *a: Any) -> None:
        pass

    def _dispatch(self) -> None:
        self.server.seen.append((self.command, self.path, dict(self.headers)))
        self.server.script(self)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _dispatch

    def body(self) -> bytes:
        """The request body, chunked or not."""
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = b""
            while True:
                n = int(self.rfile.readline().strip(), 16)
                if n == 0:
                    self.rfile.readline()
                    return out
                out += self.rfile.read(n)
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def reply(self, status: int, body: bytes, ctype: str = "application/json", headers: Optional[Dict[str, str]] = None,
              length: Optional[int] = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body) if length is None else length))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()

    def reply_chunked(self, ctype: str, pieces: List[bytes], finish: bool = True) -> None:
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for p in pieces:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(p), p))
            self.wfile.flush()
        if finish:
            self.wfile.write(b"0\r\n\r\n")
        else:
            self.close_connection = True
        self.wfile.flush()


class FakeServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, script: Script) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.script = script
        self.seen: List[Tuple[str, str, Dict[str, str]]] = []
        self.connections = 0

    def get_request(self) -> Tuple[socket.socket, Any]:
        self.connections += 1
        return super().get_request()


class UnixFakeServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def __init__(self, path: str, script: Script) -> None:
        super().__init__(path, Handler)
        self.script = script
        self.seen: List[Tuple[str, str, Dict[str, str]]] = []


def api_error(code: str, message: str, sandbox_id: str = "") -> bytes:
    d: Dict[str, Any] = {"code": code, "message": message, "op": "get", "request_id": "req-1"}
    if sandbox_id:
        d["sandbox_id"] = sandbox_id
    return json.dumps({"error": d}).encode()


def frame(kind: int, payload: bytes) -> bytes:
    return bytes([kind, 0, 0, 0]) + len(payload).to_bytes(4, "big") + payload


RESULT = {"type": "result", "process_id": "p1", "pid": 7, "stdout": "hi", "stderr": "", "exit_code": 0,
          "reason": "exited", "signal": 0, "duration_ms": 1, "truncated": False, "stdout_dropped": 0,
          "stderr_dropped": 0, "stdout_bytes": 2, "stderr_bytes": 0}


class FakeDaemonTest(unittest.TestCase):
    def serve(self, script: Script) -> Tuple[FakeServer, sbx.Sbx]:
        srv = FakeServer(script)
        t = threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True)
        t.start()
        self.addCleanup(t.join)
        self.addCleanup(srv.server_close)
        self.addCleanup(srv.shutdown)
        c = sbx.Sbx("http://127.0.0.1:%d" % srv.server_address[1], "test-key", timeout=10)
        self.addCleanup(c.close)
        return srv, c

    def test_error_body_and_retry_after(self) -> None:
        def script(h: Handler) -> None:
            h.body()
            h.reply(429, api_error("resource_exhausted", "create: limit exceeded: key k has 3 live sandboxes"),
                    headers={"Retry-After": "7", "X-Request-Id": "hdr-req"})

        srv, c = self.serve(script)
        with self.assertRaises(sbx.ResourceExhaustedError) as cm:
            c.create()
        e = cm.exception
        self.assertEqual((e.status, e.code, e.retry_after, e.request_id, e.op), (429, "resource_exhausted", 7.0, "req-1", "get"))
        self.assertIn("3 live sandboxes", str(e))
        method, path, headers = srv.seen[0]
        self.assertEqual((method, path), ("POST", "/v1/sandboxes"))
        self.assertEqual(headers["Authorization"], "Bearer test-key")
        self.assertEqual(headers["User-Agent"], "sbx-python")

    def test_non_api_error_body(self) -> None:
        when = "Wed, 21 Oct 2099 07:28:00 GMT"
        srv, c = self.serve(lambda h: h.reply(503, b"<html>busy\nproxy</html>", "text/html", {"Retry-After": when}))
        with self.assertRaises(sbx.UnavailableError) as cm:
            c.get("x" * 26)
        e = cm.exception
        self.assertEqual((e.status, e.code, e.sandbox_id), (503, "unavailable", "x" * 26))
        self.assertIn("HTTP 503: <html>busy", str(e))
        self.assertGreater(e.retry_after or 0, 3600)

    def test_every_code_maps_to_its_class(self) -> None:
        for code, cls in errors._BY_CODE.items():
            with self.subTest(code=code):
                srv, c = self.serve(lambda h, code=code: h.reply(400, api_error(code, "x: " + code, "sid")))
                with self.assertRaises(cls) as cm:
                    c.get("sid")
                self.assertEqual((cm.exception.code, cm.exception.sandbox_id), (code, "sid"))
        srv, c = self.serve(lambda h: h.reply(500, api_error("brand_new_code", "x")))
        with self.assertRaises(sbx.InternalError) as cm2:
            c.get("sid")
        self.assertEqual(cm2.exception.code, "brand_new_code")

    def test_list_query_and_paths_are_escaped(self) -> None:
        srv, c = self.serve(lambda h: h.reply(200, b'{"sandboxes": []}'))
        c.list(labels={"b": "x y", "a": "1&2"})
        c.sandbox("id/..").files
        self.assertEqual(srv.seen[0][1], "/v1/sandboxes?label=a%3D1%262&label=b%3Dx+y")
        srv2, c2 = self.serve(lambda h: h.reply(404, api_error("not_found", "get id/..: sandbox not found", "id/..")))
        with self.assertRaises(sbx.NotFoundError):
            c2.get("id/..")
        self.assertEqual(srv2.seen[0][1], "/v1/sandboxes/id%2F..")

    def test_frames_stream(self) -> None:
        pieces = [
            frame(0, b'{"type":"started","process_id":"p1","pid":7}'),
            frame(1, b"\x00\xffbin"),
            frame(9, b"a kind this SDK does not know"),
            frame(2, b"err"),
            frame(0, json.dumps({"type": "dropped", "stream": "stdout", "bytes": 12}).encode()),
            frame(0, json.dumps(RESULT).encode()),
        ]
        srv, c = self.serve(lambda h: (h.body(), h.reply_chunked("application/vnd.sbx.frames", pieces)))
        stream = c.sandbox("s").exec_stream("x")
        evs = list(stream)
        self.assertEqual([e.type for e in evs], ["started", "stdout", "stderr", "dropped", "result"])
        self.assertEqual((evs[1].data, evs[2].data), (b"\x00\xffbin", b"err"))
        self.assertEqual((evs[3].stream, evs[3].dropped), ("stdout", 12))
        self.assertEqual((stream.process_id, stream.pid), ("p1", 7))
        assert stream.result is not None
        self.assertEqual(stream.result.stdout, b"hi")
        self.assertEqual(srv.seen[0][2]["Accept"], "application/vnd.sbx.frames")

    def test_ndjson_stream_base64_and_error_event(self) -> None:
        lines = [
            b'{"type":"started","process_id":"p1","pid":7}\n',
            b'{"type":"stdout","data":"\\ufffd","data_base64":"/w=="}\n',
            b"\n",
            json.dumps({"type": "error", "error": {"code": "agent_lost", "message": "exec s: agent lost", "sandbox_id": "s"}}).encode() + b"\n",
        ]
        srv, c = self.serve(lambda h: (h.body(), h.reply_chunked("application/x-ndjson", lines)))
        got: List[bytes] = []
        with self.assertRaises(sbx.AgentLostError) as cm:
            c.sandbox("s").exec("x", on_stdout=got.append)
        self.assertEqual(got, [b"\xff"])
        self.assertEqual((cm.exception.status, cm.exception.sandbox_id), (200, "s"))

    def test_stream_cut_short(self) -> None:
        cut = [frame(0, b'{"type":"started","process_id":"p1","pid":7}'), frame(1, b"partial")]
        srv, c = self.serve(lambda h: (h.body(), h.reply_chunked("application/vnd.sbx.frames", cut)))
        with self.assertRaises(sbx.StreamError) as cm:
            c.sandbox("s").exec_stream("x").wait()
        self.assertIn("without a result", str(cm.exception))
        srv, c = self.serve(lambda h: (h.body(), h.reply_chunked("application/vnd.sbx.frames", cut, finish=False)))
        with self.assertRaises(sbx.StreamError):
            c.sandbox("s").exec_stream("x").wait()
        bad = [frame(0, b"not json")]
        srv, c = self.serve(lambda h: (h.body(), h.reply_chunked("application/vnd.sbx.frames", bad)))
        with self.assertRaises(sbx.StreamError) as cm2:
            c.sandbox("s").exec_stream("x").wait()
        self.assertIn("decoding the stream", str(cm2.exception))

    def test_download_shorter_than_announced(self) -> None:
        def script(h: Handler) -> None:
            h.reply(200, b"12345", "application/octet-stream", length=10)
            h.close_connection = True

        srv, c = self.serve(script)
        with self.assertRaises(sbx.StreamError):
            c.sandbox("s").files.read_bytes("f")

    def test_chunked_upload_streams(self) -> None:
        got: Dict[str, Any] = {}

        def script(h: Handler) -> None:
            got["te"] = h.headers.get("Transfer-Encoding")
            got["body"] = h.body()
            h.reply(200, json.dumps({"name": "f", "path": "/workspace/f", "type": "file", "size": len(got["body"]),
                                     "mode": "0640", "modified_at": "2026-01-02T03:04:05.123456789Z"}).encode())

        srv, c = self.serve(script)
        pulled: List[int] = []

        def gen() -> Any:
            for i in range(5):
                pulled.append(i)
                yield bytes([65 + i]) * 1000

        info = c.sandbox("s").files.upload("f", gen(), mode=0o640)
        self.assertEqual(got["te"], "chunked")
        self.assertEqual(got["body"], b"".join(bytes([65 + i]) * 1000 for i in range(5)))
        self.assertEqual((info.size, info.mode), (5000, 0o640))
        self.assertEqual(info.modified_at, dt.datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=dt.timezone.utc))
        self.assertIn("mode=0640", srv.seen[0][1])

    def test_kept_alive_connection_closed_by_server_is_retried(self) -> None:
        # The server answers as if it kept the connection, then closes it:
        # the next call on the pooled connection must be sent again.
        def script(h: Handler) -> None:
            h.body()
            h.reply(200, b'{"status":"ok","backends":[]}')
            h.close_connection = True

        srv, c = self.serve(script)
        for _ in range(3):
            self.assertEqual(c.health().status, "ok")
        self.assertEqual(len(srv.seen), 3)
        self.assertEqual(srv.connections, 3)

    def test_kept_alive_connection_reused(self) -> None:
        srv, c = self.serve(lambda h: (h.body(), h.reply(200, b'{"status":"ok","backends":[]}')))
        for _ in range(5):
            c.health()
        self.assertEqual(srv.connections, 1)

    def test_no_answer_in_time(self) -> None:
        release = threading.Event()
        self.addCleanup(release.set)
        srv, _ = self.serve(lambda h: release.wait(30))
        c = sbx.Sbx("http://127.0.0.1:%d" % srv.server_address[1], "k", timeout=0.2)
        self.addCleanup(c.close)
        with self.assertRaises(sbx.TimeoutError) as cm:
            c.health()
        self.assertIsInstance(cm.exception, builtins.TimeoutError)
        self.assertEqual(cm.exception.status, 0)

    def test_unreachable(self) -> None:
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()  # nothing listens there now
        with sbx.Sbx("http://127.0.0.1:%d" % port, "k") as c:
            with self.assertRaises(sbx.DaemonUnreachableError) as cm:
                c.health()
        e = cm.exception
        self.assertIsInstance(e, ConnectionError)
        self.assertIsInstance(e, sbx.UnavailableError)
        self.assertEqual((e.status, e.code), (0, "unavailable"))
        self.assertIn("cannot reach the sbx daemon at http://127.0.0.1:%d" % port, str(e))
        with sbx.Sbx("unix:/nonexistent/sbx.sock", "k") as c2:
            with self.assertRaises(sbx.DaemonUnreachableError):
                c2.health()

    def test_bad_urls(self) -> None:
        for u in ("ftp://x", "unix:", "127.0.0.1:7070", "http://"):
            with self.subTest(url=u):
                with self.assertRaises(ValueError):
                    sbx.Sbx(u, "k")

    def test_discovery_through_the_data_dir_socket(self) -> None:
        with tempfile.TemporaryDirectory() as d:
            sock = os.path.join(d, "sbx.sock")
            srv = UnixFakeServer(sock, lambda h: h.reply(200, b'{"sandboxes": []}'))
            t = threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True)
            t.start()
            try:
                with open(os.path.join(d, "admin.key"), "w") as f:
                    f.write("sbx_from_file\n")
                saved = {k: os.environ.pop(k, None) for k in ("SBX_URL", "SBX_API_KEY", "SBX_DATA_DIR")}
                os.environ["SBX_DATA_DIR"] = d
                try:
                    with sbx.Sbx() as c:
                        self.assertEqual(c.url, "unix:" + sock)
                        self.assertEqual(c.list(), [])
                    os.environ["SBX_DATA_DIR"] = os.path.join(d, "missing")
                    with self.assertRaises(sbx.DaemonUnreachableError) as cm:
                        sbx.Sbx()
                    self.assertIn("SBX_URL", str(cm.exception))
                finally:
                    os.environ.pop("SBX_DATA_DIR", None)
                    for k, v in saved.items():
                        if v is not None:
                            os.environ[k] = v
                self.assertEqual(srv.seen[0][2]["Authorization"], "Bearer sbx_from_file")
                self.assertEqual(srv.seen[0][2]["Host"], "sbx")
            finally:
                srv.shutdown()
                srv.server_close()
                t.join()

    def test_data_dir_defaults(self) -> None:
        self.assertEqual(data_dir({"SBX_DATA_DIR": "/x"}, 0), "/x")
        self.assertEqual(data_dir({}, 0), "/var/lib/sbx")
        self.assertEqual(data_dir({"XDG_STATE_HOME": "/s", "HOME": "/h"}, 1000), "/s/sbx")
        self.assertEqual(data_dir({"HOME": "/h"}, 1000), "/h/.local/state/sbx")


class ContractTest(unittest.TestCase):
    """The SDK against the API document it is a client of."""

    def doc(self) -> Dict[str, Any]:
        if not os.path.exists(OPENAPI):
            self.skipTest("api/openapi/openapi.json is not beside this checkout")
        with open(OPENAPI) as f:
            return dict(json.load(f))

    def test_every_error_code_has_its_class(self) -> None:
        codes = self.doc()["components"]["schemas"]["Error"]["properties"]["error"]["properties"]["code"]["enum"]
        for code in codes:
            with self.subTest(code=code):
                cls = errors.error_class(code)
                self.assertEqual(cls.code, code)
                self.assertIn(cls.__name__, sbx.__all__)

    def test_every_route_is_covered(self) -> None:
        covered: Dict[str, Tuple[type, str]] = {
            "health": (sbx.Sbx, "health"), "openapi": (sbx.Sbx, "openapi"), "listAudit": (sbx.Sbx, "audit"),
            "create_key": (sbx.Sbx, "create_key"), "list_keys": (sbx.Sbx, "keys"), "revoke_key": (sbx.Sbx, "revoke_key"),
            "set_secret": (sbx.Sbx, "set_secret"), "list_secrets": (sbx.Sbx, "secrets"),
            "get_secret": (sbx.Sbx, "get_secret"), "delete_secret": (sbx.Sbx, "delete_secret"),
            "createSandbox": (sbx.Sbx, "create"), "listSandboxes": (sbx.Sbx, "list"), "getSandbox": (sbx.Sbx, "get"),
            "updateSandbox": (sbx.Sbx, "update"), "deleteSandbox": (sbx.Sbx, "delete"),
            "exec": (sbx.Sandbox, "exec"), "listProcesses": (sbx.Sandbox, "processes"),
            "getProcess": (sbx.Process, "info"), "attachProcess": (sbx.Process, "attach"),
            "waitProcess": (sbx.Process, "wait"), "writeStdin": (sbx.Process, "write_stdin"),
            "signalProcess": (sbx.Process, "signal"),
            "readFile": (sbx.Files, "read_page"), "writeFile": (sbx.Files, "write_bytes"), "statFile": (sbx.Files, "stat"),
            "listDir": (sbx.Files, "list"), "makeDir": (sbx.Files, "mkdir"), "move": (sbx.Files, "move"),
            "removeFile": (sbx.Files, "remove"), "glob": (sbx.Files, "glob"), "grep": (sbx.Files, "grep"),
            "download": (sbx.Files, "open_download"), "upload": (sbx.Files, "upload"),
            "downloadArchive": (sbx.Files, "open_archive"), "uploadArchive": (sbx.Files, "upload_archive"),
            "list_tools": (sbx.Sbx, "tools"), "call_tool": (sbx.Tools, "call"),
            "getPreviewURL": (sbx.Sandbox, "preview_url"), "setPortPublic": (sbx.Sandbox, "set_port_public"),
            "set_network": (sbx.Sandbox, "set_network"), "network_events": (sbx.Sandbox, "network_events"),
        }
        # Not wrapped, and why (README.md, "What is not covered").
        uncovered = {"openTerminal": "a WebSocket"}  # and proxy*: plain HTTP to the sandbox's server
        for path, ops in self.doc()["paths"].items():
            for method, op in ops.items():
                if not isinstance(op, dict) or "operationId" not in op:
                    continue
                oid = op["operationId"]
                with self.subTest(route="%s %s" % (method.upper(), path)):
                    if oid in uncovered or oid.startswith("proxy"):
                        continue
                    if oid.startswith("tool_"):
                        oid = "call_tool"  # every tool goes through Tools.call
                    self.assertIn(oid, covered, "a route the SDK does not cover")
                    cls, name = covered[oid]
                    self.assertTrue(callable(getattr(cls, name, None)), "%s.%s" % (cls.__name__, name))


class HelpersTest(unittest.TestCase):
    def test_parse_time(self) -> None:
        utc = dt.timezone.utc
        self.assertEqual(parse_time("2026-11-28T02:13:24.192536136Z"), dt.datetime(2026, 11, 28, 2, 13, 24, 192536, tzinfo=utc))
        self.assertEqual(parse_time("2026-11-28T02:13:09Z"), dt.datetime(2026, 11, 28, 2, 13, 9, tzinfo=utc))
        self.assertEqual(parse_time("2026-11-28T02:13:16.035Z"), dt.datetime(2026, 11, 28, 2, 13, 16, 35000, tzinfo=utc))
        t = parse_time("2026-11-28T04:13:16.5+02:00")
        assert t is not None
        self.assertEqual(t.astimezone(utc), dt.datetime(2026, 11, 28, 2, 13, 16, 500000, tzinfo=utc))
        self.assertIsNone(parse_time(""))

    def test_network_json(self) -> None:
        self.assertIsNone(network_json(None, None, None))
        self.assertEqual(network_json("full", None, ["x.test"]), {"mode": "full", "block": ["x.test"]})
        self.assertEqual(network_json(None, ["a.test"], None), {"mode": "allowlist", "allow": ["a.test"]})
        self.assertEqual(network_json(sbx.NetworkPolicy("allowlist", ["a"]), ["b"], None), {"mode": "allowlist", "allow": ["a", "b"]})

    def test_exec_body(self) -> None:
        self.assertEqual(exec_body("echo hi"), {"command": "echo hi"})
        self.assertEqual(exec_body(["ls", "-l"], stdin=b"\x00", timeout=5, pty=(24, 80), background=True),
                         {"argv": ["ls", "-l"], "stdin_base64": "AA==", "timeout": 5, "pty": {"rows": 24, "cols": 80},
                          "background": True})
        with self.assertRaises(TypeError):
            exec_body(b"echo")  # type: ignore[arg-type]

    def test_invalid_argument_field(self) -> None:
        e = sbx.InvalidArgumentError("create: invalid argument: network.mode: unknown mode")
        self.assertEqual(e.field, "network.mode")
        self.assertIsNone(sbx.InvalidArgumentError("exec x: invalid argument: cwd '/x' does not exist").field)


class ArchiveTest(unittest.TestCase):
    def test_tar_roundtrip_and_rules(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, "src")
            os.makedirs(os.path.join(src, "d", "e"))
            with open(os.path.join(src, "d", "e", "f.bin"), "wb") as f:
                f.write(bytes(range(256)) * 3)
            with open(os.path.join(src, "top"), "w") as f:
                f.write("top")
            os.symlink("top", os.path.join(src, "ln"))
            os.symlink("d", os.path.join(src, "dirlink"))
            for gz in (False, True):
                with self.subTest(gzip=gz):
                    pieces = list(tar_directory(src, chunk_size=100, gzip=gz))
                    self.assertTrue(all(len(p) <= 100 or p.startswith(b"\0") or gz or len(p) % 512 == 0 for p in pieces))
                    blob = b"".join(pieces)
                    with tarfile.open(fileobj=io.BytesIO(blob)) as tf:
                        m = {x.name: x for x in tf.getmembers()}
                    self.assertEqual(set(m), {"d", "d/e", "d/e/f.bin", "top", "ln", "dirlink"})
                    self.assertTrue(m["ln"].issym() and m["dirlink"].issym())
                    out = os.path.join(tmp, "out-%s" % gz)
                    res = extract_tar(io.BytesIO(blob), out)
                    with open(os.path.join(out, "d", "e", "f.bin"), "rb") as f:
                        self.assertEqual(f.read(), bytes(range(256)) * 3)
                    self.assertEqual(sorted(s.name for s in res.skipped), ["dirlink", "ln"])
                    self.assertFalse(os.path.lexists(os.path.join(out, "ln")))
                    self.assertEqual(res.bytes, 768 + 3)

    def test_extract_refuses_escapes_and_cleans_up(self) -> None:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tf:
            for name in ("../up.txt", "/abs.txt", "ok/../../x.txt", "fine.txt"):
                ti = tarfile.TarInfo(name)
                ti.size = 2
                tf.addfile(ti, io.BytesIO(b"hi"))
            dev = tarfile.TarInfo("dev")
            dev.type = tarfile.CHRTYPE
            tf.addfile(dev)
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "out")
            res = extract_tar(io.BytesIO(buf.getvalue()), out)
            self.assertEqual(os.listdir(out), ["fine.txt"])
            self.assertEqual(sorted((s.name, s.reason) for s in res.skipped),
                             [("../up.txt", "unsafe name"), ("/abs.txt", "unsafe name"),
                              ("dev", "only directories and regular files are extracted"), ("ok/../../x.txt", "unsafe name")])
            self.assertFalse(os.path.exists(os.path.join(tmp, "up.txt")))
            # A truncated archive fails and leaves nothing behind.
            cut = buf.getvalue()[:600]
            out2 = os.path.join(tmp, "out2")
            with self.assertRaises(tarfile.TarError):
                extract_tar(io.BytesIO(cut), out2)
            self.assertFalse(os.path.exists(out2))
            with self.assertRaises(FileExistsError):
                extract_tar(io.BytesIO(buf.getvalue()), out)  # not empty
            with self.assertRaises(ValueError):
                extract_tar(io.BytesIO(buf.getvalue()), os.path.join(tmp, "out3"), max_entries=0)
            self.assertFalse(os.path.exists(os.path.join(tmp, "out3")))


class CompatTest(unittest.TestCase):
    def test_python39_grammar(self) -> None:
        # The package promises Python >= 3.9: no syntax of later versions.
        for name in sorted(os.listdir(SRC)):
            if name.endswith(".py"):
                with self.subTest(file=name):
                    with open(os.path.join(SRC, name)) as f:
                        ast.parse(f.read(), name, feature_version=(3, 9))

    def test_public_names_have_docstrings(self) -> None:
        for name in sbx.__all__:
            obj = getattr(sbx, name)
            with self.subTest(name=name):
                self.assertTrue((obj.__doc__ or "").strip(), name)
            if isinstance(obj, type):
                for attr, member in vars(obj).items():
                    if attr.startswith("_") or not callable(member) and not isinstance(member, property):
                        continue
                    with self.subTest(member="%s.%s" % (name, attr)):
                        self.assertTrue((getattr(member, "__doc__", None) or "").strip(), "%s.%s" % (name, attr))
