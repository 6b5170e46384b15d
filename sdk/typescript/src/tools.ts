// This file implements SandboxTools: the agent tools of one sandbox, called
// by name (POST /v1/sandboxes/{id}/tools/{name}), with typed helpers for the
// common ones. Arguments and results are the tools' own, snake_case, exactly
// as GET /v1/tools describes them to a model.

import { sandboxPath, type Transport } from "./http.js";
import type { CallOptions } from "./files.js";

/** ReplExecuteArgs are repl_execute's arguments. */
export interface ReplExecuteArgs {
  /** Python code; a trailing expression's value is returned, as in Jupyter. */
  code: string;
  /** Interrupt the cell after this many seconds (1–3600, default 60); the session is kept. */
  timeout_seconds?: number;
  /** Start a fresh session first. */
  restart?: boolean;
}

/** ReplExecuteResult is repl_execute's result. */
export interface ReplExecuteResult {
  stdout: string;
  stderr: string;
  /** repr of the last expression's value, when there is one (not None). */
  value?: string;
  error?: { name: string; value: string; traceback: string };
  /** matplotlib figures left open: base64 PNG, and SVG. */
  images?: { png: string; svg?: string }[];
  /** What the cell passed to FINAL(). */
  final?: string;
  execution_count: number;
  duration_ms: number;
  truncated?: boolean;
  timed_out?: boolean;
  restarted?: boolean;
  message?: string;
}

/** EditFileArgs are edit_file's arguments. */
export interface EditFileArgs {
  /** File to edit: absolute, or relative to /workspace. */
  file_path: string;
  old_string: string;
  /** Must differ from old_string. */
  new_string: string;
  /** Replace every occurrence instead of exactly one. */
  replace_all?: boolean;
}

/** EditFileResult is edit_file's result: how old_string was matched, and where. */
export interface EditFileResult {
  file_path: string;
  replacements: number;
  strategy: "exact" | "whitespace" | "indentation" | "fuzzy";
  /** 1 for an exact match. */
  score: number;
  start_line: number;
  end_line: number;
}

/** ReadFileArgs are read_file's arguments. */
export interface ReadFileArgs {
  file_path: string;
  /** 0-based line to start at. */
  offset?: number;
  /** Most lines (default 2000). */
  limit?: number;
}

/** ReadFileResult is read_file's result: numbered lines, cat -n style. */
export interface ReadFileResult {
  file_path: string;
  content: string;
  offset: number;
  lines: number;
  eof: boolean;
  total_lines?: number;
  cut_lines: number;
}

/** WriteFileArgs are write_file's arguments (it creates; it never overwrites). */
export interface WriteFileArgs {
  file_path: string;
  content: string;
}

/** WriteFileResult is write_file's result. */
export interface WriteFileResult {
  file_path: string;
  bytes: number;
}

/** LsResult is ls's result. */
export interface LsResult {
  path: string;
  entries: { path: string; is_dir: boolean; size: number; modified_at: string }[];
}

/** ToolGlobResult is glob's result. */
export interface ToolGlobResult {
  paths: string[];
  truncated: boolean;
}

/** ToolGrepArgs are grep's arguments. */
export interface ToolGrepArgs {
  pattern: string;
  path?: string;
  glob?: string;
  output_mode?: "files_with_matches" | "content" | "count";
  regex?: boolean;
  ignore_case?: boolean;
}

/** ToolGrepResult is grep's result; which list is set follows output_mode. */
export interface ToolGrepResult {
  output_mode: string;
  files?: string[];
  matches?: { path: string; line: number; text: string }[];
  counts?: { path: string; count: number }[];
  truncated: boolean;
}

/** BashArgs are sandbox_bash's arguments. */
export interface BashArgs {
  command: string;
  description?: string;
  /** 1–3600, default 60. */
  timeout_seconds?: number;
  cwd?: string;
}

/** BashResult is sandbox_bash's result. */
export interface BashResult {
  stdout: string;
  stderr: string;
  exit_code: number;
  truncated: boolean;
  /** Workspace files the command created or changed. */
  files: string[];
  file_count: number;
  local_paths: Record<string, string>;
  files_truncated?: boolean;
}

/**
 * SandboxTools calls the agent tools of one sandbox. `call` reaches any tool
 * by name; the helpers type the common ones. A failed call (an unknown tool or
 * parameter, a value out of range, a missing capability) throws SbxError.
 */
export class SandboxTools {
  /** The sandbox the tools act on. */
  readonly sandboxId: string;
  readonly #t: Transport;

  /** @internal Made by Sandbox. */
  constructor(t: Transport, sandboxId: string) {
    this.#t = t;
    this.sandboxId = sandboxId;
  }

  /** call calls tool name with args (its JSON arguments) and returns its structured result. */
  async call<T = Record<string, unknown>>(name: string, args: object = {}, opts: CallOptions = {}): Promise<T> {
    return this.#t.json<T>({
      op: "call_tool",
      sandboxId: this.sandboxId,
      method: "POST",
      path: sandboxPath(this.sandboxId, `/tools/${encodeURIComponent(name)}`),
      json: args,
      signal: opts.signal,
    });
  }

  /** replExecute runs Python in the sandbox's persistent session (repl_execute). */
  replExecute(args: ReplExecuteArgs, opts?: CallOptions): Promise<ReplExecuteResult> {
    return this.call("repl_execute", args, opts);
  }

  /** editFile replaces text in a file, exactly or by its fuzzy fallback (edit_file). */
  editFile(args: EditFileArgs, opts?: CallOptions): Promise<EditFileResult> {
    return this.call("edit_file", args, opts);
  }

  /** readFile reads numbered lines of a text file (read_file). */
  readFile(args: ReadFileArgs, opts?: CallOptions): Promise<ReadFileResult> {
    return this.call("read_file", args, opts);
  }

  /** writeFile creates a new text file; it refuses to overwrite (write_file). */
  writeFile(args: WriteFileArgs, opts?: CallOptions): Promise<WriteFileResult> {
    return this.call("write_file", args, opts);
  }

  /** ls lists a directory with sizes and times (ls). */
  ls(args: { path?: string } = {}, opts?: CallOptions): Promise<LsResult> {
    return this.call("ls", args, opts);
  }

  /** glob finds files by pattern (glob). */
  glob(args: { pattern: string; path?: string }, opts?: CallOptions): Promise<ToolGlobResult> {
    return this.call("glob", args, opts);
  }

  /** grep searches file contents, literally unless regex is set (grep). */
  grep(args: ToolGrepArgs, opts?: CallOptions): Promise<ToolGrepResult> {
    return this.call("grep", args, opts);
  }

  /** bash runs one shell command and reports the files it changed (sandbox_bash). */
  bash(args: BashArgs, opts?: CallOptions): Promise<BashResult> {
    return this.call("sandbox_bash", args, opts);
  }
}
