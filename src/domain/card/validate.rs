//! Validation of a raw request card ([`CardInput`]) into a [`ValidCard`].
//!
//! Every field is checked and every problem reported at once, as a map from field path
//! (`{prefix}.number`, `{prefix}.expirationMonth`, `{prefix}.expirationYear`, `{prefix}.cvc`)
//! to a short message for `details.fields` of a 400 `invalidRequest`. Messages are fixed text:
//! they never echo the value, so a card number or cvc cannot leak through an error.
//!
//! | field | rule | message |
//! |---|---|---|
//! | any | absent or `null` | `is required` |
//! | any | not a JSON string (e.g. a JSON number) | `must be a string` |
//! | any | empty string | `is required` |
//! | number | ASCII spaces and dashes are removed first (`"4242 4242-4242 4242"` is accepted); then only ASCII digits | `must contain only digits` |
//! | number | 12 to 19 digits | `must be 12 to 19 digits` |
//! | number | Luhn checksum | `is not a valid card number` |
//! | expirationMonth | exactly two digits `01`–`12` (`"1"` is rejected, not padded) | `must be two digits from 01 to 12` |
//! | expirationYear | exactly four digits | `must be four digits (YYYY)` |
//! | expirationYear | the card is valid through the last day of its month: expired when (year, month) is before `today`'s | `card has expired` |
//! | expirationYear | at most 50 years after `today`'s year | `must be at most 50 years ahead` |
//! | cvc | only digits, 4 for amex, 3 for other known brands, 3 or 4 when the brand is unknown or the number is invalid | `must be 3 digits`, `must be 4 digits for amex`, `must be 3 or 4 digits` |
//!
//! Expiry errors are keyed on `expirationYear` whichever part makes the date past, so a
//! client sees one stable key for "expired". The expiry check runs only when both month and
//! year are well formed. The brand is not required to be known: an unmatched number is
//! [`Brand::Unknown`]. Unknown keys inside the card object are ignored.

use std::collections::BTreeMap;

use serde_json::Value;
use time::Date;
use zeroize::Zeroizing;

use super::brand::Brand;
use super::ranges::{bin_info, brand_of};
use super::{CardInput, ValidCard};
use crate::secret::{CardNumber, Cvc};

const REQUIRED: &str = "is required";
const NOT_STRING: &str = "must be a string";
const NUMBER_NOT_DIGITS: &str = "must contain only digits";
const NUMBER_LENGTH: &str = "must be 12 to 19 digits";
const NUMBER_LUHN: &str = "is not a valid card number";
const MONTH_FORMAT: &str = "must be two digits from 01 to 12";
const YEAR_FORMAT: &str = "must be four digits (YYYY)";
const EXPIRED: &str = "card has expired";
const TOO_FAR: &str = "must be at most 50 years ahead";
const CVC_3: &str = "must be 3 digits";
const CVC_4_AMEX: &str = "must be 4 digits for amex";
const CVC_3_OR_4: &str = "must be 3 or 4 digits";

/// How many years after `today` an expiration year may be.
const MAX_YEARS_AHEAD: i32 = 50;
const NUMBER_LEN: std::ops::RangeInclusive<usize> = 12..=19;

/// Collects field errors under one prefix.
struct Errors<'a> {
    prefix: &'a str,
    fields: BTreeMap<String, String>,
}

impl Errors<'_> {
    fn add(&mut self, field: &str, message: &'static str) {
        let key = if self.prefix.is_empty() {
            field.to_owned()
        } else {
            format!("{}.{field}", self.prefix)
        };
        self.fields.entry(key).or_insert_with(|| message.to_owned());
    }
}

