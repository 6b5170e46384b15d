// This file implements Sbx, the client of one daemon, and Sandboxes, its
// sandbox collection.

import { Keys, Secrets } from "./admin.js";
import { SbxError } from "./errors.js";
import type { CallOptions } from "./files.js";
import { Transport } from "./http.js";
import { Sandbox } from "./sandbox.js";
import {
  toSandboxInfo,
  type AuditRecord,
  type Health,
  type NetworkMode,
  type NetworkPolicy,
  type ToolInfo,
  type WireSandbox,
} from "./types.js";

/** The address `make run` and `sbx serve` listen on by default. */
export const DEFAULT_URL = "http://127.0.0.1:7070";

/** SbxOptions say which daemon to talk to, and how. */
export interface SbxOptions {
  /** The daemon's address, http(s)://host:port; default $SBX_URL, else http://127.0.0.1:7070. */
  url?: string;
  /** The API key; default $SBX_API_KEY. Only health() works without one. */
  apiKey?: string;
  /** The fetch to use; default the global one. */
  fetch?: typeof fetch;
  /** The User-Agent header; default `sbx-ts-sdk`. */
  userAgent?: string;
}

/** CreateSandboxOptions are everything a create may ask for; the daemon's policy bounds each. */
export interface CreateSandboxOptions extends CallOptions {
  /** Template name; default the operator's first. */
  template?: string;
  /** Time to live in seconds; default 300. */
  ttlSeconds?: number;
  /** Memory limit in MiB. */
  memoryMb?: number;
  /** CPU cores, fractional (0.5). */
  cpus?: number;
  /** Most processes at once. */
  pids?: number;
  /** Writable disk in MiB (also the most one upload may bring). */
  diskMb?: number;
  /** Network tier and lists; default the key's policy's first tier (`none` out of the box). */
  network?: NetworkMode | NetworkPolicy;
  /** At most 64 labels; keys 1–63 bytes, values ≤ 255. */
  labels?: Record<string, string>;
  /** Environment of every process; values are never echoed back. */
  env?: Record<string, string>;
  /** Environment variables → names of the caller's secrets. */
  secrets?: Record<string, string>;
  /**
   * Idempotency-Key: a retry with the same key and options returns the
   * sandbox the first call made, for 24 hours (1–255 printable ASCII).
   */
  idempotencyKey?: string;
}

/** AuditQuery selects audit records; empty fields select everything. */
export interface AuditQuery extends CallOptions {
  sandboxId?: string;
  keyId?: string;
  since?: Date;
  /** Default the daemon's (100). */
  limit?: number;
}

/** Sandboxes creates, finds and lists sandboxes. */
export class Sandboxes {
  readonly #t: Transport;

  /** @internal Made by Sbx. */
  constructor(t: Transport) {
    this.#t = t;
  }

  /** create creates a sandbox and returns it running. */
  async create(opts: CreateSandboxOptions = {}): Promise<Sandbox> {
    const b: Record<string, unknown> = {};
    if (opts.template !== undefined) b["template"] = opts.template;
    if (opts.ttlSeconds !== undefined) b["timeout"] = opts.ttlSeconds;
    if (opts.memoryMb !== undefined) b["memory_mb"] = opts.memoryMb;
    if (opts.cpus !== undefined) b["cpus"] = opts.cpus;
    if (opts.pids !== undefined) b["pids"] = opts.pids;
    if (opts.diskMb !== undefined) b["disk_mb"] = opts.diskMb;
    if (opts.network !== undefined) b["network"] = opts.network;
    if (opts.labels !== undefined) b["labels"] = opts.labels;
    if (opts.env !== undefined) b["env"] = opts.env;
    if (opts.secrets !== undefined) b["secrets"] = opts.secrets;
    const w = await this.#t.json<WireSandbox>({
      op: "create",
      method: "POST",
      path: "/v1/sandboxes",
      json: b,
      headers: opts.idempotencyKey === undefined ? undefined : { "Idempotency-Key": opts.idempotencyKey },
      signal: opts.signal,
    });
    return new Sandbox(this.#t, w.id, toSandboxInfo(w));
  }

  /** get returns a sandbox by id (SbxError not_found when the caller's key has none of that id). */
  async get(id: string, opts: CallOptions = {}): Promise<Sandbox> {
    const sb = new Sandbox(this.#t, id);
    await sb.refresh(opts);
    return sb;
  }

  /** list returns the caller's sandboxes carrying every label given (all when none). */
  async list(opts: { labels?: Record<string, string> } & CallOptions = {}): Promise<Sandbox[]> {
    const labels = Object.entries(opts.labels ?? {})
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
      .map(([k, v]) => `${k}=${v}`);
    const w = await this.#t.json<{ sandboxes: WireSandbox[] | null }>({
      op: "list",
      method: "GET",
      path: "/v1/sandboxes",
      query: { label: labels },
      signal: opts.signal,
    });
    return (w.sandboxes ?? []).map((s) => new Sandbox(this.#t, s.id, toSandboxInfo(s)));
  }
}

