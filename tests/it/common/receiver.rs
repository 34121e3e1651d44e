//! A webhook receiver on 127.0.0.1 over TLS (a certificate for `localhost` from a test CA):
//! it records every request (head and body) and answers as told: `500` to the first
//! `fail_first` requests and `200` after them, or, hanging, never (the connection is held
//! open until the receiver is dropped, at most 30 s).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::upstream::{read_head, tls_acceptor, Recorded};
use std::io::{BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Default)]
struct Shared {
    got: Mutex<Vec<Recorded>>,
    /// Requests answered 200, by their `webhook-id`.
    ok: Mutex<Vec<String>>,
    fail_first: AtomicUsize,
    hang: AtomicBool,
    /// Requests held without an answer now.
    hanging: AtomicUsize,
    stop: AtomicBool,
    /// How long each answer waits, ms.
    delay_ms: AtomicUsize,
    /// The answer to a failed request, when not a 500.
    failure: Mutex<Option<String>>,
}

pub struct Receiver {
    pub port: u16,
    shared: Arc<Shared>,
}

impl Receiver {
    /// Serves with the certificate and key in `dir` (`srv.pem`, `srv.key`:
    /// [`super::tls_files`]), failing the first `fail_first` requests.
    pub fn start(dir: &std::path::Path, fail_first: usize) -> Receiver {
        let acceptor = Arc::new(tls_acceptor(&dir.join("srv.pem"), &dir.join("srv.key")));
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let shared = Arc::new(Shared::default());
        shared.fail_first.store(fail_first, Ordering::SeqCst);
        let s = shared.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if s.stop.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let (s, acceptor) = (s.clone(), acceptor.clone());
                std::thread::spawn(move || serve(conn, &s, &acceptor));
            }
        });
        Receiver { port, shared }
    }

    /// A receiver that never answers.
    pub fn hanging(dir: &std::path::Path) -> Receiver {
        let r = Self::start(dir, 0);
        r.shared.hang.store(true, Ordering::SeqCst);
        r
    }

    /// Its URL (host `localhost`, as the certificate names it).
    pub fn url(&self) -> String {
        format!("https://localhost:{}/hooks?source=paycred", self.port)
    }

    /// Every request received, in order.
    pub fn requests(&self) -> Vec<Recorded> {
        self.shared.got.lock().unwrap().clone()
    }

    /// The `webhook-id`s of the requests answered 200, in order.
    pub fn delivered(&self) -> Vec<String> {
        self.shared.ok.lock().unwrap().clone()
    }

    /// Requests held unanswered now.
    pub fn hanging_now(&self) -> usize {
        self.shared.hanging.load(Ordering::SeqCst)
    }

    /// Waits `d` before each answer from now on (a slow receiver).
    pub fn set_delay(&self, d: Duration) {
        let ms = usize::try_from(d.as_millis()).unwrap_or(usize::MAX);
        self.shared.delay_ms.store(ms, Ordering::SeqCst);
    }

    /// Answers failed requests with `answer` (a whole HTTP/1.1 response) instead of a 500.
    pub fn fail_with(&self, answer: &str) {
        *self.shared.failure.lock().unwrap() = Some(answer.to_string());
    }

    /// Fails the next `n` requests (0: answers 200 from now on).
    pub fn fail_next(&self, n: usize) {
        self.shared.fail_first.store(n, Ordering::SeqCst);
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

fn serve(conn: TcpStream, s: &Shared, acceptor: &openssl::ssl::SslAcceptor) {
    conn.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let Ok(tls) = acceptor.accept(conn) else {
        return;
    };
    let mut reader = BufReader::new(tls);
    loop {
        let Some(head) = read_head(&mut reader) else {
            return;
        };
        let mut lines = head.lines();
        let line = lines.next().unwrap_or("");
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(n, v)| (n.trim().to_string(), v.trim().to_string()))
            .collect();
        let len: usize = headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(0);
        let mut body = vec![0u8; len];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let recorded = Recorded {
            method: line.split(' ').next().unwrap_or("").to_string(),
            path: line.split(' ').nth(1).unwrap_or("").to_string(),
            headers,
            body,
        };
        let id = recorded.header("webhook-id").unwrap_or("").to_string();
        s.got.lock().unwrap().push(recorded);
        if s.hang.load(Ordering::SeqCst) {
            s.hanging.fetch_add(1, Ordering::SeqCst);
            let until = Instant::now() + Duration::from_secs(30);
            while !s.stop.load(Ordering::SeqCst) && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(20));
            }
            s.hanging.fetch_sub(1, Ordering::SeqCst);
            return;
        }
        let delay = s.delay_ms.load(Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(u64::try_from(delay).unwrap_or(0)));
        let fail = s
            .fail_first
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        let answer = if fail {
            s.failure.lock().unwrap().clone().unwrap_or_else(|| {
                "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 4\r\n\r\nfail".into()
            })
        } else {
            s.ok.lock().unwrap().push(id);
            "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".into()
        };
        if reader.get_mut().write_all(answer.as_bytes()).is_err() {
            return;
        }
    }
}
