// Bundles the test page (src/page.jsx and the reference client) into dist/ with esbuild.
import { build } from "esbuild";
import { writeFile, mkdir } from "node:fs/promises";
import { fileURLToPath } from "node:url";

// See src/react-dom-client.mjs.
const reactDomClient = {
  name: "react-dom-client",
  setup(b) {
    b.onResolve({ filter: /^react-dom\/client$/ }, () => ({
      path: fileURLToPath(new URL("../src/react-dom-client.mjs", import.meta.url)),
    }));
  },
};

await mkdir("dist", { recursive: true });
await build({
  entryPoints: ["src/page.jsx"],
  bundle: true,
  format: "esm",
  splitting: true,
  outdir: "dist",
  jsx: "automatic",
  define: { "process.env.NODE_ENV": '"production"' },
  logLevel: "warning",
  plugins: [reactDomClient],
});
await writeFile(
  "dist/index.html",
  '<!doctype html><meta charset="utf-8"><title>Shop</title><div id="root"></div><script type="module" src="/page.js"></script>\n',
);
