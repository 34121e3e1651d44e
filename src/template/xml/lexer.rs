//! The XML byte lexer: the state machine that reads, a byte at a time, what the skim (`skim`)
//! stops at. In markup it follows tags, names, declarations, comments and processing
//! instructions, and refuses a `{{` there; in text, attribute values and CDATA sections it
//! feeds the `{{ … }}` recogniser (`template::braces`), holds a template back and has it
//! substituted at `}}` (`template::held`), escaped for its place (`escape`).

use super::escape::{XmlAttr, XmlCdata, XmlText};
use super::{
    State, XmlScanner, XML_BRACE_REFERENCE, XML_DECLARATION, XML_IN_COMMENT, XML_IN_MARKUP,
    XML_NUL, XML_OUTSIDE,
};
use crate::template::braces::{Inside, Outside};
use crate::template::error::{TemplateError, TOO_LONG, UNTERMINATED};
use crate::template::resolve::Resolver;

impl XmlScanner {
    /// One byte.
    pub(super) fn byte(
        &mut self,
        b: u8,
        out: &mut Vec<u8>,
        r: &mut dyn Resolver,
    ) -> Result<(), TemplateError> {
        match self.state {
            State::Text | State::Value { .. } | State::Cdata { .. } => self.content(b, out, r),
            _ => {
                if b == 0 {
                    return Err(self.error(XML_NUL));
                }
                if b == b'{' && std::mem::replace(&mut self.markup_brace, true) {
                    let message = match self.state {
                        State::Comment { .. } | State::Pi { .. } => XML_IN_COMMENT,
                        _ => XML_IN_MARKUP,
                    };
                    return Err(self.error(message));
                }
                if b != b'{' {
                    self.markup_brace = false;
                }
                out.push(b);
                self.markup(b)
            }
        }
    }

    /// A byte of markup: tags, declarations, comments, processing instructions.
    fn markup(&mut self, b: u8) -> Result<(), TemplateError> {
        self.state = match self.state {
            State::Open => match b {
                b'/' => State::End,
                b'!' => State::Bang { cdata: false, n: 0 },
                b'?' => State::Pi { question: false },
                _ => {
                    self.path.begin();
                    self.path.name_bytes(&[b]);
                    State::Name
                }
            },
            State::Name => match b {
                b'>' => {
                    self.path.element_opens(false);
                    State::Text
                }
                b'/' => {
                    self.path.element_opens(true);
                    State::Tag { slash: true }
                }
                b' ' | b'\t' | b'\n' | b'\r' => {
                    self.path.element_opens(true);
                    State::Tag { slash: false }
                }
                _ => {
                    self.path.name_bytes(&[b]);
                    State::Name
                }
            },
            State::End => {
                if b == b'>' {
                    self.path.pop();
                    State::Text
                } else {
                    State::End
                }
            }
            State::Tag { slash } => match b {
                b'>' => {
                    if slash {
                        self.path.pop();
                    }
                    State::Text
                }
                b'"' | b'\'' => {
                    self.path.attr_value();
                    State::Value { quote: b }
                }
                b'/' => State::Tag { slash: true },
                b' ' | b'\t' | b'\n' | b'\r' | b'=' => State::Tag { slash: false },
                _ => {
                    self.path.attr_bytes(&[b]);
                    State::Tag { slash: false }
                }
            },
            State::Bang { cdata, n } => {
                let (cdata, want): (bool, &[u8]) = match (n, b) {
                    (0, b'[') => (true, b"[CDATA["),
                    (0, _) => (false, b"--"),
                    _ if cdata => (true, b"[CDATA["),
                    _ => (false, b"--"),
                };
                let n = usize::from(n);
                if want.get(n) != Some(&b) {
                    return Err(self.error(XML_DECLARATION));
                }
                if n + 1 == want.len() {
                    if cdata {
                        State::Cdata { brackets: 0 }
                    } else {
                        State::Comment { dashes: 0 }
                    }
                } else {
                    State::Bang {
                        cdata,
                        n: u8::try_from(n + 1).unwrap_or(u8::MAX),
                    }
                }
            }
            State::Comment { dashes } => match b {
                b'>' if dashes >= 2 => State::Text,
                b'-' => State::Comment {
                    dashes: (dashes + 1).min(2),
                },
                _ => State::Comment { dashes: 0 },
            },
            State::Pi { question } => match b {
                b'>' if question => State::Text,
                _ => State::Pi {
                    question: b == b'?',
                },
            },
            other => other,
        };
        Ok(())
    }

