//! The sandbox issuer: virtual cards and network tokens made up locally, deterministically,
//! like an issuer's or a card network's own sandbox (docs/sandbox.md).
//!
//! - `virtual-card`: a Luhn-valid number in the sandbox virtual-card range of the card's brand,
//!   never equal to the stored card; expiry = month of the intent's `expiresAt`,
//!   [`CARD_EXPIRY_YEARS`] years later; a cvc of 3 digits (4 for amex). Always `active`.
//! - `network-token`: a Luhn-valid number in the sandbox token range of the brand, the same
//!   expiry rule, and a cryptogram bound to the intent ([`Sandbox::cryptogram_for`]).
//!   `verify` the first time a payment method gets one (`verified_before == false`), `active`
//!   afterwards.
//! - `pan`: the stored card's own number and expiry (the caller adds the cvc from the vault
//!   while it is retained) when the project has `pan: enabled`, `unavailable` otherwise.
//! - Brands other than visa, mastercard, amex and discover: virtual cards and network tokens
//!   are `unavailable` (the sandbox, like most issuers, only issues on those four networks).
//! - Test cards change the outcome: [`TEST_CARD_ALWAYS_VERIFY`], [`TEST_CARD_NO_VIRTUAL_CARD`],
//!   [`TEST_CARD_NO_NETWORK_TOKEN`].
//!
//! Every number, cvc and cryptogram is derived with HMAC-SHA256 from the sandbox secret and the
//! purchase intent id, so the same intent always gets the same credential (a retried create is
//! reproducible) and different intents get different ones. The secret must therefore persist
//! across restarts for cryptograms to keep verifying.
//!
//! Sandbox ranges (6-digit BINs; numbers from them are only meaningful to this sandbox):
//!
//! | brand      | length | virtual card | network token | cvc |
//! |------------|--------|--------------|---------------|-----|
//! | visa       | 16     | `499990`     | `499991`      | 3   |
//! | mastercard | 16     | `529990`     | `529991`      | 3   |
//! | amex       | 15     | `379990`     | `379991`      | 4   |
//! | discover   | 16     | `601199`     | `601198`      | 3   |

use std::fmt;

use crate::secret::{constant_time_eq, CardNumber, Cryptogram, Cvc, KeyMaterial};
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use time::UtcOffset;

use super::{Credential, CredentialType, IssueRequest, Issued, Issuer, IssuerError};

/// The one-time code the sandbox accepts when an intent in `verify` asks for `otp`.
pub const SANDBOX_OTP: &str = "123456";

/// Test card (visa): network tokens for it ALWAYS need verification, even when the payment
/// method was verified before. Virtual cards work normally.
pub const TEST_CARD_ALWAYS_VERIFY: &str = "4000009900000012";

/// Test card (visa): virtual cards are `unavailable` for it. Network tokens work normally.
pub const TEST_CARD_NO_VIRTUAL_CARD: &str = "4000009900000020";

/// Test card (visa): network tokens are `unavailable` for it. Virtual cards work normally.
pub const TEST_CARD_NO_NETWORK_TOKEN: &str = "4000009900000038";

/// Printed expiry of sandbox virtual cards and tokens: this many years after the month of the
/// intent's `expiresAt`. (The intent's `expiresAt` still decides when the credential stops
/// working; the printed expiry only has to be in the future for merchant forms.)
pub const CARD_EXPIRY_YEARS: i32 = 3;

/// One brand's sandbox ranges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SandboxRange {
    /// Brand name as stored with the card.
    pub brand: &'static str,
    /// Prefix of virtual card numbers.
    pub virtual_card_bin: &'static str,
    /// Prefix of network token numbers.
    pub network_token_bin: &'static str,
    /// Number length, check digit included.
    pub length: usize,
    /// Digits of the cvc.
    pub cvc_length: usize,
}

/// The sandbox ranges, per brand.
pub const SANDBOX_RANGES: [SandboxRange; 4] = [
    SandboxRange {
        brand: "visa",
        virtual_card_bin: "499990",
        network_token_bin: "499991",
        length: 16,
        cvc_length: 3,
    },
    SandboxRange {
        brand: "mastercard",
        virtual_card_bin: "529990",
        network_token_bin: "529991",
        length: 16,
        cvc_length: 3,
    },
    SandboxRange {
        brand: "amex",
        virtual_card_bin: "379990",
        network_token_bin: "379991",
        length: 15,
        cvc_length: 4,
    },
    SandboxRange {
        brand: "discover",
        virtual_card_bin: "601199",
        network_token_bin: "601198",
        length: 16,
        cvc_length: 3,
    },
];