/// Validates a request card. `prefix` is the path of the card object in the request
/// (`"card"`; `""` gives bare field names), `today` the date to check expiry against.
/// On success the number is digits only and brand and funding are filled in from the
/// embedded tables ([`brand_of`], [`bin_info`]). See the module doc for every rule.
pub fn validate(
    input: &CardInput,
    prefix: &str,
    today: Date,
) -> Result<ValidCard, BTreeMap<String, String>> {
    let mut errors = Errors {
        prefix,
        fields: BTreeMap::new(),
    };

    let number = string_field(&mut errors, "number", input.number.as_ref())
        .and_then(|raw| check_number(&mut errors, raw));
    let month = string_field(
        &mut errors,
        "expirationMonth",
        input.expiration_month.as_ref(),
    )
    .and_then(|raw| check_month(&mut errors, raw));
    let year = string_field(
        &mut errors,
        "expirationYear",
        input.expiration_year.as_ref(),
    )
    .and_then(|raw| check_year(&mut errors, raw, today));
    if let (Some(month), Some(year)) = (month, year) {
        if (year, month) < (today.year(), u8::from(today.month())) {
            errors.add("expirationYear", EXPIRED);
        }
    }

    let brand = number.as_ref().map(|n| brand_of(n));
    let cvc = string_field(&mut errors, "cvc", input.cvc.as_ref())
        .and_then(|raw| check_cvc(&mut errors, raw, brand));

    match (number, month, year, cvc, brand) {
        (Some(mut number), Some(month), Some(year), Some(mut cvc), Some(brand))
            if errors.fields.is_empty() =>
        {
            let funding = bin_info(&number).funding;
            Ok(ValidCard {
                number: CardNumber::new(std::mem::take(&mut *number)),
                expiration_month: format!("{month:02}"),
                expiration_year: format!("{year:04}"),
                cvc: Cvc::new(std::mem::take(&mut *cvc)),
                brand,
                funding,
            })
        }
        _ => Err(errors.fields),
    }
}

/// The field's string, or `None` after recording why there is none.
fn string_field<'v>(
    errors: &mut Errors<'_>,
    field: &str,
    value: Option<&'v Value>,
) -> Option<&'v str> {
    match value {
        None | Some(Value::Null) => {
            errors.add(field, REQUIRED);
            None
        }
        Some(Value::String(s)) if s.is_empty() => {
            errors.add(field, REQUIRED);
            None
        }
        Some(Value::String(s)) => Some(s),
        Some(_) => {
            errors.add(field, NOT_STRING);
            None
        }
    }
}

/// Digits of the card number (spaces and dashes removed), if valid. The copy is zeroed on drop.
fn check_number(errors: &mut Errors<'_>, raw: &str) -> Option<Zeroizing<String>> {
    let mut digits = Zeroizing::new(String::with_capacity(raw.len().min(32)));
    for c in raw.chars() {
        match c {
            ' ' | '-' => {}
            '0'..='9' => digits.push(c),
            _ => {
                errors.add("number", NUMBER_NOT_DIGITS);
                return None;
            }
        }
    }
    if digits.is_empty() {
        errors.add("number", REQUIRED);
        return None;
    }
    if !NUMBER_LEN.contains(&digits.len()) {
        errors.add("number", NUMBER_LENGTH);
        return None;
    }
    if !luhn_valid(&digits) {
        errors.add("number", NUMBER_LUHN);
        return None;
    }
    Some(digits)
}

/// The Luhn (mod 10) checksum over ASCII digits; `false` for any other character.
pub(crate) fn luhn_valid(digits: &str) -> bool {
    let mut sum = 0u32;
    for (i, b) in digits.bytes().rev().enumerate() {
        if !b.is_ascii_digit() {
            return false;
        }
        let mut d = u32::from(b - b'0');
        if i % 2 == 1 {
            d *= 2;
            if d > 9 {
                d -= 9;
            }
        }
        sum += d;
    }
    !digits.is_empty() && sum.is_multiple_of(10)
}

/// `Some(n)` when `raw` is exactly `len` ASCII digits.
fn fixed_digits(raw: &str, len: usize) -> Option<u32> {
    if raw.len() != len {
        return None;
    }
    raw.bytes().try_fold(0u32, |acc, b| {
        b.is_ascii_digit().then(|| acc * 10 + u32::from(b - b'0'))
    })
}

fn check_month(errors: &mut Errors<'_>, raw: &str) -> Option<u8> {
    match fixed_digits(raw, 2).and_then(|m| u8::try_from(m).ok()) {
        Some(m @ 1..=12) => Some(m),
        _ => {
            errors.add("expirationMonth", MONTH_FORMAT);
            None
        }
    }
}

