// Unit tests of the SDK with node's test runner and node's WebCrypto (no browser, no server).
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  Paycred,
  PaycredAgent,
  PaycredError,
  base64url,
  base64urlDecode,
  concatKdf,
  encryptJwe,
  creationOptionsFromJson,
  requestOptionsFromJson,
} from "../src/paycred.js";

const subtle = globalThis.crypto.subtle;
const dec = new TextDecoder();

async function recipient() {
  const pair = await subtle.generateKey({ name: "ECDH", namedCurve: "P-256" }, true, ["deriveBits"]);
  const jwk = await subtle.exportKey("jwk", pair.publicKey);
  return {
    privateKey: pair.privateKey,
    jwk: { kty: "EC", crv: "P-256", x: jwk.x, y: jwk.y, kid: "ck_test", alg: "ECDH-ES" },
  };
}

/** Decrypts a compact JWE the way the server does (independent of encryptJwe's code path). */
async function decrypt(privateKey, compact) {
  const [h, ek, iv, ct, tag] = compact.split(".");
  assert.equal(ek, "", "ECDH-ES direct has no encrypted key");
  const header = JSON.parse(dec.decode(base64urlDecode(h)));
  const epk = await subtle.importKey(
    "jwk",
    { kty: "EC", crv: "P-256", x: header.epk.x, y: header.epk.y },
    { name: "ECDH", namedCurve: "P-256" },
    false,
    [],
  );
  const z = await subtle.deriveBits({ name: "ECDH", public: epk }, privateKey, 256);
  const cek = await subtle.importKey("raw", await concatKdf(subtle, z, header.enc), "AES-GCM", false, [
    "decrypt",
  ]);
  const sealed = new Uint8Array([...base64urlDecode(ct), ...base64urlDecode(tag)]);
  const plain = await subtle.decrypt(
    { name: "AES-GCM", iv: base64urlDecode(iv), additionalData: new TextEncoder().encode(h) },
    cek,
    sealed,
  );
  return { header, plaintext: dec.decode(plain) };
}

function jwt(claims) {
  const part = (o) => base64url(new TextEncoder().encode(JSON.stringify(o)));
  return `${part({ alg: "EdDSA" })}.${part(claims)}.sig`;
}

const JWT = jwt({ iss: "dev", sub: "user_1", roles: ["public"] });
const CARD = { number: "4242424242424242", expirationMonth: "12", expirationYear: "2034", cvc: "123" };

/** A fetch that answers from a list of handlers and records the requests. */
function fakeFetch(handler) {
  const calls = [];
  const f = async (url, init) => {
    const call = { url, method: init.method, headers: init.headers, body: init.body && JSON.parse(init.body) };
    calls.push(call);
    const [status, body] = await handler(call, calls.length);
    return {
      ok: status >= 200 && status < 300,
      status,
      text: async () => (body === undefined ? "" : JSON.stringify(body)),
    };
  };
  f.calls = calls;
  return f;
}

test("concatKdf matches RFC 7518 appendix C", async () => {
  const z = new Uint8Array([
    158, 86, 217, 29, 129, 113, 53, 211, 114, 131, 66, 131, 191, 132, 38, 156, 251, 49, 110, 163, 218,
    128, 106, 72, 246, 218, 167, 121, 140, 254, 144, 196,
  ]);
  const te = new TextEncoder();
  const key = await concatKdf(subtle, z, "A128GCM", te.encode("Alice"), te.encode("Bob"), 128);
  assert.equal(base64url(key), "VqqN6vgjbSBcIijNcacQGg");
});

test("base64url round-trips without padding", () => {
  for (const n of [0, 1, 2, 3, 31, 32, 33, 1000]) {
    const bytes = crypto.getRandomValues(new Uint8Array(n));
    const text = base64url(bytes);
    assert.ok(!/[+/=]/.test(text));
    assert.deepEqual(base64urlDecode(text), bytes);
  }
});

test("encryptJwe makes a compact ECDH-ES/A256GCM JWE with kid and epk that decrypts", async () => {
  const r = await recipient();
  const compact = await encryptJwe(r.jwk, new TextEncoder().encode(JSON.stringify(CARD)));
  assert.equal(compact.split(".").length, 5);
  const { header, plaintext } = await decrypt(r.privateKey, compact);
  assert.equal(header.alg, "ECDH-ES");
  assert.equal(header.enc, "A256GCM");
  assert.equal(header.kid, "ck_test");
  assert.equal(header.epk.crv, "P-256");
  assert.equal(header.epk.d, undefined, "the ephemeral private key never leaves");
  assert.deepEqual(JSON.parse(plaintext), CARD);
  assert.ok(!compact.includes("4242"), "no plaintext in the JWE");
  // Fresh ephemeral key and iv every time.
  const again = await encryptJwe(r.jwk, new TextEncoder().encode("x"));
  assert.notEqual(again.split(".")[0], compact.split(".")[0]);
});

test("encryptJwe refuses keys that are not EC P-256", async () => {
  await assert.rejects(encryptJwe({ kty: "RSA", n: "x", e: "AQAB" }, new Uint8Array(1)), {
    name: "PaycredError",
    type: "invalidKey",
  });
});

