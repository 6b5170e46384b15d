"""The values the sbx API answers with, as typed dataclasses.

Each keeps the JSON object it was decoded from in ``raw``, so a field a newer
daemon adds is readable before this SDK knows it. Bytes that came from a
sandbox (exec output, file content, stream data) are ``bytes``, exact even
when they are not valid UTF-8; ``*_text`` properties decode them.
"""

from __future__ import annotations

import base64
import datetime as _dt
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence

__all__ = [
    "Limits",
    "Isolation",
    "NetworkPolicy",
    "SandboxInfo",
    "ExecResult",
    "Event",
    "ProcessInfo",
    "FileInfo",
    "FileContent",
    "GlobResult",
    "GrepMatch",
    "GrepResult",
    "SkippedEntry",
    "ArchiveResult",
    "BackendHealth",
    "PoolStatus",
    "Health",
    "AuditRecord",
    "ToolInfo",
    "KeyInfo",
    "SecretInfo",
    "PreviewURL",
    "NetworkEvent",
    "NetworkEvents",
]

Json = Dict[str, Any]

_FRACTION = re.compile(r"\.(\d+)")


def parse_time(s: Optional[str]) -> Optional[_dt.datetime]:
    """Parse an RFC 3339 time as the daemon writes it (``Z`` or an offset,
    up to nanoseconds) into an aware datetime; None for an empty value."""
    if not s:
        return None
    t = s.strip()
    if t.endswith(("Z", "z")):
        t = t[:-1] + "+00:00"
    # datetime takes microseconds at most; Python 3.9's fromisoformat wants
    # exactly 3 or 6 digits.
    t = _FRACTION.sub(lambda m: "." + (m.group(1) + "000000")[:6], t, count=1)
    return _dt.datetime.fromisoformat(t)


def _bytes(text: Any, b64: Any) -> bytes:
    """The exact bytes of a text field with its optional base64 sibling."""
    if b64:
        return base64.b64decode(str(b64))
    return str(text or "").encode("utf-8")


def _str(d: Mapping[str, Any], k: str) -> str:
    v = d.get(k)
    return "" if v is None else str(v)


def _opt(d: Mapping[str, Any], k: str) -> Optional[str]:
    v = d.get(k)
    return None if v is None or v == "" else str(v)


def _int(d: Mapping[str, Any], k: str) -> int:
    v = d.get(k)
    return 0 if v is None else int(v)


def _strs(v: Any) -> List[str]:
    return [str(x) for x in (v or [])]


def _strmap(v: Any) -> Dict[str, str]:
    return {str(k): str(x) for k, x in (v or {}).items()}


@dataclass
class Limits:
    """Limits are a sandbox's resource limits as admitted."""

    memory_mb: int
    cpus: float
    pids: int
    disk_mb: int
    timeout: int
    """Time to live given at create, in seconds."""

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Limits":
        """Decode the API's ``Limits`` object."""
        return cls(_int(d, "memory_mb"), float(d.get("cpus") or 0), _int(d, "pids"), _int(d, "disk_mb"), _int(d, "timeout"))


@dataclass
class Isolation:
    """Isolation is what a sandbox's backend enforces, not what was asked."""

    backend: str
    level: str
    layers: Dict[str, str]
    """Each layer (userns, seccomp, landlock…): applied, missing or n/a."""
    landlock_abi: int
    cgroup: str
    accepted_gaps: List[str]
    sandbox: bool
    """False for the local backend, which is not a sandbox."""
    seccomp_profile: Optional[str] = None
    warning: Optional[str] = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Isolation":
        """Decode the API's ``Isolation`` object."""
        return cls(
            _str(d, "backend"),
            _str(d, "level"),
            _strmap(d.get("layers")),
            _int(d, "landlock_abi"),
            _str(d, "cgroup"),
            _strs(d.get("accepted_gaps")),
            bool(d.get("sandbox")),
            _opt(d, "seccomp_profile"),
            _opt(d, "warning"),
        )


