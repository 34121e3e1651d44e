//! The scanner's bench bodies, shared by `benches/scanner.rs` and
//! `benches/load/bin/scan_instructions.rs` (each includes this file as a module).

/// The template placed in the order-like body.
pub const TEMPLATE: &str = "{{ paymentMethod: pm_1 | type: 'pan' | json: '$.number' }}";

/// The order-like body: `size` bytes of items, `templates` of them with a template.
pub fn body(size: usize, templates: usize) -> Vec<u8> {
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
    // Pad to the nominal size with whitespace, which JSON allows.
    while out.len() < size {
        out.push(' ');
    }
    out.into_bytes()
}

/// A body of `benches/load/bodies.py`: a card of 4 templates and `items` items of 100-byte
/// skus. `body-1k.json` has 5 items (914 bytes), `body-64k.json` 580 (64,739 bytes).
pub fn load_bench_body(items: usize) -> Vec<u8> {
    let card = ["number", "expirationMonth", "expirationYear", "cvc"]
        .map(|f| format!(r#""{f}":"{{{{ paymentMethod: pm_1 | type: 'pan' | json: '$.{f}' }}}}""#))
        .join(",");
    let item = format!(r#"{{"sku":"{}"}}"#, "x".repeat(100));
    let items = vec![item.as_str(); items].join(",");
    let body = format!(r#"{{"amount":1000,"currency":"USD","card":{{{card}}},"items":[{items}]}}"#);
    body.into_bytes()
}
