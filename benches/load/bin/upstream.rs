//! The load bench's target API: a small tokio HTTP/1.1 server on one thread that reads every
//! request body to its end (Content-Length or chunked) and answers `200 {"ok":true}`, with
//! keep-alive; to a request with `X-Answer: 1k` or `64k` it answers a JSON document of that
//! size (order lines with prices and quantities, no card number), for the response guard's
//! cost. Reading
//! the whole body matters: a target that answers early makes proxies abort uploads, which
//! would show up as errors that are not the proxy's. To a request with `X-Close: 1` it
//! answers `Connection: close` and closes, so the proxy needs a new connection (and, over
//! TLS, a handshake) for its next request.
//!
//! With `--tls CERT KEY` it speaks HTTPS (OpenSSL's intermediate profile, HTTP/1.1, session
//! tickets on) with that certificate: the target as paycred reaches it in production. With
//! `--expect TEXT` (repeatable) every request body must hold each TEXT (the real card values
//! a proxy swapped in), else it answers `422` with an empty body: a load tool counts those.
//!
//! `cargo run --release --example upstream -- 127.0.0.1:18100 [--tls CERT KEY] [--expect TEXT]...`

use openssl::ssl::{Ssl, SslAcceptor, SslFiletype, SslMethod};
use std::pin::Pin;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;

const RESPONSE: &[u8] =
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"ok\":true}";
/// The answer to `X-Close: 1`.
const RESPONSE_CLOSE: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\nConnection: close\r\n\r\n{\"ok\":true}";

/// The answer to a body without an `--expect` text.
const RESPONSE_MISSING: &[u8] = b"HTTP/1.1 422 Unprocessable Entity\r\nContent-Length: 0\r\n\r\n";

/// The answers to `X-Answer: 1k` and `64k`, head and body.
fn answer_1k() -> &'static [u8] {
    static ANSWER: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    ANSWER.get_or_init(|| order_lines(1024))
}

fn answer_64k() -> &'static [u8] {
    static ANSWER: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    ANSWER.get_or_init(|| order_lines(64 * 1024))
}

/// An answer whose JSON body of about `size` bytes lists order lines.
fn order_lines(size: usize) -> Vec<u8> {
    let mut body = String::from("{\"items\":[");
    let mut i = 0;
    while body.len() < size - 64 {
        body.push_str(&format!(
            "{{\"sku\":\"item-{i:06}\",\"qty\":{},\"price\":1999}},",
            i % 7
        ));
        i += 1;
    }
    body.push_str("{}]}");
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    [head.into_bytes(), body.into_bytes()].concat()
}

/// Reads more bytes into `buf`; `false` at end of stream.
async fn fill<S: AsyncRead + Unpin>(stream: &mut S, buf: &mut Vec<u8>) -> bool {
    let mut chunk = [0u8; 64 * 1024];
    match stream.read(&mut chunk).await {
        Ok(0) | Err(_) => false,
        Ok(n) => {
            buf.extend_from_slice(&chunk[..n]);
            true
        }
    }
}

/// Consumes a chunked body from the front of `buf`; `None` when more bytes are needed.
fn chunked_end(buf: &[u8]) -> Option<usize> {
    let mut pos = 0;
    loop {
        let line_end = buf[pos..].windows(2).position(|w| w == b"\r\n")? + pos;
        let size_text = std::str::from_utf8(&buf[pos..line_end]).ok()?;
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        pos = line_end + 2;
        if size == 0 {
            return (buf.len() >= pos + 2).then_some(pos + 2);
        }
        if buf.len() < pos + size + 2 {
            return None;
        }
        pos += size + 2;
    }
}

/// Whether `body` holds every text of `expect`.
fn holds(body: &[u8], expect: &[Vec<u8>]) -> bool {
    expect
        .iter()
        .all(|t| body.windows(t.len()).any(|w| w == t.as_slice()))
}

