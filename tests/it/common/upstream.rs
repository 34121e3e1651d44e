//! A recording HTTP/1.1 server on 127.0.0.1 that stands in for a target API. It records
//! only *complete* requests (full Content-Length or chunked body up to the terminator), and
//! counts every connection, so a test can prove the target saw nothing.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One complete request as the target received it.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Default)]
struct Shared {
    requests: Mutex<Vec<Recorded>>,
    connections: AtomicUsize,
    incomplete: AtomicUsize,
    /// Connections closed by [`AfterAnswer::CloseAfter`].
    closed_idle: AtomicUsize,
    stop: AtomicBool,
    delay_ms: AtomicUsize,
}

/// The recording target.
pub struct Upstream {
    pub port: u16,
    shared: Arc<Shared>,
}

impl Upstream {
    pub fn start() -> Upstream {
        let (port, shared) = listen(serve);
        Upstream { port, shared }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.shared.requests.lock().unwrap().clone()
    }

    pub fn connections(&self) -> usize {
        self.shared.connections.load(Ordering::SeqCst)
    }

    /// Requests whose body never completed (connection closed mid-body).
    pub fn incomplete(&self) -> usize {
        self.shared.incomplete.load(Ordering::SeqCst)
    }

    /// Answer only after this long.
    pub fn set_delay(&self, d: Duration) {
        self.shared
            .delay_ms
            .store(d.as_millis() as usize, Ordering::SeqCst);
    }
}

/// Listens on 127.0.0.1, counting connections and serving each on its own thread, until
/// `stop` is set (and a connection wakes the loop).
fn listen<F>(serve: F) -> (u16, Arc<Shared>)
where
    F: Fn(TcpStream, &Shared) + Copy + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let shared = Arc::new(Shared::default());
    let s = shared.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            if s.stop.load(Ordering::SeqCst) {
                break;
            }
            let Ok(conn) = conn else { continue };
            s.connections.fetch_add(1, Ordering::SeqCst);
            let s2 = s.clone();
            std::thread::spawn(move || serve(conn, &s2));
        }
    });
    (port, shared)
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

fn serve(conn: TcpStream, s: &Shared) {
    conn.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut writer = conn.try_clone().unwrap();
    let mut reader = BufReader::new(conn);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut parts = line.trim_end().splitn(3, ' ');
        let method = parts.next().unwrap_or("").to_string();
        let path = parts.next().unwrap_or("").to_string();
        let mut headers = Vec::new();
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                headers.push((k.trim().to_string(), v.trim().to_string()));
            }
        }
        let get = |n: &str| {
            headers
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(n))
                .map(|(_, v)| v.clone())
        };
        let mut body = Vec::new();
        let complete =
            if get("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
                read_chunked(&mut reader, &mut body)
            } else if let Some(len) = get("content-length").and_then(|v| v.parse::<usize>().ok()) {
                body.resize(len, 0);
                reader.read_exact(&mut body).is_ok()
            } else {
                true
            };
        if !complete {
            s.incomplete.fetch_add(1, Ordering::SeqCst);
            return;
        }
        let delay = s.delay_ms.load(Ordering::SeqCst);
        if delay > 0 {
            std::thread::sleep(Duration::from_millis(delay as u64));
        }
        let answer = format!("{{\"received\":{}}}", body.len());
        s.requests.lock().unwrap().push(Recorded {
            method,
            path,
            headers,
            body,
        });
        let resp = format!(
            "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nX-Target: recorded\r\nContent-Length: {}\r\n\r\n{answer}",
            answer.len()
        );
        if writer.write_all(resp.as_bytes()).is_err() {
            return;
        }
    }
}

/// Reads a request's head up to its blank line (which is left out); `None` when the
/// connection ends first.
pub fn read_head(reader: &mut impl BufRead) -> Option<String> {
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return None;
        }
        if line == "\r\n" {
            return Some(head);
        }
        head.push_str(&line);
    }
}

