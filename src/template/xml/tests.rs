//! The XML scanner as its callers use it: substitution in text, attribute values and CDATA
//! sections, what is refused and the element path an error names, every split of a body
//! giving the same outcome.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::escape::CDATA_CLOSE;
use super::*;
use crate::secret::Revealed;
use crate::template::expr::TemplateRef;
use crate::template::limits::{MAX_KEY_LEN, MAX_PATH_DEPTH};
use crate::template::resolve::ResolveError;
use crate::template::testing::run_every_cut;

/// Resolves `pm_x`'s number to `4<2&"'>`, a value that needs escaping; `pm_c` to `a]]>b`;
/// `pm_<n>` to `n`; `nope` is unknown.
fn resolver(t: &TemplateRef) -> Result<Revealed, ResolveError> {
    match t.payment_method.as_str() {
        "pm_x" => Ok(Revealed::Number("4<2&\"'>\t".into())),
        "pm_c" => Ok(Revealed::Number("a]]>b".into())),
        "pm_z" => Ok(Revealed::Number("a\u{1}".into())),
        "nope" => Err(ResolveError::new("unknown payment method")),
        other => Ok(Revealed::Number(other.trim_start_matches("pm_").into())),
    }
}

fn run(body: &str) -> Result<String, TemplateError> {
    run_every_cut(
        (XmlScanner::new, XmlScanner::feed, XmlScanner::finish),
        body,
        &mut resolver,
    )
}

fn t(pm: &str) -> String {
    format!("{{{{ paymentMethod: {pm} | type: 'pan' | json: '$.number' }}}}")
}

#[test]
fn substitutes_in_text_attributes_and_cdata() {
    let quoted = "{{ paymentMethod: pm_4 | type: &apos;pan&apos; | json: &quot;$.number&quot; }}";
    for (body, want) in [
        (
            format!(
                "<?xml version=\"1.0\"?><s:E xmlns:s=\"u\"><n>{}</n></s:E>",
                t("pm_7")
            ),
            "<?xml version=\"1.0\"?><s:E xmlns:s=\"u\"><n>7</n></s:E>".to_string(),
        ),
        (
            format!("<a><n>x{}y</n><m k=\"{}\"/></a>", t("pm_x"), t("pm_x")),
            "<a><n>x4&lt;2&amp;\"'&gt;\ty</n><m k=\"4&lt;2&amp;&quot;&apos;&gt;&#9;\"/></a>"
                .to_string(),
        ),
        (
            format!("<a b='{quoted}'>{quoted}</a>"),
            "<a b='4'>4</a>".into(),
        ),
        (
            format!("<a><![CDATA[<{}>]]></a>", t("pm_5")),
            "<a><![CDATA[<5>]]></a>".into(),
        ),
        (format!("<a>{{{}}}</a>", t("pm_3")), "<a>{3}</a>".into()),
        // Braces that open no template, references, comments and markup without any.
        (
            "<!-- { } --><?pi { ?><a x=\"{a}\">{ } }} &amp;&#125;&#x7d;<![CDATA[{]]]]></a>".into(),
            "<!-- { } --><?pi { ?><a x=\"{a}\">{ } }} &amp;&#125;&#x7d;<![CDATA[{]]]]></a>".into(),
        ),
    ] {
        assert_eq!(run(&body), Ok(want), "{body}");
    }
}

