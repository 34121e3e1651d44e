// Browser checkout end to end: Debian's Chromium, driven by playwright-core, browses through
// paycred's browser proxy to test merchants and types the session's stand-ins; the merchants
// receive the real card, the browser never holds it. Run from sdk/js with
// `npm run test:browser`; PAYCRED_BIN names the binary. Only 127.0.0.1; every process started
// here is stopped in `after`.
//
// - The merchants: one Node HTTPS server with a test CA of its own (openssl, in a temp dir),
//   serving `shop.test` (a form page, a page that posts JSON, a checkout page with a card
//   iframe), `fields.pay.test` (the iframe) and `api.pay.test` (the processor's API), and
//   `analytics.test`, which the browser reaches directly (the proxy's bypass list): a host
//   outside the session. It records every request.
// - paycred: its own config, keys and data in a temp dir; the browser proxy's CA made by
//   `paycred ca --out`; project `shop` allows `shop.test` and `*.pay.test`, resolves them to the
//   merchant server (`proxy.allow_private_networks`) and trusts the merchants' CA
//   (`proxy.ca_file`).
// - Chromium trusts paycred's CA through the NSS database of a HOME of its own (certutil), never
//   through --ignore-certificate-errors; its database also trusts the merchants' CA, for
//   analytics.test. A browser whose database trusts the merchants' CA alone must fail.
// - Playwright's launch option `proxy` carries the session; a second session, of a `pan`
//   intent, rides on a context's own `proxy` option.
// - The intent's usage limit is 3: the form post, the JSON post and the card iframe's post each
//   count one use; the fourth submission is refused and the merchants receive nothing.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtemp, mkdir, readFile, rm, writeFile } from "node:fs/promises";
import { createServer as createHttps } from "node:https";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { PaycredAgent } from "../dist/paycred.js";
import { STEP, bin, freePort, launchChromium, shots, startPaycredWithConfig } from "./harness.mjs";

const exec = promisify(execFile);
const PROJECT = "shop";
const ENTITY = "agent_1";
const CARD = { number: "4242424242424242", expirationMonth: "12", expirationYear: "2031", cvc: "123" };
/** The hosts of the browser session. */
const SESSION_HOSTS = ["shop.test", "api.pay.test", "fields.pay.test"];

let work;
let merchant;
/** Every request the merchant server received: {host, method, path, headers, body}. */
const received = [];
let server;
let privateJwt;
let paymentMethod;
let agent;
let intent;
let session;
let browser;
let context;
/** Every response body the trusted browser received ({url, text} promises), and its console. */
const bodies = [];
const consoleTexts = [];
/** The page of case (b), kept open for the refused fourth submission. */
let jsonPage;

/** `n` as a form writes it: digits alone, grouped by 4 with spaces, with dashes. */
function writings(n) {
  const groups = n.match(/.{1,4}/g);
  return [n, groups.join(" "), groups.join("-")];
}

/** Asserts that `text` holds none of the real number's writings. */
function noRealNumber(text, where) {
  for (const w of writings(intent.card.number)) {
    assert.ok(!text.includes(w), `the real number (${w.length} chars) in ${where}`);
  }
}

function page(title, body, script = "") {
  return `<!doctype html><html><head><meta charset="utf-8"><title>${title}</title>
<style>body{font:16px system-ui,sans-serif;margin:24px}label{display:block;margin:8px 0}</style>
</head><body><h1>${title}</h1>${body}${script && `<script>${script}</script>`}</body></html>`;
}

