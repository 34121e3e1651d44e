// Build: the SDK is plain ES2020 modules, so the build copies them to dist/ after a syntax check.
// No bundler and no network: it runs offline.
import { mkdir, copyFile, readFile } from "node:fs/promises";
import { fileURLToPath } from "node:url";
import { dirname, join } from "node:path";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
await mkdir(join(root, "dist"), { recursive: true });
for (const file of ["paycred.js", "paycred.d.ts"]) {
  await copyFile(join(root, "src", file), join(root, "dist", file));
}
// Fail the build if the module does not load.
const mod = await import(join(root, "dist", "paycred.js"));
if (typeof mod.Paycred !== "function") throw new Error("dist/paycred.js exports no Paycred");
const types = await readFile(join(root, "dist", "paycred.d.ts"), "utf8");
if (!types.includes("verifyPurchaseIntent")) throw new Error("paycred.d.ts is incomplete");
console.log("built dist/paycred.js and dist/paycred.d.ts");
