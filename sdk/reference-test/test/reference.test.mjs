// The reference client (@basis-theory-ai/react, exact version in package.json) in Debian's
// Chromium, from a page of another origin, against the real paycred on localhost:3000 (the
// client's `environment: "local"`). The page is served from 127.0.0.1 on its own port; every
// request to any other host is refused and listed. Run with `npm test` after `npm run build`;
// PAYCRED_BIN names the binary. Every process started here is stopped in `after`.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { createServer } from "node:http";
import { createServer as createTcp } from "node:net";
import { mkdtemp, mkdir, rm, readFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve, dirname, extname, normalize } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";
import { CHROMIUM_ARGS as SHARED_CHROMIUM_ARGS } from "../../js/test/chromium.mjs";

const here = dirname(fileURLToPath(import.meta.url));
const repo = resolve(here, "../../..");
const dist = resolve(here, "../dist");
const bin = process.env.PAYCRED_BIN || join(repo, "target/debug/paycred");
const shots = join(repo, "target/browser");
const PAYCRED = "http://localhost:3000";
const CHROMIUM_ARGS = [
  ...SHARED_CHROMIUM_ARGS,
  // The page has no network beyond this machine: every other host fails to resolve.
  "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1, EXCLUDE localhost",
];
const STEP = 15_000;

let server;
let serverLog = "";
let work;
let statics;
let origin;
/** The same page from an origin paycred does not list. */
let strangerStatics;
let stranger;
let browser;
/** Requests the page made to paycred: "METHOD path → status". */
const exchanges = [];
/** Requests to hosts other than 127.0.0.1 / localhost (refused). */
const outside = [];
/** The page's console, printed when a test fails. */
const consoleLines = [];

/** Fails clearly when something already listens on 127.0.0.1:3000. */
function portFree(port) {
  return new Promise((ok, fail) => {
    const s = createTcp();
    s.on("error", (e) =>
      fail(new Error(`port ${port} is taken (${e.code}): the reference client calls ${PAYCRED}; stop what listens there`)),
    );
    s.listen(port, "127.0.0.1", () => s.close(() => ok()));
  });
}

/** A TCP port free on 127.0.0.1 now. */
function freePort() {
  return new Promise((ok, fail) => {
    const s = createTcp();
    s.on("error", fail);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => ok(port));
    });
  });
}

function serveStatic() {
  const types = { ".html": "text/html", ".js": "text/javascript" };
  return new Promise((ok) => {
    const s = createServer(async (req, res) => {
      const path = normalize(new URL(req.url, "http://x").pathname).replace(/^\/+/, "") || "index.html";
      try {
        const body = await readFile(join(dist, path));
        res.writeHead(200, { "content-type": types[extname(path)] || "application/octet-stream" });
        res.end(body);
      } catch {
        res.writeHead(404).end();
      }
    });
    s.listen(0, "127.0.0.1", () => ok(s));
  });
}

async function waitHealthy(deadline) {
  while (Date.now() < deadline) {
    try {
      if ((await fetch(`http://127.0.0.1:3000/health`)).ok) return;
    } catch {
      // not yet
    }
    if (server.exitCode !== null) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`paycred did not start on 127.0.0.1:3000:\n${serverLog}`);
}

async function api(method, path, token, body) {
  const r = await fetch(`http://127.0.0.1:3000${path}`, {
    method,
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    body: body && JSON.stringify(body),
  });
  return { status: r.status, json: await r.json().catch(() => null) };
}

before(async () => {
  await portFree(3000);
  work = await mkdtemp(join(tmpdir(), "paycred-reference-"));
  await mkdir(shots, { recursive: true });
  statics = await serveStatic();
  origin = `http://127.0.0.1:${statics.address().port}`;
  strangerStatics = await serveStatic();
  stranger = `http://127.0.0.1:${strangerStatics.address().port}`;
  server = spawn(
    bin,
    ["serve", "--dev", "--dev-dir", join(work, "dev"), "--listen", "127.0.0.1:3000", "--allow-origin", origin,
      // The browser proxy is not used here: any free port.
      "--browser-proxy-listen", `127.0.0.1:${await freePort()}`],
    { cwd: work, env: { ...process.env, RUST_LOG: "info" }, stdio: ["ignore", "pipe", "pipe"] },
  );
  server.stdout.on("data", (d) => (serverLog += d));
  server.stderr.on("data", (d) => (serverLog += d));
  await waitHealthy(Date.now() + 30_000);
  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: CHROMIUM_ARGS,
    timeout: 30_000,
  });
});

