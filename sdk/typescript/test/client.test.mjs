// The client, its errors, and the sandbox lifecycle: create with every
// option, get, list by label, update, delete, idempotent create.

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { describe, test } from "node:test";
import { DEFAULT_URL, Sandbox, Sbx, SbxError } from "@sbx/sdk";
import { client, rejectsWith, sandbox } from "./helpers.mjs";

describe("client", () => {
  test("health reports an available primary backend, with no key", async () => {
    const h = await new Sbx({ url: process.env.SBX_URL, apiKey: "" }).health();
    assert.equal(h.status, "ok");
    const primary = h.backends.find((b) => b.primary);
    assert.ok(primary, JSON.stringify(h));
    assert.equal(primary.available, true);
    assert.equal(typeof primary.layers, "object");
    assert.ok(Array.isArray(primary.reasons));
  });

  test("the address and key come from SBX_URL and SBX_API_KEY", async () => {
    const sbx = client();
    assert.equal(sbx.url, process.env.SBX_URL.replace(/\/+$/, ""));
    assert.ok(Array.isArray(await sbx.sandboxes.list())); // the key was sent: this needs one
  });

  test("a unix: address is refused, naming why", () => {
    assert.throws(
      () => new Sbx({ url: "unix:/var/lib/sbx/sbx.sock", apiKey: "x" }),
      (err) => err instanceof SbxError && err.code === "invalid_argument" && /TCP only/.test(err.message),
    );
    assert.equal(DEFAULT_URL, "http://127.0.0.1:7070");
  });

  test("a daemon that does not answer is unavailable, status 0, saying where", async () => {
    // Port 1 on loopback: nothing listens there, the connection is refused.
    const err = await rejectsWith(new Sbx({ url: "http://127.0.0.1:1", apiKey: "k" }).sandboxes.list(), "unavailable");
    assert.equal(err.status, 0);
    assert.match(err.message, /cannot reach the sbx daemon at http:\/\/127\.0\.0\.1:1/);
    assert.match(err.message, /SBX_URL/);
  });

  test("a wrong key is unauthenticated (401)", async () => {
    const err = await rejectsWith(new Sbx({ url: process.env.SBX_URL, apiKey: "sbx_not_a_key" }).sandboxes.list(), "unauthenticated");
    assert.equal(err.status, 401);
  });

  test("an unknown sandbox is not_found, naming its id", async () => {
    const sbx = client();
    const id = "abcdefghijklmnopqrstuvwxyz";
    for (const call of [() => sbx.sandboxes.get(id), () => sbx.sandbox(id).exec("true"), () => sbx.sandbox(id).files.stat("/")]) {
      const err = await rejectsWith(call(), "not_found");
      assert.equal(err.status, 404);
      assert.equal(err.sandboxId, id);
      assert.match(err.message, new RegExp(id));
      assert.ok(err.requestId, "the daemon's request id");
    }
  });

  test("bad input is invalid_argument, naming the field", async () => {
    const sbx = client();
    let err = await rejectsWith(sbx.sandboxes.create({ memoryMb: -1 }), "invalid_argument");
    assert.equal(err.status, 400);
    assert.equal(err.op, "create");
    assert.match(err.message, /memory_mb/);
    assert.match(err.detail, /^memory_mb: /);

    err = await rejectsWith(sbx.sandboxes.create({ labels: { "": "x" } }), "invalid_argument");
    assert.match(err.message, /label/);
  });

  test("an error answer without the API's body still has a code, and Retry-After is kept", async () => {
    const answers = [
      new Response(JSON.stringify({ error: { code: "resource_exhausted", message: "create: limit exceeded: 3 creates a second" } }), {
        status: 429,
        headers: { "Retry-After": "7", "Content-Type": "application/json" },
      }),
      new Response("<html>bad gateway</html>\n", { status: 502 }),
    ];
    const sbx = new Sbx({ url: "http://sbx.invalid", apiKey: "k", fetch: async () => answers.shift() });
    let err = await rejectsWith(sbx.sandboxes.create(), "resource_exhausted");
    assert.equal(err.status, 429);
    assert.equal(err.retryAfter, 7);
    err = await rejectsWith(sbx.sandboxes.create(), "unavailable");
    assert.equal(err.status, 502);
    assert.match(err.message, /HTTP 502: <html>bad gateway<\/html>/);
  });

  test("a download shorter than announced errors the stream", async () => {
    const body = new ReadableStream({
      start(c) {
        c.enqueue(new Uint8Array([1, 2, 3]));
        c.close();
      },
    });
    const sbx = new Sbx({
      url: "http://sbx.invalid",
      apiKey: "k",
      fetch: async () => new Response(body, { status: 200, headers: { "Content-Length": "10" } }),
    });
    const stream = await sbx.sandbox("abcdefghijklmnopqrstuvwxyz").files.download("/f");
    const err = await rejectsWith(new Response(stream).arrayBuffer(), "unavailable");
    assert.match(err.message, /after 3 of 10 bytes/);
  });
});

