//! Durability and data protection across restarts: every acknowledged payment method is
//! back after a graceful stop and after SIGKILL, and no card number or cvc is readable in
//! the data dir or the log.

use crate::common::*;
use serde_json::Value;
use std::path::Path;

fn ids(server: &Server, token: &str) -> Vec<String> {
    let r = server.call(
        "GET",
        &format!("/projects/{PROJECT}/payment-methods?limit=100"),
        Some(token),
        None,
    );
    assert_eq!(r.status, 200, "{}", r.text);
    r.json
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_str().unwrap().to_string())
        .collect()
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

fn scan_dir(dir: &Path, needles: &[&str]) -> Vec<String> {
    let mut hits = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let p = entry.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if let Ok(bytes) = std::fs::read(&p) {
                for n in needles {
                    if contains(&bytes, n.as_bytes()) {
                        hits.push(format!("{} contains {n}", p.display()));
                    }
                }
            }
        }
    }
    hits
}

#[test]
fn payment_methods_survive_restarts_and_nothing_readable_is_stored() {
    let mut server = Server::start();
    let t = server.token("user_1", "private");
    let cards = [
        (VISA, "731"),
        (MASTERCARD, "842"),
        (AMEX, "9534"),
        (VISA_DEBIT, "615"),
    ];
    let mut created: Vec<Value> = Vec::new();
    for (n, cvc) in cards {
        let r = server.call(
            "POST",
            &format!("/projects/{PROJECT}/payment-methods"),
            Some(&t),
            Some(&card_body("user_1", n, cvc)),
        );
        assert_eq!(r.status, 201, "{}", r.text);
        created.push(r.json);
    }
    let before = ids(&server, &t);
    assert_eq!(before.len(), 4);

    server.restart();
    let t = server.token("user_1", "private");
    assert_eq!(ids(&server, &t), before, "after a graceful restart");

    // Acknowledged means durable: SIGKILL right after the 201.
    let r = server.call(
        "POST",
        &format!("/projects/{PROJECT}/payment-methods"),
        Some(&t),
        Some(&card_body("user_1", "5200828282828210", "377")),
    );
    assert_eq!(r.status, 201);
    // Time for the log's thread to write this request's lines (every 10 ms), which the
    // check for card numbers in the log below covers; the 201 already made the card durable.
    std::thread::sleep(std::time::Duration::from_millis(100));
    server.stop(true);
    server.restart();
    let after = ids(&server, &t);
    assert_eq!(after.len(), 5, "after SIGKILL");
    assert_eq!(after[0], r.json["id"].as_str().unwrap());
    for pm in &created {
        let id = pm["id"].as_str().unwrap();
        let got = server.call(
            "GET",
            &format!("/projects/{PROJECT}/payment-methods/{id}"),
            Some(&t),
            None,
        );
        assert_eq!(
            got.json["card"]["details"], pm["card"]["details"],
            "intact after restarts"
        );
    }
    server.stop(false);

    let numbers: Vec<&str> = cards
        .iter()
        .map(|c| c.0)
        .chain(["5200828282828210"])
        .collect();
    let mut needles: Vec<String> = numbers.iter().map(|n| n.to_string()).collect();
    // The middle digits (never shown anywhere) must not appear either.
    // (Skipped where they equal the bin, which is stored in the clear like any BIN.)
    needles.extend(
        numbers
            .iter()
            .map(|n| (n[..6].to_string(), n[6..n.len() - 4].to_string()))
            .filter(|(bin, middle)| middle.len() >= 5 && !bin.contains(middle.as_str()))
            .map(|(_, middle)| middle),
    );
    let needle_refs: Vec<&str> = needles.iter().map(String::as_str).collect();
    let hits = scan_dir(&server.dir.path().join("data"), &needle_refs);
    assert!(hits.is_empty(), "card data readable at rest: {hits:?}");
    let log = server.log();
    assert!(log.contains("request"), "the log is being written");
    for n in &numbers {
        assert!(!log.contains(n), "a card number is in the log");
    }
    for (_, cvc) in cards {
        assert!(!log.contains(&format!("\"{cvc}\"")), "a cvc is in the log");
    }
}