after(async () => {
  await browser?.close().catch(() => {});
  if (server && server.exitCode === null) {
    server.kill("SIGTERM");
    await new Promise((r) => {
      const t = setTimeout(() => {
        server.kill("SIGKILL");
        r();
      }, 5_000);
      server.once("exit", () => {
        clearTimeout(t);
        r();
      });
    });
  }
  await new Promise((r) => (statics ? statics.close(r) : r()));
  await new Promise((r) => (strangerStatics ? strangerStatics.close(r) : r()));
  if (work) await rm(work, { recursive: true, force: true });
});

/** A fresh entity with a card and a network-token intent in `verify`. */
async function intentInVerify() {
  const session = await (await fetch("http://127.0.0.1:3000/demo/session")).json();
  const { privateToken, publicToken, entityId } = session;
  assert.ok(privateToken && publicToken && entityId, JSON.stringify(Object.keys(session)));
  const pm = await api("POST", "/projects/dev/payment-methods", privateToken, {
    entityId,
    card: { number: "4242424242424242", expirationMonth: "12", expirationYear: "2030", cvc: "123" },
  });
  assert.equal(pm.status, 201, JSON.stringify(pm.json));
  const pi = await api("POST", "/projects/dev/purchase-intents", privateToken, {
    entityId,
    credentialType: "network-token",
    paymentMethodId: pm.json.id,
    mandates: [{ type: "maxAmount", value: "100.00", details: { currency: "840" } }],
  });
  assert.equal(pi.status, 201, JSON.stringify(pi.json));
  assert.equal(pi.json.status, "verify");
  return { privateToken, publicToken, id: pi.json.id };
}

async function openPage(publicToken, intent, from = origin) {
  const context = await browser.newContext({ viewport: { width: 900, height: 760 } });
  const page = await context.newPage();
  page.setDefaultTimeout(STEP);
  // Not page.route(): with interception on, Playwright answers CORS preflights itself, and
  // paycred's own answer is what is tested. Other hosts fail to resolve (CHROMIUM_ARGS).
  page.on("requestfailed", (r) => {
    const url = new URL(r.url());
    if (url.hostname !== "127.0.0.1" && url.hostname !== "localhost") {
      outside.push(`${r.method()} ${url.origin}${url.pathname} (${r.failure()?.errorText})`);
    }
  });
  page.on("console", (m) => consoleLines.push(`${m.type()}: ${m.text()}`));
  page.on("pageerror", (e) => consoleLines.push(`pageerror: ${e.message}`));
  page.on("response", (r) => {
    const url = new URL(r.url());
    if (url.port === "3000") {
      const action = JSON.parse(r.request().postData() || "{}").action;
      exchanges.push(`${r.request().method()} ${url.pathname} ${action} → ${r.status()} ${r.statusText()}`);
    }
  });
  const q = new URLSearchParams({ jwt: publicToken, project: "dev", intent });
  await page.goto(`${from}/index.html?${q}`);
  return { context, page };
}

/** Types `code` into the modal's six boxes and confirms; paycred's answer to VALIDATE_OTP. */
async function enterCode(page, code) {
  for (let i = 0; i < 6; i++) await page.locator(`#otp-${i}`).fill(code[i]);
  const [answer] = await Promise.all([
    page.waitForResponse((r) => r.url().endsWith("/verify") && r.request().method() === "POST"),
    page.getByRole("button", { name: "Confirm" }).click(),
  ]);
  return answer.json();
}