test("encryptCard fetches the key once and createCardToken sends only the JWE", async () => {
  const r = await recipient();
  const fetch = fakeFetch(async (call) => {
    if (call.url.endsWith("/projects/dev/client-encryption-key")) return [200, r.jwk];
    if (call.url.endsWith("/projects/dev/tokens")) {
      return [201, { id: "tok_1", fingerprint: "f", createdAt: "t", maskedData: "424242******4242" }];
    }
    return [404, { error: { status: 404, type: "notFound", title: "Not found", message: "" } }];
  });
  const paycred = new Paycred({ baseUrl: "http://svc/", jwt: JWT, fetch });
  assert.equal(paycred.projectId, "dev");
  assert.equal(paycred.entityId, "user_1");
  const jwe = await paycred.encryptCard(CARD);
  assert.deepEqual(JSON.parse((await decrypt(r.privateKey, jwe)).plaintext), CARD);
  const token = await paycred.createCardToken(CARD);
  assert.equal(token.id, "tok_1");
  const keyCalls = fetch.calls.filter((c) => c.url.endsWith("client-encryption-key"));
  assert.equal(keyCalls.length, 1, "the key is cached");
  const post = fetch.calls.find((c) => c.url === "http://svc/projects/dev/tokens");
  assert.equal(post.method, "POST");
  assert.equal(post.headers.Authorization, `Bearer ${JWT}`);
  assert.deepEqual(Object.keys(post.body).sort(), ["encryptedCard", "entityId"]);
  assert.ok(!JSON.stringify(post.body).includes("4242424242424242"));
});

test("verifyPurchaseIntent follows nextAction, re-asks after a wrong code and resolves", async () => {
  const asked = [];
  const fetch = fakeFetch(async (call) => {
    assert.equal(call.url, "http://svc/tenants/dev/purchase-intents/pi_1/verify");
    if (!call.body.code) {
      return [200, { status: "verify", nextAction: { type: "otp", channel: "sms", length: 6, attemptsRemaining: 5 } }];
    }
    if (call.body.code === "123456") return [200, { status: "active", nextAction: null }];
    return [
      200,
      { status: "verify", nextAction: { type: "otp", channel: "sms", length: 6, attemptsRemaining: 4, error: "invalidCode" } },
    ];
  });
  const codes = ["000000", "123456"];
  const paycred = new Paycred({
    baseUrl: "http://svc",
    jwt: JWT,
    fetch,
    onOtp: async (action) => {
      asked.push(action);
      return codes.shift();
    },
  });
  const intent = await paycred.verifyPurchaseIntent("dev", "pi_1");
  assert.deepEqual(intent, { id: "pi_1", status: "active", nextAction: null });
  assert.equal(asked.length, 2);
  assert.equal(asked[0].error, undefined);
  assert.equal(asked[1].error, "invalidCode");
  assert.equal(asked[1].attemptsRemaining, 4);
});

test("errors reject with the envelope's type; cancel rejects with canceled", async () => {
  const locked = fakeFetch(async () => [
    409,
    { error: { status: 409, type: "conflict", title: "Conflict", message: "locked" } },
  ]);
  const p1 = new Paycred({ baseUrl: "http://svc", jwt: JWT, fetch: locked, onOtp: () => "1" });
  await assert.rejects(p1.verifyPurchaseIntent("dev", "pi_1"), (e) => {
    assert.ok(e instanceof PaycredError);
    assert.equal(e.type, "conflict");
    assert.equal(e.status, 409);
    return true;
  });
  const bad = fakeFetch(async () => [
    400,
    {
      error: {
        status: 400,
        type: "invalidRequest",
        title: "Invalid request",
        message: "A request field is invalid.",
        details: { fields: { encryptedCard: "could not be decrypted" } },
      },
    },
  ]);
  const p2 = new Paycred({ baseUrl: "http://svc", jwt: JWT, fetch: bad });
  await assert.rejects(p2.createPaymentMethod({ tokenId: "tok_x" }), (e) => {
    assert.equal(e.type, "invalidRequest");
    assert.equal(e.details.fields.encryptedCard, "could not be decrypted");
    return true;
  });
  const otp = fakeFetch(async () => [200, { status: "verify", nextAction: { type: "otp", length: 6 } }]);
  const p3 = new Paycred({ baseUrl: "http://svc", jwt: JWT, fetch: otp, onOtp: async () => null });
  await assert.rejects(p3.verifyPurchaseIntent("dev", "pi_1"), { type: "canceled" });
  const down = async () => {
    throw new TypeError("fetch failed");
  };
  const p4 = new Paycred({ baseUrl: "http://svc", jwt: JWT, fetch: down });
  await assert.rejects(p4.clientEncryptionKey(), { type: "networkError" });
  assert.throws(() => new Paycred({ baseUrl: "http://svc" }), { type: "invalidOptions" });
});

