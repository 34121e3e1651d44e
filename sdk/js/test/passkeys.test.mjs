// Passkeys in the browser: the real paycred server (`paycred serve --dev`, passkeys on
// localhost) and Debian's Chromium with its virtual authenticator (CDP WebAuthn domain), driven
// by playwright-core. The SDK registers a passkey and verifies a purchase intent with it; a
// page of an origin paycred does not list, a replayed assertion and a deleted passkey are
// refused. Run from sdk/js with `npm run test:browser`; PAYCRED_BIN names the binary. Every
// process started here is stopped in `after`.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, mkdir, rm, readFile } from "node:fs/promises";
import { createServer as createHttp } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { STEP, bin, freePort, here, launchChromium, shots, startPaycred } from "./harness.mjs";

let server;
let work;
let base;
let port;
let browser;
/** Static pages (a blank page and the SDK) on two ports: one origin paycred lists, one not. */
let pages = [];
let shopOrigin;
let strangerOrigin;

async function staticPages(sdk) {
  const s = createHttp((req, res) => {
    if (req.url === "/paycred.js") {
      res.writeHead(200, { "content-type": "text/javascript" }).end(sdk);
    } else {
      res.writeHead(200, { "content-type": "text/html" }).end("<!doctype html><title>Shop</title><body>");
    }
  });
  await new Promise((r) => s.listen(0, "127.0.0.1", r));
  pages.push(s);
  return `http://localhost:${s.address().port}`;
}

before(async () => {
  work = await mkdtemp(join(tmpdir(), "paycred-passkeys-"));
  await mkdir(shots, { recursive: true });
  const sdk = await readFile(join(here, "../dist/paycred.js"));
  shopOrigin = await staticPages(sdk);
  strangerOrigin = await staticPages(sdk);
  port = await freePort();
  server = await startPaycred(bin, work, port, ["--allow-origin", shopOrigin]);
  base = server.base;
  browser = await launchChromium();
});

after(async () => {
  if (browser) await browser.close().catch(() => {});
  if (server) await server.stop();
  for (const s of pages) await new Promise((r) => s.close(r));
  if (work) await rm(work, { recursive: true, force: true });
});

/** A page with Chromium's virtual authenticator: a platform authenticator that verifies the user. */
async function pageWithAuthenticator() {
  const context = await browser.newContext({ viewport: { width: 720, height: 480 } });
  const page = await context.newPage();
  page.setDefaultTimeout(STEP);
  const cdp = await context.newCDPSession(page);
  await cdp.send("WebAuthn.enable", { enableUI: false });
  const { authenticatorId } = await cdp.send("WebAuthn.addVirtualAuthenticator", {
    options: {
      protocol: "ctap2",
      transport: "internal",
      hasResidentKey: true,
      hasUserVerification: true,
      isUserVerified: true,
      automaticPresenceSimulation: true,
    },
  });
  const posted = [];
  page.on("request", (r) => posted.push({ url: r.url(), body: r.postData() || "" }));
  return { context, page, cdp, authenticatorId, posted };
}

async function show(page, text) {
  await page.evaluate((t) => {
    document.body.innerHTML = "";
    const p = document.createElement("p");
    p.style.cssText = "font:18px system-ui;margin:24px";
    p.textContent = t;
    document.body.append(p);
  }, text);
}

