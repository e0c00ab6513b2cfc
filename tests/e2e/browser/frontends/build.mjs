// Bundle the test frontends (react.tsx, stock.tsx, session.tsx) with esbuild from node_modules into
// OUTDIR (argv[2]), with their HTML pages. Nothing is fetched: every import resolves in
// this repository. @alicia/reasoning is bundled from its sources (clients/js/src, what its
// dist/ is built from), so a stale or half-rebuilt dist/ never stands in for the package.
//
//   node tests/e2e/browser/frontends/build.mjs OUTDIR

import { copyFileSync, mkdirSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

import { build } from "esbuild";

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(here, "..", "..", "..", "..");
const outdir = process.argv[2];
if (!outdir) {
  console.error("usage: node build.mjs OUTDIR");
  process.exit(2);
}

const packageSources = {
  name: "alicia-reasoning-sources",
  setup(b) {
    b.onResolve({ filter: /^@alicia\/reasoning(\/react)?$/ }, (args) => ({
      path: join(root, "clients", "js", "src", args.path.endsWith("/react") ? "react.ts" : "index.ts"),
    }));
  },
};

mkdirSync(outdir, { recursive: true });
await build({
  absWorkingDir: root,
  entryPoints: {
    react: join(here, "react.tsx"),
    stock: join(here, "stock.tsx"),
    session: join(here, "session.tsx"),
  },
  outdir,
  bundle: true,
  format: "esm",
  target: "es2020",
  jsx: "automatic",
  define: { "process.env.NODE_ENV": '"production"' },
  plugins: [packageSources],
  sourcemap: true,
  logLevel: "warning",
});
for (const page of ["react.html", "stock.html", "session.html"]) copyFileSync(join(here, page), join(outdir, page));
console.log(`built ${outdir}`);
