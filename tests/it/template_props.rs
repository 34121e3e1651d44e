//! Properties of the template scanner: chunking never changes the outcome, bodies without
//! templates pass byte for byte, valid JSON stays valid with values escaped, nothing panics.

use crate::common::Table;
use paycred::template::{CredentialKind, Scanner, TemplateError};
use proptest::prelude::*;
use serde_json::{Map, Value};

/// Scans `body` cut at `cuts` (taken modulo the length, any order).
fn scan(body: &[u8], cuts: &[usize], values: &[String]) -> Result<(Vec<u8>, usize), TemplateError> {
    scan_ending(body, cuts, values, false)
}

/// [`scan`], the last chunk fed with `feed_last` when `last`, else with `feed` then `finish`.
fn scan_ending(
    body: &[u8],
    cuts: &[usize],
    values: &[String],
    last: bool,
) -> Result<(Vec<u8>, usize), TemplateError> {
    let mut scanner = Scanner::new();
    let mut resolver = Table { values };
    let mut out = Vec::new();
    let mut count = 0;
    let chunks = chunks(body, cuts);
    let (end, init) = chunks.split_last().unwrap();
    for chunk in init {
        count += scanner.feed(chunk, &mut out, &mut resolver)?;
    }
    if last {
        count += scanner.feed_last(end, &mut out, &mut resolver)?;
    } else {
        count += scanner.feed(end, &mut out, &mut resolver)?;
        scanner.finish(&mut out)?;
    }
    Ok((out, count))
}

/// Splits `body` at `cuts` (taken modulo the length, any order) into its chunks.
fn chunks<'a>(body: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
    let mut at: Vec<usize> = cuts.iter().map(|c| c % (body.len() + 1)).collect();
    at.push(0);
    at.push(body.len());
    at.sort_unstable();
    at.windows(2).map(|w| &body[w[0]..w[1]]).collect()
}

/// [`scan`] of the chunks as the proxy scans a body read whole in pieces: `feed` up to
/// `Scanner::tail_start`, `feed_tail` from there, `feed_last` for the end.
fn scan_with_tail(
    body: &[u8],
    cuts: &[usize],
    values: &[String],
) -> Result<(Vec<u8>, usize), TemplateError> {
    let chunks = chunks(body, cuts);
    let tail_from = Scanner::tail_start(&chunks);
    let mut scanner = Scanner::new();
    let mut resolver = Table { values };
    let (mut out, mut count) = (Vec::new(), 0);
    for (j, chunk) in chunks.iter().enumerate() {
        count += if j + 1 == chunks.len() {
            scanner.feed_last(chunk, &mut out, &mut resolver)?
        } else if j >= tail_from {
            scanner.feed_tail(chunk, &mut out, &mut resolver)?
        } else {
            scanner.feed(chunk, &mut out, &mut resolver)?
        };
    }
    Ok((out, count))
}

/// [`scan`], but a chunk that cannot reach the resolver is only lexed and the part of it that
/// `lex` says goes through is copied to the output, as the proxy forwards it; `lex` declines
/// the others, which are fed.
fn scan_lexing(
    body: &[u8],
    cuts: &[usize],
    values: &[String],
) -> Result<(Vec<u8>, usize), TemplateError> {
    let mut scanner = Scanner::new();
    let mut resolver = Table { values };
    let (mut out, mut count) = (Vec::new(), 0);
    for chunk in chunks(body, cuts) {
        match scanner.lex(chunk)? {
            Some(forward) => out.extend_from_slice(&chunk[..forward]),
            None => count += scanner.feed(chunk, &mut out, &mut resolver)?,
        }
    }
    scanner.finish(&mut out)?;
    Ok((out, count))
}

