// This file implements SbxError: every failure of the API, as the daemon
// reported it, and a daemon that could not be reached at all.

/**
 * ErrorCode is the API's error code: Connect's code names, which the HTTP API,
 * the agent protocol and sbx's Go client share. The HTTP status of each is in
 * the OpenAPI document (`not_found` 404, `invalid_argument` 400, …).
 */
export type ErrorCode =
  | "not_found"
  | "already_exists"
  | "invalid_argument"
  | "failed_precondition"
  | "permission_denied"
  | "resource_exhausted"
  | "unavailable"
  | "deadline_exceeded"
  | "out_of_range"
  | "isolation_unavailable"
  | "agent_lost"
  | "insufficient_storage"
  | "unauthenticated"
  | "unimplemented"
  | "internal";

/** The fields an SbxError is made of. */
export interface SbxErrorInit {
  /** The API's error code. */
  code: ErrorCode;
  /** The HTTP status of the answer; 0 when there was none (the daemon was not reached, or a stream broke). */
  status: number;
  /** What went wrong, for the caller: the daemon's own message. */
  message: string;
  /** The operation that failed (`create`, `exec`, `read_file`, …). */
  op?: string | undefined;
  /** The sandbox the failed call concerned, when the API names one. */
  sandboxId?: string | undefined;
  /** The daemon's request id (also in its log). */
  requestId?: string | undefined;
  /** Seconds the daemon asked to wait before a retry (`Retry-After`), when given. */
  retryAfter?: number | undefined;
  /** The underlying failure, for errors that never reached the API. */
  cause?: unknown;
}

/**
 * SbxError is every error the SDK throws for a failed call: an error answer
 * of the API (its `code`, `status` and `message` as the daemon sent them, the
 * `sandboxId` when the API names one, `retryAfter` when the daemon asked for a
 * pause), a daemon that could not be reached (`unavailable`, status 0), or a
 * stream that broke before its end (`unavailable`). An aborted call rejects
 * with the AbortSignal's reason instead, as `fetch` does.
 */
export class SbxError extends Error {
  /** The API's error code, e.g. `not_found`. */
  readonly code: ErrorCode;
  /** The HTTP status; 0 when no answer carried one. */
  readonly status: number;
  /** The operation that failed, when known. */
  readonly op: string | undefined;
  /** The sandbox the call concerned, when the API names one. */
  readonly sandboxId: string | undefined;
  /** The daemon's request id, when it answered. */
  readonly requestId: string | undefined;
  /** Seconds to wait before a retry, when the daemon said (`Retry-After`). */
  readonly retryAfter: number | undefined;

  /** Builds an SbxError; the SDK makes them, callers match on `code`. */
  constructor(init: SbxErrorInit) {
    super(init.message, init.cause === undefined ? undefined : { cause: init.cause });
    this.name = "SbxError";
    this.code = init.code;
    this.status = init.status;
    this.op = init.op;
    this.sandboxId = init.sandboxId;
    this.requestId = init.requestId;
    this.retryAfter = init.retryAfter;
  }

  /**
   * detail is the message without the daemon's leading `op id: ` (and the
   * class words that follow it, such as `invalid argument: `): the part that
   * says what was wrong, e.g. `memory_mb: -1 MB is below 1 MB`.
   */
  get detail(): string {
    let m = this.message;
    if (this.op) {
      const prefixes = this.sandboxId ? [`${this.op} ${this.sandboxId}: `, `${this.op}: `] : [`${this.op}: `];
      for (const prefix of prefixes) {
        if (m.startsWith(prefix)) {
          m = m.slice(prefix.length);
          break;
        }
      }
    }
    const words = classWords[this.code];
    return words && m.startsWith(words) ? m.slice(words.length) : m;
  }
}

// classWords are the words the daemon puts before a message of each class
// (sandbox.ErrInvalid reads "invalid argument", …).
const classWords: Partial<Record<ErrorCode, string>> = {
  invalid_argument: "invalid argument: ",
  not_found: "not found: ",
  already_exists: "already exists: ",
  failed_precondition: "wrong state: ",
};

// statusCodes guesses a code from the status of an answer without an error
// body (a proxy's page, say), as sbx's Go client does.
const statusCodes: Record<number, ErrorCode> = {
  400: "invalid_argument",
  401: "unauthenticated",
  403: "permission_denied",
  404: "not_found",
  408: "deadline_exceeded",
  409: "failed_precondition",
  413: "out_of_range",
  429: "resource_exhausted",
  501: "unimplemented",
  502: "unavailable",
  503: "unavailable",
  504: "deadline_exceeded",
  507: "insufficient_storage",
};

const knownCodes = new Set<string>([
  "not_found",
  "already_exists",
  "invalid_argument",
  "failed_precondition",
  "permission_denied",
  "resource_exhausted",
  "unavailable",
  "deadline_exceeded",
  "out_of_range",
  "isolation_unavailable",
  "agent_lost",
  "insufficient_storage",
  "unauthenticated",
  "unimplemented",
  "internal",
]);

/** WireError is the API's error object, `{"error": {…}}`'s value. */
export interface WireError {
  code?: string;
  message?: string;
  op?: string;
  sandbox_id?: string;
  request_id?: string;
}

/**
 * fromWire turns the API's error object into an SbxError. op and sandboxId
 * are the call's own, used when the body does not name them.
 */
export function fromWire(
  w: WireError,
  status: number,
  op: string,
  sandboxId: string | undefined,
  retryAfter?: number,
): SbxError {
  const code = (w.code && knownCodes.has(w.code) ? w.code : "internal") as ErrorCode;
  return new SbxError({
    code,
    status,
    message: w.message ?? `${op}: ${code}`,
    op: w.op || op,
    sandboxId: w.sandbox_id || (w.op ? undefined : sandboxId),
    requestId: w.request_id,
    retryAfter,
  });
}

/**
 * fromResponse reads an error answer (a non-2xx status) into an SbxError.
 * A body that is not the API's error object (a proxy's page) gives a code
 * guessed from the status and the body's first line.
 */
export async function fromResponse(resp: Response, op: string, sandboxId: string | undefined): Promise<SbxError> {
  let text = "";
  try {
    text = await resp.text();
  } catch {
    // The body broke off: the status alone says what happened.
  }
  const retryAfter = parseRetryAfter(resp.headers.get("retry-after"));
  try {
    const body = JSON.parse(text) as { error?: WireError };
    if (body && typeof body.error === "object" && body.error && body.error.code) {
      const requestId = body.error.request_id || resp.headers.get("x-request-id") || undefined;
      return fromWire({ ...body.error, request_id: requestId }, resp.status, op, sandboxId, retryAfter);
    }
  } catch {
    // Not JSON: described below.
  }
  const line = text.trim().split("\n", 1)[0]?.slice(0, 200) ?? "";
  return new SbxError({
    code: statusCodes[resp.status] ?? "internal",
    status: resp.status,
    message: `${op}${sandboxId ? " " + sandboxId : ""}: HTTP ${resp.status}${line ? ": " + line : ""}`,
    op,
    sandboxId,
    requestId: resp.headers.get("x-request-id") ?? undefined,
    retryAfter,
  });
}

/** parseRetryAfter reads Retry-After (seconds, or an HTTP date) as seconds. */
function parseRetryAfter(v: string | null): number | undefined {
  if (!v) return undefined;
  if (/^\d+$/.test(v.trim())) return Number(v.trim());
  const t = Date.parse(v);
  if (Number.isNaN(t)) return undefined;
  return Math.max(0, Math.ceil((t - Date.now()) / 1000));
}