@dataclass
class NetworkPolicy:
    """NetworkPolicy is a network tier and its lists.

    ``mode`` is ``none`` (loopback only), ``allowlist`` (only ``allow``) or
    ``full`` (anywhere but what is never reachable and ``block``); the daemon
    reports ``host`` for the local backend. ``allow`` and ``block`` take
    domains, ``*.wildcards``, addresses and CIDRs.
    """

    mode: str
    allow: List[str] = field(default_factory=list)
    block: List[str] = field(default_factory=list)

    @classmethod
    def from_json(cls, d: Any) -> "NetworkPolicy":
        """Decode a ``NetworkPolicy`` object (or a tier's name alone)."""
        if isinstance(d, str):
            return cls(d)
        return cls(_str(d, "mode"), _strs(d.get("allow")), _strs(d.get("block")))

    def to_json(self) -> Json:
        """The policy as the API's JSON object."""
        out: Json = {"mode": self.mode}
        if self.allow:
            out["allow"] = list(self.allow)
        if self.block:
            out["block"] = list(self.block)
        return out


@dataclass
class SandboxInfo:
    """SandboxInfo describes one sandbox (the API's ``Sandbox``)."""

    id: str
    state: str
    """creating, running, stopped, error, deleting, recovery_required or
    quarantined."""
    backend: str
    template: str
    created_at: Optional[_dt.datetime]
    expires_at: Optional[_dt.datetime]
    limits: Limits
    network: NetworkPolicy
    labels: Dict[str, str]
    isolation: Isolation
    public_ports: List[int]
    state_reason: Optional[str] = None
    raw: Json = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "SandboxInfo":
        """Decode the API's ``Sandbox`` object."""
        return cls(
            _str(d, "id"),
            _str(d, "state"),
            _str(d, "backend"),
            _str(d, "template"),
            parse_time(d.get("created_at")),
            parse_time(d.get("expires_at")),
            Limits.from_json(d.get("limits") or {}),
            NetworkPolicy.from_json(d.get("network") or {"mode": ""}),
            _strmap(d.get("labels")),
            Isolation.from_json(d.get("isolation") or {}),
            [int(p) for p in d.get("public_ports") or []],
            _opt(d, "state_reason"),
            dict(d),
        )


@dataclass
class ExecResult:
    """ExecResult is how a command ended, with its output.

    ``stdout`` and ``stderr`` are the exact bytes (head and tail only when
    ``truncated``: the whole streams are then in the sandbox at
    ``stdout_path``/``stderr_path``). A non-zero exit is not an error.
    """

    process_id: str
    pid: int
    stdout: bytes
    stderr: bytes
    exit_code: int
    """The command's own code; 128+n for signal n; 124 on timeout."""
    reason: str
    """exited, signaled, timeout, oom, killed, pids_exhausted, disk_full or
    agent_lost."""
    signal: int
    duration_ms: int
    truncated: bool
    stdout_dropped: int
    stderr_dropped: int
    stdout_size: int
    """Total bytes the command wrote to stdout (the API's ``stdout_bytes``)."""
    stderr_size: int
    """Total bytes the command wrote to stderr (the API's ``stderr_bytes``)."""
    stdout_path: Optional[str] = None
    stderr_path: Optional[str] = None
    raw: Json = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "ExecResult":
        """Decode the API's ``ExecResult`` (or a ``result`` event)."""
        return cls(
            _str(d, "process_id"),
            _int(d, "pid"),
            _bytes(d.get("stdout"), d.get("stdout_base64")),
            _bytes(d.get("stderr"), d.get("stderr_base64")),
            _int(d, "exit_code"),
            _str(d, "reason"),
            _int(d, "signal"),
            _int(d, "duration_ms"),
            bool(d.get("truncated")),
            _int(d, "stdout_dropped"),
            _int(d, "stderr_dropped"),
            _int(d, "stdout_bytes"),
            _int(d, "stderr_bytes"),
            _opt(d, "stdout_path"),
            _opt(d, "stderr_path"),
            dict(d),
        )

    @property
    def stdout_text(self) -> str:
        """stdout decoded as UTF-8, invalid sequences as U+FFFD."""
        return self.stdout.decode("utf-8", "replace")

    @property
    def stderr_text(self) -> str:
        """stderr decoded as UTF-8, invalid sequences as U+FFFD."""
        return self.stderr.decode("utf-8", "replace")

    @property
    def ok(self) -> bool:
        """True when the command exited by itself with code 0."""
        return self.reason == "exited" and self.exit_code == 0

    @property
    def timed_out(self) -> bool:
        """True when the command was killed by its exec timeout."""
        return self.reason == "timeout"


