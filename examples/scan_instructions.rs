//! Counts the scanner's instructions a byte under valgrind on the bodies of
//! `benches/scanner.rs`: `valgrind --tool=cachegrind --cache-sim=no
//! target/release/examples/scan_instructions CASE N` scans the body N times, in 16 KiB chunks
//! (`load64k`: whole, with `feed` then `finish`). The difference between two values of N, over
//! the bytes scanned in between, is the cost a byte. CASE: `1m0` (1 MiB, no templates),
//! `1m100` (1 MiB, 100 templates), `1k100` (100 templates, about 13 KiB), `load1k`, `load64k`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use paycred::template::{ResolveError, Scanner, TemplateRef};

const TEMPLATE: &str = "{{ paymentMethod: pm_1 | type: 'pan' | json: '$.number' }}";

/// The bench's order-like body: `size` bytes of items, `templates` of them with a template.
fn body(size: usize, templates: usize) -> Vec<u8> {
    let item = |i: usize, pan: &str| {
        format!(
            r#"{{"id":"item_{i:06}","name":"Widget \"deluxe\" {i}","qty":{q},"price":1999,"tags":["a","b"],"pan":"{pan}"}}"#,
            q = i % 7
        )
    };
    let per_item = item(0, "").len() + 1;
    let items = (size.saturating_sub(40) / per_item).max(templates).max(1);
    let every = items.checked_div(templates).unwrap_or(usize::MAX);
    let mut out = String::from(r#"{"currency":"usd","items":["#);
    let mut placed = 0;
    for i in 0..items {
        if i > 0 {
            out.push(',');
        }
        let pan = if placed < templates && i % every == 0 {
            placed += 1;
            TEMPLATE
        } else {
            ""
        };
        out.push_str(&item(i, pan));
    }
    out.push_str("]}");
    while out.len() < size {
        out.push(' ');
    }
    out.into_bytes()
}

/// The load bench's body: a card of 4 templates and `items` items of 100-byte skus.
fn load_body(items: usize) -> Vec<u8> {
    let card = ["number", "expirationMonth", "expirationYear", "cvc"]
        .map(|f| format!(r#""{f}":"{{{{ paymentMethod: pm_1 | type: 'pan' | json: '$.{f}' }}}}""#))
        .join(",");
    let item = format!(r#"{{"sku":"{}"}}"#, "x".repeat(100));
    let items = vec![item.as_str(); items].join(",");
    format!(r#"{{"amount":1000,"currency":"USD","card":{{{card}}},"items":[{items}]}}"#)
        .into_bytes()
}

fn main() {
    let case = std::env::args().nth(1).unwrap_or_else(|| "1m0".to_owned());
    let n: usize = std::env::args().nth(2).map_or(1, |a| a.parse().unwrap());
    let (input, chunk) = match case.as_str() {
        "1m0" => (body(1 << 20, 0), 16 * 1024),
        "1m100" => (body(1 << 20, 100), 16 * 1024),
        "1k100" => (body(1024, 100), 16 * 1024),
        "load1k" => (load_body(5), 16 * 1024),
        "load64k" => (load_body(580), usize::MAX),
        _ => panic!("unknown case {case}"),
    };
    let mut scanner = Scanner::new();
    let mut out = Vec::with_capacity(input.len() * 2);
    let mut resolve = |_: &TemplateRef| Ok::<_, ResolveError>("4242424242424242".to_owned());
    let mut total = 0;
    for _ in 0..n {
        out.clear();
        for part in input.chunks(chunk) {
            total += scanner.feed(part, &mut out, &mut resolve).unwrap();
        }
        scanner.finish(&mut out).unwrap();
    }
    println!("{} bytes, {total} templates", input.len());
}
