// e2b-scenarios.mjs drives sbx's E2B API with E2B's official JavaScript SDKs,
// unchanged (e2b and @e2b/code-interpreter, pinned in package.json), as an
// application written for E2B would: configured by the environment only.
//
//   E2B_API_URL=http://127.0.0.1:PORT E2B_SANDBOX_URL=http://127.0.0.1:PORT \
//   E2B_API_KEY=<sbx's admin key> node e2b-scenarios.mjs [regexp]
//
// Each scenario is a named async function with its own checks; the run prints
// "ok <name>" or "FAIL <name>: <reason>" as each ends, then "N passed, M
// failed", and exits 1 when one failed (2 when it could not run at all). A
// regexp argument (or E2B_SCENARIOS) runs only the scenarios it matches.
// E2B_API_KEY must be sbx's admin key: the keys scenarios make two more keys
// with it (and revoke them). Every sandbox a scenario makes is killed when it
// ends; the last line before the summary's is a sweep of what is left.
//
// The code interpreter's scenarios (names "ci.…") drive port 49999, which the
// daemon serves over its Python REPL.

import { createHash, randomBytes } from "node:crypto";
import {
  AuthenticationError,
  CommandExitError,
  FileNotFoundError,
  InvalidArgumentError,
  NotFoundError,
  Sandbox,
  SandboxError,
  SandboxNotFoundError,
  TimeoutError,
} from "e2b";
import { Sandbox as CI } from "@e2b/code-interpreter";
import {
  Failure,
  app,
  deepEq,
  eq,
  makeKey,
  ok,
  rejects,
  revokeKey,
  runScenarios,
  sbxAPI,
  show,
  sleep,
  waitFor,
} from "./e2b-lib.mjs";

for (const v of ["E2B_API_URL", "E2B_SANDBOX_URL", "E2B_API_KEY"]) {
  if (!process.env[v]) {
    console.error(`e2b-scenarios.mjs: ${v} is not set (see the comment at the top)`);
    process.exit(2);
  }
}
if ((process.env.E2B_DEBUG ?? "").toLowerCase() === "true") {
  console.error("e2b-scenarios.mjs: E2B_DEBUG=true makes the SDK fake every sandbox: unset it");
  process.exit(2);
}
const ADMIN = process.env.E2B_API_KEY;
// RUN tags every sandbox of this run (metadata suite=RUN), for the sweep.
const RUN = `scen${Date.now().toString(36)}`;
const enc = new TextEncoder();
const dec = new TextDecoder();
const MiB = 1 << 20;

// Ctx is one scenario's: the sandboxes it made, killed when it ends.
class Ctx {
  constructor(name) {
    this.name = name;
    this.ids = [];
  }
  // sandbox creates a sandbox (cls: Sandbox or the code interpreter's),
  // tagged with the run and scenario on top of opts.metadata.
  async sandbox(opts = {}, cls = Sandbox) {
    const s = await cls.create({
      timeoutMs: 300_000,
      ...opts,
      metadata: { suite: RUN, scenario: this.name, ...opts.metadata },
    });
    this.ids.push(s.sandboxId);
    return s;
  }
  adopt(id) {
    this.ids.push(id);
  }
  async cleanup() {
    for (const id of this.ids) await Sandbox.kill(id);
    this.ids = [];
  }
}

const scenarios = [];
function scenario(name, fn, timeoutMs = 120_000) {
  scenarios.push({ name, fn, timeoutMs });
}

// sh runs cmd in s and returns its stdout, trimmed.
async function sh(s, cmd, opts) {
  return (await s.commands.run(cmd, opts)).stdout.trim();
}

const sha256 = (b) => createHash("sha256").update(b).digest("hex");

// ---------------------------------------------------------------- lifecycle

scenario("lifecycle.create_info", async (t) => {
  const before = Date.now();
  const s = await t.sandbox({ metadata: { owner: "scenarios", "with space": "a b&c=d%" }, envs: { GREETING: "hi" }, timeoutMs: 120_000 });
  ok(/^[a-z0-9]+$/.test(s.sandboxId), `sandboxId ${s.sandboxId} is not in E2B's alphabet [a-z0-9]`);
  const info = await s.getInfo();
  eq(info.sandboxId, s.sandboxId, "getInfo().sandboxId");
  eq(info.templateId, "base", "getInfo().templateId");
  deepEq(info.metadata, { suite: RUN, scenario: t.name, owner: "scenarios", "with space": "a b&c=d%" }, "getInfo().metadata");
  eq(info.state, "running", "getInfo().state");
  ok(info.startedAt instanceof Date && !isNaN(info.startedAt), `startedAt ${info.startedAt}`);
  ok(info.startedAt.getTime() >= before - 5000 && info.startedAt.getTime() <= Date.now() + 5000,
    `startedAt ${info.startedAt.toISOString()} is not around the create (${new Date(before).toISOString()})`);
  const ttl = info.endAt.getTime() - info.startedAt.getTime();
  ok(Math.abs(ttl - 120_000) < 5000, `endAt - startedAt = ${ttl} ms, want 120 s (timeoutMs 120000)`);
  ok(typeof info.envdVersion === "string" && /^\d+\.\d+\.\d+$/.test(info.envdVersion), `envdVersion ${info.envdVersion}`);
  ok(info.cpuCount >= 1 && info.memoryMB > 0, `cpuCount ${info.cpuCount}, memoryMB ${info.memoryMB}`);
  eq(await sh(s, "echo $GREETING"), "hi", "the sandbox's envs in a command");
  eq(await s.isRunning(), true, "isRunning()");
});

