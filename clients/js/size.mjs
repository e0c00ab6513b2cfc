// The package's size as an app ships it: src/index.ts and src/react.ts bundled and
// minified with @msgpack/msgpack inside, without livekit-client, React and
// @livekit/components-react (the app has them anyway), gzipped at level 9. Prints
// `SIZE core_gzip=<bytes> all_gzip=<bytes> limit=15000` and fails above the limit.
//   the same by hand: npx esbuild src/index.ts --bundle --minify --format=esm \
//     --external:livekit-client --external:react ... | gzip -9 | wc -c

import { dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { gzipSync } from "node:zlib";

import { build } from "esbuild";

const here = dirname(fileURLToPath(import.meta.url));
const LIMIT = 15000;
const external = ["livekit-client", "react", "react-dom", "@livekit/components-react"];

/** Minified+gzipped bytes of a bundle of `contents` (an ES module in src/). */
async function gzipped(contents) {
  const out = await build({
    stdin: { contents, resolveDir: here, loader: "ts" },
    bundle: true,
    minify: true,
    format: "esm",
    target: "es2020",
    external,
    write: false,
    logLevel: "warning",
  });
  const js = out.outputFiles[0].contents;
  return [js.length, gzipSync(js, { level: 9 }).length];
}

const [coreMin, core] = await gzipped('export * from "./src/index.ts";');
const [allMin, all] = await gzipped('export * from "./src/index.ts"; export * from "./src/react.ts";');
console.log(`minified: core ${coreMin} bytes, with react layer ${allMin} bytes`);
console.log(`SIZE core_gzip=${core} all_gzip=${all} limit=${LIMIT}`);
if (all > LIMIT) process.exit(1);