/// The sandbox range for a brand name (case-insensitive; `american express` / `american-express`
/// are amex).
pub fn sandbox_range(brand: &str) -> Option<&'static SandboxRange> {
    let b = brand
        .trim()
        .to_ascii_lowercase()
        .replace([' ', '-', '_'], "");
    let b = if b == "americanexpress" { "amex" } else { &b };
    SANDBOX_RANGES.iter().find(|r| r.brand == b)
}

type HmacSha256 = Hmac<Sha256>;

/// The deterministic sandbox issuer. Holds a 32-byte secret from which every number, cvc and
/// cryptogram is derived; `Debug` does not print it.
pub struct Sandbox {
    secret: KeyMaterial,
}

impl fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Sandbox { secret: **** }")
    }
}

impl Sandbox {
    /// A sandbox issuer keyed by `secret` (keep it stable across restarts).
    pub fn new(secret: KeyMaterial) -> Self {
        Sandbox { secret }
    }

    /// The cryptogram of the network token issued for `intent_id`: base64 (standard, padded)
    /// of the first 20 bytes of HMAC-SHA256(secret, "cryptogram" ‖ intent_id), 28 characters,
    /// shaped like a TAVV.
    pub fn cryptogram_for(&self, intent_id: &str) -> Cryptogram {
        let mac = self.derive("cryptogram", intent_id, 0);
        Cryptogram::new(STANDARD.encode(&mac[..20]))
    }

    /// Whether `cryptogram` is the one issued for `intent_id` (constant-time comparison).
    pub fn cryptogram_matches(&self, intent_id: &str, cryptogram: &str) -> bool {
        constant_time_eq(
            self.cryptogram_for(intent_id).expose().as_bytes(),
            cryptogram.as_bytes(),
        )
    }

    /// Whether `code` is [`SANDBOX_OTP`] (constant-time comparison).
    pub fn otp_matches(code: &str) -> bool {
        constant_time_eq(SANDBOX_OTP.as_bytes(), code.as_bytes())
    }

    /// HMAC-SHA256(secret, len(label) ‖ label ‖ len(intent) ‖ intent ‖ counter).
    fn derive(&self, label: &str, intent_id: &str, counter: u32) -> [u8; 32] {
        // A key shorter than SHA-256's 64-byte block is zero-padded by HMAC's definition, so
        // padding it here gives the same MAC and avoids the fallible `new_from_slice`.
        let mut key = [0u8; 64];
        key[..32].copy_from_slice(self.secret.expose());
        let mut mac = <HmacSha256 as Mac>::new(&key.into());
        mac.update(&(label.len() as u64).to_be_bytes());
        mac.update(label.as_bytes());
        mac.update(&(intent_id.len() as u64).to_be_bytes());
        mac.update(intent_id.as_bytes());
        mac.update(&counter.to_be_bytes());
        mac.finalize().into_bytes().into()
    }

    /// A card-shaped credential in `bin`'s range for this intent, different from `stored`.
    fn card_number(
        &self,
        label: &str,
        bin: &str,
        range: &SandboxRange,
        req: &IssueRequest<'_>,
    ) -> Result<(CardNumber, Cvc), IssuerError> {
        let body_len = range.length.saturating_sub(bin.len() + 1);
        for counter in 0..8 {
            let h = self.derive(label, req.intent_id, counter);
            let body = decimal_digits(&h[0..8], body_len);
            let number = CardNumber::new(super::luhn_complete(&format!("{bin}{body}")));
            if number != *req.card.number {
                let cvc = Cvc::new(decimal_digits(&h[8..16], range.cvc_length));
                return Ok((number, cvc));
            }
        }
        // Unreachable in practice: two different HMAC outputs would both have to equal the card.
        Err(IssuerError::Upstream(
            "sandbox could not derive a distinct number".to_string(),
        ))
    }

    fn printed_expiry(req: &IssueRequest<'_>) -> (String, String) {
        let at = req.expires_at.to_offset(UtcOffset::UTC);
        (
            format!("{:02}", u8::from(at.month())),
            format!("{:04}", at.year() + CARD_EXPIRY_YEARS),
        )
    }
}

