//! The scanner as its callers use it: substitution, errors and their paths, chunking (every
//! split of a body gives the same outcome), counts and reuse.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::escape::{Json, BAD_ESCAPE, ESCAPED_BRACE};
use super::*;
use crate::secret::Revealed;
use crate::template::expr::{CredentialField, CredentialKind};
use crate::template::held::is_cached;
use crate::template::limits::{MAX_KEY_LEN, MAX_KIND_DEPTH, MAX_PATH_DEPTH, MAX_TEMPLATE_LEN};

pub(super) const PAN_NUMBER: &str = "{{ paymentMethod: pm_1 | type: 'pan' | json: '$.number' }}";

/// Resolves `pm_<x>` to `<x>:<type>:<field>`, `pm_q` to a value that needs escaping, and
/// anything else to "unknown payment method".
pub(super) fn resolver(t: &TemplateRef) -> Result<Revealed, ResolveError> {
    let value = match t.payment_method.as_str() {
        "pm_q" => "a\"b\\c\n\u{1}é😀".to_owned(),
        "pm_num" => "4242424242424242".to_owned(),
        pm => match pm.strip_prefix("pm_") {
            Some(x) => format!("{x}:{}:{}", t.kind, t.field),
            None => return Err(ResolveError::new("unknown payment method")),
        },
    };
    Ok(Revealed::Number(value.into()))
}