scenario("lifecycle.list", async (t) => {
  const group = `g${Math.random().toString(36).slice(2, 8)}`;
  const made = [];
  for (let i = 0; i < 3; i++) made.push((await t.sandbox({ metadata: { group, odd: "k y=%&" } })).sandboxId);
  const stranger = await t.sandbox({ metadata: { group: `${group}x` } });

  const all = async (opts) => {
    const p = Sandbox.list(opts);
    const ids = [];
    let pages = 0;
    while (p.hasNext) {
      ids.push(...(await p.nextItems()).map((s) => s.sandboxId));
      if (++pages > 50) throw new Failure("list: over 50 pages");
    }
    return { ids, pages };
  };
  const byGroup = await all({ query: { metadata: { group } } });
  deepEq(byGroup.ids.slice().sort(), made.slice().sort(), "list(metadata {group}) ids");
  ok(!byGroup.ids.includes(stranger.sandboxId), "a sandbox of another group listed");
  // The metadata filter survives the SDK's three layers of encoding.
  const byOdd = await all({ query: { metadata: { group, odd: "k y=%&" } } });
  deepEq(byOdd.ids.slice().sort(), made.slice().sort(), "list(metadata {group, odd: 'k y=%&'}) ids");
  const none = await all({ query: { metadata: { group, odd: "k y" } } });
  deepEq(none.ids, [], "list(metadata with a value no sandbox has)");

  const running = await all({ query: { metadata: { group }, state: ["running"] } });
  deepEq(running.ids.slice().sort(), made.slice().sort(), "list(state running)");
  const paused = await all({ query: { metadata: { group }, state: ["paused"] } });
  deepEq(paused.ids, [], "list(state paused)");
  const both = await all({ query: { metadata: { group }, state: ["running", "paused"] } });
  eq(both.ids.length, 3, "list(state running,paused) count");

  // Pagination: limit 2 over three sandboxes is two pages, no repeats.
  const p = Sandbox.list({ query: { metadata: { group } }, limit: 2 });
  const first = await p.nextItems();
  eq(first.length, 2, "page 1 length (limit 2)");
  eq(p.hasNext, true, "hasNext after page 1");
  ok(typeof p.nextToken === "string" && p.nextToken.length > 0, `nextToken after page 1: ${show(p.nextToken)}`);
  const second = await p.nextItems();
  eq(second.length, 1, "page 2 length");
  eq(p.hasNext, false, "hasNext after page 2");
  deepEq([...first, ...second].map((s) => s.sandboxId).sort(), made.slice().sort(), "the two pages together");
  // A new paginator given page 1's token goes on from there.
  const resumed = Sandbox.list({ query: { metadata: { group } }, limit: 2, nextToken: (await (async () => {
    const q = Sandbox.list({ query: { metadata: { group } }, limit: 2 });
    await q.nextItems();
    return q.nextToken;
  })()) });
  deepEq((await resumed.nextItems()).map((s) => s.sandboxId), second.map((s) => s.sandboxId), "a page from a saved nextToken");
  const listed = first[0];
  eq(listed.state, "running", "listed state");
  eq(listed.templateId, "base", "listed templateId");
  deepEq(listed.metadata, { suite: RUN, scenario: t.name, group, odd: "k y=%&" }, "listed metadata");
});

scenario("lifecycle.connect", async (t) => {
  const s = await t.sandbox();
  await s.files.write("/tmp/connect.txt", "before connect");
  const again = await Sandbox.connect(s.sandboxId);
  ok(again !== s, "connect returns a new instance");
  eq(again.sandboxId, s.sandboxId, "connected sandboxId");
  eq(await again.files.read("/tmp/connect.txt"), "before connect", "a file through the new instance");
  eq(await sh(again, "echo $((6*7))"), "42", "a command through the new instance");
  const same = await s.connect();
  eq(same.sandboxId, s.sandboxId, "sbx.connect() sandboxId");
  await rejects(Sandbox.connect("nosuchsandbox0000000000000"), SandboxNotFoundError, "connect(unknown id)");
});

scenario("lifecycle.set_timeout", async (t) => {
  const s = await t.sandbox({ timeoutMs: 60_000 });
  const e1 = (await s.getInfo()).endAt.getTime();
  await s.setTimeout(600_000);
  const at = Date.now();
  const e2 = (await s.getInfo()).endAt.getTime();
  ok(e2 > e1 + 500_000, `endAt moved from ${new Date(e1).toISOString()} to ${new Date(e2).toISOString()}, want ~10 min from now`);
  ok(Math.abs(e2 - (at + 600_000)) < 10_000, `endAt ${new Date(e2).toISOString()} is not 600 s from ${new Date(at).toISOString()}`);
  await Sandbox.setTimeout(s.sandboxId, 30_000);
  const e3 = (await s.getInfo()).endAt.getTime();
  ok(Math.abs(e3 - (Date.now() + 30_000)) < 10_000, `static setTimeout(30 s): endAt ${new Date(e3).toISOString()}`);
  await rejects(Sandbox.setTimeout("nosuchsandbox0000000000000", 30_000), SandboxNotFoundError, "setTimeout(unknown id)");
});

scenario("lifecycle.timeout_kills", async (t) => {
  // A sandbox whose timeout passes is killed: getInfo says not found.
  const s = await t.sandbox({ timeoutMs: 1_000 });
  await waitFor(async () => {
    try {
      await s.getInfo();
      return false;
    } catch (e) {
      if (e instanceof SandboxNotFoundError) return true;
      throw e;
    }
  }, "the sandbox gone after its 1 s timeout", 60_000);
  eq(await s.isRunning(), false, "isRunning() after the timeout");
});

scenario("lifecycle.kill", async (t) => {
  const s = await t.sandbox();
  await s.files.write("/tmp/k", "k");
  eq(await s.kill(), true, "kill()");
  eq(await s.kill(), false, "kill() again");
  eq(await Sandbox.kill(s.sandboxId), false, "Sandbox.kill(id) after the kill");
  eq(await s.isRunning(), false, "isRunning() after the kill");
  const e = await rejects(s.getInfo(), SandboxNotFoundError, "getInfo() after the kill");
  ok(e instanceof NotFoundError, "SandboxNotFoundError is a NotFoundError");
  await rejects(Sandbox.getInfo(s.sandboxId), SandboxNotFoundError, "Sandbox.getInfo(id) after the kill");
  await rejects(s.commands.run("true"), SandboxError, "commands.run after the kill");
  await rejects(s.files.read("/tmp/k"), SandboxError, "files.read after the kill");
  const listed = Sandbox.list({ query: { metadata: { suite: RUN, scenario: t.name } } });
  deepEq(await listed.nextItems(), [], "list after the kill");
});

// ----------------------------------------------------------------- commands

