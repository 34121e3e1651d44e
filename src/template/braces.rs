//! The `{{ … }}` recogniser, one for every format. A scanner feeds it the units of the places
//! where templates go (a JSON string value, a form value, XML text, an attribute value or a
//! CDATA section), a unit being a byte or an escape that stands for one (a form's `%7B`), and
//! it says what each one does ([`Braces::outside`], [`Braces::inside`]):
//!
//! - A `{` is held back: with the next unit, if that is a `{` too, it opens a template.
//! - A third brace right after `{{` is text: `{{{ … }}` is `{` and a template.
//! - A template closes at its first `}}`.
//!
//! What a unit is, which units count (an escaped `}` does not close a JSON template), where
//! a template must end and which bytes are held or written are the format's. Beside it, the
//! search for `{{` in raw bytes ([`find_open`]), by which a scanner, or a body of another
//! format, learns that no template starts in a chunk.

use memchr::memmem;
use once_cell::sync::Lazy;

/// The searcher for `{{`, built once: `memmem::find` builds one at every call, which costs
/// more than searching a small body.
static OPEN: Lazy<memmem::Finder<'static>> = Lazy::new(|| memmem::Finder::new(b"{{"));

/// Where the first `{{` in `bytes` starts.
#[inline]
pub(super) fn find_open(bytes: &[u8]) -> Option<usize> {
    OPEN.find(bytes)
}

/// Where a scanner is in recognising `{{` and `}}`; outside a template only [`Braces::brace`]
/// may be set.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Braces {
    /// Outside a template: the last unit was a `{`, held back.
    pub(super) brace: bool,
    /// In a template that holds only its `{{` so far.
    opened: bool,
    /// In a template: the last unit was a `}` that counts.
    close: bool,
}

/// What a unit outside a template does ([`Braces::outside`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Outside {
    /// Text, with nothing held before it.
    Text,
    /// It is a `{`: hold it back.
    Holds,
    /// The `{` held back is text, and so is this unit: write both.
    Releases,
    /// It is the second brace of `{{`: a template opens at the one held back.
    Opens,
}

/// What a unit inside a template does ([`Braces::inside`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Inside {
    /// A third brace right after `{{`: the first brace is text, and the template starts at
    /// the second (the template holds `{{` still).
    Third,
    /// It adds to the template.
    Adds,
    /// It adds to the template and is the second brace of `}}`: the template is complete.
    Closes,
}

impl Braces {
    /// A unit outside a template; `brace` when it is a `{`.
    #[inline]
    pub(super) fn outside(&mut self, brace: bool) -> Outside {
        match (std::mem::take(&mut self.brace), brace) {
            (true, true) => {
                self.opened = true;
                self.close = false;
                Outside::Opens
            }
            (true, false) => Outside::Releases,
            (false, true) => {
                self.brace = true;
                Outside::Holds
            }
            (false, false) => Outside::Text,
        }
    }

    /// A unit inside a template; `brace` when it is a `{` and `close` when it is a `}`, each
    /// as far as it counts in the format (not escaped).
    #[inline]
    pub(super) fn inside(&mut self, brace: bool, close: bool) -> Inside {
        if std::mem::take(&mut self.opened) && brace {
            self.opened = true;
            return Inside::Third;
        }
        if !close {
            self.close = false;
            Inside::Adds
        } else if std::mem::take(&mut self.close) {
            Inside::Closes
        } else {
            self.close = true;
            Inside::Adds
        }
    }

    /// A `{` outside a template, when none is held: [`Braces::outside`] with a `{`, for a
    /// scanner that has just let the held one go (or never held one) and skipped to this `{`.
    #[inline]
    pub(super) fn hold(&mut self) {
        self.brace = true;
    }

    /// Units inside a template, after at least one other, that are neither `{` nor `}`:
    /// [`Braces::inside`] with each, for a scanner that takes such a run at once.
    #[inline]
    pub(super) fn plain(&mut self) {
        self.opened = false;
        self.close = false;
    }

    /// In a template that holds only its `{{`, where a third brace would be text.
    #[inline]
    pub(super) fn opened(&self) -> bool {
        self.opened
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    /// Runs `text` through the recogniser a byte a unit; returns the templates it found and
    /// the text around them.
    fn recognise(text: &str) -> (Vec<String>, String) {
        let (mut braces, mut inside) = (Braces::default(), false);
        let (mut found, mut held, mut out) = (Vec::new(), String::new(), String::new());
        for c in text.chars() {
            if inside {
                match braces.inside(c == '{', c == '}') {
                    Inside::Third => out.push('{'),
                    Inside::Adds => held.push(c),
                    Inside::Closes => {
                        held.push(c);
                        found.push(std::mem::take(&mut held));
                        inside = false;
                    }
                }
                continue;
            }
            match braces.outside(c == '{') {
                Outside::Text => out.push(c),
                Outside::Holds => {}
                Outside::Releases => {
                    out.push('{');
                    out.push(c);
                }
                Outside::Opens => {
                    held.push_str("{{");
                    inside = true;
                }
            }
        }
        if braces.brace {
            out.push('{');
        }
        (found, out)
    }

    #[test]
    fn recognises_templates() {
        for (text, found, out) in [
            ("a {{x}} b", &["{{x}}"][..], "a  b"),
            ("{{{x}}}", &["{{x}}"], "{}"),
            ("{{{{x}}", &["{{x}}"], "{{"),
            ("{ {x} }} {", &[], "{ {x} }} {"),
            ("{{a}b}}{{}}", &["{{a}b}}", "{{}}"], ""),
        ] {
            assert_eq!(
                recognise(text),
                (
                    found.iter().map(|s| s.to_string()).collect(),
                    out.to_string()
                ),
                "{text}"
            );
        }
    }
}
