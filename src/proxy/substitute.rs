//! Template substitution over a request body, chunk by chunk.
//!
//! The scanner is synchronous; credential lookups are `async`. The resolver answers from this
//! request's cache, and on a miss polls the lookup once: the embedded store answers at once,
//! so a chunk is normally scanned in one pass. A lookup that would wait is noted instead; the
//! scanner is then put back to its state before the chunk, the noted credentials are fetched,
//! and the chunk is scanned again. Each credential is fetched once per request.

use super::credentials::{self, Lookup};
use crate::app::App;
use crate::auth::Principal;
use crate::error::ApiError;
use crate::secret::{CardNumber, Cvc, Revealed};
use crate::template::{
    BodyScanner, CredentialKind, Format, ResolveError, Scanner, TemplateError, TemplateRef,
};
use bytes::Bytes;
use std::collections::BTreeSet;
use std::future::Future;

/// Polls a future once: its output if it is ready without waiting. The future is dropped
/// otherwise, so it must be cancel safe (a body read takes nothing from the socket unless it
/// returns it).
pub(crate) fn poll_once<F: std::future::Future>(fut: F) -> Option<F::Output> {
    let mut fut = std::pin::pin!(fut);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match fut.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(v) => Some(v),
        std::task::Poll::Pending => None,
    }
}

/// What a template is resolved to in a pass whose output is thrown away: its credential is
/// still being fetched, and the chunk is scanned again once it is there.
const PENDING: Revealed = Revealed::Expiry(String::new());

/// Most distinct credentials one request may name.
pub const MAX_CREDENTIALS_PER_REQUEST: usize = 32;

/// The credentials one request fetched: a short list (at most
/// [`MAX_CREDENTIALS_PER_REQUEST`]) searched in order, cheaper than hashing every template's
/// key.
#[derive(Default)]
struct Cache(Vec<(CredentialKey, Lookup)>);

type CredentialKey = (String, CredentialKind);

/// What to scan: one chunk, or a whole body in the pieces it arrived in.
enum Input<'a> {
    Chunk(&'a [u8], Place),
    Pieces(&'a [Bytes]),
}

/// Where a chunk sits in the body, which decides how the scanner takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    /// More may follow, templates too: lexed throughout ([`Scanner::feed`](crate::template::Scanner::feed)).
    Middle,
    /// No template starts after it, but more bytes follow ([`Scanner::feed_tail`](crate::template::Scanner::feed_tail)).
    Tail,
    /// The end of the body ([`Scanner::feed_last`](crate::template::Scanner::feed_last)).
    Last,
}

impl Cache {
    fn get(&self, id: &str, kind: CredentialKind) -> Option<&Lookup> {
        self.0
            .iter()
            .find(|((i, k), _)| *k == kind && i == id)
            .map(|(_, lookup)| lookup)
    }

    fn len(&self) -> usize {
        self.0.len()
    }

    fn insert(&mut self, key: CredentialKey, lookup: Lookup) {
        self.0.push((key, lookup));
    }

    fn values(&self) -> impl Iterator<Item = &Lookup> {
        self.0.iter().map(|(_, lookup)| lookup)
    }
}

/// The substitution state of one request.
#[derive(Default)]
pub struct Substitution {
    scanner: BodyScanner,
    cache: Cache,
    /// Templates substituted so far.
    pub templates: usize,
    /// A streamed JSON chunk's trailing `{`, held back for the next chunk: with that chunk's
    /// first byte it may start a template, and the chunk without it may go on unlexed
    /// ([`Scanner::defer`](crate::template::Scanner::defer) keeps no chunk that ends with
    /// `{`). Where a body is cut never changes the outcome.
    brace: bool,
    /// The target's host, which a credential bound to a merchant must be one of.
    host: std::sync::Arc<str>,
}

fn template_error(e: TemplateError) -> ApiError {
    ApiError::invalid_template(&e.field, &e.template, e.message)
}

impl Substitution {
    /// For a body in `format`.
    pub fn new(format: Format) -> Self {
        Substitution {
            scanner: BodyScanner::new(format),
            ..Substitution::default()
        }
    }

    /// Toward the target `host` (lower-case, as the target guard gives it): credentials are
    /// fetched for a request to it ([`credentials::fetch`]).
    pub fn toward(mut self, host: &str) -> Self {
        self.host = host.into();
        self
    }

    /// Whether the substituted body may differ in length from the caller's (not when it is
    /// only checked: [`Format::Other`]).
    pub fn may_change_length(&self) -> bool {
        self.scanner.may_change_length()
    }