scenario("commands.foreground", async (t) => {
  const s = await t.sandbox();
  const chunks = [];
  const r = await s.commands.run("echo out; echo err >&2; printf 'no newline'", { onStdout: (d) => chunks.push(d) });
  eq(r.exitCode, 0, "exitCode");
  eq(r.stdout, "out\nno newline", "stdout");
  eq(r.stderr, "err\n", "stderr");
  eq(chunks.join(""), "out\nno newline", "onStdout's chunks joined");
  eq(await sh(s, "echo $0"), "/bin/bash", "the shell commands run in");
});

scenario("commands.background_wait", async (t) => {
  const s = await t.sandbox();
  await s.files.write("/tmp/gate", "");
  await s.files.remove("/tmp/gate");
  const h = await s.commands.run("while [ ! -e /tmp/gate ]; do sleep 0.05; done; echo done", { background: true });
  ok(Number.isInteger(h.pid) && h.pid > 0, `pid ${h.pid}`);
  eq(h.exitCode, undefined, "exitCode while it runs");
  const listed = await s.commands.list();
  ok(listed.some((p) => p.pid === h.pid), `commands.list() ${show(listed)} lacks pid ${h.pid}`);
  await s.files.write("/tmp/gate", "go");
  const r = await h.wait();
  eq(r.exitCode, 0, "exitCode");
  eq(r.stdout, "done\n", "stdout");
  eq(h.exitCode, 0, "handle.exitCode after wait");
});

scenario("commands.stdin", async (t) => {
  const s = await t.sandbox();
  let out = "";
  const h = await s.commands.run("cat; echo EOF", { background: true, stdin: true, onStdout: (d) => (out += d) });
  await h.sendStdin("hello\n");
  // cat answers each line as it comes: the input reached it, stdin open.
  await waitFor(() => out.includes("hello\n"), "cat's echo of the first line");
  await s.commands.sendStdin(h.pid, enc.encode("world\n"));
  await waitFor(() => out.includes("world\n"), "cat's echo of the second line (bytes, by pid)");
  eq(out.includes("EOF"), false, "cat ended before stdin closed");
  await h.closeStdin();
  const r = await h.wait();
  eq(r.stdout, "hello\nworld\nEOF\n", "stdout after closeStdin");
  // A command started without stdin reads EOF at once.
  eq(await sh(s, "cat; echo after"), "after", "cat without stdin");
});

scenario("commands.kill", async (t) => {
  const s = await t.sandbox();
  const h = await s.commands.run("sleep 600", { background: true });
  eq(await s.commands.kill(h.pid), true, "commands.kill(pid)");
  const e = await rejects(h.wait(), CommandExitError, "wait() on a killed command");
  ok(e.exitCode !== 0, `exitCode of a killed command: ${e.exitCode}`);
  ok(/killed/.test(e.error ?? ""), `error of a killed command: ${show(e.error)}`);
  await waitFor(async () => !(await s.commands.list()).some((p) => p.pid === h.pid), "the killed pid gone from commands.list()");
  eq(await s.commands.kill(h.pid), false, "commands.kill(pid) again");
  const h2 = await s.commands.run("sleep 600", { background: true });
  eq(await h2.kill(), true, "handle.kill()");
  await rejects(h2.wait(), CommandExitError, "wait() after handle.kill()");
});

scenario("commands.timeout", async (t) => {
  const s = await t.sandbox();
  const e = await rejects(s.commands.run("echo $$ > /tmp/pid; exec sleep 600", { timeoutMs: 2_000 }), TimeoutError, "run with timeoutMs 2000");
  ok(/timeoutMs|deadline/i.test(e.message), `the timeout error's message: ${e.message}`);
  const pid = Number(await s.files.read("/tmp/pid"));
  ok(pid > 0, `the command's pid ${pid}`);
  // The process is gone: not listed, not in /proc.
  await waitFor(async () => !(await s.commands.list()).some((p) => p.pid === pid), `pid ${pid} gone from commands.list()`);
  await waitFor(async () => (await sh(s, `test -e /proc/${pid} && echo alive || echo gone`)) === "gone", `pid ${pid} gone from /proc`);
  eq(await sh(s, "pgrep -x sleep || echo none"), "none", "no sleep left in the sandbox");
});

scenario("commands.env", async (t) => {
  const s = await t.sandbox({ envs: { SB_ONLY: "sandbox", SB_BOTH: "sandbox" } });
  eq(await sh(s, 'echo "$SB_ONLY $SB_BOTH $CMD_ONLY"', { envs: { SB_BOTH: "command", CMD_ONLY: "c" } }), "sandbox command c", "sandbox envs then the command's (last wins)");
  eq(await sh(s, 'echo "$SB_ONLY $SB_BOTH ${CMD_ONLY:-unset}"'), "sandbox sandbox unset", "a later command without envs");
  ok((await sh(s, "echo $PATH")).includes("/usr/bin"), "PATH");
});

scenario("commands.cwd", async (t) => {
  const s = await t.sandbox();
  eq(await sh(s, "pwd", { cwd: "/tmp" }), "/tmp", "pwd with cwd /tmp");
  await s.files.makeDir("/tmp/a/b");
  eq(await sh(s, "pwd", { cwd: "/tmp/a/b" }), "/tmp/a/b", "pwd with cwd /tmp/a/b");
  await s.files.write("/tmp/a/b/f.txt", "here");
  eq(await sh(s, "cat f.txt", { cwd: "/tmp/a/b" }), "here", "a relative path against cwd");
  const e = await rejects(s.commands.run("pwd", { cwd: "/nonexistent" }), InvalidArgumentError, "cwd that does not exist");
  ok(e.message.includes("/nonexistent"), `the error names the path: ${e.message}`);
});

scenario("commands.exit_error", async (t) => {
  const s = await t.sandbox();
  const e = await rejects(s.commands.run("echo out; echo err >&2; exit 3"), CommandExitError, "exit 3");
  eq(e.exitCode, 3, "exitCode");
  eq(e.stdout, "out\n", "stdout");
  eq(e.stderr, "err\n", "stderr");
  ok(/exit status 3/.test(e.error ?? ""), `error: ${show(e.error)}`);
  ok(e instanceof SandboxError, "CommandExitError is a SandboxError");
  // In the background, wait() throws the same.
  const h = await s.commands.run("exit 7", { background: true });
  eq((await rejects(h.wait(), CommandExitError, "background exit 7")).exitCode, 7, "background exitCode");
});