/// Pieces that stress the lexer: structure, escapes, braces, multi-byte characters,
/// templates good and bad.
fn token() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "{",
        "}",
        "[",
        "]",
        ",",
        ":",
        "\"",
        "\\",
        "\\\"",
        "\\\\",
        "\\n",
        "\\u00e9",
        "\\ud83d\\ude00",
        // Braces written as escapes (refused), and escapes that are none.
        "\\u007b",
        "\\u007B",
        "\\u007",
        "{{",
        "}}",
        "{{{",
        " ",
        "\t",
        "a",
        "1",
        "é",
        "😀",
        "\"k\":",
        "\"v\"",
        "{{ paymentMethod: pm_0 | type: 'pan' | json: '$.number' }}",
        "{{ paymentMethod: pm_1 | type: \\\"virtualCard\\\" | json: \\\"$.card.cvc\\\" }}",
        "{{paymentMethod:pm_0|type:'networkToken'|json:'$.token.cryptogram'}}",
        "{{ paymentMethod: pm_9 | type: 'pan' | json: '$.number' }}",
        "{{ paymentMethod: pm_0 | type: 'pan' }}",
        // Escapes right before and inside the closing braces.
        "{{ paymentMethod: pm_0 | type: 'pan' | json: '$.number' \\t}}",
        "{{ x \\}} }}",
        "{{ x }}",
    ])
}

fn soup() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(token(), 0..60).prop_map(|t| t.concat().into_bytes())
}

fn values() -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec(
        prop_oneof![
            Just("4242424242424242".to_owned()),
            Just("\"\\\n\u{0}\u{1f}é😀".to_owned()),
            any::<String>(),
        ],
        2..4,
    )
}

/// A template for `pm_<n>`, in one of the spellings a caller may use.
#[derive(Debug, Clone)]
struct Template {
    text: String,
    pm: usize,
}

fn template(pms: usize) -> impl Strategy<Value = Template> {
    let ws = || prop::sample::select(vec!["", " ", "\t", "\n", "  \r\n"]);
    let kinds = prop::sample::select(vec![
        (CredentialKind::Pan, "$.number"),
        (CredentialKind::Pan, "$.card.cvc"),
        (CredentialKind::VirtualCard, "$['expirationMonth']"),
        (CredentialKind::NetworkToken, "$.token.cryptogram"),
        (CredentialKind::NetworkToken, "$.card.expirationYear"),
    ]);
    (0..pms, kinds, prop::bool::ANY, ws(), ws(), ws(), ws()).prop_map(
        |(pm, (kind, path), double, a, b, c, d)| {
            let q = if double { '"' } else { '\'' };
            let path = if double { path.replace('\'', "\"") } else { path.to_owned() };
            let text = format!(
                "{{{{{a}paymentMethod:{b}pm_{pm}{c}|{d}type{a}:{b}{q}{kind}{q}{c}|json:{d}{q}{path}{q}{a}}}}}",
                kind = kind.as_str(),
            );
            Template { text, pm }
        },
    )
}

/// Text around templates: anything without `{{`.
fn text() -> impl Strategy<Value = String> {
    any::<String>().prop_filter("no template start", |s| !s.contains("{{"))
}

/// A string value holding zero to three templates, as (written, expected) pairs.
fn string_value(values: Vec<String>) -> impl Strategy<Value = (String, String)> {
    let pms = values.len();
    (text(), prop::collection::vec((template(pms), text()), 0..3)).prop_map(move |(head, rest)| {
        let mut written = head.clone();
        let mut expected = head;
        for (t, tail) in rest {
            written.push_str(&t.text);
            written.push_str(&tail);
            expected.push_str(&values[t.pm]);
            expected.push_str(&tail);
        }
        (written, expected)
    })
}

