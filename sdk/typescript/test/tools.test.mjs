// Agent tools (listed, called by name, typed helpers), API keys and their
// capabilities, secrets, network tiers, preview URLs and the audit log.

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, before, describe, test } from "node:test";
import { Sbx } from "@sbx/sdk";
import { client, newSandbox, rejectsWith, remove, sandbox, until } from "./helpers.mjs";

describe("tools", () => {
  let sb;
  before(async () => {
    sb = await newSandbox();
  });
  after(() => remove(sb));

  test("listTools gives each tool's capability and schemas", async () => {
    const tools = await client().listTools();
    const byName = new Map(tools.map((t) => [t.name, t]));
    for (const name of ["repl_execute", "edit_file", "read_file", "write_file", "ls", "glob", "grep", "sandbox_bash"]) {
      assert.ok(byName.has(name), `${name} is listed`);
    }
    const edit = byName.get("edit_file");
    assert.equal(edit.capability, "tools.files");
    assert.equal(edit.inputSchema.type, "object");
    assert.deepEqual(edit.inputSchema.required, ["file_path", "old_string", "new_string"]);
    assert.ok(edit.outputSchema.properties.strategy);
    assert.match(edit.description, /old_string/);
  });

  test("repl_execute keeps its session between calls", async () => {
    let r = await sb.tools.replExecute({ code: "x = 21\nimport math" });
    assert.equal(r.error, undefined, JSON.stringify(r));
    r = await sb.tools.replExecute({ code: "print('side'); x * 2" });
    assert.equal(r.value, "42");
    assert.equal(r.stdout, "side\n");
    r = await sb.tools.replExecute({ code: "1/0" });
    assert.equal(r.error.name, "ZeroDivisionError");
    r = await sb.tools.replExecute({ code: "x", restart: true });
    assert.equal(r.error.name, "NameError");
  });

  test("edit_file, write_file, read_file, ls, glob, grep and sandbox_bash, typed", async () => {
    const w = await sb.tools.writeFile({ file_path: "t/app.py", content: "def f():\n    return 1\n" });
    assert.deepEqual(w, { file_path: "/workspace/t/app.py", bytes: 22 });
    await rejectsWith(sb.tools.writeFile({ file_path: "t/app.py", content: "again" }), "already_exists");

    const e = await sb.tools.editFile({ file_path: "t/app.py", old_string: "return 1", new_string: "return 2" });
    assert.equal(e.replacements, 1);
    assert.equal(e.strategy, "exact");
    assert.equal(e.start_line, 2);
    assert.equal(await sb.files.readText("t/app.py"), "def f():\n    return 2\n");

    const rf = await sb.tools.readFile({ file_path: "t/app.py" });
    assert.match(rf.content, /^\s*1\tdef f\(\):\n\s*2\t    return 2/);
    assert.equal(rf.eof, true);

    const ls = await sb.tools.ls({ path: "t" });
    assert.deepEqual(ls.entries.map((x) => [x.path, x.is_dir]), [["/workspace/t/app.py", false]]);
    assert.deepEqual((await sb.tools.glob({ pattern: "**/*.py", path: "t" })).paths, ["/workspace/t/app.py"]);
    const g = await sb.tools.grep({ pattern: "return", path: "t", output_mode: "content" });
    assert.deepEqual(g.matches, [{ path: "/workspace/t/app.py", line: 2, text: "    return 2" }]);

    const b = await sb.tools.bash({ command: "echo made > t/out.txt; echo hi" });
    assert.equal(b.exit_code, 0);
    assert.equal(b.stdout, "hi\n");
    assert.ok(b.files.includes("/workspace/t/out.txt"), JSON.stringify(b.files));

    const generic = await sb.tools.call("sandbox.exec", { runtime: "python3", code: "print(6*7)" });
    assert.equal(generic.stdout, "42\n");
  });

  test("an unknown tool or parameter is refused, naming it", async () => {
    let err = await rejectsWith(sb.tools.call("no_such_tool", {}), "not_found");
    assert.match(err.message, /no_such_tool/);
    err = await rejectsWith(sb.tools.call("ls", { bogus: 1 }), "invalid_argument");
    assert.match(err.message, /bogus/);
  });
});

describe("keys", () => {
  test("the admin key makes keys whose capabilities and sandboxes are their own, and revokes them", async (t) => {
    const admin = client();
    const adminBox = await sandbox(t);
    const key = await admin.keys.create({ name: `files-only-${randomUUID().slice(0, 8)}`, capabilities: ["tools.files"] });
    assert.match(key.secret, /^sbx_/);
    assert.deepEqual(key.capabilities, ["tools.files"]);
    assert.ok((await admin.keys.list()).some((k) => k.id === key.id && k.secret === undefined));

    const limited = new Sbx({ url: process.env.SBX_URL, apiKey: key.secret });
    const own = await limited.sandboxes.create({ ttlSeconds: 300 });
    t.after(() => remove(admin.sandbox(own.id))); // the admin key sees every key's
    await own.files.write("mine.txt", "ok"); // tools.files
    const err = await rejectsWith(own.exec("true"), "permission_denied"); // needs sandbox.exec
    assert.match(err.message, /sandbox\.exec/);
    assert.deepEqual((await limited.sandboxes.list()).map((s) => s.id), [own.id]);
    await rejectsWith(limited.sandboxes.get(adminBox.id), "not_found"); // another key's, as if unknown

    await admin.keys.revoke(key.id);
    await rejectsWith(limited.sandboxes.list(), "unauthenticated");
    assert.ok((await admin.keys.list()).find((k) => k.id === key.id).revokedAt instanceof Date);
  });

  test("a key that is not the admin key may not make keys", async (t) => {
    const admin = client();
    const key = await admin.keys.create({ name: `plain-${randomUUID().slice(0, 8)}` });
    t.after(() => admin.keys.revoke(key.id));
    await rejectsWith(new Sbx({ url: process.env.SBX_URL, apiKey: key.secret }).keys.list(), "permission_denied");
    const err = await rejectsWith(admin.keys.create({ name: "" }), "invalid_argument");
    assert.match(err.message, /name/);
  });
});

