//! The response guard's cost over a target's answer: the order-like JSON bodies of the
//! scanner bench (`benches/common/bodies.rs`: ids, quantities, prices) at 1 KiB and 64 KiB,
//! fed in 16 KiB chunks as the relay reads them, through
//! [`paycred::proxy::guard::ResponseGuard::body`]:
//!
//! - `copy`: the baseline of the same run, each chunk copied once (the least a relay does
//!   with an answer's bytes);
//! - `off`: the guard off (the answer handed on as it came);
//! - `mask`: the request's one card number looked for, not in the answer;
//! - `mask_any_card`: the same, and any Luhn-valid 13-19 digit run;
//! - `mask_found`: the number is in the answer once and is masked;
//! - `mask_cvc`: the number and a substituted CVC looked for, neither in the answer (every
//!   run of 3 digits or more is then read whole).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use paycred::config::ResponseGuardMode;
use paycred::proxy::guard::ResponseGuard;
use std::hint::black_box;
use std::time::Duration;

#[path = "common/bodies.rs"]
#[allow(dead_code)] // The load bench's body is not used here.
mod bodies;
use bodies::{body, TEMPLATE};

#[path = "common/guard.rs"]
mod guard;
use guard::{arm, guard, NUMBER};

const CHUNK: usize = 16 * 1024;
/// The answer in the chunks the relay would read.
fn chunks(answer: &[u8]) -> Vec<Bytes> {
    answer.chunks(CHUNK).map(Bytes::copy_from_slice).collect()
}

fn through(g: &mut ResponseGuard, cvc: bool, chunks: &[Bytes]) -> usize {
    arm(g, cvc);
    let mut sent = 0;
    for (i, chunk) in chunks.iter().enumerate() {
        let out = g.body(Some(chunk.clone()), i + 1 == chunks.len()).unwrap();
        sent += out.map_or(0, |b| b.len());
    }
    sent
}

fn response_guard(c: &mut Criterion) {
    let mut group = c.benchmark_group("response_guard");
    group
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    for (name, size) in [("1KiB", 1024), ("64KiB", 64 * 1024)] {
        let clean = chunks(&body(size, 0));
        let with_number = chunks(
            &String::from_utf8(body(size, 1))
                .unwrap()
                .replace(TEMPLATE, NUMBER)
                .into_bytes(),
        );
        group.throughput(Throughput::Bytes(size as u64));
        group.bench_function(BenchmarkId::new("copy", name), |b| {
            b.iter(|| {
                let copied: Vec<Bytes> = black_box(&clean)
                    .iter()
                    .map(|c| Bytes::copy_from_slice(c))
                    .collect();
                copied.len()
            })
        });
        for (case, mode, any_card, cvc, answer) in [
            ("off", ResponseGuardMode::Off, false, false, &clean),
            ("mask", ResponseGuardMode::Mask, false, false, &clean),
            (
                "mask_any_card",
                ResponseGuardMode::Mask,
                true,
                false,
                &clean,
            ),
            (
                "mask_found",
                ResponseGuardMode::Mask,
                false,
                false,
                &with_number,
            ),
            ("mask_cvc", ResponseGuardMode::Mask, false, true, &clean),
        ] {
            let mut g = guard(mode, any_card, cvc);
            group.bench_function(BenchmarkId::new(case, name), |b| {
                b.iter(|| through(&mut g, cvc, black_box(answer)))
            });
        }
    }
    group.finish();
}

criterion_group!(benches, response_guard);
criterion_main!(benches);
