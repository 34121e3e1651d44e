/** A card as the end user typed it. */
export interface Card {
  number: string;
  expirationMonth: string;
  expirationYear: string;
  cvc: string;
}

/** The token-vault entry of a card. */
export interface CardToken {
  id: string;
  fingerprint: string;
  createdAt: string;
  maskedData: string;
  expiresAt?: string;
}

/** A public EC P-256 JWK with its key id. */
export interface ClientEncryptionKey {
  kty: "EC";
  crv: "P-256";
  x: string;
  y: string;
  kid: string;
  use?: string;
  alg?: string;
}

/** A verification step asked for by the service. */
export interface NextAction {
  type: "otp" | "passkey" | string;
  channel?: "sms" | "email" | string;
  length?: number;
  attemptsRemaining?: number;
  error?: "invalidCode" | string;
  /** `passkey`: `PublicKeyCredentialRequestOptions` as JSON (binary members base64url). */
  options?: Record<string, unknown>;
}

/** What verifyPurchaseIntent resolves with. */
export interface VerifiedPurchaseIntent {
  id: string;
  status: "active" | "verify" | string;
  nextAction: null;
}

export interface PaymentMethod {
  id: string;
  type: "card";
  entityId: string;
  card: {
    type: string;
    brand: string;
    details: { bin: string; last4: string; expirationMonth: string; expirationYear: string };
    display: Record<string, string>;
  };
  credentialTypes: string[];
  createdAt: string;
  token?: CardToken;
}

export interface PaycredOptions {
  /** The paycred service, e.g. `https://paycred.example`. */
  baseUrl: string;
  /** A public-role JWT of the end user; its `iss` is the project. */
  jwt: string;
  /** Asks for the one-time code instead of the built-in dialog; `null` cancels. */
  onOtp?: (action: NextAction) => Promise<string | null> | string | null;
  fetch?: typeof fetch;
  crypto?: Crypto;
  document?: Document;
  /** The WebAuthn API; default `navigator.credentials`. */
  credentials?: CredentialsContainer;
}

/** A registered passkey of the JWT's entity (never its key). */
export interface Passkey {
  id: string;
  createdAt: string;
  lastUsedAt: string | null;
  name?: string;
}

/** Every rejection: `type` is the service's error envelope `type`, or an SDK one. */
export class PaycredError extends Error {
  type: string;
  status: number;
  details?: { fields?: Record<string, string> } & Record<string, unknown>;
}

export class Paycred {
  constructor(options: PaycredOptions);
  readonly projectId: string;
  readonly entityId: string;
  clientEncryptionKey(options?: { refresh?: boolean }): Promise<ClientEncryptionKey>;
  /** A compact JWE (ECDH-ES, A256GCM) of the card: the `encryptedCard` the service accepts. */
  encryptCard(card: Card): Promise<string>;
  createCardToken(card: Card): Promise<CardToken>;
  createPaymentMethod(card: Card | { tokenId: string }): Promise<PaymentMethod>;
  /** Follows `nextAction`: a passkey (`navigator.credentials.get`) or a one-time code. */
  verifyPurchaseIntent(tenantId: string, purchaseIntentId: string): Promise<VerifiedPurchaseIntent>;
  /** Options → `navigator.credentials.create` → finish; the JWT's entity's new passkey. */
  registerPasskey(tenantId?: string, options?: { name?: string }): Promise<Passkey>;
  listPasskeys(tenantId?: string): Promise<Passkey[]>;
  deletePasskey(tenantId: string | undefined, passkeyId: string): Promise<void>;
}

/** A browser session of a purchase intent (docs/browser-checkout.md). */
export interface BrowserSession {
  id: string;
  purchaseIntentId: string;
  status: "active" | "ended";
  allowedHosts: string[];
  createdAt: string;
  expiresAt: string;
  endedAt?: string;
  /** Requests that carried the real values. */
  uses: number;
  /** Stand-ins, safe to show a model; while the session is active. */
  card?: Card;
  /** The forward proxy; `password` only in the answer that created the session. */
  proxy?: { url: string; username: string; password?: string };
  /** The interception CA (PEM) the browser trusts; while the session is active. */
  caCertificate?: string;
}

export interface PaycredAgentOptions {
  baseUrl: string;
  /** A private-role JWT; its `iss` is the project. Keep it on the server. */
  jwt: string;
  fetch?: typeof fetch;
}

/** The agent's server side of browser checkout (private role; never in a page). */
export class PaycredAgent {
  constructor(options: PaycredAgentOptions);
  readonly projectId: string;
  createBrowserSession(
    purchaseIntentId: string,
    options: { allowedHosts: string[]; ttl?: number },
  ): Promise<BrowserSession>;
  getBrowserSession(purchaseIntentId: string, sessionId: string): Promise<BrowserSession>;
  listBrowserSessions(purchaseIntentId: string): Promise<BrowserSession[]>;
  endBrowserSession(purchaseIntentId: string, sessionId: string): Promise<BrowserSession>;
}

export function encryptJwe(
  publicJwk: ClientEncryptionKey,
  plaintext: Uint8Array,
  options?: { crypto?: Crypto },
): Promise<string>;
export function concatKdf(
  subtle: SubtleCrypto,
  z: ArrayBuffer | Uint8Array,
  enc: string,
  apu?: Uint8Array,
  apv?: Uint8Array,
  bits?: number,
): Promise<Uint8Array>;
export function otpDialog(action: NextAction, options?: { document?: Document }): Promise<string | null>;
export function jwtClaims(jwt: string): Record<string, unknown>;
export function base64url(bytes: Uint8Array | ArrayBuffer): string;
export function base64urlDecode(text: string): Uint8Array;
/** The service's creation options (JSON) as `navigator.credentials.create` takes them. */
export function creationOptionsFromJson(
  options: Record<string, unknown>,
): PublicKeyCredentialCreationOptions;
/** The service's request options (JSON) as `navigator.credentials.get` takes them. */
export function requestOptionsFromJson(
  options: Record<string, unknown>,
): PublicKeyCredentialRequestOptions;
/** A PublicKeyCredential as the JSON the service reads (binary members base64url). */
export function credentialToJson(credential: PublicKeyCredential): Record<string, unknown>;
export default Paycred;
