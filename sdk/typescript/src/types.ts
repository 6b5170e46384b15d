// This file holds the SDK's public data types (camelCase, dates as Date,
// exact bytes as Uint8Array) and their conversion from the API's JSON, which
// the Wire* types describe as the OpenAPI document does.

import { fromBase64 } from "./bytes.js";

/** A network tier a sandbox may be given. */
export type NetworkMode = "none" | "allowlist" | "full";

/**
 * NetworkPolicy is a sandbox's network tier and lists. `allow` (for
 * `allowlist`) and `block` take domains, `*.wildcards`, addresses and CIDRs;
 * `block` wins. `host` is reported for sandboxes of the local backend only.
 */
export interface NetworkPolicy {
  mode: NetworkMode | "host";
  allow?: string[];
  block?: string[];
}

/** A sandbox's lifecycle state. */
export type SandboxState =
  | "creating"
  | "running"
  | "stopped"
  | "error"
  | "deleting"
  | "recovery_required"
  | "quarantined";

/** Limits are what a sandbox was given at create. */
export interface Limits {
  memoryMb: number;
  cpus: number;
  pids: number;
  diskMb: number;
  /** The time to live given at create, in seconds. */
  ttlSeconds: number;
}

/** Isolation is what is enforced on a sandbox, not what was asked for. */
export interface Isolation {
  backend: string;
  /** Tier, carrying any gap: `native`, `native-minus-seccomp`, `none` (local). */
  level: string;
  /** Each layer (userns, pidns, …, seccomp): `applied`, `missing` or `n/a`. */
  layers: Record<string, string>;
  landlockAbi: number;
  seccompProfile?: string | undefined;
  cgroup: string;
  acceptedGaps: string[];
  /** false for the local backend, which is not a sandbox. */
  sandbox: boolean;
  warning?: string | undefined;
}

/** SandboxInfo describes a sandbox as the daemon last reported it. */
export interface SandboxInfo {
  id: string;
  state: SandboxState;
  backend: string;
  template: string;
  createdAt: Date;
  expiresAt: Date;
  limits: Limits;
  network: NetworkPolicy;
  labels: Record<string, string>;
  isolation: Isolation;
  /** Why the sandbox is in state `error` or `recovery_required`. */
  stateReason?: string | undefined;
  /** Ports served by preview URLs without a token, ascending. */
  publicPorts: number[];
}

/** How a command ended. */
export type ExitReason =
  | "exited"
  | "signaled"
  | "timeout"
  | "oom"
  | "killed"
  | "pids_exhausted"
  | "disk_full"
  | "agent_lost";

/** ExecResult is a finished command. A non-zero exit is a result, not an error. */
export interface ExecResult {
  /** The agent's process id, for the process calls. */
  processId: string;
  /** PID inside the sandbox. */
  pid: number;
  /** stdout as UTF-8 text (invalid sequences read as U+FFFD); head and tail when truncated. */
  stdout: string;
  /** stderr as UTF-8 text. */
  stderr: string;
  /** The exact bytes of stdout (as far as the result keeps them). */
  stdoutData: Uint8Array;
  /** The exact bytes of stderr. */
  stderrData: Uint8Array;
  /** The command's own code; 128+n for signal n; 124 on timeout. */
  exitCode: number;
  reason: ExitReason;
  /** The signal that ended it, 0 if none. */
  signal: number;
  durationMs: number;
  /** Output was cut: head and tail are kept, the full streams are at stdoutPath/stderrPath. */
  truncated: boolean;
  /** Bytes of stdout dropped between head and tail. */
  stdoutDropped: number;
  stderrDropped: number;
  /** A file in the sandbox with the full stdout, when truncated. */
  stdoutPath?: string | undefined;
  stderrPath?: string | undefined;
  /** Total bytes the command wrote to stdout. */
  stdoutBytes: number;
  stderrBytes: number;
}

/** ProcessInfo is one process the agent started. */
export interface ProcessInfo {
  processId: string;
  pid: number;
  argv: string[];
  cwd?: string | undefined;
  tag?: string | undefined;
  state: "running" | "exited";
  startedAt: Date;
  /** Present once the process exited. */
  result?: ExecResult | undefined;
}

/** FileInfo describes a path in a sandbox. */
export interface FileInfo {
  name: string;
  /** Absolute path in the sandbox. */
  path: string;
  type: "file" | "dir" | "symlink" | "other";
  size: number;
  /** Permission bits in octal, e.g. `0644`. */
  mode: string;
  /** ls -l form, e.g. `-rw-r--r--`. */
  permissions?: string | undefined;
  owner?: string | undefined;
  group?: string | undefined;
  modifiedAt: Date;
  symlinkTarget?: string | undefined;
}

/** FilePage is one page of a file read with Files.read. */
export interface FilePage {
  path: string;
  /** The exact bytes of the page. */
  data: Uint8Array;
  /** The page as UTF-8 text (invalid sequences read as U+FFFD). */
  text: string;
  /** Size of the whole file. */
  size: number;
  offset: number;
  /** True when the page reaches the end of the file. */
  eof: boolean;
}