scenario("commands.large_output", async (t) => {
  const s = await t.sandbox();
  // 15 MiB of random bytes as base64 lines: 20.7 MB of stdout, checked by
  // length and by hash against what the sandbox computed.
  const [n, sum] = (await sh(s, "head -c 15728640 /dev/urandom | base64 -w 76 > /tmp/big.b64 && wc -c < /tmp/big.b64 && sha256sum < /tmp/big.b64 | cut -d' ' -f1")).split("\n");
  ok(Number(n) > 20 * 1000 * 1000, `the file is ${n} bytes`);
  let streamed = 0;
  const r = await s.commands.run("cat /tmp/big.b64", { onStdout: (d) => (streamed += d.length) });
  eq(r.stdout.length, Number(n), "stdout length");
  eq(streamed, Number(n), "bytes through onStdout");
  eq(sha256(r.stdout), sum, "stdout's sha256");
  eq(r.stderr, "", "stderr");
}, 300_000);

scenario("commands.list_connect", async (t) => {
  const s = await t.sandbox();
  const h = await s.commands.run("i=0; while [ ! -e /tmp/stop ]; do i=$((i+1)); echo tick $i; sleep 0.05; done; echo stopped", { background: true, envs: { MARK: "m1" }, cwd: "/tmp" });
  const listed = await s.commands.list();
  const p = listed.find((x) => x.pid === h.pid);
  ok(p, `commands.list() ${show(listed)} lacks pid ${h.pid}`);
  eq(p.cmd, "/bin/bash", "listed cmd");
  ok(p.args.some((a) => a.includes("tick")), `listed args ${show(p.args)}`);
  eq(p.envs.MARK, "m1", "listed envs.MARK");
  eq(p.cwd, "/tmp", "listed cwd");
  await h.disconnect();
  // The command outlives the disconnect; connect by pid follows it on.
  let out = "";
  const c = await s.commands.connect(h.pid, { onStdout: (d) => (out += d) });
  eq(c.pid, h.pid, "connected pid");
  await waitFor(() => /tick \d+/.test(out), "new output through the connected handle");
  await s.files.write("/tmp/stop", "");
  const r = await c.wait();
  eq(r.exitCode, 0, "connected wait() exitCode");
  ok(r.stdout.endsWith("stopped\n"), `connected stdout ends ${show(r.stdout.slice(-40))}`);
  await rejects(s.commands.connect(999999), SandboxError, "connect(unknown pid)");
});

// ---------------------------------------------------------------------- PTY

scenario("pty", async (t) => {
  const s = await t.sandbox();
  let out = "";
  const h = await s.pty.create({ cols: 100, rows: 30, onData: (d) => (out += dec.decode(d, { stream: true })) });
  ok(h.pid > 0, `pty pid ${h.pid}`);
  await s.pty.sendInput(h.pid, enc.encode("stty size; echo MARK$((40+2)); tty\n"));
  // tty prints after the mark: its line is awaited too.
  await waitFor(() => out.includes("MARK42") && /\/dev\/pts\/\d+/.test(out), "the command's output (the mark, then tty's pts) through onData");
  ok(out.includes("30 100"), `stty size before resize: ${show(out.slice(-300))}`);
  await s.pty.resize(h.pid, { cols: 120, rows: 40 });
  out = "";
  await s.pty.sendInput(h.pid, enc.encode("stty size; echo END$((1+1))\n"));
  await waitFor(() => out.includes("END2"), "output after resize");
  ok(out.includes("40 120"), `stty size after resize: ${show(out.slice(-300))}`);
  const listed = await s.commands.list();
  ok(listed.some((p) => p.pid === h.pid), `commands.list() lacks the pty ${h.pid}`);
  eq(await s.pty.kill(h.pid), true, "pty.kill()");
  await rejects(h.wait(), CommandExitError, "wait() on the killed pty");
  eq(await s.pty.kill(h.pid), false, "pty.kill() again");
});

// -------------------------------------------------------------------- files

scenario("files.text", async (t) => {
  const s = await t.sandbox();
  const text = "héllo wörld ✓ 日本\nline 2\n";
  const w = await s.files.write("/tmp/dir/new/text.txt", text);
  eq(w.path, "/tmp/dir/new/text.txt", "WriteInfo.path");
  eq(w.name, "text.txt", "WriteInfo.name");
  eq(await s.files.read("/tmp/dir/new/text.txt"), text, "read back");
  eq(await sh(s, "wc -c < /tmp/dir/new/text.txt"), String(enc.encode(text).length), "bytes in the sandbox");
  await s.files.write("/tmp/dir/new/text.txt", "short");
  eq(await s.files.read("/tmp/dir/new/text.txt"), "short", "an overwrite truncates");
  eq((await s.files.read("/tmp/dir/new/text.txt", { format: "blob" })).size, 5, "read as blob");
  await rejects(s.files.read("/tmp/nope.txt"), FileNotFoundError, "read of a missing file");
  await rejects(s.files.read("/tmp/dir"), InvalidArgumentError, "read of a directory");
});

scenario("files.binary", async (t) => {
  const s = await t.sandbox();
  const data = new Uint8Array(256 * 4);
  for (let i = 0; i < data.length; i++) data[i] = i % 256;
  await s.files.write("/tmp/bin/all.bin", data.buffer);
  const back = await s.files.read("/tmp/bin/all.bin", { format: "bytes" });
  eq(back.length, data.length, "length read back");
  ok(back.every((b, i) => b === data[i]), "every byte value round trips");
  eq(await sh(s, "sha256sum < /tmp/bin/all.bin | cut -d' ' -f1"), sha256(data), "sha256 in the sandbox");
  // Bytes the sandbox made come back as they are.
  await sh(s, "printf '\\x00\\xff\\x80\\n\\r' > /tmp/bin/made.bin");
  deepEq([...(await s.files.read("/tmp/bin/made.bin", { format: "bytes" }))], [0, 255, 128, 10, 13], "bytes made in the sandbox");
});

