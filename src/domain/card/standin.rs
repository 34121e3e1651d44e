//! Stand-ins: the card values a browser checkout session shows its agent in place of the
//! real ones.
//!
//! A stand-in number passes every check a checkout form makes on its own: it is Luhn-valid,
//! as long as the real number, and of the same brand, because it keeps the real number's
//! first [`KEPT_PREFIX`] digits (the BIN; every brand of [`brand_of`]'s IIN table is decided
//! by 6 digits or fewer, and the BIN is what a masked number shows anyway). The digits after
//! it are drawn from the operating system's RNG and the last one is the Luhn check digit.
//! It never equals the real number, and a caller-given predicate keeps it apart from the
//! stand-ins of the other live sessions; a draw that fails either is drawn again, at most
//! [`TRIES`] times.
//!
//! A stand-in CVC has the real CVC's length, never equals it, and never starts with `0`, so
//! that a form that reads the field as a number sends it as written.
//!
//! Stand-ins are not secret: they are shown to a model. The real values stay in
//! [`CardNumber`] and [`Cvc`].

use super::brand_of;
use crate::domain::issuer::{luhn_complete, luhn_valid};
use crate::secret::{CardNumber, Cvc, Revealed};
use rand::rngs::OsRng;
use rand::Rng;

/// Leading digits of the real number a stand-in keeps: the BIN, which decides the brand.
pub const KEPT_PREFIX: usize = 6;

/// Draws of a stand-in before giving up.
pub const TRIES: usize = 32;

/// Why no stand-in was made. Messages never carry a card value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum StandInError {
    #[error("the card number is not 12 to 19 digits")]
    NotACardNumber,
    #[error("the cvc is not 3 or 4 digits")]
    NotACvc,
    #[error("a stand-in does not match the length of its real value")]
    LengthMismatch,
    #[error("no free stand-in after {TRIES} draws")]
    Exhausted,
}

/// Whether `s` is `len` ASCII digits for a `len` in `lengths`.
fn digits_in(s: &str, lengths: std::ops::RangeInclusive<usize>) -> bool {
    lengths.contains(&s.len()) && s.bytes().all(|b| b.is_ascii_digit())
}

/// `n` random digits, the first of them never `0` when `nonzero_first`.
fn random_digits(n: usize, nonzero_first: bool) -> String {
    (0..n)
        .map(|i| {
            let low = if i == 0 && nonzero_first { 1 } else { 0 };
            char::from(b'0' + OsRng.gen_range(low..10u8))
        })
        .collect()
}

/// A stand-in for the real card number `real` (digits only, 12 to 19 of them): see the
/// module doc. `is_taken` says whether a candidate is already another live session's.
pub fn number(real: &CardNumber, is_taken: impl Fn(&str) -> bool) -> Result<String, StandInError> {
    let digits = real.expose();
    if !digits_in(digits, 12..=19) {
        return Err(StandInError::NotACardNumber);
    }
    let (prefix, rest) = digits.split_at(KEPT_PREFIX);
    let brand = brand_of(digits);
    for _ in 0..TRIES {
        let candidate = luhn_complete(&format!("{prefix}{}", random_digits(rest.len() - 1, false)));
        let fits = candidate.len() == digits.len()
            && brand_of(&candidate) == brand
            && CardNumber::new(candidate.as_str()) != *real;
        if fits && !is_taken(&candidate) {
            return Ok(candidate);
        }
    }
    Err(StandInError::Exhausted)
}

/// A stand-in for the real CVC `real` (3 or 4 digits): see the module doc.
pub fn cvc(real: &Cvc) -> Result<String, StandInError> {
    let len = real.expose().len();
    if !digits_in(real.expose(), 3..=4) {
        return Err(StandInError::NotACvc);
    }
    (0..TRIES)
        .map(|_| random_digits(len, true))
        .find(|candidate| Cvc::new(candidate.as_str()) != *real)
        .ok_or(StandInError::Exhausted)
}

/// A browser session's card: the real number and CVC, each with the stand-in typed in its
/// place. `Debug` shows the stand-ins and masks the real values.
#[derive(Clone, Debug)]
pub struct StandIns {
    number: CardNumber,
    number_stand_in: String,
    cvc: Option<(Cvc, String)>,
}

