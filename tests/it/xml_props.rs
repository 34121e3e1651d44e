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

/// The regions the scanner copies whole without a template (element and attribute names,
/// attribute values and text with named references, end tags, comments, processing
/// instructions, CDATA sections), long enough to be cut inside, each element followed by a
/// template in its text. Returns the document, its reference substitution and where each
/// region lies in the document.
fn skipped_regions() -> impl Strategy<Value = (String, String, Vec<(usize, usize)>)> {
    let text = r#"([a-zA-Z0-9 ,.;:!?'"/=>\-]|&amp;|&lt;|&#65;|&#x42;){1,60}"#;
    let element = (
        "[a-zA-Z_][a-zA-Z0-9_.-]{0,40}(:[a-zA-Z][a-zA-Z0-9]{0,40})?",
        "[a-zA-Z_][a-zA-Z0-9_.:-]{0,40}",
        text,
        text,
        // A comment without `-`, an instruction without `?`, a section without `]`.
        r#"[a-zA-Z0-9 <>&'"/=?!\]\[]{0,60}"#,
        r#"[a-zA-Z0-9 <>&'"/=!\]\[-]{0,60}"#,
        r#"[a-zA-Z0-9 <>&'"/=?!\[-]{0,60}"#,
    );
    prop::collection::vec(element, 1..5).prop_map(|elements| {
        let template = "{{ paymentMethod: pm_0 | type: 'pan' | json: '$.number' }}";
        let head = "<?xml version=\"1.0\"?><root>";
        let (mut written, mut expected) = (head.to_string(), head.to_string());
        let mut regions = Vec::new();
        let mut add = |written: &mut String, expected: &mut String, part: &str, region: bool| {
            if region {
                regions.push((written.len(), part.len()));
            }
            written.push_str(part);
            expected.push_str(part);
        };
        for (name, attr, value, text, comment, pi, cdata) in elements {
            // A value may hold `'` and `"`: quoted by the one it does not hold first.
            let quote = if value.contains('"') { "'" } else { "\"" };
            let value = value.replace(quote, "&apos;");
            let (open, close) = (format!("={quote}"), format!("{quote}>"));
            let end = format!("</{name}>");
            for (part, region) in [
                ("<", false),
                (name.as_str(), true),
                (" ", false),
                (attr.as_str(), true),
                (open.as_str(), false),
                (value.as_str(), true),
                (close.as_str(), false),
                (text.as_str(), true),
                ("<!--", false),
                (comment.as_str(), true),
                ("--><?pi ", false),
                (pi.as_str(), true),
                ("?><![CDATA[", false),
                (cdata.as_str(), true),
                ("]]>", false),
            ] {
                add(&mut written, &mut expected, part, region);
            }
            written.push_str(template);
            expected.push_str("4242424242424242");
            add(&mut written, &mut expected, &end, true);
        }
        written.push_str("</root>");
        expected.push_str("</root>");
        (written, expected, regions)
    })
}

/// What refuses a body, with the markup that does it.
fn refused_tail() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "<!DOCTYPE r [<!ENTITY e SYSTEM \"file:///etc/passwd\">]>",
        "<!ELEMENT r ANY>",
        "&#123;",
        "&#x7B;",
        "<n a='&#0123;'/>",
        "<n{{ x }}/>",
        "<n></n{{>",
        "<!-- {{ x }} -->",
        "<?pi {{ x }}?>",
        "<n\0/>",
        "<n>{{ paymentMethod: pm_1 | type: 'pan' | json: '$.number' }}</n>",
    ])
}

/// Cuts inside the regions: (region, offset in it), both taken modulo.
fn cuts_inside(
    regions: &[(usize, usize)],
    at: &[(prop::sample::Index, prop::sample::Index)],
) -> Vec<usize> {
    at.iter()
        .map(|(r, k)| {
            let (start, len) = regions[r.index(regions.len())];
            start + k.index(len + 1)
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// A document cut inside the regions the scanner copies whole gives the reference
    /// substitution; with a refused construct after them, every such cut refuses it alike.
    #[test]
    fn cuts_inside_skipped_regions(
        (written, expected, regions) in skipped_regions(),
        at in prop::collection::vec(any::<(prop::sample::Index, prop::sample::Index)>(), 1..8),
        tail in refused_tail(),
    ) {
        let cuts = cuts_inside(&regions, &at);
        let values = ["4242424242424242".to_owned()];
        chunked::gives(Format::Xml, &written, &expected, &cuts, &values)?;
        let refused = format!("{}{tail}</root>", written.strip_suffix("</root>").unwrap());
        let whole = chunked::scan(Format::Xml, refused.as_bytes(), &[], &values);
        prop_assert!(whole.is_err(), "{}", refused);
        prop_assert_eq!(&whole, &chunked::scan(Format::Xml, refused.as_bytes(), &cuts, &values));
    }

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

    /// Long runs of plain tags (which the scanner reads a block of bytes at a time) among the
    /// markup it reads byte by byte: any chunking, byte by byte included, gives the same
    /// outcome, the element path of an error included.
    #[test]
    fn plain_markup_in_blocks_is_read_alike(
        body in prop::collection::vec(prop::sample::select(vec![
            "<a>", "</a>", "<bb>", "</bb>", "<s:c>", "</s:c>", "<e/>", "</a >", "text ",
            "&amp;", "!", "?", ">", "/", "'", "<", "< a>", "<a b='1'>", "<a\n>", "<!--x-->",
            "<?p?>", "{", "&#123;", "&", "\0", "<!DOCTYPE a>",
            "{{ paymentMethod: pm_0 | type: 'pan' | json: '$.number' }}",
            "{{ paymentMethod: nope | type: 'pan' | json: '$.number' }}",
        ]), 0..120).prop_map(|t| t.concat().into_bytes()),
        cuts in prop::collection::vec(any::<usize>(), 0..6),
    ) {
        chunked::chunking_does_not_matter(Format::Xml, &body, &cuts)?;
    }

    /// Start tags with attributes (read a block at a time when whole before any byte that
    /// may start a template or a refusal, the next block starting at one that crosses a
    /// block's end) among the markup read byte by byte: any chunking, byte by byte included,
    /// gives the same outcome, an error's element path and attribute name included.
    #[test]
    fn attribute_tags_in_blocks_are_read_alike(
        body in prop::collection::vec(prop::sample::select(vec![
            "<a b=\"1\">", "<bb c='x' d=\"y\">", "<s:c xmlns:s=\"urn:example:long-namespace\">",
            "<s:c xmlns:s=\"urn:example:a-namespace-long-enough-to-cross-one-block\">",
            "<a b=\"a value longer than a block of 64 bytes, with '>' and /slashes/ in it\" />",
            "</a                                                                  >",
            "<e f=\"1\"/>", "<e f='/'/>", "<a g=\"x>y\">", "<a h='\"'>", "<a i=\"1\" / >",
            "<a\tj = 'k'\n>", "</a>", "</bb>", "</s:c>", "text ", "&amp;", "\"", "'", "=", ">",
            "<", "/", "{", "&#123;", "\0", "<!--x-->", "<?p?>", "<n a=\"",
            "{{ paymentMethod: pm_0 | type: 'pan' | json: '$.number' }}",
            "{{ paymentMethod: nope | type: 'pan' | json: '$.number' }}",
        ]), 0..120).prop_map(|t| t.concat().into_bytes()),
        cuts in prop::collection::vec(any::<usize>(), 0..6),
    ) {
        chunked::chunking_does_not_matter(Format::Xml, &body, &cuts)?;
    }
}
