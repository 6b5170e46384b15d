// Commands: run to completion, streamed (frames and NDJSON), with stdin,
// env, cwd and timeouts; and background processes: list, get, attach, wait,
// stdin, signals.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { ExecStream, Process } from "@sbx/sdk";
import { allBytes, client, newSandbox, random, rejectsWith, remove, sha256 } from "./helpers.mjs";

describe("exec", () => {
  let sb;
  before(async () => {
    sb = await newSandbox();
  });
  after(() => remove(sb));

  test("a shell command's exit code and output, a non-zero exit being a result", async () => {
    const r = await sb.exec("echo out; echo err >&2; exit 3");
    assert.equal(r.exitCode, 3);
    assert.equal(r.reason, "exited");
    assert.equal(r.stdout, "out\n");
    assert.equal(r.stderr, "err\n");
    assert.equal(r.stdoutBytes, 4);
    assert.equal(r.truncated, false);
    assert.match(r.processId, /\S/);
    assert.ok(r.pid > 0);
  });

  test("an argv runs verbatim, without a shell", async () => {
    const r = await sb.exec(["printf", "%s|", "a b", "$HOME", "*"]);
    assert.equal(r.exitCode, 0, r.stderr);
    assert.equal(r.stdout, "a b|$HOME|*|");
  });

  test("env, cwd, and stdin as text and as bytes", async () => {
    let r = await sb.exec("pwd; echo $ONE-$TWO", { cwd: "/tmp", env: { ONE: "1", TWO: "two words" } });
    assert.equal(r.stdout, "/tmp\n1-two words\n");
    r = await sb.exec("cat", { stdin: "piped text\n" });
    assert.equal(r.stdout, "piped text\n");
    const bytes = allBytes();
    r = await sb.exec("cat", { stdin: bytes });
    assert.deepEqual(r.stdoutData, bytes); // not UTF-8: carried as base64, exact
    r = await sb.exec("sha256sum", { stdin: bytes });
    assert.equal(r.stdout.split(" ")[0], sha256(bytes));
  });

  test("binary output is exact in the result", async () => {
    const r = await sb.exec("printf '\\377\\000\\001\\n'");
    assert.deepEqual([...r.stdoutData], [255, 0, 1, 10]);
    assert.equal(r.stdout, "\ufffd\u0000\u0001\n");
  });

  test("a command past its timeout is killed: exit 124, reason timeout", async () => {
    const r = await sb.exec("echo started; sleep 30; echo never", { timeoutSeconds: 1 });
    assert.equal(r.exitCode, 124);
    assert.equal(r.reason, "timeout");
    assert.equal(r.stdout, "started\n");
  });

  test("bad input is invalid_argument naming the field", async () => {
    const err = await rejectsWith(sb.exec("true", { timeoutSeconds: 99999 }), "invalid_argument");
    assert.match(err.message, /timeout/);
    assert.equal(err.sandboxId, sb.id);
  });

  test("a stream's first chunk arrives before the command ends", async () => {
    // The command prints, then waits for a file only the test makes once it
    // has read that first chunk: the chunk cannot be late, nothing is timed.
    const stream = await sb.execStream(
      "echo first; while [ ! -e /tmp/go-on ]; do sleep 0.05; done; echo second; echo done >&2",
      { timeoutSeconds: 120 },
    );
    assert.ok(stream instanceof ExecStream);
    const seen = [];
    let out = "";
    for await (const ev of stream) {
      seen.push(ev.type);
      if (ev.type === "stdout") {
        out += ev.text;
        if (out === "first\n") {
          const p = await sb.getProcess(stream.processId);
          assert.equal(p.state, "running", "the command still runs when its first chunk is here");
          await sb.files.write("/tmp/go-on", "");
        }
      }
      if (ev.type === "stderr") assert.equal(ev.text, "done\n");
      if (ev.type === "result") {
        assert.equal(ev.result.exitCode, 0);
        assert.equal(ev.result.stdout, "first\nsecond\n");
      }
    }
    assert.equal(out, "first\nsecond\n");
    assert.equal(seen[0], "started");
    assert.equal(seen.at(-1), "result");
    assert.ok(stream.pid > 0);
  });

  for (const format of ["frames", "ndjson"]) {
    test(`a ${format} stream carries binary output exactly`, async () => {
      const bytes = random(300_000);
      await sb.files.upload(`/tmp/blob-${format}`, bytes);
      // A client that notes the media type of each answer: the form asked for is the form read.
      const types = [];
      const watched = client({
        fetch: async (url, init) => {
          const resp = await fetch(url, init);
          types.push(resp.headers.get("content-type"));
          return resp;
        },
      }).sandbox(sb.id);
      const stream = await watched.execStream(["cat", `/tmp/blob-${format}`], { format });
      assert.equal(types[0], format === "frames" ? "application/vnd.sbx.frames" : "application/x-ndjson");
      const chunks = [];
      for await (const ev of stream) if (ev.type === "stdout") chunks.push(ev.data);
      const got = Buffer.concat(chunks);
      assert.equal(got.length, bytes.length);
      assert.equal(sha256(got), sha256(bytes));
    });
  }

  test("callbacks get each stream's text; exec returns the result", async () => {
    let out = "";
    let err = "";
    const events = [];
    const r = await sb.exec("echo one; echo two >&2; printf 'caf\\303'; printf '\\251\\n'", {
      onStdout: (text) => (out += text),
      onStderr: (text) => (err += text),
      onEvent: (ev) => events.push(ev.type),
    });
    assert.equal(r.exitCode, 0);
    assert.equal(out, "one\ncafé\n"); // a character split across writes comes whole
    assert.equal(err, "two\n");
    assert.equal(events[0], "started");
    assert.equal(events.at(-1), "result");
  });

  test("stopping reading leaves the command running; it finishes alone", async () => {
    const stream = await sb.execStream("echo a; while [ ! -e /tmp/release ]; do sleep 0.05; done; echo b");
    for await (const ev of stream) {
      if (ev.type === "stdout") break; // stop reading: the stream is cancelled
    }
    const id = stream.processId;
    assert.equal((await sb.getProcess(id)).state, "running");
    await sb.files.write("/tmp/release", "");
    const r = await sb.process(id).result();
    assert.equal(r.exitCode, 0);
    assert.equal(r.stdout, "a\nb\n");
  });

  test("a stream on an unknown sandbox is refused before it starts", async () => {
    const err = await rejectsWith(client().sandbox("abcdefghijklmnopqrstuvwxyz").execStream("true"), "not_found");
    assert.equal(err.sandboxId, "abcdefghijklmnopqrstuvwxyz");
  });
});