/** GlobResult lists the paths a pattern matched. */
export interface GlobResult {
  paths: string[];
  /** More paths matched than were returned. */
  truncated: boolean;
}

/** GrepMatch is one matching line. */
export interface GrepMatch {
  path: string;
  /** 1-based line number. */
  line: number;
  text: string;
}

/** GrepResult lists matching lines. */
export interface GrepResult {
  matches: GrepMatch[];
  /** More lines matched than were returned. */
  truncated: boolean;
}

/** ArchiveResult is what an archive upload extracted. */
export interface ArchiveResult {
  /** The destination directory. */
  path: string;
  /** Entries written, directories included. */
  entries: number;
  /** File content written, in bytes. */
  bytes: number;
  /** The first 100 entries left out (devices, FIFOs, …), with why. */
  skipped: { name: string; type: string; reason: string }[];
  /** Every entry left out. */
  skippedCount: number;
}

/** BackendHealth is one backend's availability. */
export interface BackendHealth {
  name: string;
  available: boolean;
  /** The backend new sandboxes go to. */
  primary: boolean;
  level: string;
  sandbox: boolean;
  layers: Record<string, string>;
  /** Why this host cannot apply each layer shown missing. */
  layerReasons?: Record<string, string> | undefined;
  /** Why it is unavailable or weaker, in words an operator can act on. */
  reasons: string[];
}

/** Health is the daemon's state; it needs no API key. */
export interface Health {
  /** `ok` when a backend can create sandboxes. */
  status: "ok" | "degraded";
  backends: BackendHealth[];
  /** Sandboxes whose teardown failed and is being retried. */
  quarantined?: string[] | undefined;
  /** The warm pool, when on. */
  pool?: { size: number; ready: number } | undefined;
}

/** ToolInfo describes one agent tool, as GET /v1/tools lists it. */
export interface ToolInfo {
  name: string;
  title?: string | undefined;
  /** Written for a model: what the tool does, its arguments and its result. */
  description: string;
  /** What an API key needs to call it. */
  capability: string;
  /** JSON Schema of its arguments. */
  inputSchema: Record<string, unknown>;
  /** JSON Schema of its result. */
  outputSchema: Record<string, unknown>;
}

/** KeyInfo is an API key; `secret` only in the answer that made it. */
export interface KeyInfo {
  id: string;
  name: string;
  capabilities: string[];
  createdAt: Date;
  revokedAt?: Date | undefined;
  /** The key itself: only returned by Keys.create, never again. */
  secret?: string | undefined;
}

/** SecretInfo is one of the caller's secrets, without its value. */
export interface SecretInfo {
  name: string;
  mode: "env" | "proxy";
  /** Proxy mode: the hosts the value may be sent to. */
  hosts: string[];
  createdAt: Date;
  /** When the value was last set. */
  updatedAt: Date;
}

/** PreviewUrl says how to reach a port of a sandbox from outside. */
export interface PreviewUrl {
  port: number;
  /** By host: `http://<port>-<id>.<domain>[:<port>]/`. */
  url: string;
  /** By path, under the daemon's own address. */
  pathUrl: string;
  /** The sandbox's preview token (header X-Sbx-Preview-Token, or ?sbx_token=). */
  token: string;
  /** The port is served without a token. */
  public: boolean;
}

/** NetworkEvent is one egress decision about a sandbox's traffic. */
export interface NetworkEvent {
  time: Date;
  /** Where the sandbox asked to go: host:port, or a DNS name. */
  destination: string;
  /** `http`, `tls`, `connect`, `tcp` or `dns`. */
  protocol: string;
  /** The rule that decided, or why it was refused. */
  rule: string;
  allowed: boolean;
}

/** NetworkEvents are a sandbox's latest egress decisions, with totals. */
export interface NetworkEvents {
  allowed: number;
  refused: number;
  /** At most the latest 512, oldest first. */
  events: NetworkEvent[];
}

/** AuditRecord is one entry of the audit log. */
export interface AuditRecord {
  id: number;
  time: Date;
  keyId: string;
  sandboxId: string;
  action: string;
  target: string;
  /** `ok`, or the error code. */
  outcome: string;
  detail?: string | undefined;
}

// ---- the API's JSON ----

/** @internal */
export interface WireSandbox {
  id: string;
  state: SandboxState;
  backend: string;
  template: string;
  created_at: string;
  expires_at: string;
  limits: { memory_mb: number; cpus: number; pids: number; disk_mb: number; timeout: number };
  network: NetworkPolicy;
  labels: Record<string, string> | null;
  isolation: {
    backend: string;
    level: string;
    layers: Record<string, string> | null;
    landlock_abi: number;
    seccomp_profile?: string;
    cgroup: string;
    accepted_gaps: string[] | null;
    sandbox: boolean;
    warning?: string;
  };
  state_reason?: string;
  public_ports: number[] | null;
}

