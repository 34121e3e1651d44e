// paycred browser SDK: client-side card encryption (JWE ECDH-ES + A256GCM with WebCrypto),
// card tokens, payment methods from encrypted cards, and verifyPurchaseIntent.
// Initialise it with a public-role JWT; it never needs a private one. PaycredAgent is the
// agent's server side of browser checkout (browser sessions), with a private-role JWT.
//
//   const paycred = new Paycred({ baseUrl: "https://paycred.example", jwt: publicJwt });
//   const token = await paycred.createCardToken({ number, expirationMonth, expirationYear, cvc });
//   const intent = await paycred.verifyPurchaseIntent(tenantId, purchaseIntentId);
//   const passkey = await paycred.registerPasskey(tenantId); // then intents verify with it

const enc = new TextEncoder();

/** An error from the service (or the SDK): `type` is the error envelope's `type`. */
export class PaycredError extends Error {
  constructor(type, message, { status = 0, details = undefined } = {}) {
    super(message || type);
    this.name = "PaycredError";
    this.type = type;
    this.status = status;
    this.details = details;
  }
}

/** base64url without padding. */
export function base64url(bytes) {
  const b = bytes instanceof Uint8Array ? bytes : new Uint8Array(bytes);
  let s = "";
  for (let i = 0; i < b.length; i += 0x8000) {
    s += String.fromCharCode.apply(null, b.subarray(i, i + 0x8000));
  }
  return btoa(s).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

/** Decodes base64url (padding optional). */
export function base64urlDecode(text) {
  const b64 = text.replace(/-/g, "+").replace(/_/g, "/");
  const bin = atob(b64 + "===".slice((b64.length + 3) % 4));
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

function u32(n) {
  return new Uint8Array([(n >>> 24) & 255, (n >>> 16) & 255, (n >>> 8) & 255, n & 255]);
}

function concat(...parts) {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

/**
 * The Concat KDF of NIST SP 800-56A as JWA (RFC 7518, section 4.6.2) uses it for ECDH-ES direct
 * key agreement: one SHA-256 round gives the 256-bit content key of A256GCM.
 */
export async function concatKdf(
  subtle,
  z,
  enc_,
  apu = new Uint8Array(),
  apv = new Uint8Array(),
  bits = 256,
) {
  const alg = enc.encode(enc_);
  const info = concat(
    u32(1),
    new Uint8Array(z),
    u32(alg.length),
    alg,
    u32(apu.length),
    apu,
    u32(apv.length),
    apv,
    u32(bits),
  );
  return new Uint8Array(await subtle.digest("SHA-256", info)).slice(0, bits / 8);
}

/**
 * Encrypts `plaintext` (bytes) to an EC P-256 public JWK: a compact JWE with `alg` ECDH-ES,
 * `enc` A256GCM and the key's `kid`.
 */
export async function encryptJwe(publicJwk, plaintext, { crypto: c = globalThis.crypto } = {}) {
  const subtle = c.subtle;
  if (publicJwk.kty !== "EC" || publicJwk.crv !== "P-256") {
    throw new PaycredError("invalidKey", "The client encryption key is not an EC P-256 key.");
  }
  const recipient = await subtle.importKey(
    "jwk",
    { kty: "EC", crv: "P-256", x: publicJwk.x, y: publicJwk.y, ext: true },
    { name: "ECDH", namedCurve: "P-256" },
    false,
    [],
  );
  const ephemeral = await subtle.generateKey({ name: "ECDH", namedCurve: "P-256" }, true, [
    "deriveBits",
  ]);
  const z = await subtle.deriveBits({ name: "ECDH", public: recipient }, ephemeral.privateKey, 256);
  const epk = await subtle.exportKey("jwk", ephemeral.publicKey);
  const header = {
    alg: "ECDH-ES",
    enc: "A256GCM",
    kid: publicJwk.kid,
    epk: { kty: "EC", crv: "P-256", x: epk.x, y: epk.y },
  };
  const protectedHeader = base64url(enc.encode(JSON.stringify(header)));
  const cek = await subtle.importKey("raw", await concatKdf(subtle, z, "A256GCM"), "AES-GCM", false, [
    "encrypt",
  ]);
  const iv = c.getRandomValues(new Uint8Array(12));
  const sealed = new Uint8Array(
    await subtle.encrypt(
      { name: "AES-GCM", iv, additionalData: enc.encode(protectedHeader), tagLength: 128 },
      cek,
      plaintext,
    ),
  );
  const ciphertext = sealed.subarray(0, sealed.length - 16);
  const tag = sealed.subarray(sealed.length - 16);
  return [protectedHeader, "", base64url(iv), base64url(ciphertext), base64url(tag)].join(".");
}

/** The claims of a JWT (not verified: the server does that). */
export function jwtClaims(jwt) {
  try {
    return JSON.parse(new TextDecoder().decode(base64urlDecode(jwt.split(".")[1])));
  } catch {
    throw new PaycredError("invalidToken", "The JWT could not be read.");
  }
}

/**
 * The built-in one-time-code dialog. Resolves with the code, or `null` when the user cancels.
 * `action` is the server's `nextAction` (`{type: "otp", channel, length, attemptsRemaining,
 * error?}`).
 */
export function otpDialog(action, { document: doc = globalThis.document } = {}) {
  if (!doc) {
    return Promise.reject(
      new PaycredError("unsupportedEnvironment", "No document: pass an onOtp callback."),
    );
  }
  return new Promise((resolve) => {
    const overlay = doc.createElement("div");
    overlay.setAttribute("data-paycred-otp", "");
    overlay.setAttribute("role", "dialog");
    overlay.setAttribute("aria-modal", "true");
    overlay.style.cssText =
      "position:fixed;inset:0;background:rgba(15,23,42,.45);display:flex;align-items:center;" +
      "justify-content:center;z-index:2147483647;font:15px system-ui,sans-serif";
    const box = doc.createElement("form");
    box.style.cssText =
      "background:#fff;color:#0f172a;border-radius:12px;padding:24px;width:320px;" +
      "box-shadow:0 10px 40px rgba(0,0,0,.25)";
    const title = doc.createElement("h2");
    title.textContent = "Verify your card";
    title.style.cssText = "margin:0 0 8px;font-size:18px";
    const text = doc.createElement("p");
    const via = action.channel === "email" ? "by email" : action.channel === "sms" ? "by text message" : "";
    text.textContent = `Enter the ${action.length || 6}-digit code sent to you ${via}.`.replace(" .", ".");
    text.style.cssText = "margin:0 0 12px;color:#475569";
    const input = doc.createElement("input");
    input.setAttribute("data-paycred-otp-input", "");
    input.setAttribute("aria-label", "One-time code");
    input.autocomplete = "one-time-code";
    input.inputMode = "numeric";
    input.maxLength = action.length || 6;
    input.style.cssText =
      "width:100%;box-sizing:border-box;font-size:22px;letter-spacing:6px;padding:8px;" +
      "border:1px solid #cbd5e1;border-radius:8px";
    const error = doc.createElement("p");
    error.setAttribute("data-paycred-otp-error", "");
    error.setAttribute("role", "alert");
    error.style.cssText = "color:#b91c1c;min-height:1.2em;margin:8px 0";
    if (action.error === "invalidCode") {
      const left = action.attemptsRemaining;
      error.textContent =
        "That code is not correct." +
        (typeof left === "number" ? ` ${left} attempt${left === 1 ? "" : "s"} left.` : "");
    } else if (action.error) {
      error.textContent = "The code could not be checked. Try again.";
    }
    const buttons = doc.createElement("div");
    buttons.style.cssText = "display:flex;gap:8px;justify-content:flex-end";
    const cancel = doc.createElement("button");
    cancel.type = "button";
    cancel.textContent = "Cancel";
    cancel.setAttribute("data-paycred-otp-cancel", "");
    const submit = doc.createElement("button");
    submit.type = "submit";
    submit.textContent = "Verify";
    submit.setAttribute("data-paycred-otp-submit", "");
    for (const b of [cancel, submit]) {
      b.style.cssText = "padding:8px 14px;border-radius:8px;border:1px solid #cbd5e1;cursor:pointer";
    }
    submit.style.background = "#1d4ed8";
    submit.style.color = "#fff";
    buttons.append(cancel, submit);
    box.append(title, text, input, error, buttons);
    overlay.append(box);
    const done = (value) => {
      overlay.remove();
      resolve(value);
    };
    box.addEventListener("submit", (e) => {
      e.preventDefault();
      const code = input.value.trim();
      if (!code) {
        error.textContent = "Enter the code.";
        return;
      }
      done(code);
    });
    cancel.addEventListener("click", () => done(null));
    doc.body.append(overlay);
    input.focus();
  });
}

/** Drops `null` members (WebAuthn's dictionaries refuse `null` where a member is optional). */
function withoutNulls(value) {
  if (Array.isArray(value)) return value.map(withoutNulls);
  if (value && typeof value === "object") {
    const out = {};
    for (const [k, v] of Object.entries(value)) {
      if (v !== null && v !== undefined) out[k] = withoutNulls(v);
    }
    return out;
  }
  return value;
}

/**
 * The service's `PublicKeyCredentialCreationOptions` (JSON, binary members base64url) as
 * `navigator.credentials.create({publicKey})` takes them (ArrayBuffers).
 */
export function creationOptionsFromJson(options) {
  const o = withoutNulls(options);
  o.challenge = base64urlDecode(o.challenge);
  o.user = { ...o.user, id: base64urlDecode(o.user.id) };
  if (o.excludeCredentials) {
    o.excludeCredentials = o.excludeCredentials.map((c) => ({ ...c, id: base64urlDecode(c.id) }));
  }
  return o;
}

/**
 * The service's `PublicKeyCredentialRequestOptions` (JSON, binary members base64url) as
 * `navigator.credentials.get({publicKey})` takes them.
 */
export function requestOptionsFromJson(options) {
  const o = withoutNulls(options);
  o.challenge = base64urlDecode(o.challenge);
  if (o.allowCredentials) {
    o.allowCredentials = o.allowCredentials.map((c) => ({ ...c, id: base64urlDecode(c.id) }));
  }
  return o;
}

/** A `PublicKeyCredential` (made by create or get) as the JSON the service reads. */
export function credentialToJson(credential) {
  const r = credential.response;
  const response = { clientDataJSON: base64url(r.clientDataJSON) };
  if (r.attestationObject) response.attestationObject = base64url(r.attestationObject);
  if (r.authenticatorData) response.authenticatorData = base64url(r.authenticatorData);
  if (r.signature) response.signature = base64url(r.signature);
  if (r.userHandle) response.userHandle = base64url(r.userHandle);
  if (typeof r.getTransports === "function") response.transports = r.getTransports();
  const extensions =
    typeof credential.getClientExtensionResults === "function"
      ? credential.getClientExtensionResults()
      : {};
  return {
    id: credential.id,
    rawId: base64url(credential.rawId),
    type: credential.type,
    response,
    extensions,
  };
}

/** Runs a WebAuthn call; the user's refusal or a timeout is `canceled`. */
async function ceremony(run) {
  let credential;
  try {
    credential = await run();
  } catch (e) {
    if (e && (e.name === "NotAllowedError" || e.name === "AbortError")) {
      throw new PaycredError("canceled", "The passkey prompt was canceled or timed out.");
    }
    throw new PaycredError("passkeyError", (e && e.message) || "The passkey could not be used.");
  }
  if (!credential) throw new PaycredError("canceled", "No passkey was chosen.");
  return credential;
}

/**
 * One call of the service's API with `jwt` as the bearer token; resolves with the JSON answer,
 * rejects with a PaycredError carrying the error envelope's `type`, status and details.
 */
async function request(fetchImpl, baseUrl, jwt, method, path, body) {
  let resp;
  try {
    resp = await fetchImpl(baseUrl + path, {
      method,
      headers: {
        Authorization: `Bearer ${jwt}`,
        ...(body === undefined ? {} : { "Content-Type": "application/json" }),
      },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (e) {
    throw new PaycredError("networkError", "The paycred service could not be reached.");
  }
  const text = await resp.text();
  let json = null;
  try {
    json = text ? JSON.parse(text) : null;
  } catch {
    json = null;
  }
  if (!resp.ok) {
    const e = json && json.error;
    throw new PaycredError(e?.type || "httpError", e?.message || `HTTP ${resp.status}`, {
      status: resp.status,
      details: e?.details,
    });
  }
  return json;
}

export class Paycred {
  /**
   * @param {object} options
   * @param {string} options.baseUrl  the paycred service, e.g. `https://paycred.example`
   * @param {string} options.jwt      a public-role JWT of the end user (its `iss` is the project)
   * @param {function} [options.onOtp] `(nextAction) => Promise<string|null>`: asks the user for
   *   the one-time code instead of the built-in dialog; `null` cancels.
   * @param {object} [options.credentials] the WebAuthn API (default `navigator.credentials`).
   */
  constructor({
    baseUrl,
    jwt,
    onOtp,
    fetch: fetchImpl,
    crypto: cryptoImpl,
    document: doc,
    credentials,
  } = {}) {
    if (!baseUrl || !jwt) throw new PaycredError("invalidOptions", "baseUrl and jwt are required.");
    this.baseUrl = String(baseUrl).replace(/\/+$/, "");
    this.jwt = jwt;
    const claims = jwtClaims(jwt);
    this.projectId = claims.iss;
    this.entityId = claims.sub;
    this.onOtp = onOtp;
    this._fetch = fetchImpl || globalThis.fetch.bind(globalThis);
    this._crypto = cryptoImpl || globalThis.crypto;
    this._document = doc || globalThis.document;
    this._credentials = credentials || globalThis.navigator?.credentials;
    this._key = null;
  }

  _request(method, path, body) {
    return request(this._fetch, this.baseUrl, this.jwt, method, path, body);
  }

  /** The project's client encryption key (a public JWK), fetched once. */
  async clientEncryptionKey({ refresh = false } = {}) {
    if (!this._key || refresh) {
      this._key = await this._request(
        "GET",
        `/projects/${encodeURIComponent(this.projectId)}/client-encryption-key`,
      );
    }
    return this._key;
  }

  /**
   * Encrypts a card `{number, expirationMonth, expirationYear, cvc}` in the browser; the
   * result is the `encryptedCard` string the service accepts.
   */
  async encryptCard(card) {
    const { number, expirationMonth, expirationYear, cvc } = card || {};
    const payload = enc.encode(JSON.stringify({ number, expirationMonth, expirationYear, cvc }));
    try {
      return await encryptJwe(await this.clientEncryptionKey(), payload, { crypto: this._crypto });
    } finally {
      payload.fill(0);
    }
  }

  /** Stores a card in the token vault (encrypted first); resolves with the Token object. */
  async createCardToken(card) {
    const encryptedCard = await this.encryptCard(card);
    return this._request("POST", `/projects/${encodeURIComponent(this.projectId)}/tokens`, {
      entityId: this.entityId,
      encryptedCard,
    });
  }

  /**
   * Creates a payment method for the JWT's entity from a card (encrypted first) or from
   * `{tokenId}`; resolves with the payment method.
   */
  async createPaymentMethod(cardOrToken) {
    const body = { entityId: this.entityId };
    if (cardOrToken && typeof cardOrToken.tokenId === "string") {
      body.tokenId = cardOrToken.tokenId;
    } else {
      body.encryptedCard = await this.encryptCard(cardOrToken);
    }
    return this._request(
      "POST",
      `/projects/${encodeURIComponent(this.projectId)}/payment-methods`,
      body,
    );
  }

  /**
   * Runs the verification of a purchase intent in `verify`: follows the service's
   * `nextAction` steps (a passkey: `navigator.credentials.get`; a one-time code: the built-in
   * dialog, or `onOtp`) until none is left. A refused passkey rejects with `invalidPasskey`.
   * Resolves with the purchase intent `{id, status, nextAction: null}`; rejects with a
   * PaycredError whose `type` is the service's error type (or `canceled`).
   */
  async verifyPurchaseIntent(tenantId, purchaseIntentId) {
    const path =
      `/tenants/${encodeURIComponent(tenantId)}/purchase-intents/` +
      `${encodeURIComponent(purchaseIntentId)}/verify`;
    let step = await this._request("POST", path, {});
    for (let round = 0; round < 50; round++) {
      const action = step && step.nextAction;
      if (!action) {
        return { ...step, id: purchaseIntentId, nextAction: null };
      }
      if (action.type === "passkey") {
        step = await this._request("POST", path, { assertion: await this._assert(action.options) });
        continue;
      }
      if (action.type !== "otp") {
        throw new PaycredError("unsupportedAction", `Unsupported verification step: ${action.type}`);
      }
      const ask = this.onOtp || ((a) => otpDialog(a, { document: this._document }));
      const code = await ask(action);
      if (code === null || code === undefined || code === "") {
        throw new PaycredError("canceled", "The verification was canceled.");
      }
      step = await this._request("POST", path, { code: String(code) });
    }
    throw new PaycredError("verificationFailed", "Too many verification steps.");
  }

  _webauthn() {
    if (!this._credentials) {
      throw new PaycredError("unsupportedEnvironment", "This browser has no WebAuthn (passkeys).");
    }
    return this._credentials;
  }

  async _assert(options) {
    const api = this._webauthn();
    const publicKey = requestOptionsFromJson(options);
    return credentialToJson(await ceremony(() => api.get({ publicKey })));
  }

  _passkeys(tenantId) {
    return `/tenants/${encodeURIComponent(tenantId || this.projectId)}/passkeys`;
  }

  /**
   * Registers a passkey for the JWT's entity: the service's options, then
   * `navigator.credentials.create`, then the finish. Resolves with the passkey
   * `{id, createdAt, lastUsedAt, name?}`; from then on its purchase intents verify with it.
   */
  async registerPasskey(tenantId = this.projectId, { name } = {}) {
    const api = this._webauthn();
    const path = this._passkeys(tenantId);
    const start = await this._request("POST", `${path}/registration-options`, {
      entityId: this.entityId,
    });
    const publicKey = creationOptionsFromJson(start.options);
    const credential = credentialToJson(await ceremony(() => api.create({ publicKey })));
    const body = { registrationId: start.registrationId, credential };
    if (name) body.name = name;
    return this._request("POST", path, body);
  }

  /** The JWT's entity's passkeys. */
  async listPasskeys(tenantId = this.projectId) {
    return this._request("GET", this._passkeys(tenantId));
  }

  /** Deletes one of the JWT's entity's passkeys; unusable at once. */
  async deletePasskey(tenantId = this.projectId, passkeyId) {
    await this._request("DELETE", `${this._passkeys(tenantId)}/${encodeURIComponent(passkeyId)}`);
  }
}

/**
 * The agent's side of browser checkout, on a server (Node 20+): browser sessions of a purchase
 * intent, with a **private-role** JWT. Never in a page: a private JWT is the project's to keep.
 *
 *   const agent = new PaycredAgent({ baseUrl, jwt: privateJwt });
 *   const s = await agent.createBrowserSession(intentId, { allowedHosts: ["shop.example"] });
 *   // s.proxy {url, username, password} and s.caCertificate go to the browser; s.card holds
 *   // the stand-ins the agent types.
 */
export class PaycredAgent {
  /**
   * @param {object} options
   * @param {string} options.baseUrl the paycred service
   * @param {string} options.jwt     a private-role JWT (its `iss` is the project)
   */
  constructor({ baseUrl, jwt, fetch: fetchImpl } = {}) {
    if (!baseUrl || !jwt) throw new PaycredError("invalidOptions", "baseUrl and jwt are required.");
    this.baseUrl = String(baseUrl).replace(/\/+$/, "");
    this.jwt = jwt;
    this.projectId = jwtClaims(jwt).iss;
    this._fetch = fetchImpl || globalThis.fetch.bind(globalThis);
  }

  _sessions(purchaseIntentId, sessionId) {
    const path =
      `/projects/${encodeURIComponent(this.projectId)}/purchase-intents/` +
      `${encodeURIComponent(purchaseIntentId)}/browser-sessions`;
    return sessionId === undefined ? path : `${path}/${encodeURIComponent(sessionId)}`;
  }

  /**
   * A browser session of an active `virtual-card` or `pan` intent: resolves with its stand-in
   * `card`, its `proxy` `{url, username, password}` (the password shown this once) and the
   * `caCertificate` the browser trusts. `ttl` is seconds (default: the project's `max_ttl`).
   */
  createBrowserSession(purchaseIntentId, { allowedHosts, ttl } = {}) {
    const body = { allowedHosts };
    if (ttl !== undefined) body.ttl = ttl;
    return request(this._fetch, this.baseUrl, this.jwt, "POST", this._sessions(purchaseIntentId), body);
  }

  /** A session as it is now (no proxy password; no card, proxy or CA once it has ended). */
  getBrowserSession(purchaseIntentId, sessionId) {
    return request(this._fetch, this.baseUrl, this.jwt, "GET", this._sessions(purchaseIntentId, sessionId));
  }

  /** The intent's sessions. */
  listBrowserSessions(purchaseIntentId) {
    return request(this._fetch, this.baseUrl, this.jwt, "GET", this._sessions(purchaseIntentId));
  }

  /** Ends a session at once; resolves with it, `ended`. */
  endBrowserSession(purchaseIntentId, sessionId) {
    return request(this._fetch, this.baseUrl, this.jwt, "DELETE", this._sessions(purchaseIntentId, sessionId));
  }
}

export default Paycred;
