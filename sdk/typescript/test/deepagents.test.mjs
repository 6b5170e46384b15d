// The deepagents backend: deepagents' own filesystem tools (its filesystem
// middleware's ls, read_file, write_file, edit_file, delete, glob, grep and
// execute), built over SbxBackend and invoked directly, no model involved,
// each checked against the sandbox's real state through the plain SDK; then
// the protocol's methods one by one, edge cases and error strings included.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { createFilesystemMiddleware, isSandboxBackend } from "deepagents";
import { EMPTY_CONTENT_WARNING, SbxBackend, mimeTypeOf } from "@sbx/sdk/deepagents";
import { allBytes, client, newSandbox, remove, sha256 } from "./helpers.mjs";

/** tools builds deepagents' filesystem tools over backend and returns a caller. */
function toolsOver(backend) {
  const middleware = createFilesystemMiddleware({ backend });
  const byName = new Map(middleware.tools.map((t) => [t.name, t]));
  let n = 0;
  return async (name, args) => {
    const tool = byName.get(name);
    assert.ok(tool, `deepagents made a ${name} tool (it made ${[...byName.keys()]})`);
    const msg = await tool.invoke({ name, args, id: `call_${++n}`, type: "tool_call" });
    const content = typeof msg === "string" ? msg : msg.content;
    return typeof content === "string" ? content : content.map((c) => c.text ?? "").join("");
  };
}

describe("deepagents tools over SbxBackend", () => {
  let backend;
  let call;
  before(async () => {
    backend = await SbxBackend.create(client(), {
      rootDir: "/workspace/agent",
      sandbox: { ttlSeconds: 900, labels: { "sbx.test": "ts-sdk" } },
    });
    call = toolsOver(backend);
  });
  after(() => remove(backend?.sandbox));

  test("it is a sandbox backend, named by its sandbox", () => {
    assert.equal(isSandboxBackend(backend), true);
    assert.equal(backend.id, backend.sandbox.id);
  });

  test("write_file writes into the sandbox, under the root", async () => {
    const out = await call("write_file", { file_path: "/src/app.py", content: "def main():\n    print('hi')\n\nmain()\n" });
    assert.equal(out, "Successfully wrote to '/src/app.py'");
    assert.equal(await backend.sandbox.files.readText("/workspace/agent/src/app.py"), "def main():\n    print('hi')\n\nmain()\n");
  });

  test("ls lists what the sandbox holds", async () => {
    await backend.sandbox.files.write("/workspace/agent/src/data.json", '{"a": 1}\n');
    await backend.sandbox.files.mkdir("/workspace/agent/src/pkg");
    const out = await call("ls", { path: "/src" });
    assert.deepEqual(out.split("\n"), ["/src/app.py (36 bytes)", "/src/data.json (9 bytes)", "/src/pkg/ (directory)"]);
    assert.equal(await call("ls", { path: "/" }), "/src/ (directory)");
  });

  test("read_file reads the sandbox's file, paged", async () => {
    let out = await call("read_file", { file_path: "/src/app.py" });
    assert.equal(out, "@@ lines 1-4 of 4 @@\ndef main():\n    print('hi')\n\nmain()");
    out = await call("read_file", { file_path: "/src/app.py", offset: 1, limit: 1 });
    assert.match(out, /lines 2-2 of 4/);
    assert.match(out, /\n    print\('hi'\)$/);
    out = await call("read_file", { file_path: "/src/missing.py" });
    assert.equal(out, "Error: File '/src/missing.py' not found");
  });

  test("edit_file edits the sandbox's file", async () => {
    const out = await call("edit_file", { file_path: "/src/app.py", old_string: "print('hi')", new_string: "print('hello')" });
    assert.equal(out, "Successfully replaced 1 occurrence(s) in '/src/app.py'");
    assert.equal(await backend.sandbox.files.readText("/workspace/agent/src/app.py"), "def main():\n    print('hello')\n\nmain()\n");
    const refused = await call("edit_file", { file_path: "/src/app.py", old_string: "completely absent text", new_string: "x" });
    assert.match(refused, /^Error editing file '\/src\/app\.py': old_string not found/);
    assert.equal(await backend.sandbox.files.readText("/workspace/agent/src/app.py"), "def main():\n    print('hello')\n\nmain()\n");
  });

  test("glob finds the sandbox's files", async () => {
    await backend.sandbox.files.write("/workspace/agent/src/pkg/mod.py", "VALUE = 'hello'\n");
    assert.equal(await call("glob", { pattern: "**/*.py" }), "/src/app.py\n/src/pkg/mod.py");
    assert.equal(await call("glob", { pattern: "*.json", path: "/src" }), "/src/data.json");
    assert.equal(await call("glob", { pattern: "**/*.rs" }), "No files found matching pattern '**/*.rs'");
  });

  test("grep searches the sandbox's files, literally", async () => {
    const out = await call("grep", { pattern: "hello", output_mode: "content" });
    assert.equal(out, "/src/app.py:\n  2:     print('hello')\n/src/pkg/mod.py:\n  1: VALUE = 'hello'");
    assert.equal(await call("grep", { pattern: "hello", glob: "mod.*", output_mode: "files_with_matches" }), "/src/pkg/mod.py");
    assert.equal(await call("grep", { pattern: "print('", output_mode: "files_with_matches" }), "/src/app.py"); // not a regex
    assert.equal(await call("grep", { pattern: "zzz-absent" }), "No matches found for pattern 'zzz-absent'");
  });

  test("execute runs in the sandbox, in the root, with stdout and stderr", async () => {
    let out = await call("execute", { command: "python3 src/app.py; pwd" });
    assert.equal(out, "hello\n/workspace/agent\n\n[Command succeeded with exit code 0]");
    out = await call("execute", { command: "echo oops >&2; exit 3" });
    assert.equal(out, "oops\n\n[Command failed with exit code 3]");
    assert.equal(await call("execute", { command: "echo made > made.txt" }), "\n[Command succeeded with exit code 0]");
    assert.equal(await backend.sandbox.files.readText("/workspace/agent/made.txt"), "made\n");
  });

  test("delete removes from the sandbox", async () => {
    assert.equal(await call("delete", { file_path: "/src/pkg" }), "Deleted /src/pkg");
    assert.equal(await backend.sandbox.files.exists("/workspace/agent/src/pkg"), false);
    assert.equal(await call("delete", { file_path: "/src/pkg" }), "Error: '/src/pkg' not found");
  });
});