function escapeHtml(s) {
  return String(s).replace(/[&<>"]/g, (c) => `&#${c.charCodeAt(0)};`);
}

/** The merchant's pages and APIs, by host. */
function route(host, method, path, body, port) {
  const html = (text) => [200, { "content-type": "text/html; charset=utf-8" }, text];
  const json = (value, extra = {}) => [200, { "content-type": "application/json", ...extra }, JSON.stringify(value)];
  const key = `${host} ${method} ${path}`;
  switch (key) {
    case "shop.test GET /form":
      return html(
        page(
          "Shop: card form",
          `<form method="post" action="/pay">
<label>Card number <input id="number" name="number" autocomplete="cc-number"></label>
<label>Expiry <input id="exp" name="exp"></label>
<label>CVC <input id="cvc" name="cvc"></label>
<label>Quantity <input id="quantity" name="quantity"></label>
<button id="submit">Pay</button></form>`,
        ),
      );
    case "shop.test POST /pay": {
      const f = new URLSearchParams(body);
      return html(
        page(
          "Shop: order placed",
          `<p id="receipt">Paid with card <span id="card">${escapeHtml(f.get("number"))}</span>,
CVC <span id="cvc">${escapeHtml(f.get("cvc"))}</span>, quantity ${escapeHtml(f.get("quantity"))}.</p>`,
        ),
      );
    }
    case "shop.test GET /json":
      return html(
        page(
          "Shop: pay by script",
          `<label>Card number <input id="number"></label><label>CVC <input id="cvc"></label>
<button id="pay">Pay</button><p id="result"></p>`,
          `document.getElementById("pay").addEventListener("click", async () => {
  const number = document.getElementById("number").value;
  const cvc = document.getElementById("cvc").value;
  const result = document.getElementById("result");
  result.textContent = "";
  // Outside the session: the analytics host (reached directly) and a *.pay.test host the
  // project allows but the session does not.
  fetch("https://analytics.test:${port}/collect", { method: "POST", body: number }).then(
    (r) => console.log("analytics " + r.status), (e) => console.log("analytics failed"));
  fetch("https://other.pay.test/collect", { method: "POST", body: number }).then(
    (r) => console.log("other " + r.status), (e) => console.log("other failed"));
  try {
    const r = await fetch("/api/orders", { method: "POST", headers: { "content-type": "application/json" },
      body: JSON.stringify({ card: { number, cvc }, amount: 1200 }) });
    const text = await r.text();
    console.log("order " + r.status + " " + text);
    result.textContent = r.ok ? "Paid with " + JSON.parse(text).card.number : "Refused " + r.status;
  } catch (e) {
    console.log("order failed");
    result.textContent = "Failed";
  }
});`,
        ),
      );
    case "shop.test POST /api/orders": {
      const order = JSON.parse(body);
      return json({ status: "paid", card: order.card, amount: order.amount });
    }
    case "shop.test GET /checkout":
      return html(
        page(
          "Shop: checkout",
          `<iframe id="fields" src="https://fields.pay.test/frame" width="600" height="260"></iframe>
<p id="token"></p>`,
          `addEventListener("message", (e) => {
  if (e.origin === "https://fields.pay.test") document.getElementById("token").textContent = e.data;
});`,
        ),
      );
    case "fields.pay.test GET /frame":
      return html(
        page(
          "Card fields",
          `<label>Card number <input id="number"></label><label>CVC <input id="cvc"></label>
<button id="tokenize">Save card</button><p id="out"></p>`,
          `document.getElementById("tokenize").addEventListener("click", async () => {
  const fd = new FormData();
  fd.append("card[number]", document.getElementById("number").value);
  fd.append("card[cvc]", document.getElementById("cvc").value);
  const r = await fetch("https://api.pay.test/v1/tokens", { method: "POST", body: fd });
  const j = await r.json();
  document.getElementById("out").textContent = "Token " + j.id + " for " + j.number;
  parent.postMessage("Card saved: " + j.id + " (" + j.number + ")", "https://shop.test");
});`,
        ),
      );
    case "api.pay.test POST /v1/tokens": {
      const field = (name) => body.match(new RegExp(`name="${name}"\\r\\n\\r\\n([^\\r]*)`))?.[1];
      const number = field("card\\[number\\]");
      return json(
        { id: "tok_1", number, last4: number?.slice(-4) },
        { "access-control-allow-origin": "https://fields.pay.test" },
      );
    }
    case "analytics.test POST /collect":
      return [204, { "access-control-allow-origin": "*" }, ""];
    default:
      return [404, { "content-type": "text/plain" }, "not found"];
  }
}

async function startMerchant(dir) {
  const run = (args) => exec("openssl", args, { cwd: dir });
  const ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"];
  await run(["req", "-x509", ...ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=merchant test CA"]);
  await run(["req", ...ec, "-keyout", "shop.key", "-out", "shop.csr", "-subj", "/CN=shop.test"]);
  const names = [...SESSION_HOSTS, "analytics.test"].map((n) => `DNS:${n}`).join(",");
  await writeFile(join(dir, "ext.cnf"), `subjectAltName=${names}\nextendedKeyUsage=serverAuth\n`);
  await run(["x509", "-req", "-in", "shop.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
    "-out", "shop.pem", "-days", "2", "-extfile", "ext.cnf"]);
  const key = await readFile(join(dir, "shop.key"));
  const cert = await readFile(join(dir, "shop.pem"));
  const s = createHttps({ key, cert }, (req, res) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => {
      const body = Buffer.concat(chunks).toString("latin1");
      const host = (req.headers.host || "").replace(/:\d+$/, "");
      const path = req.url.split("?")[0];
      received.push({ host, method: req.method, path, headers: req.headers, body });
      const [status, headers, text] = route(host, req.method, path, body, s.address().port);
      res.writeHead(status, headers).end(text);
    });
  });
  await new Promise((r) => s.listen(0, "127.0.0.1", r));
  return s;
}

/** A HOME whose NSS database trusts the CAs of `files` (Chromium on Linux reads it). */
async function nssHome(dir, files) {
  const db = join(dir, ".pki", "nssdb");
  await mkdir(db, { recursive: true });
  await exec("certutil", ["-d", `sql:${db}`, "-N", "--empty-password"]);
  for (const [i, file] of files.entries()) {
    await exec("certutil", ["-d", `sql:${db}`, "-A", "-t", "C,,", "-n", `ca${i}`, "-i", file]);
  }
  return dir;
}

/** Chromium through the session's proxy (Playwright's launch option), HOME `home`. */
function launchThroughProxy(home) {
  const { url, username, password } = session.proxy;
  return launchChromium({
    // analytics.test is reached directly: the bypass list, and its name mapped to 127.0.0.1.
    proxy: { server: url, username, password, bypass: "analytics.test" },
    args: ["--host-resolver-rules=MAP analytics.test 127.0.0.1"],
    env: { ...process.env, HOME: home },
  });
}

/** A call of paycred's API with the private JWT. */
async function api(method, path, body) {
  const r = await fetch(server.base + path, {
    method,
    headers: { authorization: `Bearer ${privateJwt}`, "content-type": "application/json" },
    body: body && JSON.stringify(body),
  });
  const json = await r.json();
  assert.ok(r.ok, `${method} ${path}: ${r.status} ${JSON.stringify(json)}`);
  return json;
}

/** An intent of the card (`virtual-card` or `pan`), usable `uses` times. */
function newIntent(uses, credentialType = "virtual-card") {
  return api("POST", `/projects/${PROJECT}/purchase-intents`, {
    entityId: ENTITY,
    credentialType,
    paymentMethodId: paymentMethod,
    mandates: [
      { type: "maxAmount", value: "50.00", details: { currency: "840" } },
      { type: "usageLimit", value: String(uses), details: { count: uses } },
    ],
  });
}

/** The requests the merchants received after the first `n`. */
function since(n) {
  return received.slice(n);
}

before(async () => {
  work = await mkdtemp(join(tmpdir(), "paycred-checkout-"));
  await mkdir(shots, { recursive: true });
  const certs = join(work, "merchant");
  await mkdir(certs);
  merchant = await startMerchant(certs);
  const port = merchant.address().port;

  await exec(bin, ["ca", "--out", join(work, "ca")]);
  await exec(bin, ["master-key", "--out", join(work, "master.key")]);
  await exec("openssl", ["genpkey", "-algorithm", "ed25519", "-out", join(work, "jwt.key")]);
  await exec("openssl", ["pkey", "-in", join(work, "jwt.key"), "-pubout", "-out", join(work, "jwt.pub")]);
  const listen = await freePort();
  const proxyPort = await freePort();
  const resolve = SESSION_HOSTS.map((h) => `'${h}:443': '127.0.0.1:${port}'`).join(", ");
  const config = join(work, "paycred.yaml");
  await writeFile(
    config,
    `listen: 127.0.0.1:${listen}
data_dir: data
master_key_file: master.key
cvc_retention: 1h
server: {grace_period: 0s, graceful_shutdown_timeout: 1s}
browser_proxy: {listen: 127.0.0.1:${proxyPort}, ca: {cert_file: ca/ca.pem, key_file: ca/ca-key.pem}}
projects:
  - id: ${PROJECT}
    jwt: {keys: [{kid: k1, public_key_file: jwt.pub}]}
    pan: enabled
    proxy: {allow_private_networks: true, ca_file: merchant/ca.pem}
    browser_checkout:
      allowed_hosts: [shop.test, '*.pay.test']
      max_ttl: 30m
      resolve: {${resolve}}
`,
  );
  server = await startPaycredWithConfig(bin, work, listen, config);
  const { stdout: jwt } = await exec(bin, [
    "jwt", "--key", join(work, "jwt.key"), "--kid", "k1", "--project", PROJECT, "--sub", ENTITY,
    "--role", "private", "--ttl", "10m",
  ]);
  privateJwt = jwt.trim();
  const pm = await api("POST", `/projects/${PROJECT}/payment-methods`, { entityId: ENTITY, card: CARD });
  paymentMethod = pm.id;
  intent = await newIntent(3);
  assert.match(intent.card.number, /^\d{15,16}$/);
  agent = new PaycredAgent({ baseUrl: server.base, jwt: privateJwt });
  session = await agent.createBrowserSession(intent.id, { allowedHosts: SESSION_HOSTS, ttl: 600 });
  assert.equal(session.status, "active");
  assert.notEqual(session.card.number, intent.card.number);
  await writeFile(join(work, "paycred-ca.pem"), session.caCertificate);

  const home = await nssHome(join(work, "home"), [join(work, "paycred-ca.pem"), join(certs, "ca.pem")]);
  browser = await launchThroughProxy(home);
  context = await browser.newContext({ viewport: { width: 720, height: 700 } });
  context.on("response", (r) => {
    bodies.push(r.body().then((b) => ({ url: r.url(), text: b.toString("latin1") }), () => null));
  });
  context.on("console", (m) => consoleTexts.push(m.text()));
});

after(async () => {
  if (browser) await browser.close().catch(() => {});
  if (server) await server.stop();
  if (merchant) {
    merchant.closeAllConnections();
    await new Promise((r) => merchant.close(r));
  }
  if (work) await rm(work, { recursive: true, force: true });
  // paycred's log never carries the real number, nor its stand-in.
  if (intent && session) {
    const numbers = [CARD.number, intent.card.number, session.card.number];
    for (const n of numbers.flatMap(writings)) {
      assert.ok(!(server?.log || "").includes(n), "a card number was logged");
    }
  }
});

async function newPage() {
  const p = await context.newPage();
  p.setDefaultTimeout(STEP);
  return p;
}

test("(a) a form post (urlencoded): the shop gets the real card, the page shows the stand-ins", async () => {
  const p = await newPage();
  const n = received.length;
  const answer = await p.goto("https://shop.test/form");
  assert.equal(answer.status(), 200);
  // TLS to the browser is paycred's: a leaf of its CA, which the browser trusts.
  const details = await answer.securityDetails();
  assert.match(details.issuer, /^paycred browser checkout CA /);
  assert.equal(details.subjectName, "shop.test");
  const spaced = writings(session.card.number)[1];
  await p.fill("#number", spaced);
  await p.fill("#exp", `${session.card.expirationMonth}/${session.card.expirationYear}`);
  await p.fill("#cvc", session.card.cvc);
  await p.fill("#quantity", session.card.cvc);
  await Promise.all([p.waitForURL("https://shop.test/pay"), p.click("#submit")]);
  const post = since(n).find((r) => r.path === "/pay");
  const form = new URLSearchParams(post.body);
  assert.equal(form.get("number"), writings(intent.card.number)[1], "the real number, spaced as typed");
  assert.equal(form.get("cvc"), intent.card.cvc);
  assert.equal(form.get("quantity"), session.card.cvc, "a quantity is not a CVC");
  assert.equal(post.headers["proxy-authorization"], undefined);
  const text = await p.locator("#receipt").textContent();
  assert.ok(text.includes(spaced) && text.includes(`CVC ${session.card.cvc}`), text);
  noRealNumber(await p.content(), "the DOM");
  await p.screenshot({ path: join(shots, "checkout-form.png"), fullPage: true });
  await p.close();
});

test("(b) a page script posts JSON: real values to the shop; hosts outside the session get none", async () => {
  jsonPage = await newPage();
  const p = jsonPage;
  await p.goto("https://shop.test/json");
  const n = received.length;
  await p.fill("#number", session.card.number);
  await p.fill("#cvc", session.card.cvc);
  await p.click("#pay");
  await p.locator("#result").filter({ hasText: "Paid with" }).waitFor();
  const order = since(n).find((r) => r.path === "/api/orders");
  assert.deepEqual(JSON.parse(order.body).card, { number: intent.card.number, cvc: intent.card.cvc });
  assert.equal(await p.locator("#result").textContent(), `Paid with ${session.card.number}`);
  // analytics.test, reached without the proxy, receives the stand-in untouched.
  const deadline = Date.now() + STEP;
  while (!received.some((r) => r.host === "analytics.test") && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 50));
  }
  const beacon = since(n).find((r) => r.host === "analytics.test");
  assert.equal(beacon?.body, session.card.number, "the analytics host got the stand-in as typed");
  // other.pay.test: allowed by the project, not by the session; the proxy refuses the tunnel.
  assert.ok(!received.some((r) => r.host === "other.pay.test"));
  noRealNumber(await p.content(), "the DOM");
  await p.screenshot({ path: join(shots, "checkout-json.png"), fullPage: true });
});