/// Reads a chunked body to its terminator into `body`; whether it was complete.
pub fn read_chunked(reader: &mut BufReader<TcpStream>, body: &mut Vec<u8>) -> bool {
    loop {
        let mut size_line = String::new();
        if reader.read_line(&mut size_line).unwrap_or(0) == 0 {
            return false;
        }
        let Ok(size) = usize::from_str_radix(size_line.trim().split(';').next().unwrap_or(""), 16)
        else {
            return false;
        };
        if size == 0 {
            let mut end = String::new();
            return reader.read_line(&mut end).is_ok() && end == "\r\n";
        }
        let start = body.len();
        body.resize(start + size, 0);
        if reader.read_exact(&mut body[start..]).is_err() {
            return false;
        }
        let mut crlf = [0u8; 2];
        if reader.read_exact(&mut crlf).is_err() || &crlf != b"\r\n" {
            return false;
        }
    }
}

/// What a [`Scripted`] target does with a connection after answering on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterAnswer {
    KeepOpen,
    /// Close it, without saying so in a header.
    Close,
    /// Close it this long after the answer, without saying so: an idle timeout shorter than
    /// the proxy's.
    CloseAfter(Duration),
    /// Read the next request on it, then close it without an answer: a pooled connection
    /// that the target dropped just as it was reused.
    DropNextRequest,
}

/// A target that answers every request with the same raw bytes: for answers the recording
/// target never gives (informational responses, chunked bodies, cut-off bodies).
pub struct Scripted {
    pub port: u16,
    shared: Arc<Shared>,
}

impl Scripted {
    /// Answers `answer` to each request, then does `after` with the connection.
    pub fn start(answer: &'static [u8], after: AfterAnswer) -> Scripted {
        let (port, shared) = listen(move |conn, s| answer_each(conn, answer, after, s));
        Scripted { port, shared }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    pub fn connections(&self) -> usize {
        self.shared.connections.load(Ordering::SeqCst)
    }

    /// Requests read in full and answered.
    pub fn answered(&self) -> usize {
        self.shared.requests.lock().unwrap().len()
    }

    /// Requests read in full and dropped unanswered ([`AfterAnswer::DropNextRequest`]).
    pub fn dropped(&self) -> usize {
        self.shared.incomplete.load(Ordering::SeqCst)
    }

    /// Waits (up to 10 s) until `n` connections have been closed by
    /// [`AfterAnswer::CloseAfter`]; whether they were.
    pub fn wait_closed_idle(&self, n: usize) -> bool {
        super::eventually(Duration::from_secs(10), || {
            self.shared.closed_idle.load(Ordering::SeqCst) >= n
        })
    }
}

impl Drop for Scripted {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

fn answer_each(conn: TcpStream, answer: &[u8], after: AfterAnswer, s: &Shared) {
    conn.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut writer = conn.try_clone().unwrap();
    let mut reader = BufReader::new(conn);
    let mut answered = false;
    loop {
        let mut length = 0;
        let mut first = true;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            if !first && line.trim_end().is_empty() {
                break;
            }
            first = false;
            if let Some((k, v)) = line.split_once(':') {
                if k.trim().eq_ignore_ascii_case("content-length") {
                    length = v.trim().parse().unwrap_or(0);
                }
            }
        }
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        if answered && after == AfterAnswer::DropNextRequest {
            s.incomplete.fetch_add(1, Ordering::SeqCst);
            return;
        }
        s.requests.lock().unwrap().push(Recorded {
            method: String::new(),
            path: String::new(),
            headers: Vec::new(),
            body,
        });
        answered = true;
        if writer.write_all(answer).is_err() || after == AfterAnswer::Close {
            return;
        }
        if let AfterAnswer::CloseAfter(idle) = after {
            std::thread::sleep(idle);
            drop((reader, writer));
            s.closed_idle.fetch_add(1, Ordering::SeqCst);
            return;
        }
    }
}

/// A TLS acceptor (Mozilla's intermediate profile) with the PEM certificate chain and key at
/// these paths.
pub fn tls_acceptor(cert: &std::path::Path, key: &std::path::Path) -> openssl::ssl::SslAcceptor {
    use openssl::ssl::{SslAcceptor, SslFiletype, SslMethod};
    let mut acceptor = SslAcceptor::mozilla_intermediate_v5(SslMethod::tls()).unwrap();
    acceptor.set_certificate_chain_file(cert).unwrap();
    acceptor
        .set_private_key_file(key, SslFiletype::PEM)
        .unwrap();
    acceptor.build()
}

/// How [`KeepAliveTls`] answers.
#[derive(Clone, Copy, PartialEq, Eq)]
enum TlsAnswer {
    KeepOpen,
    Close,
    Pieces,
}

/// The length of the body [`KeepAliveTls::start_in_pieces`] answers.
pub const PIECES_BODY: usize = 100_000;

/// The body [`KeepAliveTls::start_in_pieces`] answers: [`PIECES_BODY`] bytes of a pattern
/// that shows any byte lost, repeated or out of place.
pub fn pieces_body() -> Vec<u8> {
    (0..PIECES_BODY)
        .map(|i| b"0123456789abcdefghijklmnopqrstuvwxyz"[(i * 7 + i / 36) % 36])
        .collect()
}

/// An HTTPS target that keeps connections open (or closes each after one answer): every
/// request (head only; bodyless requests) is answered `200` with a `Content-Length`, so a
/// proxy pools the connection. It records whether each handshake resumed a session.
pub struct KeepAliveTls {
    pub port: u16,
    shared: Arc<Shared>,
    /// Per connection, in the order their handshakes completed: whether it resumed a session.
    resumed: &'static Mutex<Vec<bool>>,
}

impl KeepAliveTls {
    /// Serves with the PEM certificate chain and key at these paths, keeping connections open.
    pub fn start(cert: &std::path::Path, key: &std::path::Path) -> KeepAliveTls {
        Self::serve(cert, key, TlsAnswer::KeepOpen)
    }