scenario("files.list_depth", async (t) => {
  const s = await t.sandbox();
  await sh(s, "mkdir -p /tmp/tree/a/b/c && echo 1 > /tmp/tree/top.txt && echo 22 > /tmp/tree/a/mid.txt && echo 333 > /tmp/tree/a/b/c/deep.txt && ln -s top.txt /tmp/tree/link");
  const d1 = await s.files.list("/tmp/tree");
  deepEq(d1.map((e) => e.name).sort(), ["a", "link", "top.txt"], "depth 1 names");
  const top = d1.find((e) => e.name === "top.txt");
  eq(top.type, "file", "top.txt type");
  eq(top.path, "/tmp/tree/top.txt", "top.txt path");
  eq(top.size, 2, "top.txt size");
  eq(d1.find((e) => e.name === "a").type, "dir", "a type");
  eq(d1.find((e) => e.name === "link").symlinkTarget, "/tmp/tree/top.txt", "link's symlinkTarget");
  const d2 = await s.files.list("/tmp/tree", { depth: 2 });
  deepEq(d2.map((e) => e.path).sort(), ["/tmp/tree/a", "/tmp/tree/a/b", "/tmp/tree/a/mid.txt", "/tmp/tree/link", "/tmp/tree/top.txt"], "depth 2 paths");
  const d4 = await s.files.list("/tmp/tree", { depth: 4 });
  ok(d4.some((e) => e.path === "/tmp/tree/a/b/c/deep.txt" && e.size === 4), `depth 4 lacks deep.txt: ${show(d4.map((e) => e.path))}`);
  await rejects(s.files.list("/tmp/missing-dir"), FileNotFoundError, "list of a missing directory");
});

scenario("files.exists_info", async (t) => {
  const s = await t.sandbox();
  await s.files.write("/tmp/info/f.txt", "12345");
  eq(await s.files.exists("/tmp/info/f.txt"), true, "exists(file)");
  eq(await s.files.exists("/tmp/info"), true, "exists(dir)");
  eq(await s.files.exists("/tmp/info/none"), false, "exists(missing)");
  const fi = await s.files.getInfo("/tmp/info/f.txt");
  eq(fi.name, "f.txt", "name");
  eq(fi.type, "file", "type");
  eq(fi.path, "/tmp/info/f.txt", "path");
  eq(fi.size, 5, "size");
  ok(/^-rw/.test(fi.permissions), `permissions ${fi.permissions}`);
  ok(fi.modifiedTime instanceof Date && Math.abs(fi.modifiedTime - Date.now()) < 600_000, `modifiedTime ${fi.modifiedTime}`);
  eq((await s.files.getInfo("/tmp/info")).type, "dir", "type of a directory");
  await rejects(s.files.getInfo("/tmp/info/none"), FileNotFoundError, "getInfo(missing)");
});

scenario("files.make_dir", async (t) => {
  const s = await t.sandbox();
  eq(await s.files.makeDir("/tmp/mk/x/y"), true, "makeDir (new, with parents)");
  eq(await s.files.makeDir("/tmp/mk/x/y"), false, "makeDir (exists)");
  eq((await s.files.getInfo("/tmp/mk/x")).type, "dir", "the parent made too");
});

scenario("files.rename_remove", async (t) => {
  const s = await t.sandbox();
  await s.files.write("/tmp/mv/old.txt", "moved");
  const e = await s.files.rename("/tmp/mv/old.txt", "/tmp/mv/new.txt");
  eq(e.path, "/tmp/mv/new.txt", "rename's entry path");
  eq(e.name, "new.txt", "rename's entry name");
  eq(await s.files.exists("/tmp/mv/old.txt"), false, "old path after rename");
  eq(await s.files.read("/tmp/mv/new.txt"), "moved", "new path's content");
  await rejects(s.files.rename("/tmp/mv/none", "/tmp/mv/x"), FileNotFoundError, "rename of a missing path");
  await s.files.remove("/tmp/mv/new.txt");
  eq(await s.files.exists("/tmp/mv/new.txt"), false, "after remove(file)");
  await s.files.write("/tmp/mv/d/e/f.txt", "f");
  await s.files.remove("/tmp/mv/d");
  eq(await s.files.exists("/tmp/mv/d"), false, "after remove(dir), recursive");
  await s.files.remove("/tmp/mv/never-was");
});

scenario("files.write_multiple", async (t) => {
  const s = await t.sandbox();
  const bin = new Uint8Array([0, 1, 2, 250, 255]);
  const infos = await s.files.write([
    { path: "/tmp/multi/a.txt", data: "alpha" },
    { path: "/tmp/multi/sub/b.bin", data: bin.buffer },
    { path: "/tmp/multi/c.txt", data: new Blob(["gamma"]) },
  ]);
  deepEq(infos.map((i) => i.path).sort(), ["/tmp/multi/a.txt", "/tmp/multi/c.txt", "/tmp/multi/sub/b.bin"], "WriteInfo paths");
  eq(await s.files.read("/tmp/multi/a.txt"), "alpha", "a.txt");
  deepEq([...(await s.files.read("/tmp/multi/sub/b.bin", { format: "bytes" }))], [...bin], "sub/b.bin");
  eq(await s.files.read("/tmp/multi/c.txt"), "gamma", "c.txt");
});

scenario("files.metadata", async (t) => {
  // files.write's metadata (envd 0.6.2): kept on the file, read back by
  // getInfo, list and rename; another upload replaces it.
  const s = await t.sandbox();
  const md = { owner: "me", "build-id": "42" };
  const w = await s.files.write("/tmp/md/a.txt", "x", { metadata: md });
  deepEq(w.metadata, md, "write's metadata");
  deepEq((await s.files.getInfo("/tmp/md/a.txt")).metadata, md, "getInfo's metadata");
  const e = await s.files.rename("/tmp/md/a.txt", "/tmp/md/b.txt");
  deepEq(e.metadata, md, "rename's entry keeps it");
  const listed = (await s.files.list("/tmp/md")).find((x) => x.name === "b.txt");
  deepEq(listed?.metadata, md, "list's metadata");
  await s.files.write("/tmp/md/b.txt", "y", { metadata: { owner: "you" } });
  deepEq((await s.files.getInfo("/tmp/md/b.txt")).metadata, { owner: "you" }, "a second upload replaces it");
  await s.files.write("/tmp/md/b.txt", "z");
  eq((await s.files.getInfo("/tmp/md/b.txt")).metadata, undefined, "an upload without metadata clears it");
  const attrs = `python3 -c "import os; print(sum(a.startswith('user.e2b.') for a in os.listxattr('/tmp/md/b.txt')))"`;
  eq(await sh(s, attrs), "0", "no attribute left on the file");
  await s.files.write("/tmp/md/b.txt", "w", { metadata: md });
  eq(await sh(s, attrs), "2", "the attributes on the file itself (control)");
});

