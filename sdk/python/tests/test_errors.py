"""Errors from a real daemon: the class, code, status, message and the
sandbox or field they name."""

from __future__ import annotations

from sbx import InvalidArgumentError, NotFoundError, SbxError, Sbx, UnauthenticatedError

from .support import LiveTest

GHOST = "a" * 26


class ErrorsTest(LiveTest):
    def test_unknown_sandbox_names_the_id(self) -> None:
        for call, op in ((lambda: self.client.get(GHOST), "get"),
                         (lambda: self.client.update(GHOST, timeout=60), "update"),
                         (lambda: self.client.delete(GHOST), "delete"),
                         (lambda: self.client.sandbox(GHOST).files.read_text("x"), "download"),
                         (lambda: self.client.sandbox(GHOST).processes(), "list_processes")):
            with self.subTest(op=op):
                with self.assertRaises(NotFoundError) as cm:
                    call()
                e = cm.exception
                self.assertIsInstance(e, SbxError)
                self.assertEqual((e.code, e.status, e.sandbox_id, e.op), ("not_found", 404, GHOST, op))
                self.assertIn(GHOST, str(e))
                self.assertTrue(e.request_id)
        # A malformed id reads exactly as an unknown one.
        with self.assertRaises(NotFoundError) as cm2:
            self.client.get("not an id/..")
        self.assertEqual(cm2.exception.sandbox_id, "not an id/..")

    def test_bad_input_names_the_field(self) -> None:
        cases = [
            (lambda: self.client.create(timeout=-1), "timeout"),
            (lambda: self.client.create(memory_mb=0), "memory_mb"),
            (lambda: self.client.create(network="bogus"), "network.mode"),
            (lambda: self.sb.exec("true", timeout=0), "timeout"),
            (lambda: self.sb.exec("true", timeout=99999), "timeout"),
            (lambda: self.sb.exec_stream("true", timeout=0), "timeout"),
        ]
        for call, field in cases:
            with self.subTest(field=field):
                with self.assertRaises(InvalidArgumentError) as cm:
                    call()
                e = cm.exception
                self.assertEqual((e.code, e.status, e.field), ("invalid_argument", 400, field))
                self.assertIn(field, str(e))
        with self.assertRaises(InvalidArgumentError) as cm3:
            self.sb.exec("true", timeout=0)
        self.assertEqual(cm3.exception.sandbox_id, self.sb.id)

    def test_bad_key(self) -> None:
        with Sbx(self.client.url, "sbx_not_a_real_key") as bad:
            with self.assertRaises(UnauthenticatedError) as cm:
                bad.list()
            self.assertEqual((cm.exception.status, cm.exception.code), (401, "unauthenticated"))
            self.assertEqual(bad.health().status, "ok")

    def test_refused_upload_reports_the_daemon_error(self) -> None:
        # The daemon refuses a streamed upload to an unknown sandbox before
        # reading its 64 MiB body: its answer, not a broken pipe, is the error.
        def body():  # type: ignore[no-untyped-def]
            for _ in range(64):
                yield b"\0" * (1 << 20)

        with self.assertRaises(NotFoundError) as cm:
            self.client.sandbox(GHOST).files.upload("x.bin", body())
        self.assertEqual((cm.exception.sandbox_id, cm.exception.status), (GHOST, 404))
