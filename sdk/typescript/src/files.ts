// This file implements Files: a sandbox's file calls, the JSON ones and the
// streamed transfers (upload, download, tar archives).

import { collect, fromBase64, toBase64, toBody, type UploadSource } from "./bytes.js";
import { SbxError } from "./errors.js";
import { broken, sandboxPath, type Transport } from "./http.js";
import {
  toFileInfo,
  type ArchiveResult,
  type FileInfo,
  type FilePage,
  type GlobResult,
  type GrepResult,
  type WireFileInfo,
} from "./types.js";

/** Signal is the abort signal every call takes. */
export interface CallOptions {
  signal?: AbortSignal;
}

/** WriteOptions are Files.write's settings. */
export interface WriteOptions extends CallOptions {
  /** Permission bits, e.g. 0o755; default the daemon's (0644). */
  mode?: number;
  /** Append instead of replacing. */
  append?: boolean;
}

/** UploadOptions are Files.upload's settings. */
export interface UploadOptions extends CallOptions {
  /** Permission bits, e.g. 0o600; default the daemon's. */
  mode?: number;
}

/** GrepOptions select lines for Files.grep. */
export interface GrepOptions extends CallOptions {
  /** File or directory to search; default the sandbox's home. */
  path?: string;
  /** Glob of file names to search, e.g. `*.py`. */
  include?: string;
  ignoreCase?: boolean;
  /** The pattern is plain text, not a regular expression (RE2). */
  fixed?: boolean;
  /** Most matches to return. */
  limit?: number;
}

/** ArchiveUploadOptions may lower the sandbox's caps for one extraction. */
export interface ArchiveUploadOptions extends CallOptions {
  /** Most bytes of the uncompressed tar stream. */
  maxBytes?: number;
  /** Most entries, parent directories created included. */
  maxEntries?: number;
}

/**
 * Files are the file calls of one sandbox. Relative paths are relative to
 * the sandbox's home (/workspace). Small files go through JSON (read, write);
 * big ones stream both ways (upload, download) with bounded memory.
 */
export class Files {
  /** The sandbox these files are in. */
  readonly sandboxId: string;
  readonly #t: Transport;

  /** @internal Made by Sandbox. */
  constructor(t: Transport, sandboxId: string) {
    this.#t = t;
    this.sandboxId = sandboxId;
  }

