//! The template expression: `{{ paymentMethod: pm_123 | type: 'pan' | json: '$.number' }}`.
//!
//! [`parse`] turns the text of one template, from `{{` to `}}` inclusive and already
//! JSON-unescaped, into a [`TemplateRef`]. The grammar:
//!
//! ```text
//! template := "{{" ws part ws ( "|" ws part ws )* "}}"
//! part     := name ws ":" ws value
//! name     := "paymentMethod" | "type" | "json"
//! value    := "'" text "'" | '"' text '"' | bare
//! ```
//!
//! - Whitespace (spaces, tabs, carriage returns, newlines) is free around every token.
//! - The three parts may come in any order, but each exactly once.
//! - Values may be single-quoted, double-quoted or bare (no quotes, up to the next
//!   whitespace or `|`). The spec writes the id bare and the other two quoted; accepting all
//!   three forms everywhere costs nothing and spares callers a confusing error.
//! - A quoted value ends at the first matching quote outside square brackets, so
//!   `json: '$['number']'` works.
//! - `paymentMethod` is `[A-Za-z0-9_-]{1,128}`.
//! - `type` is `virtualCard`, `networkToken` or `pan`; the API spellings `virtual-card` and
//!   `network-token` are accepted too.
//! - `json` is `$.<field>`, `$.card.<field>` or `$.token.<field>`, each segment also in bracket
//!   form (`$['number']`, `$['card']["cvc"]`). `$.card.` is accepted for every type (one guide
//!   example uses it with network tokens); `$.token.` only for `networkToken`. Fields:
//!   `number`, `expirationMonth`, `expirationYear`, plus `cvc` for `virtualCard` and `pan`, or
//!   `cryptogram` for `networkToken`.
//!
//! Error messages describe the template's structure only. The one piece of caller text they may
//! repeat is an unknown field name, and only when it is short and purely alphabetic, so a card
//! number typed into the wrong place is never echoed.

use super::bits::byte_class;
use std::fmt;

/// Longest accepted payment method id.
pub const MAX_ID_LEN: usize = 128;

/// Longest field name [`ExprError::UnknownField`] repeats back.
const MAX_ECHOED_FIELD_LEN: usize = 32;

/// The kind of credential a template reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CredentialKind {
    /// `'virtualCard'`: the virtual card of the newest active purchase intent.
    VirtualCard,
    /// `'networkToken'`: the network token of the newest active purchase intent.
    NetworkToken,
    /// `'pan'`: the stored card itself.
    Pan,
}

impl CredentialKind {
    /// The spelling used in templates.
    pub fn as_str(self) -> &'static str {
        match self {
            CredentialKind::VirtualCard => "virtualCard",
            CredentialKind::NetworkToken => "networkToken",
            CredentialKind::Pan => "pan",
        }
    }

    fn from_template(s: &str) -> Option<Self> {
        match s {
            "virtualCard" | "virtual-card" => Some(CredentialKind::VirtualCard),
            "networkToken" | "network-token" => Some(CredentialKind::NetworkToken),
            "pan" => Some(CredentialKind::Pan),
            _ => None,
        }
    }

    /// Whether `field` exists for this kind of credential.
    pub fn has_field(self, field: CredentialField) -> bool {
        match field {
            CredentialField::Number
            | CredentialField::ExpirationMonth
            | CredentialField::ExpirationYear => true,
            CredentialField::Cvc => self != CredentialKind::NetworkToken,
            CredentialField::Cryptogram => self == CredentialKind::NetworkToken,
        }
    }
}

impl fmt::Display for CredentialKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The field of a credential a template reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CredentialField {
    /// `number`
    Number,
    /// `expirationMonth`
    ExpirationMonth,
    /// `expirationYear`
    ExpirationYear,
    /// `cvc` (virtual cards and pans)
    Cvc,
    /// `cryptogram` (network tokens)
    Cryptogram,
}

