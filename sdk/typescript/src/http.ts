// This file implements the transport: one HTTP request to the daemon, with
// the API key, and error answers turned into SbxError in one place.

import { SbxError, fromResponse } from "./errors.js";

/** A query value: repeated for an array, left out when undefined. */
export type QueryValue = string | number | boolean | undefined | readonly string[];

/** Request is one call to the API. */
export interface Request {
  /** Names the call in errors: `create`, `exec`, `read_file`, … */
  op: string;
  /** The sandbox the call concerns, for errors. */
  sandboxId?: string | undefined;
  method: "GET" | "POST" | "PUT" | "PATCH" | "DELETE";
  path: string;
  query?: Record<string, QueryValue> | undefined;
  /** Sent as JSON when set. */
  json?: unknown;
  /** Sent as is (application/octet-stream) when set; a stream goes chunked. */
  body?: RequestInit["body"] | undefined;
  accept?: string | undefined;
  headers?: Record<string, string> | undefined;
  signal?: AbortSignal | undefined;
}

/** Transport sends requests to one daemon. */
export class Transport {
  readonly baseUrl: string;
  readonly #apiKey: string | undefined;
  readonly #fetch: typeof fetch;
  readonly #userAgent: string;

  constructor(baseUrl: string, apiKey: string | undefined, fetchImpl: typeof fetch, userAgent: string) {
    this.baseUrl = baseUrl;
    this.#apiKey = apiKey;
    this.#fetch = fetchImpl;
    this.#userAgent = userAgent;
  }

  /** url is the absolute URL of path with query. */
  url(path: string, query?: Record<string, QueryValue>): string {
    const u = new URL(this.baseUrl + path);
    for (const [k, v] of Object.entries(query ?? {})) {
      if (v === undefined) continue;
      if (Array.isArray(v)) for (const x of v) u.searchParams.append(k, x);
      else u.searchParams.set(k, String(v));
    }
    return u.toString();
  }

  /**
   * send does req and returns the response when its status is 2xx; otherwise
   * it throws the decoded SbxError. The caller reads or cancels the body.
   */
  async send(req: Request): Promise<Response> {
    const headers: Record<string, string> = { "User-Agent": this.#userAgent, ...req.headers };
    if (this.#apiKey) headers["Authorization"] = `Bearer ${this.#apiKey}`;
    if (req.accept) headers["Accept"] = req.accept;
    const init: RequestInit & { duplex?: "half" } = { method: req.method, headers, signal: req.signal ?? null };
    if (req.json !== undefined) {
      init.body = JSON.stringify(req.json);
      headers["Content-Type"] = "application/json";
    } else if (req.body !== undefined && req.body !== null) {
      init.body = req.body;
      headers["Content-Type"] = "application/octet-stream";
      if (req.body instanceof ReadableStream) init.duplex = "half"; // streamed, never buffered
    }
    let resp: Response;
    try {
      resp = await this.#fetch(this.url(req.path, req.query), init);
    } catch (err) {
      if (req.signal?.aborted) throw req.signal.reason ?? err;
      throw this.unreachable(req, err);
    }
    if (resp.status < 200 || resp.status > 299) {
      throw await fromResponse(resp, req.op, req.sandboxId);
    }
    return resp;
  }

  /** json does req and decodes its JSON answer. */
  async json<T>(req: Request): Promise<T> {
    const resp = await this.send(req);
    let text: string;
    try {
      text = await resp.text();
    } catch (err) {
      if (req.signal?.aborted) throw req.signal.reason ?? err;
      throw broken(req, "reading the answer", err);
    }
    try {
      return JSON.parse(text) as T;
    } catch (err) {
      throw broken(req, "decoding the answer", err);
    }
  }

  /** none does req and drops its answer (204, or one not needed). */
  async none(req: Request): Promise<void> {
    const resp = await this.send(req);
    await resp.body?.cancel();
  }

  /** unreachable is the error of a daemon that did not answer at all. */
  unreachable(req: Request, err: unknown): SbxError {
    const cause = err instanceof Error && err.cause instanceof Error ? err.cause : err;
    const why = cause instanceof Error ? cause.message : String(cause);
    return new SbxError({
      code: "unavailable",
      status: 0,
      message:
        `cannot reach the sbx daemon at ${this.baseUrl}: ${why}; ` +
        "start one with `sbx serve` (or `make run`), or set SBX_URL and SBX_API_KEY",
      op: req.op,
      sandboxId: req.sandboxId,
      cause: err,
    });
  }
}

/** broken is the error of an answer that could not be read to its end. */
export function broken(req: { op: string; sandboxId?: string | undefined }, what: string, err: unknown): SbxError {
  const why = err instanceof Error ? err.message : String(err);
  return new SbxError({
    code: "unavailable",
    status: 0,
    message: `${req.op}${req.sandboxId ? " " + req.sandboxId : ""}: ${what}: ${why}`,
    op: req.op,
    sandboxId: req.sandboxId,
    cause: err,
  });
}

/** sandboxPath is the API path of sandbox id, with rest appended. */
export function sandboxPath(id: string, rest = ""): string {
  return `/v1/sandboxes/${encodeURIComponent(id)}${rest}`;
}
