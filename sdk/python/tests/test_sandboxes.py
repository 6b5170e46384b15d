"""Sandboxes: create with options, get, list by label, update, delete, the
context manager, idempotent create, health, the unix socket URL."""

from __future__ import annotations

import datetime as dt
import os
import unittest
import uuid

import sbx
from sbx import NotFoundError, Sandbox, Sbx

from .support import live_client


class SandboxLifecycleTest(unittest.TestCase):
    def setUp(self) -> None:
        self.client = live_client()
        self.addCleanup(self.client.close)

    def test_create_options_get_list_update_delete(self) -> None:
        tag = uuid.uuid4().hex[:12]
        sb = self.client.create(
            timeout=120,
            memory_mb=256,
            cpus=0.5,
            pids=64,
            disk_mb=256,
            network="none",
            labels={"sbx.test": "python-sdk", "run": tag},
            env={"GREETING": "hello from env"},
        )
        self.addCleanup(sb.delete, missing_ok=True)
        info = sb.info
        self.assertEqual(info.state, "running")
        self.assertRegex(sb.id, r"^[a-z2-7]{26}$")
        self.assertEqual((info.limits.memory_mb, info.limits.pids, info.limits.disk_mb, info.limits.timeout), (256, 64, 256, 120))
        self.assertAlmostEqual(info.limits.cpus, 0.5)
        self.assertEqual(info.network.mode, "none")
        self.assertEqual(info.labels["run"], tag)
        self.assertIsNotNone(info.created_at)
        assert info.created_at is not None and info.expires_at is not None
        self.assertAlmostEqual((info.expires_at - info.created_at).total_seconds(), 120, delta=5)
        self.assertTrue(info.isolation.sandbox)
        self.assertEqual(info.isolation.backend, info.backend)
        self.assertNotIn("GREETING", str(info.raw))  # env values are never echoed back

        # The env reached the sandbox; memory limit is the cgroup's.
        r = sb.exec('printf %s "$GREETING"')
        self.assertEqual(r.stdout, b"hello from env")

        got = self.client.get(sb.id)
        self.assertEqual(got, sb)
        self.assertEqual(got.info.labels, info.labels)

        listed = self.client.list(labels={"run": tag})
        self.assertEqual([s.id for s in listed], [sb.id])
        self.assertEqual(self.client.list(labels={"run": tag + "-none"}), [])
        self.assertIn(sb.id, [s.id for s in self.client.list()])

        before = info.expires_at
        upd = sb.update(timeout=600, labels={"sbx.test": "python-sdk", "run": tag, "phase": "two"})
        assert upd.expires_at is not None
        self.assertGreater(upd.expires_at, before + dt.timedelta(seconds=300))
        self.assertEqual(upd.labels["phase"], "two")
        self.assertEqual(self.client.list(labels={"run": tag, "phase": "two"}), [sb])
        self.assertEqual(sb.refresh().labels["phase"], "two")

        sb.delete()
        with self.assertRaises(NotFoundError) as cm:
            self.client.get(sb.id)
        self.assertEqual(cm.exception.sandbox_id, sb.id)
        with self.assertRaises(NotFoundError):
            sb.delete()
        sb.delete(missing_ok=True)

    def test_context_manager_deletes(self) -> None:
        with self.client.create(labels={"sbx.test": "python-sdk"}) as sb:
            self.assertIsInstance(sb, Sandbox)
            self.assertEqual(sb.exec("true").exit_code, 0)
            sid = sb.id
        with self.assertRaises(NotFoundError):
            self.client.get(sid)

    def test_context_manager_deletes_on_error(self) -> None:
        sid = ""
        with self.assertRaises(ZeroDivisionError):
            with self.client.create(labels={"sbx.test": "python-sdk"}) as sb:
                sid = sb.id
                1 / 0
        with self.assertRaises(NotFoundError):
            self.client.get(sid)

    def test_idempotent_create(self) -> None:
        key = "py-" + uuid.uuid4().hex
        a = self.client.create(labels={"sbx.test": "python-sdk"}, idempotency_key=key)
        self.addCleanup(a.delete, missing_ok=True)
        b = self.client.create(labels={"sbx.test": "python-sdk"}, idempotency_key=key)
        self.assertEqual(a.id, b.id)
        with self.assertRaises(sbx.AlreadyExistsError) as cm:
            self.client.create(labels={"sbx.test": "other"}, idempotency_key=key)
        self.assertIn(key, str(cm.exception))

    def test_sandbox_by_id_without_request(self) -> None:
        with self.client.create(labels={"sbx.test": "python-sdk"}) as sb:
            bound = self.client.sandbox(sb.id)
            self.assertEqual(bound.exec(["echo", "bound"]).stdout, b"bound\n")
            self.assertEqual(bound.state, "running")  # fetched on first use

    def test_health(self) -> None:
        h = self.client.health()
        self.assertEqual(h.status, "ok")
        primary = [b for b in h.backends if b.primary]
        self.assertEqual(len(primary), 1)
        self.assertTrue(primary[0].available)
        # Health needs no key at all.
        with Sbx(self.client.url, api_key="") as anonymous:
            self.assertEqual(anonymous.health().status, "ok")

    def test_openapi_document(self) -> None:
        doc = self.client.openapi()
        self.assertTrue(str(doc["openapi"]).startswith("3."))
        self.assertIn("/v1/sandboxes/{id}/exec", doc["paths"])


class UnixSocketTest(unittest.TestCase):
    """The unix:/path URL form, as the CLI takes it."""

    def test_unix_socket(self) -> None:
        sock = os.environ.get("SBX_TEST_SOCKET")
        if not sock:
            self.skipTest("SBX_TEST_SOCKET (the daemon's socket path) is not set")
        for url in ("unix:" + sock, "unix://" + sock):
            with Sbx(url, os.environ.get("SBX_API_KEY")) as c:
                self.assertEqual(c.health().status, "ok")
                with c.create(labels={"sbx.test": "python-sdk"}) as sb:
                    r = sb.exec("echo over-the-socket; exit 7")
                    self.assertEqual((r.exit_code, r.stdout), (7, b"over-the-socket\n"))
                    got = b"".join(ev.data for ev in sb.exec_stream("printf abc") if ev.type == "stdout")
                    self.assertEqual(got, b"abc")
                    sb.files.upload("/workspace/u.bin", iter([b"x" * 70000, b"y"]))
                    self.assertEqual(sb.files.read_bytes("/workspace/u.bin"), b"x" * 70000 + b"y")