@dataclass
class Event:
    """Event is one event of an exec or attach stream.

    ``type`` is ``started`` (``process_id``, ``pid``), ``stdout`` or
    ``stderr`` (``data``: the exact bytes of one chunk), ``dropped``
    (``stream`` lost ``dropped`` bytes: a ``stream_bounded`` reader too slow,
    or a replay of head and tail only) or ``result`` (``result``).
    """

    type: str
    data: bytes = b""
    process_id: Optional[str] = None
    pid: Optional[int] = None
    stream: Optional[str] = None
    dropped: int = 0
    result: Optional[ExecResult] = None
    raw: Json = field(default_factory=dict, repr=False, compare=False)

    @property
    def text(self) -> str:
        """The chunk decoded as UTF-8 (a character split between two chunks
        reads as U+FFFD: join ``data`` first to avoid it)."""
        return self.data.decode("utf-8", "replace")

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Event":
        """Decode one NDJSON event (or a frame's JSON event)."""
        typ = _str(d, "type")
        ev = cls(typ, raw=dict(d))
        if typ in ("stdout", "stderr"):
            ev.data = _bytes(d.get("data"), d.get("data_base64"))
        elif typ == "started":
            ev.process_id, ev.pid = _str(d, "process_id"), _int(d, "pid")
        elif typ == "dropped":
            ev.stream, ev.dropped = _str(d, "stream"), _int(d, "bytes")
        elif typ == "result":
            ev.result = ExecResult.from_json(d)
            ev.process_id, ev.pid = ev.result.process_id, ev.result.pid
        return ev


@dataclass
class ProcessInfo:
    """ProcessInfo describes a process the agent started."""

    process_id: str
    pid: int
    argv: List[str]
    state: str
    """running or exited."""
    started_at: Optional[_dt.datetime]
    cwd: Optional[str] = None
    tag: Optional[str] = None
    result: Optional[ExecResult] = None
    """How it ended, once ``state`` is ``exited``."""
    raw: Json = field(default_factory=dict, repr=False, compare=False)

    @property
    def running(self) -> bool:
        """True while the process runs."""
        return self.state == "running"

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "ProcessInfo":
        """Decode the API's ``Process`` object."""
        r = d.get("result")
        return cls(
            _str(d, "process_id"),
            _int(d, "pid"),
            _strs(d.get("argv")),
            _str(d, "state"),
            parse_time(d.get("started_at")),
            _opt(d, "cwd"),
            _opt(d, "tag"),
            ExecResult.from_json(r) if r else None,
            dict(d),
        )


@dataclass
class FileInfo:
    """FileInfo describes a file in a sandbox."""

    name: str
    path: str
    type: str
    """file, dir, symlink or other."""
    size: int
    mode: int
    """Permission bits (0o644)."""
    modified_at: Optional[_dt.datetime]
    permissions: Optional[str] = None
    """``ls -l`` form: ``-rw-r--r--``."""
    owner: Optional[str] = None
    group: Optional[str] = None
    symlink_target: Optional[str] = None
    raw: Json = field(default_factory=dict, repr=False, compare=False)

    @property
    def is_dir(self) -> bool:
        """True for a directory."""
        return self.type == "dir"

    @property
    def is_file(self) -> bool:
        """True for a regular file."""
        return self.type == "file"

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "FileInfo":
        """Decode the API's ``FileInfo`` object."""
        return cls(
            _str(d, "name"),
            _str(d, "path"),
            _str(d, "type"),
            _int(d, "size"),
            int(_str(d, "mode") or "0", 8),
            parse_time(d.get("modified_at")),
            _opt(d, "permissions"),
            _opt(d, "owner"),
            _opt(d, "group"),
            _opt(d, "symlink_target"),
            dict(d),
        )