/// A JSON document with templates in its string values, as (written, expected) pairs.
fn document(values: Vec<String>) -> impl Strategy<Value = (Value, Value)> {
    let leaf = prop_oneof![
        string_value(values).prop_map(|(w, e)| (Value::String(w), Value::String(e))),
        any::<i64>().prop_map(|n| (Value::from(n), Value::from(n))),
        Just((Value::Null, Value::Null)),
    ];
    leaf.prop_recursive(5, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(|items| {
                let (w, e): (Vec<_>, Vec<_>) = items.into_iter().unzip();
                (Value::Array(w), Value::Array(e))
            }),
            // Keys may hold braces (never `{{`, which is refused there): they stay as
            // written.
            prop::collection::vec(
                (
                    prop_oneof![
                        "[a-z_]{1,8}",
                        any::<String>().prop_filter("no template start", |s| !s.contains("{{")),
                        Just("{ paymentMethod: pm_0 } }}".to_owned()),
                    ],
                    inner
                ),
                0..6
            )
            .prop_map(|members| {
                let mut w = Map::new();
                let mut e = Map::new();
                for (k, (wv, ev)) in members {
                    w.insert(k.clone(), wv);
                    e.insert(k, ev);
                }
                (Value::Object(w), Value::Object(e))
            }),
        ]
    })
}

fn with_values() -> impl Strategy<Value = (Vec<String>, Value, Value)> {
    values().prop_flat_map(|values| {
        document(values.clone()).prop_map(move |(w, e)| (values.clone(), w, e))
    })
}