describe("SbxBackend, method by method", () => {
  let sb;
  let real; // paths are the sandbox's own
  let rooted; // the agent's "/" is /workspace/r
  before(async () => {
    sb = await newSandbox();
    real = new SbxBackend(sb, { maxOutputBytes: 1000 });
    rooted = new SbxBackend(sb, { rootDir: "/workspace/r/", timeoutSeconds: 1 });
    await sb.files.mkdir("/workspace/r");
  });
  after(() => remove(sb));

  test("read pages by line, as deepagents counts them", async () => {
    await sb.files.write("/workspace/r/lines.txt", "one\ntwo\nthree\nfour\n");
    let r = await rooted.read("/lines.txt", 1, 2);
    assert.deepEqual(r, { content: "two\nthree", mimeType: "text/plain", totalLines: 4, startLine: 2, endLine: 3, nextOffset: 3 });
    r = await rooted.read("lines.txt");
    assert.deepEqual(r, { content: "one\ntwo\nthree\nfour\n", mimeType: "text/plain", totalLines: 4, startLine: 1, endLine: 4, nextOffset: undefined });
    r = await rooted.read("/lines.txt", 4);
    assert.deepEqual(r, { error: "Line offset 4 exceeds file length (4 lines)" });
    r = await rooted.read("/lines.txt", 0, 0);
    assert.deepEqual(r, { content: "", mimeType: "text/plain" });
    await sb.files.write("/workspace/r/blank.md", " \n\t\n");
    assert.deepEqual(await rooted.read("/blank.md"), { content: EMPTY_CONTENT_WARNING, mimeType: "text/markdown" });
    assert.deepEqual(await rooted.read("/nope.txt"), { error: "File '/nope.txt' not found" });
    assert.deepEqual(await rooted.read("/"), { error: "File '/' not found" });
  });

  test("read streams a big file, keeping only the window", async () => {
    const lines = Array.from({ length: 200_000 }, (_, i) => `line ${i + 1}`);
    await sb.files.upload("/tmp/big.log", lines.join("\n")); // no final newline
    const r = await real.read("/tmp/big.log", 199_998, 10);
    assert.deepEqual(r, { content: "line 199999\nline 200000", mimeType: "text/plain", totalLines: 200_000, startLine: 199_999, endLine: 200_000, nextOffset: undefined });
  });

  test("binary files: written from base64, read as bytes, by extension", async () => {
    const png = allBytes();
    assert.equal(mimeTypeOf("/a/b.PNG"), "image/png");
    assert.equal(mimeTypeOf("/a/b.svg"), "image/svg+xml");
    assert.equal(mimeTypeOf("/a/Makefile"), "text/plain");
    assert.deepEqual(await rooted.write("/img/pic.png", Buffer.from(png).toString("base64")), { path: "/img/pic.png", filesUpdate: null });
    assert.deepEqual(await sb.files.readBytes("/workspace/r/img/pic.png"), png);
    const r = await rooted.read("/img/pic.png", 5, 1); // offset and limit do not apply
    assert.equal(r.mimeType, "image/png");
    assert.deepEqual(r.content, png);
    const raw = await rooted.readRaw("/img/pic.png");
    assert.deepEqual(raw.data.content, png);
    assert.equal(raw.data.mimeType, "image/png");
    const text = await rooted.readRaw("/lines.txt");
    assert.equal(text.data.content, "one\ntwo\nthree\nfour\n");
    assert.ok(!Number.isNaN(Date.parse(text.data.modified_at)));
    assert.deepEqual(await rooted.readRaw("/none.txt"), { error: "File '/none.txt' not found" });
  });

  test("write replaces a file whole, and makes its parents", async () => {
    await real.write("/workspace/w/deep/x.txt", "first version, long\n");
    assert.deepEqual(await real.write("/workspace/w/deep/x.txt", "second\n"), { path: "/workspace/w/deep/x.txt", filesUpdate: null });
    assert.equal(await sb.files.readText("/workspace/w/deep/x.txt"), "second\n");
    const r = await real.write("/workspace/w", "onto a directory");
    assert.match(r.error, /^Error writing file '\/workspace\/w': .*is a directory/);
  });

  test("edit: one, all, none, many, empty, unchanged", async () => {
    await sb.files.write("/workspace/e.txt", "a = 1\nb = 1\nc = 2\n");
    let r = await real.edit("/workspace/e.txt", "c = 2", "c = 3");
    assert.equal(r.occurrences, 1);
    assert.equal(r.path, "/workspace/e.txt");
    assert.equal(r.filesUpdate, null);
    assert.equal(r.metadata.strategy, "exact");
    r = await real.edit("/workspace/e.txt", "= 1", "= 9");
    assert.match(r.error, /^Error editing file '\/workspace\/e\.txt': old_string occurs 2 times/);
    r = await real.edit("/workspace/e.txt", "= 1", "= 9", true);
    assert.equal(r.occurrences, 2);
    assert.equal(await sb.files.readText("/workspace/e.txt"), "a = 9\nb = 9\nc = 3\n");
    assert.deepEqual(await real.edit("/workspace/e.txt", "= 9", "= 9", true), { path: "/workspace/e.txt", filesUpdate: null, occurrences: 2 });
    assert.deepEqual(await real.edit("/workspace/e.txt", "= 9", "= 9"), {
      error: "Error: String '= 9' has multiple occurrences (appears 2 times) in file. Use replace_all=True to replace all instances, or provide a more specific string with surrounding context.",
    });
    assert.deepEqual(await real.edit("/workspace/e.txt", "absent", "absent"), { error: "Error: String not found in file: 'absent'" });
    assert.deepEqual(await real.edit("/workspace/e.txt", "", "x"), { error: "Error: oldString cannot be empty when file has content" });
    await sb.files.write("/workspace/empty.txt", "");
    assert.deepEqual(await real.edit("/workspace/empty.txt", "", "filled\n"), { path: "/workspace/empty.txt", filesUpdate: null, occurrences: 0 });
    assert.equal(await sb.files.readText("/workspace/empty.txt"), "filled\n");
    assert.deepEqual(await real.edit("/workspace/missing.txt", "a", "b"), { error: "Error: File '/workspace/missing.txt' not found" });
  });

  test("ls: directories end in /, errors say what is wrong", async () => {
    const r = await rooted.ls("/");
    const paths = r.files.map((f) => f.path);
    assert.ok(paths.includes("/img/") && paths.includes("/lines.txt"), JSON.stringify(paths));
    const img = r.files.find((f) => f.path === "/img/");
    assert.equal(img.is_dir, true);
    const lines = r.files.find((f) => f.path === "/lines.txt");
    assert.deepEqual([lines.is_dir, lines.size], [false, 19]);
    assert.ok(!Number.isNaN(Date.parse(lines.modified_at)));
    assert.deepEqual(await rooted.ls("/nope"), { error: "Path '/nope' not found" });
    assert.deepEqual(await rooted.ls("/lines.txt"), { error: "Path '/lines.txt' is not a directory" });
  });

  test("the root refuses paths that climb out of it", async () => {
    assert.deepEqual(await rooted.read("/../../etc/hostname"), { error: "Path traversal not allowed" });
    assert.deepEqual(await rooted.ls("/a/../.."), { error: "Path traversal not allowed" });
    assert.match((await rooted.write("/../escape.txt", "x")).error, /Path traversal not allowed/);
    assert.equal(await sb.files.exists("/workspace/escape.txt"), false);
    const [up] = await rooted.uploadFiles([["/../escape.bin", new Uint8Array([1])]]);
    assert.deepEqual(up, { path: "/../escape.bin", error: "invalid_path" });
  });

  test("grep: literal, by name glob, capped, binary files left out", async () => {
    await sb.files.write("/workspace/gr/a.py", "x = '.*'\ny = 2\n");
    await sb.files.write("/workspace/gr/b.txt", "x = '.*' too\n");
    await sb.files.write("/workspace/gr/sub/c.py", "no match\nx = '.*' again\n");
    await sb.files.write("/workspace/gr/pic.png", "x = '.*' inside an image\n");
    let r = await real.grep(".*'", "/workspace/gr");
    assert.deepEqual(r, {
      matches: [
        { path: "/workspace/gr/a.py", line: 1, text: "x = '.*'" },
        { path: "/workspace/gr/b.txt", line: 1, text: "x = '.*' too" },
        { path: "/workspace/gr/sub/c.py", line: 2, text: "x = '.*' again" },
      ],
    });
    r = await real.grep(".*'", "/workspace/gr", "*.py");
    assert.deepEqual(r.matches.map((m) => m.path), ["/workspace/gr/a.py", "/workspace/gr/sub/c.py"]);
    r = await real.grep(".*'", "/workspace/gr", "sub/*.py");
    assert.deepEqual(r.matches.map((m) => m.path), ["/workspace/gr/sub/c.py"]);
    r = await real.grep("x", "/workspace/gr", null, 2);
    assert.equal(r.matches.length, 2);
    assert.equal(r.truncated, true);
    assert.deepEqual(await real.grep("x", "/workspace/no-such-dir"), { matches: [] });
  });

  test("glob: files only, with sizes, under the root", async () => {
    await sb.files.write("/workspace/r/g/one.py", "1\n");
    await sb.files.write("/workspace/r/g/two/three.py", "333\n");
    await sb.files.mkdir("/workspace/r/g/dir.py");
    const r = await rooted.glob("**/*.py", "/g");
    assert.deepEqual(r.files.map((f) => [f.path, f.is_dir, f.size]), [["/g/one.py", false, 2], ["/g/two/three.py", false, 4]]);
    assert.ok(r.files.every((f) => !Number.isNaN(Date.parse(f.modified_at))));
    assert.deepEqual((await rooted.glob("/g/*.py")).files.map((f) => f.path), ["/g/one.py"]);
    assert.deepEqual(await rooted.glob("*.py", "/missing"), { files: [] });
  });

  test("uploadFiles and downloadFiles, each answer on its own", async () => {
    const bytes = allBytes();
    const up = await real.uploadFiles([
      ["/workspace/ud/a.bin", bytes],
      ["/workspace/ud", new Uint8Array([1])],
      ["/workspace/ud/b.txt", new TextEncoder().encode("bee\n")],
    ]);
    assert.deepEqual(up, [
      { path: "/workspace/ud/a.bin", error: null },
      { path: "/workspace/ud", error: "is_directory" },
      { path: "/workspace/ud/b.txt", error: null },
    ]);
    const down = await real.downloadFiles(["/workspace/ud/a.bin", "/workspace/ud/none", "/workspace/ud", "/workspace/ud/b.txt"]);
    assert.equal(sha256(down[0].content), sha256(bytes));
    assert.deepEqual(down.slice(1).map((d) => [d.path, d.error]), [
      ["/workspace/ud/none", "file_not_found"],
      ["/workspace/ud", "is_directory"],
      ["/workspace/ud/b.txt", null],
    ]);
    assert.equal(new TextDecoder().decode(down[3].content), "bee\n");
  });

  test("delete: a file, a tree, a missing path, and the root's contents", async () => {
    await sb.files.write("/workspace/r/del/a/b.txt", "x");
    assert.deepEqual(await rooted.delete("/del"), { path: "/del", filesUpdate: null });
    assert.equal(await sb.files.exists("/workspace/r/del"), false);
    assert.deepEqual(await rooted.delete("/del"), { error: "Error: '/del' not found" });
    assert.deepEqual(await rooted.delete("/"), { path: "/", filesUpdate: null });
    assert.deepEqual(await sb.files.list("/workspace/r"), []);
    assert.equal(await sb.files.exists("/workspace/r"), true);
  });

  test("execute: output in order, capped; exit codes, a timeout's 124", async () => {
    let r = await real.execute("echo out; echo err >&2; echo out2");
    // Both streams, each in its order; how the two interleave is the pipes' affair.
    assert.deepEqual([r.exitCode, r.truncated], [0, false]);
    assert.deepEqual(r.output.split("\n").sort(), ["", "err", "out", "out2"]);
    assert.ok(r.output.indexOf("out\n") < r.output.indexOf("out2\n"), r.output);
    r = await real.execute("head -c 5000 /dev/zero | tr '\\0' a; exit 7");
    assert.deepEqual(r, { output: "a".repeat(1000), exitCode: 7, truncated: true });
    r = await rooted.execute("pwd; sleep 30");
    assert.equal(r.exitCode, 124);
    assert.equal(r.output, "/workspace/r\n");
  });
});