  #path(what: string): string {
    return sandboxPath(this.sandboxId, `/files${what}`);
  }

  /** read reads one page of a file: at most limit bytes (default the daemon's) from offset. */
  async read(path: string, opts: { offset?: number; limit?: number } & CallOptions = {}): Promise<FilePage> {
    const w = await this.#t.json<{
      path: string;
      content: string;
      content_base64?: string;
      size: number;
      offset: number;
      eof: boolean;
    }>({
      op: "read_file",
      sandboxId: this.sandboxId,
      method: "GET",
      path: this.#path("/read"),
      query: { path, offset: opts.offset, limit: opts.limit },
      signal: opts.signal,
    });
    const data = w.content_base64 ? fromBase64(w.content_base64) : new TextEncoder().encode(w.content);
    return { path: w.path, data, text: w.content, size: w.size, offset: w.offset, eof: w.eof };
  }

  /** readBytes returns a whole file's exact bytes (streamed in, whatever its size). */
  async readBytes(path: string, opts: CallOptions = {}): Promise<Uint8Array> {
    return collect(await this.download(path, opts));
  }

  /** readText returns a whole file as UTF-8 text. */
  async readText(path: string, opts: CallOptions = {}): Promise<string> {
    return new TextDecoder().decode(await this.readBytes(path, opts));
  }

  /**
   * write writes data (text, or exact bytes) to path, replacing the file
   * (or appending), creating its parents. It goes through a JSON body: for
   * large files use upload.
   */
  async write(path: string, data: string | Uint8Array, opts: WriteOptions = {}): Promise<FileInfo> {
    const body: Record<string, unknown> = { path };
    if (typeof data === "string") body["content"] = data;
    else body["content_base64"] = toBase64(data);
    if (opts.mode !== undefined) body["mode"] = opts.mode;
    if (opts.append) body["append"] = true;
    const w = await this.#t.json<WireFileInfo>({
      op: "write_file",
      sandboxId: this.sandboxId,
      method: "PUT",
      path: this.#path("/write"),
      json: body,
      signal: opts.signal,
    });
    return toFileInfo(w);
  }

  /** stat describes path. */
  async stat(path: string, opts: CallOptions = {}): Promise<FileInfo> {
    const w = await this.#t.json<WireFileInfo>({
      op: "stat",
      sandboxId: this.sandboxId,
      method: "GET",
      path: this.#path("/stat"),
      query: { path },
      signal: opts.signal,
    });
    return toFileInfo(w);
  }

  /** exists says whether path exists (false on not_found; other errors are thrown). */
  async exists(path: string, opts: CallOptions = {}): Promise<boolean> {
    try {
      await this.stat(path, opts);
      return true;
    } catch (err) {
      if (err instanceof SbxError && err.code === "not_found") return false;
      throw err;
    }
  }

  /** list lists a directory (default the sandbox's home), depth levels deep (default 1). */
  async list(path?: string, opts: { depth?: number } & CallOptions = {}): Promise<FileInfo[]> {
    const w = await this.#t.json<{ entries: WireFileInfo[] | null }>({
      op: "list_dir",
      sandboxId: this.sandboxId,
      method: "GET",
      path: this.#path("/list"),
      query: { path, depth: opts.depth },
      signal: opts.signal,
    });
    return (w.entries ?? []).map(toFileInfo);
  }

  /** mkdir makes a directory and its parents. */
  async mkdir(path: string, opts: CallOptions = {}): Promise<FileInfo> {
    const w = await this.#t.json<WireFileInfo>({
      op: "make_dir",
      sandboxId: this.sandboxId,
      method: "POST",
      path: this.#path("/mkdir"),
      json: { path },
      signal: opts.signal,
    });
    return toFileInfo(w);
  }

  /** move moves or renames source to destination. */
  async move(source: string, destination: string, opts: CallOptions = {}): Promise<FileInfo> {
    const w = await this.#t.json<WireFileInfo>({
      op: "move",
      sandboxId: this.sandboxId,
      method: "POST",
      path: this.#path("/move"),
      json: { source, destination },
      signal: opts.signal,
    });
    return toFileInfo(w);
  }

  /** remove removes a file, or a directory with everything in it. A path that is not there is no error. */
  async remove(path: string, opts: CallOptions = {}): Promise<void> {
    await this.#t.none({
      op: "remove",
      sandboxId: this.sandboxId,
      method: "DELETE",
      path: this.#path(""),
      query: { path },
      signal: opts.signal,
    });
  }

  /** glob finds paths matching pattern (`**` crosses directories) under path. */
  async glob(pattern: string, opts: { path?: string; limit?: number } & CallOptions = {}): Promise<GlobResult> {
    const w = await this.#t.json<{ paths: string[] | null; truncated: boolean }>({
      op: "glob",
      sandboxId: this.sandboxId,
      method: "GET",
      path: this.#path("/glob"),
      query: { pattern, path: opts.path, limit: opts.limit },
      signal: opts.signal,
    });
    return { paths: w.paths ?? [], truncated: w.truncated };
  }

  /** grep finds lines matching pattern, a regular expression (RE2) or, with fixed, plain text. */
  async grep(pattern: string, opts: GrepOptions = {}): Promise<GrepResult> {
    const w = await this.#t.json<{ matches: GrepResult["matches"] | null; truncated: boolean }>({
      op: "grep",
      sandboxId: this.sandboxId,
      method: "GET",
      path: this.#path("/grep"),
      query: {
        pattern,
        path: opts.path,
        include: opts.include,
        ignore_case: opts.ignoreCase || undefined,
        fixed: opts.fixed || undefined,
        limit: opts.limit,
      },
      signal: opts.signal,
    });
    return { matches: w.matches ?? [], truncated: w.truncated };
  }

  /**
   * upload streams source into path, replacing it and creating its parents.
   * A stream is sent chunk by chunk as it is read, never held whole; the
   * daemon refuses (413 out_of_range) more than the sandbox's disk quota.
   */
  async upload(path: string, source: UploadSource, opts: UploadOptions = {}): Promise<FileInfo> {
    const w = await this.#t.json<WireFileInfo>({
      op: "upload",
      sandboxId: this.sandboxId,
      method: "PUT",
      path: this.#path("/upload"),
      query: { path, mode: opts.mode === undefined ? undefined : octal(opts.mode) },
      body: toBody(source),
      signal: opts.signal,
    });
    return toFileInfo(w);
  }

  /**
   * download opens a file for streaming. The stream errors, rather than
   * ending early, when the body is shorter than the daemon announced.
   */
  async download(path: string, opts: CallOptions = {}): Promise<ReadableStream<Uint8Array>> {
    const req = { op: "download", sandboxId: this.sandboxId } as const;
    const resp = await this.#t.send({
      ...req,
      method: "GET",
      path: this.#path("/download"),
      query: { path },
      signal: opts.signal,
    });
    return checked(resp, req);
  }

  /**
   * uploadArchive streams a tar or tar.gz archive into directory dir (created
   * when missing), where the sandbox extracts it: no entry escapes dir, and a
   * refused archive changes nothing.
   */
  async uploadArchive(dir: string, source: UploadSource, opts: ArchiveUploadOptions = {}): Promise<ArchiveResult> {
    const w = await this.#t.json<{
      path: string;
      entries: number;
      bytes: number;
      skipped: ArchiveResult["skipped"] | null;
      skipped_count: number;
    }>({
      op: "upload_archive",
      sandboxId: this.sandboxId,
      method: "PUT",
      path: this.#path("/archive"),
      query: { path: dir, max_bytes: opts.maxBytes, max_entries: opts.maxEntries },
      body: toBody(source),
      signal: opts.signal,
    });
    return { path: w.path, entries: w.entries, bytes: w.bytes, skipped: w.skipped ?? [], skippedCount: w.skipped_count };
  }

  /**
   * downloadArchive streams directory dir out as a tar archive (names relative
   * to dir), gzip-compressed by the sandbox when gzip is set. An archive the
   * sandbox could not finish errors the stream, never ends it cleanly.
   */
  async downloadArchive(dir: string, opts: { gzip?: boolean } & CallOptions = {}): Promise<ReadableStream<Uint8Array>> {
    const req = { op: "download_archive", sandboxId: this.sandboxId } as const;
    const resp = await this.#t.send({
      ...req,
      method: "GET",
      path: this.#path("/archive"),
      query: { path: dir, gzip: opts.gzip || undefined },
      signal: opts.signal,
    });
    return checked(resp, req);
  }
}