impl StandIns {
    /// Fresh stand-ins for a card (`cvc`: none where the credential keeps none). `is_taken`
    /// says whether a stand-in number is already another live session's.
    pub fn new(
        number: CardNumber,
        cvc: Option<Cvc>,
        is_taken: impl Fn(&str) -> bool,
    ) -> Result<Self, StandInError> {
        let number_stand_in = self::number(&number, is_taken)?;
        let cvc = match cvc {
            Some(real) => {
                let stand_in = self::cvc(&real)?;
                Some((real, stand_in))
            }
            None => None,
        };
        Ok(Self {
            number,
            number_stand_in,
            cvc,
        })
    }

    /// A session's card again, from its real values and the stand-ins it was given. Each
    /// stand-in must be digits of its real value's length.
    pub fn from_stored(
        number: CardNumber,
        number_stand_in: String,
        cvc: Option<(Cvc, String)>,
    ) -> Result<Self, StandInError> {
        let same_shape = |real: &str, stand_in: &str| {
            real.len() == stand_in.len() && stand_in.bytes().all(|b| b.is_ascii_digit())
        };
        if !luhn_valid(&number_stand_in) || !same_shape(number.expose(), &number_stand_in) {
            return Err(StandInError::LengthMismatch);
        }
        if let Some((real, stand_in)) = &cvc {
            if !same_shape(real.expose(), stand_in) {
                return Err(StandInError::LengthMismatch);
            }
        }
        Ok(Self {
            number,
            number_stand_in,
            cvc,
        })
    }

    /// The stand-in number, to show.
    pub fn number(&self) -> &str {
        &self.number_stand_in
    }

    /// The stand-in CVC, to show; none where the card has no CVC.
    pub fn cvc(&self) -> Option<&str> {
        self.cvc.as_ref().map(|(_, stand_in)| stand_in.as_str())
    }

    /// The real number.
    pub fn real_number(&self) -> &CardNumber {
        &self.number
    }

    /// The real CVC.
    pub fn real_cvc(&self) -> Option<&Cvc> {
        self.cvc.as_ref().map(|(real, _)| real)
    }