    /// Back to the start (pingora replays a buffered body on retry).
    pub fn reset(&mut self) {
        self.scanner.reset();
        self.templates = 0;
        self.brace = false;
    }

    /// `chunk` after the `{` held back from the previous one, if any (copied then).
    fn after_brace(&mut self, chunk: &[u8]) -> Option<Bytes> {
        std::mem::take(&mut self.brace).then(|| Scanner::after_brace(chunk))
    }

    /// Scans one chunk; appends the bytes to forward to `out` (none, one or two pieces).
    ///
    /// A chunk in which nothing can be substituted ([`Scanner::may_resolve`](crate::template::Scanner::may_resolve)) is forwarded as
    /// it came, no copy, no new buffer: kept unlexed ([`Scanner::defer`](crate::template::Scanner::defer)) where it may be, else
    /// lexed ([`Scanner::lex`](crate::template::Scanner::lex)). A JSON chunk's trailing `{` is held back for the next, and
    /// goes on as a piece of its own before that chunk when the chunk is kept unlexed (the
    /// two are joined, a copy, only when the chunk must be lexed).
    pub async fn feed(
        &mut self,
        app: &App,
        principal: &Principal,
        mut chunk: Bytes,
        out: &mut Vec<Bytes>,
    ) -> Result<(), ApiError> {
        let brace = std::mem::take(&mut self.brace);
        self.brace = self.scanner.is_json() && Scanner::hold_back_brace(brace, &mut chunk);
        // Nothing to substitute: sent on as it came, not copied, and lexed only should a
        // later chunk need it.
        if self.scanner.defer(brace, &chunk).map_err(template_error)? {
            if brace {
                out.push(Bytes::from_static(b"{"));
            }
            out.push(chunk);
            return Ok(());
        }
        let chunk = if brace {
            Scanner::after_brace(&chunk)
        } else {
            chunk
        };
        // Nothing to substitute: lexed, not copied, and forwarded as it came (less a `{`
        // the scanner holds back for the next chunk).
        if let Some(forward) = self.scanner.lex(&chunk).map_err(template_error)? {
            out.push(chunk.slice(..forward));
            return Ok(());
        }
        let mut substituted = Vec::new();
        self.feed_from_store(
            app,
            principal,
            Input::Chunk(&chunk, Place::Middle),
            &mut substituted,
        )
        .await?;
        out.push(Bytes::from(substituted));
        Ok(())
    }

    /// Scans the last chunk of the body and ends it ([`Substitution::feed`] then
    /// [`Substitution::finish`] in one, faster: see [`Scanner::feed_last`](crate::template::Scanner::feed_last)); returns the bytes
    /// to forward.
    pub async fn feed_last(
        &mut self,
        app: &App,
        principal: &Principal,
        chunk: &[u8],
    ) -> Result<Vec<u8>, ApiError> {
        let joined = self.after_brace(chunk);
        let chunk = joined.as_deref().unwrap_or(chunk);
        let mut out = Vec::new();
        self.feed_from_store(app, principal, Input::Chunk(chunk, Place::Last), &mut out)
            .await?;
        Ok(out)
    }

    /// The whole body, read in `pieces`, substituted into `out` (a buffer that already holds
    /// what goes before it, such as a request's head): as [`Substitution::feed_last`] of the
    /// pieces joined, without joining them. Returns `k`: the body is `out`'s new bytes
    /// followed by `pieces[k..]`, which no template reaches and which are left where they are
    /// (not copied).
    pub async fn feed_pieces_into(
        &mut self,
        app: &App,
        principal: &Principal,
        pieces: &[Bytes],
        out: &mut Vec<u8>,
    ) -> Result<usize, ApiError> {
        self.feed_from_store(app, principal, Input::Pieces(pieces), out)
            .await
    }

    /// Scans `input` with credentials from the store, appending to `out`. Returns how many of
    /// `Input::Pieces` went into `out` (see [`Substitution::feed_pieces_into`]); 1 for a chunk.
    async fn feed_from_store(
        &mut self,
        app: &App,
        principal: &Principal,
        input: Input<'_>,
        out: &mut Vec<u8>,
    ) -> Result<usize, ApiError> {
        let host = self.host.clone();
        let host = &*host;
        let fetch = |id: String, kind| async move {
            credentials::fetch(app, principal, host, &id, kind).await
        };
        match input {
            Input::Chunk(chunk, place) => {
                self.scan_into(chunk, place, fetch, out).await.map(|()| 1)
            }
            Input::Pieces(pieces) => self.scan_pieces(pieces, fetch, out).await,
        }
    }

