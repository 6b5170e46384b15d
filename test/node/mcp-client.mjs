// mcp-client.mjs drives sbx's MCP server with the official TypeScript MCP
// client: it connects, lists the tools (every page), calls EACH listed tool
// with the case below named after it, then the error cases, and prints one
// line per check and "N passed, M failed". It exits 1 when a check failed,
// 2 when it could not run at all.
//
//   node mcp-client.mjs stdio <path to sbx>   spawns `sbx mcp` (SBX_URL, SBX_API_KEY passed on)
//   node mcp-client.mjs http <daemon URL>     streamable HTTP at <URL>/mcp, Bearer $SBX_API_KEY
//
// A tool the server lists without a case here fails the run: a new tool adds
// its case (one entry of `cases`).

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport, getDefaultEnvironment } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const META_SANDBOX = "sbx/sandbox_id";

// cases: one entry per tool, run in this order. args is the arguments, or a
// function of ctx ({results: tool name → structuredContent of its call,
// sandbox: the session sandbox id}) for a tool that needs an earlier one's
// result. check(sc, text) returns null when the structured content sc (and
// the text content) is right, else what is wrong. outOfRange, when the tool
// has a bounded parameter, is a call that must fail with want in its text.
const cases = {
  "sandbox.exec": {
    args: { runtime: "sh", code: "echo hello-from-mcp; echo oops >&2; exit 3" },
    check: (sc, text) =>
      sc.stdout !== "hello-from-mcp\n" ? `stdout ${JSON.stringify(sc.stdout)}` :
      sc.stderr !== "oops\n" ? `stderr ${JSON.stringify(sc.stderr)}` :
      sc.exit_code !== 3 ? `exit_code ${sc.exit_code}` :
      !text.includes("hello-from-mcp") || !text.includes("[exit code 3]") ? `text ${JSON.stringify(text)}` : null,
    outOfRange: { args: { runtime: "sh", code: "true", timeout_ms: 0 }, want: "timeout_ms: 0 is below 1" },
  },

  // seed 000
  "sandbox_bash": {
    args: { command: "mkdir -p /workspace/mcp && seq 3 > /workspace/mcp/n.txt && echo made", description: "writing a file" },
    check: (sc) =>
      sc.stdout !== "made\n" || sc.exit_code !== 0 ? `result ${JSON.stringify(sc)}` :
      sc.file_count !== 1 || sc.files[0] !== "/workspace/mcp/n.txt" ? `files ${JSON.stringify(sc.files)}` :
      !sc.local_paths["/workspace/mcp/n.txt"]?.includes("/files/download?path=") ? `local_paths ${JSON.stringify(sc.local_paths)}` : null,
    outOfRange: { args: { command: "true", timeout_seconds: 3601 }, want: "3601 is outside the range 1–3600" },
  },
  "exec_command": {
    args: { command: "python3 -q", grace_seconds: 1 },
    check: (sc) => sc.alive !== true || !sc.session_id || sc.exit_code !== null ? `result ${JSON.stringify(sc)}` : null,
    outOfRange: { args: { command: "true", rows: 0 }, want: "rows: 0 is outside the range 1–1000" },
  },
  "write_stdin": {
    args: (ctx) => ({ session_id: ctx.results.exec_command?.session_id ?? "none", input: "print(6*7)\n", wait_seconds: 2 }),
    check: (sc) => sc.cursor <= 0 || !sc.alive ? `result ${JSON.stringify(sc)}` : null,
  },
  "list_sessions": {
    args: {},
    check: (sc) => !Array.isArray(sc.sessions) || sc.sessions.length < 1 ? `sessions ${JSON.stringify(sc.sessions)}` : null,
  },
  "close_session": {
    args: (ctx) => ({ session_id: ctx.results.exec_command?.session_id ?? "none" }),
    check: (sc) => sc.outcome !== "stopped" ? `outcome ${sc.outcome}` : null,
  },
  "shell_interactive": {
    args: { input: "echo $((40+2))\n", wait_seconds: 2 },
    check: (sc) => !sc.session_id ? `result ${JSON.stringify(sc)}` : null,
  },
  "repl_execute": {
    args: { code: "x = 21\nx * 2" },
    check: (sc) => sc.value !== "42" ? `value ${JSON.stringify(sc.value)} (${JSON.stringify(sc)})` : null,
    outOfRange: { args: { code: "1", timeout_seconds: 0 }, want: "timeout_seconds: 0 is outside the range 1–3600" },
  },
  "bsl_check": {
    args: { path: "/tmp" },
    expectError: "bsl-language-server is not installed",
  },

  // seed 002 (deepagents)
  "write_file": {
    args: { file_path: "/workspace/mcp/app.py", content: "def f():\n    return 1\n" },
    check: (sc) => sc.file_path !== "/workspace/mcp/app.py" || sc.bytes !== 22 ? `result ${JSON.stringify(sc)}` : null,
  },
  "read_file": {
    args: { file_path: "/workspace/mcp/app.py" },
    check: (sc) => sc.content !== "     1\tdef f():\n     2\t    return 1" ? `content ${JSON.stringify(sc.content)}` : null,
    outOfRange: { args: { file_path: "/workspace/mcp/app.py", limit: 0 }, want: "limit: 0 is outside the range" },
  },
  "edit_file": {
    args: { file_path: "/workspace/mcp/app.py", old_string: "return 1", new_string: "return 2" },
    check: (sc) => sc.replacements !== 1 || sc.strategy !== "exact" ? `result ${JSON.stringify(sc)}` : null,
  },
  "ls": {
    args: { path: "/workspace/mcp" },
    check: (sc) => !sc.entries?.some((e) => e.path === "/workspace/mcp/app.py") ? `entries ${JSON.stringify(sc.entries)}` : null,
  },
  "glob": {
    args: { pattern: "**/*.py", path: "/workspace" },
    check: (sc) => !sc.paths?.includes("/workspace/mcp/app.py") ? `paths ${JSON.stringify(sc.paths)}` : null,
  },
  "grep": {
    args: { pattern: "return 2", path: "/workspace/mcp", output_mode: "content" },
    check: (sc) => sc.matches?.[0]?.line !== 2 ? `matches ${JSON.stringify(sc.matches)}` : null,
  },

  // seed 004
  "shell_exec": {
    args: { command: "git init -q --bare /tmp/mcp.git && printf '<title>mcp-page</title><p>hello</p>' > /tmp/page.html && echo sh-ok" },
    check: (sc) => sc.stdout !== "sh-ok\n" || sc.exit_code !== 0 ? `result ${JSON.stringify(sc)}` : null,
  },
  "git_clone": {
    args: { url: "/tmp/mcp.git", path: "/workspace/mcprepo" },
    check: (sc) => sc.path !== "/workspace/mcprepo" ? `result ${JSON.stringify(sc)}` : null,
  },
  "file_write": {
    args: { file: "/workspace/mcprepo/a.txt", content: "alpha\n" },
    check: (sc) => sc.bytes_written !== 6 ? `result ${JSON.stringify(sc)}` : null,
  },
  "file_read": {
    args: { file: "/workspace/mcprepo/a.txt" },
    check: (sc) => sc.content !== "alpha\n" ? `content ${JSON.stringify(sc.content)}` : null,
  },
  "file_list": {
    args: { path: "/workspace/mcprepo" },
    check: (sc) => !sc.entries?.some((e) => e.name === "a.txt") ? `entries ${JSON.stringify(sc.entries)}` : null,
  },
  "file_search": {
    args: { file: "/workspace/mcprepo", regex: "alp+ha" },
    check: (sc) => sc.matches?.[0]?.line !== 1 ? `matches ${JSON.stringify(sc.matches)}` : null,
  },
  "git_status": {
    args: { path: "/workspace/mcprepo" },
    check: (sc) => sc.clean !== false || !sc.files?.some((f) => f.path === "a.txt") ? `result ${JSON.stringify(sc)}` : null,
  },
  "git_commit": {
    args: { path: "/workspace/mcprepo", message: "add a" },
    check: (sc) => !/^[0-9a-f]{7,}$/.test(sc.commit ?? "") ? `result ${JSON.stringify(sc)}` : null,
  },
  "git_push": {
    args: { path: "/workspace/mcprepo" },
    check: (sc) => sc.remote !== "origin" ? `result ${JSON.stringify(sc)}` : null,
  },
  "file_delete": {
    args: { file: "/workspace/mcprepo/a.txt" },
    check: (sc) => sc.deleted !== true ? `result ${JSON.stringify(sc)}` : null,
  },
  "python_exec": {
    args: { code: "print(2+3)" },
    check: (sc) => sc.stdout !== "5\n" ? `result ${JSON.stringify(sc)}` : null,
  },
  "pip_install": {
    args: { packages: ["sbx-no-such-package"], no_index: true },
    expectError: "sbx-no-such-package",
  },
  "http_request": {
    args: { url: "http://127.0.0.1:9/" },
    expectError: "refused",
  },
  "browser_open": {
    args: { url: "file:///tmp/page.html" },
    check: (sc) => sc.title !== "mcp-page" ? `result ${JSON.stringify(sc)}` : null,
  },
  "env_set": {
    args: { name: "MCP_VAR", value: "v1" },
    check: (sc) => sc.set !== true ? `result ${JSON.stringify(sc)}` : null,
  },
  "env_get": {
    args: { name: "MCP_VAR" },
    check: (sc) => sc.value !== "v1" ? `result ${JSON.stringify(sc)}` : null,
  },
  "process_list": {
    args: {},
    check: (sc) => !Array.isArray(sc.processes) || sc.processes.length < 1 ? `result ${JSON.stringify(sc)}` : null,
  },
};

