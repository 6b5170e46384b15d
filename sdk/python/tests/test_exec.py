"""Exec: to completion and streamed (frames and NDJSON), exact bytes,
stdin, env, cwd, timeout, argv; callbacks; a stream's first chunk arrives
while the command still runs."""

from __future__ import annotations

import hashlib
from typing import List

from sbx import Event, ExecStream, NotFoundError

from .support import LiveTest

ALL_BYTES = bytes(range(256))


class ExecTest(LiveTest):
    def test_exit_codes_and_output(self) -> None:
        r = self.sb.exec("echo out; echo err >&2; exit 3")
        self.assertEqual((r.exit_code, r.reason), (3, "exited"))
        self.assertEqual((r.stdout, r.stderr), (b"out\n", b"err\n"))
        self.assertEqual((r.stdout_text, r.stderr_text), ("out\n", "err\n"))
        self.assertFalse(r.ok)
        self.assertTrue(r.process_id)
        self.assertGreater(r.pid, 0)
        self.assertEqual((r.stdout_size, r.stderr_size), (4, 4))
        self.assertTrue(self.sb.exec("true").ok)
        self.assertEqual(self.sb.exec("kill -TERM $$").exit_code, 128 + 15)

    def test_binary_output_exact(self) -> None:
        # Every byte value, not valid UTF-8: the result carries the exact bytes.
        self.sb.files.write_bytes("/workspace/all.bin", ALL_BYTES)
        r = self.sb.exec("cat /workspace/all.bin; cat /workspace/all.bin >&2")
        self.assertEqual(r.stdout, ALL_BYTES)
        self.assertEqual(r.stderr, ALL_BYTES)
        self.assertEqual(r.stdout_text, ALL_BYTES.decode("utf-8", "replace"))

    def test_argv_stdin_env_cwd(self) -> None:
        r = self.sb.exec(["printf", "%s|", "a b", "$HOME", "*"])
        self.assertEqual(r.stdout, b"a b|$HOME|*|")  # no shell: nothing expanded
        self.assertEqual(self.sb.exec("cat", stdin="text in").stdout, b"text in")
        self.assertEqual(self.sb.exec("cat", stdin=ALL_BYTES).stdout, ALL_BYTES)
        r = self.sb.exec('printf "%s/%s" "$A" "$B"', env={"A": "1", "B": "two words"})
        self.assertEqual(r.stdout, b"1/two words")
        self.sb.files.mkdir("/workspace/sub/dir")
        self.assertEqual(self.sb.exec("pwd", cwd="/workspace/sub/dir").stdout, b"/workspace/sub/dir\n")
        self.assertEqual(self.sb.exec("pwd").stdout, b"/workspace\n")

    def test_timeout_kills(self) -> None:
        r = self.sb.exec("echo before; sleep 30; echo after", timeout=1)
        self.assertEqual(r.reason, "timeout")
        self.assertTrue(r.timed_out)
        self.assertEqual(r.exit_code, 124)
        self.assertEqual(r.stdout, b"before\n")

    def test_output_limit_keeps_head_and_tail(self) -> None:
        r = self.sb.exec("seq 1 100000", output_limit_bytes=4096)
        self.assertTrue(r.truncated)
        self.assertTrue(r.stdout.startswith(b"1\n2\n3\n"))
        self.assertTrue(r.stdout.endswith(b"99999\n100000\n"))
        self.assertGreater(r.stdout_dropped, 0)
        self.assertEqual(r.stdout_size, len(b"".join(b"%d\n" % i for i in range(1, 100001))))
        assert r.stdout_path is not None
        full = self.sb.files.read_bytes(r.stdout_path)
        self.assertEqual(full, b"".join(b"%d\n" % i for i in range(1, 100001)))

    def test_stream_first_chunk_before_the_command_ends(self) -> None:
        # The command prints, then waits for a file only this test creates,
        # once it has seen that first chunk: a stream that held output until
        # the end would never see it, and the command would time out.
        for fmt in ("frames", "ndjson"):
            with self.subTest(format=fmt):
                self.sb.files.remove("/workspace/go")
                stream = self.sb.exec_stream(
                    "echo first; while [ ! -e /workspace/go ]; do sleep 0.05; done; echo second >&2; echo third",
                    timeout=30, format=fmt,
                )
                seen: List[Event] = []
                with stream:
                    for ev in stream:
                        seen.append(ev)
                        if ev.type == "stdout" and ev.data == b"first\n":
                            assert stream.process_id is not None
                            self.assertTrue(self.sb.get_process(stream.process_id).running)
                            self.sb.files.write_text("/workspace/go", "")
                self.assertEqual(stream.format, "application/vnd.sbx.frames" if fmt == "frames" else "application/x-ndjson")
                self.assertEqual(seen[0].type, "started")
                self.assertEqual(seen[-1].type, "result")
                res = stream.result
                assert res is not None
                self.assertEqual((res.reason, res.exit_code), ("exited", 0))
                # Each stream in order (stdout and stderr are two pipes: no
                # order holds between them), "first" before anything else.
                out = [e for e in seen if e.type in ("stdout", "stderr")]
                self.assertEqual((out[0].type, out[0].data), ("stdout", b"first\n"))
                self.assertEqual(b"".join(e.data for e in out if e.type == "stdout"), b"first\nthird\n")
                self.assertEqual(b"".join(e.data for e in out if e.type == "stderr"), b"second\n")

    def test_stream_large_binary_exact(self) -> None:
        # 3 MiB of random bytes through both stream forms, compared by hash.
        self.sb.exec("head -c 3145728 /dev/urandom > /workspace/rand.bin")
        want = self.sb.exec("sha256sum /workspace/rand.bin").stdout.split()[0].decode()
        for fmt in ("frames", "ndjson"):
            with self.subTest(format=fmt):
                h = hashlib.sha256()
                n = 0
                stream = self.sb.exec_stream("cat /workspace/rand.bin", format=fmt)
                for ev in stream:
                    if ev.type == "stdout":
                        h.update(ev.data)
                        n += len(ev.data)
                self.assertEqual(n, 3145728)
                self.assertEqual(h.hexdigest(), want)
                assert stream.result is not None
                self.assertEqual(stream.result.stdout_size, 3145728)

    def test_callbacks(self) -> None:
        out: List[bytes] = []
        err: List[bytes] = []
        events: List[str] = []
        self.sb.files.write_bytes("/workspace/all.bin", ALL_BYTES)
        r = self.sb.exec(
            "for i in 1 2 3; do echo o$i; echo e$i >&2; done; cat /workspace/all.bin; exit 5",
            on_stdout=out.append, on_stderr=err.append, on_event=lambda ev: events.append(ev.type),
        )
        self.assertEqual(r.exit_code, 5)
        self.assertEqual(b"".join(out), b"o1\no2\no3\n" + ALL_BYTES)
        self.assertEqual(b"".join(err), b"e1\ne2\ne3\n")
        self.assertEqual(events[0], "started")
        self.assertEqual(events[-1], "result")

    def test_callback_error_ends_the_call(self) -> None:
        def boom(_: bytes) -> None:
            raise KeyError("stop")

        with self.assertRaises(KeyError):
            self.sb.exec("echo x", on_stdout=boom)
        # The client is still usable after the dropped stream.
        self.assertEqual(self.sb.exec("echo ok").stdout, b"ok\n")

    def test_stream_wait_and_close_early(self) -> None:
        s = self.sb.exec_stream("echo a; echo b")
        self.assertIsInstance(s, ExecStream)
        res = s.wait()
        self.assertEqual(res.stdout, b"a\nb\n")
        self.assertEqual(list(s), [])  # iterating an ended stream yields nothing
        # A stream dropped early leaves the command running in the sandbox.
        s2 = self.sb.exec_stream("echo started; sleep 2; echo done > /workspace/early.txt")
        first = next(iter(s2))
        self.assertEqual(first.type, "started")
        pid = s2.process_id
        s2.close()
        assert pid is not None
        info = self.sb.process(pid).wait(timeout=30)
        self.assertFalse(info.running)
        self.assertEqual(self.sb.files.read_text("/workspace/early.txt"), "done\n")

    def test_unknown_sandbox(self) -> None:
        ghost = self.client.sandbox("a" * 26)
        with self.assertRaises(NotFoundError) as cm:
            ghost.exec("true")
        self.assertEqual(cm.exception.sandbox_id, "a" * 26)
        self.assertIn("a" * 26, str(cm.exception))
        with self.assertRaises(NotFoundError):
            ghost.exec_stream("true")
        with self.assertRaises(NotFoundError):
            ghost.exec("true", on_stdout=lambda b: None)
