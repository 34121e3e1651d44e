//! What a template names, looked up: the [`Resolver`] that the proxy supplies to every
//! format's scanner, and the [`ResolveError`] when the template names nothing usable.

use super::expr::TemplateRef;
use crate::secret::Revealed;

/// Looks up the value of one template.
pub trait Resolver {
    /// The credential value for `t`, or why there is none. The message becomes the
    /// [`TemplateError::message`](super::error::TemplateError::message) and so the
    /// client-facing error: it must not contain card data.
    fn resolve(&mut self, t: &TemplateRef) -> Result<Revealed, ResolveError>;
}

impl<F> Resolver for F
where
    F: FnMut(&TemplateRef) -> Result<Revealed, ResolveError>,
{
    fn resolve(&mut self, t: &TemplateRef) -> Result<Revealed, ResolveError> {
        self(t)
    }
}

/// A template that names no usable credential, e.g. "unknown payment method".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ResolveError {
    /// Client-facing reason, free of card data.
    pub message: String,
}

impl ResolveError {
    /// A resolve error with this message.
    pub fn new(message: impl Into<String>) -> Self {
        ResolveError {
            message: message.into(),
        }
    }
}