    /// Scans a whole body read in `pieces` into `out`. The pieces up to the last one in which
    /// a template may start are lexed; from there on the scanner copies whatever follows the
    /// last template without lexing it ([`Scanner::feed_tail`](crate::template::Scanner::feed_tail)), as it does in a body's last
    /// chunk. The pieces after that which no template reaches are not copied: returns where
    /// they begin ([`Substitution::feed_pieces_into`]).
    async fn scan_pieces<F, Fut>(
        &mut self,
        pieces: &[Bytes],
        mut fetch: F,
        out: &mut Vec<u8>,
    ) -> Result<usize, ApiError>
    where
        F: FnMut(String, CredentialKind) -> Fut,
        Fut: Future<Output = Result<Lookup, ApiError>>,
    {
        let tail_from = self.scanner.tail_start(pieces);
        for (j, piece) in pieces.iter().enumerate() {
            if j > tail_from && !self.scanner.carries_template() {
                // No template is open, and none starts here or later: this piece and the
                // rest stay as they are, neither searched for `{{` again nor copied (only
                // their nesting is followed, where a template was substituted). The scanner
                // holds nothing back here, so ending it writes nothing.
                for rest in pieces.get(j..).unwrap_or_default() {
                    self.scanner.skip(rest);
                }
                self.scan_into(&[], Place::Last, &mut fetch, out).await?;
                return Ok(j);
            }
            let place = if j + 1 == pieces.len() {
                Place::Last
            } else if j >= tail_from {
                Place::Tail
            } else {
                Place::Middle
            };
            self.scan_into(piece, place, &mut fetch, out).await?;
        }
        if pieces.is_empty() {
            self.scan_into(&[], Place::Last, &mut fetch, out).await?;
        }
        Ok(pieces.len())
    }

    /// [`Substitution::scan_into`] into a new buffer (the tests' entry point).
    #[cfg(test)]
    async fn scan<F, Fut>(
        &mut self,
        chunk: &[u8],
        last: bool,
        fetch: F,
    ) -> Result<Vec<u8>, ApiError>
    where
        F: FnMut(String, CredentialKind) -> Fut,
        Fut: Future<Output = Result<Lookup, ApiError>>,
    {
        let mut out = Vec::new();
        let place = if last { Place::Last } else { Place::Middle };
        self.scan_into(chunk, place, fetch, &mut out).await?;
        Ok(out)
    }

    /// Scans one chunk, placed in the body as `place`, appending to `out` and fetching
    /// credentials with `fetch` (a parameter so that tests can make lookups wait). A second
    /// pass first takes back what the first appended.
    async fn scan_into<F, Fut>(
        &mut self,
        chunk: &[u8],
        place: Place,
        mut fetch: F,
        out: &mut Vec<u8>,
    ) -> Result<(), ApiError>
    where
        F: FnMut(String, CredentialKind) -> Fut,
        Fut: Future<Output = Result<Lookup, ApiError>>,
    {
        // The state to scan the chunk again from, should a lookup have to wait. Only a chunk
        // that reaches the resolver can need it; copying the scanner (its path and held
        // template) for every other chunk would be wasted.
        let mut before = self
            .scanner
            .may_resolve(chunk)
            .then(|| self.scanner.clone());
        let start = out.len();
        for _pass in 0..2 {
            out.truncate(start);
            out.reserve(chunk.len() + chunk.len() / 8);
            let mut missing: Vec<CredentialKey> = Vec::new();
            let mut failure: Option<ApiError> = None;
            let Substitution { scanner, cache, .. } = self;
            let mut resolve = |t: &TemplateRef| -> Result<Revealed, ResolveError> {
                let (id, kind) = (t.payment_method.as_str(), t.kind);
                if cache.get(id, kind).is_none() {
                    if missing.iter().any(|(i, k)| *k == kind && i == id) {
                        return Ok(PENDING);
                    }
                    if cache.len() >= MAX_CREDENTIALS_PER_REQUEST {
                        let limit = format!(
                            "a request may name at most {MAX_CREDENTIALS_PER_REQUEST} credentials"
                        );
                        cache.insert((id.to_string(), kind), Err(limit));
                    } else {
                        // The embedded store answers without waiting: fetch right here, in
                        // the one pass. A backend that has to wait is fetched between passes.
                        match poll_once(fetch(id.to_string(), kind)) {
                            Some(Ok(lookup)) => cache.insert((id.to_string(), kind), lookup),
                            Some(Err(e)) => {
                                failure = Some(e);
                                return Err(ResolveError::new("internal error"));
                            }
                            None => {
                                missing.push((id.to_string(), kind));
                                return Ok(PENDING);
                            }
                        }
                    }
                }
                match cache.get(id, kind) {
                    Some(Ok(values)) => values.select(t).map_err(ResolveError::new),
                    Some(Err(message)) => Err(ResolveError::new(message.clone())),
                    None => Ok(PENDING),
                }
            };
            let result = match place {
                Place::Middle => scanner.feed(chunk, out, &mut resolve),
                Place::Tail => scanner.feed_tail(chunk, out, &mut resolve),
                Place::Last => scanner.feed_last(chunk, out, &mut resolve),
            };
            if let Some(e) = failure {
                return Err(e);
            }
            if missing.is_empty() {
                let n = result.map_err(template_error)?;
                self.templates += n;
                return Ok(());
            }
            // `before` is there: a lookup was made. It is taken, as the second pass finds
            // every credential in the cache.
            let Some(snapshot) = before.take() else {
                break;
            };
            self.scanner = snapshot;
            for (id, kind) in missing {
                let lookup = fetch(id.clone(), kind).await?;
                self.cache.insert((id, kind), lookup);
            }
        }
        Err(ApiError::internal())
    }