describe("processes", () => {
  let sb;
  before(async () => {
    sb = await newSandbox();
  });
  after(() => remove(sb));

  test("spawn, list, get, write stdin, close it, and the result", async () => {
    const p = await sb.spawn("cat; echo done", { keepStdinOpen: true, tag: "cat-job" });
    assert.ok(p instanceof Process);
    assert.ok(p.pid > 0);
    const listed = (await sb.listProcesses()).find((x) => x.processId === p.processId);
    assert.ok(listed, "the process is listed");
    assert.equal(listed.tag, "cat-job");
    assert.equal(listed.state, "running");
    assert.deepEqual(listed.argv, ["/bin/sh", "-c", "cat; echo done"]);
    assert.equal((await sb.getProcess(p.processId)).pid, p.pid);

    const now = await p.wait({ timeoutSeconds: 0 });
    assert.equal(now.state, "running");
    assert.equal(now.result, undefined);

    await p.writeStdin("hello ");
    await p.writeStdin(new Uint8Array([0xff, 0x0a]));
    await p.closeStdin();
    const r = await p.result();
    assert.equal(r.exitCode, 0);
    assert.deepEqual([...r.stdoutData], [...new TextEncoder().encode("hello "), 0xff, 0x0a, ...new TextEncoder().encode("done\n")]);
    const done = await p.info();
    assert.equal(done.state, "exited");
    assert.equal(done.result.exitCode, 0);
  });

  test("attach replays what was printed, then follows to the end", async () => {
    const p = await sb.spawn("echo one; while [ ! -e /tmp/attach-go ]; do sleep 0.05; done; echo two");
    await sb.files.write("/tmp/attach-go", ""); // may come before or after attach: replay covers both
    const stream = await p.output({ replay: true });
    let out = "";
    for await (const ev of stream) if (ev.type === "stdout") out += ev.text;
    assert.equal(out, "one\ntwo\n");
    const r = await stream.wait();
    assert.equal(r.exitCode, 0);
    assert.equal(r.processId, p.processId);
  });

  test("signals: SIGTERM signals, SIGKILL stops, and an exited process says so", async () => {
    const a = await sb.spawn("sleep 60");
    assert.equal(await a.kill(), "signaled");
    const ra = await a.result();
    assert.equal(ra.reason, "signaled");
    assert.equal(ra.signal, 15);
    assert.equal(ra.exitCode, 143);
    assert.equal(await a.kill("SIGTERM"), "already_exited");

    const b = await sb.spawn("sleep 60");
    assert.equal(await b.kill("SIGKILL"), "stopped");
    const rb = await b.result();
    assert.equal(rb.signal, 9);
    assert.equal(rb.exitCode, 137);
  });

  test("an unknown process is not_found", async () => {
    await rejectsWith(sb.process("p-nope").wait({ timeoutSeconds: 0 }), "not_found");
  });
});
