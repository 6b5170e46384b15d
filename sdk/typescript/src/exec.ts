// This file implements streamed exec and the background process calls: the
// event streams of POST …/exec and GET …/processes/{pid}/output, read as
// frames (application/vnd.sbx.frames, binary-safe) or NDJSON, and Process.

import { fromBase64, toBase64 } from "./bytes.js";
import { SbxError, fromWire, type WireError } from "./errors.js";
import { broken, sandboxPath, type Transport } from "./http.js";
import {
  toExecResult,
  toProcessInfo,
  type ExecResult,
  type ProcessInfo,
  type WireExecResult,
  type WireProcess,
} from "./types.js";

/** The media type of the binary event stream (8-byte header, then payload). */
export const FRAMES_MEDIA_TYPE = "application/vnd.sbx.frames";
const NDJSON_MEDIA_TYPE = "application/x-ndjson";
/** maxFrame bounds one frame or NDJSON line: output chunks are far smaller. */
const maxFrame = 16 << 20;

/** StartedEvent says the process runs, with its ids. */
export interface StartedEvent {
  type: "started";
  processId: string;
  pid: number;
}

/** OutputEvent is a chunk of stdout or stderr, as it came. */
export interface OutputEvent {
  type: "stdout" | "stderr";
  /** The exact bytes. */
  data: Uint8Array;
  /**
   * The bytes as UTF-8 text, decoded with the stream's state: a character
   * split across chunks comes whole in the chunk that completes it.
   */
  text: string;
}

/** DroppedEvent says a bounded stream (streamBounded) skipped output. */
export interface DroppedEvent {
  type: "dropped";
  stream: "stdout" | "stderr";
  bytes: number;
}

/** ResultEvent ends a stream: the finished command. */
export interface ResultEvent {
  type: "result";
  result: ExecResult;
}

/** ExecEvent is one event of an exec or attach stream. */
export type ExecEvent = StartedEvent | OutputEvent | DroppedEvent | ResultEvent;

/** StreamCallbacks are called for each event as it is read. */
export interface StreamCallbacks {
  /** Called with each chunk of stdout (text decoded statefully, and the exact bytes). */
  onStdout?: ((text: string, data: Uint8Array) => void) | undefined;
  /** Called with each chunk of stderr. */
  onStderr?: ((text: string, data: Uint8Array) => void) | undefined;
  /** Called with every event, output included. */
  onEvent?: ((event: ExecEvent) => void) | undefined;
}

/** StreamFormat chooses the wire form of a stream; both carry the same events. */
export type StreamFormat = "frames" | "ndjson";

/** @internal acceptOf is the Accept header of a stream format. */
export function acceptOf(format: StreamFormat | undefined): string {
  return format === "ndjson" ? NDJSON_MEDIA_TYPE : FRAMES_MEDIA_TYPE;
}

/**
 * ExecStream is a running command's output as it happens: an async iterable
 * of events (`started`, `stdout`, `stderr`, `dropped`, `result`), and
 * `wait()` for the result. Read it once, by iterating or by `wait()` (which
 * reads what is left, calling the callbacks). Breaking out of the loop, or
 * `cancel()`, stops reading; the command itself goes on in the sandbox (attach
 * again with Process.output). An `error` event rejects with its SbxError.
 */
export class ExecStream implements AsyncIterable<ExecEvent> {
  /** The process id, once the `started` event was read. */
  processId: string | undefined;
  /** The PID inside the sandbox, once the `started` event was read. */
  pid: number | undefined;
  readonly #events: AsyncGenerator<ExecEvent, void, undefined>;
  #result: ExecResult | undefined;
  readonly #op: string;
  readonly #sandboxId: string;

  /** @internal Made by Sandbox.execStream and Process.output. */
  constructor(resp: Response, op: string, sandboxId: string, callbacks: StreamCallbacks, signal?: AbortSignal) {
    this.#op = op;
    this.#sandboxId = sandboxId;
    this.#events = this.#read(resp, callbacks, signal);
  }

  /** Iterates the events; the last one is the result. */
  [Symbol.asyncIterator](): AsyncIterator<ExecEvent> {
    return this.#events;
  }