#[test]
fn refuses_and_names_the_element() {
    let envelope = |inner: &str| {
        format!(
            "<soap:Envelope xmlns:soap=\"s\"><soap:Body><req><card>{inner}</card></req>\
             </soap:Body></soap:Envelope>"
        )
    };
    let card = "/Envelope/Body/req/card";
    for (body, field, message) in [
        (
            envelope(&format!("<accountNumber>{}</accountNumber>", t("nope"))),
            format!("{card}/accountNumber"),
            "unknown payment method",
        ),
        (
            envelope(&format!("<n type=\"{}\"/>", t("nope"))),
            format!("{card}/n/@type"),
            "unknown payment method",
        ),
        (
            envelope(&format!("<![CDATA[{}]]>", t("pm_c"))),
            card.to_string(),
            CDATA_CLOSE,
        ),
        (
            envelope(&format!("<n>{}</n>", t("pm_z"))),
            format!("{card}/n"),
            "the value holds a character that XML does not allow",
        ),
        (
            envelope("<n>{{ paymentMethod: pm_1 </n>"),
            format!("{card}/n"),
            "unterminated template",
        ),
        (
            envelope("<n a=\"{{ paymentMethod: pm_1\"/>"),
            format!("{card}/n/@a"),
            "unterminated template",
        ),
        (
            envelope("<![CDATA[{{ x ]]>"),
            card.to_string(),
            "unterminated template",
        ),
        (
            envelope(&format!("<n>{{{{{}}}}}</n>", " ".repeat(600))),
            format!("{card}/n"),
            "template too long",
        ),
        (envelope("<n{{ x }}/>"), card.to_string(), XML_IN_MARKUP),
        (
            envelope("<n {{x}}=\"1\"/>"),
            format!("{card}/n"),
            XML_IN_MARKUP,
        ),
        (envelope("<n></n{{>"), format!("{card}/n"), XML_IN_MARKUP),
        (
            envelope("<!-- {{ x }} -->"),
            card.to_string(),
            XML_IN_COMMENT,
        ),
        (
            envelope("<?pi {{ x }} ?>"),
            card.to_string(),
            XML_IN_COMMENT,
        ),
        (format!("{}<a/>", t("pm_1")), "/".to_string(), XML_OUTSIDE),
        (
            format!("<a/><![CDATA[{}]]>", t("pm_1")),
            "/".to_string(),
            XML_OUTSIDE,
        ),
        (
            "<!DOCTYPE a [<!ENTITY e SYSTEM \"file:///etc/passwd\">]><a>&e;</a>".into(),
            "/".into(),
            XML_DECLARATION,
        ),
        (envelope("<!DOCTYPE x>"), card.to_string(), XML_DECLARATION),
        (envelope("<!-x>"), card.to_string(), XML_DECLARATION),
        (
            envelope("<n>&#123;&#0123;</n>"),
            format!("{card}/n"),
            XML_BRACE_REFERENCE,
        ),
        (
            envelope("<n a='&#x7b;'/>"),
            format!("{card}/n/@a"),
            XML_BRACE_REFERENCE,
        ),
        ("<\0a\0>\0".into(), "/".into(), XML_NUL),
        (
            format!("<a><b>{}</b>", t("pm_1")),
            "/a".to_string(),
            XML_ENDS_EARLY,
        ),
        (
            format!("<a><b>{}</b></a><c", t("pm_1")),
            "/".to_string(),
            XML_ENDS_EARLY,
        ),
    ] {
        let err = run(&body).unwrap_err();
        assert_eq!(
            (err.field.as_str(), err.message.as_str()),
            (field.as_str(), message),
            "{body}"
        );
    }
}

/// A SOAP envelope: `head` (the start tags of `Envelope`, `Body` and `req`), five `item`s,
/// `<card{card}><deep>` around `inner`, two more `item`s.
fn envelope(head: &str, item: &str, card: &str, inner: &str) -> String {
    format!(
        "{head}{}<card{card}><deep>{inner}</deep></card>{}</req></s:Body></s:Envelope>",
        item.repeat(5),
        item.repeat(2)
    )
}

/// Where [`envelope`] puts its `inner` markup.
const DEEP: &str = "/Envelope/Body/req/card/deep";

/// `envelope` substitutes a template in `deep`, refuses an unknown payment method there
/// and refuses each of `cases` (its inner markup, the field named, the message) alike,
/// however it is cut.
fn substitutes_and_refuses<const N: usize>(
    envelope: impl Fn(&str) -> String,
    cases: [(String, String, &str); N],
) {
    assert_eq!(run(&envelope(&t("pm_42"))), Ok(envelope("42")));
    refuses_at(&envelope(&t("nope")), DEEP, "unknown payment method");
    for (inner, field, message) in cases {
        refuses_at(&envelope(&inner), &field, message);
    }
}

/// `body` is refused with `message`, naming `field`, however it is cut.
fn refuses_at(body: &str, field: &str, message: &str) {
    let err = run(body).unwrap_err();
    assert_eq!(
        (err.field.as_str(), err.message.as_str()),
        (field, message),
        "{body}"
    );
}