test("register a passkey, verify an intent with it; wrong origin, replay and a deleted passkey refused", async () => {
  const session = await (await fetch(`${base}/demo/session`)).json();
  const call = (jwt) => (method, path, body) =>
    fetch(`${base}${path}`, {
      method,
      headers: { Authorization: `Bearer ${jwt}`, "Content-Type": "application/json" },
      body: body && JSON.stringify(body),
    }).then(async (r) => ({ status: r.status, json: r.status === 204 ? null : await r.json() }));
  const backend = call(session.privateToken);
  const browserCall = call(session.publicToken);
  const { context, page, cdp, authenticatorId, posted } = await pageWithAuthenticator();
  try {
    await page.goto(`${shopOrigin}/`);
    // Register from the shop's page, and save two cards.
    const made = await page.evaluate(
      async ({ base, jwt }) => {
        const { Paycred } = await import("/paycred.js");
        const p = new Paycred({ baseUrl: base, jwt });
        const card = (number) => ({ number, expirationMonth: "10", expirationYear: "2034", cvc: "123" });
        const passkey = await p.registerPasskey("dev", { name: "This laptop" });
        const listed = await p.listPasskeys("dev");
        const a = await p.createPaymentMethod(card("5555555555554444"));
        const b = await p.createPaymentMethod(card("4242424242424242"));
        return { passkey, listed, pms: [a.id, b.id] };
      },
      { base, jwt: session.publicToken },
    );
    assert.match(made.passkey.id, /^pk_[0-9a-f]{32}$/);
    assert.equal(made.passkey.name, "This laptop");
    assert.equal(made.passkey.lastUsedAt, null);
    assert.deepEqual(made.listed.map((k) => k.id), [made.passkey.id]);
    const { credentials } = await cdp.send("WebAuthn.getCredentials", { authenticatorId });
    assert.equal(credentials.length, 1, "the authenticator holds the new credential");
    await show(page, `Passkey registered: ${made.passkey.name} (${made.passkey.id})`);
    await page.screenshot({ path: join(shots, "passkey-registered.png") });

    const intent = async (pm) => {
      const r = await backend("POST", "/projects/dev/purchase-intents", {
        entityId: session.entityId,
        credentialType: "network-token",
        paymentMethodId: pm,
        mandates: [{ type: "maxAmount", value: "20.00", details: { currency: "840" } }],
      });
      assert.equal(r.status, 201, JSON.stringify(r.json));
      assert.equal(r.json.status, "verify");
      return r.json.id;
    };
    // Verify with the passkey through the SDK: the intent is active.
    const first = await intent(made.pms[0]);
    const verified = await page.evaluate(
      async ({ base, jwt, id }) => {
        const { Paycred } = await import("/paycred.js");
        const p = new Paycred({ baseUrl: base, jwt, onOtp: () => "no code expected" });
        return (await p.verifyPurchaseIntent("dev", id)).status;
      },
      { base, jwt: session.publicToken, id: first },
    );
    assert.equal(verified, "active");
    assert.equal((await backend("GET", `/projects/dev/purchase-intents/${first}`)).json.status, "active");
    const sent = posted.find((r) => r.url.endsWith(`/${first}/verify`) && r.body.includes("assertion"));
    assert.ok(sent, "the SDK posted an assertion");
    const captured = JSON.parse(sent.body).assertion;
    await show(page, `Purchase intent ${first}: active (verified with a passkey)`);
    await page.screenshot({ path: join(shots, "passkey-verified.png") });

    // A replayed assertion: refused against the second intent's fresh challenge.
    const second = await intent(made.pms[1]);
    const step = await browserCall("POST", `/projects/dev/purchase-intents/${second}/verify`, {});
    assert.equal(step.json.nextAction.type, "passkey");
    let r = await browserCall("POST", `/projects/dev/purchase-intents/${second}/verify`, {
      assertion: captured,
    });
    assert.equal(r.status, 400, JSON.stringify(r.json));
    assert.equal(r.json.error.type, "invalidPasskey");
    assert.equal(r.json.error.details.reason, "challenge");

    // A page of an origin paycred does not list: the browser signs (same RP ID), paycred refuses.
    const getAssertion = async (options) =>
      page.evaluate(async (options) => {
        const { requestOptionsFromJson, credentialToJson } = await import("/paycred.js");
        const credential = await navigator.credentials.get({ publicKey: requestOptionsFromJson(options) });
        return credentialToJson(credential);
      }, options);
    let options = (await browserCall("POST", `/projects/dev/purchase-intents/${second}/verify`, {})).json
      .nextAction.options;
    await page.goto(`${strangerOrigin}/`);
    const foreign = await getAssertion(options);
    await show(page, `A page of ${strangerOrigin} made an assertion; paycred refuses its origin.`);
    await page.screenshot({ path: join(shots, "passkey-wrong-origin.png") });
    r = await browserCall("POST", `/projects/dev/purchase-intents/${second}/verify`, { assertion: foreign });
    assert.equal(r.status, 400, JSON.stringify(r.json));
    assert.equal(r.json.error.details.reason, "origin");

    // A deleted passkey: the assertion made before the delete is refused.
    await page.goto(`${shopOrigin}/`);
    options = (await browserCall("POST", `/projects/dev/purchase-intents/${second}/verify`, {})).json
      .nextAction.options;
    const beforeDelete = await getAssertion(options);
    await page.evaluate(
      async ({ base, jwt, id }) => {
        const { Paycred } = await import("/paycred.js");
        await new Paycred({ baseUrl: base, jwt }).deletePasskey("dev", id);
      },
      { base, jwt: session.publicToken, id: made.passkey.id },
    );
    r = await browserCall("POST", `/projects/dev/purchase-intents/${second}/verify`, {
      assertion: beforeDelete,
    });
    assert.equal(r.status, 400, JSON.stringify(r.json));
    assert.equal(r.json.error.details.reason, "unknownPasskey");
    assert.equal(r.json.error.details.attemptsRemaining, 2);
    // No passkey left: the one-time code again.
    r = await browserCall("POST", `/projects/dev/purchase-intents/${second}/verify`, {});
    assert.equal(r.json.nextAction.type, "otp");
    assert.equal((await backend("GET", `/projects/dev/purchase-intents/${second}`)).json.status, "verify");
    assert.match(server.log, /route=passkey_registration_options status=200/);
  } finally {
    await context.close();
  }
});

test("the demo page on localhost: register a passkey, then the purchase verifies with it", async () => {
  const { context, page, posted } = await pageWithAuthenticator();
  try {
    await page.goto(`http://localhost:${port}/demo`);
    await page.waitForSelector("#passkey:not([disabled])");
    assert.equal(await page.locator("#passkey-status").textContent(), "Verification: one-time code");
    await page.click("#passkey");
    await page.waitForFunction(() => document.querySelector("#passkey-status")?.dataset.passkey);
    assert.match(await page.locator("#passkey-status").textContent(), /^Verification: passkey \(pk_/);
    await page.fill("#number", "5555 5555 5555 4444");
    await page.click("#pay");
    await page.locator("#result").waitFor({ state: "visible" });
    assert.match(await page.locator("#result").textContent(), /^Active network token •••• \d{4}$/);
    assert.match(await page.locator("#steps").textContent(), /Verifying in the browser with a passkey/);
    assert.equal(await page.locator("[data-paycred-otp]").count(), 0, "no code was asked for");
    assert.ok(posted.some((r) => r.url.endsWith("/verify") && r.body.includes("assertion")));
    await page.screenshot({ path: join(shots, "demo-passkey.png"), fullPage: true });
  } finally {
    await context.close();
  }
});