let passed = 0;
let failed = 0;

function report(name, problem) {
  if (problem) {
    failed++;
    console.log(`FAIL ${name}: ${problem}`);
  } else {
    passed++;
    console.log(`ok   ${name}`);
  }
}

function textOf(res) {
  return (res.content ?? []).filter((c) => c.type === "text").map((c) => c.text).join("");
}

// check runs fn, reporting what it returns (a problem or null) or throws.
async function check(name, fn) {
  try {
    report(name, await fn());
  } catch (e) {
    report(name, `threw ${e?.message ?? e}`);
  }
}

function transportFor(mode, where) {
  const key = process.env.SBX_API_KEY ?? "";
  if (mode === "stdio") {
    const env = { ...getDefaultEnvironment(), SBX_API_KEY: key };
    for (const k of ["SBX_URL", "SBX_DATA_DIR"]) {
      if (process.env[k]) env[k] = process.env[k];
    }
    return new StdioClientTransport({ command: where, args: ["mcp"], env, stderr: "inherit" });
  }
  if (mode === "http") {
    return new StreamableHTTPClientTransport(new URL(where.replace(/\/$/, "") + "/mcp"), {
      requestInit: { headers: { Authorization: `Bearer ${key}` } },
    });
  }
  throw new Error(`unknown mode ${mode}: want stdio or http`);
}

