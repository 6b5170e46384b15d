/**
 * \@sbx/sdk is the TypeScript client of sbx's HTTP API /v1: sandboxes,
 * commands (run to completion, streamed, or in the background), files
 * (JSON and streamed), agent tools, keys, secrets, network tiers and preview
 * URLs. It needs Node >= 20 and nothing else: the global fetch,
 * ReadableStream and AbortSignal. `@sbx/sdk/deepagents` adds a deepagents
 * sandbox backend.
 *
 * @example
 * ```ts
 * import { Sbx } from "@sbx/sdk";
 * const sbx = new Sbx(); // SBX_URL, SBX_API_KEY
 * const sb = await sbx.sandboxes.create({ ttlSeconds: 600 });
 * const r = await sb.exec("echo hello");
 * await sb.delete();
 * ```
 *
 * @packageDocumentation
 */

export { Sbx, Sandboxes, DEFAULT_URL } from "./client.js";
export type { SbxOptions, CreateSandboxOptions, AuditQuery } from "./client.js";
export { SbxError } from "./errors.js";
export type { ErrorCode, SbxErrorInit } from "./errors.js";
export { Sandbox } from "./sandbox.js";
export type { Command, ExecOptions, ExecStreamOptions, SpawnOptions, UpdateOptions } from "./sandbox.js";
export { ExecStream, Process, FRAMES_MEDIA_TYPE } from "./exec.js";
export type {
  ExecEvent,
  StartedEvent,
  OutputEvent,
  DroppedEvent,
  ResultEvent,
  StreamCallbacks,
  StreamFormat,
  WaitOptions,
  OutputOptions,
  SignalOutcome,
} from "./exec.js";
export { Files } from "./files.js";
export type { CallOptions, WriteOptions, UploadOptions, GrepOptions, ArchiveUploadOptions } from "./files.js";
export type { UploadSource } from "./bytes.js";
export { SandboxTools } from "./tools.js";
export type {
  ReplExecuteArgs,
  ReplExecuteResult,
  EditFileArgs,
  EditFileResult,
  ReadFileArgs,
  ReadFileResult,
  WriteFileArgs,
  WriteFileResult,
  LsResult,
  ToolGlobResult,
  ToolGrepArgs,
  ToolGrepResult,
  BashArgs,
  BashResult,
} from "./tools.js";
export { Keys, Secrets } from "./admin.js";
export type { Capability, CreateKeyOptions, SetSecretOptions } from "./admin.js";
export type {
  NetworkMode,
  NetworkPolicy,
  SandboxState,
  Limits,
  Isolation,
  SandboxInfo,
  ExitReason,
  ExecResult,
  ProcessInfo,
  FileInfo,
  FilePage,
  GlobResult,
  GrepMatch,
  GrepResult,
  ArchiveResult,
  BackendHealth,
  Health,
  ToolInfo,
  KeyInfo,
  SecretInfo,
  PreviewUrl,
  NetworkEvent,
  NetworkEvents,
  AuditRecord,
} from "./types.js";
