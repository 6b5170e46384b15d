"""Background processes: list, get, attach with replay, wait, stdin,
signal."""

from __future__ import annotations

from sbx import NotFoundError, Process

from .support import LiveTest


class ProcessTest(LiveTest):
    def test_stdin_wait_attach(self) -> None:
        p = self.sb.exec_background("cat; echo done >&2", keep_stdin_open=True, tag="py-cat")
        self.assertIsInstance(p, Process)
        self.assertGreater(p.pid or 0, 0)
        info = p.info()
        self.assertTrue(info.running)
        self.assertEqual(info.tag, "py-cat")
        self.assertEqual(info.argv, ["/bin/sh", "-c", "cat; echo done >&2"])
        self.assertIn(p.process_id, [x.process_id for x in self.sb.processes()])

        # Not exited within 0 s: wait says it still runs.
        self.assertTrue(p.wait(timeout=0).running)
        p.write_stdin("line one\n")
        p.write_stdin(b"\x00\xff binary")
        p.close_stdin()
        done = p.wait(timeout=30)
        self.assertFalse(done.running)
        assert done.result is not None
        self.assertEqual(done.result.exit_code, 0)
        self.assertEqual(done.result.stdout, b"line one\n\x00\xff binary")
        self.assertEqual(done.result.stderr, b"done\n")

        # Attach after the end replays what it printed, then the result.
        for fmt in ("frames", "ndjson"):
            with self.subTest(format=fmt):
                stream = p.attach(replay=True, format=fmt)
                out = b"".join(ev.data for ev in stream if ev.type == "stdout")
                self.assertEqual(out, b"line one\n\x00\xff binary")
                assert stream.result is not None
                self.assertEqual(stream.result.exit_code, 0)

    def test_attach_follows_live_output(self) -> None:
        p = self.sb.exec_background("echo one; read x; echo two $x", keep_stdin_open=True)
        stream = p.attach(replay=True)
        chunks = []
        with stream:
            for ev in stream:
                if ev.type == "stdout":
                    chunks.append(ev.data)
                    if ev.data == b"one\n":
                        p.write_stdin("go\n")  # only after "one" arrived: the attach is live
        self.assertEqual(b"".join(chunks), b"one\ntwo go\n")
        assert stream.result is not None
        self.assertEqual(stream.result.reason, "exited")

    def test_signal(self) -> None:
        # argv, not a shell line: a shell waiting for its child may defer a
        # SIGINT that reaches it alone, and the child would go on.
        p = self.sb.exec_background(["sleep", "300"])
        self.assertEqual(p.signal("SIGTERM"), "signaled")
        info = p.wait(timeout=30)
        assert info.result is not None
        self.assertEqual((info.result.reason, info.result.signal, info.result.exit_code), ("signaled", 15, 143))
        self.assertEqual(p.signal("TERM"), "already_exited")

        q = self.sb.exec_background(["sleep", "300"])
        self.assertIn(q.kill(), ("signaled", "stopped"))
        r = q.wait(timeout=30).result
        assert r is not None
        self.assertEqual(r.signal, 9)

        n = self.sb.exec_background(["sleep", "300"])
        self.assertEqual(n.signal(2), "signaled")  # by number: SIGINT
        r = n.wait(timeout=30).result
        assert r is not None
        self.assertEqual(r.signal, 2)

    def test_background_timeout(self) -> None:
        p = self.sb.exec_background("sleep 300", timeout=1)
        r = p.wait(timeout=30).result
        assert r is not None
        self.assertEqual((r.reason, r.exit_code), ("timeout", 124))

    def test_unknown_process(self) -> None:
        with self.assertRaises(NotFoundError) as cm:
            self.sb.get_process("pnosuchprocess")
        self.assertEqual(cm.exception.sandbox_id, self.sb.id)
        self.assertIn("pnosuchprocess", str(cm.exception))
        with self.assertRaises(NotFoundError):
            self.sb.process("pnosuchprocess").wait(timeout=0)