/** @internal */
export interface WireExecResult {
  process_id: string;
  pid: number;
  stdout: string;
  stderr: string;
  stdout_base64?: string;
  stderr_base64?: string;
  exit_code: number;
  reason: ExitReason;
  signal: number;
  duration_ms: number;
  truncated: boolean;
  stdout_dropped: number;
  stderr_dropped: number;
  stdout_path?: string;
  stderr_path?: string;
  stdout_bytes: number;
  stderr_bytes: number;
}

/** @internal */
export interface WireProcess {
  process_id: string;
  pid: number;
  argv: string[] | null;
  cwd?: string;
  tag?: string;
  state: "running" | "exited";
  started_at: string;
  result?: WireExecResult;
}

/** @internal */
export interface WireFileInfo {
  name: string;
  path: string;
  type: FileInfo["type"];
  size: number;
  mode: string;
  permissions?: string;
  owner?: string;
  group?: string;
  modified_at: string;
  symlink_target?: string;
}

const utf8 = new TextEncoder();

/** @internal */
export function toSandboxInfo(w: WireSandbox): SandboxInfo {
  return {
    id: w.id,
    state: w.state,
    backend: w.backend,
    template: w.template,
    createdAt: new Date(w.created_at),
    expiresAt: new Date(w.expires_at),
    limits: {
      memoryMb: w.limits.memory_mb,
      cpus: w.limits.cpus,
      pids: w.limits.pids,
      diskMb: w.limits.disk_mb,
      ttlSeconds: w.limits.timeout,
    },
    network: w.network,
    labels: w.labels ?? {},
    isolation: {
      backend: w.isolation.backend,
      level: w.isolation.level,
      layers: w.isolation.layers ?? {},
      landlockAbi: w.isolation.landlock_abi,
      seccompProfile: w.isolation.seccomp_profile,
      cgroup: w.isolation.cgroup,
      acceptedGaps: w.isolation.accepted_gaps ?? [],
      sandbox: w.isolation.sandbox,
      warning: w.isolation.warning,
    },
    stateReason: w.state_reason,
    publicPorts: w.public_ports ?? [],
  };
}

/** @internal */
export function toExecResult(w: WireExecResult): ExecResult {
  const exact = (text: string, b64: string | undefined) => (b64 ? fromBase64(b64) : utf8.encode(text));
  return {
    processId: w.process_id,
    pid: w.pid,
    stdout: w.stdout ?? "",
    stderr: w.stderr ?? "",
    stdoutData: exact(w.stdout ?? "", w.stdout_base64),
    stderrData: exact(w.stderr ?? "", w.stderr_base64),
    exitCode: w.exit_code,
    reason: w.reason,
    signal: w.signal ?? 0,
    durationMs: w.duration_ms,
    truncated: w.truncated ?? false,
    stdoutDropped: w.stdout_dropped ?? 0,
    stderrDropped: w.stderr_dropped ?? 0,
    stdoutPath: w.stdout_path || undefined,
    stderrPath: w.stderr_path || undefined,
    stdoutBytes: w.stdout_bytes ?? 0,
    stderrBytes: w.stderr_bytes ?? 0,
  };
}

/** @internal */
export function toProcessInfo(w: WireProcess): ProcessInfo {
  return {
    processId: w.process_id,
    pid: w.pid,
    argv: w.argv ?? [],
    cwd: w.cwd,
    tag: w.tag,
    state: w.state,
    startedAt: new Date(w.started_at),
    result: w.result ? toExecResult(w.result) : undefined,
  };
}

/** @internal */
export function toFileInfo(w: WireFileInfo): FileInfo {
  return {
    name: w.name,
    path: w.path,
    type: w.type,
    size: w.size,
    mode: w.mode,
    permissions: w.permissions,
    owner: w.owner,
    group: w.group,
    modifiedAt: new Date(w.modified_at),
    symlinkTarget: w.symlink_target,
  };
}

/** @internal */
export function toKeyInfo(w: {
  id: string;
  name: string;
  capabilities: string[] | null;
  created_at: string;
  revoked_at?: string;
  secret?: string;
}): KeyInfo {
  return {
    id: w.id,
    name: w.name,
    capabilities: w.capabilities ?? [],
    createdAt: new Date(w.created_at),
    revokedAt: w.revoked_at ? new Date(w.revoked_at) : undefined,
    secret: w.secret,
  };
}

/** @internal */
export function toSecretInfo(w: {
  name: string;
  mode: "env" | "proxy";
  hosts: string[] | null;
  created_at: string;
  updated_at: string;
}): SecretInfo {
  return {
    name: w.name,
    mode: w.mode,
    hosts: w.hosts ?? [],
    createdAt: new Date(w.created_at),
    updatedAt: new Date(w.updated_at),
  };
}

/** @internal */
export function toPreviewUrl(w: { port: number; url: string; path_url: string; token: string; public: boolean }): PreviewUrl {
  return { port: w.port, url: w.url, pathUrl: w.path_url, token: w.token, public: w.public };
}