test("the reference client verifies an intent through its modal: SMS, wrong code, right code", async () => {
  const { privateToken, publicToken, id } = await intentInVerify();
  const { context, page } = await openPage(publicToken, id);
  try {
    await page.locator("#verify").click();
    await page.getByText("Text a code").click();
    await page.getByRole("button", { name: "Continue" }).click();
    await page.locator("#otp-0").waitFor();

    const wrong = await enterCode(page, "000000");
    assert.equal(wrong.status, "ERROR", JSON.stringify(wrong));
    assert.match(wrong.error.message, /Invalid code; 4 attempts remaining/);
    // This version of the client shows no message in the code step: it empties the boxes and
    // stays there for another try.
    await page.waitForFunction(() => document.getElementById("otp-0")?.value === "");
    await page.getByText("Enter Verification Code").waitFor();
    await page.screenshot({ path: join(shots, "reference-wrong-code.png") });
    assert.equal((await api("GET", `/projects/dev/purchase-intents/${id}`, privateToken)).json.status, "verify");

    assert.deepEqual(await enterCode(page, "123456"), { status: "VERIFIED" });
    await page.getByText("Your Purchase Intent has been verified.").waitFor();
    await page.screenshot({ path: join(shots, "reference-verified.png") });
    await page.locator("#result").getByText(/^resolved /).waitFor();
    const result = await page.locator("#result").textContent();
    assert.match(result, /"status":"VERIFIED"/);

    const after = await api("GET", `/projects/dev/purchase-intents/${id}`, privateToken);
    assert.equal(after.json.status, "active", JSON.stringify(after.json));
    // Preflights answered, then START, SELECT_OTP, VALIDATE_OTP (wrong, right).
    const posts = exchanges.filter((e) => e.startsWith("POST"));
    assert.equal(posts.length, 4, exchanges.join("\n"));
    assert.ok(posts.every((e) => e.includes(" → 200")), exchanges.join("\n"));
    console.log(`paycred answered the reference client:\n  ${exchanges.join("\n  ")}`);
    const preflights = serverLog.split("\n").filter((l) => l.includes("method=OPTIONS"));
    console.log(`preflights (server log):\n  ${preflights.join("\n  ")}`);
    assert.ok(preflights.length > 0 && preflights.every((l) => l.includes("status=204")));
    console.log(`refused (outside 127.0.0.1): ${outside.length ? `\n  ${outside.join("\n  ")}` : "none"}`);
  } catch (e) {
    await page.screenshot({ path: join(shots, "reference-failure.png") }).catch(() => {});
    console.log(`page console:\n${consoleLines.join("\n")}\nexchanges:\n${exchanges.join("\n")}\nrefused: ${outside.join("\n")}\nserver log:\n${serverLog.slice(-3000)}`);
    throw e;
  } finally {
    await context.close();
  }
});

test("from an origin paycred does not list, the browser refuses the call", async () => {
  const { privateToken, publicToken, id } = await intentInVerify();
  const before = serverLog.split("\n").length;
  const { context, page } = await openPage(publicToken, id, stranger);
  try {
    await page.locator("#verify").click();
    await page.getByText(/Failed to fetch/).waitFor();
    await page.screenshot({ path: join(shots, "reference-unlisted-origin.png") });
    const seen = serverLog.split("\n").slice(before).filter((l) => l.includes("route=purchase_intent_verify"));
    // Only the preflight reached paycred, refused without CORS headers; no POST was sent.
    assert.ok(seen.length >= 1, serverLog);
    assert.ok(seen.every((l) => l.includes("method=OPTIONS") && l.includes("status=403")), seen.join("\n"));
    const still = await api("GET", `/projects/dev/purchase-intents/${id}`, privateToken);
    assert.equal(still.json.status, "verify");
  } catch (e) {
    await page.screenshot({ path: join(shots, "reference-failure.png") }).catch(() => {});
    console.log(`page console:\n${consoleLines.join("\n")}\nserver log:\n${serverLog.slice(-3000)}`);
    throw e;
  } finally {
    await context.close();
  }
});
