//! Counts the response guard's instructions a byte under valgrind on the answers of
//! `benches/response_guard.rs`: `valgrind --tool=cachegrind --cache-sim=no
//! target/release/examples/guard_instructions CASE N` passes the answer through an armed
//! guard (`mask`) N times, in 16 KiB chunks. The difference between two values of N, over the
//! bytes passed in between, is the cost a byte. CASE: `1k` or `64k` (the order-like JSON
//! answer, its card number absent), `1k-found` or `64k-found` (the number in it once),
//! `1k-cvc` or `64k-cvc` (a substituted CVC sought too, absent).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use bytes::Bytes;
use paycred::config::ResponseGuardMode;
use std::hint::black_box;

#[path = "../../common/bodies.rs"]
#[allow(dead_code)] // The load bench's body is not used here.
mod bodies;
use bodies::{body, TEMPLATE};

#[path = "../../common/guard.rs"]
mod guard;
use guard::{arm, guard, NUMBER};

fn main() {
    let case = std::env::args().nth(1).unwrap_or_else(|| "1k".to_owned());
    let n: usize = std::env::args().nth(2).map_or(1, |a| a.parse().unwrap());
    let (size, kind) = case.split_once('-').unwrap_or((&case, ""));
    let size = match size {
        "1k" => 1024,
        "64k" => 64 * 1024,
        _ => panic!("unknown case {case}"),
    };
    let answer = match kind {
        "found" => String::from_utf8(body(size, 1))
            .unwrap()
            .replace(TEMPLATE, NUMBER)
            .into_bytes(),
        "" | "cvc" => body(size, 0),
        _ => panic!("unknown case {case}"),
    };
    let chunks: Vec<Bytes> = answer
        .chunks(16 * 1024)
        .map(Bytes::copy_from_slice)
        .collect();
    let cvc = kind == "cvc";
    let mut g = guard(ResponseGuardMode::Mask, false, cvc);
    let mut sent = 0;
    for _ in 0..n {
        arm(&mut g, cvc);
        for (i, chunk) in chunks.iter().enumerate() {
            let out = g
                .body(Some(black_box(chunk.clone())), i + 1 == chunks.len())
                .unwrap();
            sent += out.map_or(0, |b| b.len());
        }
    }
    println!("{} bytes an answer, {sent} sent", answer.len());
}
