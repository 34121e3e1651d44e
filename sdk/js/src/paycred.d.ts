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
  type: "otp" | string;
  channel?: "sms" | "email" | string;
  length?: number;
  attemptsRemaining?: number;
  error?: "invalidCode" | string;
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
  verifyPurchaseIntent(tenantId: string, purchaseIntentId: string): Promise<VerifiedPurchaseIntent>;
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
export default Paycred;
