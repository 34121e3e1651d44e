//! The audit chain's hash functions on one proxy entry (the previous hash and a 168-byte
//! event, like the one the proxy writes a request): SHA-256 against BLAKE3 on this CPU. By
//! default the writer picks SHA-256 where the CPU has SHA instructions and BLAKE3 elsewhere
//! (`paycred::audit::chain`); this shows what that choice is worth here. Compare the
//! two lines of one run, not runs. `OPENSSL_ia32cap=":~0x20000000"` masks the SHA
//! extensions from OpenSSL's SHA-256, to see a CPU without them.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use paycred::audit::chain::HashFunction;
use paycred::audit::AuditEvent;

fn audit_chain(c: &mut Criterion) {
    let mut group = c.benchmark_group("audit_chain");
    group
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(30);
    let event = AuditEvent {
        at_micros: 1_763_900_000_000_000,
        action: "proxy.use".into(),
        project: "bench".into(),
        entity: "bench".into(),
        resource: "host=api.example.com status=200 templates=4 revealed=pm_0195f3a1b2c3".into(),
    };
    let event_json = serde_json::to_vec(&event).unwrap();
    for (name, function) in [
        ("sha256", HashFunction::Sha256),
        ("blake3", HashFunction::Blake3),
    ] {
        let prev = function.hash("", b"{}");
        group.throughput(Throughput::Bytes((prev.len() + event_json.len()) as u64));
        group.bench_function(name, |b| {
            b.iter(|| black_box(function.hash(black_box(&prev), black_box(&event_json))));
        });
    }
    group.finish();
}

criterion_group!(benches, audit_chain);
criterion_main!(benches);