  /** wait reads the rest of the stream and returns the command's result. */
  async wait(): Promise<ExecResult> {
    for await (const _ of this.#events) {
      // The callbacks see each event; only the result is kept.
    }
    if (!this.#result) {
      throw broken({ op: this.#op, sandboxId: this.#sandboxId }, "the stream", new Error("it was closed before its result"));
    }
    return this.#result;
  }

  /** cancel stops reading; the command goes on. */
  async cancel(): Promise<void> {
    await this.#events.return(undefined);
  }

  async *#read(resp: Response, cb: StreamCallbacks, signal?: AbortSignal): AsyncGenerator<ExecEvent, void, undefined> {
    if (!resp.body) throw broken({ op: this.#op, sandboxId: this.#sandboxId }, "the stream", new Error("no body"));
    const reader = resp.body.getReader();
    const frames = (resp.headers.get("content-type") ?? "").startsWith(FRAMES_MEDIA_TYPE);
    const next = frames ? frameReader(reader) : ndjsonReader(reader);
    const decoders = { stdout: new TextDecoder(), stderr: new TextDecoder() };
    try {
      for (;;) {
        const raw = await next();
        if (raw === null) throw new Error("the stream ended without a result");
        let ev: ExecEvent | undefined;
        if (raw.kind === "json") {
          ev = this.#event(raw.value, decoders);
        } else {
          ev = { type: raw.kind, data: raw.data, text: decoders[raw.kind].decode(raw.data, { stream: true }) };
        }
        if (!ev) continue; // a kind of event this SDK does not know
        if (ev.type === "started") {
          this.processId = ev.processId;
          this.pid = ev.pid;
        } else if (ev.type === "stdout") {
          cb.onStdout?.(ev.text, ev.data);
        } else if (ev.type === "stderr") {
          cb.onStderr?.(ev.text, ev.data);
        } else if (ev.type === "result") {
          this.#result = ev.result;
        }
        cb.onEvent?.(ev);
        yield ev;
        if (ev.type === "result") return;
      }
    } catch (err) {
      if (signal?.aborted) throw signal.reason ?? err;
      if (err instanceof SbxError) throw err;
      throw broken({ op: this.#op, sandboxId: this.#sandboxId }, "reading the stream", err);
    } finally {
      reader.cancel().catch(() => {});
    }
  }

  // #event converts a JSON event; an error event is thrown.
  #event(v: WireEvent, decoders: Decoders): ExecEvent | undefined {
    switch (v.type) {
      case "started":
        return { type: "started", processId: v.process_id ?? "", pid: v.pid ?? 0 };
      case "stdout":
      case "stderr": {
        const data = v.data_base64 ? fromBase64(v.data_base64) : new TextEncoder().encode(v.data ?? "");
        return { type: v.type, data, text: decoders[v.type].decode(data, { stream: true }) };
      }
      case "dropped":
        return { type: "dropped", stream: v.stream === "stderr" ? "stderr" : "stdout", bytes: v.bytes ?? 0 };
      case "result":
        return { type: "result", result: toExecResult(v as unknown as WireExecResult) };
      case "error":
        throw fromWire(v.error ?? { code: "internal", message: "an error event without an error" }, 200, this.#op, this.#sandboxId);
      default:
        return undefined;
    }
  }
}

/** Decoders turn each stream's bytes into text, keeping a split character whole. */
type Decoders = { stdout: InstanceType<typeof TextDecoder>; stderr: InstanceType<typeof TextDecoder> };

/** WireEvent is one event as JSON (the result's fields inline). */
interface WireEvent {
  type: string;
  process_id?: string;
  pid?: number;
  data?: string;
  data_base64?: string;
  stream?: string;
  bytes?: number;
  error?: WireError;
}

type RawEvent = { kind: "json"; value: WireEvent } | { kind: "stdout" | "stderr"; data: Uint8Array };

/** ByteReader reads exact lengths from a stream of chunks. */
class ByteReader {
  readonly #reader: ReadableStreamDefaultReader<Uint8Array>;
  #chunks: Uint8Array[] = [];
  #length = 0;

  constructor(reader: ReadableStreamDefaultReader<Uint8Array>) {
    this.#reader = reader;
  }

  get buffered(): number {
    return this.#length;
  }

  /** fill reads until n bytes are buffered; false at the end of the stream. */
  async fill(n: number): Promise<boolean> {
    while (this.#length < n) {
      const { done, value } = await this.#reader.read();
      if (done) return false;
      if (value.byteLength === 0) continue;
      this.#chunks.push(value);
      this.#length += value.byteLength;
    }
    return true;
  }

  /** take removes and returns the first n buffered bytes. */
  take(n: number): Uint8Array {
    const first = this.#chunks[0];
    if (first && first.byteLength >= n) {
      const out = first.subarray(0, n);
      if (first.byteLength === n) this.#chunks.shift();
      else this.#chunks[0] = first.subarray(n);
      this.#length -= n;
      return out;
    }
    const out = new Uint8Array(n);
    let off = 0;
    while (off < n) {
      const c = this.#chunks[0]!;
      const k = Math.min(c.byteLength, n - off);
      out.set(c.subarray(0, k), off);
      off += k;
      if (k === c.byteLength) this.#chunks.shift();
      else this.#chunks[0] = c.subarray(k);
    }
    this.#length -= n;
    return out;
  }
}

/**
 * frameReader returns the events of a frames stream one at a time (null at
 * its clean end): each frame is a kind byte, three zero bytes, the payload's
 * length as a big-endian uint32, then the payload. Kind 1 is stdout, 2
 * stderr, 0 a JSON event; other kinds are skipped.
 */
function frameReader(reader: ReadableStreamDefaultReader<Uint8Array>): () => Promise<RawEvent | null> {
  const br = new ByteReader(reader);
  const json = new TextDecoder();
  return async () => {
    for (;;) {
      if (!(await br.fill(8))) {
        if (br.buffered === 0) return null;
        throw new Error(`a frame header cut after ${br.buffered} bytes`);
      }
      const hdr = br.take(8);
      const kind = hdr[0];
      const n = new DataView(hdr.buffer, hdr.byteOffset, 8).getUint32(4);
      if (n > maxFrame) throw new Error(`a frame of ${n} bytes`);
      if (!(await br.fill(n))) throw new Error(`a frame of ${n} bytes cut after ${br.buffered}`);
      const payload = br.take(n);
      switch (kind) {
        case 1:
          return { kind: "stdout", data: payload };
        case 2:
          return { kind: "stderr", data: payload };
        case 0:
          return { kind: "json", value: JSON.parse(json.decode(payload)) as WireEvent };
      }
    }
  };
}

/** ndjsonReader returns the events of an NDJSON stream one at a time (null at its end). */
function ndjsonReader(reader: ReadableStreamDefaultReader<Uint8Array>): () => Promise<RawEvent | null> {
  const dec = new TextDecoder();
  let buf = "";
  let done = false;
  return async () => {
    for (;;) {
      const nl = buf.indexOf("\n");
      if (nl >= 0 || (done && buf.length > 0)) {
        const line = nl >= 0 ? buf.slice(0, nl) : buf;
        buf = nl >= 0 ? buf.slice(nl + 1) : "";
        if (line.trim() === "") continue;
        return { kind: "json", value: JSON.parse(line) as WireEvent };
      }
      if (done) return null;
      if (buf.length > maxFrame) throw new Error(`an NDJSON line longer than ${maxFrame} bytes`);
      const r = await reader.read();
      if (r.done) {
        done = true;
        buf += dec.decode();
      } else {
        buf += dec.decode(r.value, { stream: true });
      }
    }
  };
}

/** WaitOptions bound one wait. */
export interface WaitOptions {
  /** Seconds to wait, 0–3600 (0 answers at once); default 60. */
  timeoutSeconds?: number;
  signal?: AbortSignal;
}

/** OutputOptions choose how to attach to a process's output. */
export interface OutputOptions extends StreamCallbacks {
  /** Send what the process printed so far first (default true). */
  replay?: boolean;
  format?: StreamFormat;
  signal?: AbortSignal;
}

/** The outcome of a signal: `stopped` (SIGKILL ended the tree), `signaled`, or `already_exited`. */
export type SignalOutcome = "stopped" | "signaled" | "already_exited";

/**
 * Process is a process the sandbox's agent runs, usually one started in the
 * background (Sandbox.spawn). It outlives the request that started it: the
 * process goes on until it exits, its timeout passes, or it is killed.
 */
export class Process {
  /** The sandbox it runs in. */
  readonly sandboxId: string;
  /** The agent's process id (not the PID). */
  readonly processId: string;
  /** The PID inside the sandbox, when known. */
  readonly pid: number | undefined;
  readonly #t: Transport;

  /** @internal Made by Sandbox.spawn and Sandbox.process. */
  constructor(t: Transport, sandboxId: string, processId: string, pid?: number) {
    this.#t = t;
    this.sandboxId = sandboxId;
    this.processId = processId;
    this.pid = pid;
  }

  #path(rest = ""): string {
    return sandboxPath(this.sandboxId, `/processes/${encodeURIComponent(this.processId)}${rest}`);
  }

  /** info returns the process's state, and its result once it exited. */
  async info(opts: { signal?: AbortSignal } = {}): Promise<ProcessInfo> {
    const w = await this.#t.json<WireProcess>({
      op: "get_process",
      sandboxId: this.sandboxId,
      method: "GET",
      path: this.#path(),
      signal: opts.signal,
    });
    return toProcessInfo(w);
  }

  /**
   * wait waits up to timeoutSeconds for the process to exit and returns its
   * state: `state` says whether it did, `result` is its result when it did.
   */
  async wait(opts: WaitOptions = {}): Promise<ProcessInfo> {
    const w = await this.#t.json<WireProcess>({
      op: "wait_process",
      sandboxId: this.sandboxId,
      method: "POST",
      path: this.#path("/wait"),
      json: opts.timeoutSeconds === undefined ? {} : { timeout: opts.timeoutSeconds },
      signal: opts.signal,
    });
    return toProcessInfo(w);
  }

