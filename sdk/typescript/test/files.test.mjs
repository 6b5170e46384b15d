// Files: text and bytes round-tripped exactly, stat, list, mkdir, move,
// remove, glob, grep, a ~50 MB streamed upload and download checked by
// sha256, and tar archives both ways.

import assert from "node:assert/strict";
import { createHash, randomFillSync } from "node:crypto";
import { createReadStream } from "node:fs";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { allBytes, hashStream, newSandbox, random, rejectsWith, remove, sha256, until } from "./helpers.mjs";

describe("files", () => {
  let sb;
  before(async () => {
    sb = await newSandbox();
  });
  after(() => remove(sb));

  test("text and bytes round-trip exactly", async () => {
    const text = "line one\nünïcødé ✓\n";
    const info = await sb.files.write("notes/a.txt", text);
    assert.equal(info.path, "/workspace/notes/a.txt"); // relative to the home, parents made
    assert.equal(info.type, "file");
    assert.equal(info.size, new TextEncoder().encode(text).byteLength);
    assert.equal(await sb.files.readText("/workspace/notes/a.txt"), text);

    const bytes = allBytes();
    await sb.files.write("notes/all.bin", bytes);
    assert.deepEqual(await sb.files.readBytes("notes/all.bin"), bytes);
    // The sandbox sees the same bytes.
    const r = await sb.exec("sha256sum notes/all.bin");
    assert.equal(r.stdout.split(" ")[0], sha256(bytes));

    await sb.files.write("notes/a.txt", "more\n", { append: true });
    assert.equal(await sb.files.readText("notes/a.txt"), text + "more\n");
  });

  test("read pages through a file by byte offset", async () => {
    const bytes = allBytes();
    await sb.files.write("/tmp/paged.bin", bytes);
    const first = await sb.files.read("/tmp/paged.bin", { limit: 100 });
    assert.equal(first.size, 512);
    assert.equal(first.offset, 0);
    assert.equal(first.eof, false);
    assert.deepEqual(first.data, bytes.subarray(0, 100));
    const last = await sb.files.read("/tmp/paged.bin", { offset: 500, limit: 100 });
    assert.deepEqual(last.data, bytes.subarray(500));
    assert.equal(last.eof, true);
    const text = await sb.files.read("notes/a.txt", { offset: 5, limit: 3 });
    assert.equal(text.text, "one");
  });

  test("write with a mode; stat, exists, and list one and two levels deep", async () => {
    const info = await sb.files.write("tree/bin/run.sh", "#!/bin/sh\necho ran\n", { mode: 0o755 });
    assert.equal(info.mode, "0755");
    assert.equal((await sb.exec("tree/bin/run.sh")).stdout, "ran\n");
    await sb.files.write("tree/readme.md", "# tree\n");

    const st = await sb.files.stat("tree");
    assert.equal(st.type, "dir");
    assert.equal(st.name, "tree");
    assert.ok(st.modifiedAt instanceof Date);
    assert.equal(await sb.files.exists("tree/readme.md"), true);
    assert.equal(await sb.files.exists("tree/nope"), false);

    const one = await sb.files.list("tree");
    assert.deepEqual(one.map((e) => [e.name, e.type]).sort(), [["bin", "dir"], ["readme.md", "file"]]);
    const two = await sb.files.list("/workspace/tree", { depth: 2 });
    assert.ok(two.some((e) => e.path === "/workspace/tree/bin/run.sh" && e.mode === "0755"), JSON.stringify(two));
  });

  test("mkdir, move and remove", async () => {
    const d = await sb.files.mkdir("m/a/b/c");
    assert.equal(d.type, "dir");
    await sb.files.write("m/a/b/c/f.txt", "x");
    await sb.files.move("m/a", "m/z");
    assert.equal(await sb.files.readText("m/z/b/c/f.txt"), "x");
    assert.equal(await sb.files.exists("m/a"), false);
    await sb.files.remove("m");
    assert.equal(await sb.files.exists("m"), false);
    await sb.files.remove("m"); // gone already: no error
  });

  test("glob and grep", async () => {
    await sb.files.write("g/src/a.py", "import os\nprint('Hello')\n");
    await sb.files.write("g/src/deep/b.py", "x = 1  # hello\n");
    await sb.files.write("g/src/c.txt", "hello (text)\n");
    const g = await sb.files.glob("**/*.py", { path: "g" });
    assert.deepEqual(g.paths, ["/workspace/g/src/a.py", "/workspace/g/src/deep/b.py"]);
    assert.equal(g.truncated, false);

    let r = await sb.files.grep("hel+o", { path: "g" });
    assert.deepEqual(r.matches.map((m) => [m.path, m.line]), [
      ["/workspace/g/src/c.txt", 1],
      ["/workspace/g/src/deep/b.py", 1],
    ]);
    r = await sb.files.grep("hello", { path: "g", ignoreCase: true, include: "*.py" });
    assert.deepEqual(r.matches.map((m) => m.text), ["print('Hello')", "x = 1  # hello"]);
    r = await sb.files.grep("(text)", { path: "g", fixed: true });
    assert.deepEqual(r.matches.map((m) => m.path), ["/workspace/g/src/c.txt"]);
    r = await sb.files.grep("l", { path: "g", limit: 1 });
    assert.equal(r.matches.length, 1);
    assert.equal(r.truncated, true);
  });

  test("errors name the path", async () => {
    let err = await rejectsWith(sb.files.stat("no/such/file"), "not_found");
    assert.match(err.message, /no\/such\/file/);
    assert.equal(err.sandboxId, sb.id);
    err = await rejectsWith(sb.files.list("notes/a.txt"), "invalid_argument");
    assert.match(err.message, /not a directory/);
    err = await rejectsWith(sb.files.grep("(", { path: "g" }), "invalid_argument");
    assert.match(err.message, /pattern/);
    await rejectsWith(sb.files.readBytes("no/such/file"), "not_found");
  });

  test("a ~50 MB upload streamed from an async iterable, and its download, match by sha256", async () => {
    const chunks = 50;
    const chunk = 1 << 20;
    const local = createHash("sha256");
    let produced = 0;
    async function* source() {
      for (let i = 0; i < chunks; i++) {
        const b = new Uint8Array(chunk);
        randomFillSync(b);
        local.update(b);
        produced += b.byteLength;
        yield b;
      }
    }
    const info = await sb.files.upload("/tmp/big.bin", source(), { mode: 0o600 });
    const want = local.digest("hex");
    assert.equal(produced, chunks * chunk);
    assert.equal(info.size, chunks * chunk);
    assert.equal(info.mode, "0600");

    const inSandbox = await sb.exec("sha256sum /tmp/big.bin");
    assert.equal(inSandbox.stdout.split(" ")[0], want);

    const stream = await sb.files.download("/tmp/big.bin");
    assert.ok(stream instanceof ReadableStream);
    const got = await hashStream(stream);
    assert.equal(got.length, chunks * chunk);
    assert.equal(got.sha256, want);
  });

  test("an upload is sent as its source is read, not gathered first", async () => {
    // Before the source gives its last chunk, the sandbox already holds the
    // first ones in the upload's partial file: the body was never held whole.
    let partial = 0;
    async function* source() {
      for (let i = 0; i < 8; i++) {
        if (i === 7) {
          partial = await until(async () => {
            const r = await sb.exec("cat /tmp/.streamed.bin.sbx-upload-* 2>/dev/null | wc -c");
            const n = Number(r.stdout.trim());
            if (!(n > 0)) throw new Error(`no partial upload in the sandbox yet (${r.stdout.trim()} bytes)`);
            return n;
          });
        }
        yield new Uint8Array(1 << 20).fill(i);
      }
    }
    const info = await sb.files.upload("/tmp/streamed.bin", source());
    assert.ok(partial > 0 && partial <= 7 << 20, `${partial} bytes arrived before the last chunk was made`);
    assert.equal(info.size, 8 << 20);
  });

  test("upload takes a ReadableStream, a Node stream, a Blob and text", async () => {
    const bytes = random(200_000);
    const web = new ReadableStream({
      start(c) {
        c.enqueue(bytes.subarray(0, 70_000));
        c.enqueue(bytes.subarray(70_000));
        c.close();
      },
    });
    await sb.files.upload("up/web.bin", web);
    assert.equal(sha256(await sb.files.readBytes("up/web.bin")), sha256(bytes));

    const dir = await mkdtemp(join(tmpdir(), "sbx-sdk-"));
    try {
      await writeFile(join(dir, "f.bin"), bytes);
      await sb.files.upload("up/node.bin", createReadStream(join(dir, "f.bin"), { highWaterMark: 16 << 10 }));
    } finally {
      await rm(dir, { recursive: true });
    }
    assert.equal(sha256(await sb.files.readBytes("up/node.bin")), sha256(bytes));

    await sb.files.upload("up/blob.bin", new Blob([bytes]));
    assert.equal(sha256(await sb.files.readBytes("up/blob.bin")), sha256(bytes));
    await sb.files.upload("up/text.txt", "plain text");
    assert.equal(await sb.files.readText("up/text.txt"), "plain text");
  });

  for (const gzip of [false, true]) {
    test(`a directory goes out and back in as a tar archive${gzip ? " (gzip)" : ""}`, async () => {
      const src = `arch-src-${gzip}`;
      const files = { "a.txt": new TextEncoder().encode("alpha\n"), "sub/deeper/b.bin": allBytes(), "sub/c.py": random(10_000) };
      for (const [name, data] of Object.entries(files)) await sb.files.write(`${src}/${name}`, data);
      const tar = await sb.files.downloadArchive(src, { gzip });
      const res = await sb.files.uploadArchive(`arch-dst-${gzip}`, tar);
      assert.equal(res.path, `/workspace/arch-dst-${gzip}`);
      assert.equal(res.bytes, Object.values(files).reduce((n, b) => n + b.byteLength, 0));
      assert.ok(res.entries >= 3, `${res.entries} entries`);
      assert.equal(res.skippedCount, 0);
      for (const [name, data] of Object.entries(files)) {
        assert.deepEqual(await sb.files.readBytes(`arch-dst-${gzip}/${name}`), data, name);
      }
    });
  }

  test("a refused archive is invalid_argument", async () => {
    await rejectsWith(sb.files.uploadArchive("arch-bad", new TextEncoder().encode("this is not a tar archive at all ".repeat(40))), "invalid_argument");
  });
});