@dataclass
class FileContent:
    """FileContent is one page of a file (``files.read_page``)."""

    path: str
    content: bytes
    size: int
    """Size of the whole file."""
    offset: int
    length: int
    eof: bool

    @property
    def text(self) -> str:
        """The page decoded as UTF-8, invalid sequences as U+FFFD."""
        return self.content.decode("utf-8", "replace")

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "FileContent":
        """Decode the API's ``FileContent`` object."""
        return cls(
            _str(d, "path"),
            _bytes(d.get("content"), d.get("content_base64")),
            _int(d, "size"),
            _int(d, "offset"),
            _int(d, "length"),
            bool(d.get("eof")),
        )


@dataclass
class GlobResult:
    """GlobResult is the paths a glob matched."""

    paths: List[str]
    truncated: bool

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "GlobResult":
        """Decode the API's ``GlobResult``."""
        return cls(_strs(d.get("paths")), bool(d.get("truncated")))


@dataclass
class GrepMatch:
    """GrepMatch is one matching line."""

    path: str
    line: int
    text: str


@dataclass
class GrepResult:
    """GrepResult is the lines a grep matched."""

    matches: List[GrepMatch]
    truncated: bool

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "GrepResult":
        """Decode the API's ``GrepResult``."""
        return cls(
            [GrepMatch(_str(m, "path"), _int(m, "line"), _str(m, "text")) for m in d.get("matches") or []],
            bool(d.get("truncated")),
        )


@dataclass
class SkippedEntry:
    """SkippedEntry is an archive entry the extraction left out."""

    name: str
    type: str
    reason: str


@dataclass
class ArchiveResult:
    """ArchiveResult is what an archive upload extracted."""

    path: str
    """The destination directory."""
    entries: int
    bytes: int
    """File content written."""
    skipped: List[SkippedEntry]
    """The first 100 entries left out."""
    skipped_count: int

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "ArchiveResult":
        """Decode the API's ``ArchiveResult``."""
        return cls(
            _str(d, "path"),
            _int(d, "entries"),
            _int(d, "bytes"),
            [SkippedEntry(_str(s, "name"), _str(s, "type"), _str(s, "reason")) for s in d.get("skipped") or []],
            _int(d, "skipped_count"),
        )


@dataclass
class BackendHealth:
    """BackendHealth is one backend's availability."""

    name: str
    available: bool
    primary: bool
    """New sandboxes go to this backend."""
    level: str
    sandbox: bool
    layers: Dict[str, str]
    reasons: List[str]
    """Why it is unavailable or weaker, in words an operator can act on."""
    layer_reasons: Dict[str, str]


@dataclass
class PoolStatus:
    """PoolStatus is the warm pool: its size and how many are ready."""

    size: int
    ready: int


@dataclass
class Health:
    """Health is the daemon's state (``GET /v1/health``)."""

    status: str
    """ok when a backend can create sandboxes, else degraded."""
    backends: List[BackendHealth]
    pool: Optional[PoolStatus] = None
    quarantined: List[str] = field(default_factory=list)
    raw: Json = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Health":
        """Decode the API's ``Health``."""
        p = d.get("pool")
        return cls(
            _str(d, "status"),
            [
                BackendHealth(
                    _str(b, "name"),
                    bool(b.get("available")),
                    bool(b.get("primary")),
                    _str(b, "level"),
                    bool(b.get("sandbox")),
                    _strmap(b.get("layers")),
                    _strs(b.get("reasons")),
                    _strmap(b.get("layer_reasons")),
                )
                for b in d.get("backends") or []
            ],
            PoolStatus(_int(p, "size"), _int(p, "ready")) if p else None,
            _strs(d.get("quarantined")),
            dict(d),
        )


@dataclass
class AuditRecord:
    """AuditRecord is one entry of the audit log."""

    id: int
    time: Optional[_dt.datetime]
    key_id: str
    sandbox_id: str
    action: str
    target: str
    outcome: str
    """ok, or the error code."""
    detail: Optional[str] = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "AuditRecord":
        """Decode the API's ``AuditRecord``."""
        return cls(
            _int(d, "id"),
            parse_time(d.get("time")),
            _str(d, "key_id"),
            _str(d, "sandbox_id"),
            _str(d, "action"),
            _str(d, "target"),
            _str(d, "outcome"),
            _opt(d, "detail"),
        )


