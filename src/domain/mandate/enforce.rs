//! Enforcement: [`Mandates::check`] of one [`Authorization`], the [`DeclineReason`] it gives,
//! and the credential's expiry.

use std::fmt;

use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use time::{Duration, OffsetDateTime};

use super::{Currency, Mandates, Mcc, MerchantId};

/// One authorization attempt, as the sandbox authorization endpoint receives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authorization {
    /// Amount to authorize, in `currency`.
    pub amount: Decimal,
    /// Currency of `amount`.
    pub currency: Currency,
    /// Merchant category code of the merchant, when known.
    pub mcc: Option<Mcc>,
    /// The merchant's id, when known.
    pub merchant: Option<MerchantId>,
}

/// Why an authorization was declined. Serialised as the camelCase name (`amountOverMaximum`).
///
/// [`Mandates::check`] gives the first five and the last ([`DeclineReason::MerchantNotAllowed`]);
/// the others are for the authorization endpoint (intent not active, wrong cvc or cryptogram,
/// unknown card).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum DeclineReason {
    /// The amount is above the `maxAmount` mandate.
    AmountOverMaximum,
    /// The currency is not the mandate's currency.
    CurrencyMismatch,
    /// The merchant category is not among the allowed MCCs (or was not given).
    MccNotAllowed,
    /// The credential is past its expiry.
    Expired,
    /// The usage limit is used up.
    UsageLimitReached,
    /// The purchase intent is not `active` (still `verify`, canceled, unavailable).
    NotActive,
    /// The cvc does not match the credential.
    InvalidCvc,
    /// The network-token cryptogram does not match the purchase intent.
    InvalidCryptogram,
    /// Number or expiry match no credential.
    InvalidCard,
    /// The credential is bound to a merchant (a `merchant` mandate) and the authorization
    /// names another, or none.
    MerchantNotAllowed,
}

impl DeclineReason {
    /// Every reason, in declaration order.
    pub const ALL: [DeclineReason; 10] = [
        DeclineReason::AmountOverMaximum,
        DeclineReason::CurrencyMismatch,
        DeclineReason::MccNotAllowed,
        DeclineReason::Expired,
        DeclineReason::UsageLimitReached,
        DeclineReason::NotActive,
        DeclineReason::InvalidCvc,
        DeclineReason::InvalidCryptogram,
        DeclineReason::InvalidCard,
        DeclineReason::MerchantNotAllowed,
    ];

    /// The wire name, e.g. `amountOverMaximum`.
    pub fn as_str(self) -> &'static str {
        match self {
            DeclineReason::AmountOverMaximum => "amountOverMaximum",
            DeclineReason::CurrencyMismatch => "currencyMismatch",
            DeclineReason::MccNotAllowed => "mccNotAllowed",
            DeclineReason::Expired => "expired",
            DeclineReason::UsageLimitReached => "usageLimitReached",
            DeclineReason::NotActive => "notActive",
            DeclineReason::InvalidCvc => "invalidCvc",
            DeclineReason::InvalidCryptogram => "invalidCryptogram",
            DeclineReason::InvalidCard => "invalidCard",
            DeclineReason::MerchantNotAllowed => "merchantNotAllowed",
        }
    }
}

impl fmt::Display for DeclineReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Mandates {
    /// Checks one authorization against the mandates. `uses_so_far` counts the approved uses
    /// before this one. The first failing rule wins, in this order: expiry, usage limit,
    /// currency, amount, MCC, merchant.
    ///
    /// The amount's sign and scale are the caller's to validate; this only compares.
    pub fn check(
        &self,
        a: &Authorization,
        now: OffsetDateTime,
        uses_so_far: u32,
    ) -> Result<(), DeclineReason> {
        if let Some(at) = self.expires_at {
            if now >= at {
                return Err(DeclineReason::Expired);
            }
        }
        if let Some(limit) = self.usage_limit {
            if uses_so_far >= limit {
                return Err(DeclineReason::UsageLimitReached);
            }
        }
        if let Some(currency) = self.currency {
            if a.currency != currency {
                return Err(DeclineReason::CurrencyMismatch);
            }
        }
        if let Some(max) = self.max_amount {
            if a.amount > max {
                return Err(DeclineReason::AmountOverMaximum);
            }
        }
        if !self.mccs.is_empty() {
            match a.mcc {
                Some(mcc) if self.mccs.contains(&mcc) => {}
                _ => return Err(DeclineReason::MccNotAllowed),
            }
        }
        if let Some(bound) = &self.merchant {
            if a.merchant.as_ref() != Some(bound) {
                return Err(DeclineReason::MerchantNotAllowed);
            }
        }
        Ok(())
    }