impl CredentialField {
    /// The spelling used in JSON paths.
    pub fn as_str(self) -> &'static str {
        match self {
            CredentialField::Number => "number",
            CredentialField::ExpirationMonth => "expirationMonth",
            CredentialField::ExpirationYear => "expirationYear",
            CredentialField::Cvc => "cvc",
            CredentialField::Cryptogram => "cryptogram",
        }
    }

    fn from_path(s: &str) -> Option<Self> {
        match s {
            "number" => Some(CredentialField::Number),
            "expirationMonth" => Some(CredentialField::ExpirationMonth),
            "expirationYear" => Some(CredentialField::ExpirationYear),
            "cvc" => Some(CredentialField::Cvc),
            "cryptogram" => Some(CredentialField::Cryptogram),
            _ => None,
        }
    }
}

impl fmt::Display for CredentialField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One parsed template: which credential value to put in its place.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TemplateRef {
    /// The payment method id, as written.
    pub payment_method: String,
    /// The credential type.
    pub kind: CredentialKind,
    /// The credential field.
    pub field: CredentialField,
    /// The JSONPath as written (checked to name `field`), evaluated over the credential
    /// object by the resolver.
    pub path: String,
}

/// Why a template does not parse. The messages never repeat caller text except, where noted,
/// a short alphabetic field name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExprError {
    /// The text does not start with `{{` and end with `}}`.
    #[error("a template starts with `{{{{` and ends with `}}}}`")]
    NotDelimited,
    /// Nothing between the braces.
    #[error("empty template; expected `paymentMethod`, `type` and `json`")]
    Empty,
    /// A part name other than the three known ones.
    #[error("unknown part; expected `paymentMethod`, `type` or `json`")]
    UnknownPart,
    /// A part given twice.
    #[error("`{0}` is given more than once")]
    Duplicate(&'static str),
    /// A part missing.
    #[error("missing `{0}`")]
    Missing(&'static str),
    /// A part name not followed by `:`.
    #[error("expected `:` after `{0}`")]
    ExpectedColon(&'static str),
    /// A part with no value after the `:`.
    #[error("missing value for `{0}`")]
    MissingValue(&'static str),
    /// A quote that is never closed.
    #[error("unterminated quote in `{0}`")]
    UnterminatedQuote(&'static str),
    /// Something other than `|` or `}}` after a value.
    #[error("expected `|` or `}}}}` after `{0}`")]
    ExpectedSeparator(&'static str),
    /// The payment method id is not `[A-Za-z0-9_-]{1,128}`.
    #[error("invalid payment method id")]
    InvalidPaymentMethod,
    /// The type is not one of the three credential types.
    #[error("unknown type; expected 'virtualCard', 'networkToken' or 'pan'")]
    UnknownType,
    /// The JSON path has a shape other than `$.<field>`, `$.card.<field>`, `$.token.<field>`.
    #[error("unsupported json path; expected '$.<field>', '$.card.<field>' or '$.token.<field>'")]
    UnsupportedPath,
    /// `$.token.` with a type other than `networkToken`.
    #[error("'$.token.' paths are only for type 'networkToken'")]
    TokenPathForCard,
    /// A field the credential type does not have. Carries the field name when it is short and
    /// alphabetic.
    #[error("{}", unknown_field_message(.field.as_deref(), *.kind))]
    UnknownField {
        /// The field as written, if safe to repeat.
        field: Option<String>,
        /// The credential type of the template.
        kind: CredentialKind,
    },
}

fn unknown_field_message(field: Option<&str>, kind: CredentialKind) -> String {
    let expected = match kind {
        CredentialKind::NetworkToken => "number, expirationMonth, expirationYear or cryptogram",
        CredentialKind::VirtualCard | CredentialKind::Pan => {
            "number, expirationMonth, expirationYear or cvc"
        }
    };
    match field {
        Some(name) => format!("unknown field `{name}` for type '{kind}'; expected {expected}"),
        None => format!("unknown field for type '{kind}'; expected {expected}"),
    }
}

/// The three part names, in their canonical order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    PaymentMethod,
    Type,
    Json,
}

impl Part {
    fn name(self) -> &'static str {
        match self {
            Part::PaymentMethod => "paymentMethod",
            Part::Type => "type",
            Part::Json => "json",
        }
    }

    fn from_name(s: &[u8]) -> Option<Self> {
        match s {
            b"paymentMethod" => Some(Part::PaymentMethod),
            b"type" => Some(Part::Type),
            b"json" => Some(Part::Json),
            _ => None,
        }
    }
}

/// Parses one template, `{{` to `}}` inclusive, already JSON-unescaped.
pub fn parse(text: &str) -> Result<TemplateRef, ExprError> {
    let (payment_method, kind, field, path) = parse_parts(text)?;
    Ok(TemplateRef {
        payment_method: payment_method.to_owned(),
        kind,
        field,
        path: path.to_owned(),
    })
}

/// The payment method id, type, field and JSON path of a template.
///
/// Works on the bytes with index loops and byte tables (every template of every body is
/// parsed); values are cut from `text` at ASCII bytes only, so always on char boundaries.
fn parse_parts(text: &str) -> Result<(&str, CredentialKind, CredentialField, &str), ExprError> {
    let inner = text
        .strip_prefix("{{")
        .and_then(|t| t.strip_suffix("}}"))
        .ok_or(ExprError::NotDelimited)?;
    let bytes = inner.as_bytes();
    let mut at = skip(bytes, 0, &WS);
    if at == bytes.len() {
        return Err(ExprError::Empty);
    }

    let mut values: [Option<&str>; 3] = [None, None, None];
    loop {
        let name_end = skip(bytes, at, &NAME);
        let part = Part::from_name(bytes.get(at..name_end).unwrap_or_default())
            .ok_or(ExprError::UnknownPart)?;
        at = skip(bytes, name_end, &WS);
        if bytes.get(at) != Some(&b':') {
            return Err(ExprError::ExpectedColon(part.name()));
        }
        at = skip(bytes, at + 1, &WS);
        let (value, value_end) = value(inner, at, part)?;
        let slot = &mut values[part as usize];
        if slot.is_some() {
            return Err(ExprError::Duplicate(part.name()));
        }
        *slot = Some(value);
        at = skip(bytes, value_end, &WS);
        if at == bytes.len() {
            break;
        }
        if bytes.get(at) != Some(&b'|') {
            return Err(ExprError::ExpectedSeparator(part.name()));
        }
        at = skip(bytes, at + 1, &WS);
    }

    let [payment_method, kind, json] = values;
    let payment_method = payment_method.ok_or(ExprError::Missing("paymentMethod"))?;
    let kind = kind.ok_or(ExprError::Missing("type"))?;
    let json = json.ok_or(ExprError::Missing("json"))?;

    if !valid_id(payment_method) {
        return Err(ExprError::InvalidPaymentMethod);
    }
    let kind = CredentialKind::from_template(kind).ok_or(ExprError::UnknownType)?;
    let field = parse_path(json, kind)?;
    Ok((payment_method, kind, field, json))
}

/// The value starting at `at` of `inner`, and where it ends (past a closing quote). A quoted
/// value ends at the first matching quote outside square brackets (`'$['number']'`); a bare
/// one at whitespace or `|`.
fn value(inner: &str, at: usize, part: Part) -> Result<(&str, usize), ExprError> {
    let bytes = inner.as_bytes();
    match bytes.get(at) {
        Some(&quote @ (b'\'' | b'"')) => {
            let start = at + 1;
            let mut depth = 0usize;
            let mut end = start;
            loop {
                match bytes.get(end) {
                    None => return Err(ExprError::UnterminatedQuote(part.name())),
                    Some(&b) if b == quote && depth == 0 => break,
                    Some(b'[') => depth += 1,
                    Some(b']') => depth = depth.saturating_sub(1),
                    Some(_) => {}
                }
                end += 1;
            }
            Ok((inner.get(start..end).unwrap_or_default(), end + 1))
        }
        _ => {
            let end = skip(bytes, at, &BARE);
            if end == at {
                return Err(ExprError::MissingValue(part.name()));
            }
            Ok((inner.get(at..end).unwrap_or_default(), end))
        }
    }
}

/// Where the run of bytes in `class` that starts at `at` ends.
fn skip(bytes: &[u8], mut at: usize, class: &[bool; 256]) -> usize {
    while let Some(&b) = bytes.get(at) {
        if !class[usize::from(b)] {
            break;
        }
        at += 1;
    }
    at
}

/// Whitespace around tokens.
const WS: [bool; 256] = byte_class!(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r'));
/// The bytes of a part name and of a path segment.
const NAME: [bool; 256] = byte_class!(|b| b.is_ascii_alphanumeric() || b == b'_');
/// The bytes of a bare value: all but whitespace and `|`.
const BARE: [bool; 256] = byte_class!(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r' | b'|'));
/// The bytes of a payment method id: ASCII letters, digits, `_` and `-`.
const ID_BYTE: [bool; 256] = byte_class!(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');

fn valid_id(id: &str) -> bool {
    (1..=MAX_ID_LEN).contains(&id.len()) && id.bytes().all(|b| ID_BYTE[usize::from(b)])
}

/// `$.f`, `$.card.f`, `$.token.f`, with any segment in bracket form.
fn parse_path(path: &str, kind: CredentialKind) -> Result<CredentialField, ExprError> {
    let rest = path.strip_prefix('$').ok_or(ExprError::UnsupportedPath)?;
    let bytes = rest.as_bytes();
    let mut segments: [&str; 2] = ["", ""];
    let mut count = 0;
    let mut at = 0;
    while at < bytes.len() {
        // The segment's bounds, and where the next one starts.
        let (start, end, next) = match bytes.get(at) {
            Some(b'.') => {
                let end = skip(bytes, at + 1, &NAME);
                (at + 1, end, end)
            }
            Some(b'[') => {
                let quote = match bytes.get(at + 1) {
                    Some(&q @ (b'\'' | b'"')) => q,
                    _ => return Err(ExprError::UnsupportedPath),
                };
                let start = at + 2;
                let end = bytes
                    .get(start..)
                    .and_then(|b| memchr::memchr(quote, b))
                    .map(|n| start + n)
                    .ok_or(ExprError::UnsupportedPath)?;
                if bytes.get(end + 1) != Some(&b']') {
                    return Err(ExprError::UnsupportedPath);
                }
                (start, end, end + 2)
            }
            _ => return Err(ExprError::UnsupportedPath),
        };
        let segment = rest.get(start..end).unwrap_or_default();
        if segment.is_empty() {
            return Err(ExprError::UnsupportedPath);
        }
        let slot = segments.get_mut(count).ok_or(ExprError::UnsupportedPath)?;
        *slot = segment;
        count += 1;
        at = next;
    }
    let name = match (count, segments) {
        (1, [field, _]) => field,
        (2, ["card", field]) => field,
        (2, ["token", field]) if kind == CredentialKind::NetworkToken => field,
        (2, ["token", _]) => return Err(ExprError::TokenPathForCard),
        _ => return Err(ExprError::UnsupportedPath),
    };
    CredentialField::from_path(name)
        .filter(|f| kind.has_field(*f))
        .ok_or_else(|| ExprError::UnknownField {
            field: echoable(name).then(|| name.to_owned()),
            kind,
        })
}

/// A field name may be repeated in an error when it cannot be a card value.
fn echoable(name: &str) -> bool {
    name.len() <= MAX_ECHOED_FIELD_LEN && name.bytes().all(|b| b.is_ascii_alphabetic())
}

#[cfg(test)]
mod tests {
    use super::*;
    use CredentialField::*;
    use CredentialKind::*;

    fn ok(
        pm: &str,
        kind: CredentialKind,
        field: CredentialField,
    ) -> Result<TemplateRef, ExprError> {
        Ok(TemplateRef {
            payment_method: pm.to_owned(),
            kind,
            field,
            path: String::new(),
        })
    }

    #[test]
    fn table() {
        let long_id = "a".repeat(MAX_ID_LEN);
        let too_long_id = "a".repeat(MAX_ID_LEN + 1);
        let with_long = format!("{{{{paymentMethod:{long_id}|type:'pan'|json:'$.cvc'}}}}");
        let with_too_long = format!("{{{{paymentMethod:{too_long_id}|type:'pan'|json:'$.cvc'}}}}");
        let cases: Vec<(&str, Result<TemplateRef, ExprError>)> = vec![
            // The spec's form.
            (
                "{{ paymentMethod: pm_123 | type: 'pan' | json: '$.number' }}",
                ok("pm_123", Pan, Number),
            ),
            (
                "{{ paymentMethod: pm_123 | type: 'virtualCard' | json: '$.card.cvc' }}",
                ok("pm_123", VirtualCard, Cvc),
            ),
            (
                "{{ paymentMethod: pm-1 | type: 'networkToken' | json: '$.token.cryptogram' }}",
                ok("pm-1", NetworkToken, Cryptogram),
            ),
            // `$.card.` is accepted for network tokens too.
            (
                "{{paymentMethod:x|type:'networkToken'|json:'$.card.expirationMonth'}}",
                ok("x", NetworkToken, ExpirationMonth),
            ),
            // Whitespace of every kind, or none.
            (
                "{{\n\tpaymentMethod\t:\r\n pm_1 \n|\ttype : \"pan\"\n| json :\n'$.expirationYear'\n}}",
                ok("pm_1", Pan, ExpirationYear),
            ),
            (
                "{{paymentMethod:pm_1|type:'pan'|json:'$.number'}}",
                ok("pm_1", Pan, Number),
            ),
            // Any order.
            (
                "{{ json: '$.cvc' | type: 'pan' | paymentMethod: pm_9 }}",
                ok("pm_9", Pan, Cvc),
            ),
            // Bracket paths, with either quote, nested in the other.
            (
                "{{ paymentMethod: p | type: 'pan' | json: \"$['number']\" }}",
                ok("p", Pan, Number),
            ),
            (
                "{{ paymentMethod: p | type: 'pan' | json: '$['card'][\"cvc\"]' }}",
                ok("p", Pan, Cvc),
            ),
            (
                "{{ paymentMethod: p | type: 'networkToken' | json: '$.token['number']' }}",
                ok("p", NetworkToken, Number),
            ),
            // Quoted id, bare type and path, API spellings of the types.
            (
                "{{ paymentMethod: 'pm_1' | type: pan | json: $.number }}",
                ok("pm_1", Pan, Number),
            ),
            (
                "{{ paymentMethod: pm_1 | type: 'virtual-card' | json: '$.number' }}",
                ok("pm_1", VirtualCard, Number),
            ),
            (
                "{{ paymentMethod: pm_1 | type: 'network-token' | json: '$.cryptogram' }}",
                ok("pm_1", NetworkToken, Cryptogram),
            ),
            (with_long.as_str(), ok(&long_id, Pan, Cvc)),
            // Errors.
            ("paymentMethod: p | type: 'pan' | json: '$.number'", Err(ExprError::NotDelimited)),
            ("{{ paymentMethod: p | type: 'pan' | json: '$.number' }", Err(ExprError::NotDelimited)),
            ("{{ }}", Err(ExprError::Empty)),
            ("{{}}", Err(ExprError::Empty)),
            ("{{ paymentMethod: p | type: 'pan' }}", Err(ExprError::Missing("json"))),
            ("{{ type: 'pan' | json: '$.number' }}", Err(ExprError::Missing("paymentMethod"))),
            ("{{ paymentMethod: p | json: '$.number' }}", Err(ExprError::Missing("type"))),
            (
                "{{ paymentMethod: p | type: 'pan' | type: 'pan' | json: '$.number' }}",
                Err(ExprError::Duplicate("type")),
            ),
            (
                "{{ paymentmethod: p | type: 'pan' | json: '$.number' }}",
                Err(ExprError::UnknownPart),
            ),
            ("{{ 4111111111111111 }}", Err(ExprError::UnknownPart)),
            (
                "{{ paymentMethod p | type: 'pan' | json: '$.number' }}",
                Err(ExprError::ExpectedColon("paymentMethod")),
            ),
            (
                "{{ paymentMethod: | type: 'pan' | json: '$.number' }}",
                Err(ExprError::MissingValue("paymentMethod")),
            ),
            (
                "{{ paymentMethod: p | type: 'pan' | json: '$.number }}",
                Err(ExprError::UnterminatedQuote("json")),
            ),
            (
                "{{ paymentMethod: p | type: 'pan | json: '$.number' }}",
                Err(ExprError::ExpectedSeparator("type")),
            ),
            (
                "{{ paymentMethod: p | type: 'pan' | json: '$['number' }}",
                Err(ExprError::UnterminatedQuote("json")),
            ),
            (
                "{{ paymentMethod: p | type: 'pan' json: '$.number' }}",
                Err(ExprError::ExpectedSeparator("type")),
            ),
            (
                "{{ paymentMethod: p | type: 'pan' | json: '$.number' | }}",
                Err(ExprError::UnknownPart),
            ),
            (
                "{{ paymentMethod: pm.1 | type: 'pan' | json: '$.number' }}",
                Err(ExprError::InvalidPaymentMethod),
            ),
            (with_too_long.as_str(), Err(ExprError::InvalidPaymentMethod)),
            (
                "{{ paymentMethod: 'pm 1' | type: 'pan' | json: '$.number' }}",
                Err(ExprError::InvalidPaymentMethod),
            ),
            (
                "{{ paymentMethod: p | type: 'PAN' | json: '$.number' }}",
                Err(ExprError::UnknownType),
            ),
            (
                "{{ paymentMethod: p | type: 'card' | json: '$.number' }}",
                Err(ExprError::UnknownType),
            ),
            (
                "{{ paymentMethod: p | type: 'pan' | json: 'number' }}",
                Err(ExprError::UnsupportedPath),
            ),
            (
                "{{ paymentMethod: p | type: 'pan' | json: '$' }}",
                Err(ExprError::UnsupportedPath),
            ),
            (
                "{{ paymentMethod: p | type: 'pan' | json: '$.card.details.number' }}",
                Err(ExprError::UnsupportedPath),
            ),
            (
                "{{ paymentMethod: p | type: 'pan' | json: '$.foo.number' }}",
                Err(ExprError::UnsupportedPath),
            ),
            (
                "{{ paymentMethod: p | type: 'pan' | json: '$[number]' }}",
                Err(ExprError::UnsupportedPath),
            ),
            (
                "{{ paymentMethod: p | type: 'pan' | json: '$..number' }}",
                Err(ExprError::UnsupportedPath),
            ),
            (
                "{{ paymentMethod: p | type: 'pan' | json: '$.token.number' }}",
                Err(ExprError::TokenPathForCard),
            ),
            (
                "{{ paymentMethod: p | type: 'pan' | json: '$.cryptogram' }}",
                Err(ExprError::UnknownField {
                    field: Some("cryptogram".into()),
                    kind: Pan,
                }),
            ),
            (
                "{{ paymentMethod: p | type: 'networkToken' | json: '$.token.cvc' }}",
                Err(ExprError::UnknownField {
                    field: Some("cvc".into()),
                    kind: NetworkToken,
                }),
            ),
            (
                "{{ paymentMethod: p | type: 'pan' | json: '$.Number' }}",
                Err(ExprError::UnknownField {
                    field: Some("Number".into()),
                    kind: Pan,
                }),
            ),
            // Non-ASCII bytes: values are cut next to ASCII bytes only.
            (
                "{{ paymentMethod: pé | type: 'pan' | json: '$.number' }}",
                Err(ExprError::InvalidPaymentMethod),
            ),
            (
                "{{ paymentMethod: p | type: 'pän' | json: '$.number' }}",
                Err(ExprError::UnknownType),
            ),
            (
                "{{ paymentMethod: p | type: pan | json: $.number é }}",
                Err(ExprError::ExpectedSeparator("json")),
            ),
            (
                "{{ paymentMethod: p | type: 'pan' | json: '$['numbé']' }}",
                Err(ExprError::UnknownField {
                    field: None,
                    kind: Pan,
                }),
            ),
            // A field that could be a card value is not repeated.
            (
                "{{ paymentMethod: p | type: 'pan' | json: '$.4111111111111111' }}",
                Err(ExprError::UnknownField {
                    field: None,
                    kind: Pan,
                }),
            ),
        ];
        assert!(cases.len() >= 25);
        for (text, want) in cases {
            let parsed = parse(text);
            let got = parsed.map(|t| TemplateRef {
                path: String::new(),
                ..t
            });
            assert_eq!(got, want, "{text}");
        }
    }

    #[test]
    fn messages_repeat_no_card_data() {
        let secret = "4111111111111111";
        let texts = [
            format!("{{{{ {secret} }}}}"),
            format!("{{{{ paymentMethod: {secret}x! | type: 'pan' | json: '$.number' }}}}"),
            format!("{{{{ paymentMethod: p | type: '{secret}' | json: '$.number' }}}}"),
            format!("{{{{ paymentMethod: p | type: 'pan' | json: '$.{secret}' }}}}"),
            format!("{{{{ paymentMethod: p | type: 'pan' | json: '$.card.{secret}' }}}}"),
            format!("{{{{ paymentMethod: p | type: 'pan' | json: '{secret}' }}}}"),
            format!("{{{{ paymentMethod: p | type: 'pan' | json: '$.number' | x: {secret} }}}}"),
        ];
        for text in texts {
            let err = parse(&text).err();
            let message = err.map(|e| e.to_string()).unwrap_or_default();
            assert!(!message.is_empty(), "{text} should fail");
            assert!(!message.contains(secret), "{message}");
            assert!(!message.contains("4111"), "{message}");
        }
    }

    #[test]
    fn message_texts() {
        assert_eq!(
            ExprError::NotDelimited.to_string(),
            "a template starts with `{{` and ends with `}}`"
        );
        assert_eq!(
            ExprError::ExpectedSeparator("type").to_string(),
            "expected `|` or `}}` after `type`"
        );
        let unknown = ExprError::UnknownField {
            field: Some("cvc".into()),
            kind: NetworkToken,
        };
        assert_eq!(
            unknown.to_string(),
            "unknown field `cvc` for type 'networkToken'; expected number, expirationMonth, expirationYear or cryptogram"
        );
    }

    #[test]
    fn fields_per_kind() {
        for kind in [VirtualCard, NetworkToken, Pan] {
            for field in [Number, ExpirationMonth, ExpirationYear, Cvc, Cryptogram] {
                let text =
                    format!("{{{{ paymentMethod: p | type: '{kind}' | json: '$.{field}' }}}}");
                let got = parse(&text);
                assert_eq!(got.is_ok(), kind.has_field(field), "{text}");
            }
        }
    }
}