@dataclass
class ToolInfo:
    """ToolInfo describes one agent tool, with its JSON Schemas."""

    name: str
    description: str
    capability: str
    """What an API key needs to call it."""
    input_schema: Json
    output_schema: Json
    title: Optional[str] = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "ToolInfo":
        """Decode the API's ``ToolInfo``."""
        return cls(
            _str(d, "name"),
            _str(d, "description"),
            _str(d, "capability"),
            dict(d.get("input_schema") or {}),
            dict(d.get("output_schema") or {}),
            _opt(d, "title"),
        )


@dataclass
class KeyInfo:
    """KeyInfo describes an API key; ``secret`` is set only in the answer to
    ``create_key``, the one time the daemon shows it."""

    id: str
    name: str
    capabilities: List[str]
    created_at: Optional[_dt.datetime]
    revoked_at: Optional[_dt.datetime] = None
    secret: Optional[str] = field(default=None, repr=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "KeyInfo":
        """Decode the API's ``KeyInfo``."""
        return cls(
            _str(d, "id"),
            _str(d, "name"),
            _strs(d.get("capabilities")),
            parse_time(d.get("created_at")),
            parse_time(d.get("revoked_at")),
            _opt(d, "secret"),
        )


@dataclass
class SecretInfo:
    """SecretInfo describes one of the caller's secrets, never its value."""

    name: str
    mode: str
    """env or proxy."""
    hosts: List[str]
    created_at: Optional[_dt.datetime]
    updated_at: Optional[_dt.datetime]
    replaced: bool = False
    """Set by ``set_secret``: True when it replaced a secret of that name."""

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "SecretInfo":
        """Decode the API's ``SecretInfo``."""
        return cls(
            _str(d, "name"),
            _str(d, "mode"),
            _strs(d.get("hosts")),
            parse_time(d.get("created_at")),
            parse_time(d.get("updated_at")),
        )


@dataclass
class PreviewURL:
    """PreviewURL is how to reach a sandbox's port from outside.

    ``url`` is the preview by host, ``path_url`` under the daemon's own
    address; unless ``public``, a request carries ``token`` in the
    ``X-Sbx-Preview-Token`` header (or once as ``?sbx_token=``).
    """

    port: int
    url: str
    path_url: str
    token: str = field(repr=False)
    public: bool

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "PreviewURL":
        """Decode the API's ``PreviewURL``."""
        return cls(_int(d, "port"), _str(d, "url"), _str(d, "path_url"), _str(d, "token"), bool(d.get("public")))


@dataclass
class NetworkEvent:
    """NetworkEvent is one egress decision about a sandbox's traffic."""

    time: Optional[_dt.datetime]
    destination: str
    """host:port, or a DNS name."""
    protocol: str
    """http, tls, connect, tcp or dns."""
    rule: str
    """The rule that decided, or why it was refused."""
    allowed: bool


@dataclass
class NetworkEvents:
    """NetworkEvents are a sandbox's latest egress decisions with totals."""

    allowed: int
    refused: int
    events: List[NetworkEvent]

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "NetworkEvents":
        """Decode the API's ``NetworkEvents``."""
        return cls(
            _int(d, "allowed"),
            _int(d, "refused"),
            [
                NetworkEvent(
                    parse_time(e.get("time")),
                    _str(e, "destination"),
                    _str(e, "protocol"),
                    _str(e, "rule"),
                    bool(e.get("allowed")),
                )
                for e in d.get("events") or []
            ],
        )


def network_json(network: Any, allow: Optional[Sequence[str]], block: Optional[Sequence[str]]) -> Optional[Json]:
    """Build the ``network`` value of a request from a tier name, a
    NetworkPolicy or a dict, and extra allow/block lists. ``allow`` alone
    means ``allowlist``, as on the CLI."""
    if network is None and not allow and not block:
        return None
    if isinstance(network, NetworkPolicy):
        out = network.to_json()
    elif isinstance(network, Mapping):
        out = dict(network)
    elif network is None:
        out = {"mode": "allowlist" if allow else ""}
    else:
        out = {"mode": str(network)}
    if allow:
        out["allow"] = list(out.get("allow") or []) + list(allow)
    if block:
        out["block"] = list(out.get("block") or []) + list(block)
    if not out.get("mode"):
        del out["mode"]
    return out