fn check_year(errors: &mut Errors<'_>, raw: &str, today: Date) -> Option<i32> {
    let Some(year) = fixed_digits(raw, 4).and_then(|y| i32::try_from(y).ok()) else {
        errors.add("expirationYear", YEAR_FORMAT);
        return None;
    };
    if year > today.year() + MAX_YEARS_AHEAD {
        errors.add("expirationYear", TOO_FAR);
        return None;
    }
    Some(year)
}

/// The cvc, if valid for `brand` (`None` when the number was invalid).
fn check_cvc(
    errors: &mut Errors<'_>,
    raw: &str,
    brand: Option<Brand>,
) -> Option<Zeroizing<String>> {
    let all_digits = raw.bytes().all(|b| b.is_ascii_digit());
    let (ok, message) = match brand {
        Some(Brand::Unknown) | None => ((3..=4).contains(&raw.len()), CVC_3_OR_4),
        Some(Brand::Amex) => (raw.len() == Brand::Amex.cvc_len(), CVC_4_AMEX),
        Some(b) => (raw.len() == b.cvc_len(), CVC_3),
    };
    if all_digits && ok {
        Some(Zeroizing::new(raw.to_owned()))
    } else {
        errors.add("cvc", message);
        None
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic, reason = "tests")]
mod tests {
    use super::*;
    use crate::domain::card::Funding;
    use serde_json::json;
    use time::Month;

    /// The date every table case is checked against.
    fn today() -> Date {
        Date::from_calendar_date(2026, Month::March, 15).unwrap()
    }

    fn s(v: &str) -> Option<Value> {
        Some(Value::String(v.to_owned()))
    }

    fn input(
        number: Option<Value>,
        month: Option<Value>,
        year: Option<Value>,
        cvc: Option<Value>,
    ) -> CardInput {
        CardInput {
            number,
            expiration_month: month,
            expiration_year: year,
            cvc,
        }
    }

    enum Want {
        Ok(Brand, Funding),
        Err(&'static [(&'static str, &'static str)]),
    }

    struct Case {
        name: &'static str,
        number: Option<Value>,
        month: Option<Value>,
        year: Option<Value>,
        cvc: Option<Value>,
        want: Want,
    }

    /// A case with strings for every field.
    fn c(name: &'static str, number: &str, month: &str, year: &str, cvc: &str, want: Want) -> Case {
        Case {
            name,
            number: s(number),
            month: s(month),
            year: s(year),
            cvc: s(cvc),
            want,
        }
    }

    /// A case with any JSON values.
    fn j(
        name: &'static str,
        number: Option<Value>,
        month: Option<Value>,
        year: Option<Value>,
        cvc: Option<Value>,
        want: Want,
    ) -> Case {
        Case {
            name,
            number,
            month,
            year,
            cvc,
            want,
        }
    }

    fn ok(brand: Brand, funding: Funding) -> Want {
        Want::Ok(brand, funding)
    }

    fn err(fields: &'static [(&'static str, &'static str)]) -> Want {
        Want::Err(fields)
    }

    const NUM: &str = "card.number";
    const MON: &str = "card.expirationMonth";
    const YEAR: &str = "card.expirationYear";
    const CVC: &str = "card.cvc";