    /// The credential's `expiresAt`: `created_at + default_lifetime` (the service gives 24 h),
    /// or the `expirationDate` mandate when that is sooner.
    pub fn credential_expires_at(
        &self,
        created_at: OffsetDateTime,
        default_lifetime: Duration,
    ) -> OffsetDateTime {
        let default = created_at.saturating_add(default_lifetime);
        match self.expires_at {
            Some(at) if at < default => at,
            _ => default,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::super::parse_mandates;
    use super::super::tests::{cur, dec, expiring, m, max, mcc, mccs, merchant, uses, NOW};
    use super::*;
    use serde_json::json;
    use time::macros::datetime;

    #[test]
    fn check_rules() {
        use DeclineReason::*;
        let full = Mandates {
            max_amount: Some(dec("100.00")),
            currency: cur("USD"),
            mccs: vec![mcc("5411"), mcc("5812")],
            expires_at: Some(datetime!(2026-12-01 0:00 UTC)),
            usage_limit: Some(3),
            merchant: None,
        };
        let none = Mandates::default();
        let jpy = max("1000", "JPY");
        let mcc_only = mccs(&["4111"]);
        let eur_only = Mandates {
            currency: cur("EUR"),
            ..Mandates::default()
        };
        let once = uses(1);
        let auth = |amount: &str, currency: &str, m: Option<&str>| Authorization {
            amount: dec(amount),
            currency: Currency::parse(currency).unwrap(),
            mcc: m.map(mcc),
            merchant: None,
        };
        let before = datetime!(2026-11-30 23:59:59 UTC);
        let at = datetime!(2026-12-01 0:00 UTC);
        let after = datetime!(2027-01-01 0:00 UTC);
        type Case<'a> = (
            &'a str,
            &'a Mandates,
            Authorization,
            OffsetDateTime,
            u32,
            Result<(), DeclineReason>,
        );
        #[rustfmt::skip]
        let cases: Vec<Case> = vec![
            ("within every limit", &full, auth("50", "USD", Some("5411")), NOW, 0, Ok(())),
            ("exactly the maximum", &full, auth("100", "USD", Some("5411")), NOW, 0, Ok(())),
            ("one cent over", &full, auth("100.01", "USD", Some("5411")), NOW, 0, Err(AmountOverMaximum)),
            ("sub-cent over", &full, auth("100.001", "USD", Some("5411")), NOW, 0, Err(AmountOverMaximum)),
            ("other currency", &full, auth("50", "EUR", Some("5411")), NOW, 0, Err(CurrencyMismatch)),
            ("numeric code of the same currency", &full, auth("50", "840", Some("5411")), NOW, 0, Ok(())),
            ("MCC not listed", &full, auth("50", "USD", Some("7995")), NOW, 0, Err(MccNotAllowed)),
            ("MCC unknown", &full, auth("50", "USD", None), NOW, 0, Err(MccNotAllowed)),
            ("second listed MCC", &full, auth("50", "USD", Some("5812")), NOW, 0, Ok(())),
            ("last use", &full, auth("50", "USD", Some("5411")), NOW, 2, Ok(())),
            ("uses used up", &full, auth("50", "USD", Some("5411")), NOW, 3, Err(UsageLimitReached)),
            ("beyond the limit", &full, auth("50", "USD", Some("5411")), NOW, 9, Err(UsageLimitReached)),
            ("just before expiry", &full, auth("50", "USD", Some("5411")), before, 0, Ok(())),
            ("at expiry", &full, auth("50", "USD", Some("5411")), at, 0, Err(Expired)),
            ("after expiry", &full, auth("50", "USD", Some("5411")), after, 0, Err(Expired)),
            ("expiry wins over everything", &full, auth("500", "EUR", None), after, 5, Err(Expired)),
            ("usage wins over currency", &full, auth("500", "EUR", None), NOW, 3, Err(UsageLimitReached)),
            ("currency wins over amount", &full, auth("500", "EUR", None), NOW, 0, Err(CurrencyMismatch)),
            ("amount wins over MCC", &full, auth("500", "USD", Some("7995")), NOW, 0, Err(AmountOverMaximum)),
            ("no mandates", &none, auth("1000000", "JPY", None), after, 1000, Ok(())),
            ("JPY at maximum", &jpy, auth("1000", "JPY", None), NOW, 0, Ok(())),
            ("JPY over", &jpy, auth("1001", "JPY", None), NOW, 0, Err(AmountOverMaximum)),
            ("MCC only, listed", &mcc_only, auth("1", "GBP", Some("4111")), NOW, 0, Ok(())),
            ("MCC only, other", &mcc_only, auth("1", "GBP", Some("4112")), NOW, 0, Err(MccNotAllowed)),
            ("currency only, same", &eur_only, auth("1000000", "978", None), NOW, 0, Ok(())),
            ("currency only, other", &eur_only, auth("1", "CHF", None), NOW, 0, Err(CurrencyMismatch)),
            ("usage limit 1, first use", &once, auth("1", "USD", None), NOW, 0, Ok(())),
            ("usage limit 1, second use", &once, auth("1", "USD", None), NOW, 1, Err(UsageLimitReached)),
        ];
        for (name, mandates, a, now, used, want) in cases {
            assert_eq!(mandates.check(&a, now, used), want, "{name}");
        }
    }

    #[test]
    fn parsed_mandates_enforce() {
        let list = json!([
            m("maxAmount", json!("20")),
            m("currency", json!("usd")),
            m("mcc", json!("5411")),
            {"type": "usageLimit", "value": "1", "details": {"count": 1}}
        ]);
        let mandates = parse_mandates(&list, NOW).unwrap();
        let a = Authorization {
            amount: dec("19.99"),
            currency: Currency::parse("840").unwrap(),
            mcc: Some(mcc("5411")),
            merchant: None,
        };
        assert_eq!(mandates.check(&a, NOW, 0), Ok(()));
        assert_eq!(
            mandates.check(&a, NOW, 1),
            Err(DeclineReason::UsageLimitReached)
        );
    }

    #[test]
    fn decline_reason_names() {
        let want = [
            "amountOverMaximum",
            "currencyMismatch",
            "mccNotAllowed",
            "expired",
            "usageLimitReached",
            "notActive",
            "invalidCvc",
            "invalidCryptogram",
            "invalidCard",
        ];
        for (r, name) in DeclineReason::ALL.into_iter().zip(want) {
            assert_eq!(r.as_str(), name);
            assert_eq!(r.to_string(), name);
            assert_eq!(serde_json::to_value(r).unwrap(), json!(name));
            assert_eq!(
                serde_json::from_value::<DeclineReason>(json!(name)).unwrap(),
                r
            );
        }
    }

    #[test]
    fn a_bound_credential_needs_its_merchant() {
        use DeclineReason::*;
        let bound = Mandates {
            mccs: vec![mcc("5411")],
            merchant: Some(merchant("acme")),
            ..Mandates::default()
        };
        let auth = |m: Option<&str>, at: Option<&str>| Authorization {
            amount: dec("1"),
            currency: Currency::parse("USD").unwrap(),
            mcc: m.map(mcc),
            merchant: at.map(merchant),
        };
        #[rustfmt::skip]
        let cases = [
            ("its merchant", auth(Some("5411"), Some("acme")), Ok(())),
            ("another merchant", auth(Some("5411"), Some("globex")), Err(MerchantNotAllowed)),
            ("case matters", auth(Some("5411"), Some("ACME")), Err(MerchantNotAllowed)),
            ("no merchant", auth(Some("5411"), None), Err(MerchantNotAllowed)),
            ("MCC wins over merchant", auth(Some("7995"), Some("globex")), Err(MccNotAllowed)),
        ];
        for (name, a, want) in cases {
            assert_eq!(bound.check(&a, NOW, 0), want, "{name}");
        }
        // Unbound: any merchant, or none.
        let a = auth(None, Some("globex"));
        assert_eq!(Mandates::default().check(&a, NOW, 0), Ok(()));
        assert_eq!(MerchantNotAllowed.as_str(), "merchantNotAllowed");
        assert_eq!(
            serde_json::to_value(MerchantNotAllowed).unwrap(),
            json!("merchantNotAllowed")
        );
    }

    #[test]
    fn credential_expiry() {
        let created = datetime!(2026-06-01 12:00 UTC);
        let day = Duration::hours(24);
        assert_eq!(
            Mandates::default().credential_expires_at(created, day),
            created + day
        );
        let soon = expiring(datetime!(2026-06-01 18:00 UTC));
        assert_eq!(
            soon.credential_expires_at(created, day),
            datetime!(2026-06-01 18:00 UTC)
        );
        let late = expiring(datetime!(2026-12-01 0:00 UTC));
        assert_eq!(late.credential_expires_at(created, day), created + day);
    }
}
