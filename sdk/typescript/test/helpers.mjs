// Shared by the tests: the daemon they run against (SBX_URL, SBX_API_KEY),
// sandboxes that are deleted after the test that made them, and byte helpers.

import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { Sbx, SbxError } from "@sbx/sdk";

/** client returns a client of the daemon under test; both variables are required. */
export function client(opts = {}) {
  for (const v of ["SBX_URL", "SBX_API_KEY"]) {
    if (!process.env[v]) throw new Error(`${v} is not set: the tests run against a running sbx daemon (test/e2e TestSDKTypeScript sets it)`);
  }
  return new Sbx(opts);
}

/** newSandbox creates a sandbox for the tests; remove() deletes it. */
export async function newSandbox(opts = {}) {
  return client().sandboxes.create({ ttlSeconds: 900, labels: { "sbx.test": "ts-sdk" }, ...opts });
}

/** remove deletes a sandbox, unless it is gone already. */
export async function remove(sb) {
  await sb?.delete().catch((err) => {
    if (!(err instanceof SbxError && err.code === "not_found")) throw err;
  });
}

/** sandbox creates a sandbox that is deleted when the test t ends. */
export async function sandbox(t, opts = {}) {
  const sb = await newSandbox(opts);
  t.after(() => remove(sb));
  return sb;
}

/** rejects asserts that promise rejects with an SbxError of code, and returns it. */
export async function rejectsWith(promise, code) {
  let err;
  try {
    await promise;
  } catch (e) {
    err = e;
  }
  assert.ok(err, `expected an SbxError ${code}, got success`);
  assert.ok(err instanceof SbxError, `expected an SbxError ${code}, got ${err?.stack ?? err}`);
  assert.equal(err.code, code, `code of: ${err.message}`);
  return err;
}

/** sha256 is the hex digest of bytes. */
export function sha256(bytes) {
  return createHash("sha256").update(bytes).digest("hex");
}

/** hashStream reads a web ReadableStream to its end and returns its digest and length. */
export async function hashStream(stream) {
  const h = createHash("sha256");
  let n = 0;
  for await (const chunk of stream) {
    h.update(chunk);
    n += chunk.byteLength;
  }
  return { sha256: h.digest("hex"), length: n };
}

/** allBytes is every byte value, twice, a NUL and invalid UTF-8 among them. */
export function allBytes() {
  const b = new Uint8Array(512);
  for (let i = 0; i < b.length; i++) b[i] = i % 256;
  return b;
}

/** random is n random bytes. */
export function random(n) {
  return new Uint8Array(randomBytes(n));
}

/** until retries fn (which throws until ready) up to tries times, a pause between. */
export async function until(fn, { tries = 100, pauseMs = 100 } = {}) {
  let last;
  for (let i = 0; i < tries; i++) {
    try {
      return await fn();
    } catch (err) {
      last = err;
      await new Promise((r) => setTimeout(r, pauseMs));
    }
  }
  throw last;
}