scenario("files.watch_dir", async (t) => {
  const s = await t.sandbox();
  await s.files.makeDir("/tmp/watched");
  const events = [];
  let exited = null;
  const w = await s.files.watchDir("/tmp/watched", (e) => events.push(e), { includeEntry: true, onExit: (err) => (exited = err ?? "clean") });
  await s.files.write("/tmp/watched/new.txt", "first");
  const created = await waitFor(() => events.find((e) => e.name === "new.txt" && e.type === "create"), "a create event for new.txt");
  ok(created.entry && created.entry.name === "new.txt" && created.entry.path === "/tmp/watched/new.txt", `create event's entry: ${show(created.entry)}`);
  await sh(s, "echo more >> /tmp/watched/new.txt");
  await waitFor(() => events.find((e) => e.name === "new.txt" && e.type === "write"), "a write event for new.txt");
  await s.files.remove("/tmp/watched/new.txt");
  const removed = await waitFor(() => events.find((e) => e.name === "new.txt" && e.type === "remove"), "a remove event for new.txt");
  eq(removed.entry, undefined, "a remove event has no entry");
  // Only the watched directory's own entries, not a sibling's.
  await s.files.write("/tmp/elsewhere.txt", "x");
  await w.stop();
  await sh(s, "touch /tmp/watched/after-stop");
  await sleep(300);
  ok(!events.some((e) => e.name === "elsewhere.txt" || e.name === "after-stop"), `events outside the watch or after stop: ${show(events.map((e) => [e.name, e.type]))}`);
  await rejects(s.files.watchDir("/tmp/no-such-dir", () => {}), FileNotFoundError, "watchDir of a missing directory");
});

// bigStream is a ReadableStream of n random bytes, in 1 MiB chunks, hashing
// them as they go out: digest() is their sha256 once it has ended.
function bigStream(n) {
  const h = createHash("sha256");
  let sent = 0;
  const stream = new ReadableStream({
    pull(c) {
      if (sent >= n) {
        c.close();
        return;
      }
      const b = randomBytes(Math.min(MiB, n - sent));
      sent += b.length;
      h.update(b);
      c.enqueue(new Uint8Array(b.buffer, b.byteOffset, b.length));
    },
  });
  return { stream, digest: () => h.digest("hex"), sent: () => sent };
}

scenario("files.large_stream", async (t) => {
  const s = await t.sandbox();
  const n = 100 * MiB;
  const up = bigStream(n);
  const w = await s.files.write("/workspace/big.bin", up.stream);
  eq(w.path, "/workspace/big.bin", "WriteInfo.path");
  eq(up.sent(), n, "bytes the stream gave");
  const want = up.digest();
  eq(await sh(s, "stat -c %s /workspace/big.bin"), String(n), "size in the sandbox");
  eq(await sh(s, "sha256sum < /workspace/big.bin | cut -d' ' -f1"), want, "sha256 in the sandbox (upload)");
  const rs = await s.files.read("/workspace/big.bin", { format: "stream" });
  const h = createHash("sha256");
  let got = 0;
  for await (const chunk of rs) {
    got += chunk.length;
    h.update(chunk);
  }
  eq(got, n, "bytes streamed back");
  eq(h.digest("hex"), want, "sha256 of the download");
  // A Blob goes up too (multipart), 8 MiB of it.
  const blobBytes = randomBytes(8 * MiB);
  await s.files.write("/workspace/blob.bin", new Blob([blobBytes]));
  eq(await sh(s, "sha256sum < /workspace/blob.bin | cut -d' ' -f1"), sha256(blobBytes), "sha256 of the Blob upload");
}, 600_000);

scenario("files.signed_urls", async (t) => {
  // uploadUrl/downloadUrl give a URL on E2B_SANDBOX_URL's origin signed
  // with the sandbox's access token. The URL names no sandbox (the SDK adds
  // its routing headers only to its own requests), so one daemon serving many
  // sandboxes at one URL cannot tell whose it is: E2B-CONTRACT.md §10 leaves
  // it open. What is checked: the signature is sbx's to verify (with the
  // sandbox named by the header, it alone authorizes the transfer), a wrong
  // signature is refused, and the bare URL is refused, never served from
  // another sandbox.
  const s = await t.sandbox();
  await s.files.write("/tmp/signed.txt", "signed content");
  const down = await s.downloadUrl("/tmp/signed.txt");
  const u = new URL(down);
  eq(u.origin, new URL(process.env.E2B_SANDBOX_URL).origin, "downloadUrl origin");
  eq(u.pathname, "/files", "downloadUrl path");
  ok(/^v1_/.test(u.searchParams.get("signature") ?? ""), `downloadUrl signature ${u.searchParams.get("signature")}`);
  const routed = { "E2b-Sandbox-Id": s.sandboxId, "E2b-Sandbox-Port": "49983" };
  let r = await fetch(down, { headers: routed });
  eq(r.status, 200, "signed download with the routing header");
  eq(await r.text(), "signed content", "signed download's body");
  const forged = new URL(down);
  forged.searchParams.set("path", "/etc/passwd");
  r = await fetch(forged, { headers: routed });
  eq(r.status, 401, "a signature for another path");
  const upload = await s.uploadUrl("/tmp/signed-up.txt");
  const form = new FormData();
  form.append("file", new Blob(["uploaded by URL"]), "/tmp/signed-up.txt");
  r = await fetch(upload, { method: "POST", body: form, headers: routed });
  eq(r.status, 200, `signed upload with the routing header (${await r.clone().text()})`);
  eq(await s.files.read("/tmp/signed-up.txt"), "uploaded by URL", "the signed upload's file");
  // The URL as the SDK gives it, with no routing header: it must serve this
  // sandbox's file or be refused, never anything else.
  r = await fetch(down);
  const body = await r.text();
  if (r.ok) {
    eq(body, "signed content", "the bare downloadUrl's body");
  } else {
    ok(r.status >= 400 && r.status < 500, `the bare downloadUrl: ${r.status} ${body.slice(0, 200)}`);
    ok(!body.includes("signed content"), "a refused downloadUrl's body holds the file");
  }
  console.log(`note files.signed_urls: the bare downloadUrl ${down.replace(/signature=[^&]+/, "signature=…")} answers ${r.status} ${body.trim().slice(0, 200)}`);
});