#[test]
fn long_plain_markup_keeps_the_path() {
    // Blocks of plain tags (read a block at a time) among tags with attributes, empty
    // elements, references and punctuation (read byte by byte), cut everywhere.
    let item = "<item><name>Widget &amp; co. ?!</name><price>19.99</price><empty/>\
                <q n=\"1\">3 > 2</q><x:y>a/b</x:y ></item>";
    let envelope =
        |inner: &str| envelope("<s:Envelope xmlns:s=\"u\"><s:Body><req>", item, "", inner);
    let deep = DEEP;
    substitutes_and_refuses(
        envelope,
        [
            (
                format!("<n a=\"{}\"/>", t("nope")),
                format!("{deep}/n/@a"),
                "unknown payment method",
            ),
            ("&#123;".into(), deep.into(), XML_BRACE_REFERENCE),
            ("<!DOCTYPE x>".into(), deep.into(), XML_DECLARATION),
            ("<?pi {{ ?>".into(), deep.into(), XML_IN_COMMENT),
            ("<n{{/>".into(), deep.into(), XML_IN_MARKUP),
            ("</n\0>".into(), deep.into(), XML_NUL),
        ],
    );
    // Cut short after a substitution, inside plain markup.
    let body = envelope(&t("pm_1"));
    let cut = &body[..body.len() - "</s:Body></s:Envelope>".len()];
    let err = run(cut).unwrap_err();
    assert_eq!(
        (err.field.as_str(), err.message.as_str()),
        ("/Envelope/Body", XML_ENDS_EARLY)
    );
}

#[test]
fn tags_with_attributes_in_blocks_keep_the_path() {
    // Start tags with attributes (quotes of both kinds, `>` and `/` in values, empty
    // elements, `/` not right before `>`), whole in a block or across a block's end,
    // and longer than a block, cut everywhere.
    let item = "<item id=\"7\" kind='a\"b'><name lang=\"en\">Widget &amp; co.</name>\
                <price cur=\"EUR\" v='1>0'/><q n=\"1\" m='/' / >3</q><x:y a=\"/\">a/b</x:y >\
                <long:element-name-of-some-length a=\"a value > a block's 64 bytes, with \
                'quotes' and /slashes/\" b='\"' /><long:element-name-of-some-length \
                xmlns:long=\"urn:example:a-namespace-long-enough-to-cross-one-block\">x\
                </long:element-name-of-some-length                                   ></item>";
    let head = "<s:Envelope xmlns:s=\"http://schemas.xmlsoap.org/soap/envelope/\"><s:Body>\
                <req xmlns=\"urn:schemas-cybersource-com:transaction-data-1.219\">";
    let envelope = |inner: &str| envelope(head, item, " type=\"visa\"", inner);
    let deep = DEEP;
    substitutes_and_refuses(
        envelope,
        [
            (
                format!("<n a=\"x\" b=\"{}\"/>", t("nope")),
                format!("{deep}/n/@b"),
                "unknown payment method",
            ),
            (
                format!("<n a=\"x\"/><m =\"{}\"/>", t("nope")),
                format!("{deep}/m/@"),
                "unknown payment method",
            ),
            (
                format!("<n/ c=\"{}\"/>", t("nope")),
                format!("{deep}/n/@c"),
                "unknown payment method",
            ),
            (
                "<n a='&#123;'/>".into(),
                format!("{deep}/n/@a"),
                XML_BRACE_REFERENCE,
            ),
            (
                format!("<n long=\"{}\"/>", "x".repeat(70) + &t("nope")),
                format!("{deep}/n/@long"),
                "unknown payment method",
            ),
            (
                format!("<n a='1' b=\"{}&#x7b;\"/>", "x".repeat(70)),
                format!("{deep}/n/@b"),
                XML_BRACE_REFERENCE,
            ),
            (
                format!("</deep{}{{{{>", " ".repeat(70)),
                deep.to_string(),
                XML_IN_MARKUP,
            ),
            ("<n a='1' {{/>".into(), format!("{deep}/n"), XML_IN_MARKUP),
            ("<n a='1'\0/>".into(), format!("{deep}/n"), XML_NUL),
        ],
    );
}

#[test]
fn the_path_is_bounded() {
    let deep = "<a>".repeat(MAX_PATH_DEPTH + 5);
    let err = run(&format!("{deep}{}", t("nope"))).unwrap_err();
    assert!(err.field.ends_with("/a/…"), "{}", err.field);
    assert_eq!(err.field.len(), MAX_PATH_DEPTH * 2 + "/…".len());
    let long = "n".repeat(MAX_KEY_LEN + 10);
    let err = run(&format!("<{long}>{}", t("nope"))).unwrap_err();
    assert_eq!(err.field, format!("/{}…", &long[..MAX_KEY_LEN]));
}
