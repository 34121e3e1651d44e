//! Counts the scanner's instructions a byte under valgrind on the bodies of
//! `benches/scanner.rs`: `valgrind --tool=cachegrind --cache-sim=no
//! target/release/examples/scan_instructions CASE N` scans the body N times, in 16 KiB chunks
//! (`load64k`: whole, with `feed` then `finish`). The difference between two values of N, over
//! the bytes scanned in between, is the cost a byte. CASE: `1m0` (1 MiB, no templates),
//! `1m100` (1 MiB, 100 templates), `1k100` (100 templates, about 13 KiB), `load1k`, `load64k`,
//! `load1m` (the load bench's 1 MiB body: 100-byte strings; chunks that cannot reach the
//! resolver are only lexed, `Scanner::lex`, as the proxy streams them).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use paycred::secret::Revealed;
use paycred::template::{ResolveError, Scanner, TemplateRef};

#[path = "../../common/bodies.rs"]
mod bodies;
use bodies::{body, load_bench_body};

fn main() {
    let case = std::env::args().nth(1).unwrap_or_else(|| "1m0".to_owned());
    let n: usize = std::env::args().nth(2).map_or(1, |a| a.parse().unwrap());
    let (input, chunk) = match case.as_str() {
        "1m0" => (body(1 << 20, 0), 16 * 1024),
        "1m100" => (body(1 << 20, 100), 16 * 1024),
        "1k100" => (body(1024, 100), 16 * 1024),
        "load1k" => (load_bench_body(5), 16 * 1024),
        "load64k" => (load_bench_body(580), usize::MAX),
        "load1m" => (load_bench_body(9_300), 16 * 1024),
        _ => panic!("unknown case {case}"),
    };
    let streamed = case == "load1m";
    let mut scanner = Scanner::new();
    let mut out = Vec::with_capacity(input.len() * 2);
    let mut resolve =
        |_: &TemplateRef| Ok::<_, ResolveError>(Revealed::Number("4242424242424242".into()));
    let mut total = 0;
    for _ in 0..n {
        out.clear();
        for part in input.chunks(chunk) {
            // `load1m` as the proxy streams: a chunk that cannot reach the resolver is only
            // lexed. The other cases feed every chunk (their output copy included).
            if !streamed || scanner.lex(part).unwrap().is_none() {
                total += scanner.feed(part, &mut out, &mut resolve).unwrap();
            }
        }
        scanner.finish(&mut out).unwrap();
    }
    println!("{} bytes, {total} templates", input.len());
}