async fn serve<S: AsyncRead + AsyncWrite + Unpin>(mut stream: S, expect: &'static [Vec<u8>]) {
    let mut buf = Vec::with_capacity(64 * 1024);
    loop {
        let (head_len, content_length, chunked, mut response) = loop {
            let mut headers = [httparse::EMPTY_HEADER; 64];
            let mut req = httparse::Request::new(&mut headers);
            match req.parse(&buf) {
                Ok(httparse::Status::Complete(len)) => {
                    let mut cl = 0;
                    let mut chunked = false;
                    let mut answer = RESPONSE;
                    for h in req.headers.iter() {
                        if h.name.eq_ignore_ascii_case("content-length") {
                            cl = std::str::from_utf8(h.value)
                                .ok()
                                .and_then(|v| v.trim().parse().ok())
                                .unwrap_or(0);
                        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
                            chunked = h.value.eq_ignore_ascii_case(b"chunked");
                        } else if h.name.eq_ignore_ascii_case("x-answer") {
                            answer = match h.value {
                                b"1k" => answer_1k(),
                                b"64k" => answer_64k(),
                                _ => RESPONSE,
                            };
                        } else if h.name.eq_ignore_ascii_case("x-close") {
                            answer = RESPONSE_CLOSE;
                        }
                    }
                    break (len, cl, chunked, answer);
                }
                Ok(httparse::Status::Partial) => {
                    if !fill(&mut stream, &mut buf).await {
                        return;
                    }
                }
                Err(_) => return,
            }
        };
        buf.drain(..head_len);
        if chunked {
            let end = loop {
                if let Some(end) = chunked_end(&buf) {
                    break end;
                }
                if !fill(&mut stream, &mut buf).await {
                    return;
                }
            };
            if !holds(&buf[..end], expect) {
                response = RESPONSE_MISSING;
            }
            buf.drain(..end);
        } else {
            while buf.len() < content_length {
                if !fill(&mut stream, &mut buf).await {
                    return;
                }
            }
            if !holds(&buf[..content_length], expect) {
                response = RESPONSE_MISSING;
            }
            buf.drain(..content_length);
        }
        if stream.write_all(response).await.is_err() || response == RESPONSE_CLOSE {
            let _ = stream.shutdown().await;
            return;
        }
    }
}

/// The TLS acceptor of `--tls CERT KEY`.
fn acceptor(cert: &str, key: &str) -> Result<SslAcceptor, openssl::error::ErrorStack> {
    let mut builder = SslAcceptor::mozilla_intermediate_v5(SslMethod::tls())?;
    builder.set_certificate_chain_file(cert)?;
    builder.set_private_key_file(key, SslFiletype::PEM)?;
    Ok(builder.build())
}

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let addr = args
        .get(1)
        .cloned()
        .unwrap_or_else(|| "127.0.0.1:18100".into());
    let (mut tls, mut expect) = (None, Vec::new());
    let mut rest = args.iter().skip(2);
    while let Some(arg) = rest.next() {
        match (arg.as_str(), rest.next()) {
            ("--tls", Some(cert)) => {
                // (A missing KEY is a file that cannot be read.)
                let key = rest.next().map_or("", String::as_str);
                tls = Some(acceptor(cert, key).map_err(std::io::Error::other)?);
            }
            ("--expect", Some(text)) => expect.push(text.as_bytes().to_vec()),
            _ => {
                eprintln!("usage: upstream LISTEN [--tls CERT KEY] [--expect TEXT]...");
                std::process::exit(2);
            }
        }
    }
    let expect: &'static [Vec<u8>] = Vec::leak(expect);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let listener = TcpListener::bind(&addr).await?;
        loop {
            let (stream, _) = listener.accept().await?;
            let _ = stream.set_nodelay(true);
            match &tls {
                None => drop(tokio::spawn(serve(stream, expect))),
                Some(acceptor) => {
                    let Ok(mut stream) = Ssl::new(acceptor.context())
                        .and_then(|ssl| tokio_openssl::SslStream::new(ssl, stream))
                    else {
                        continue;
                    };
                    tokio::spawn(async move {
                        if Pin::new(&mut stream).accept().await.is_ok() {
                            serve(stream, expect).await;
                        }
                    });
                }
            }
        }
    })
}