#[test]
fn templates_are_kept_once_parsed_and_resolved() {
    // Ids of their own, so that no other test has parsed these texts.
    let ok = "{{ paymentMethod: pm_kept | type: 'pan' | json: '$.cvc' }}";
    let escaped = r#"{{ paymentMethod: pm_kept | type: \"pan\" | json: '$.cvc' }}"#;
    let unknown = "{{ paymentMethod: 4111111111111111 | type: 'pan' | json: '$.number' }}";
    let body = format!(r#"{{"a":"{ok}","b":"{escaped}"}}"#);
    // Twice: the second time every template comes from the cache.
    for _ in 0..2 {
        assert_eq!(
            run(&body),
            Ok(r#"{"a":"kept:pan:cvc","b":"kept:pan:cvc"}"#.to_string())
        );
    }
    assert!(is_cached::<Json>(ok));
    assert!(is_cached::<Json>(escaped));
    // A template that names nothing is an error each time, and its text is not kept.
    for _ in 0..2 {
        let e = run(&format!(r#"{{"n":"{unknown}"}}"#)).unwrap_err();
        assert_eq!(e.message, "unknown payment method");
        assert_eq!(e.field, "n");
    }
    assert!(!is_cached::<Json>(unknown));
}

/// Runs `chunks` through a scanner, the last one with `feed_last` when `last`, else with
/// `feed` and then `finish`.
fn run_chunks(chunks: &[&[u8]], last: bool) -> Result<(Vec<u8>, usize), TemplateError> {
    let mut scanner = Scanner::new();
    let mut out = Vec::new();
    let mut count = 0;
    let mut r = resolver;
    let (end, init) = chunks
        .split_last()
        .map_or((&b""[..], &[][..]), |(end, init)| (*end, init));
    for chunk in init {
        count += scanner.feed(chunk, &mut out, &mut r)?;
    }
    if last {
        count += scanner.feed_last(end, &mut out, &mut r)?;
    } else {
        count += scanner.feed(end, &mut out, &mut r)?;
        scanner.finish(&mut out)?;
    }
    Ok((out, count))
}

/// Runs `body` in one chunk, then in every two-way split and byte by byte, each ended
/// both ways (`feed_last`, and `feed` then `finish`), and checks that they all agree.
fn run(body: &str) -> Result<String, TemplateError> {
    let body = body.as_bytes();
    let whole = run_chunks(&[body], false);
    let bytes: Vec<&[u8]> = body.chunks(1).collect();
    let mut splits = vec![];
    for last in [false, true] {
        splits.push(run_chunks(&bytes, last));
        for at in 0..=body.len() {
            let (a, b) = body.split_at(at);
            splits.push(run_chunks(&[a, b], last));
        }
    }
    for split in splits {
        match (&whole, &split) {
            (Ok(w), Ok(s)) => assert_eq!(w, s),
            (Err(w), Err(s)) => assert_eq!(w, s),
            _ => panic!("chunking changed the outcome: {whole:?} vs {split:?}"),
        }
    }
    whole.map(|(out, _)| String::from_utf8(out).unwrap())
}

#[test]
fn substitutes() {
    let cases: Vec<(String, &str)> = vec![
        (r#"{"a":1,"b":[true,null,"x"]}"#.into(), r#"{"a":1,"b":[true,null,"x"]}"#),
        (format!(r#"{{"card":{{"number":"{PAN_NUMBER}"}}}}"#), r#"{"card":{"number":"1:pan:number"}}"#),
        (format!(r#"{{"n":"x{PAN_NUMBER}y"}}"#), r#"{"n":"x1:pan:numbery"}"#),
        (
            r#"{"exp":"{{paymentMethod:pm_1|type:'pan'|json:'$.expirationMonth'}}/{{paymentMethod:pm_1|type:'pan'|json:'$.expirationYear'}}"}"#.into(),
            r#"{"exp":"1:pan:expirationMonth/1:pan:expirationYear"}"#,
        ),
        // Double quotes arrive JSON-escaped.
        (
            r#"{"n":"{{ paymentMethod: pm_7 | type: \"networkToken\" | json: \"$.token.cryptogram\" }}"}"#.into(),
            r#"{"n":"7:networkToken:cryptogram"}"#,
        ),
        // An escape right before the closing braces.
        (
            r#"["{{ paymentMethod: pm_3 | type: 'pan' | json: '$.cvc' \t}}"]"#.into(),
            r#"["3:pan:cvc"]"#,
        ),
        // Other escapes in the template are decoded, including a surrogate pair.
        (
            r#"["{{\tpaymentMethod: pm\u005f2 |\ntype: 'pan' | json: '\u0024.number'\r}}"]"#.into(),
            r#"["2:pan:number"]"#,
        ),
        // Extra braces are text.
        (format!(r#"["{{{PAN_NUMBER}}}"]"#), r#"["{1:pan:number}"]"#),
        (format!(r#"["{{{{{PAN_NUMBER}"]"#), r#"["{{1:pan:number"]"#),
        // Braces that start no template, escapes before a template.
        (r#"{"a":"{ } }} {x{","b":"}}{"}"#.into(), r#"{"a":"{ } }} {x{","b":"}}{"}"#),
        (format!(r#"["\\{PAN_NUMBER}\"{{"]"#), r#"["\\1:pan:number\"{"]"#),
        (r#"["\{{"]"#.into(), r#"["\{{"]"#),
        // Values are escaped.
        (
            r#"{"q":"<{{ paymentMethod: pm_q | type: 'pan' | json: '$.cvc' }}>"}"#.into(),
            r#"{"q":"<a\"b\\c\u000a\u0001é😀>"}"#,
        ),
        // Top-level string, templates after nested containers.
        (format!(r#""{PAN_NUMBER}""#), r#""1:pan:number""#),
        (
            format!(r#"{{"a":{{"b":[1,{{"c":"d"}}]}},"e":"{PAN_NUMBER}"}}"#),
            r#"{"a":{"b":[1,{"c":"d"}]},"e":"1:pan:number"}"#,
        ),
        // After the last template: an escaped `{{`, braces that start none.
        (format!(r#"["{PAN_NUMBER}","\{{{{ x","{{"]"#), r#"["1:pan:number","\{{ x","{"]"#),
        (format!(r#"["{PAN_NUMBER}",{{}},"{{"]"#), r#"["1:pan:number",{},"{"]"#),
        // Malformed JSON passes through.
        (r#"]]}},:{"a""#.into(), r#"]]}},:{"a""#),
        (format!(r#"}}]"{PAN_NUMBER}"  "#), r#"}]"1:pan:number"  "#),
    ];
    // A template of exactly MAX_TEMPLATE_LEN bytes: the plain run inside it is taken up to
    // the limit and no further.
    let pad = MAX_TEMPLATE_LEN - PAN_NUMBER.len();
    let longest = PAN_NUMBER.replace(" }}", &format!("{} }}}}", " ".repeat(pad)));
    assert_eq!(longest.len(), MAX_TEMPLATE_LEN);
    let mut cases = cases;
    cases.push((format!(r#"["{longest}"]"#), r#"["1:pan:number"]"#));
    for (body, want) in cases {
        let want = if want.is_empty() { body.as_str() } else { want };
        assert_eq!(run(&body), Ok(want.to_owned()), "{body}");
    }
}

#[test]
fn errors() {
    const UNKNOWN_PART: &str = "unknown part; expected `paymentMethod`, `type` or `json`";
    let nope = "{{ paymentMethod: nope | type: 'pan' | json: '$.number' }}";
    let long = format!(
        r#"["{{{{ paymentMethod: pm_1 {} }}}}"]"#,
        " ".repeat(MAX_TEMPLATE_LEN)
    );
    let long_template = String::from_utf8_lossy(&long.as_bytes()[2..2 + MAX_TEMPLATE_LEN]);
    let deep = format!("{}\"{nope}\"", "[".repeat(MAX_PATH_DEPTH + 5));
    let deep_field = format!("{}…", "[0]".repeat(MAX_PATH_DEPTH));
    let long_key = format!(r#"{{"{}":"{{{{x}}}}"}}"#, "k".repeat(MAX_KEY_LEN + 1));
    let long_key_field = format!("[\"{}…\"]", "k".repeat(MAX_KEY_LEN));
    let full = format!("{{{{{}", "x".repeat(MAX_TEMPLATE_LEN - 2));
    let full_then_quote = format!(r#"["{full}"]"#);
    let over = format!(r#"["{{{{ x{} }}}}"]"#, " ".repeat(MAX_TEMPLATE_LEN - 6));
    let over_template = String::from_utf8_lossy(&over.as_bytes()[2..2 + MAX_TEMPLATE_LEN]);
    let cases: Vec<(String, &str, &str, &str)> = vec![
        (
            format!(r#"{{"card":{{"number":"{nope}"}}}}"#),
            "card.number",
            nope,
            "unknown payment method",
        ),
        (
            r#"{"items":[{"pan":"{{ type: 'pan' }}"}]}"#.into(),
            "items[0].pan",
            "{{ type: 'pan' }}",
            "missing `paymentMethod`",
        ),
        (r#"{"a":{"b":[0,1,[{"c":"{{x}}"}]]}}"#.into(), "a.b[2][0].c", "{{x}}", UNKNOWN_PART),
        (
            r#"{"x":[1,2],"weird key":{"\"q\"":"{{x}}"}}"#.into(),
            r#"["weird key"]["\"q\""]"#,
            "{{x}}",
            UNKNOWN_PART,
        ),
        (r#""{{x}}""#.into(), "$", "{{x}}", UNKNOWN_PART),
        (r#"[1,"{{x}}"]"#.into(), "[1]", "{{x}}", UNKNOWN_PART),
        (
            r#"{"n":"{{ paymentMethod: pm_1 | type: \"pan\" | json: '$.cryptogram' }}"}"#.into(),
            "n",
            r#"{{ paymentMethod: pm_1 | type: \"pan\" | json: '$.cryptogram' }}"#,
            "unknown field `cryptogram` for type 'pan'; expected number, expirationMonth, expirationYear or cvc",
        ),
        (
            r#"["{{ paymentMethod: pm_1 | type: 'pan' | json: '$.number' \ud83d\ude00 }}"]"#.into(),
            "[0]",
            r#"{{ paymentMethod: pm_1 | type: 'pan' | json: '$.number' \ud83d\ude00 }}"#,
            "expected `|` or `}}` after `json`",
        ),
        // A bad template before a `{{` that starts none.
        (r#"{"n":"{{x}}","{{k":"\{{"}"#.into(), "n", "{{x}}", UNKNOWN_PART),
        (r#"{"n":"{{ x } y"}"#.into(), "n", "{{ x } y", "unterminated template"),
        (r#"{"n":"{{ x }"#.into(), "n", "{{ x }", "unterminated template"),
        (r#"{"n":"{{"#.into(), "n", "{{", "unterminated template"),
        (r#"{"n":"{{ \q }}"}"#.into(), "n", r#"{{ \q }}"#, BAD_ESCAPE),
        (r#"{"n":"{{ \ud800 }}"}"#.into(), "n", r#"{{ \ud800 }}"#, BAD_ESCAPE),
        (long.clone(), "[0]", &long_template, "template too long"),
        (deep, &deep_field, nope, "unknown payment method"),
        (long_key, &long_key_field, "{{x}}", UNKNOWN_PART),
        // The string ends right at the length limit: unterminated, not too long.
        (full_then_quote, "[0]", &full, "unterminated template"),
        // A template one byte over the limit.
        (over.clone(), "[0]", &over_template, "template too long"),
        // An escaped `}` does not close a template; the escape is invalid.
        (r#"{"n":"{{ \}} }}"}"#.into(), "n", r#"{{ \}} }}"#, BAD_ESCAPE),
        // Templates where none may be: in a key, between tokens.
        (r#"{"{{x}}":1}"#.into(), r#"["{"]"#, "", IN_KEY),
        (format!(r#"{{"a":"{PAN_NUMBER}","k{{{{x":1}}"#), r#"["k{"]"#, "", IN_KEY),
        (r#"{"a":{{x}}}"#.into(), "a", "", OUTSIDE),
        (format!(r#"["{PAN_NUMBER}",{{{{}}}}]"#), "[1]", "", OUTSIDE),
        (r#"{{x}}"#.into(), "$", "", OUTSIDE),
        // A brace written as an escape, in a value, a key, or after a template.
        (r#"{"n":"\u007b{x}}"}"#.into(), "n", "\\u007b", ESCAPED_BRACE),
        (r#"{"\u007B\u007b":1}"#.into(), r#"["\u007"]"#, "\\u007b", ESCAPED_BRACE),
        (format!(r#"["{PAN_NUMBER}","\u007b"]"#), "[1]", "\\u007b", ESCAPED_BRACE),
        // A body that ends unfinished after a substitution.
        (format!(r#"{{"n":"{PAN_NUMBER}""#), "$", "", UNFINISHED),
        (format!(r#"["{PAN_NUMBER}","x"#), "$", "", UNFINISHED),
    ];
    for (body, field, template, message) in cases {
        let err = run(&body).expect_err(&body);
        let want = TemplateError {
            field: field.to_owned(),
            template: template.to_owned(),
            message: message.to_owned(),
        };
        assert_eq!(err, want, "{body}");
    }
}

#[test]
fn deep_nesting_resolves_and_unwinds() {
    let mut r =
        |t: &TemplateRef| Ok::<_, ResolveError>(Revealed::Number(t.payment_method.as_str().into()));
    let depth = MAX_KIND_DEPTH + 10;
    let body =
        format!("{}{}{}", r#"{"k":"#.repeat(depth), "1", "}".repeat(depth)) + r#"{"a":["{{x}}"]}"#;
    let mut s = Scanner::new();
    let mut out = Vec::new();
    let err = s.feed(body.as_bytes(), &mut out, &mut r).unwrap_err();
    assert_eq!(err.field, "a[0]");
    // Keys stay keys below the path cap: a template there is refused.
    let body = format!(
        "{}{{\"{PAN_NUMBER}\":1}}{}",
        "[".repeat(500),
        "]".repeat(500)
    );
    s.reset();
    out.clear();
    let err = s.feed(body.as_bytes(), &mut out, &mut r).unwrap_err();
    assert_eq!(err.message, IN_KEY);
}

#[test]
fn counts_per_chunk_and_reuses() {
    let mut s = Scanner::new();
    let mut r = resolver;
    let mut out = Vec::new();
    let body = format!(r#"["{PAN_NUMBER}","{PAN_NUMBER}"]"#);
    let (a, b) = body.split_at(10);
    assert_eq!(s.feed(a.as_bytes(), &mut out, &mut r), Ok(0));
    assert_eq!(s.feed(b.as_bytes(), &mut out, &mut r), Ok(2));
    assert_eq!(s.finish(&mut out), Ok(()));
    assert_eq!(out, br#"["1:pan:number","1:pan:number"]"#);

    // finish resets: a second body starts clean.
    out.clear();
    assert_eq!(s.feed(b"\"{{", &mut out, &mut r), Ok(0));
    assert!(s.finish(&mut out).is_err());
    // After an error the scanner keeps failing until reset.
    assert!(s.feed(b"x", &mut out, &mut r).is_err());
    s.reset();
    out.clear();
    assert_eq!(s.feed(b"\"a{", &mut out, &mut r), Ok(0));
    assert_eq!(out, b"\"a");
    assert_eq!(s.feed(b"", &mut out, &mut r), Ok(0));
    assert_eq!(s.finish(&mut out), Ok(()));
    assert_eq!(out, b"\"a{");
}

#[test]
fn has_templates() {
    assert!(Scanner::has_templates(b"{\"a\":\"{{\"}"));
    assert!(!Scanner::has_templates(b"{\"a\":{\"b\":\"{ {\"}}"));
}

#[test]
fn passes_kinds_and_fields() {
    let mut seen = Vec::new();
    let mut r = |t: &TemplateRef| {
        seen.push((t.kind, t.field));
        Ok::<_, ResolveError>(Revealed::Expiry(String::new()))
    };
    let mut s = Scanner::new();
    let mut out = Vec::new();
    let body = br#"["{{ paymentMethod: p | type: 'virtualCard' | json: '$.card.cvc' }}"]"#;
    assert_eq!(s.feed(body, &mut out, &mut r), Ok(1));
    assert_eq!(out, br#"[""]"#);
    assert_eq!(seen, [(CredentialKind::VirtualCard, CredentialField::Cvc)]);
}