impl Issuer for Sandbox {
    fn issue(&self, req: IssueRequest<'_>) -> Result<Issued, IssuerError> {
        let number = req.card.number;
        match req.credential_type {
            CredentialType::Pan => {
                if !req.pan_enabled {
                    return Ok(Issued::Unavailable);
                }
                Ok(Issued::Active(Credential {
                    number: number.clone(),
                    expiration_month: req.card.expiration_month.to_string(),
                    expiration_year: req.card.expiration_year.to_string(),
                    cvc: None,
                    cryptogram: None,
                }))
            }
            CredentialType::VirtualCard => {
                if constant_time_eq(
                    number.expose().as_bytes(),
                    TEST_CARD_NO_VIRTUAL_CARD.as_bytes(),
                ) {
                    return Ok(Issued::Unavailable);
                }
                let Some(range) = sandbox_range(req.card.brand) else {
                    return Ok(Issued::Unavailable);
                };
                let (number, cvc) =
                    self.card_number("virtual-card", range.virtual_card_bin, range, &req)?;
                let (expiration_month, expiration_year) = Self::printed_expiry(&req);
                Ok(Issued::Active(Credential {
                    number,
                    expiration_month,
                    expiration_year,
                    cvc: Some(cvc),
                    cryptogram: None,
                }))
            }
            CredentialType::NetworkToken => {
                if constant_time_eq(
                    number.expose().as_bytes(),
                    TEST_CARD_NO_NETWORK_TOKEN.as_bytes(),
                ) {
                    return Ok(Issued::Unavailable);
                }
                let Some(range) = sandbox_range(req.card.brand) else {
                    return Ok(Issued::Unavailable);
                };
                let (number, _) =
                    self.card_number("network-token", range.network_token_bin, range, &req)?;
                let (expiration_month, expiration_year) = Self::printed_expiry(&req);
                let credential = Credential {
                    number,
                    expiration_month,
                    expiration_year,
                    cvc: None,
                    cryptogram: Some(self.cryptogram_for(req.intent_id)),
                };
                if !req.verified_before
                    || constant_time_eq(
                        req.card.number.expose().as_bytes(),
                        TEST_CARD_ALWAYS_VERIFY.as_bytes(),
                    )
                {
                    Ok(Issued::Verify(credential))
                } else {
                    Ok(Issued::Active(credential))
                }
            }
        }
    }

    fn name(&self) -> &'static str {
        "sandbox"
    }
}