fn cuts() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(any::<usize>(), 0..12)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// (a) Any chunking gives the same result as one chunk, errors included.
    #[test]
    fn chunking_does_not_matter(body in soup(), cuts in cuts(), values in values()) {
        let whole = scan(&body, &[], &values);
        let chunked = scan(&body, &cuts, &values);
        prop_assert_eq!(&whole, &chunked);
        let bytewise: Vec<usize> = (0..body.len()).collect();
        prop_assert_eq!(whole, scan(&body, &bytewise, &values));
    }

    /// (a) Same, on valid documents with templates at the start, middle and end of strings.
    #[test]
    fn chunking_does_not_matter_on_documents((values, written, _) in with_values(), cuts in cuts()) {
        let body = serde_json::to_vec(&written).unwrap();
        prop_assert_eq!(scan(&body, &[], &values), scan(&body, &cuts, &values));
    }

    /// (b) A body without `{{` (nor the start of a brace written `\u007b`) passes byte for
    /// byte.
    #[test]
    fn no_template_passes_through(
        body in prop_oneof![soup(), any::<Vec<u8>>()].prop_filter("no {{, no \\u007b", |b| {
            !b.windows(2).any(|w| w == b"{{") && !b.windows(5).any(|w| w == b"\\u007")
        }),
        cuts in cuts(),
    ) {
        let (out, count) = scan(&body, &cuts, &[]).unwrap();
        prop_assert_eq!(count, 0);
        prop_assert_eq!(out, body);
    }

    /// (c) Valid JSON stays valid JSON, every template replaced by its value, escaped.
    #[test]
    fn documents_stay_valid((values, written, expected) in with_values(), cuts in cuts()) {
        let body = serde_json::to_vec(&written).unwrap();
        let (out, _) = scan(&body, &cuts, &values).unwrap();
        let got: Value = serde_json::from_slice(&out).unwrap();
        prop_assert_eq!(got, expected);
    }

    /// (c) A value that needs escaping round-trips through a template.
    #[test]
    fn values_round_trip(value in any::<String>(), t in template(1)) {
        let values = vec![value.clone()];
        let body = serde_json::to_vec(&serde_json::json!({"card": {"number": t.text}})).unwrap();
        let (out, count) = scan(&body, &[], &values).unwrap();
        prop_assert_eq!(count, 1);
        let got: Value = serde_json::from_slice(&out).unwrap();
        prop_assert_eq!(&got["card"]["number"], &Value::String(value));
    }

    /// Parse errors never repeat a digit of the template, so no card number leaks.
    #[test]
    fn parse_errors_hold_no_digits(inner in "[ -~]{0,80}", digits in "[0-9]{12,19}") {
        for text in [
            format!("{{{{{inner}}}}}"),
            format!("{{{{ paymentMethod: pm_1 | type: 'pan' | json: '$.{digits}' }}}}"),
            format!("{{{{ {inner}{digits} }}}}"),
        ] {
            if let Err(err) = paycred::template::parse(&text) {
                let message = err.to_string();
                prop_assert!(!message.bytes().any(|b| b.is_ascii_digit()), "{}", message);
            }
        }
    }

    /// (e) Ending a body with `feed_last` gives what `feed` then `finish` gives, errors
    /// included, in any chunking.
    #[test]
    fn last_chunk_mode_changes_nothing(body in soup(), cuts in cuts(), values in values()) {
        for cuts in [cuts, (0..body.len()).collect()] {
            prop_assert_eq!(
                scan_ending(&body, &cuts, &values, false),
                scan_ending(&body, &cuts, &values, true)
            );
        }
    }

    /// (e) Same, on valid documents with templates in values and braces in keys.
    #[test]
    fn last_chunk_mode_changes_nothing_on_documents(
        (values, written, _) in with_values(),
        cuts in cuts(),
    ) {
        let body = serde_json::to_vec(&written).unwrap();
        prop_assert_eq!(
            scan_ending(&body, &cuts, &values, false),
            scan_ending(&body, &cuts, &values, true)
        );
    }

    /// (e) Feeding the tail of a body read whole with `feed_tail` (as the proxy does for a
    /// body read in pieces) gives what `feed` gives, errors included, in any chunking.
    #[test]
    fn tail_mode_changes_nothing(body in soup(), cuts in cuts(), values in values()) {
        for cuts in [cuts, (0..body.len()).collect()] {
            prop_assert_eq!(scan(&body, &cuts, &values), scan_with_tail(&body, &cuts, &values));
        }
    }

    /// (e) Same, on valid documents with templates in values and braces in keys.
    #[test]
    fn tail_mode_changes_nothing_on_documents(
        (values, written, _) in with_values(),
        cuts in cuts(),
    ) {
        let body = serde_json::to_vec(&written).unwrap();
        prop_assert_eq!(scan(&body, &cuts, &values), scan_with_tail(&body, &cuts, &values));
    }

    /// (f) Lexing a chunk that cannot reach the resolver (`may_resolve` false) and forwarding
    /// what `lex` says, as the proxy does for streamed chunks, gives what feeding every chunk
    /// gives, errors included, in any chunking. (Deferring such chunks, `Scanner::defer`, is
    /// checked the same way in `template::json::deferred`, its limits lowered to bodies
    /// this small.)
    #[test]
    fn lexing_quiet_chunks_changes_nothing(body in soup(), cuts in cuts(), values in values()) {
        for cuts in [cuts, (0..body.len()).collect()] {
            prop_assert_eq!(scan(&body, &cuts, &values), scan_lexing(&body, &cuts, &values));
        }
    }

    /// (f) Same, on valid documents with templates in values and braces in keys.
    #[test]
    fn lexing_quiet_chunks_changes_nothing_on_documents(
        (values, written, _) in with_values(),
        cuts in cuts(),
    ) {
        let body = serde_json::to_vec(&written).unwrap();
        prop_assert_eq!(scan(&body, &cuts, &values), scan_lexing(&body, &cuts, &values));
    }

    /// (d) Arbitrary bytes never panic, in any chunking, either way of ending.
    #[test]
    fn never_panics(body in prop_oneof![any::<Vec<u8>>(), soup()], cuts in cuts()) {
        let _ = scan(&body, &cuts, &["x\"".to_owned()]);
        let _ = scan_ending(&body, &cuts, &["x\"".to_owned()], true);
    }
}

#[test]
fn template_errors_name_the_field() {
    let body =
        br#"{"items":[{"pan":"{{ paymentMethod: pm_7 | type: 'pan' | json: '$.number' }}"}]}"#;
    let err = scan(body, &[20, 40], &[]).unwrap_err();
    assert_eq!(err.field, "items[0].pan");
    assert_eq!(err.message, "unknown payment method");
    assert_eq!(
        err.template,
        "{{ paymentMethod: pm_7 | type: 'pan' | json: '$.number' }}"
    );
}
