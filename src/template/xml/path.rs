//! The element path that an XML error names (`/Envelope/Body/card/number`, `/a/b/@name`),
//! bounded: the open elements' names as written, kept as the markup is read, and the
//! attribute whose value is being read; turned into the path of local names only when an
//! error needs it.

use crate::template::limits::{MAX_KEY_LEN, MAX_PATH_DEPTH};

/// The element path for errors, bounded: the open elements' names as written, kept as they
/// are read and turned into the path of local names only when an error needs it.
#[derive(Debug, Clone, Default)]
pub(super) struct Path {
    /// The names of the first [`MAX_PATH_DEPTH`] open elements one after another (each at
    /// most [`MAX_KEY_LEN`] bytes), then the start tag's name being read.
    names: Vec<u8>,
    /// Where each kept level's name ends in `names`, and whether it was cut.
    ends: Vec<(usize, bool)>,
    /// Open elements, kept or not.
    pub(super) depth: usize,
    /// The name being read was cut.
    cut: bool,
    /// The attribute whose value is being read (or was last), at most [`MAX_KEY_LEN`] bytes.
    attr: Vec<u8>,
    /// ... and it was longer.
    attr_cut: bool,
    /// The next name byte in a tag starts a new attribute name.
    attr_done: bool,
}

impl Path {
    /// Where the name being read starts.
    #[inline]
    fn base(&self) -> usize {
        self.ends.last().map_or(0, |&(end, _)| end)
    }

    /// A start tag's name begins.
    #[inline]
    pub(super) fn begin(&mut self) {
        self.names.truncate(self.base());
        self.cut = false;
    }

    /// Adds `run` to the name being read (if its level is kept).
    #[inline]
    pub(super) fn name_bytes(&mut self, run: &[u8]) {
        if self.ends.len() >= MAX_PATH_DEPTH {
            return;
        }
        let room = MAX_KEY_LEN.saturating_sub(self.names.len() - self.base());
        self.names
            .extend_from_slice(run.get(..room.min(run.len())).unwrap_or_default());
        self.cut |= run.len() > room;
    }

    /// A start tag read whole: [`Path::begin`], [`Path::name_bytes`] and [`Path::push`] at
    /// once.
    #[inline]
    pub(super) fn open(&mut self, name: &[u8]) {
        self.depth += 1;
        self.cut = false;
        if self.ends.len() < MAX_PATH_DEPTH {
            self.names.truncate(self.base());
            let kept = name.get(..MAX_KEY_LEN).unwrap_or(name);
            self.names.extend_from_slice(kept);
            self.ends.push((self.names.len(), kept.len() < name.len()));
        }
    }

    /// The name being read is complete: its element is open.
    #[inline]
    fn push(&mut self) {
        self.depth += 1;
        if self.ends.len() < MAX_PATH_DEPTH {
            self.ends.push((self.names.len(), self.cut));
        }
    }

    #[inline]
    pub(super) fn pop(&mut self) {
        if self.depth == 0 {
            return;
        }
        if self.depth <= self.ends.len() {
            self.ends.pop();
            self.names.truncate(self.base());
        }
        self.depth -= 1;
    }

    pub(super) fn clear(&mut self) {
        self.names.clear();
        self.ends.clear();
        self.depth = 0;
        self.cut = false;
        self.attr.clear();
        self.attr_cut = false;
        self.attr_done = false;
    }

    /// A start tag's name is complete: its element is open, and (`tag`) its attributes follow.
    /// Each tag's attribute names start afresh, so the one an error names never depends on
    /// the tags before it (which the skim reads without following names).
    #[inline]
    pub(super) fn element_opens(&mut self, tag: bool) {
        self.push();
        if tag {
            self.attr.clear();
            self.attr_cut = false;
            self.attr_done = false;
        }
    }

    /// Adds `run` to the attribute name being read, or starts the next one with it.
    pub(super) fn attr_bytes(&mut self, run: &[u8]) {
        if std::mem::take(&mut self.attr_done) {
            self.attr.clear();
            self.attr_cut = false;
        }
        let room = MAX_KEY_LEN.saturating_sub(self.attr.len());
        self.attr
            .extend_from_slice(run.get(..room.min(run.len())).unwrap_or_default());
        self.attr_cut |= run.len() > room;
    }

    /// The attribute's value opens: the next name byte in the tag starts another attribute.
    #[inline]
    pub(super) fn attr_value(&mut self) {
        self.attr_done = true;
    }

    /// The field an error names: `/a/b/c`, each open element's local name, `/…` for the
    /// levels not kept, `/a/b/@name` in an attribute value (`in_value`), `/` outside the root.
    pub(super) fn field(&self, in_value: bool) -> String {
        let mut field = self.render();
        if in_value {
            field.push_str("/@");
            field.push_str(&String::from_utf8_lossy(&self.attr));
            if self.attr_cut {
                field.push('…');
            }
        }
        if field.is_empty() {
            field.push('/');
        }
        field
    }

    /// `/a/b/c`: each open element's local name, `/…` for the levels not kept.
    fn render(&self) -> String {
        let mut field = String::new();
        let mut start = 0;
        for &(end, cut) in &self.ends {
            let name = self.names.get(start..end).unwrap_or_default();
            let local = match name.iter().rposition(|&b| b == b':') {
                Some(colon) => name.get(colon + 1..).unwrap_or_default(),
                None => name,
            };
            field.push('/');
            field.push_str(&String::from_utf8_lossy(local));
            if cut {
                field.push('…');
            }
            start = end;
        }
        if self.depth > self.ends.len() {
            field.push_str("/…");
        }
        field
    }
}