  /** result waits, as long as it takes (or until signal aborts), for the process's result. */
  async result(opts: { signal?: AbortSignal } = {}): Promise<ExecResult> {
    for (;;) {
      const p = await this.wait({ timeoutSeconds: 60, ...opts });
      if (p.state === "exited" && p.result) return p.result;
    }
  }

  /**
   * writeStdin writes data to the process's stdin (it must have been started
   * with keepStdinOpen), and closes it after when eof is set.
   */
  async writeStdin(data: string | Uint8Array, opts: { eof?: boolean; signal?: AbortSignal } = {}): Promise<void> {
    const body: Record<string, unknown> = { eof: opts.eof ?? false };
    if (typeof data === "string") {
      if (data.length > 0) body["data"] = data;
    } else if (data.byteLength > 0) {
      body["data_base64"] = toBase64(data);
    }
    await this.#t.none({
      op: "write_stdin",
      sandboxId: this.sandboxId,
      method: "POST",
      path: this.#path("/stdin"),
      json: body,
      signal: opts.signal,
    });
  }

  /** closeStdin closes the process's stdin (EOF). */
  async closeStdin(opts: { signal?: AbortSignal } = {}): Promise<void> {
    await this.writeStdin("", { eof: true, ...opts });
  }

  /**
   * kill sends a signal (a name such as `SIGTERM`, `TERM`, `SIGKILL`, or a
   * number; default SIGTERM) to the process. SIGKILL ends its whole tree.
   */
  async kill(signal: string | number = "SIGTERM", opts: { signal?: AbortSignal } = {}): Promise<SignalOutcome> {
    const r = await this.#t.json<{ outcome: SignalOutcome }>({
      op: "signal",
      sandboxId: this.sandboxId,
      method: "POST",
      path: this.#path("/signal"),
      json: { signal },
      signal: opts.signal,
    });
    return r.outcome;
  }

  /**
   * output attaches to the process's output until it ends: with replay (the
   * default) what it printed so far comes first. Detaching (cancel, or
   * breaking out of the loop) leaves the process running.
   */
  async output(opts: OutputOptions = {}): Promise<ExecStream> {
    const resp = await this.#t.send({
      op: "attach",
      sandboxId: this.sandboxId,
      method: "GET",
      path: this.#path("/output"),
      query: { replay: opts.replay ?? true },
      accept: acceptOf(opts.format),
      signal: opts.signal,
    });
    return new ExecStream(resp, "attach", this.sandboxId, opts, opts.signal);
  }
}
