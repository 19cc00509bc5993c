//! What the model relay costs an agent, against the same requests sent to the provider
//! directly, in one process: a provider stand-in on loopback (plain HTTP, answering at once),
//! the relay serving its unix socket as the gate does (the route's checks, the body read and
//! vetted, the key added, reqwest upstream, the answer streamed back), and one keep-alive
//! client per path.
//!
//! Measured, the paths taking turns so a slow spell of the machine falls on both:
//! - a Claude Code-sized request (about 60 KiB: a system prompt, 20 tools with schemas, 40
//!   messages) answered by a stream of 200 SSE events: time to the first byte of the answer
//!   and to its end, p50 and p99 over `BENCH_REQUESTS` (default 1,000) requests per path;
//! - a long answer (`BENCH_MIB`, default 256 MiB) streamed back: MB/s, the median of five
//!   rounds per path;
//! - the vetting alone ([`inspect`]) of that request and of a 32 MiB one (a long conversation
//!   at the relay's bound), against a bare parse of the same bytes that keeps nothing
//!   (`serde_json` into `IgnoredAny`).
//!
//! Reported as ratios of the relay's figure to the direct one's.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    missing_docs,
    reason = "a benchmark's setup failing is the end of the benchmark"
)]

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use atelier_gate::address::Policy;
use atelier_gate::mcp::McpDoor;
use atelier_gate::model::body::inspect;
use atelier_gate::model::{ModelApi, ModelDoor, ModelRoute, MAX_REQUEST_BODY};
use atelier_gate::relay::{serve, Relays};
use atelier_gate::serve::DecisionLog;
use atelier_proto::Door;
use atelier_sd::credentials::Secret;
use atelier_test_support::bulk::median;
use bytes::Bytes;
use futures_util::stream;
use http_body_util::{BodyExt as _, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use serde_json::json;
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};

/// The SSE events of a streamed answer.
const EVENTS: usize = 200;

/// Requests per path, before which each path warms up with [`WARMUP`].
const WARMUP: usize = 50;

/// Rounds of the long answer per path.
const ROUNDS: usize = 5;

/// One SSE event of the answer, about the size a model's text delta is.
const EVENT: &[u8] = b"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\
\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello, site.\"}}\n\n";

/// How long a long answer's chunks are.
const CHUNK: usize = 64 * 1024;

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name).map_or(default, |value| value.parse().unwrap())
}

/// A request the size Claude Code sends mid-turn, with `messages` messages of `text` each.
fn request_body(messages: usize, text: usize) -> Vec<u8> {
    let schema = json!({
        "type": "object",
        "properties": {
            "file_path": {"type": "string", "description": "The absolute path of the file"},
            "offset": {"type": "number"},
            "limit": {"type": "number"},
        },
        "required": ["file_path"],
    });
    let tools: Vec<_> = (0..20)
        .map(|i| json!({"name": format!("Tool{i}"), "description": "x".repeat(600), "input_schema": schema}))
        .collect();
    let messages: Vec<_> = (0..messages)
        .map(|i| match i % 2 {
            0 => json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": format!("toolu_{i}"), "content": "y".repeat(text)}]}),
            _ => json!({"role": "assistant", "content": [{"type": "tool_use", "id": format!("toolu_{i}"), "name": "Tool1", "input": {"file_path": "/w/index.html"}}]}),
        })
        .collect();
    serde_json::to_vec(&json!({
        "model": "claude-sonnet",
        "max_tokens": 32000,
        "stream": true,
        "system": [{"type": "text", "text": "z".repeat(20_000)}],
        "tools": tools,
        "messages": messages,
    }))
    .unwrap()
}

