// Browser tests: the real paycred server (`paycred serve --dev`) and Debian's Chromium, driven by
// playwright-core. Run from sdk/js with `npm run test:browser`; PAYCRED_BIN names the binary
// (default: ../../target/debug/paycred). Every process started here is stopped in `after`.
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
let browser;
/** A static server on its own port: the page of another origin (the SDK and a blank page). */
let shop;
let shopOrigin;

before(async () => {
  work = await mkdtemp(join(tmpdir(), "paycred-browser-"));
  await mkdir(shots, { recursive: true });
  const sdk = await readFile(join(here, "../dist/paycred.js"));
  shop = createHttp((req, res) => {
    if (req.url === "/paycred.js") {
      res.writeHead(200, { "content-type": "text/javascript" }).end(sdk);
    } else {
      res.writeHead(200, { "content-type": "text/html" }).end("<!doctype html><title>Shop</title>");
    }
  });
  await new Promise((r) => shop.listen(0, "127.0.0.1", r));
  shopOrigin = `http://localhost:${shop.address().port}`;
  server = await startPaycred(bin, work, await freePort(), ["--allow-origin", shopOrigin]);
  base = server.base;
  browser = await launchChromium();
});

after(async () => {
  if (browser) await browser.close().catch(() => {});
  if (server) await server.stop();
  if (shop) await new Promise((r) => shop.close(r));
  if (work) await rm(work, { recursive: true, force: true });
  // The server's log (stderr; stdout is the --dev banner with its curl example) must never
  // carry a card number.
  for (const n of ["4242424242424242", "5555555555554444", "378282246310005"]) {
    assert.ok(!(server?.stderr || "").includes(n), "a card number was logged");
  }
});

async function newPage() {
  const context = await browser.newContext({ viewport: { width: 720, height: 900 } });
  const page = await context.newPage();
  page.setDefaultTimeout(STEP);
  const requests = [];
  page.on("request", (r) => requests.push({ url: r.url(), body: r.postData() || "" }));
  await page.goto(`${base}/demo`);
  await page.waitForSelector("#pay:not([disabled])");
  return { page, context, requests };
}

test("demo: encrypt, save, network token, verify in the browser, show last 4", async () => {
  const { page, context, requests } = await newPage();
  try {
    await page.click("#pay");
    await page.waitForSelector("[data-paycred-otp-input]");
    await page.fill("[data-paycred-otp-input]", "123456");
    await page.click("[data-paycred-otp-submit]");
    const result = page.locator("#result");
    await result.waitFor({ state: "visible" });
    const text = await result.textContent();
    assert.match(text, /^Active network token •••• \d{4}$/);
    const last4 = await result.getAttribute("data-last4");
    assert.match(last4, /^\d{4}$/);
    assert.notEqual(last4, "4242", "the token is not the card number");
    assert.equal(await page.locator("[data-paycred-otp]").count(), 0, "the dialog closed");
    await page.screenshot({ path: join(shots, "demo-final.png"), fullPage: true });
    // The card left the page only encrypted.
    for (const r of requests) {
      assert.ok(!r.body.includes("4242424242424242"), `plain card number sent to ${r.url}`);
    }
    const pm = requests.find((r) => r.url.endsWith("/payment-methods"));
    assert.ok(pm && JSON.parse(pm.body).encryptedCard.split(".").length === 5);
  } finally {
    await context.close();
  }
});

test("an encryptedCard and a card token made by the SDK in the browser are accepted", async () => {
  const session = await (await fetch(`${base}/demo/session`)).json();
  const { page, context } = await newPage();
  try {
    const made = await page.evaluate(async (jwt) => {
      const { Paycred } = await import("/demo/paycred.js");
      const p = new Paycred({ baseUrl: location.origin, jwt });
      const card = (number) => ({ number, expirationMonth: "11", expirationYear: "2033", cvc: "123" });
      return {
        encryptedCard: await p.encryptCard(card("5555555555554444")),
        token: await p.createCardToken(card("378282246310005")).catch((e) => ({ error: e.type })),
        visaToken: await p.createCardToken(card("4242424242424242")),
      };
    }, session.publicToken);
    assert.equal(made.encryptedCard.split(".").length, 5);
    const header = JSON.parse(Buffer.from(made.encryptedCard.split(".")[0], "base64url"));
    assert.equal(header.alg, "ECDH-ES");
    assert.equal(header.enc, "A256GCM");
    assert.ok(header.kid);
    const create = (body) =>
      fetch(`${base}/projects/dev/payment-methods`, {
        method: "POST",
        headers: { Authorization: `Bearer ${session.publicToken}`, "Content-Type": "application/json" },
        body: JSON.stringify({ entityId: session.entityId, ...body }),
      });
    let r = await create({ encryptedCard: made.encryptedCard });
    let pm = await r.json();
    assert.equal(r.status, 201, JSON.stringify(pm));
    assert.equal(pm.card.details.last4, "4444");
    assert.equal(pm.card.details.expirationYear, "2033");
    // The amex cvc is 4 digits: the token is refused like a raw card would be.
    assert.equal(made.token.error, "invalidRequest");
    assert.equal(made.visaToken.maskedData, "424242******4242");
    r = await create({ tokenId: made.visaToken.id });
    pm = await r.json();
    assert.equal(r.status, 201, JSON.stringify(pm));
    assert.equal(pm.card.details.last4, "4242");
    r = await create({ tokenId: made.visaToken.id });
    assert.equal(r.status, 400, "a token is used once");
    assert.ok((await r.json()).error.details.fields.tokenId);
  } finally {
    await context.close();
  }
});

