//! Properties of the XML scanner: for any document of elements whose text, attribute values
//! and CDATA sections hold templates among escaped text, and any chunking, the output is the
//! reference substitution: the same document with each template's value escaped for its
//! place. Arbitrary markup never panics and chunking never changes the outcome.

use crate::common::chunked;
use paycred::template::Format;
use proptest::prelude::*;

/// `text` escaped as a serializer writes it, for text or (`attribute`) a `"`-quoted value.
fn escape(text: &str, attribute: bool) -> String {
    let mut out = String::new();
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '\r' => out.push_str("&#13;"),
            '"' if attribute => out.push_str("&quot;"),
            '\'' if attribute => out.push_str("&apos;"),
            '\t' if attribute => out.push_str("&#9;"),
            '\n' if attribute => out.push_str("&#10;"),
            c => out.push(c),
        }
    }
    out
}

/// Where a part stands.
#[derive(Debug, Clone, Copy)]
enum Place {
    Text,
    Attribute,
    Cdata,
}

/// One part of a text, a value or a section: text (no `{{`, none made with the part before),
/// or a template of `pm_<n>`.
#[derive(Debug, Clone)]
enum Part {
    Text(String),
    Template { pm: usize, spaced: bool },
}

fn part(pms: usize) -> impl Strategy<Value = Part> {
    prop_oneof![
        any::<String>()
            .prop_filter("no template start", |s| !s.contains("{{")
                && !s.starts_with('{')
                && !s.contains("]]>")
                && !s.contains(']')
                && !s.contains('\0'))
            .prop_map(Part::Text),
        (0..pms, any::<bool>()).prop_map(|(pm, spaced)| Part::Template { pm, spaced }),
    ]
}

/// The parts written in `place`, and their reference substitution.
fn write(parts: &[Part], place: Place, values: &[String]) -> (String, String) {
    let (mut written, mut expected) = (String::new(), String::new());
    for p in parts {
        match p {
            Part::Text(t) => {
                let t = match place {
                    Place::Text => escape(t, false),
                    Place::Attribute => escape(t, true),
                    Place::Cdata => t.clone(),
                };
                written.push_str(&t);
                expected.push_str(&t);
            }
            Part::Template { pm, spaced } => {
                // In a section only `pm_0` (digits, which cannot close it).
                let pm = if let Place::Cdata = place { 0 } else { *pm };
                let sp = if *spaced { " " } else { "" };
                let t = format!(
                    "{{{{{sp}paymentMethod:{sp}pm_{pm}{sp}|{sp}type:'pan'|json:'$.number'{sp}}}}}"
                );
                let value = &values[pm];
                match place {
                    Place::Text => {
                        written.push_str(&t);
                        expected.push_str(&escape(value, false));
                    }
                    Place::Attribute => {
                        written.push_str(&escape(&t, true));
                        expected.push_str(&escape(value, true));
                    }
                    Place::Cdata => {
                        written.push_str(&t);
                        expected.push_str(value);
                    }
                }
            }
        }
    }
    (written, expected)
}

/// A document as written, and the reference substitution: elements with a templated
/// attribute, text and CDATA section each.
fn document(values: Vec<String>) -> impl Strategy<Value = (String, String)> {
    let n = values.len();
    let parts = move || prop::collection::vec(part(n), 0..4);
    let element = ("[a-z]{1,6}(:[a-z]{1,4})?", parts(), parts(), parts());
    prop::collection::vec(element, 1..5).prop_map(move |elements| {
        let head = "<?xml version=\"1.0\"?>\n<!-- { } --><s:Envelope xmlns:s=\"u\"><s:Body>";
        let (mut written, mut expected) = (head.to_string(), head.to_string());
        for (name, text, attr, cdata) in elements {
            let (tw, te) = write(&text, Place::Text, &values);
            let (aw, ae) = write(&attr, Place::Attribute, &values);
            let (cw, ce) = write(&cdata, Place::Cdata, &values);
            let el = |a: &str, t: &str, c: &str| {
                format!("<{name} a=\"{a}\" b='x'>{t}<c><![CDATA[{c}]]></c></{name}><e/>")
            };
            written.push_str(&el(&aw, &tw, &cw));
            expected.push_str(&el(&ae, &te, &ce));
        }
        let tail = "</s:Body></s:Envelope>\n";
        (written + tail, expected + tail)
    })
}

fn values() -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec(
        prop_oneof![
            Just("4111111111111111".to_owned()),
            "[^\\x00-\\x1f]{0,12}",
            "[0-9<>&\"' \t\n\r]{0,12}",
        ],
        0..3,
    )
    .prop_map(|mut v| {
        v.insert(0, "4242424242424242".to_owned());
        v
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Any chunking of a document gives the reference substitution.
    #[test]
    fn documents_substitute_like_the_reference(
        (values, written, expected) in values().prop_flat_map(|v| document(v.clone()).prop_map(move |(w, e)| (v.clone(), w, e))),
        cuts in prop::collection::vec(any::<usize>(), 0..12),
    ) {
        chunked::gives(Format::Xml, &written, &expected, &cuts, &values)?;
    }

    /// Arbitrary markup never panics, and chunking never changes the outcome, errors included.
    #[test]
    fn chunking_does_not_matter(
        body in prop::collection::vec(prop::sample::select(vec![
            "{", "}", "<a>", "</a>", "<a b='", "'", "\"", "=", "/>", ">", "<", "]", "-", "?",
            "&", "&#123;", "&#x7b;", "&#12", ";", "<!--", "-->", "<![CDATA[", "]]>", "<?p ",
            "?>", "<!DOCTYPE a>", "\0", "x",
            "{{ paymentMethod: pm_0 | type: 'pan' | json: '$.number' }}",
            "{{ paymentMethod: pm_0 | type: &apos;pan&apos; | json: &quot;$.number&quot; }}",
        ]), 0..40).prop_map(|t| t.concat().into_bytes()),
        cuts in prop::collection::vec(any::<usize>(), 0..12),
    ) {
        chunked::chunking_does_not_matter(Format::Xml, &body, &cuts)?;
    }
}