// ---------------------------------------------------------------- isolation

scenario("isolation", async (t) => {
  const a = await t.sandbox();
  const b = await t.sandbox();
  await a.files.write("/tmp/only-a.txt", "a's");
  await a.files.write("/workspace/only-a.txt", "a's");
  await b.files.write("/tmp/only-b.txt", "b's");
  eq(await b.files.exists("/tmp/only-a.txt"), false, "b sees a's /tmp file");
  eq(await b.files.exists("/workspace/only-a.txt"), false, "b sees a's /workspace file");
  eq(await a.files.exists("/tmp/only-b.txt"), false, "a sees b's file");
  await b.files.write("/tmp/only-a.txt", "b's own");
  eq(await a.files.read("/tmp/only-a.txt"), "a's", "a's file after b wrote the same path");
  const h = await a.commands.run("exec sleep 600", { background: true });
  const bList = await b.commands.list();
  ok(!bList.some((p) => p.args.join(" ").includes("sleep 600")), `b's commands.list() shows a's command: ${show(bList)}`);
  eq(await sh(b, "pgrep -f 'slee[p] 600' || echo none"), "none", "a's process seen from b's /proc");
  ok((await sh(a, "pgrep -f 'slee[p] 600' || echo none")) !== "none", "a's own process, from a (positive control)");
  await h.kill();
});

// --------------------------------------------------------------------- keys

scenario("keys", async (t) => {
  // Two applications, each its own process with its own E2B_API_KEY.
  const keys = [];
  try {
    const k1 = await makeKey(ADMIN, `scenarios-${RUN}-one`);
    keys.push(k1);
    const k2 = await makeKey(ADMIN, `scenarios-${RUN}-two`);
    keys.push(k2);
    const one = (await app(k1.secret, "create", RUN, t.name)).id;
    t.adopt(one);
    const two = (await app(k2.secret, "create", RUN, t.name)).id;
    t.adopt(two);
    for (const [who, key, own, other] of [["app one", k1.secret, one, two], ["app two", k2.secret, two, one]]) {
      const p = await app(key, "probe", own, other);
      eq(p.ownStdout, "mine\n", `${who}: its own sandbox (positive control)`);
      eq(p.ownToken, true, `${who}: connect returned an access token`);
      ok(p.listed.includes(own), `${who}: list lacks its own sandbox: ${show(p.listed)}`);
      ok(!p.listed.includes(other), `${who}: list shows the other app's sandbox`);
      eq(p.getInfo.error, "SandboxNotFoundError", `${who}: getInfo(other) (${p.getInfo.message})`);
      eq(p.kill.error, "none", `${who}: kill(other) did not throw (${p.kill.message})`);
      eq(p.kill.value, false, `${who}: kill(other)`);
      eq(p.setTimeout.error, "SandboxNotFoundError", `${who}: setTimeout(other) (${p.setTimeout.message})`);
      eq(p.connect.error, "SandboxNotFoundError", `${who}: connect(other) (${p.connect.message})`);
      for (const op of ["run", "read", "write"]) {
        eq(p[op].error, "AuthenticationError", `${who}: ${op} on the other's id with its own token (${p[op].message})`);
      }
    }
    // Both untouched: running, no file written, nothing run.
    for (const id of [one, two]) {
      const s = await Sandbox.connect(id);
      eq((await s.getInfo()).state, "running", `${id} after the other's attempts`);
      eq(await s.files.exists("/tmp/stolen"), false, `${id}: the other's write`);
    }
  } finally {
    for (const k of keys) await revokeKey(ADMIN, k.id);
  }
});

// ---------------------------------------------------------------- bad input

scenario("bad.unknown_template", async (t) => {
  const e = await rejects(Sandbox.create("no-such-template-e2b", { metadata: { suite: RUN, scenario: t.name } }), SandboxError, "create(unknown template)");
  eq(e.statusCode, 404, "statusCode");
  ok(/^404: /.test(e.message) && /template/i.test(e.message) && /not found/i.test(e.message), `message: ${e.message}`);
  deepEq(await Sandbox.list({ query: { metadata: { suite: RUN, scenario: t.name } } }).nextItems(), [], "sandboxes made");
});

scenario("bad.access_token", async (t) => {
  const s = await t.sandbox();
  await s.files.write("/tmp/marker", "original");
  const info = await s.getInfo();
  const forged = new Sandbox({ sandboxId: s.sandboxId, envdVersion: info.envdVersion, envdAccessToken: "not-the-token" });
  await rejects(forged.commands.run("echo x > /tmp/marker"), AuthenticationError, "commands.run with a wrong token");
  await rejects(forged.files.write("/tmp/marker", "overwritten"), AuthenticationError, "files.write with a wrong token");
  await rejects(forged.files.read("/tmp/marker"), AuthenticationError, "files.read with a wrong token");
  await rejects(forged.files.list("/tmp"), AuthenticationError, "files.list with a wrong token");
  await rejects(forged.commands.list(), AuthenticationError, "commands.list with a wrong token");
  const tokenless = new Sandbox({ sandboxId: s.sandboxId, envdVersion: info.envdVersion });
  await rejects(tokenless.commands.run("true"), AuthenticationError, "commands.run with no token");
  eq(await forged.isRunning(), true, "isRunning (health needs no token)");
  eq(await s.files.read("/tmp/marker"), "original", "the marker after the attempts");
  deepEq(await s.commands.list(), [], "processes after the attempts");
});

scenario("bad.api_key", async (t) => {
  const s = await t.sandbox();
  const p = await app("sbx_not_a_real_key_0000000000", "badkey", s.sandboxId);
  for (const op of ["create", "list", "getInfo", "kill", "connect"]) {
    eq(p[op].error, "AuthenticationError", `${op} with a wrong API key (${p[op].message})`);
  }
  eq((await s.getInfo()).state, "running", "the sandbox after the wrong key's kill");
});

