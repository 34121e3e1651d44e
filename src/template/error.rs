//! What a template that cannot be substituted answers, in every format: the [`TemplateError`]
//! (the proxy's 400 `invalidTemplate`), the messages that every format gives alike, and
//! [`Failed`], a scanner's first error, kept.

/// A template that cannot be substituted: the proxy answers 400 `invalidTemplate`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid template at {field}: {message}")]
pub struct TemplateError {
    /// The body field holding the template, as its format names it: a JSON path
    /// (`card.number`, `items[0].pan`, `["weird key"]`, `$` for a top-level string), a form
    /// key (`card[number]`) or an XML element path (`/Envelope/Body/card/number`,
    /// `/a/b/@name` for an attribute, `/` outside the root element).
    pub field: String,
    /// The template as written in the body (escapes not decoded), as far as it was read.
    pub template: String,
    /// What is wrong, free of card data.
    pub message: String,
}

impl TemplateError {
    /// The error at `field`, with the template as far as it was read (`template`, as written).
    pub(super) fn at(field: String, template: &[u8], message: &str) -> Self {
        TemplateError {
            field,
            template: String::from_utf8_lossy(template).into_owned(),
            message: message.to_owned(),
        }
    }
}

/// What a template that its string, value or section ends inside (or the body) answers.
pub(super) const UNTERMINATED: &str = "unterminated template";
/// What a template longer than [`MAX_TEMPLATE_LEN`](super::limits::MAX_TEMPLATE_LEN) answers.
pub(super) const TOO_LONG: &str = "template too long";
/// What a template whose text, decoded, is not UTF-8 answers.
pub(super) const NOT_UTF8: &str = "template is not valid UTF-8";

/// A scanner's first error, kept: every call after it returns it again.
#[derive(Debug, Clone, Default)]
pub(super) struct Failed(Option<TemplateError>);

impl Failed {
    /// The kept error, if there is one.
    #[inline]
    pub(super) fn check(&self) -> Result<(), TemplateError> {
        match &self.0 {
            Some(err) => Err(err.clone()),
            None => Ok(()),
        }
    }

    /// Keeps `result`'s error, and passes `result` on.
    #[inline]
    pub(super) fn keep<T>(&mut self, result: Result<T, TemplateError>) -> Result<T, TemplateError> {
        if let Err(err) = &result {
            self.0 = Some(err.clone());
        }
        result
    }

    pub(super) fn clear(&mut self) {
        self.0 = None;
    }
}