    /// Each real value with its stand-in, the number first: what an answer's guard replaces
    /// on the way back to the browser.
    pub fn pairs(&self) -> Vec<(Revealed, &str)> {
        let mut pairs = vec![(
            Revealed::Number(self.number.clone()),
            self.number_stand_in.as_str(),
        )];
        if let Some((real, stand_in)) = &self.cvc {
            pairs.push((Revealed::Cvc(real.clone()), stand_in.as_str()));
        }
        pairs
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;
    use crate::domain::card::Brand;
    use proptest::prelude::*;
    use std::cell::Cell;

    /// A real number of each brand and length, with its brand.
    const CARDS: &[(&str, Brand)] = &[
        ("4242424242424242", Brand::Visa),
        ("4222222222222", Brand::Visa),
        ("5555555555554444", Brand::Mastercard),
        ("2223003122003222", Brand::Mastercard),
        ("378282246310005", Brand::Amex),
        ("6011111111111117", Brand::Discover),
        ("6221260000000006", Brand::Discover),
        ("3530111333300000", Brand::Jcb),
        ("36227206271667", Brand::DinersClub),
        ("6205500000000000004", Brand::UnionPay),
        ("6759649826438453", Brand::Maestro),
        ("500000000000", Brand::Maestro),
        ("9999999999999995", Brand::Unknown),
    ];

    #[test]
    fn a_stand_in_number_looks_like_the_real_one() {
        for &(real, brand) in CARDS {
            let real = if luhn_valid(real) {
                real.to_string()
            } else {
                luhn_complete(&real[..real.len() - 1])
            };
            assert_eq!(brand_of(&real), brand, "{real}");
            let card = CardNumber::new(real.as_str());
            for _ in 0..20 {
                let s = number(&card, |_| false).unwrap();
                assert_eq!(s.len(), real.len(), "{real} {s}");
                assert!(luhn_valid(&s), "{s}");
                assert_eq!(brand_of(&s), brand, "{s}");
                assert_eq!(s[..KEPT_PREFIX], real[..KEPT_PREFIX]);
                assert_ne!(s, real);
            }
        }
    }

    #[test]
    fn a_taken_stand_in_is_drawn_again_a_bounded_number_of_times() {
        let card = CardNumber::new("4242424242424242");
        let asked = Cell::new(0);
        let third = number(&card, |_| {
            asked.set(asked.get() + 1);
            asked.get() < 3
        })
        .unwrap();
        assert_eq!(asked.get(), 3);
        assert!(luhn_valid(&third));
        let asked = Cell::new(0);
        let none = number(&card, |_| {
            asked.set(asked.get() + 1);
            true
        });
        assert_eq!(none, Err(StandInError::Exhausted));
        assert_eq!(asked.get(), TRIES);
    }

    #[test]
    fn what_is_not_a_card_gets_no_stand_in() {
        for bad in [
            "",
            "42424242424",
            "42424242424242424242",
            "4242 4242 4242 4242",
        ] {
            let r = number(&CardNumber::new(bad), |_| false);
            assert_eq!(r, Err(StandInError::NotACardNumber), "{bad}");
        }
        for bad in ["", "12", "12345", "12a"] {
            assert_eq!(cvc(&Cvc::new(bad)), Err(StandInError::NotACvc), "{bad}");
        }
    }

    #[test]
    fn a_stand_in_cvc_has_the_real_length_and_no_leading_zero() {
        for real in ["000", "123", "999", "0000", "1234", "9876"] {
            for _ in 0..50 {
                let s = cvc(&Cvc::new(real)).unwrap();
                assert_eq!(s.len(), real.len());
                assert_ne!(s, real);
                assert!(s.bytes().all(|b| b.is_ascii_digit()));
                assert_ne!(s.as_bytes()[0], b'0');
            }
        }
    }

    #[test]
    fn stand_ins_are_drawn_at_random() {
        let card = CardNumber::new("4242424242424242");
        let drawn: std::collections::HashSet<String> =
            (0..20).map(|_| number(&card, |_| false).unwrap()).collect();
        assert!(drawn.len() > 15, "{drawn:?}");
    }

    #[test]
    fn pairs_hold_the_real_values_in_secret_types() {
        let card = StandIns::new(
            CardNumber::new("378282246310005"),
            Some(Cvc::new("1234")),
            |_| false,
        )
        .unwrap();
        let pairs = card.pairs();
        assert_eq!(pairs.len(), 2);
        assert_eq!(
            pairs[0].0,
            Revealed::Number(CardNumber::new("378282246310005"))
        );
        assert_eq!(pairs[0].1, card.number());
        assert_eq!(pairs[1].0, Revealed::Cvc(Cvc::new("1234")));
        assert_eq!(Some(pairs[1].1), card.cvc());
        let shown = format!("{card:?}");
        assert!(
            !shown.contains("378282246310005") && !shown.contains("1234"),
            "{shown}"
        );
        assert!(shown.contains(card.number()), "{shown}");
        let no_cvc = StandIns::new(CardNumber::new("4242424242424242"), None, |_| false).unwrap();
        assert_eq!(no_cvc.pairs().len(), 1);
        assert_eq!(no_cvc.cvc(), None);
    }

    #[test]
    fn stored_stand_ins_must_fit_their_real_values() {
        let n = || CardNumber::new("4242424242424242");
        let c = || Some((Cvc::new("123"), "456".to_string()));
        assert!(StandIns::from_stored(n(), "4242421234567891".into(), c()).is_err());
        let ok = luhn_complete("424242123456789");
        assert!(StandIns::from_stored(n(), ok.clone(), c()).is_ok());
        assert!(StandIns::from_stored(n(), ok[1..].into(), c()).is_err());
        let four = Some((Cvc::new("123"), "4567".to_string()));
        assert_eq!(
            StandIns::from_stored(n(), ok, four).err(),
            Some(StandInError::LengthMismatch)
        );
    }

    proptest! {
        #[test]
        fn any_card_gets_a_fitting_stand_in(
            body in "[0-9]{11,18}",
            cvc_real in "[0-9]{3,4}",
        ) {
            let real = luhn_complete(&body);
            let card = StandIns::new(
                CardNumber::new(real.as_str()),
                Some(Cvc::new(cvc_real.as_str())),
                |_| false,
            )
            .unwrap();
            let s = card.number();
            prop_assert_eq!(s.len(), real.len());
            prop_assert!(luhn_valid(s));
            prop_assert_eq!(brand_of(s), brand_of(&real));
            prop_assert_ne!(s, real.as_str());
            let c = card.cvc().unwrap();
            prop_assert_eq!(c.len(), cvc_real.len());
            prop_assert_ne!(c, cvc_real.as_str());
        }
    }
}