/**
 * Sbx is a client of one sbx daemon: `new Sbx()` reads SBX_URL and
 * SBX_API_KEY. Its methods send one request each; none keeps state between
 * calls, so one Sbx may be shared freely.
 */
export class Sbx {
  /** The daemon's address. */
  readonly url: string;
  /** Sandboxes: create, get, list. */
  readonly sandboxes: Sandboxes;
  /** API keys (admin key only). */
  readonly keys: Keys;
  /** The caller's secrets. */
  readonly secrets: Secrets;
  readonly #t: Transport;

  /** Makes a client; the address must be http(s)://host[:port]. */
  constructor(opts: SbxOptions = {}) {
    const env = typeof process === "undefined" ? {} : process.env;
    const raw = opts.url ?? env["SBX_URL"] ?? DEFAULT_URL;
    let u: URL;
    try {
      u = new URL(raw);
    } catch {
      throw invalidUrl(raw);
    }
    if (u.protocol !== "http:" && u.protocol !== "https:") throw invalidUrl(raw);
    this.url = `${u.protocol}//${u.host}${u.pathname.replace(/\/+$/, "")}`;
    const f = opts.fetch ?? globalThis.fetch;
    if (typeof f !== "function") throw new TypeError("sbx: no fetch: Node >= 20 has one, or pass options.fetch");
    this.#t = new Transport(this.url, opts.apiKey ?? env["SBX_API_KEY"], f, opts.userAgent ?? "sbx-ts-sdk");
    this.sandboxes = new Sandboxes(this.#t);
    this.keys = new Keys(this.#t);
    this.secrets = new Secrets(this.#t);
  }

  /** sandbox is a handle on a sandbox by id, without a call (its `info` is undefined until refresh). */
  sandbox(id: string): Sandbox {
    return new Sandbox(this.#t, id);
  }

  /** health returns the daemon's backends and why any is unavailable; it needs no key. */
  async health(opts: CallOptions = {}): Promise<Health> {
    const w = await this.#t.json<{
      status: Health["status"];
      quarantined?: string[];
      pool?: { size: number; ready: number };
      backends: {
        name: string;
        available: boolean;
        primary: boolean;
        level: string;
        sandbox: boolean;
        layers: Record<string, string> | null;
        layer_reasons?: Record<string, string>;
        reasons: string[] | null;
      }[];
    }>({ op: "health", method: "GET", path: "/v1/health", signal: opts.signal });
    return {
      status: w.status,
      quarantined: w.quarantined,
      pool: w.pool,
      backends: (w.backends ?? []).map((b) => ({
        name: b.name,
        available: b.available,
        primary: b.primary,
        level: b.level,
        sandbox: b.sandbox,
        layers: b.layers ?? {},
        layerReasons: b.layer_reasons,
        reasons: b.reasons ?? [],
      })),
    };
  }

  /** listTools lists the agent tools with their JSON Schemas. */
  async listTools(opts: CallOptions = {}): Promise<ToolInfo[]> {
    const w = await this.#t.json<{
      tools: {
        name: string;
        title?: string;
        description: string;
        capability: string;
        input_schema: Record<string, unknown>;
        output_schema: Record<string, unknown>;
      }[];
    }>({ op: "list_tools", method: "GET", path: "/v1/tools", signal: opts.signal });
    return w.tools.map((t) => ({
      name: t.name,
      title: t.title,
      description: t.description,
      capability: t.capability,
      inputSchema: t.input_schema,
      outputSchema: t.output_schema,
    }));
  }

  /** audit returns audit records, newest first: every key's for the admin key, the caller's own otherwise. */
  async audit(q: AuditQuery = {}): Promise<AuditRecord[]> {
    const w = await this.#t.json<{
      records:
        | {
            id: number;
            time: string;
            key_id: string;
            sandbox_id: string;
            action: string;
            target: string;
            outcome: string;
            detail?: string;
          }[]
        | null;
    }>({
      op: "audit",
      method: "GET",
      path: "/v1/audit",
      query: { sandbox_id: q.sandboxId, key_id: q.keyId, since: q.since?.toISOString(), limit: q.limit },
      signal: q.signal,
    });
    return (w.records ?? []).map((r) => ({
      id: r.id,
      time: new Date(r.time),
      keyId: r.key_id,
      sandboxId: r.sandbox_id,
      action: r.action,
      target: r.target,
      outcome: r.outcome,
      detail: r.detail,
    }));
  }
}

function invalidUrl(raw: string): SbxError {
  return new SbxError({
    code: "invalid_argument",
    status: 0,
    message: `url: ${JSON.stringify(raw)} is not http://host:port or https://…` +
      (raw.startsWith("unix:") ? " (this SDK speaks TCP only: use the daemon's --listen address)" : ""),
    op: "connect",
  });
}