    /// The same, closing each connection after its first answer (`Connection: close`).
    pub fn start_closing(cert: &std::path::Path, key: &std::path::Path) -> KeepAliveTls {
        Self::serve(cert, key, TlsAnswer::Close)
    }

    /// The same as [`Self::start`], answering [`PIECES_BODY`] in many TLS records: the head
    /// a record per line, the body in records of 1,000 bytes.
    pub fn start_in_pieces(cert: &std::path::Path, key: &std::path::Path) -> KeepAliveTls {
        Self::serve(cert, key, TlsAnswer::Pieces)
    }

    fn serve(cert: &std::path::Path, key: &std::path::Path, answer: TlsAnswer) -> KeepAliveTls {
        let acceptor: &'static openssl::ssl::SslAcceptor =
            Box::leak(Box::new(tls_acceptor(cert, key)));
        // Leaked like the acceptor: the serving closure must be `Copy`.
        let resumed: &'static Mutex<Vec<bool>> = Box::leak(Box::default());
        let (port, shared) = listen(move |conn, s| {
            conn.set_read_timeout(Some(Duration::from_secs(30)))
                .unwrap();
            let Ok(tls) = acceptor.accept(conn) else {
                return;
            };
            resumed.lock().unwrap().push(tls.ssl().session_reused());
            let mut reader = BufReader::new(tls);
            loop {
                let Some(head) = read_head(&mut reader) else {
                    return;
                };
                s.requests.lock().unwrap().push(Recorded {
                    method: head.split(' ').next().unwrap_or("").to_string(),
                    path: head.split(' ').nth(1).unwrap_or("").to_string(),
                    headers: Vec::new(),
                    body: Vec::new(),
                });
                let tls = reader.get_mut();
                let sent = match answer {
                    TlsAnswer::KeepOpen => tls.write_all(
                        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok",
                    ),
                    TlsAnswer::Close => tls.write_all(
                        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
                    ),
                    TlsAnswer::Pieces => {
                        let body = pieces_body();
                        let head = format!(
                            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n",
                            body.len()
                        );
                        head.split_inclusive("\r\n")
                            .map(str::as_bytes)
                            .chain(body.chunks(1000))
                            .try_for_each(|piece| tls.write_all(piece))
                    }
                };
                if sent.is_err() || answer == TlsAnswer::Close {
                    let _ = reader.get_mut().shutdown();
                    return;
                }
            }
        });
        KeepAliveTls {
            port,
            shared,
            resumed,
        }
    }

    /// TCP connections accepted.
    pub fn connections(&self) -> usize {
        self.shared.connections.load(Ordering::SeqCst)
    }

    /// Requests answered.
    pub fn answered(&self) -> usize {
        self.shared.requests.lock().unwrap().len()
    }

    /// Per TLS connection, in order: whether its handshake resumed a session.
    pub fn resumed(&self) -> Vec<bool> {
        self.resumed.lock().unwrap().clone()
    }
}

impl Drop for KeepAliveTls {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}
