//! Scanner throughput in bytes/s: 1 KiB, 64 KiB and 1 MiB JSON bodies with 0, 1 and 100
//! templates, fed in 16 KiB chunks as the proxy receives them, and the proxy's hot cases: the
//! 1 KiB body of the load bench (`benches/load/bodies.py`) with its 4 card templates, and its
//! 64 KiB body read whole, scanned with `feed` then `finish` and with `feed_last`. Beside them,
//! the form scanner on client-written forms (`form/…`) and the XML scanner on SOAP envelopes
//! (`xml/…`) of the same sizes.
//!
//! A body is an order-like document of items of about 128 bytes each; templates replace the
//! `pan` field of evenly spaced items. A 1 KiB body has room for 8 items, so the "1 KiB, 100
//! templates" case grows to 100 items (about 13 KiB); throughput is over the real size.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use paycred::secret::Revealed;
use std::hint::black_box;
use std::time::Duration;

use criterion::measurement::WallTime;
use criterion::{
    criterion_group, criterion_main, BenchmarkGroup, BenchmarkId, Criterion, Throughput,
};
use paycred::template::{BodyScanner, Format, ResolveError, Scanner, TemplateRef};

const CHUNK: usize = 16 * 1024;
#[path = "common/bodies.rs"]
mod bodies;
use bodies::{body, load_bench_body};

fn scanner(c: &mut Criterion) {
    let mut group = c.benchmark_group("scanner");
    group
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(30);
    let cases = [("1KiB", 1024), ("64KiB", 64 * 1024), ("1MiB", 1024 * 1024)]
        .into_iter()
        .flat_map(|(name, size)| [0, 1, 100].map(|t| (name, t, body(size, t))))
        .chain([("load_1KiB", 4, load_bench_body(5))]);
    assert_eq!(load_bench_body(5).len(), 914);
    for (name, templates, input) in cases {
        assert_eq!(Scanner::has_templates(&input), templates > 0);
        in_chunks(&mut group, name, Format::Json, templates, &input);
    }
    // The proxy's read-whole path: a body of at most 64 KiB in one call.
    let input = load_bench_body(580);
    assert_eq!(input.len(), 64_739);
    group.throughput(Throughput::Bytes(input.len() as u64));
    let mut scanner = Scanner::new();
    let mut out = Vec::with_capacity(input.len() * 2);
    let mut resolve =
        |_: &TemplateRef| Ok::<_, ResolveError>(Revealed::Number("4242424242424242".into()));
    for (name, last) in [("feed_finish", false), ("feed_last", true)] {
        group.bench_function(BenchmarkId::new("load_64KiB_whole", name), |b| {
            b.iter(|| {
                out.clear();
                let n = if last {
                    scanner.feed_last(&input, &mut out, &mut resolve).unwrap()
                } else {
                    let n = scanner.feed(&input, &mut out, &mut resolve).unwrap();
                    scanner.finish(&mut out).unwrap();
                    n
                };
                assert_eq!(n, 4);
                black_box(&out);
            })
        });
    }
    group.finish();
}

/// Benches `input` fed to a scanner of `format` in [`CHUNK`]-sized chunks, as the proxy
/// receives a streamed body, expecting `templates` substitutions.
fn in_chunks(
    group: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    format: Format,
    templates: usize,
    input: &[u8],
) {
    group.throughput(Throughput::Bytes(input.len() as u64));
    let mut scanner = BodyScanner::new(format);
    let mut out = Vec::with_capacity(input.len() * 2);
    let mut resolve =
        |_: &TemplateRef| Ok::<_, ResolveError>(Revealed::Number("4242424242424242".into()));
    group.bench_with_input(
        BenchmarkId::new(name, format!("{templates}_templates")),
        input,
        |b, input| {
            b.iter(|| {
                out.clear();
                let mut n = 0;
                for chunk in input.chunks(CHUNK) {
                    n += scanner.feed(chunk, &mut out, &mut resolve).unwrap();
                }
                scanner.finish(&mut out).unwrap();
                assert_eq!(n, templates);
                black_box(&out);
            })
        },
    );
}

/// A form of about `size` bytes as a client writes it (Stripe-style nested keys, values
/// percent-encoded), with `templates` percent-encoded card templates.
fn form_body(size: usize, templates: usize) -> Vec<u8> {
    let template =
        "%7B%7B+paymentMethod%3A+pm_1+%7C+type%3A+%27pan%27+%7C+json%3A+%27%24.number%27+%7D%7D";
    let mut pairs = Vec::new();
    let mut len = 0;
    let mut i = 0;
    while len < size || i < templates {
        let pair = if i < templates {
            format!("items[{i}][card][number]={template}")
        } else {
            format!("metadata[order_{i}][note]=Delivery+before+noon%2C+ring+twice+%26+leave+at+door+{i}")
        };
        len += pair.len() + 1;
        pairs.push(pair);
        i += 1;
    }
    pairs.join("&").into_bytes()
}

/// A SOAP envelope of about `size` bytes (a request message of order lines with attributes
/// and escaped text), with `templates` card templates in element text.
fn xml_body(size: usize, templates: usize) -> Vec<u8> {
    let template = "{{ paymentMethod: pm_1 | type: 'pan' | json: '$.number' }}";
    let mut body = String::from(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<soapenv:Envelope \
         xmlns:soapenv=\"http://schemas.xmlsoap.org/soap/envelope/\"><soapenv:Body>\
         <requestMessage xmlns=\"urn:schemas-cybersource-com:transaction-data-1.219\">",
    );
    let mut i = 0;
    while body.len() < size || i < templates {
        if i < templates {
            body.push_str(&format!(
                "<card><accountNumber>{template}</accountNumber></card>"
            ));
        } else {
            body.push_str(&format!(
                "<item id=\"{i}\"><productName>Widget &amp; co. {i}</productName>\
                 <unitPrice>19.99</unitPrice><quantity>{q}</quantity></item>",
                q = i % 7
            ));
        }
        i += 1;
    }
    body.push_str("</requestMessage></soapenv:Body></soapenv:Envelope>");
    body.into_bytes()
}

/// The scanner of `format` on bodies of 1 KiB, 64 KiB and 1 MiB made by `make` (size,
/// templates), without templates and with one.
fn sizes(c: &mut Criterion, group: &str, format: Format, make: fn(usize, usize) -> Vec<u8>) {
    let mut group = c.benchmark_group(group);
    group
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(30);
    for (name, size) in [("1KiB", 1024), ("64KiB", 64 * 1024), ("1MiB", 1024 * 1024)] {
        for templates in [0, 1] {
            in_chunks(&mut group, name, format, templates, &make(size, templates));
        }
    }
    group.finish();
}

fn form(c: &mut Criterion) {
    sizes(c, "form", Format::Form, form_body);
}

fn xml(c: &mut Criterion) {
    sizes(c, "xml", Format::Xml, xml_body);
}

criterion_group!(benches, scanner, form, xml);
criterion_main!(benches);