/** octal writes permission bits as the API's octal string (0o644 → "0644"). */
function octal(mode: number): string {
  return mode.toString(8).padStart(4, "0");
}

/**
 * checked passes a response body through, turning a read error or a body
 * shorter than its Content-Length into an SbxError on the stream.
 */
function checked(resp: Response, req: { op: string; sandboxId: string }): ReadableStream<Uint8Array> {
  const body = resp.body;
  if (!body) return new ReadableStream({ start: (c) => c.close() });
  const announced = Number(resp.headers.get("content-length") ?? NaN);
  const reader = body.getReader();
  let seen = 0;
  return new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        let r: Awaited<ReturnType<typeof reader.read>>;
        try {
          r = await reader.read();
        } catch (err) {
          controller.error(broken(req, `reading the body after ${seen} bytes`, err));
          return;
        }
        if (r.done) {
          if (Number.isFinite(announced) && seen !== announced) {
            controller.error(broken(req, "reading the body", new Error(`it ended after ${seen} of ${announced} bytes`)));
          } else {
            controller.close();
          }
          return;
        }
        seen += r.value.byteLength;
        controller.enqueue(r.value);
      },
      async cancel(reason) {
        await reader.cancel(reason);
      },
    },
    { highWaterMark: 0 },
  );
}
