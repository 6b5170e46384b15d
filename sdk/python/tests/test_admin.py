"""Keys and capabilities, secrets, the audit log, preview URLs, network
tiers and events, per-key limits."""

from __future__ import annotations

import datetime as dt
import os
import time
import urllib.error
import urllib.request
import uuid
from typing import List, Optional

from sbx import (
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    ResourceExhaustedError,
    Sandbox,
    Sbx,
    UnauthenticatedError,
)

from .support import LiveTest, env_int


def _get(url: str, headers: Optional[dict] = None) -> "tuple[int, bytes]":
    req = urllib.request.Request(url, headers=headers or {})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect())
    try:
        with opener.open(req, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *a, **kw):  # type: ignore[no-untyped-def]
        return None


class KeysTest(LiveTest):
    def test_keys_and_capabilities(self) -> None:
        name = "py-sdk-" + uuid.uuid4().hex[:8]
        k = self.client.create_key(name, capabilities=["tools.files"])
        self.assertTrue(k.secret and k.secret.startswith("sbx_"))
        self.assertEqual((k.name, k.capabilities), (name, ["tools.files"]))
        listed = {x.id: x for x in self.client.keys()}
        self.assertIn(k.id, listed)
        self.assertIsNone(listed[k.id].secret)  # shown once only

        assert k.secret is not None
        with Sbx(self.client.url, k.secret) as limited:
            own = limited.create(labels={"sbx.test": "python-sdk"})
            try:
                own.files.write_text("ok.txt", "files are allowed")
                self.assertEqual(own.files.read_text("ok.txt"), "files are allowed")
                with self.assertRaises(PermissionDeniedError) as cm:
                    own.exec("true")
                self.assertIn("sandbox.exec", str(cm.exception))
                self.assertEqual(cm.exception.status, 403)
                with self.assertRaises(PermissionDeniedError):
                    own.tools.sandbox_bash("true")
                # Another key's sandbox reads as not found.
                with self.assertRaises(NotFoundError):
                    limited.get(self.sb.id)
                self.assertEqual([s.id for s in limited.list()], [own.id])
                with self.assertRaises(PermissionDeniedError):
                    limited.create_key("nope")
            finally:
                own.delete(missing_ok=True)
            self.client.revoke_key(k.id)
            with self.assertRaises(UnauthenticatedError) as ua:
                limited.list()
            self.assertEqual(ua.exception.status, 401)
        revoked = [x for x in self.client.keys() if x.id == k.id]
        self.assertTrue(not revoked or revoked[0].revoked_at is not None)


class SecretsTest(LiveTest):
    def test_secrets(self) -> None:
        name = "py-sdk-" + uuid.uuid4().hex[:8]
        self.addCleanup(self._delete_secret, name)
        s = self.client.set_secret(name, "first-value")
        self.assertEqual((s.name, s.mode, s.replaced), (name, "env", False))
        s2 = self.client.set_secret(name, "s3cr3t-value")
        self.assertTrue(s2.replaced)
        self.assertEqual(s2.created_at, s.created_at)
        self.assertEqual(self.client.get_secret(name).name, name)
        self.assertIn(name, [x.name for x in self.client.secrets()])
        self.assertNotIn("s3cr3t-value", repr(self.client.secrets()))

        r = self.sb.exec('printf %s "$TOKEN"', secrets={"TOKEN": name})
        self.assertEqual(r.stdout, b"s3cr3t-value")
        sb = self.new_sandbox(secrets={"SANDBOX_TOKEN": name})
        self.assertEqual(sb.exec('printf %s "$SANDBOX_TOKEN"').stdout, b"s3cr3t-value")

        with self.assertRaises(InvalidArgumentError) as cm:
            self.sb.exec("true", secrets={"X": "no-such-secret-" + name})
        self.assertIn("no-such-secret-" + name, str(cm.exception))

        self.client.delete_secret(name)
        with self.assertRaises(NotFoundError):
            self.client.get_secret(name)

    def _delete_secret(self, name: str) -> None:
        try:
            self.client.delete_secret(name)
        except NotFoundError:
            pass


class AuditTest(LiveTest):
    def test_audit(self) -> None:
        start = dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=5)
        self.sb.exec(["echo", "audited"])
        self.sb.files.write_text("audit.txt", "x")
        recs = []
        for _ in range(100):  # records are written in batches: wait for them
            recs = self.client.audit(sandbox_id=self.sb.id, since=start, limit=100)
            if {"exec_start", "write_file"} <= {r.action for r in recs}:
                break
            time.sleep(0.1)
        actions = {r.action for r in recs}
        self.assertTrue({"create", "exec_start", "write_file"} <= actions, actions)
        self.assertTrue(all(r.sandbox_id == self.sb.id for r in recs))
        self.assertIn("audit.txt", [r.target for r in recs if r.action == "write_file"])
        ids = [r.id for r in recs]
        self.assertEqual(ids, sorted(ids, reverse=True))  # newest first
        self.assertEqual(len(self.client.audit(sandbox_id=self.sb.id, limit=1)), 1)
        future = dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1)
        self.assertEqual(self.client.audit(sandbox_id=self.sb.id, since=future), [])


