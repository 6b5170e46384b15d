/**
 * \@sbx/sdk/deepagents is a sandbox backend of deepagents
 * (`SandboxBackendProtocolV2`) over an sbx sandbox: deepagents' filesystem
 * tools and its `execute` tool act on the sandbox through sbx's own file,
 * grep, glob and edit calls, never through shell one-liners.
 *
 * deepagents is needed only to type-check against it: this module imports
 * nothing from it at run time.
 *
 * @example
 * ```ts
 * import { Sbx } from "@sbx/sdk";
 * import { SbxBackend } from "@sbx/sdk/deepagents";
 * import { createDeepAgent } from "deepagents";
 *
 * const backend = await SbxBackend.create(new Sbx(), { rootDir: "/workspace" });
 * const agent = createDeepAgent({ model, backend });
 * // … later
 * await backend.sandbox.delete();
 * ```
 *
 * @packageDocumentation
 */

import type {
  DeleteResult,
  EditResult,
  ExecuteResponse,
  FileDownloadResponse,
  FileInfo as AgentFileInfo,
  FileOperationError,
  FileUploadResponse,
  GlobResult as AgentGlobResult,
  GrepMatch as AgentGrepMatch,
  GrepResult as AgentGrepResult,
  LsResult,
  ReadRawResult,
  ReadResult,
  SandboxBackendProtocolV2,
  WriteResult,
} from "deepagents";
import { concat, fromBase64 } from "./bytes.js";
import type { CreateSandboxOptions, Sbx } from "./client.js";
import { SbxError } from "./errors.js";
import type { Sandbox } from "./sandbox.js";
import type { FileInfo } from "./types.js";

/**
 * The text deepagents' read_file tool shows for an empty (or blank) file, in
 * place of its contents: it compares a read's content with it, word for word.
 */
export const EMPTY_CONTENT_WARNING = "System reminder: File exists but has empty contents";

/** SbxBackendOptions configure an SbxBackend. */
export interface SbxBackendOptions {
  /**
   * Directory of the sandbox the agent sees as `/` (virtual paths, as
   * deepagents' FilesystemBackend's virtualMode): `/src/a.py` is
   * `<rootDir>/src/a.py`, results outside it are left out, `..` is refused,
   * and commands start in it. Without it paths are the sandbox's own, and
   * relative ones are relative to its home, /workspace. This is a view, not
   * a boundary: the sandbox is the boundary, and `execute` reaches all of it.
   */
  rootDir?: string;
  /** Seconds a command of execute() may run, 1–3600; default the daemon's (60). */
  timeoutSeconds?: number;
  /** Most bytes of output execute() keeps (stdout and stderr as they came); default 1 MiB. */
  maxOutputBytes?: number;
  /** Environment variables of execute()'s commands. */
  env?: Record<string, string>;
}

/** PathError is a path the virtual root refuses. */
class PathError extends Error {}

/**
 * SbxBackend is a deepagents sandbox backend (SandboxBackendProtocolV2) over
 * one sbx sandbox. Its results and error strings are deepagents' own (as its
 * FilesystemBackend words them); failures of the sandbox itself (it was
 * deleted, the daemon is gone) are thrown as SbxError by execute() and
 * returned as errors by the file operations.
 *
 * edit() uses sbx's edit_file tool: an exact match first, then its fallback
 * that ignores trailing whitespace, then indentation, then matches by
 * similarity (score ≥ 0.85), refusing ambiguous matches; the result's
 * metadata says which strategy matched.
 */
export class SbxBackend implements SandboxBackendProtocolV2 {
  /** The sandbox this backend acts on. */
  readonly sandbox: Sandbox;
  readonly #root: string;
  readonly #opts: SbxBackendOptions;

  /** Makes a backend over an existing sandbox; it does not delete it. */
  constructor(sandbox: Sandbox, opts: SbxBackendOptions = {}) {
    this.sandbox = sandbox;
    this.#opts = opts;
    const root = (opts.rootDir ?? "").replace(/\/+$/, "");
    if (root !== "" && !root.startsWith("/")) throw new TypeError(`rootDir ${JSON.stringify(opts.rootDir)} is not absolute`);
    this.#root = root;
  }

