//! Latency of `GET /health` through sited's router on `atelier-http`, against two baselines in
//! the same process: a bare hyper server answering a constant body, and `atelier-http` serving
//! the same constant. Ratios, not absolute times, are the result: they say what our serving
//! layer and sited's routing add on this machine.
//!
//! Run: `cargo bench -p atelier-sited --bench health` (ATELIER_BENCH_REQUESTS sets the count).

#![expect(
    clippy::unwrap_used,
    reason = "a benchmark stops at the first broken fixture"
)]

use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use atelier_http::{full_body, Listener};
use atelier_sited::{RawSettings, Router};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full};
use hyper_util::rt::TokioIo;
use tokio::net::{UnixListener, UnixStream};

const DEFAULT_REQUESTS: usize = 20_000;
const WARMUP: usize = 1_000;

struct Summary {
    name: &'static str,
    p50: Duration,
    p99: Duration,
    mean: Duration,
}

fn main() {
    let requests = std::env::var("ATELIER_BENCH_REQUESTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_REQUESTS);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let results = runtime.block_on(async {
        let bare = start_bare_hyper(dir.path().join("bare.sock"));
        let http = start_atelier_http(dir.path().join("http.sock"));
        let sited = start_sited(dir.path().join("sited.sock"));
        let path = "/publication/site_builder/health";
        // Interleave the three so drift in machine load touches each alike.
        let mut runs = vec![Vec::new(), Vec::new(), Vec::new()];
        for _ in 0..4 {
            runs[0].extend(measure(&bare, path, requests / 4).await);
            runs[1].extend(measure(&http, path, requests / 4).await);
            runs[2].extend(measure(&sited, path, requests / 4).await);
        }
        [
            "bare hyper (baseline)",
            "atelier-http, constant body",
            "sited GET /health",
        ]
        .into_iter()
        .zip(runs)
        .map(|(name, samples)| summarize(name, samples))
        .collect::<Vec<_>>()
    });
    let baseline = &results[0];
    println!("{requests} sequential requests per server on one keep-alive unix connection");
    println!(
        "{:<30} {:>10} {:>10} {:>10} {:>12}",
        "server", "p50", "p99", "mean", "mean ratio"
    );
    for r in &results {
        println!(
            "{:<30} {:>10.1?} {:>10.1?} {:>10.1?} {:>11.2}x",
            r.name,
            r.p50,
            r.p99,
            r.mean,
            r.mean.as_secs_f64() / baseline.mean.as_secs_f64()
        );
    }
    println!(
        "added by atelier-http + sited over bare hyper: p50 {:?}, p99 {:?}",
        results[2].p50.saturating_sub(baseline.p50),
        results[2].p99.saturating_sub(baseline.p99)
    );
}

fn summarize(name: &'static str, mut samples: Vec<Duration>) -> Summary {
    samples.sort_unstable();
    let at = |q: f64| samples[((samples.len() as f64 * q) as usize).min(samples.len() - 1)];
    let mean = samples.iter().sum::<Duration>() / samples.len() as u32;
    Summary {
        name,
        p50: at(0.50),
        p99: at(0.99),
        mean,
    }
}

async fn measure(socket: &Path, path: &str, requests: usize) -> Vec<Duration> {
    let stream = UnixStream::connect(socket).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    let mut samples = Vec::with_capacity(requests);
    for i in 0..WARMUP + requests {
        let request = hyper::Request::get(path)
            .header("host", "bench")
            .body(Empty::<Bytes>::new())
            .unwrap();
        let started = Instant::now();
        sender.ready().await.unwrap();
        let response = sender.send_request(request).await.unwrap();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        let elapsed = started.elapsed();
        assert!(!body.is_empty());
        if i >= WARMUP {
            samples.push(elapsed);
        }
    }
    samples
}

fn start_bare_hyper(socket: PathBuf) -> PathBuf {
    let listener = UnixListener::bind(&socket).unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(|_request| async {
                    Ok::<_, Infallible>(hyper::Response::new(Full::new(Bytes::from_static(
                        br#"{"status":"ok"}"#,
                    ))))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    socket
}

fn start_atelier_http(socket: PathBuf) -> PathBuf {
    let listener = Listener::from(UnixListener::bind(&socket).unwrap());
    tokio::spawn(atelier_http::serve(
        listener,
        |_request| async {
            hyper::Response::new(full_body(Bytes::from_static(br#"{"status":"ok"}"#)))
        },
        std::future::pending(),
        Duration::from_secs(1),
    ));
    socket
}

fn start_sited(socket: PathBuf) -> PathBuf {
    // /health touches none of these; they only have to validate.
    let state = socket.parent().unwrap().to_path_buf();
    let settings = RawSettings {
        instance: "bench".into(),
        service_token: Some("b".repeat(40)),
        sites_root: Some(state.join("sites")),
        audit_dir: Some(state.join("audit")),
        site_table_file: Some(state.join("sites.json")),
        publication_api_url: Some("http://127.0.0.1:9/api".into()),
        templates_dir: Some(state.join("templates")),
        agent_confinement: Some("none".into()),
        deployment: Some("development".into()),
        agent_state_root: Some(state.clone()),
        ..RawSettings::default()
    }
    .validate()
    .unwrap();
    let router = Router::new(&settings).unwrap();
    let listener = Listener::from(UnixListener::bind(&socket).unwrap());
    tokio::spawn(atelier_http::serve(
        listener,
        move |request| {
            let router = router.clone();
            async move { router.handle(request).await }
        },
        std::future::pending(),
        Duration::from_secs(1),
    ));
    socket
}
