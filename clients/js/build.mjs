// Build @alicia/reasoning: ESM bundles of src/index.ts and src/react.ts (a shared chunk
// between them) with esbuild into dist/, then the .d.ts files with tsc. Peer dependencies
// and @msgpack/msgpack stay imports (the app's bundler resolves them once).

import { execFileSync } from "node:child_process";
import { rmSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import { build } from "esbuild";

const here = dirname(fileURLToPath(import.meta.url));
export const EXTERNAL = ["livekit-client", "react", "react-dom", "@livekit/components-react", "@msgpack/msgpack"];

rmSync(join(here, "dist"), { recursive: true, force: true });
await build({
  absWorkingDir: here,
  entryPoints: ["src/index.ts", "src/react.ts"],
  outdir: "dist",
  bundle: true,
  splitting: true,
  format: "esm",
  target: "es2020",
  sourcemap: true,
  external: EXTERNAL,
  chunkNames: "chunks/[name]-[hash]",
  logLevel: "warning",
});
const tsc = join(dirname(createRequire(import.meta.url).resolve("typescript/package.json")), "bin", "tsc");
execFileSync(process.execPath, [tsc, "-p", here], { stdio: "inherit" });