test("passkeys: verifyPurchaseIntent runs navigator.credentials.get and posts the assertion", async () => {
  const jwt = `x.${base64url(new TextEncoder().encode(JSON.stringify({ iss: "p1", sub: "e1" })))}.y`;
  const challenge = base64url(new Uint8Array([1, 2, 3]));
  const posted = [];
  const answers = [
    { status: "verify", nextAction: { type: "passkey", options: { challenge, rpId: "localhost",
      allowCredentials: [{ type: "public-key", id: "AQI" }], hints: null } } },
    { status: "active", nextAction: null },
  ];
  const fetchImpl = async (url, init) => {
    posted.push({ url, body: JSON.parse(init.body) });
    return new Response(JSON.stringify(answers.shift()), { status: 200 });
  };
  let asked;
  const bytes = (...b) => new Uint8Array(b).buffer;
  const credentials = {
    get: async ({ publicKey }) => {
      asked = publicKey;
      return {
        id: "AQI", rawId: bytes(1, 2), type: "public-key",
        response: { clientDataJSON: bytes(9), authenticatorData: bytes(8), signature: bytes(7), userHandle: null },
        getClientExtensionResults: () => ({}),
      };
    },
  };
  const p = new Paycred({ baseUrl: "https://pc.example", jwt, fetch: fetchImpl, credentials });
  const done = await p.verifyPurchaseIntent("p1", "pi_1");
  assert.equal(done.status, "active");
  assert.deepEqual([...new Uint8Array(asked.challenge)], [1, 2, 3]);
  assert.deepEqual([...new Uint8Array(asked.allowCredentials[0].id)], [1, 2]);
  assert.ok(!("hints" in asked), "null members dropped");
  assert.deepEqual(posted[1].body.assertion, {
    id: "AQI", rawId: "AQI", type: "public-key", extensions: {},
    response: { clientDataJSON: "CQ", authenticatorData: "CA", signature: "Bw" },
  });
  // The options helpers decode what the service sends.
  const created = creationOptionsFromJson({ challenge, user: { id: "AQI", name: "e1" },
    excludeCredentials: [{ type: "public-key", id: "AQI" }] });
  assert.deepEqual([...new Uint8Array(created.user.id)], [1, 2]);
  assert.deepEqual([...new Uint8Array(requestOptionsFromJson({ challenge }).challenge)], [1, 2, 3]);
  // The user's refusal is `canceled`.
  answers.push({ status: "verify", nextAction: { type: "passkey", options: { challenge } } });
  const refusing = new Paycred({ baseUrl: "https://pc.example", jwt, fetch: fetchImpl,
    credentials: { get: async () => { throw Object.assign(new Error("no"), { name: "NotAllowedError" }); } } });
  await assert.rejects(refusing.verifyPurchaseIntent("p1", "pi_2"), (e) => e.type === "canceled");
});

test("PaycredAgent: browser sessions of an intent with a private JWT, errors as PaycredError", async () => {
  const session = {
    id: "bs_1",
    purchaseIntentId: "pi/1",
    status: "active",
    allowedHosts: ["shop.example"],
    card: { number: "4242421111111117", expirationMonth: "12", expirationYear: "2031", cvc: "987" },
    proxy: { url: "http://127.0.0.1:8443", username: "bs_1", password: "secret" },
  };
  const f = fakeFetch(({ method }, n) => {
    if (n === 5) return [409, { error: { type: "conflict", message: "The intent is not active." } }];
    return [method === "POST" ? 201 : 200, n === 3 ? [session] : session];
  });
  const privateJwt = jwt({ iss: "shop", sub: "agent", roles: ["private"] });
  const agent = new PaycredAgent({ baseUrl: "https://paycred.example/", jwt: privateJwt, fetch: f });
  assert.equal(agent.projectId, "shop");
  const made = await agent.createBrowserSession("pi/1", { allowedHosts: ["shop.example"], ttl: 600 });
  assert.equal(made.proxy.password, "secret");
  await agent.getBrowserSession("pi/1", "bs_1");
  assert.deepEqual(await agent.listBrowserSessions("pi/1"), [session]);
  await agent.endBrowserSession("pi/1", "bs_1");
  const base = "https://paycred.example/projects/shop/purchase-intents/pi%2F1/browser-sessions";
  assert.deepEqual(
    f.calls.map((c) => [c.method, c.url]),
    [
      ["POST", base],
      ["GET", `${base}/bs_1`],
      ["GET", base],
      ["DELETE", `${base}/bs_1`],
    ],
  );
  assert.deepEqual(f.calls[0].body, { allowedHosts: ["shop.example"], ttl: 600 });
  assert.match(f.calls[0].headers.Authorization, /^Bearer /);
  assert.equal(f.calls[3].body, undefined);
  // Without ttl, the body has none (the project's max_ttl applies).
  await assert.rejects(agent.createBrowserSession("pi/1", { allowedHosts: ["shop.example"] }), {
    name: "PaycredError",
    type: "conflict",
    status: 409,
  });
  assert.deepEqual(f.calls[4].body, { allowedHosts: ["shop.example"] });
  assert.throws(() => new PaycredAgent({ baseUrl: "https://x" }), { type: "invalidOptions" });
});