    /// End of the body: what the scanner still holds.
    pub fn finish(&mut self) -> Result<Vec<u8>, ApiError> {
        let mut out = Vec::new();
        if std::mem::take(&mut self.brace) {
            // The `{` held back is the body's last chunk; it completes no template, so
            // nothing is resolved.
            let mut never = |_: &TemplateRef| Err(ResolveError::new("internal error"));
            (self.scanner)
                .feed_last(b"{", &mut out, &mut never)
                .map_err(template_error)?;
        } else {
            self.scanner.finish(&mut out).map_err(template_error)?;
        }
        Ok(out)
    }

    /// What this request revealed (payment methods for `pan`, purchase intents otherwise),
    /// sorted, for its audit entry.
    pub fn revealed(&self) -> Vec<&str> {
        let mut ids: Vec<&str> = self
            .cache
            .values()
            .filter_map(|l| l.as_ref().ok().map(|v| v.revealed.as_str()))
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// The card numbers of the credentials this request fetched, for the response guard.
    pub fn card_numbers(&self) -> Vec<CardNumber> {
        self.cache
            .values()
            .filter_map(|l| l.as_ref().ok().map(|v| v.number().clone()))
            .collect()
    }

    /// The cvcs the request's templates selected, for the response guard.
    pub fn cvcs(&self) -> Vec<Cvc> {
        self.cache
            .values()
            .filter_map(|l| l.as_ref().ok().and_then(|v| v.cvc_selected().cloned()))
            .collect()
    }

    /// The purchase intents whose credentials this request used.
    pub fn intents_used(&self) -> BTreeSet<String> {
        self.cache
            .values()
            .filter_map(|l| l.as_ref().ok().and_then(|v| v.intent_id.clone()))
            .collect()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::domain::issuer::Credential;
    use credentials::CredentialValues;
    use std::cell::Cell;
    use std::task::Poll;

    /// A credential whose number is the payment method's id.
    fn lookup(id: &str) -> Lookup {
        let credential = Credential {
            number: id.into(),
            expiration_month: "12".to_string(),
            expiration_year: "2030".to_string(),
            cvc: None,
            cryptogram: None,
        };
        Ok(CredentialValues::new(credential, id.to_string(), None))
    }

    /// Ready on the second poll, as a lookup over the network would be.
    async fn wait_once() {
        let mut waited = false;
        std::future::poll_fn(|cx| {
            if std::mem::replace(&mut waited, true) {
                Poll::Ready(())
            } else {
                cx.waker().wake_by_ref();
                Poll::Pending
            }
        })
        .await
    }

    /// Runs `body` cut at every byte into two chunks, ending with `feed_last` or with `feed`
    /// then `finish`; checks each output and how often credentials were fetched.
    async fn substitutes_every_split(waits: bool) {
        let template =
            |pm: &str| format!("{{{{ paymentMethod: {pm} | type: 'pan' | json: '$.number' }}}}");
        // pm_b first and twice: the revealed ids come out sorted, each once.
        let body = format!(
            r#"{{"card":{{"a":"{}","b":"{}","d":"{}"}},"c":"{{"}}"#,
            template("pm_b"),
            template("pm_a"),
            template("pm_b")
        );
        let want = r#"{"card":{"a":"pm_b","b":"pm_a","d":"pm_b"},"c":"{"}"#;
        for at in 0..=body.len() {
            for last in [false, true] {
                let calls = Cell::new(0);
                let fetch = |id: String, _kind| {
                    calls.set(calls.get() + 1);
                    async move {
                        if waits {
                            wait_once().await;
                        }
                        Ok(lookup(&id))
                    }
                };
                let mut sub = Substitution::default();
                let (a, b) = body.as_bytes().split_at(at);
                let mut out = sub.scan(a, false, fetch).await.unwrap();
                out.extend(sub.scan(b, last, fetch).await.unwrap());
                if !last {
                    out.extend(sub.finish().unwrap());
                }
                assert_eq!(String::from_utf8(out).unwrap(), want, "split at {at}");
                assert_eq!(sub.templates, 3);
                assert_eq!(sub.revealed(), ["pm_a", "pm_b"]);
                // A lookup that waits is polled once in the first pass, then awaited.
                assert_eq!(calls.get(), if waits { 4 } else { 2 }, "split at {at}");
            }
        }
    }

    /// Runs `body` cut at every pair of bytes into three pieces through `scan_pieces`,
    /// against what `scan` of the whole body gives: every place where the lexed pieces end
    /// and the tail begins, braces and templates cut by piece ends, braces in a key.
    async fn pieces_match_the_joined_body(waits: bool) {
        let template =
            |pm: &str| format!("{{{{ paymentMethod: {pm} | type: 'pan' | json: '$.number' }}}}");
        for body in [
            format!(
                r#"{{"{{k}}":1,"card":{{"a":"{}","b":"{}"}},"c":"{{","d":"{{ {{"}}"#,
                template("pm_a"),
                template("pm_b")
            ),
            format!(r#"["{}","x{{","{{"]"#, template("pm_a")),
            r#"{"plain":"no {templates} here { {"}"#.to_string(),
        ] {
            let fetch = |id: String, _kind| async move {
                if waits {
                    wait_once().await;
                }
                Ok(lookup(&id))
            };
            let mut whole = Substitution::default();
            let want = whole.scan(body.as_bytes(), true, fetch).await.unwrap();
            let bytes = Bytes::from(body.clone());
            for i in 0..=bytes.len() {
                for j in i..=bytes.len() {
                    // Empty pieces too: `i == j` puts one between two others.
                    let pieces = [bytes.slice(..i), bytes.slice(i..j), bytes.slice(j..)];
                    let mut sub = Substitution::default();
                    let mut out = Vec::new();
                    let used = sub.scan_pieces(&pieces, fetch, &mut out).await.unwrap();
                    for piece in &pieces[used..] {
                        out.extend_from_slice(piece);
                    }
                    assert_eq!(out, want, "{body} cut at {i} and {j}");
                    assert_eq!(sub.templates, whole.templates, "{body} cut at {i} and {j}");
                }
            }
        }
    }

    #[tokio::test]
    async fn a_body_in_pieces_is_substituted_as_if_joined() {
        pieces_match_the_joined_body(false).await;
        pieces_match_the_joined_body(true).await;
    }

    /// An unterminated template is an error however the body is cut.
    #[tokio::test]
    async fn a_template_left_open_in_pieces_is_an_error() {
        let body = Bytes::from_static(br#"{"a":"{{ paymentMethod: pm_a","b":1}"#);
        for i in 0..=body.len() {
            let pieces = [body.slice(..i), body.slice(i..)];
            let fetch = |id: String, _kind| async move { Ok(lookup(&id)) };
            let mut out = Vec::new();
            let result = Substitution::default()
                .scan_pieces(&pieces, fetch, &mut out)
                .await;
            assert!(result.is_err(), "cut at {i}");
        }
    }

    #[tokio::test]
    async fn substitutes_in_one_pass() {
        substitutes_every_split(false).await;
    }

    /// The second pass starts from the scanner's state before the chunk, also when the chunk
    /// has no `{{` of its own but finishes a template (or a `{{`) begun in the previous one.
    #[tokio::test]
    async fn scans_again_after_a_lookup_that_waits() {
        substitutes_every_split(true).await;
    }
}
