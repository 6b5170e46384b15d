// e2b-app.mjs is another application beside e2b-scenarios.mjs: a separate
// process whose E2B SDK is configured by its own environment (E2B_API_KEY
// another key). The keys scenarios run it and check what it could see and do.
// It prints one JSON object on stdout.
//
//   node e2b-app.mjs create <run> <scenario>   makes a sandbox, prints {id}
//   node e2b-app.mjs probe <own id> <other id> reaches for the other key's sandbox
//   node e2b-app.mjs badkey <id>               calls the control plane (E2B_API_KEY is wrong)

import { Sandbox } from "e2b";
import { errorName } from "./e2b-lib.mjs";

async function caught(f) {
  try {
    const v = await f();
    return { value: v ?? null, error: "none" };
  } catch (e) {
    return { error: errorName(e), message: String(e?.message ?? e).slice(0, 300) };
  }
}

async function listAll() {
  const ids = [];
  const p = Sandbox.list({ limit: 100 });
  while (p.hasNext) ids.push(...(await p.nextItems()).map((s) => s.sandboxId));
  return ids;
}

const [op, a, b] = process.argv.slice(2);
let out;
switch (op) {
  case "create": {
    const s = await Sandbox.create({ timeoutMs: 300_000, metadata: { suite: a, scenario: b, app: "second" } });
    out = { id: s.sandboxId };
    break;
  }
  case "probe": {
    const [own, other] = [a, b];
    const mine = await Sandbox.connect(own);
    const info = await mine.getInfo();
    const ran = await mine.commands.run("echo mine");
    // The other sandbox's id with this app's own access token: the SDK's
    // data-plane client for it, as connect would build it.
    const stolen = new Sandbox({ sandboxId: other, envdVersion: info.envdVersion, envdAccessToken: mine.envdAccessToken });
    out = {
      ownToken: Boolean(mine.envdAccessToken),
      ownStdout: ran.stdout,
      listed: await listAll(),
      getInfo: await caught(() => Sandbox.getInfo(other)),
      kill: await caught(() => Sandbox.kill(other)),
      setTimeout: await caught(() => Sandbox.setTimeout(other, 60_000)),
      connect: await caught(async () => (await Sandbox.connect(other)).sandboxId),
      run: await caught(async () => (await stolen.commands.run("echo stolen")).stdout),
      read: await caught(() => stolen.files.read("/etc/hostname")),
      write: await caught(() => stolen.files.write("/tmp/stolen", "x")),
    };
    break;
  }
  case "badkey":
    out = {
      create: await caught(async () => (await Sandbox.create({ timeoutMs: 60_000 })).sandboxId),
      list: await caught(() => listAll()),
      getInfo: await caught(() => Sandbox.getInfo(a)),
      kill: await caught(() => Sandbox.kill(a)),
      connect: await caught(async () => (await Sandbox.connect(a)).sandboxId),
    };
    break;
  default:
    console.error(`e2b-app.mjs: unknown operation ${op}`);
    process.exit(2);
}
console.log(JSON.stringify(out));