    #[rustfmt::skip] // one case per line reads as a table
    fn cases() -> Vec<Case> {
        use Brand::*;
        use Funding::{Credit, Debit};
        const V: &str = "4242424242424242";
        const AMEX: &str = "378282246310005";
        vec![
            // Good cards of every brand.
            c("visa credit", V, "12", "2030", "123", ok(Visa, Credit)),
            c("visa debit", "4000056655665556", "12", "2030", "123", ok(Visa, Debit)),
            c("visa unlisted bin", "4012888888881881", "12", "2030", "123", ok(Visa, Credit)),
            c("mastercard", "5555555555554444", "01", "2027", "123", ok(Mastercard, Credit)),
            c("mastercard 2-series", "2223003122003222", "12", "2030", "123", ok(Mastercard, Credit)),
            c("mastercard debit", "5200828282828210", "12", "2030", "123", ok(Mastercard, Debit)),
            c("mastercard prepaid", "5105105105105100", "12", "2030", "123", ok(Mastercard, Debit)),
            c("amex", AMEX, "12", "2030", "1234", ok(Amex, Credit)),
            c("amex 2", "371449635398431", "12", "2030", "0000", ok(Amex, Credit)),
            c("discover", "6011111111111117", "12", "2030", "123", ok(Discover, Credit)),
            c("discover debit", "6011981111111113", "12", "2030", "123", ok(Discover, Debit)),
            c("discover in 62 range", "6221260000000000", "12", "2030", "123", ok(Discover, Credit)),
            c("jcb", "3566002020360505", "12", "2030", "123", ok(Jcb, Credit)),
            c("jcb 2", "3530111333300000", "12", "2030", "123", ok(Jcb, Credit)),
            c("diners", "3056930009020004", "12", "2030", "123", ok(DinersClub, Credit)),
            c("diners 14 digits", "36227206271667", "12", "2030", "123", ok(DinersClub, Credit)),
            c("unionpay", "6200000000000005", "12", "2030", "123", ok(UnionPay, Credit)),
            c("unionpay 19 digits", "6205500000000000004", "12", "2030", "123", ok(UnionPay, Debit)),
            c("maestro", "6759649826438453", "12", "2030", "123", ok(Maestro, Debit)),
            c("maestro 676770", "6767700000000005", "12", "2030", "123", ok(Maestro, Credit)),
            c("unknown brand", "9999999999999995", "12", "2030", "123", ok(Unknown, Credit)),
            c("unknown brand cvc 4", "9999999999999995", "12", "2030", "1234", ok(Unknown, Credit)),
            // Number formats and lengths.
            c("spaces stripped", "4242 4242 4242 4242", "12", "2030", "123", ok(Visa, Credit)),
            c("dashes stripped", "4242-4242-4242-4242", "12", "2030", "123", ok(Visa, Credit)),
            c("12 digits", "420000000000", "12", "2030", "123", ok(Visa, Credit)),
            c("19 digits", "4242424242424242428", "12", "2030", "123", ok(Visa, Credit)),
            c("11 digits", "42000000002", "12", "2030", "123", err(&[(NUM, NUMBER_LENGTH)])),
            c("20 digits", "42424242424242424242", "12", "2030", "123", err(&[(NUM, NUMBER_LENGTH)])),
            c("luhn failure", "4242424242424241", "12", "2030", "123", err(&[(NUM, NUMBER_LUHN)])),
            c("luhn failure amex", "378282246310006", "12", "2030", "1234", err(&[(NUM, NUMBER_LUHN)])),
            c("letter", "4242a24242424242", "12", "2030", "123", err(&[(NUM, NUMBER_NOT_DIGITS)])),
            c("dots", "4242.4242.4242.4242", "12", "2030", "123", err(&[(NUM, NUMBER_NOT_DIGITS)])),
            c("full-width digit", "４242424242424242", "12", "2030", "123", err(&[(NUM, NUMBER_NOT_DIGITS)])),
            c("tab", "4242\t4242424242424242", "12", "2030", "123", err(&[(NUM, NUMBER_NOT_DIGITS)])),
            c("empty number", "", "12", "2030", "123", err(&[(NUM, REQUIRED)])),
            c("only separators", " - ", "12", "2030", "123", err(&[(NUM, REQUIRED)])),
            // Month.
            c("month 01", V, "01", "2030", "123", ok(Visa, Credit)),
            c("month 00", V, "00", "2030", "123", err(&[(MON, MONTH_FORMAT)])),
            c("month 13", V, "13", "2030", "123", err(&[(MON, MONTH_FORMAT)])),
            c("month 1", V, "1", "2030", "123", err(&[(MON, MONTH_FORMAT)])),
            c("month 001", V, "001", "2030", "123", err(&[(MON, MONTH_FORMAT)])),
            c("month +1", V, "+1", "2030", "123", err(&[(MON, MONTH_FORMAT)])),
            // Year and expiry (today is 2026-03-15).
            c("year 2 digits", V, "12", "30", "123", err(&[(YEAR, YEAR_FORMAT)])),
            c("year 5 digits", V, "12", "20301", "123", err(&[(YEAR, YEAR_FORMAT)])),
            c("year letters", V, "12", "20a0", "123", err(&[(YEAR, YEAR_FORMAT)])),
            c("expired last month", V, "02", "2026", "123", err(&[(YEAR, EXPIRED)])),
            c("expired last year", V, "12", "2025", "123", err(&[(YEAR, EXPIRED)])),
            c("valid this month", V, "03", "2026", "123", ok(Visa, Credit)),
            c("50 years ahead", V, "12", "2076", "123", ok(Visa, Credit)),
            c("51 years ahead", V, "01", "2077", "123", err(&[(YEAR, TOO_FAR)])),
            c("bad month skips expiry", V, "13", "2020", "123", err(&[(MON, MONTH_FORMAT)])),
            // Cvc.
            c("amex cvc 3", AMEX, "12", "2030", "123", err(&[(CVC, CVC_4_AMEX)])),
            c("visa cvc 4", V, "12", "2030", "1234", err(&[(CVC, CVC_3)])),
            c("cvc 2", V, "12", "2030", "12", err(&[(CVC, CVC_3)])),
            c("cvc letter", V, "12", "2030", "12a", err(&[(CVC, CVC_3)])),
            c("unknown brand cvc 5", "9999999999999995", "12", "2030", "12345", err(&[(CVC, CVC_3_OR_4)])),
            c("empty cvc", V, "12", "2030", "", err(&[(CVC, REQUIRED)])),
            // Several at once.
            c("all errors at once", "4242424242424241", "13", "26", "1",
                err(&[(NUM, NUMBER_LUHN), (MON, MONTH_FORMAT), (YEAR, YEAR_FORMAT), (CVC, CVC_3_OR_4)])),
            c("expired and amex cvc", AMEX, "01", "2020", "999", err(&[(YEAR, EXPIRED), (CVC, CVC_4_AMEX)])),
            // Wrong JSON types and missing fields.
            j("number as JSON number", Some(json!(4242424242424242u64)), s("12"), s("2030"), s("123"),
                err(&[(NUM, NOT_STRING)])),
            j("month and year as JSON numbers", s(V), Some(json!(12)), Some(json!(2030)), s("123"),
                err(&[(MON, NOT_STRING), (YEAR, NOT_STRING)])),
            j("cvc as JSON number", s(V), s("12"), s("2030"), Some(json!(123)), err(&[(CVC, NOT_STRING)])),
            j("bool, array, object", Some(json!(true)), Some(json!(["12"])), Some(json!({"y": "2030"})), s("123"),
                err(&[(NUM, NOT_STRING), (MON, NOT_STRING), (YEAR, NOT_STRING)])),
            j("missing number", None, s("12"), s("2030"), s("1234"), err(&[(NUM, REQUIRED)])),
            j("null cvc", s(V), s("12"), s("2030"), Some(Value::Null), err(&[(CVC, REQUIRED)])),
            j("everything missing", None, None, None, None,
                err(&[(NUM, REQUIRED), (MON, REQUIRED), (YEAR, REQUIRED), (CVC, REQUIRED)])),
        ]
    }