/// The provider stand-in: `POST …/v1/messages` gets [`EVENTS`] SSE events, `?mib=N` N MiB.
async fn provider() -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            stream.set_nodelay(true).unwrap();
            tokio::spawn(async move {
                let service =
                    hyper::service::service_fn(|request: hyper::Request<Incoming>| async move {
                        let mib = request
                            .uri()
                            .query()
                            .and_then(|query| query.strip_prefix("mib="))
                            .map(|mib| mib.parse::<usize>().unwrap());
                        // The whole request is read first, as a provider does.
                        request.into_body().collect().await.unwrap();
                        let chunks: Vec<Bytes> = match mib {
                            Some(mib) => {
                                let chunk = Bytes::from(vec![b'x'; CHUNK]);
                                vec![chunk; mib * 1024 * 1024 / CHUNK]
                            }
                            None => vec![Bytes::from_static(EVENT); EVENTS],
                        };
                        let body = StreamBody::new(stream::iter(
                            chunks
                                .into_iter()
                                .map(|chunk| Ok::<_, Infallible>(Frame::data(chunk))),
                        ));
                        Ok::<_, Infallible>(
                            hyper::Response::builder()
                                .header("content-type", "text/event-stream")
                                .body(body)
                                .unwrap(),
                        )
                    });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

/// The relay's socket, its one route to the provider at `addr` with a key.
fn relay(dir: &std::path::Path, addr: std::net::SocketAddr) -> std::path::PathBuf {
    let socket = dir.join("mcp.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    let log = Arc::new(DecisionLog::new(Door::Turn));
    let mcp = Arc::new(McpDoor::new("http://127.0.0.1:9/mcp", None, Arc::clone(&log)).unwrap());
    let route = ModelRoute {
        api: ModelApi::Anthropic,
        upstream: format!("http://{addr}"),
        credential: None,
        model: None,
    };
    let key = Secret::new("sk-bench".to_owned());
    let model = ModelDoor::new(vec![(route, Some(key))], log, Policy::default()).unwrap();
    tokio::spawn(serve(
        listener,
        Relays {
            mcp,
            model: Some(Arc::new(model)),
        },
    ));
    socket
}

/// One keep-alive client connection and the target prefix of its path.
struct Path {
    name: &'static str,
    sender: SendRequest<Full<Bytes>>,
    prefix: &'static str,
}

impl Path {
    /// A keep-alive client over `stream`, sending below `prefix`.
    async fn over<S>(stream: S, name: &'static str, prefix: &'static str) -> Path
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .unwrap();
        tokio::spawn(connection);
        Path {
            name,
            sender,
            prefix,
        }
    }

    async fn direct(addr: std::net::SocketAddr) -> Path {
        let stream = TcpStream::connect(addr).await.unwrap();
        stream.set_nodelay(true).unwrap();
        Path::over(stream, "direct", "").await
    }

    async fn relayed(socket: &std::path::Path) -> Path {
        let stream = UnixStream::connect(socket).await.unwrap();
        Path::over(stream, "relay", "/model/anthropic").await
    }

    /// Sends `body` to `/v1/messages` with `query`; the time to the first byte of the answer,
    /// to its end, and how many bytes it had.
    async fn send(&mut self, body: &Bytes, query: &str) -> (Duration, Duration, usize) {
        let request = hyper::Request::post(format!("{}/v1/messages{query}", self.prefix))
            .header("host", "bench")
            .header("content-type", "application/json")
            .header("x-api-key", "placeholder")
            .body(Full::new(body.clone()))
            .unwrap();
        let started = Instant::now();
        self.sender.ready().await.unwrap();
        let response = self.sender.send_request(request).await.unwrap();
        assert_eq!(response.status(), 200, "{}", self.name);
        let mut body = response.into_body();
        let mut first = None;
        let mut bytes = 0;
        while let Some(frame) = body.frame().await {
            if let Ok(data) = frame.unwrap().into_data() {
                first.get_or_insert_with(|| started.elapsed());
                bytes += data.len();
            }
        }
        (first.unwrap(), started.elapsed(), bytes)
    }
}

fn percentile(samples: &mut [Duration], at: f64) -> Duration {
    samples.sort_unstable();
    samples[((samples.len() - 1) as f64 * at).round() as usize]
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

/// The median time of `runs` calls of `work`.
fn timed(runs: usize, mut work: impl FnMut()) -> f64 {
    median(
        (0..runs)
            .map(|_| {
                let started = Instant::now();
                work();
                started.elapsed().as_secs_f64()
            })
            .collect(),
    )
}

fn main() {
    let requests = env_or("BENCH_REQUESTS", 1_000);
    let mib = env_or("BENCH_MIB", 256);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let body = Bytes::from(request_body(40, 1_000));
    println!(
        "model relay against the provider directly ({} KiB request, {EVENTS} events back; \
         {requests} requests per path; the paths take turns)",
        body.len() / 1024
    );
    runtime.block_on(async {
        let addr = provider().await;
        let socket = relay(dir.path(), addr);
        let mut paths = [Path::direct(addr).await, Path::relayed(&socket).await];
        let mut first: [Vec<Duration>; 2] = Default::default();
        let mut whole: [Vec<Duration>; 2] = Default::default();
        for round in 0..WARMUP + requests {
            for (at, path) in paths.iter_mut().enumerate() {
                let (to_first, to_end, bytes) = path.send(&body, "").await;
                assert_eq!(bytes, EVENT.len() * EVENTS);
                if round >= WARMUP {
                    first[at].push(to_first);
                    whole[at].push(to_end);
                }
            }
        }
        for (what, samples) in [("first byte", &mut first), ("whole answer", &mut whole)] {
            let [direct, relay] = samples;
            let (d50, d99) = (percentile(direct, 0.5), percentile(direct, 0.99));
            let (r50, r99) = (percentile(relay, 0.5), percentile(relay, 0.99));
            println!(
                "  {what:<12} direct p50 {:.3} ms p99 {:.3} ms | relay p50 {:.3} ms p99 {:.3} ms \
                 | relay/direct p50 {:.2}x p99 {:.2}x | added p50 {:.3} ms",
                ms(d50),
                ms(d99),
                ms(r50),
                ms(r99),
                ms(r50) / ms(d50),
                ms(r99) / ms(d99),
                ms(r50) - ms(d50),
            );
        }

        let query = format!("?mib={mib}");
        let mut rates: [Vec<f64>; 2] = Default::default();
        for _ in 0..ROUNDS {
            for (at, path) in paths.iter_mut().enumerate() {
                let (_, took, bytes) = path.send(&body, &query).await;
                assert_eq!(bytes, mib * 1024 * 1024);
                rates[at].push(bytes as f64 / 1e6 / took.as_secs_f64());
            }
        }
        let [direct, relay] = rates.map(median);
        println!(
            "  long answer  {mib} MiB: direct {direct:.0} MB/s | relay {relay:.0} MB/s | \
             relay/direct {:.2}x",
            relay / direct
        );
    });

    // 1,000 tool results of the same length fill the bound, short of the rest of the body.
    let long = request_body(2_000, (MAX_REQUEST_BODY - 1_000_000) / 1_000);
    assert!(long.len() <= MAX_REQUEST_BODY, "{}", long.len());
    println!("body vetting against a bare parse of the same bytes (medians)");
    for (what, bytes, runs) in [("request", &body[..], 1_000), ("32 MiB", &long[..], 9)] {
        let parse = timed(runs, || {
            serde_json::from_slice::<serde::de::IgnoredAny>(bytes).unwrap();
        });
        let vet = timed(runs, || inspect(bytes, None).unwrap());
        let mb = bytes.len() as f64 / 1e6;
        println!(
            "  {what:<8} {:.2} MB: parse {:.0} MB/s | vet {:.0} MB/s ({:.3} ms) | vet/parse {:.2}x",
            mb,
            mb / parse,
            mb / vet,
            vet * 1e3,
            vet / parse,
        );
    }
}
