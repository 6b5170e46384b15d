"""What the live tests share: the daemon from the environment, and a
sandbox per test class, always deleted."""

from __future__ import annotations

import os
import unittest
from typing import Any, ClassVar, Optional

from sbx import Sandbox, Sbx


def live_client(**kw: Any) -> Sbx:
    """A client of the daemon under test; fails (not skips) without one."""
    if not os.environ.get("SBX_URL"):
        raise RuntimeError(
            "SBX_URL is not set: the live tests need a running daemon (bin/sbx serve, or make run) "
            "named by SBX_URL and SBX_API_KEY; go test ./test/e2e -run TestSDKPython runs them against one"
        )
    return Sbx(**kw)


def env_int(name: str) -> Optional[int]:
    """An integer setting of the test run (from the Go wrapper), or None."""
    v = os.environ.get(name)
    return int(v) if v else None


class LiveTest(unittest.TestCase):
    """A test class with a client and one sandbox, deleted at the end."""

    client: ClassVar[Sbx]
    sb: ClassVar[Sandbox]
    create_args: ClassVar[dict] = {}

    @classmethod
    def setUpClass(cls) -> None:
        cls.client = live_client()
        cls.sb = cls.client.create(labels={"sbx.test": "python-sdk", "class": cls.__name__}, **cls.create_args)

    @classmethod
    def tearDownClass(cls) -> None:
        try:
            cls.sb.delete(missing_ok=True)
        finally:
            cls.client.close()

    def new_sandbox(self, **kw: Any) -> Sandbox:
        """A further sandbox, deleted when the test ends."""
        labels = dict(kw.pop("labels", {}) or {})
        labels.setdefault("sbx.test", "python-sdk")
        sb = self.client.create(labels=labels, **kw)
        self.addCleanup(sb.delete, missing_ok=True)
        return sb
