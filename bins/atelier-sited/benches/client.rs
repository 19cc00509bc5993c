//! What the client costs, as ratios against baselines run in the same process:
//! - `GET /v1/sites` through `Client::send` (paired, one connection per call) against a bare
//!   hyper request on a fresh connection to the same real sited;
//! - the SSE parser over 100,000 sited-style frames fed in 16 KiB reads, against splitting the
//!   whole text on blank lines in one go (the least work any parser can do).
//!
//! Run: `cargo bench -p atelier-sited --bench client` (after `cargo build --release --workspace
//! --bins`: the instance's settings name the built shim, test agent and atelier-build).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a benchmark panics on a broken fixture"
)]

/// The ctl tests' instance: a real sited `Router` on a socket of its own.
#[path = "../tests/ctl/support.rs"]
mod instance;
#[allow(
    dead_code,
    reason = "the bench uses the settings part of the tests' support"
)]
#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use atelier_site_client::{NewSite, Route, Slug, SseParser};
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};

const CALLS: usize = 2_000;
const FRAMES: u64 = 100_000;
const READ: usize = 16 * 1024;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index]
}

fn report(name: &str, mut samples: Vec<Duration>) -> (Duration, Duration) {
    samples.sort();
    let (p50, p99) = (percentile(&samples, 0.5), percentile(&samples, 0.99));
    println!("{name:<34} p50 {p50:>10.1?}  p99 {p99:>10.1?}");
    (p50, p99)
}

async fn bare_get(socket: &std::path::Path) -> Bytes {
    let stream = tokio::net::UnixStream::connect(socket).await.unwrap();
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(connection);
    let request = hyper::Request::get("/publication/site_builder/v1/sites")
        .header("host", "site-builder.invalid")
        .header("authorization", format!("Bearer {}", support::TOKEN))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    response.into_body().collect().await.unwrap().to_bytes()
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let instance = instance::instance().await;
        let client = instance.client();
        for slug in ["alpha", "beta", "gamma"] {
            client
                .create_site(NewSite {
                    slug: Slug::parse(slug).unwrap(),
                    name: slug.into(),
                    domain: format!("{slug}.example.org"),
                    template: None,
                    driver: None,
                })
                .await
                .unwrap();
        }
        // Warm both paths, and check they read the same body.
        let bare = bare_get(&instance.socket).await;
        let ours = client.send(&Route::ListSites).await.unwrap().body;
        assert_eq!(bare, ours);
        let (mut bare_samples, mut client_samples) = (Vec::new(), Vec::new());
        for _ in 0..CALLS {
            let start = Instant::now();
            bare_get(&instance.socket).await;
            bare_samples.push(start.elapsed());
            let start = Instant::now();
            client.send(&Route::ListSites).await.unwrap();
            client_samples.push(start.elapsed());
        }
        println!("GET /v1/sites ({CALLS} calls each, three sites, interleaved)");
        let (bare50, bare99) = report("  bare hyper, fresh connection", bare_samples);
        let (ours50, ours99) = report("  atelierctl Client::send", client_samples);
        println!(
            "  ratio client/bare: p50 {:.2}, p99 {:.2}",
            ours50.as_secs_f64() / bare50.as_secs_f64(),
            ours99.as_secs_f64() / bare99.as_secs_f64()
        );
    });

    let mut text = String::new();
    for seq in 0..FRAMES {
        let data = format!(
            r#"{{"seq":{seq},"ts":"2026-07-15T10:20:30.123Z","body":{{"type":"text","text":"I'll edit src/main.ts so that the collections list pages through the API ({seq})"}}}}"#
        );
        text.push_str(&format!("id: {seq}\ndata: {data}\n\n"));
        if seq % 1000 == 0 {
            text.push_str(": ping\n\n");
        }
    }
    let bytes = text.as_bytes();
    let mut baseline = Vec::new();
    let mut parsed = Vec::new();
    for _ in 0..5 {
        let start = Instant::now();
        let blocks = text.split("\n\n").filter(|b| !b.is_empty()).count();
        baseline.push(start.elapsed());
        assert_eq!(blocks as u64, FRAMES + FRAMES.div_ceil(1000));
        let start = Instant::now();
        let mut parser = SseParser::new();
        let mut frames = 0u64;
        for read in bytes.chunks(READ) {
            frames += parser.push(read).unwrap().len() as u64;
        }
        parser.finish().unwrap();
        parsed.push(start.elapsed());
        assert_eq!(frames, FRAMES + FRAMES.div_ceil(1000));
    }
    println!(
        "SSE: {FRAMES} frames, {:.1} MiB, {} KiB reads (best of 5)",
        bytes.len() as f64 / 1048576.0,
        READ / 1024
    );
    let best = |v: &[Duration]| v.iter().min().copied().unwrap();
    let (base, ours) = (best(&baseline), best(&parsed));
    println!("  split on blank lines              {base:>10.1?}");
    println!(
        "  SseParser::push                   {ours:>10.1?}  ({:.0} MiB/s)",
        bytes.len() as f64 / 1048576.0 / ours.as_secs_f64()
    );
    println!(
        "  ratio parser/split: {:.2}",
        ours.as_secs_f64() / base.as_secs_f64()
    );
}
