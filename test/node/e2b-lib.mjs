// e2b-lib.mjs holds what the E2B scenario suite (e2b-scenarios.mjs) needs
// beside the SDKs: checks that throw a Failure naming what was wrong, a poll
// for an awaited effect, sbx's own key API (to make the second app's key),
// the child "apps" (e2b-app.mjs) and the runner that prints one line per
// scenario.

import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import path from "node:path";

// Failure is a check that did not hold: the runner prints its message alone.
export class Failure extends Error {}

// show renders v for a failure message, cut short.
export function show(v) {
  let s;
  if (v instanceof Uint8Array) s = `Uint8Array(${v.length})`;
  else if (v instanceof Error) s = `${v.constructor.name}: ${v.message}`;
  else {
    try {
      s = JSON.stringify(v);
    } catch {
      s = String(v);
    }
    if (s === undefined) s = String(v);
  }
  return s.length > 300 ? s.slice(0, 300) + "…" : s;
}

export function ok(cond, msg) {
  if (!cond) throw new Failure(msg);
}

export function eq(got, want, what) {
  if (got !== want) throw new Failure(`${what}: got ${show(got)}, want ${show(want)}`);
}

// sorted is v with every object's keys sorted, for a comparison of JSON.
function sorted(v) {
  if (Array.isArray(v)) return v.map(sorted);
  if (v && typeof v === "object" && !(v instanceof Date)) {
    return Object.fromEntries(Object.keys(v).sort().map((k) => [k, sorted(v[k])]));
  }
  return v;
}

export function deepEq(got, want, what) {
  const g = JSON.stringify(sorted(got));
  const w = JSON.stringify(sorted(want));
  if (g !== w) throw new Failure(`${what}: got ${show(sorted(got))}, want ${show(sorted(want))}`);
}

// rejects awaits p, which must throw an instance of cls (any error when cls
// is null), and returns the error.
export async function rejects(p, cls, what) {
  try {
    await p;
  } catch (e) {
    if (e instanceof Failure) throw e;
    if (cls && !(e instanceof cls)) {
      throw new Failure(`${what}: threw ${e?.constructor?.name}: ${e?.message}, want ${cls.name}`);
    }
    return e;
  }
  throw new Failure(`${what}: did not throw${cls ? `, want ${cls.name}` : ""}`);
}

// waitFor polls cond (sync or async) until it is truthy and returns its
// value; within ms, else a Failure naming what was awaited. The bound is
// generous: it only keeps a lost effect from hanging the run.
export async function waitFor(cond, what, ms = 20000) {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await cond();
    if (v) return v;
    if (Date.now() > deadline) throw new Failure(`${what}: not seen within ${ms / 1000} s`);
    await sleep(50);
  }
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// sbxAPI calls sbx's own /v1 API at the E2B_API_URL origin with key.
export async function sbxAPI(method, p, key, body) {
  const res = await fetch(new URL(p, process.env.E2B_API_URL), {
    method,
    headers: { authorization: `Bearer ${key}`, ...(body ? { "content-type": "application/json" } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  const text = await res.text();
  let json;
  try {
    json = text ? JSON.parse(text) : undefined;
  } catch {
    json = undefined;
  }
  return { status: res.status, json, text };
}

// makeKey makes an sbx key (every capability) with the admin key and returns
// {id, secret}.
export async function makeKey(adminKey, name) {
  const r = await sbxAPI("POST", "/v1/keys", adminKey, { name });
  if (r.status !== 201 || !r.json?.secret) {
    throw new Failure(`POST /v1/keys with E2B_API_KEY (it must be sbx's admin key): ${r.status} ${r.text}`);
  }
  return { id: r.json.id, secret: r.json.secret };
}

export async function revokeKey(adminKey, id) {
  const r = await sbxAPI("DELETE", `/v1/keys/${id}`, adminKey);
  if (r.status >= 300) throw new Failure(`DELETE /v1/keys/${id}: ${r.status} ${r.text}`);
}

const appScript = path.join(path.dirname(fileURLToPath(import.meta.url)), "e2b-app.mjs");

// app runs e2b-app.mjs as another application, E2B_API_KEY set to key (and
// nothing else of E2B's changed), and returns the JSON it prints.
export function app(key, ...args) {
  return new Promise((resolve, reject) => {
    execFile(process.execPath, [appScript, ...args], { env: { ...process.env, E2B_API_KEY: key }, timeout: 120000 },
      (err, stdout, stderr) => {
        if (err) {
          reject(new Failure(`e2b-app.mjs ${args.join(" ")}: ${err.message}: ${stderr.trim().slice(0, 500)}`));
          return;
        }
        try {
          resolve(JSON.parse(stdout));
        } catch {
          reject(new Failure(`e2b-app.mjs ${args.join(" ")} printed no JSON: ${show(stdout)}`));
        }
      });
  });
}

// errorName is how a caught error is reported between processes: its
// class, or "none" when nothing was thrown.
export function errorName(e) {
  return e ? e.constructor.name : "none";
}

// runScenarios runs each {name, fn, timeoutMs} whose name matches filter,
// one at a time, each with a fresh context from newCtx (whose cleanup runs
// after it, pass or fail); prints "ok name" or "FAIL name: reason" as each
// ends, and returns the counts {passed, failed}.
export async function runScenarios(scenarios, newCtx, filter) {
  let passed = 0;
  let failed = 0;
  for (const sc of scenarios) {
    if (filter && !filter.test(sc.name)) continue;
    const ctx = newCtx(sc.name);
    let timer;
    let reason = null;
    try {
      await Promise.race([
        sc.fn(ctx),
        new Promise((_, reject) => {
          timer = setTimeout(() => reject(new Failure(`timed out after ${sc.timeoutMs / 1000} s`)), sc.timeoutMs);
        }),
      ]);
    } catch (e) {
      reason = e instanceof Failure ? e.message : `${e?.constructor?.name}: ${e?.message}\n${e?.stack ?? ""}`;
    } finally {
      clearTimeout(timer);
    }
    try {
      await ctx.cleanup();
    } catch (e) {
      reason = (reason ? reason + "; " : "") + `cleanup: ${show(e)}`;
    }
    if (reason === null) {
      passed++;
      console.log(`ok ${sc.name}`);
    } else {
      failed++;
      console.log(`FAIL ${sc.name}: ${reason}`);
    }
  }
  return { passed, failed };
}
