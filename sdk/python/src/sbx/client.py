"""The sbx client: sandboxes, keys, secrets, tools, audit and health."""

from __future__ import annotations

import datetime as _dt
import os
import ssl
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

from ._discover import resolve
from ._paths import q as _q
from ._paths import sandbox_path
from ._transport import Body, Query, Response, Transport
from .errors import NotFoundError
from .models import (
    AuditRecord,
    Health,
    KeyInfo,
    NetworkPolicy,
    SandboxInfo,
    SecretInfo,
    ToolInfo,
    network_json,
)
from .sandbox import Sandbox

__all__ = ["Sbx"]

NetworkArg = Union[str, NetworkPolicy, Mapping[str, Any], None]


class Sbx:
    """Sbx is a client of one sbx daemon's HTTP API /v1.

    ``url`` is ``http://host:port``, ``https://…`` or ``unix:/path/sbx.sock``;
    it defaults to ``$SBX_URL``, and ``api_key`` to ``$SBX_API_KEY``. With
    neither set, it finds the local daemon as the CLI does: the data
    directory's ``sbx.sock`` and ``admin.key`` (``/var/lib/sbx`` as root).

    ``timeout`` bounds each wait for the daemon, in seconds (None: no bound);
    calls that wait for a command (exec, wait, streams) wait as long as the
    command may run. A client is safe to share between threads; close it (or
    use it as a context manager) to drop its idle connections.
    """

    def __init__(
        self,
        url: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        timeout: Optional[float] = 60.0,
        ssl_context: Optional[ssl.SSLContext] = None,
        user_agent: str = "sbx-python",
    ) -> None:
        u, key, source = resolve(url, api_key, os.environ, os.geteuid() if hasattr(os, "geteuid") else -1)
        self._t = Transport(u, key, timeout=timeout, ssl_context=ssl_context, user_agent=user_agent, source=source)

    @property
    def url(self) -> str:
        """The daemon's address as given or found."""
        return self._t.endpoint.url

    @property
    def timeout(self) -> Optional[float]:
        """The client's bound on each wait for the daemon, in seconds."""
        return self._t.timeout

    def close(self) -> None:
        """Close the client's idle connections."""
        self._t.close()

    def __enter__(self) -> "Sbx":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return "Sbx(%r)" % self.url

    # --- plumbing shared with Sandbox, Files, Tools and Process

    def _request(
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
        return self._t.request(
            method, path, op=op, sandbox_id=sandbox_id, query=query, json_body=json_body, body=body,
            content_type=content_type, accept=accept, headers=headers, timeout=timeout, auth=auth,
        )

    def _call(self, method: str, path: str, *, op: str, sandbox_id: Optional[str] = None, **kw: Any) -> Any:
        """Do one request and decode its JSON answer (None when empty)."""
        return self._request(method, path, op=op, sandbox_id=sandbox_id, **kw).json()

    def _wait_timeout(self, seconds: Optional[float]) -> Optional[float]:
        """The socket timeout of a call that waits up to seconds (the
        longest exec timeout, 3600 s, when unknown) for a command."""
        if self._t.timeout is None:
            return None
        return max(self._t.timeout, (seconds if seconds is not None else 3600.0) + 30.0)

    # --- health and the API document

    def health(self) -> Health:
        """The daemon's backends, why any is unavailable, and the warm pool.
        Needs no API key."""
        return Health.from_json(self._call("GET", "/v1/health", op="health", auth=False))

    def openapi(self) -> Dict[str, Any]:
        """The daemon's OpenAPI document of /v1."""
        return dict(self._call("GET", "/v1/openapi.json", op="openapi", auth=False))

    # --- sandboxes

    def create(
        self,
        template: Optional[str] = None,
        *,
        timeout: Optional[int] = None,
        memory_mb: Optional[int] = None,
        cpus: Optional[float] = None,
        pids: Optional[int] = None,
        disk_mb: Optional[int] = None,
        network: NetworkArg = None,
        allow: Optional[Sequence[str]] = None,
        block: Optional[Sequence[str]] = None,
        labels: Optional[Mapping[str, str]] = None,
        env: Optional[Mapping[str, str]] = None,
        secrets: Optional[Mapping[str, str]] = None,
        idempotency_key: Optional[str] = None,
    ) -> Sandbox:
        """Create a sandbox and return it, running.

        Args:
            template: the template's name (default: the operator's first).
            timeout: time to live in seconds (default 300); ``update`` extends it.
            memory_mb, cpus, pids, disk_mb: limits (MiB, cores, processes,
                MiB), within the operator's policy.
            network: the tier (``"none"``, ``"allowlist"``, ``"full"``), a
                NetworkPolicy, or its JSON object.
            allow, block: domains, ``*.wildcards``, addresses or CIDRs added
                to the policy's lists; ``allow`` alone means ``allowlist``.
            labels: key-value labels, for ``list(labels=…)``.
            env: environment of every process in the sandbox.
            secrets: environment variable → name of one of the caller's
                secrets (``set_secret``).
            idempotency_key: a retry with the same key and arguments returns
                the sandbox the first call made instead of another.

        The sandbox is a context manager that deletes it on exit.
        """
        body: Dict[str, Any] = {}
        if template is not None:
            body["template"] = template
        for k, v in (("timeout", timeout), ("memory_mb", memory_mb), ("cpus", cpus), ("pids", pids), ("disk_mb", disk_mb)):
            if v is not None:
                body[k] = v
        net = network_json(network, allow, block)
        if net is not None:
            body["network"] = net
        if labels is not None:
            body["labels"] = dict(labels)
        if env is not None:
            body["env"] = dict(env)
        if secrets is not None:
            body["secrets"] = dict(secrets)
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key is not None else None
        d = self._call("POST", "/v1/sandboxes", op="create", json_body=body, headers=headers,
                       timeout=self._wait_timeout(120.0))
        return Sandbox(self, SandboxInfo.from_json(d))

    def get(self, sandbox_id: str) -> Sandbox:
        """Fetch sandbox ``sandbox_id``; NotFoundError when there is none
        (or it is another API key's)."""
        return Sandbox(self, self.get_info(sandbox_id))

    def get_info(self, sandbox_id: str) -> SandboxInfo:
        """Describe sandbox ``sandbox_id``."""
        return SandboxInfo.from_json(self._call("GET", sandbox_path(sandbox_id), op="get", sandbox_id=sandbox_id))

    def sandbox(self, sandbox_id: str) -> Sandbox:
        """A Sandbox bound to ``sandbox_id`` without asking the daemon:
        its first call says whether it exists."""
        return Sandbox(self, sandbox_id=sandbox_id)

    def list(self, labels: Optional[Mapping[str, str]] = None) -> List[Sandbox]:
        """The caller's sandboxes (every key's for the admin key), only those
        carrying every label in ``labels`` when given."""
        q = [("label", "%s=%s" % (k, labels[k])) for k in sorted(labels)] if labels else None
        d = self._call("GET", "/v1/sandboxes", op="list", query=q)
        return [Sandbox(self, SandboxInfo.from_json(s)) for s in d.get("sandboxes") or []]

    def update(self, sandbox_id: str, *, timeout: Optional[int] = None, labels: Optional[Mapping[str, str]] = None) -> SandboxInfo:
        """Extend sandbox ``sandbox_id``'s life to ``timeout`` seconds from
        now, and/or replace its labels."""
        body: Dict[str, Any] = {}
        if timeout is not None:
            body["timeout"] = timeout
        if labels is not None:
            body["labels"] = dict(labels)
        return SandboxInfo.from_json(
            self._call("PATCH", sandbox_path(sandbox_id), op="update", sandbox_id=sandbox_id, json_body=body)
        )

    def delete(self, sandbox_id: str, *, missing_ok: bool = False) -> None:
        """Delete sandbox ``sandbox_id`` with everything in it. A sandbox
        already gone raises NotFoundError unless ``missing_ok``."""
        try:
            self._call("DELETE", sandbox_path(sandbox_id), op="delete", sandbox_id=sandbox_id,
                       timeout=self._wait_timeout(60.0))
        except NotFoundError:
            if not missing_ok:
                raise

    # --- tools

    def tools(self) -> List[ToolInfo]:
        """The agent tools, with their JSON Schemas (call one with
        ``sandbox.tools.call``)."""
        d = self._call("GET", "/v1/tools", op="list_tools")
        return [ToolInfo.from_json(t) for t in d.get("tools") or []]

    # --- keys (admin)

    def create_key(self, name: str, capabilities: Optional[Sequence[str]] = None) -> KeyInfo:
        """Make an API key (admin key only). Its ``secret`` is in the answer
        and never shown again. ``capabilities`` (default every one): of
        ``sandbox.exec``, ``tools.shell``, ``tools.python``, ``tools.files``,
        ``tools.git``, ``tools.web``, ``tools.env``, ``tools.lint``, ``*``."""
        body: Dict[str, Any] = {"name": name}
        if capabilities is not None:
            body["capabilities"] = list(capabilities)
        return KeyInfo.from_json(self._call("POST", "/v1/keys", op="create_key", json_body=body))

    def keys(self) -> List[KeyInfo]:
        """The API keys (admin key only), without their secrets."""
        d = self._call("GET", "/v1/keys", op="list_keys")
        return [KeyInfo.from_json(k) for k in d.get("keys") or []]

    def revoke_key(self, key_id: str) -> None:
        """Revoke API key ``key_id`` at once (admin key only)."""
        self._call("DELETE", "/v1/keys/" + _q(key_id), op="revoke_key")

    # --- secrets

    def set_secret(self, name: str, value: Union[str, bytes], *, mode: str = "env", hosts: Optional[Sequence[str]] = None) -> SecretInfo:
        """Set the caller's secret ``name`` (replacing one of that name:
        ``replaced`` says so). ``mode`` ``env`` puts the value in the
        environment of the processes that name it; ``proxy`` puts a
        placeholder there and has the egress proxy add the value to requests
        to ``hosts``. The value never comes back."""
        if isinstance(value, bytes):
            value = value.decode("utf-8")
        body: Dict[str, Any] = {"name": name, "value": value, "mode": mode}
        if hosts is not None:
            body["hosts"] = list(hosts)
        resp = self._request("POST", "/v1/secrets", op="set_secret", json_body=body)
        status = resp.status
        info = SecretInfo.from_json(resp.json())
        info.replaced = status == 200
        return info

    def secrets(self) -> List[SecretInfo]:
        """The caller's secrets, without values."""
        d = self._call("GET", "/v1/secrets", op="list_secrets")
        return [SecretInfo.from_json(s) for s in d.get("secrets") or []]

    def get_secret(self, name: str) -> SecretInfo:
        """The caller's secret ``name``, without its value."""
        return SecretInfo.from_json(self._call("GET", "/v1/secrets/" + _q(name), op="get_secret"))

    def delete_secret(self, name: str) -> None:
        """Delete the caller's secret ``name``."""
        self._call("DELETE", "/v1/secrets/" + _q(name), op="delete_secret")

    # --- audit

    def audit(
        self,
        *,
        sandbox_id: Optional[str] = None,
        key_id: Optional[str] = None,
        since: Union[_dt.datetime, str, None] = None,
        limit: Optional[int] = None,
    ) -> List[AuditRecord]:
        """Audit records, newest first: every key's for the admin key, the
        caller's own for any other. ``since`` is a datetime or RFC 3339
        text; ``limit`` defaults to the daemon's (100)."""
        q = []
        if sandbox_id:
            q.append(("sandbox_id", sandbox_id))
        if key_id:
            q.append(("key_id", key_id))
        if since is not None:
            if isinstance(since, _dt.datetime):
                if since.tzinfo is None:
                    since = since.replace(tzinfo=_dt.timezone.utc)
                since = since.astimezone(_dt.timezone.utc).isoformat().replace("+00:00", "Z")
            q.append(("since", since))
        if limit is not None:
            q.append(("limit", str(limit)))
        d = self._call("GET", "/v1/audit", op="audit", query=q)
        return [AuditRecord.from_json(r) for r in d.get("records") or []]
