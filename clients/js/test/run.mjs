// Unit tests of @alicia/reasoning in Node: test/*.test.ts are bundled by esbuild (the
// package's sources inside, livekit-client, msgpackr and @msgpack/msgpack from
// node_modules) into .test-out/, then run by `node --test`.

import { spawnSync } from "node:child_process";
import { readdirSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import { build } from "esbuild";

const here = dirname(fileURLToPath(import.meta.url));
const out = join(here, "..", ".test-out");
const tests = readdirSync(here).filter((f) => f.endsWith(".test.ts"));
rmSync(out, { recursive: true, force: true });
await build({
  entryPoints: tests.map((f) => join(here, f)),
  outdir: out,
  outExtension: { ".js": ".mjs" },
  bundle: true,
  platform: "node",
  format: "esm",
  target: "node20",
  external: ["livekit-client", "msgpackr", "@msgpack/msgpack", "react", "react-dom", "@livekit/components-react"],
  logLevel: "warning",
});
const files = tests.map((f) => join(out, f.replace(/\.ts$/, ".mjs")));
const run = spawnSync(process.execPath, ["--test", ...files], { stdio: "inherit" });
process.exit(run.status ?? 1);
