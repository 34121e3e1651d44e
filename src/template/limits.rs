//! How much a scanner holds, in every format, whatever the body: the template held back, and
//! the path of the field that an error names.

/// Longest template, `{{` to `}}` inclusive, as written in the body (escapes undecoded).
pub const MAX_TEMPLATE_LEN: usize = 512;
/// Deepest nesting whose keys, indices or element names appear in
/// [`TemplateError::field`](super::error::TemplateError::field); deeper levels show as `…`.
pub const MAX_PATH_DEPTH: usize = 128;
/// Longest key, element or attribute name kept for
/// [`TemplateError::field`](super::error::TemplateError::field); longer ones are cut and
/// shown with `…`.
pub const MAX_KEY_LEN: usize = 256;
/// Deepest nesting at which the JSON scanner tells objects and arrays apart.
pub const MAX_KIND_DEPTH: usize = 1024;