test("(c) a card iframe of fields.pay.test posts multipart to api.pay.test (hosted fields)", async () => {
  const p = await newPage();
  await p.goto("https://shop.test/checkout");
  const frame = p.frameLocator("#fields");
  const n = received.length;
  await frame.locator("#number").fill(writings(session.card.number)[2]);
  await frame.locator("#cvc").fill(session.card.cvc);
  await frame.locator("#tokenize").click();
  await p.locator("#token").filter({ hasText: "Card saved" }).waitFor();
  const post = since(n).find((r) => r.host === "api.pay.test");
  assert.match(post.headers["content-type"], /^multipart\/form-data/);
  assert.ok(post.body.includes(`\r\n\r\n${writings(intent.card.number)[2]}\r\n`), "the real number, dashed");
  assert.ok(post.body.includes(`\r\n\r\n${intent.card.cvc}\r\n`), "the real CVC");
  assert.ok(!post.body.includes(session.card.number.slice(6)), "no stand-in left");
  const shown = await p.locator("#token").textContent();
  assert.equal(shown, `Card saved: tok_1 (${writings(session.card.number)[2]})`);
  for (const f of p.frames()) noRealNumber(await f.content(), `the DOM of ${f.url()}`);
  await p.screenshot({ path: join(shots, "checkout-fields.png"), fullPage: true });
  await p.close();
});