describe("sandboxes", () => {
  test("create takes every option; get, list by label, update and delete", async (t) => {
    const sbx = client();
    const tag = randomUUID();
    const sb = await sandbox(t, {
      template: "host",
      ttlSeconds: 600,
      memoryMb: 256,
      cpus: 0.5,
      pids: 128,
      diskMb: 512,
      network: "none",
      labels: { run: tag, role: "lifecycle" },
      env: { GREETING: "hello from env" },
    });
    assert.ok(sb instanceof Sandbox);
    assert.match(sb.id, /^[a-z2-7]{26}$/);
    const info = sb.info;
    assert.equal(info.state, "running");
    assert.equal(info.template, "host");
    assert.deepEqual(info.limits, { memoryMb: 256, cpus: 0.5, pids: 128, diskMb: 512, ttlSeconds: 600 });
    assert.equal(info.network.mode, "none");
    assert.deepEqual(info.labels, { run: tag, role: "lifecycle" });
    assert.ok(info.createdAt instanceof Date && info.expiresAt > info.createdAt);
    assert.equal(info.isolation.sandbox, true);
    assert.deepEqual(info.publicPorts, []);

    // The environment is every process's.
    const r = await sb.exec("echo $GREETING");
    assert.equal(r.exitCode, 0, r.stderr);
    assert.equal(r.stdout, "hello from env\n");

    const got = await sbx.sandboxes.get(sb.id);
    assert.equal(got.id, sb.id);
    assert.deepEqual(got.info.labels, info.labels);

    const listed = await sbx.sandboxes.list({ labels: { run: tag } });
    assert.deepEqual(listed.map((s) => s.id), [sb.id]);
    assert.deepEqual(await sbx.sandboxes.list({ labels: { run: tag, role: "other" } }), []);

    const before = info.expiresAt;
    const updated = await sb.update({ ttlSeconds: 1800, labels: { run: tag, role: "relabelled" } });
    assert.ok(updated.expiresAt > before, `${updated.expiresAt} after ${before}`);
    assert.deepEqual(updated.labels, { run: tag, role: "relabelled" });
    assert.deepEqual(sb.info, updated);
    assert.deepEqual((await sbx.sandboxes.list({ labels: { role: "relabelled", run: tag } })).map((s) => s.id), [sb.id]);

    const handle = sbx.sandbox(sb.id);
    assert.equal(handle.info, undefined);
    assert.equal((await handle.refresh()).id, sb.id);

    await sb.delete();
    const err = await rejectsWith(sbx.sandboxes.get(sb.id), "not_found");
    assert.equal(err.sandboxId, sb.id);
  });

  test("an idempotency key returns the first sandbox, and refuses another body", async (t) => {
    const sbx = client();
    const key = randomUUID();
    const a = await sandbox(t, { idempotencyKey: key, labels: { "sbx.test": "ts-sdk", idem: "1" } });
    const b = await sbx.sandboxes.create({ ttlSeconds: 900, idempotencyKey: key, labels: { "sbx.test": "ts-sdk", idem: "1" } });
    assert.equal(b.id, a.id);
    const err = await rejectsWith(
      sbx.sandboxes.create({ ttlSeconds: 900, idempotencyKey: key, labels: { "sbx.test": "ts-sdk", idem: "2" } }),
      "already_exists",
    );
    assert.match(err.message, new RegExp(key));
  });
});
