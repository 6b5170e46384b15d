// e2b.mjs is the E2B figure's sampler (e2b.go embeds it and runs it with
// `node --input-type=module --eval`, its working directory the one whose
// node_modules holds E2B's JS SDK). It times, inside this one process,
// Sandbox.create() → the first commands.run('true') done, through the
// official SDK configured by E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY.
//
// Protocol, one line each way: it prints {"ready":true} once the SDK is
// loaded; then for each line "sample" on stdin it takes one sample and
// prints {"ms":<create → first exec>} (the kill after it untimed) or
// {"error":"<why>"}; it exits at end of input.

import { createInterface } from "node:readline";
import { Sandbox } from "e2b";

const out = (v) => process.stdout.write(JSON.stringify(v) + "\n");

async function sample() {
  const began = performance.now();
  const s = await Sandbox.create();
  try {
    const r = await s.commands.run("true");
    const ms = performance.now() - began;
    if (r.exitCode !== 0) throw new Error(`true exited ${r.exitCode}`);
    return ms;
  } finally {
    await s.kill();
  }
}

out({ ready: true });
for await (const line of createInterface({ input: process.stdin })) {
  if (line.trim() !== "sample") continue;
  try {
    out({ ms: await sample() });
  } catch (e) {
    out({ error: `${e?.constructor?.name}: ${e?.message}` });
  }
}
