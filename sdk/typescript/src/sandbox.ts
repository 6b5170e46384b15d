// This file implements Sandbox: one sandbox's calls, bound to its id.

import { toBase64 } from "./bytes.js";
import { ExecStream, Process, acceptOf, type StreamCallbacks, type StreamFormat } from "./exec.js";
import { Files, type CallOptions } from "./files.js";
import { sandboxPath, type Transport } from "./http.js";
import { SandboxTools } from "./tools.js";
import {
  toExecResult,
  toPreviewUrl,
  toProcessInfo,
  toSandboxInfo,
  type ExecResult,
  type NetworkEvents,
  type NetworkMode,
  type NetworkPolicy,
  type PreviewUrl,
  type ProcessInfo,
  type SandboxInfo,
  type WireExecResult,
  type WireProcess,
  type WireSandbox,
} from "./types.js";

/** Command is a shell command (run by /bin/sh -c) or an argv run verbatim, without a shell. */
export type Command = string | readonly string[];

/** ExecOptions are a command's settings. */
export interface ExecOptions extends CallOptions {
  /** Working directory; default the sandbox's home (/workspace). */
  cwd?: string;
  /** Environment variables of the command. */
  env?: Record<string, string>;
  /** Environment variables → names of the caller's secrets (Secrets.set). */
  secrets?: Record<string, string>;
  /** stdin: text, or exact bytes. */
  stdin?: string | Uint8Array;
  /** Seconds, 1–3600 (default 60): the whole process tree is killed after (exit 124, reason timeout). */
  timeoutSeconds?: number;
  /** Per-stream cap of the result (1 KiB–64 MiB, default 1 MiB): beyond it head and tail are kept. */
  outputLimitBytes?: number;
  /** A free-form label of the process. */
  tag?: string;
  /** Run in a terminal of this size: stdout carries the terminal's output. */
  pty?: { rows: number; cols: number };
}

/** ExecStreamOptions are a streamed command's settings, with its callbacks. */
export interface ExecStreamOptions extends ExecOptions, StreamCallbacks {
  /** A live view that never slows the command: a slow reader misses output, told by `dropped` events. */
  streamBounded?: boolean;
  /** The wire form: `frames` (binary, the default) or `ndjson`. */
  format?: StreamFormat;
}

/** SpawnOptions are a background command's settings. */
export interface SpawnOptions extends ExecOptions {
  /** Leave stdin open for Process.writeStdin. */
  keepStdinOpen?: boolean;
}

/** UpdateOptions change a running sandbox. */
export interface UpdateOptions extends CallOptions {
  /** Expire this many seconds from now. */
  ttlSeconds?: number;
  /** Replace the labels. */
  labels?: Record<string, string>;
}

/** execBody is the JSON of an ExecRequest. */
function execBody(command: Command, o: ExecOptions & { streamBounded?: boolean; keepStdinOpen?: boolean }): Record<string, unknown> {
  const b: Record<string, unknown> = typeof command === "string" ? { command } : { argv: [...command] };
  if (o.cwd !== undefined) b["cwd"] = o.cwd;
  if (o.env !== undefined) b["env"] = o.env;
  if (o.secrets !== undefined) b["secrets"] = o.secrets;
  if (typeof o.stdin === "string") b["stdin"] = o.stdin;
  else if (o.stdin !== undefined) b["stdin_base64"] = toBase64(o.stdin);
  if (o.timeoutSeconds !== undefined) b["timeout"] = o.timeoutSeconds;
  if (o.outputLimitBytes !== undefined) b["output_limit_bytes"] = o.outputLimitBytes;
  if (o.tag !== undefined) b["tag"] = o.tag;
  if (o.pty !== undefined) b["pty"] = o.pty;
  if (o.streamBounded) b["stream_bounded"] = true;
  if (o.keepStdinOpen) b["keep_stdin_open"] = true;
  return b;
}

/**
 * Sandbox is one sandbox, its calls bound to its id. `info` is what the
 * daemon last said about it (refresh() asks again). Files and tools hang off
 * it as `files` and `tools`.
 */
export class Sandbox {
  /** The sandbox's id. */
  readonly id: string;
  /** The sandbox as last reported; undefined for a handle made by id alone (Sbx.sandbox). */
  info: SandboxInfo | undefined;
  /** Its file calls. */
  readonly files: Files;
  /** Its agent tools. */
  readonly tools: SandboxTools;
  readonly #t: Transport;

  /** @internal Made by Sbx and Sandboxes. */
  constructor(t: Transport, id: string, info?: SandboxInfo) {
    this.#t = t;
    this.id = id;
    this.info = info;
    this.files = new Files(t, id);
    this.tools = new SandboxTools(t, id);
  }