  /**
   * create makes a sandbox (with sandbox's options) and a backend over it;
   * with rootDir, that directory is made too. Delete it with
   * `backend.sandbox.delete()`.
   */
  static async create(sbx: Sbx, opts: SbxBackendOptions & { sandbox?: CreateSandboxOptions } = {}): Promise<SbxBackend> {
    const sandbox = await sbx.sandboxes.create(opts.sandbox ?? {});
    const backend = new SbxBackend(sandbox, opts);
    if (backend.#root !== "") {
      try {
        await sandbox.files.mkdir(backend.#root);
      } catch (err) {
        const isDir = isCode(err, "already_exists") && (await sandbox.files.stat(backend.#root).catch(() => undefined))?.type === "dir";
        if (!isDir) {
          await sandbox.delete().catch(() => {});
          throw err;
        }
      }
    }
    return backend;
  }

  /** id is the sandbox's id. */
  get id(): string {
    return this.sandbox.id;
  }

  // #real maps a path the agent gave to the sandbox's.
  #real(p: string): string {
    if (this.#root === "") return p;
    const v = p.startsWith("/") ? p : "/" + p;
    if (v.startsWith("~") || v.split("/").includes("..")) throw new PathError("Path traversal not allowed");
    const trimmed = v.replace(/\/+$/, "");
    return this.#root + trimmed;
  }

  // #agent maps a sandbox path back to the agent's; undefined when outside the root.
  #agent(real: string): string | undefined {
    if (this.#root === "") return real;
    if (real === this.#root) return "/";
    if (real.startsWith(this.#root + "/")) return real.slice(this.#root.length);
    return undefined;
  }

  /**
   * execute runs command by /bin/sh -c (in rootDir, when set) and returns its
   * stdout and stderr as they came, interleaved, and its exit code: 124 when
   * it ran past its timeout, 128+n when signal n ended it.
   */
  async execute(command: string): Promise<ExecuteResponse> {
    const max = this.#opts.maxOutputBytes ?? 1 << 20;
    const kept: Uint8Array[] = [];
    let n = 0;
    let truncated = false;
    const keep = (_text: string, data: Uint8Array) => {
      const room = max - n;
      if (data.byteLength > room) {
        truncated = true;
        if (room <= 0) return;
        data = data.subarray(0, room);
      }
      kept.push(data);
      n += data.byteLength;
    };
    const stream = await this.sandbox.execStream(command, {
      cwd: this.#root === "" ? undefined : this.#root,
      env: this.#opts.env,
      timeoutSeconds: this.#opts.timeoutSeconds,
      onStdout: keep,
      onStderr: keep,
    });
    const result = await stream.wait();
    return { output: new TextDecoder().decode(concat(kept, n)), exitCode: result.exitCode, truncated };
  }

  /** ls lists a directory (not recursively): directories end in `/`, sorted by path. */
  async ls(path: string): Promise<LsResult> {
    try {
      const r = await this.sandbox.tools.ls({ path: this.#real(path) });
      const files: AgentFileInfo[] = [];
      for (const e of r.entries ?? []) {
        const p = this.#agent(e.path);
        if (p === undefined) continue;
        files.push({
          path: e.is_dir ? p + "/" : p,
          is_dir: e.is_dir,
          size: e.is_dir ? 0 : e.size,
          modified_at: new Date(e.modified_at).toISOString(),
        });
      }
      files.sort((a, b) => a.path.localeCompare(b.path));
      return { files };
    } catch (err) {
      if (isCode(err, "not_found")) return { error: `Path '${path}' not found` };
      if (err instanceof SbxError && /is not a directory/.test(err.message)) return { error: `Path '${path}' is not a directory` };
      return { error: describe(err) };
    }
  }

  /**
   * read reads limit lines (default 500) from line offset (0-based) of a text
   * file, unnumbered, with where they are in the file; a binary file (by its
   * extension: images, audio, video, PDF) whole, as bytes. The file is
   * streamed: only the lines asked for are held.
   */
  async read(filePath: string, offset = 0, limit = 500): Promise<ReadResult> {
    const mimeType = mimeTypeOf(filePath);
    let real: string;
    try {
      real = this.#real(filePath);
    } catch (err) {
      return { error: describe(err) };
    }
    if (!isText(mimeType)) {
      try {
        return { content: await this.sandbox.files.readBytes(real), mimeType };
      } catch (err) {
        return { error: readError(filePath, err) };
      }
    }
    const o = Number.isFinite(offset) ? Math.max(0, Math.floor(offset)) : 0;
    const l = Number.isFinite(limit) ? Math.max(0, Math.floor(limit)) : 0;
    let w: LineWindow;
    try {
      w = await readLines(await this.sandbox.files.download(real), o, l);
    } catch (err) {
      return { error: readError(filePath, err) };
    }
    if (w.blank) return { content: EMPTY_CONTENT_WARNING, mimeType };
    if (o >= w.totalLines) return { error: `Line offset ${o} exceeds file length (${w.totalLines} lines)` };
    const content = w.lines.join("\n");
    if (w.lines.length === 0 || l === 0) return { content, mimeType };
    const endLine = Math.min(o + l, w.totalLines);
    return {
      content,
      mimeType,
      totalLines: w.totalLines,
      startLine: o + 1,
      endLine,
      nextOffset: endLine < w.totalLines ? endLine : undefined,
    };
  }

  /** readRaw reads a whole file as deepagents' FileData: text as a string, binary as bytes. */
  async readRaw(filePath: string): Promise<ReadRawResult> {
    try {
      const real = this.#real(filePath);
      const [bytes, info] = await Promise.all([this.sandbox.files.readBytes(real), this.sandbox.files.stat(real)]);
      const mimeType = mimeTypeOf(filePath);
      const modified = info.modifiedAt.toISOString();
      return {
        data: {
          content: isText(mimeType) ? new TextDecoder().decode(bytes) : bytes,
          mimeType,
          created_at: modified,
          modified_at: modified,
        },
      };
    } catch (err) {
      return { error: readError(filePath, err) };
    }
  }

  /**
   * write writes a file, creating it (and its parents) or replacing it. For a
   * binary file (by its extension) content is base64, as deepagents sends it.
   */
  async write(filePath: string, content: string): Promise<WriteResult> {
    try {
      const real = this.#real(filePath);
      const bytes = isText(mimeTypeOf(filePath)) ? new TextEncoder().encode(content) : fromBase64(content);
      await this.sandbox.files.upload(real, bytes);
      return { path: filePath, filesUpdate: null };
    } catch (err) {
      return { error: `Error writing file '${filePath}': ${describe(err)}` };
    }
  }

  /**
   * edit replaces oldString by newString in a file: exactly one occurrence,
   * or every one with replaceAll. An empty oldString fills an empty file.
   */
  async edit(filePath: string, oldString: string, newString: string, replaceAll = false): Promise<EditResult> {
    let real: string;
    try {
      real = this.#real(filePath);
    } catch (err) {
      return { error: `Error editing file '${filePath}': ${describe(err)}` };
    }
    if (oldString === "" || oldString === newString) {
      // edit_file refuses these two; their meaning is deepagents' own.
      return this.#editLocally(filePath, real, oldString, newString, replaceAll);
    }
    try {
      const r = await this.sandbox.tools.editFile({
        file_path: real,
        old_string: oldString,
        new_string: newString,
        replace_all: replaceAll,
      });
      return {
        path: filePath,
        filesUpdate: null,
        occurrences: r.replacements,
        metadata: { strategy: r.strategy, score: r.score, start_line: r.start_line, end_line: r.end_line },
      };
    } catch (err) {
      if (isCode(err, "not_found") || (err instanceof SbxError && /is a directory/.test(err.message))) {
        return { error: `Error: File '${filePath}' not found` };
      }
      return { error: `Error editing file '${filePath}': ${describe(err)}` };
    }
  }

  // #editLocally handles an empty oldString and one equal to newString.
  async #editLocally(filePath: string, real: string, oldString: string, newString: string, replaceAll: boolean): Promise<EditResult> {
    let text: string;
    try {
      text = new TextDecoder().decode(await this.sandbox.files.readBytes(real));
    } catch (err) {
      if (isCode(err, "not_found") || (err instanceof SbxError && /is a directory/.test(err.message))) {
        return { error: `Error: File '${filePath}' not found` };
      }
      return { error: `Error editing file '${filePath}': ${describe(err)}` };
    }
    if (oldString === "") {
      if (text !== "") return { error: "Error: oldString cannot be empty when file has content" };
      if (newString !== "") {
        try {
          await this.sandbox.files.upload(real, new TextEncoder().encode(newString));
        } catch (err) {
          return { error: `Error editing file '${filePath}': ${describe(err)}` };
        }
      }
      return { path: filePath, filesUpdate: null, occurrences: 0 };
    }
    const occurrences = text.split(oldString).length - 1;
    if (occurrences === 0) return { error: `Error: String not found in file: '${oldString}'` };
    if (occurrences > 1 && !replaceAll) {
      return {
        error:
          `Error: String '${oldString}' has multiple occurrences (appears ${occurrences} times) in file. ` +
          "Use replace_all=True to replace all instances, or provide a more specific string with surrounding context.",
      };
    }
    return { path: filePath, filesUpdate: null, occurrences };
  }

  /**
   * grep finds lines containing pattern, literally (not a regular
   * expression), under path (a file or a directory, recursively), in text
   * files only; glob keeps the files whose name matches it (`*.py`), or whose
   * path under path does when it has a `/`. maxCount caps the matches.
   */
  async grep(pattern: string, path: string | null = "/", glob: string | null = null, maxCount: number | null = null): Promise<AgentGrepResult> {
    const base = path || "/";
    let found: { path: string; line: number; text: string }[];
    let truncated: boolean;
    try {
      const real = this.#real(base);
      if (glob && glob.includes("/")) {
        const r = await this.sandbox.tools.grep({
          pattern,
          path: real,
          glob: glob.replace(/^\/+/, ""),
          output_mode: "content",
        });
        found = r.matches ?? [];
        truncated = r.truncated;
      } else {
        const r = await this.sandbox.files.grep(pattern, {
          path: real,
          include: glob ?? undefined,
          fixed: true,
          limit: maxCount && maxCount > 0 ? Math.min(maxCount, 100000) : undefined,
        });
        found = r.matches;
        truncated = r.truncated;
      }
    } catch (err) {
      if (isCode(err, "not_found")) return { matches: [] };
      return { error: `Error searching '${base}': ${describe(err)}` };
    }
    const matches: AgentGrepMatch[] = [];
    for (const m of found) {
      const p = this.#agent(m.path);
      if (p === undefined || !isText(mimeTypeOf(p))) continue;
      matches.push({ path: p, line: m.line, text: m.text });
    }
    if (maxCount && maxCount > 0 && matches.length > maxCount) {
      return { matches: matches.slice(0, maxCount), truncated: true };
    }
    return truncated ? { matches, truncated } : { matches };
  }

  /**
   * glob finds files (not directories) whose path under path matches pattern
   * (`*` and `?` within a name, `**` across directories), with their sizes
   * and times, sorted by path.
   */
  async glob(pattern: string, path = "/"): Promise<AgentGlobResult> {
    let paths: string[];
    let truncated: boolean;
    try {
      const r = await this.sandbox.files.glob(pattern.replace(/^\/+/, ""), { path: this.#real(path || "/") });
      paths = r.paths;
      truncated = r.truncated;
    } catch (err) {
      if (isCode(err, "not_found")) return { files: [] };
      return { error: describe(err) };
    }
    const infos = await this.#describe(paths);
    const files: AgentFileInfo[] = [];
    for (const p of paths) {
      const agentPath = this.#agent(p);
      if (agentPath === undefined) continue;
      const info = infos.get(p);
      if (info?.type === "dir") continue;
      files.push(
        info
          ? { path: agentPath, is_dir: false, size: info.size, modified_at: info.modifiedAt.toISOString() }
          : { path: agentPath },
      );
    }
    files.sort((a, b) => a.path.localeCompare(b.path));
    return truncated ? { files, truncated } : { files };
  }

  // #describe lists the directories holding paths, once each, for their entries' types, sizes and times.
  async #describe(paths: string[]): Promise<Map<string, FileInfo>> {
    const dirs = [...new Set(paths.map((p) => p.slice(0, Math.max(p.lastIndexOf("/"), 1))))];
    const out = new Map<string, FileInfo>();
    await forEachLimit(dirs, 8, async (dir) => {
      try {
        for (const e of await this.sandbox.files.list(dir)) out.set(e.path, e);
      } catch {
        // Gone since the glob: its paths stay without details.
      }
    });
    return out;
  }

  /** delete removes a file, or a directory with everything in it; `/` under rootDir empties the root. */
  async delete(filePath: string): Promise<DeleteResult> {
    try {
      const real = this.#real(filePath);
      if (this.#root !== "" && real === this.#root) {
        const entries = await this.sandbox.files.list(real);
        await forEachLimit(entries, 8, (e) => this.sandbox.files.remove(e.path));
        return { path: filePath, filesUpdate: null };
      }
      if (!(await this.sandbox.files.exists(real))) return { error: `Error: '${filePath}' not found` };
      await this.sandbox.files.remove(real);
      return { path: filePath, filesUpdate: null };
    } catch (err) {
      return { error: `Error deleting '${filePath}': ${describe(err)}` };
    }
  }

  /**
   * uploadFiles writes each file in turn (creating parents, replacing what is
   * there), so a later path may depend on an earlier one; each answer says
   * how it went.
   */
  async uploadFiles(files: Array<[string, Uint8Array]>): Promise<FileUploadResponse[]> {
    const out: FileUploadResponse[] = [];
    for (const [path, content] of files) {
      try {
        await this.sandbox.files.upload(this.#real(path), content);
        out.push({ path, error: null });
      } catch (err) {
        out.push({ path, error: operationError(err) });
      }
    }
    return out;
  }

  /** downloadFiles reads each file whole; each answer has its bytes or why not. */
  async downloadFiles(paths: string[]): Promise<FileDownloadResponse[]> {
    const out: FileDownloadResponse[] = new Array(paths.length);
    await forEachLimit(paths.map((p, i) => [i, p] as const), 4, async ([i, path]) => {
      try {
        out[i] = { path, content: await this.sandbox.files.readBytes(this.#real(path)), error: null };
      } catch (err) {
        out[i] = { path, content: null, error: operationError(err) };
      }
    });
    return out;
  }
}

/** LineWindow is what readLines kept of a file. */
interface LineWindow {
  /** The lines in the window, as the file's text split on "\n" has them. */
  lines: string[];
  /** Lines in the file (a final newline ends the last line, it starts none). */
  totalLines: number;
  /** The file is empty or holds only whitespace. */
  blank: boolean;
}

/**
 * readLines reads a text stream to its end, keeping only the lines with
 * index in [offset, offset+limit) of its text split on "\n", and counting
 * the rest.
 */
async function readLines(stream: ReadableStream<Uint8Array>, offset: number, limit: number): Promise<LineWindow> {
  const dec = new TextDecoder();
  const lines: string[] = [];
  let index = 0; // of the current line
  let cur = ""; // its text, when in the window
  let curLength = 0;
  let blank = true;
  const inWindow = () => index >= offset && index - offset < limit;
  const feed = (text: string) => {
    if (blank && text.trim() !== "") blank = false;
    let start = 0;
    for (;;) {
      const nl = text.indexOf("\n", start);
      const seg = nl < 0 ? text.slice(start) : text.slice(start, nl);
      if (inWindow()) cur += seg;
      curLength += seg.length;
      if (nl < 0) return;
      if (inWindow()) lines.push(cur);
      index++;
      cur = "";
      curLength = 0;
      start = nl + 1;
    }
  };
  const reader = stream.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    feed(dec.decode(value, { stream: true }));
  }
  feed(dec.decode());
  if (inWindow()) lines.push(cur);
  const count = index + 1;
  return { lines, totalLines: curLength === 0 ? count - 1 : count, blank };
}

/** forEachLimit runs fn on every item, at most limit at once. */
async function forEachLimit<T>(items: readonly T[], limit: number, fn: (item: T) => Promise<unknown>): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const item = items[next++]!;
      await fn(item);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
}

function isCode(err: unknown, code: string): boolean {
  return err instanceof SbxError && err.code === code;
}

/** describe is an error's words for the model: the daemon's detail without its `op id:` prefix. */
function describe(err: unknown): string {
  if (err instanceof SbxError) return err.detail;
  return err instanceof Error ? err.message : String(err);
}

function readError(filePath: string, err: unknown): string {
  if (isCode(err, "not_found") || (err instanceof SbxError && /is a directory/.test(err.message))) {
    return `File '${filePath}' not found`;
  }
  if (err instanceof PathError) return err.message;
  return `Error reading file '${filePath}': ${describe(err)}`;
}

/** operationError maps a failure to deepagents' upload and download error codes. */
function operationError(err: unknown): FileOperationError {
  if (err instanceof SbxError) {
    if (err.code === "not_found") return "file_not_found";
    if (err.code === "permission_denied") return "permission_denied";
    if (/is a directory/.test(err.message)) return "is_directory";
  }
  return "invalid_path";
}

// Extensions whose files deepagents treats as binary (everything else is
// text): images but SVG, audio, video, PDF and PowerPoint.
const binaryTypes: Record<string, string> = {
  png: "image/png",
  jpg: "image/jpeg",
  jpeg: "image/jpeg",
  gif: "image/gif",
  webp: "image/webp",
  heic: "image/heic",
  heif: "image/heif",
  mp3: "audio/mpeg",
  wav: "audio/wav",
  aiff: "audio/aiff",
  aac: "audio/aac",
  ogg: "audio/ogg",
  flac: "audio/flac",
  mp4: "video/mp4",
  webm: "video/webm",
  mpeg: "video/mpeg",
  mpg: "video/mpeg",
  mov: "video/quicktime",
  avi: "video/x-msvideo",
  flv: "video/x-flv",
  wmv: "video/x-ms-wmv",
  "3gpp": "video/3gpp",
  pdf: "application/pdf",
  ppt: "application/vnd.ms-powerpoint",
  pptx: "application/vnd.openxmlformats-officedocument.presentationml.presentation",
};

// Text types with a name of their own; other text is text/plain.
const textTypes: Record<string, string> = {
  txt: "text/plain",
  md: "text/markdown",
  markdown: "text/markdown",
  html: "text/html",
  htm: "text/html",
  css: "text/css",
  csv: "text/csv",
  xml: "text/xml",
  json: "application/json",
  js: "application/javascript",
  mjs: "application/javascript",
  cjs: "application/javascript",
  svg: "image/svg+xml",
};

/** mimeTypeOf guesses a file's MIME type from its extension, as deepagents does. */
export function mimeTypeOf(path: string): string {
  const name = path.slice(path.lastIndexOf("/") + 1);
  const dot = name.lastIndexOf(".");
  if (dot <= 0) return "text/plain";
  const ext = name.slice(dot + 1).toLowerCase();
  return binaryTypes[ext] ?? textTypes[ext] ?? "text/plain";
}

function isText(mimeType: string): boolean {
  return mimeType.startsWith("text/") || mimeType === "application/json" || mimeType === "application/javascript" || mimeType === "image/svg+xml";
}