async function listTools(client) {
  const tools = [];
  let cursor;
  do {
    const page = await client.listTools(cursor ? { cursor } : {});
    tools.push(...page.tools);
    cursor = page.nextCursor;
  } while (cursor);
  return tools;
}

async function main() {
  const [mode, where] = process.argv.slice(2);
  if (!mode || !where) {
    console.error("usage: node mcp-client.mjs stdio <path to sbx> | http <daemon URL>");
    process.exit(2);
  }
  const transport = transportFor(mode, where);
  const client = new Client({ name: "sbx-test-mcp-client", version: "1.0.0" });
  await client.connect(transport);
  console.log(`server ${client.getServerVersion()?.name} ${client.getServerVersion()?.version}`);

  const tools = await listTools(client);
  const ctx = { results: {}, sandbox: "" };
  await check("instructions mention sandbox_id", () =>
    (client.getInstructions() ?? "").includes("sandbox_id") ? null : `instructions ${JSON.stringify(client.getInstructions())}`);
  await check(`tools listed (${tools.map((t) => t.name).join(", ")})`, () => (tools.length ? null : "no tools"));

  const byName = new Map(tools.map((t) => [t.name, t]));
  for (const t of tools) {
    await check(`${t.name}: schemas`, () =>
      t.inputSchema?.type !== "object" ? "inputSchema is not an object schema" :
      !t.inputSchema.properties?.sandbox_id ? "inputSchema has no sandbox_id" :
      !t.outputSchema ? "no outputSchema" :
      !t.description ? "no description" : null);
  }

  // Each tool with its case, in the table's order; then the listed tools with none.
  for (const [name, c] of Object.entries(cases)) {
    if (!byName.has(name)) {
      continue; // a case for a tool this server does not have (another build)
    }
    await check(`${name}: call`, async () => {
      const args = typeof c.args === "function" ? c.args(ctx) : c.args;
      const res = await client.callTool({ name, arguments: args });
      if (c.expectError) {
        // A tool whose effect needs what the test sandbox lacks (a network,
        // a program): its call must fail as an isError result saying why.
        return !res.isError ? `not an isError result: ${JSON.stringify(res.structuredContent)}` :
          !textOf(res).includes(c.expectError) ? `text ${JSON.stringify(textOf(res))}, want ${JSON.stringify(c.expectError)}` : null;
      }
      if (res.isError) return `isError: ${textOf(res)}`;
      const id = res._meta?.[META_SANDBOX];
      if (!id) return `no ${META_SANDBOX} in _meta`;
      if (ctx.sandbox && id !== ctx.sandbox) return `ran in ${id}, the session's sandbox is ${ctx.sandbox}`;
      ctx.sandbox = id;
      ctx.results[name] = res.structuredContent;
      if (!res.structuredContent) return "no structuredContent";
      return c.check(res.structuredContent, textOf(res));
    });
    await check(`${name}: unknown parameter`, async () => {
      const args = { ...(typeof c.args === "function" ? c.args(ctx) : c.args), bogus_param: 1 };
      const res = await client.callTool({ name, arguments: args });
      return !res.isError ? "not an isError result" :
        !textOf(res).includes('unknown parameter "bogus_param"') ? `text ${JSON.stringify(textOf(res))}` : null;
    });
    if (c.outOfRange) {
      await check(`${name}: out-of-range argument`, async () => {
        const res = await client.callTool({ name, arguments: c.outOfRange.args });
        return !res.isError ? "not an isError result" :
          !textOf(res).includes(c.outOfRange.want) ? `text ${JSON.stringify(textOf(res))}, want ${JSON.stringify(c.outOfRange.want)}` : null;
      });
    }
  }
  for (const t of tools) {
    if (!cases[t.name]) {
      report(`${t.name}: call`, "the server lists this tool and mcp-client.mjs has no case for it: add one to `cases`");
    }
  }

  await check("unknown tool", async () => {
    const res = await client.callTool({ name: "no_such_tool", arguments: {} });
    return !res.isError ? "not an isError result" :
      !textOf(res).includes('"no_such_tool"') ? `text ${JSON.stringify(textOf(res))}` : null;
  });
  if (byName.has("sandbox.exec")) {
    await check("files persist in the session sandbox", async () => {
      const w = await client.callTool({ name: "sandbox.exec", arguments: { runtime: "sh", code: "echo kept > /tmp/mcp-persist" } });
      const r = await client.callTool({ name: "sandbox.exec", arguments: { runtime: "sh", code: "cat /tmp/mcp-persist" } });
      return w.isError || r.isError ? `isError: ${textOf(w)} ${textOf(r)}` :
        r.structuredContent?.stdout !== "kept\n" ? `read back ${JSON.stringify(r.structuredContent)}` :
        r._meta?.[META_SANDBOX] !== w._meta?.[META_SANDBOX] ? "the two calls ran in different sandboxes" : null;
    });
    await check("sandbox_id names the session sandbox", async () => {
      const res = await client.callTool({ name: "sandbox.exec", arguments: { runtime: "sh", code: "cat /tmp/mcp-persist", sandbox_id: ctx.sandbox } });
      return res.isError ? `isError: ${textOf(res)}` :
        res.structuredContent?.stdout !== "kept\n" || res._meta?.[META_SANDBOX] !== ctx.sandbox ? `got ${JSON.stringify(res)}` : null;
    });
    await check("sandbox_id of no sandbox", async () => {
      const res = await client.callTool({ name: "sandbox.exec", arguments: { runtime: "sh", code: "true", sandbox_id: "aaaaaaaaaaaaaaaaaaaaaaaaaa" } });
      return !res.isError || !textOf(res).includes("sandbox not found") ? `got ${JSON.stringify(res)}` : null;
    });
  }

  if (ctx.sandbox) console.log(`session sandbox ${ctx.sandbox}`);
  if (transport instanceof StreamableHTTPClientTransport) {
    await transport.terminateSession(); // DELETE /mcp: the daemon deletes the session sandbox
  }
  await client.close();
  console.log(`${passed} passed, ${failed} failed`);
  process.exit(failed ? 1 : 0);
}

main().catch((e) => {
  console.log(`FAIL run: ${e?.stack ?? e}`);
  console.log(`${passed} passed, ${failed + 1} failed`);
  process.exit(2);
});
