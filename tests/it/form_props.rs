//! Properties of the form scanner: for any form written as clients write it (keys and text
//! percent-encoded, templates raw or percent-encoded) and any chunking, the output is the
//! reference substitution: the same form with each template's value percent-encoded in its
//! place. Arbitrary bytes never panic and chunking never changes the outcome.

use crate::common::chunked;
use paycred::template::Format;
use proptest::prelude::*;

fn encode(text: &str) -> String {
    form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

/// One part of a value: text (no `{{` once decoded, none made with the part before), or a
/// template of `pm_<n>` written raw
/// or percent-encoded.
#[derive(Debug, Clone)]
enum Part {
    Text(String),
    Template {
        pm: usize,
        encoded: bool,
        spaced: bool,
    },
}

fn part(pms: usize) -> impl Strategy<Value = Part> {
    prop_oneof![
        // Not starting with `{` either: two texts in a row must not make a `{{`.
        any::<String>()
            .prop_filter("no template start", |s| !s.contains("{{")
                && !s.starts_with('{'))
            .prop_map(Part::Text),
        (0..pms, any::<bool>(), any::<bool>()).prop_map(|(pm, encoded, spaced)| Part::Template {
            pm,
            encoded,
            spaced
        }),
    ]
}

/// A form as written, and the reference substitution.
fn form(values: Vec<String>) -> impl Strategy<Value = (String, String)> {
    let pair = (
        "[a-z]{1,6}(\\[[a-z_]{1,6}\\]){0,2}",
        prop::collection::vec(part(values.len()), 0..4),
    );
    prop::collection::vec(pair, 1..6).prop_map(move |pairs| {
        let mut written = Vec::new();
        let mut expected = Vec::new();
        for (key, parts) in pairs {
            let (mut w, mut decoded) = (String::new(), String::new());
            for p in parts {
                match p {
                    Part::Text(t) => {
                        // A text that ends with `{` before a template: `{{{` is `{` and the
                        // template, either way.
                        w.push_str(&encode(&t));
                        decoded.push_str(&t);
                    }
                    Part::Template { pm, encoded, spaced } => {
                        let sp = if spaced { " " } else { "" };
                        let t = format!(
                            "{{{{{sp}paymentMethod:{sp}pm_{pm}{sp}|{sp}type:'pan'|json:'$.number'{sp}}}}}"
                        );
                        w.push_str(&if encoded { encode(&t) } else { t.replace(' ', "+") });
                        decoded.push_str(&values[pm]);
                    }
                }
            }
            written.push(format!("{}={w}", encode(&key)));
            expected.push(format!("{}={}", encode(&key), encode(&decoded)));
        }
        (written.join("&"), expected.join("&"))
    })
}

fn values() -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec(
        prop_oneof![Just("4242424242424242".to_owned()), any::<String>()],
        1..4,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Any chunking of a client-written form gives the reference substitution.
    #[test]
    fn forms_substitute_like_the_reference(
        (values, written, expected) in values().prop_flat_map(|v| form(v.clone()).prop_map(move |(w, e)| (v.clone(), w, e))),
        cuts in prop::collection::vec(any::<usize>(), 0..12),
    ) {
        chunked::gives(Format::Form, &written, &expected, &cuts, &values)?;
    }

    /// Arbitrary bytes never panic, and chunking never changes the outcome, errors included.
    #[test]
    fn chunking_does_not_matter(
        body in prop::collection::vec(prop::sample::select(vec![
            "{", "}", "%7B", "%7b", "%7D", "%", "%7", "&", "=", "+", "a", "[", "]",
            "{{ paymentMethod: pm_0 | type: 'pan' | json: '$.number' }}",
            "%7B%7B+paymentMethod%3A+pm_0+%7C+type%3A+%27pan%27+%7C+json%3A+%27%24.number%27+%7D%7D",
        ]), 0..40).prop_map(|t| t.concat().into_bytes()),
        cuts in prop::collection::vec(any::<usize>(), 0..12),
    ) {
        chunked::chunking_does_not_matter(Format::Form, &body, &cuts)?;
    }
}