    #[test]
    fn table() {
        let cases = cases();
        assert!(cases.len() >= 40);
        for case in cases {
            let got = validate(
                &input(
                    case.number.clone(),
                    case.month.clone(),
                    case.year.clone(),
                    case.cvc.clone(),
                ),
                "card",
                today(),
            );
            match (case.want, got) {
                (Want::Ok(brand, funding), Ok(card)) => {
                    assert_eq!(
                        (card.brand, card.funding),
                        (brand, funding),
                        "{}",
                        case.name
                    );
                    assert!(
                        card.number.expose().bytes().all(|b| b.is_ascii_digit()),
                        "{}",
                        case.name
                    );
                    assert_eq!(card.expiration_month.len(), 2, "{}", case.name);
                    assert_eq!(card.expiration_year.len(), 4, "{}", case.name);
                    assert_eq!(
                        Some(card.cvc.expose()),
                        case.cvc.as_ref().and_then(Value::as_str)
                    );
                }
                (Want::Err(want), Err(got)) => {
                    let want: BTreeMap<String, String> = want
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect();
                    assert_eq!(got, want, "{}", case.name);
                }
                (Want::Ok(..), Err(e)) => panic!("{}: unexpected errors {e:?}", case.name),
                (Want::Err(w), Ok(card)) => {
                    panic!("{}: accepted {card:?}, wanted {w:?}", case.name)
                }
            }
        }
    }