test("(d) after the usage limit (3 uses) the next submission is refused; the shop receives nothing", async () => {
  const got = await agent.getBrowserSession(intent.id, session.id);
  assert.equal(got.status, "ended");
  assert.equal(got.uses, 3);
  const n = received.length;
  const p = jsonPage;
  await p.fill("#number", session.card.number);
  await p.fill("#cvc", session.card.cvc);
  await p.click("#pay");
  // The open tunnel answers paycred's refusal; the shop never sees the request.
  await p.locator("#result").filter({ hasText: /^Refused (403|409)$/ }).waitFor();
  // A new page. Over HTTP/1.1 the refusal closed the tunnel, so Chromium opens a new one and
  // the proxy answers the ended session's CONNECT 407 (the credentials Playwright gives again
  // do not help). Over h2 the open connection to shop.test may be reused, and the proxy answers
  // its request 403: the session has ended. Either way the form is not served.
  const q = await newPage();
  const statuses = [];
  q.on("response", (r) => statuses.push(r.status()));
  const nav = await q.goto("https://shop.test/form").then((r) => r, (e) => e);
  if (nav instanceof Error) {
    assert.match(nav.message, /net::ERR_(HTTP_RESPONSE_CODE_FAILURE|INVALID_AUTH_CREDENTIALS)/);
    assert.deepEqual(statuses, [407]);
  } else {
    assert.equal(nav.status(), 403, "the ended session's refusal on the open connection");
    assert.deepEqual(statuses, [403]);
  }
  await p.screenshot({ path: join(shots, "checkout-used-up.png"), fullPage: true });
  assert.deepEqual(
    since(n).filter((r) => r.host !== "analytics.test").map((r) => `${r.host} ${r.path}`),
    [],
    "the shop received nothing",
  );
  await q.close();
});