scenario("bad.pause", async (t) => {
  const s = await t.sandbox();
  const e = await rejects(s.pause(), SandboxError, "pause()");
  ok(/pause/i.test(e.message) && /not|cannot/i.test(e.message), `pause's message: ${e.message}`);
  ok(e.statusCode >= 400, `statusCode ${e.statusCode}`);
  eq((await s.getInfo()).state, "running", "state after the refused pause");
  eq(await sh(s, "echo still"), "still", "a command after the refused pause");
});

// --------------------------------------------------------- code interpreter

// ciSandbox is a code interpreter's sandbox (template code-interpreter-v1).
const ciSandbox = (t) => t.sandbox({}, CI);

scenario("ci.state", async (t) => {
  const s = await ciSandbox(t);
  eq((await s.getInfo()).templateId, "code-interpreter-v1", "templateId");
  const e1 = await s.runCode("x = 41\ndef inc(v):\n    return v + 1");
  eq(e1.error, undefined, "first cell's error");
  const e2 = await s.runCode("inc(x)");
  eq(e2.error, undefined, "second cell's error");
  eq(e2.text, "42", "the second cell's value (state kept across cells)");
  ok(e2.results.some((r) => r.isMainResult && r.text === "42"), `main result: ${show(e2.results)}`);
  ok(Number.isInteger(e2.executionCount) && e2.executionCount > (e1.executionCount ?? 0), `executionCount ${e1.executionCount} then ${e2.executionCount}`);
  const e3 = await s.runCode("import os\nprint(os.environ.get('CELL_VAR'))", { envs: { CELL_VAR: "cell" } });
  deepEq(e3.logs.stdout, ["cell\n"], "a cell's envs");
});

scenario("ci.exception", async (t) => {
  const s = await ciSandbox(t);
  let seen;
  const e = await s.runCode("def f():\n    return 1/0\nf()", { onError: (err) => (seen = err) });
  ok(e.error, "execution.error is set");
  eq(e.error.name, "ZeroDivisionError", "error name");
  ok(/division by zero/.test(e.error.value), `error value ${show(e.error.value)}`);
  ok(typeof e.error.traceback === "string" && e.error.traceback.includes("ZeroDivisionError") && e.error.traceback.includes("f()"), `traceback ${show(e.error.traceback)}`);
  eq(seen?.name, "ZeroDivisionError", "onError");
  const after = await s.runCode("1 + 1");
  eq(after.text, "2", "the next cell runs");
});

scenario("ci.stdout_stream", async (t) => {
  // The cell waits for a file the test writes only once onStdout has the
  // cell's first line: without streaming, it would never end.
  const s = await ciSandbox(t);
  const lines = [];
  let released = false;
  const e = await s.runCode(
    "import os, time\nprint('ready', flush=True)\nwhile not os.path.exists('/tmp/go'):\n    time.sleep(0.05)\nprint('done')",
    {
      timeoutMs: 60_000,
      onStdout: async (m) => {
        lines.push(m.line);
        if (m.line.includes("ready") && !released) {
          released = true;
          await s.files.write("/tmp/go", "");
        }
      },
    },
  );
  eq(e.error, undefined, "error");
  deepEq(e.logs.stdout.join(""), "ready\ndone\n", "logs.stdout");
  ok(released, "onStdout saw 'ready' while the cell ran");
  ok(lines.join("").includes("done"), `onStdout lines ${show(lines)}`);
});

scenario("ci.chart", async (t) => {
  const s = await ciSandbox(t);
  const e = await s.runCode("import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.title('squares')\nplt.show()", { timeoutMs: 120_000 });
  eq(e.error, undefined, `error (${show(e.error)})`);
  const png = e.results.find((r) => r.png);
  ok(png, `no result with png: ${show(e.results.map((r) => r.formats()))}`);
  ok(Buffer.from(png.png, "base64").subarray(0, 8).equals(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])), "png is a PNG");
}, 180_000);

scenario("ci.contexts", async (t) => {
  const s = await ciSandbox(t);
  const c = await s.createCodeContext({ cwd: "/tmp" });
  ok(c.id, `context ${show(c)}`);
  eq(c.language, "python", "context language");
  eq(c.cwd, "/tmp", "context cwd");
  ok((await s.listCodeContexts()).some((x) => x.id === c.id), "listCodeContexts lacks the new context");
  // A str value's text is its repr without the quotes, as upstream's.
  eq((await s.runCode("import os\nos.getcwd()", { context: c })).text, "/tmp", "cwd in the context");
  await s.runCode("only_in_c = 7", { context: c });
  await s.runCode("only_in_default = 8");
  eq((await s.runCode("only_in_c", { context: c })).text, "7", "the context's own state");
  eq((await s.runCode("only_in_c")).error?.name, "NameError", "the default context sees the new one's variable");
  eq((await s.runCode("only_in_default", { context: c })).error?.name, "NameError", "the new context sees the default's variable");
  const c2 = await s.createCodeContext();
  eq((await s.runCode("only_in_c", { context: c2 })).error?.name, "NameError", "a second new context sees the first's variable");
  await s.restartCodeContext(c);
  eq((await s.runCode("only_in_c", { context: c })).error?.name, "NameError", "state after restartCodeContext");
  eq((await s.runCode("only_in_default")).text, "8", "the default context after the other's restart");
  await s.removeCodeContext(c);
  await s.removeCodeContext(c2.id);
  const left = await s.listCodeContexts();
  ok(!left.some((x) => x.id === c.id || x.id === c2.id), `listCodeContexts after remove: ${show(left)}`);
  await rejects(s.runCode("1", { context: c }), null, "runCode in a removed context");
}, 180_000);

// ---------------------------------------------------------------------- run

const filterArg = process.argv[2] ?? process.env.E2B_SCENARIOS;
const filter = filterArg ? new RegExp(filterArg) : null;
let { passed, failed } = await runScenarios(scenarios, (name) => new Ctx(name), filter);

// The sweep: a sandbox of this run still listed is a leak of the suite's.
const left = [];
const p = Sandbox.list({ query: { metadata: { suite: RUN } } });
while (p.hasNext) left.push(...(await p.nextItems()).map((s) => s.sandboxId));
for (const id of left) await Sandbox.kill(id);
if (left.length > 0) {
  console.log(`FAIL sweep: sandboxes of this run left after their scenarios: ${left.join(", ")}`);
  failed++;
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed > 0 ? 1 : 0);