test("a wrong one-time code is shown to the user, then the right one passes", async () => {
  const { page, context } = await newPage();
  try {
    await page.fill("#number", "5555 5555 5555 4444");
    await page.click("#pay");
    await page.waitForSelector("[data-paycred-otp-input]");
    await page.fill("[data-paycred-otp-input]", "000000");
    await page.click("[data-paycred-otp-submit]");
    const error = page.locator("[data-paycred-otp-error]");
    await page.waitForFunction(
      () => document.querySelector("[data-paycred-otp-error]")?.textContent.includes("not correct"),
    );
    assert.equal(await error.textContent(), "That code is not correct. 4 attempts left.");
    await page.screenshot({ path: join(shots, "demo-wrong-code.png") });
    await page.fill("[data-paycred-otp-input]", "123456");
    await page.click("[data-paycred-otp-submit]");
    await page.locator("#result").waitFor({ state: "visible" });
    assert.match(await page.locator("#result").textContent(), /^Active network token •••• \d{4}$/);
    assert.equal(await page.locator("#error").textContent(), "");
  } finally {
    await context.close();
  }
});

test("from a page of another origin: encrypt a card, a card token, verifyPurchaseIntent", async () => {
  const session = await (await fetch(`${base}/demo/session`)).json();
  const backend = (method, path, body) =>
    fetch(`${base}${path}`, {
      method,
      headers: { Authorization: `Bearer ${session.privateToken}`, "Content-Type": "application/json" },
      body: body && JSON.stringify(body),
    }).then(async (r) => ({ status: r.status, json: await r.json() }));
  const context = await browser.newContext();
  const page = await context.newPage();
  page.setDefaultTimeout(STEP);
  try {
    await page.goto(`${shopOrigin}/`);
    const made = await page.evaluate(
      async ({ base, jwt }) => {
        const { Paycred } = await import("/paycred.js");
        const p = new Paycred({ baseUrl: base, jwt });
        const card = (number) => ({ number, expirationMonth: "10", expirationYear: "2034", cvc: "123" });
        const encrypted = await p.createPaymentMethod(card("5555555555554444"));
        const token = await p.createCardToken(card("4000056655665556"));
        const fromToken = await p.createPaymentMethod({ tokenId: token.id });
        return { encrypted: encrypted.id, last4: fromToken.card.details.last4, origin: location.origin };
      },
      { base, jwt: session.publicToken },
    );
    assert.equal(made.origin, shopOrigin);
    assert.equal(made.last4, "5556");
    const pi = await backend("POST", "/projects/dev/purchase-intents", {
      entityId: session.entityId,
      credentialType: "network-token",
      paymentMethodId: made.encrypted,
      mandates: [{ type: "maxAmount", value: "20.00", details: { currency: "840" } }],
    });
    assert.equal(pi.status, 201, JSON.stringify(pi.json));
    assert.equal(pi.json.status, "verify");
    const verified = await page.evaluate(
      async ({ base, jwt, id }) => {
        const { Paycred } = await import("/paycred.js");
        const codes = ["000000", "123456"];
        const seen = [];
        const p = new Paycred({
          baseUrl: base,
          jwt,
          onOtp: (action) => {
            seen.push(action.attemptsRemaining);
            return codes.shift();
          },
        });
        const result = await p.verifyPurchaseIntent("dev", id);
        return { status: result.status, seen };
      },
      { base, jwt: session.publicToken, id: pi.json.id },
    );
    assert.deepEqual(verified, { status: "active", seen: [5, 4] });
    const after = await backend("GET", `/projects/dev/purchase-intents/${pi.json.id}`);
    assert.equal(after.json.status, "active");
    // The preflights were paycred's own answers.
    assert.match(server.log, /method=OPTIONS route=purchase_intent_verify status=204/);
  } finally {
    await context.close();
  }
});