    #[test]
    fn messages_never_contain_number_or_cvc() {
        for case in cases() {
            let Err(errors) = validate(
                &input(
                    case.number.clone(),
                    case.month.clone(),
                    case.year.clone(),
                    case.cvc.clone(),
                ),
                "card",
                today(),
            ) else {
                continue;
            };
            let secrets = [&case.number, &case.cvc]
                .into_iter()
                .flatten()
                .map(|v| match v {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                });
            for secret in secrets.filter(|s| s.trim().len() >= 3) {
                for msg in errors.values() {
                    assert!(
                        !msg.contains(&secret),
                        "{}: {msg:?} leaks a value",
                        case.name
                    );
                }
                assert!(!format!("{errors:?}").contains(&secret), "{}", case.name);
            }
        }
    }

    #[test]
    fn valid_through_last_day_of_month() {
        let card = || input(s("4242424242424242"), s("03"), s("2026"), s("123"));
        let last_day = Date::from_calendar_date(2026, Month::March, 31).unwrap();
        let next_day = Date::from_calendar_date(2026, Month::April, 1).unwrap();
        assert!(validate(&card(), "card", last_day).is_ok());
        let errors = validate(&card(), "card", next_day).unwrap_err();
        assert_eq!(errors.get(YEAR).map(String::as_str), Some(EXPIRED));
    }

    #[test]
    fn output_is_normalised() {
        let card = validate(
            &input(s("4242 4242-4242 4242"), s("07"), s("2031"), s("042")),
            "card",
            today(),
        )
        .unwrap();
        assert_eq!(card.number.expose(), "4242424242424242");
        assert_eq!(card.expiration_month, "07");
        assert_eq!(card.expiration_year, "2031");
        assert_eq!(card.cvc.expose(), "042");
        assert_eq!(card.number.bin(), "424242");
        assert_eq!(card.number.last4(), "4242");
    }

    #[test]
    fn prefix_shapes_the_keys() {
        let empty = input(None, None, None, None);
        let bare: Vec<String> = validate(&empty, "", today())
            .unwrap_err()
            .into_keys()
            .collect();
        assert_eq!(bare, ["cvc", "expirationMonth", "expirationYear", "number"]);
        let nested = validate(&empty, "tokens[0].card", today()).unwrap_err();
        assert!(nested.contains_key("tokens[0].card.number"));
    }

    #[test]
    fn from_request_json() {
        let body: CardInput = serde_json::from_value(json!({
            "number": "5555555555554444", "expirationMonth": "11", "expirationYear": "2029", "cvc": "321"
        }))
        .unwrap();
        let card = validate(&body, "card", today()).unwrap();
        assert_eq!(
            (card.brand, card.funding),
            (Brand::Mastercard, Funding::Credit)
        );

        let body: CardInput =
            serde_json::from_value(json!({"number": 5555555555554444u64})).unwrap();
        let errors = validate(&body, "card", today()).unwrap_err();
        assert_eq!(errors.len(), 4);
        assert_eq!(errors[NUM], NOT_STRING);
    }

    #[test]
    fn luhn() {
        let cases: &[(&str, bool)] = &[
            ("4242424242424242", true),
            ("4242424242424241", false),
            ("79927398713", true),
            ("79927398710", false),
            ("0", true),
            ("", false),
            ("42a2", false),
        ];
        for (digits, want) in cases {
            assert_eq!(luhn_valid(digits), *want, "{digits}");
        }
    }
}