  #path(rest = ""): string {
    return sandboxPath(this.id, rest);
  }

  /** refresh asks the daemon for the sandbox's state and keeps it in `info`. */
  async refresh(opts: CallOptions = {}): Promise<SandboxInfo> {
    const w = await this.#t.json<WireSandbox>({ op: "get", sandboxId: this.id, method: "GET", path: this.#path(), signal: opts.signal });
    this.info = toSandboxInfo(w);
    return this.info;
  }

  /** update extends the time to live (from now) or replaces the labels. */
  async update(opts: UpdateOptions): Promise<SandboxInfo> {
    const body: Record<string, unknown> = {};
    if (opts.ttlSeconds !== undefined) body["timeout"] = opts.ttlSeconds;
    if (opts.labels !== undefined) body["labels"] = opts.labels;
    const w = await this.#t.json<WireSandbox>({
      op: "update",
      sandboxId: this.id,
      method: "PATCH",
      path: this.#path(),
      json: body,
      signal: opts.signal,
    });
    this.info = toSandboxInfo(w);
    return this.info;
  }

  /** delete destroys the sandbox and everything in it. */
  async delete(opts: CallOptions = {}): Promise<void> {
    await this.#t.none({ op: "delete", sandboxId: this.id, method: "DELETE", path: this.#path(), signal: opts.signal });
  }

  /**
   * exec runs a command to its end and returns its result; a non-zero exit is
   * a result, not an error. With onStdout/onStderr it streams, calling them
   * as output comes, and returns the same result.
   */
  async exec(command: Command, opts: ExecOptions & StreamCallbacks = {}): Promise<ExecResult> {
    if (opts.onStdout || opts.onStderr || opts.onEvent) {
      return (await this.execStream(command, opts)).wait();
    }
    const w = await this.#t.json<WireExecResult>({
      op: "exec",
      sandboxId: this.id,
      method: "POST",
      path: this.#path("/exec"),
      json: execBody(command, opts),
      signal: opts.signal,
    });
    return toExecResult(w);
  }

  /**
   * execStream starts a command and returns its events as they happen, once
   * the daemon accepted it (a refused command throws here). Every byte of
   * output is delivered, in order; a reader that stops reading holds the
   * command (its pipes fill) until its timeout, unless streamBounded.
   */
  async execStream(command: Command, opts: ExecStreamOptions = {}): Promise<ExecStream> {
    const resp = await this.#t.send({
      op: "exec",
      sandboxId: this.id,
      method: "POST",
      path: this.#path("/exec"),
      json: execBody(command, opts),
      accept: acceptOf(opts.format),
      signal: opts.signal,
    });
    return new ExecStream(resp, "exec", this.id, opts, opts.signal);
  }

  /** spawn starts a command in the background and returns once it runs. */
  async spawn(command: Command, opts: SpawnOptions = {}): Promise<Process> {
    const body = execBody(command, opts);
    body["background"] = true;
    const w = await this.#t.json<{ process_id: string; pid: number }>({
      op: "exec",
      sandboxId: this.id,
      method: "POST",
      path: this.#path("/exec"),
      json: body,
      signal: opts.signal,
    });
    return new Process(this.#t, this.id, w.process_id, w.pid);
  }

  /** process is a handle on a process by its process id, without a call. */
  process(processId: string): Process {
    return new Process(this.#t, this.id, processId);
  }

  /** listProcesses lists the processes the agent started, running and exited. */
  async listProcesses(opts: CallOptions = {}): Promise<ProcessInfo[]> {
    const w = await this.#t.json<{ processes: WireProcess[] | null }>({
      op: "list_processes",
      sandboxId: this.id,
      method: "GET",
      path: this.#path("/processes"),
      signal: opts.signal,
    });
    return (w.processes ?? []).map(toProcessInfo);
  }

  /** getProcess describes one process. */
  async getProcess(processId: string, opts: CallOptions = {}): Promise<ProcessInfo> {
    return this.process(processId).info(opts);
  }

  /**
   * setNetwork changes the running sandbox's network tier and lists (as the
   * key's policy allows); its connections through the egress proxy are cut.
   */
  async setNetwork(policy: NetworkMode | NetworkPolicy, opts: CallOptions = {}): Promise<SandboxInfo> {
    const w = await this.#t.json<WireSandbox>({
      op: "set_network",
      sandboxId: this.id,
      method: "PUT",
      path: this.#path("/network"),
      json: typeof policy === "string" ? { mode: policy } : policy,
      signal: opts.signal,
    });
    this.info = toSandboxInfo(w);
    return this.info;
  }

  /** networkEvents returns the egress proxy's latest decisions about the sandbox's traffic. */
  async networkEvents(opts: CallOptions = {}): Promise<NetworkEvents> {
    const w = await this.#t.json<{
      allowed: number;
      refused: number;
      events: { time: string; destination: string; protocol: string; rule: string; allowed: boolean }[] | null;
    }>({ op: "network_events", sandboxId: this.id, method: "GET", path: this.#path("/network/events"), signal: opts.signal });
    return {
      allowed: w.allowed,
      refused: w.refused,
      events: (w.events ?? []).map((e) => ({ ...e, time: new Date(e.time) })),
    };
  }

  /** previewUrl returns how to reach a port of the sandbox from outside, with its preview token. */
  async previewUrl(port: number, opts: CallOptions = {}): Promise<PreviewUrl> {
    const w = await this.#t.json<Parameters<typeof toPreviewUrl>[0]>({
      op: "preview_url",
      sandboxId: this.id,
      method: "GET",
      path: this.#path(`/ports/${port}/url`),
      signal: opts.signal,
    });
    return toPreviewUrl(w);
  }

  /** setPortPublic serves a port without a token (true), or requires it again (false). */
  async setPortPublic(port: number, isPublic: boolean, opts: CallOptions = {}): Promise<PreviewUrl> {
    const w = await this.#t.json<Parameters<typeof toPreviewUrl>[0]>({
      op: "set_port_public",
      sandboxId: this.id,
      method: "PUT",
      path: this.#path(`/ports/${port}`),
      json: { public: isPublic },
      signal: opts.signal,
    });
    return toPreviewUrl(w);
  }
}