test("every response body, console message and page the browser had holds only stand-ins", async () => {
  const seen = (await Promise.all(bodies)).filter(Boolean);
  assert.ok(seen.some((b) => b.url === "https://shop.test/pay"), "the receipt was seen");
  assert.ok(seen.some((b) => b.url === "https://api.pay.test/v1/tokens"), "the processor's answer was seen");
  for (const b of seen) noRealNumber(b.text, `the answer of ${b.url}`);
  assert.ok(consoleTexts.some((t) => t.startsWith("order 200")), consoleTexts.join("\n"));
  for (const t of consoleTexts) noRealNumber(t, "the console");
  assert.ok(consoleTexts.includes("other failed"), "other.pay.test is refused");
  assert.ok(consoleTexts.includes("analytics 204"), "analytics.test answered");
  // The merchants got the real number (spaced, plain, dashed) and never the stand-in, but for
  // the analytics host outside the session.
  for (const r of received.filter((r) => r.host !== "analytics.test")) {
    for (const w of writings(session.card.number)) {
      assert.ok(!r.body.includes(w) && !r.body.includes(w.replace(/ /g, "+")), `a stand-in reached ${r.host}`);
    }
  }
});

test("Playwright's per-context proxy option: a context of its own for one session", async () => {
  // A browser launched without a proxy; the context carries the session's proxy (one browser,
  // a context per checkout). A session of a fresh `pan` intent (the card itself, its CVC
  // retained), one use.
  const other = await newIntent(1, "pan");
  const fresh = await agent.createBrowserSession(other.id, { allowedHosts: ["shop.test"] });
  const home = await nssHome(join(work, "home-flags"), [join(work, "paycred-ca.pem")]);
  const plain = await launchChromium({ env: { ...process.env, HOME: home } });
  try {
    const { url, username, password } = fresh.proxy;
    const ctx = await plain.newContext({ proxy: { server: url, username, password } });
    const p = await ctx.newPage();
    p.setDefaultTimeout(STEP);
    await p.goto("https://shop.test/form");
    const n = received.length;
    await p.fill("#number", fresh.card.number);
    await p.fill("#cvc", fresh.card.cvc);
    await Promise.all([p.waitForURL("https://shop.test/pay"), p.click("#submit")]);
    const form = new URLSearchParams(since(n).find((r) => r.path === "/pay").body);
    assert.equal(form.get("number"), CARD.number);
    assert.equal(form.get("cvc"), CARD.cvc);
    assert.ok((await p.locator("#receipt").textContent()).includes(fresh.card.number));
    const html = await p.content();
    assert.ok(!html.includes(CARD.number), "the real number in the DOM");
    await p.screenshot({ path: join(shots, "checkout-context-proxy.png"), fullPage: true });
    assert.equal((await agent.getBrowserSession(other.id, fresh.id)).uses, 1);
  } finally {
    await plain.close();
  }
});

test("a browser that does not trust paycred's CA cannot load the page (certificate error)", async () => {
  // The merchants' CA alone: the leaf paycred mints is not trusted.
  const home = await nssHome(join(work, "home-untrusted"), [join(work, "merchant", "ca.pem")]);
  // A session of a fresh intent (the first one ended with its intent).
  const other = await newIntent(1);
  const fresh = await agent.createBrowserSession(other.id, { allowedHosts: ["shop.test"] });
  const { url, username, password } = fresh.proxy;
  const untrusted = await launchChromium({
    proxy: { server: url, username, password },
    env: { ...process.env, HOME: home },
  });
  try {
    const p = await untrusted.newPage();
    const n = received.length;
    const nav = await p.goto("https://shop.test/form", { timeout: STEP }).then((r) => r, (e) => e);
    assert.ok(nav instanceof Error, "the page loaded");
    assert.match(nav.message, /net::ERR_CERT_AUTHORITY_INVALID/);
    assert.equal(received.length, n, "the shop received nothing");
    assert.equal((await agent.getBrowserSession(other.id, fresh.id)).uses, 0);
  } finally {
    await untrusted.close();
  }
});
