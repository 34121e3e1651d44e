// What the browser tests share: a free port, `paycred serve --dev` started and stopped, and
// Debian's Chromium (CHROMIUM names another binary).
import { spawn } from "node:child_process";
import { createServer } from "node:net";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";
import { CHROMIUM_ARGS } from "./chromium.mjs";

export const here = dirname(fileURLToPath(import.meta.url));
export const repo = resolve(here, "../../..");
/** The paycred binary: PAYCRED_BIN, or target/debug/paycred. */
export const bin = resolve(process.env.PAYCRED_BIN || join(repo, "target/debug/paycred"));
/** Where the screenshots go. */
export const shots = join(repo, "target/browser");
/** The longest wait of one step in a page. */
export const STEP = 15_000;

/** A TCP port free on 127.0.0.1 now. */
export function freePort() {
  return new Promise((ok, fail) => {
    const s = createServer();
    s.on("error", fail);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => ok(port));
    });
  });
}

/**
 * Starts `bin serve --dev` in `work` on 127.0.0.1:`port` (its browser proxy on another free
 * port) with `args`; resolves once /health answers (30 s at most). `server.log` is stdout and stderr, `server.stderr` stderr alone;
 * `server.stop()` ends it (SIGTERM, SIGKILL after 5 s).
 */
export async function startPaycred(bin, work, port, args = []) {
  const proxy = `127.0.0.1:${await freePort()}`;
  const listen = ["--listen", `127.0.0.1:${port}`, "--browser-proxy-listen", proxy];
  return serve(bin, work, port, ["--dev", "--dev-dir", join(work, "dev"), ...listen, ...args]);
}

/** `startPaycred` with a configuration file of its own, listening on 127.0.0.1:`port`. */
export function startPaycredWithConfig(bin, work, port, config) {
  return serve(bin, work, port, ["-c", config]);
}

async function serve(bin, work, port, args) {
  const base = `http://127.0.0.1:${port}`;
  const child = spawn(bin, ["serve", ...args], {
    cwd: work,
    env: { ...process.env, RUST_LOG: "info" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const server = {
    base,
    log: "",
    stderr: "",
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = new Promise((r) => child.once("exit", r));
      child.kill("SIGTERM");
      const timer = setTimeout(() => child.kill("SIGKILL"), 5_000);
      await exited;
      clearTimeout(timer);
    },
  };
  child.stdout.on("data", (d) => (server.log += d));
  child.stderr.on("data", (d) => {
    server.log += d;
    server.stderr += d;
  });
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline && child.exitCode === null) {
    if (await fetch(`${base}/health`).then((r) => r.ok, () => false)) return server;
    await new Promise((r) => setTimeout(r, 100));
  }
  await server.stop();
  throw new Error(`paycred did not start:\n${server.log}`);
}

/** Debian's Chromium, headless, with the shared flags; `options` adds to Playwright's. */
export function launchChromium(options = {}) {
  return chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    headless: true,
    timeout: 60_000,
    ...options,
    args: [...CHROMIUM_ARGS, ...(options.args || [])],
  });
}