class PreviewTest(LiveTest):
    def test_preview_url(self) -> None:
        port = 8123
        self.sb.files.write_text("site/index.html", "hello preview")
        self.sb.exec_background(["python3", "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", "/workspace/site"])
        u = self.sb.preview_url(port)
        self.assertEqual(u.port, port)
        self.assertFalse(u.public)
        self.assertTrue(u.token)
        self.assertIn(self.sb.id, u.url)
        self.assertIn("/v1/sandboxes/%s/proxy/%d/" % (self.sb.id, port), u.path_url)
        if not u.path_url.startswith(("http://127.", "http://localhost", "http://[::1]")):
            return  # the daemon is not on this machine's loopback: the proxy is not fetched
        status, body = 0, b""
        for _ in range(300):  # until the server in the sandbox listens (30 s at most)
            status, body = _get(u.path_url, {"X-Sbx-Preview-Token": u.token})
            if status == 200:
                break
            time.sleep(0.1)
        self.assertEqual((status, body), (200, b"hello preview"))
        self.assertEqual(_get(u.path_url)[0], 401)
        self.assertEqual(_get(u.path_url, {"X-Sbx-Preview-Token": "wrong"})[0], 403)

        pub = self.sb.set_port_public(port)
        self.assertTrue(pub.public)
        self.assertEqual(_get(u.path_url), (200, b"hello preview"))
        self.assertIn(port, self.sb.refresh().public_ports)
        self.assertFalse(self.sb.set_port_public(port, False).public)
        self.assertEqual(_get(u.path_url)[0], 401)


class NetworkTest(LiveTest):
    def test_tiers_and_events(self) -> None:
        allowed = os.environ.get("SBX_TEST_NET_ALLOWED")
        blocked = os.environ.get("SBX_TEST_NET_BLOCKED")
        if not allowed or not blocked:
            self.skipTest("SBX_TEST_NET_ALLOWED and SBX_TEST_NET_BLOCKED (names the daemon's network serves) are not set")
        sb = self.new_sandbox(network="allowlist", allow=[allowed], block=[blocked])
        self.assertEqual(sb.info.network.mode, "allowlist")
        self.assertEqual((sb.info.network.allow, sb.info.network.block), ([allowed], [blocked]))
        probe = (
            "import urllib.request, sys\n"
            "for h in sys.argv[1:]:\n"
            "    try:\n"
            "        urllib.request.urlopen('http://%s/' % h, timeout=10).read()\n"
            "        print(h, 'reached')\n"
            "    except Exception as e:\n"
            "        print(h, 'refused', type(e).__name__)\n"
        )
        r = sb.exec(["python3", "-c", probe, allowed, blocked], timeout=60)
        self.assertIn(("%s reached" % allowed).encode(), r.stdout)
        self.assertIn(("%s refused" % blocked).encode(), r.stdout)
        ev = sb.network_events()
        self.assertGreaterEqual(ev.allowed, 1)
        self.assertGreaterEqual(ev.refused, 1)
        self.assertTrue(any(blocked in e.destination and not e.allowed for e in ev.events), ev.events)
        self.assertTrue(any(allowed in e.destination and e.allowed for e in ev.events), ev.events)

        info = sb.set_network("full", block=[allowed])
        self.assertEqual((info.network.mode, info.network.block), ("full", [allowed]))
        r = sb.exec(["python3", "-c", probe, allowed], timeout=60)
        self.assertIn(("%s refused" % allowed).encode(), r.stdout)
        self.assertEqual(sb.set_network("none").network.mode, "none")
        with self.assertRaises(InvalidArgumentError) as cm:
            sb.set_network("bogus")
        self.assertEqual(cm.exception.field, "network.mode")


class LimitsTest(LiveTest):
    def test_per_key_limit(self) -> None:
        n = env_int("SBX_TEST_MAX_SANDBOXES_PER_KEY")
        if not n:
            self.skipTest("SBX_TEST_MAX_SANDBOXES_PER_KEY (the daemon's max_sandboxes_per_key) is not set")
        k = self.client.create_key("py-sdk-limit-" + uuid.uuid4().hex[:8])
        self.addCleanup(self.client.revoke_key, k.id)
        assert k.secret is not None
        made: List[Sandbox] = []
        with Sbx(self.client.url, k.secret) as c:
            try:
                for _ in range(n):
                    made.append(c.create(labels={"sbx.test": "python-sdk"}))
                with self.assertRaises(ResourceExhaustedError) as cm:
                    c.create(labels={"sbx.test": "python-sdk"})
                e = cm.exception
                self.assertEqual((e.status, e.code), (429, "resource_exhausted"))
                assert e.retry_after is not None
                self.assertGreater(e.retry_after, 0)
                self.assertIn("max_sandboxes_per_key", str(e))
                made.pop().delete()
                made.append(c.create(labels={"sbx.test": "python-sdk"}))  # a place freed
            finally:
                for sb in made:
                    sb.delete(missing_ok=True)
