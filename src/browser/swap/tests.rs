//! The swap's tests: each format's values, the CVC's names, and properties over random
//! bodies.
#![allow(clippy::unwrap_used, reason = "tests")]

use super::*;
use crate::secret::{CardNumber, Cvc};
use proptest::prelude::*;

/// Stand-in 4242424242424242 (real 4000056655665556), stand-in CVC 737 (real 123).
const STAND_IN: &str = "4242424242424242";
const REAL: &str = "4000056655665556";
const CVC_IN: &str = "737";
const CVC_REAL: &str = "123";

fn card() -> StandIns {
    StandIns::from_stored(
        CardNumber::new(REAL),
        STAND_IN.into(),
        Some((Cvc::new(CVC_REAL), CVC_IN.into())),
    )
    .unwrap()
}

fn run(body: &str, content_type: Option<&str>) -> (String, usize) {
    let out = swap(body.as_bytes(), content_type, None, &card()).unwrap();
    (String::from_utf8(out.body.to_vec()).unwrap(), out.replaced)
}

const JSON: Option<&str> = Some("application/json");
const FORM: Option<&str> = Some("application/x-www-form-urlencoded");

#[test]
fn json_values() {
    let cases: &[(&str, Option<&str>, &str, usize)] = &[
        (
            r#"{"number":"4242424242424242"}"#,
            JSON,
            r#"{"number":"4000056655665556"}"#,
            1,
        ),
        (
            r#"{"n":"4242 4242 4242 4242"}"#,
            JSON,
            r#"{"n":"4000 0566 5566 5556"}"#,
            1,
        ),
        (
            r#"{"n":"4242-4242-4242-4242"}"#,
            JSON,
            r#"{"n":"4000-0566-5566-5556"}"#,
            1,
        ),
        (
            r#"{"n":"4242 424242 424242"}"#,
            JSON,
            r#"{"n":"4000 056655 665556"}"#,
            1,
        ),
        (
            r#"["4242424242424242"]"#,
            JSON,
            r#"["4000056655665556"]"#,
            1,
        ),
        (
            r#"{"card":{"number":"4242424242424242","cvc":"737","exp_month":"12"},"quantity":"737"}"#,
            JSON,
            r#"{"card":{"number":"4000056655665556","cvc":"123","exp_month":"12"},"quantity":"737"}"#,
            2,
        ),
        (
            r#"{"securityCode":"737"}"#,
            JSON,
            r#"{"securityCode":"123"}"#,
            1,
        ),
        (r#"{"cvc":737}"#, JSON, r#"{"cvc":123}"#, 1),
        (
            r#"{"quantity":737,"zip":"737"}"#,
            JSON,
            r#"{"quantity":737,"zip":"737"}"#,
            0,
        ),
        // Escaped digits keep their escapes; separators stay as written.
        (
            r#"{"n":"\u0034242424242424242"}"#,
            JSON,
            r#"{"n":"\u0034000056655665556"}"#,
            1,
        ),
        (
            r#"{"n":"4242\u00204242\u002D4242 4242"}"#,
            JSON,
            r#"{"n":"4000\u00200566\u002D5566 5556"}"#,
            1,
        ),
        (r#"{"c\u0076c":"737"}"#, JSON, r#"{"c\u0076c":"123"}"#, 1),
        // Never a part of a value, never a malformed grouping.
        (
            r#"{"n":"card 4242424242424242"}"#,
            JSON,
            r#"{"n":"card 4242424242424242"}"#,
            0,
        ),
        (
            r#"{"n":"42424242424242420"}"#,
            JSON,
            r#"{"n":"42424242424242420"}"#,
            0,
        ),
        (
            r#"{"n":" 4242424242424242"}"#,
            JSON,
            r#"{"n":" 4242424242424242"}"#,
            0,
        ),
        (
            r#"{"n":"4242  4242 4242 4242"}"#,
            JSON,
            r#"{"n":"4242  4242 4242 4242"}"#,
            0,
        ),
        (
            r#"{"n":"4242424242424242-"}"#,
            JSON,
            r#"{"n":"4242424242424242-"}"#,
            0,
        ),
        (r#"{"cvc":"7 37"}"#, JSON, r#"{"cvc":"7 37"}"#, 0),
        (r#"{"cvc":"7370"}"#, JSON, r#"{"cvc":"7370"}"#, 0),
        (r#"{"cvc":737.0}"#, JSON, r#"{"cvc":737.0}"#, 0),
        (r#"{"cvc":["737"]}"#, JSON, r#"{"cvc":["737"]}"#, 0),
        // A key is not a value.
        (
            r#"{"4242424242424242":1}"#,
            JSON,
            r#"{"4242424242424242":1}"#,
            0,
        ),
        // Not JSON: nothing at all.
        (
            r#"{"n":"4242424242424242""#,
            JSON,
            r#"{"n":"4242424242424242""#,
            0,
        ),
        (
            r#"{"n":"4242424242424242"} x"#,
            JSON,
            r#"{"n":"4242424242424242"} x"#,
            0,
        ),
        // Other JSON types, and JSON sent as text.
        (
            r#"{"n":"4242424242424242"}"#,
            Some("application/vnd.api+json; charset=utf-8"),
            r#"{"n":"4000056655665556"}"#,
            1,
        ),
        (
            r#" {"n":"4242424242424242"}"#,
            Some("text/plain;charset=UTF-8"),
            r#" {"n":"4000056655665556"}"#,
            1,
        ),
        (
            r#"["4242424242424242"]"#,
            None,
            r#"["4000056655665556"]"#,
            1,
        ),
        (
            "4242424242424242",
            Some("text/plain"),
            "4242424242424242",
            0,
        ),
        (
            r#"{"n":"4242424242424242"}"#,
            Some("application/xml"),
            r#"{"n":"4242424242424242"}"#,
            0,
        ),
    ];
    for &(body, ct, want, n) in cases {
        assert_eq!(run(body, ct), (want.to_string(), n), "{body} as {ct:?}");
    }
}

#[test]
fn a_json_number_cvc_drops_leading_zeros_as_a_script_would() {
    let card = StandIns::from_stored(
        CardNumber::new(REAL),
        STAND_IN.into(),
        Some((Cvc::new("012"), CVC_IN.into())),
    )
    .unwrap();
    let out = swap(br#"{"cvc":737,"cvv":"737"}"#, JSON, None, &card).unwrap();
    assert_eq!(&*out.body, br#"{"cvc":12,"cvv":"012"}"#);
    assert_eq!(out.replaced, 2);
}

#[test]
fn form_fields() {
    let cases: &[(&str, &str, usize)] = &[
        ("number=4242424242424242", "number=4000056655665556", 1),
        (
            "card%5Bnumber%5D=4242+4242+4242+4242&card%5Bcvc%5D=737&quantity=737",
            "card%5Bnumber%5D=4000+0566+5566+5556&card%5Bcvc%5D=123&quantity=737",
            2,
        ),
        ("n=4242%204242%2D4242-4242", "n=4000%200566%2D5566-5556", 1),
        ("n=%34%32%342424242424242", "n=%34%30%300056655665556", 1),
        (
            "card[cvc]=737&postal_code=737&zip=737",
            "card[cvc]=123&postal_code=737&zip=737",
            1,
        ),
        (
            "cvv2=737&CVV=737&security-code=737&cc-csc=737",
            "cvv2=123&CVV=123&security-code=123&cc-csc=123",
            4,
        ),
        (
            "cid=737&amount=737&cvc=%37%33%37",
            "cid=737&amount=737&cvc=%31%32%33",
            1,
        ),
        ("n=4242424242424242x", "n=4242424242424242x", 0),
        (
            "n=x4242424242424242&=4242424242424242",
            "n=x4242424242424242&=4000056655665556",
            1,
        ),
        ("4242424242424242", "4242424242424242", 0),
        (
            "n=4242424242424242&&n=%ZZ&n=%3",
            "n=4000056655665556&&n=%ZZ&n=%3",
            1,
        ),
        ("", "", 0),
    ];
    for &(body, want, n) in cases {
        assert_eq!(run(body, FORM), (want.to_string(), n), "{body}");
    }
}

fn part(name: &str, extra: &str, content: &str) -> String {
    format!("--XyZ\r\nContent-Disposition: form-data; name=\"{name}\"{extra}\r\n\r\n{content}\r\n")
}

#[test]
fn multipart_parts() {
    let ct = Some("multipart/form-data; boundary=XyZ");
    // Each part: name, disposition's extra parameters, content sent, content forwarded.
    let parts = [
        ("number", "", STAND_IN, REAL),
        ("cvc", "", CVC_IN, CVC_REAL),
        ("quantity", "", CVC_IN, CVC_IN),
        ("file", "; filename=\"n.txt\"", STAND_IN, STAND_IN),
        ("spaced", "", "4242 4242 4242 4242", "4000 0566 5566 5556"),
        (
            "note",
            "",
            "pay with 4242424242424242",
            "pay with 4242424242424242",
        ),
    ];
    let body: String = parts
        .iter()
        .map(|(n, e, sent, _)| part(n, e, sent))
        .collect();
    let want: String = parts.iter().map(|(n, e, _, out)| part(n, e, out)).collect();
    let (body, want) = (body + "--XyZ--\r\n", want + "--XyZ--\r\n");
    assert_eq!(run(&body, ct), (want.clone(), 3));
    // A quoted boundary, a preamble, and a part with its Content-Type.
    let quoted = Some("multipart/form-data; charset=utf-8; boundary=\"XyZ\"");
    let with_preamble = format!("preamble\r\n{body}");
    assert_eq!(run(&with_preamble, quoted).1, 3);
    let typed = "--XyZ\r\nContent-Type: text/plain\r\ncontent-disposition: form-data; name=cvc\r\n\r\n737\r\n--XyZ--";
    assert_eq!(run(typed, ct).0, typed.replace("737", "123"));
    // Without the closing delimiter, or without a boundary: nothing.
    let open = body.trim_end_matches("--XyZ--\r\n");
    assert_eq!(run(open, ct), (open.to_string(), 0));
    assert_eq!(run(&body, Some("multipart/form-data")).1, 0);
    assert_eq!(run(&body, Some("multipart/form-data; boundary=Other")).1, 0);
}

#[test]
fn the_query_is_swapped_too() {
    let out = swap(
        b"",
        None,
        Some("number=4242-4242-4242-4242&cvc=737&qty=737&q=x%20y"),
        &card(),
    )
    .unwrap();
    assert_eq!(
        out.query.as_deref().map(String::as_str),
        Some("number=4000-0566-5566-5556&cvc=123&qty=737&q=x%20y")
    );
    assert_eq!(out.replaced, 2);
    let none = swap(b"number=4242424242424242", FORM, None, &card()).unwrap();
    assert!(none.query.is_none());
    assert_eq!(none.replaced, 1);
}

#[test]
fn without_a_cvc_only_the_number_is_swapped() {
    let card = StandIns::from_stored(CardNumber::new(REAL), STAND_IN.into(), None).unwrap();
    let out = swap(b"n=4242424242424242&cvc=737", FORM, None, &card).unwrap();
    assert_eq!(&*out.body, b"n=4000056655665556&cvc=737");
    assert_eq!(out.replaced, 1);
}

#[test]
fn a_large_body_is_refused_and_a_debug_shows_no_value() {
    let big = vec![b'a'; MAX_BODY + 1];
    assert_eq!(
        swap(&big, FORM, None, &card()).err(),
        Some(SwapError::TooLarge)
    );
    assert_eq!(ApiError::from(SwapError::TooLarge).status(), 413);
    assert!(swap(&big[1..], FORM, None, &card()).is_ok());
    let out = swap(b"n=4242424242424242", FORM, Some("cvc=737"), &card()).unwrap();
    let shown = format!("{out:?}");
    assert!(
        !shown.contains(REAL) && !shown.contains(CVC_REAL),
        "{shown}"
    );
}

#[test]
fn deep_json_is_left_alone() {
    let deep = format!("{}\"4242424242424242\"{}", "[".repeat(200), "]".repeat(200));
    assert_eq!(run(&deep, JSON), (deep.clone(), 0));
    let fine = format!("{}\"4242424242424242\"{}", "[".repeat(100), "]".repeat(100));
    assert_eq!(run(&fine, JSON).1, 1);
}

#[test]
fn cvc_names() {
    for name in [
        "cvc",
        "CVV",
        "cvc2",
        "cvv2",
        "csc",
        "cvn",
        "security_code",
        "securityCode",
        "card_code",
        "cardCode",
        "card[cvc]",
        "payment_method_data[card][cvc]",
        "card.cvv",
        "cc-csc",
        "card-cvc",
        "Security Code",
    ] {
        assert!(is_cvc_name(name), "{name}");
    }
    for name in [
        "",
        "quantity",
        "qty",
        "zip",
        "postal_code",
        "cid",
        "code",
        "pin",
        "amount",
        "cvc[extra]x",
        "card[number]",
        "verification_code",
        "cvcx",
    ] {
        assert!(!is_cvc_name(name), "{name}");
    }
}

/// Swaps with the pairs reversed: real values back to stand-ins.
fn back(body: &[u8], ct: Option<&str>, query: Option<&str>) -> Swapped {
    let values = Values {
        number: (REAL, STAND_IN),
        cvc: Some((CVC_REAL, CVC_IN)),
    };
    swap_values(body, ct, query, &values).unwrap()
}

const TYPES: &[Option<&str>] = &[
    Some("application/json"),
    Some("application/x-www-form-urlencoded"),
    Some("multipart/form-data; boundary=XyZ"),
    Some("text/plain"),
    Some("application/octet-stream"),
    None,
];

/// A value that is one of the stand-ins in some writing, or filler without a `7`.
fn field() -> impl Strategy<Value = (String, String, usize)> {
    let name = prop_oneof![
        Just("cvc".to_string()),
        Just("card[cvc]".to_string()),
        Just("quantity".to_string()),
        "[a-z]{1,6}",
    ];
    let value = prop_oneof![
        Just(STAND_IN.to_string()),
        Just("4242 4242 4242 4242".to_string()),
        Just("4242-4242-4242-4242".to_string()),
        Just(CVC_IN.to_string()),
        // Neither a stand-in nor a real value (no 7, no 1).
        "[a-z02-689 ]{0,12}",
    ];
    (name, value).prop_map(|(name, value)| {
        let n = usize::from(
            value.replace([' ', '-'], "") == STAND_IN || (value == CVC_IN && is_cvc_name(&name)),
        );
        (name, value, n)
    })
}

fn encode(fields: &[(String, String, usize)], kind: usize) -> String {
    match kind {
        0 => {
            let members: Vec<String> = fields
                .iter()
                .map(|(k, v, _)| format!("{}: {}", serde_json::json!(k), serde_json::json!(v)))
                .collect();
            format!("{{\n  {}\n}}", members.join(",\n  "))
        }
        1 => form_urlencoded::Serializer::new(String::new())
            .extend_pairs(fields.iter().map(|(k, v, _)| (k, v)))
            .finish(),
        _ => {
            let parts: Vec<String> = fields.iter().map(|(k, v, _)| part(k, "", v)).collect();
            format!("{}--XyZ--\r\n", parts.concat())
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn a_body_without_a_stand_in_passes_byte_for_byte(
        bytes in proptest::collection::vec(any::<u8>().prop_filter("no 7", |b| *b != b'7'), 0..400),
        ct in proptest::sample::select(TYPES),
        query in "[a-z0-689=&%+ -]{0,40}",
    ) {
        let out = swap(&bytes, ct, Some(&query), &card()).unwrap();
        prop_assert_eq!(out.replaced, 0);
        prop_assert_eq!(&*out.body, &bytes);
        prop_assert_eq!(out.query.as_deref().map(String::as_str), Some(query.as_str()));
    }

    #[test]
    fn a_structured_body_without_a_stand_in_passes_byte_for_byte(
        fields in proptest::collection::vec(("[a-z_\\[\\]]{1,8}", "[a-z0-689 +%-]{0,20}"), 0..8),
        kind in 0usize..3,
    ) {
        let fields: Vec<_> = fields.into_iter().map(|(k, v)| (k, v, 0)).collect();
        let body = encode(&fields, kind);
        let out = swap(body.as_bytes(), TYPES[kind], None, &card()).unwrap();
        prop_assert_eq!(out.replaced, 0);
        prop_assert_eq!(&*out.body, body.as_bytes());
    }

    #[test]
    fn a_swap_then_the_reverse_swap_gives_the_original(
        fields in proptest::collection::vec(field(), 0..8),
        kind in 0usize..3,
    ) {
        let body = encode(&fields, kind);
        let ct = TYPES[kind];
        let query = encode(&fields, 1);
        let want: usize = fields.iter().map(|(_, _, n)| n).sum();
        let there = swap(body.as_bytes(), ct, Some(&query), &card()).unwrap();
        prop_assert_eq!(there.replaced, 2 * want);
        prop_assert_eq!(there.body.len(), body.len());
        let query_there = there.query.as_deref().cloned();
        let again = back(&there.body, ct, query_there.as_deref());
        prop_assert_eq!(again.replaced, 2 * want);
        prop_assert_eq!(&*again.body, body.as_bytes());
        prop_assert_eq!(again.query.as_deref().map(String::as_str), Some(query.as_str()));
        if want > 0 {
            prop_assert_ne!(&*there.body, body.as_bytes());
        }
    }
}