describe("secrets", () => {
  test("set, replace, list, get, use by name in create and exec, delete", async (t) => {
    const sbx = client();
    const name = `tok-${randomUUID().slice(0, 8)}`;
    const first = await sbx.secrets.set({ name, value: "first-value" });
    assert.equal(first.replaced, false);
    assert.equal(first.secret.mode, "env");
    t.after(() => sbx.secrets.delete(name).catch(() => {}));
    const second = await sbx.secrets.set({ name, value: "s3cret value" });
    assert.equal(second.replaced, true);
    assert.ok((await sbx.secrets.list()).some((s) => s.name === name));
    const got = await sbx.secrets.get(name);
    assert.equal(got.name, name);
    assert.equal(JSON.stringify(got).includes("s3cret"), false, "no answer carries the value");

    const sb = await sandbox(t, { secrets: { FROM_CREATE: name } });
    const r = await sb.exec("echo \"$FROM_CREATE|$FROM_EXEC\"", { secrets: { FROM_EXEC: name } });
    assert.equal(r.stdout, "s3cret value|s3cret value\n");

    const err = await rejectsWith(sb.exec("true", { secrets: { X: "no-such-secret-name" } }), "invalid_argument");
    assert.match(err.message, /no-such-secret-name/);

    await sbx.secrets.delete(name);
    await rejectsWith(sbx.secrets.get(name), "not_found");
  });
});

describe("network", () => {
  // TestSDKTypeScript's daemon offers every tier (SBX_TEST_NETWORK=1); one
  // with the default policy offers `none` only, and says so.
  const tiers = process.env.SBX_TEST_NETWORK === "1";

  test("tiers and lists on create and on a running sandbox; events", async (t) => {
    if (!tiers) {
      const err = await rejectsWith(client().sandboxes.create({ network: "allowlist" }), "invalid_argument");
      assert.match(err.message, /network\.mode/);
      return;
    }
    const sb = await sandbox(t, { network: { mode: "allowlist", allow: ["example.com", "*.example.org"], block: ["evil.example"] } });
    assert.deepEqual(sb.info.network, { mode: "allowlist", allow: ["example.com", "*.example.org"], block: ["evil.example"] });
    let info = await sb.setNetwork({ mode: "full", block: ["evil.example"] });
    assert.equal(info.network.mode, "full");
    assert.deepEqual(info.network.block, ["evil.example"]);
    info = await sb.setNetwork("none");
    assert.equal(info.network.mode, "none");
    assert.equal((await sb.refresh()).network.mode, "none");
    const ev = await sb.networkEvents();
    assert.equal(typeof ev.allowed, "number");
    assert.equal(typeof ev.refused, "number");
    assert.ok(Array.isArray(ev.events));
    const err = await rejectsWith(sb.setNetwork({ mode: "allowlist", allow: ["not a name!"] }), "invalid_argument");
    assert.match(err.message, /allow/);
  });
});

describe("preview and audit", () => {
  test("a server in the sandbox is reached by its preview URL, with the token or public", async (t) => {
    const sb = await sandbox(t);
    await sb.files.write("site/index.html", "<h1>from the sandbox</h1>\n");
    const server = await sb.spawn(["python3", "-m", "http.server", "8000", "--directory", "/workspace/site"]);
    t.after(() => server.kill("SIGKILL").catch(() => {}));

    const p = await sb.previewUrl(8000);
    assert.equal(p.port, 8000);
    assert.equal(p.public, false);
    assert.match(p.url, new RegExp(`^http://8000-${sb.id}\\.`));
    assert.equal(p.pathUrl, `${process.env.SBX_URL.replace(/\/+$/, "")}/v1/sandboxes/${sb.id}/proxy/8000/`);
    const body = await until(async () => {
      const resp = await fetch(p.pathUrl, { headers: { "X-Sbx-Preview-Token": p.token } });
      if (resp.status !== 200) throw new Error(`preview answered ${resp.status}: ${await resp.text()}`);
      return resp.text();
    });
    assert.equal(body, "<h1>from the sandbox</h1>\n");
    assert.equal((await fetch(p.pathUrl)).status, 401);

    const pub = await sb.setPortPublic(8000, true);
    assert.equal(pub.public, true);
    assert.equal((await fetch(p.pathUrl)).status, 200);
    assert.deepEqual((await sb.refresh()).publicPorts, [8000]);
    assert.equal((await sb.setPortPublic(8000, false)).public, false);
  });

  test("the audit log records a sandbox's calls", async (t) => {
    const sb = await sandbox(t);
    await sb.exec("true");
    const since = new Date(Date.now() - 60_000);
    const records = await until(async () => {
      const rs = await client().audit({ sandboxId: sb.id, since, limit: 50 });
      if (!rs.some((r) => r.action === "exec_start")) throw new Error(`no exec_start yet: ${JSON.stringify(rs)}`);
      return rs;
    });
    assert.ok(records.every((r) => r.sandboxId === sb.id));
    assert.ok(records.some((r) => r.action === "create"));
    assert.ok(records[0].time instanceof Date);
  });
});