/// `n` decimal digits (zero-padded) from the first 8 bytes of `bytes`; `n` ≤ 18.
fn decimal_digits(bytes: &[u8], n: usize) -> String {
    let mut b = [0u8; 8];
    for (dst, src) in b.iter_mut().zip(bytes) {
        *dst = *src;
    }
    let n = n.min(18);
    let modulus = 10u64.pow(n as u32);
    format!("{:0width$}", u64::from_be_bytes(b) % modulus, width = n)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::domain::issuer::{luhn_valid, CardFacts};
    use time::macros::datetime;

    const VISA: &str = "4242424242424242";
    const MASTERCARD: &str = "5555555555554444";
    const AMEX: &str = "378282246310005";
    const DISCOVER: &str = "6011111111111117";
    const JCB: &str = "3530111333300000";

    fn sandbox() -> Sandbox {
        Sandbox::new(KeyMaterial::new([7u8; 32]))
    }

    /// A stored card (its number leaked: a test lives briefly).
    fn card<'a>(brand: &'a str, number: &str) -> CardFacts<'a> {
        CardFacts {
            brand,
            number: Box::leak(Box::new(CardNumber::new(number))),
            expiration_month: "04",
            expiration_year: "2031",
        }
    }

    fn req<'a>(
        intent_id: &'a str,
        t: CredentialType,
        card: CardFacts<'a>,
        pan_enabled: bool,
        verified_before: bool,
    ) -> IssueRequest<'a> {
        IssueRequest {
            intent_id,
            payment_method_id: "pm_1",
            credential_type: t,
            card,
            pan_enabled,
            verified_before,
            now: datetime!(2026-11-21 10:00 UTC),
            expires_at: datetime!(2026-11-22 10:00 UTC),
        }
    }

    fn issue(r: IssueRequest<'_>) -> Issued {
        sandbox().issue(r).unwrap()
    }

    #[test]
    fn test_cards_are_luhn_valid_visa() {
        for c in [
            TEST_CARD_ALWAYS_VERIFY,
            TEST_CARD_NO_VIRTUAL_CARD,
            TEST_CARD_NO_NETWORK_TOKEN,
        ] {
            assert!(luhn_valid(c) && c.len() == 16 && c.starts_with('4'), "{c}");
        }
        assert_eq!(SANDBOX_OTP.len(), 6);
    }

    #[test]
    fn virtual_cards_per_brand() {
        for (brand, number, bin, len, cvc_len) in [
            ("visa", VISA, "499990", 16, 3),
            ("mastercard", MASTERCARD, "529990", 16, 3),
            ("amex", AMEX, "379990", 15, 4),
            ("American Express", AMEX, "379990", 15, 4),
            ("discover", DISCOVER, "601199", 16, 3),
        ] {
            let Issued::Active(c) = issue(req(
                "pi_1",
                CredentialType::VirtualCard,
                card(brand, number),
                false,
                false,
            )) else {
                panic!("{brand}: not active");
            };
            let n = c.number.expose();
            assert!(luhn_valid(n), "{brand}");
            assert_eq!(n.len(), len, "{brand}");
            assert!(n.starts_with(bin), "{brand}");
            assert_ne!(n, number);
            let cvc = c.cvc.as_ref().unwrap().expose();
            assert_eq!(cvc.len(), cvc_len, "{brand}");
            assert!(cvc.bytes().all(|b| b.is_ascii_digit()));
            assert_eq!(
                (c.expiration_month.as_str(), c.expiration_year.as_str()),
                ("11", "2029")
            );
            assert!(c.cryptogram.is_none());
        }
    }

    #[test]
    fn network_tokens_per_brand() {
        for (brand, number, bin, len) in [
            ("visa", VISA, "499991", 16),
            ("mastercard", MASTERCARD, "529991", 16),
            ("amex", AMEX, "379991", 15),
            ("discover", DISCOVER, "601198", 16),
        ] {
            let Issued::Active(c) = issue(req(
                "pi_2",
                CredentialType::NetworkToken,
                card(brand, number),
                false,
                true,
            )) else {
                panic!("{brand}: not active");
            };
            let n = c.number.expose();
            assert!(luhn_valid(n) && n.len() == len && n.starts_with(bin));
            assert_ne!(n, number);
            assert!(c.cvc.is_none());
            assert_eq!(
                c.cryptogram.as_ref().map(Cryptogram::expose),
                Some(sandbox().cryptogram_for("pi_2").expose())
            );
        }
    }

    #[test]
    fn network_token_needs_verification_once() {
        let first = issue(req(
            "pi_3",
            CredentialType::NetworkToken,
            card("visa", VISA),
            false,
            false,
        ));
        assert_eq!(first.status(), "verify");
        assert!(first.credential().is_some(), "kept while in verify");
        let later = issue(req(
            "pi_4",
            CredentialType::NetworkToken,
            card("visa", VISA),
            false,
            true,
        ));
        assert_eq!(later.status(), "active");
    }

    #[test]
    fn always_verify_test_card() {
        let c = card("visa", TEST_CARD_ALWAYS_VERIFY);
        for verified_before in [false, true] {
            let r = req(
                "pi_5",
                CredentialType::NetworkToken,
                c,
                false,
                verified_before,
            );
            assert_eq!(issue(r).status(), "verify");
        }
        let vc = issue(req("pi_5", CredentialType::VirtualCard, c, false, true));
        assert_eq!(vc.status(), "active");
    }

    #[test]
    fn no_virtual_card_test_card() {
        let c = card("visa", TEST_CARD_NO_VIRTUAL_CARD);
        assert_eq!(
            issue(req("pi_6", CredentialType::VirtualCard, c, false, true)),
            Issued::Unavailable
        );
        assert_eq!(
            issue(req("pi_6", CredentialType::NetworkToken, c, false, true)).status(),
            "active"
        );
    }

    #[test]
    fn no_network_token_test_card() {
        let c = card("visa", TEST_CARD_NO_NETWORK_TOKEN);
        for verified_before in [false, true] {
            let r = req(
                "pi_7",
                CredentialType::NetworkToken,
                c,
                false,
                verified_before,
            );
            assert_eq!(issue(r), Issued::Unavailable);
        }
        assert_eq!(
            issue(req("pi_7", CredentialType::VirtualCard, c, false, true)).status(),
            "active"
        );
    }

    #[test]
    fn other_brands_unavailable() {
        for t in [CredentialType::VirtualCard, CredentialType::NetworkToken] {
            assert_eq!(
                issue(req("pi_8", t, card("jcb", JCB), false, true)),
                Issued::Unavailable
            );
            assert_eq!(
                issue(req("pi_8", t, card("", VISA), false, true)),
                Issued::Unavailable
            );
        }
    }

    #[test]
    fn pan_only_when_enabled() {
        let c = card("jcb", JCB);
        assert_eq!(
            issue(req("pi_9", CredentialType::Pan, c, false, true)),
            Issued::Unavailable
        );
        let Issued::Active(p) = issue(req("pi_9", CredentialType::Pan, c, true, false)) else {
            panic!("pan not active");
        };
        assert_eq!(p.number.expose(), JCB);
        assert_eq!(
            (p.expiration_month.as_str(), p.expiration_year.as_str()),
            ("04", "2031")
        );
        assert!(p.cvc.is_none() && p.cryptogram.is_none());
    }

    #[test]
    fn deterministic_per_intent_and_distinct_across_intents() {
        let a1 = issue(req(
            "pi_a",
            CredentialType::VirtualCard,
            card("visa", VISA),
            false,
            true,
        ));
        let a2 = issue(req(
            "pi_a",
            CredentialType::VirtualCard,
            card("visa", VISA),
            false,
            true,
        ));
        let b = issue(req(
            "pi_b",
            CredentialType::VirtualCard,
            card("visa", VISA),
            false,
            true,
        ));
        assert_eq!(a1, a2);
        assert_ne!(
            a1.credential().unwrap().number,
            b.credential().unwrap().number
        );
        // Another secret, another number.
        let other = Sandbox::new(KeyMaterial::new([8u8; 32]))
            .issue(req(
                "pi_a",
                CredentialType::VirtualCard,
                card("visa", VISA),
                false,
                true,
            ))
            .unwrap();
        assert_ne!(a1, other);
        // Virtual card and token for the same intent differ.
        let t = issue(req(
            "pi_a",
            CredentialType::NetworkToken,
            card("visa", VISA),
            false,
            true,
        ));
        assert_ne!(
            a1.credential().unwrap().number,
            t.credential().unwrap().number
        );
    }

    #[test]
    fn many_intents_give_valid_distinct_numbers() {
        let s = sandbox();
        let mut seen = std::collections::HashSet::new();
        for i in 0..2000 {
            let id = format!("pi_{i}");
            let c = s
                .issue(req(
                    &id,
                    CredentialType::VirtualCard,
                    card("amex", AMEX),
                    false,
                    true,
                ))
                .unwrap();
            let n = c.credential().unwrap().number.expose().to_string();
            assert!(luhn_valid(&n) && n.len() == 15 && n.starts_with("379990"));
            assert!(seen.insert(n));
        }
    }

    #[test]
    fn never_returns_the_stored_number() {
        // Store a card whose number is exactly the one the sandbox would derive first.
        let first = issue(req(
            "pi_x",
            CredentialType::VirtualCard,
            card("visa", VISA),
            false,
            true,
        ));
        let derived = first.credential().unwrap().number.clone();
        let again = issue(req(
            "pi_x",
            CredentialType::VirtualCard,
            card("visa", derived.expose()),
            false,
            true,
        ));
        let n = &again.credential().unwrap().number;
        assert_ne!(n, &derived);
        assert!(luhn_valid(n.expose()) && n.expose().starts_with("499990"));
    }

    #[test]
    fn cryptogram_bound_to_intent() {
        let s = sandbox();
        let a = s.cryptogram_for("pi_1");
        assert_eq!(a, s.cryptogram_for("pi_1"));
        assert_ne!(a, s.cryptogram_for("pi_2"));
        assert_ne!(
            a,
            Sandbox::new(KeyMaterial::new([1u8; 32])).cryptogram_for("pi_1")
        );
        assert_eq!(a.expose().len(), 28);
        assert!(a.expose().ends_with('='));
        assert!(s.cryptogram_matches("pi_1", a.expose()));
        assert!(!s.cryptogram_matches("pi_2", a.expose()));
        assert!(!s.cryptogram_matches("pi_1", ""));
    }

    #[test]
    fn otp() {
        assert!(Sandbox::otp_matches("123456"));
        assert!(!Sandbox::otp_matches("123457"));
        assert!(!Sandbox::otp_matches("1234567"));
        assert!(!Sandbox::otp_matches(""));
    }

    #[test]
    fn debug_hides_secret_and_name() {
        let s = Sandbox::new(KeyMaterial::new([0xAB; 32]));
        let d = format!("{s:?}");
        assert!(!d.to_lowercase().contains("ab, ") && !d.contains("171"));
        assert_eq!(s.name(), "sandbox");
    }

    #[test]
    fn range_lookup() {
        assert_eq!(sandbox_range("VISA").unwrap().brand, "visa");
        assert_eq!(sandbox_range("american-express").unwrap().brand, "amex");
        assert!(sandbox_range("unionpay").is_none());
        for r in SANDBOX_RANGES {
            assert_eq!(r.virtual_card_bin.len(), 6);
            assert_ne!(r.virtual_card_bin, r.network_token_bin);
        }
    }
}