    /// A byte of text, an attribute value or a CDATA section: where templates go.
    fn content(
        &mut self,
        b: u8,
        out: &mut Vec<u8>,
        r: &mut dyn Resolver,
    ) -> Result<(), TemplateError> {
        if let State::Cdata { brackets } = self.state {
            if b == b'>' && brackets >= 2 && !self.in_template && !self.braces.brace {
                out.push(b);
                self.state = State::Text;
                return Ok(());
            }
            let brackets = if b == b']' { (brackets + 1).min(2) } else { 0 };
            self.state = State::Cdata { brackets };
        }
        if self.in_template {
            let ends = match self.state {
                State::Text => b == b'<',
                State::Value { quote } => b == quote || b == b'<',
                State::Cdata { brackets } => b == b'>' && brackets >= 2,
                _ => false,
            };
            if ends {
                return Err(self.error(UNTERMINATED));
            }
            match self.braces.inside(b == b'{', b == b'}') {
                // A third brace: the first is text, the template starts at the second.
                Inside::Third => out.push(b'{'),
                step => {
                    if self.held.room() == 0 {
                        return Err(self.error(TOO_LONG));
                    }
                    self.held.push(b);
                    if step == Inside::Closes {
                        self.substitute(out, r)?;
                    }
                }
            }
            return Ok(());
        }
        match self.braces.outside(b == b'{') {
            Outside::Opens => {
                if self.path.depth == 0 && !matches!(self.state, State::Value { .. }) {
                    return Err(self.error(XML_OUTSIDE));
                }
                self.held.open();
                self.in_template = true;
                return Ok(());
            }
            Outside::Releases => out.push(b'{'),
            Outside::Holds | Outside::Text => {}
        }
        if !matches!(self.state, State::Cdata { .. }) {
            self.reference(b)?;
        }
        if b == b'{' {
            // Held back (`braces.brace`).
            return Ok(());
        }
        out.push(b);
        match self.state {
            State::Text if b == b'<' => {
                self.markup_brace = false;
                self.state = State::Open;
            }
            State::Value { quote } if b == quote => self.state = State::Tag { slash: false },
            _ => {}
        }
        Ok(())
    }

    /// Follows a character reference in text or a value, refusing one that stands for `{`.
    fn reference(&mut self, b: u8) -> Result<(), TemplateError> {
        match self.reference.next(b) {
            Some(reference) => self.reference = reference,
            None => return Err(self.error(XML_BRACE_REFERENCE)),
        }
        Ok(())
    }

    /// The template is complete: its value in its place, escaped for it.
    fn substitute(&mut self, out: &mut Vec<u8>, r: &mut dyn Resolver) -> Result<(), TemplateError> {
        let result = match self.state {
            State::Value { .. } => self.held.substitute::<XmlAttr>(out, r),
            State::Cdata { .. } => self.held.substitute::<XmlCdata>(out, r),
            _ => self.held.substitute::<XmlText>(out, r),
        };
        if let Err(message) = result {
            return Err(self.error(&message));
        }
        if let State::Cdata { .. } = self.state {
            self.state = State::Cdata { brackets: 0 };
        }
        self.in_template = false;
        self.substituted = true;
        self.count += 1;
        Ok(())
    }
}
