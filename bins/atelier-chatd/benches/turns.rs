//! chatd's added latency and footprint: 1,000 sequential text turns through chatd's router on
//! a unix socket (tool loop, Anthropic driver, SQLite) against the same scripted provider
//! stream read directly with reqwest, then many turns held open at once with the RSS.
//!
//! Everything runs in this one process on the machine's cores: the provider, chatd and the
//! clients share them, so the numbers are an upper bound on what chatd adds.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

// The CMS stand-in answers the session check (once per 30 s: chatd caches the answer).
#[path = "../tests/support/mod.rs"]
mod support;

use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use atelier_chatd::caller::Caller;
use atelier_chatd::runtime::{LoopRunner, PrepareFuture, ProviderSetup, Providers};
use atelier_chatd::store::{Conversation, Store};
use atelier_chatd::{RawSettings, Router};
use atelier_http::{BoxError, Response};
use atelier_llm::{AnthropicDriver, Driver, Endpoint, ProviderKind};
use bytes::Bytes;
use futures_util::StreamExt;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::{Method, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::net::UnixStream;
use tokio::sync::{mpsc, Notify};

const TOKEN: &str = "bench-service-token-0000000000000000000000000";
const TURNS: usize = 1_000;
const WARMUP: usize = 50;
const CONCURRENT: usize = 200;
/// Text deltas per provider answer.
const DELTAS: usize = 50;

// ---------------------------------------------------------------------------------------------
// The scripted provider: Anthropic's wire, one SSE event per body chunk; while `hold` is set,
// it stops after the first text delta until `release` is notified.

struct Provider {
    base_url: String,
    hold: Arc<AtomicBool>,
    release: Arc<Notify>,
}

fn transcript() -> Vec<Bytes> {
    let mut events = vec![
        json!({"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-bench","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":12,"output_tokens":1}}}),
        json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
    ];
    for n in 0..DELTAS {
        events.push(json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":format!("word{n} ")}}));
    }
    events.push(json!({"type":"content_block_stop","index":0}));
    events.push(json!({"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":DELTAS}}));
    events.push(json!({"type":"message_stop"}));
    events
        .into_iter()
        .map(|event| {
            let kind = event["type"].as_str().unwrap().to_owned();
            Bytes::from(format!("event: {kind}\ndata: {event}\n\n"))
        })
        .collect()
}

async fn start_provider() -> Provider {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base_url = format!("http://{}", listener.local_addr().unwrap());
    let hold = Arc::new(AtomicBool::new(false));
    let release = Arc::new(Notify::new());
    let events = Arc::new(transcript());
    let (held, released) = (Arc::clone(&hold), Arc::clone(&release));
    let handler = move |request: atelier_http::Request| {
        let (events, hold, release) = (
            Arc::clone(&events),
            Arc::clone(&held),
            Arc::clone(&released),
        );
        async move {
            let _ = atelier_http::read_body(request.into_body(), 1 << 22).await;
            let (tx, rx) = mpsc::channel::<Result<Frame<Bytes>, BoxError>>(8);
            tokio::spawn(async move {
                for (index, event) in events.iter().enumerate() {
                    if index == 3 && hold.load(Ordering::SeqCst) {
                        let released = release.notified();
                        if hold.load(Ordering::SeqCst) {
                            released.await;
                        }
                    }
                    if tx.send(Ok(Frame::data(event.clone()))).await.is_err() {
                        return;
                    }
                }
            });
            let frames = futures_util::stream::unfold(rx, |mut rx| async move {
                rx.recv().await.map(|frame| (frame, rx))
            });
            let mut response = Response::new(BodyExt::boxed(StreamBody::new(frames)));
            response
                .headers_mut()
                .insert("content-type", "text/event-stream".parse().unwrap());
            Ok::<_, Infallible>(response)
        }
    };
    // Its own accept loop, to set TCP_NODELAY as a real provider's front end does: without it
    // the small SSE writes meet delayed ACKs and every stream waits 40 ms on loopback.
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            stream.set_nodelay(true).unwrap();
            let service = hyper::service::service_fn(handler.clone());
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service),
            );
        }
    });
    Provider {
        base_url,
        hold,
        release,
    }
}

struct BenchProviders {
    endpoint: Endpoint,
}

impl Providers for BenchProviders {
    fn prepare(&self, _: &Caller, _: &Conversation) -> PrepareFuture {
        let driver: Arc<dyn Driver> = Arc::new(AnthropicDriver::new(self.endpoint.clone()));
        Box::pin(async move {
            Ok(ProviderSetup::known(
                // Priced by nothing: the bench measures latency, not money.
                ProviderKind::Ollama,
                driver,
                ProviderKind::Anthropic.static_capabilities(),
            ))
        })
    }
}

// ---------------------------------------------------------------------------------------------
// chatd on a unix socket, and a browser.

fn start_chatd(dir: &Path, provider: &Provider, client: &reqwest::Client) -> PathBuf {
    let socket = dir.join("chatd.sock");
    let database = dir.join("chat.sqlite3");
    let settings = RawSettings {
        database: Some(database.clone()),
        public_origins: vec!["https://cms.example".into()],
        service_token: Some(TOKEN.into()),
        cms_origin: Some(support::cms_origin()),
        ..RawSettings::default()
    }
    .validate()
    .unwrap();
    let endpoint = Endpoint::new(client.clone(), provider.base_url.clone(), Some("sk".into()));
    let store = Arc::new(Store::open(&database).unwrap());
    let runner = LoopRunner::new(Arc::new(BenchProviders { endpoint }), Vec::new());
    let router = Router::new(&settings, store, Arc::new(runner)).unwrap();
    let listener = tokio::net::UnixListener::bind(&socket).unwrap();
    tokio::spawn(atelier_http::serve(
        listener.into(),
        move |request| {
            let router = router.clone();
            async move { router.handle(request).await }
        },
        std::future::pending(),
        Duration::from_secs(1),
    ));
    socket
}

async fn send(socket: &Path, method: Method, path: &str, body: &Value) -> (StatusCode, Incoming) {
    let stream = UnixStream::connect(socket).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(async move {
        let _ = connection.await;
    });
    let request = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header("host", "chatd")
        .header("authorization", format!("Bearer {TOKEN}"))
        .header("cookie", support::cookie_for("bench", "ai.chat"))
        .header("origin", "https://cms.example")
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    (response.status(), response.into_body())
}

async fn new_conversation(socket: &Path) -> String {
    let body = json!({"scope": "site", "credentialId": "cred", "modelId": "claude-bench"});
    let (status, response) = send(socket, Method::POST, "/admin/api/ai/conversations", &body).await;
    assert_eq!(status, StatusCode::CREATED);
    let bytes = response.collect().await.unwrap().to_bytes();
    let value: Value = serde_json::from_slice(&bytes).unwrap();
    value["conversation"]["id"].as_str().unwrap().to_owned()
}

/// One turn's timings from the request: the first model byte, and the end.
struct Timing {
    first: Duration,
    end: Duration,
    events: usize,
}

/// Reads chatd's NDJSON until `done`; the first model byte is the first `text` line
/// (`bridgeReady` comes from chatd itself, before the provider is asked).
async fn chatd_turn(socket: &Path, conversation: &str, first_seen: Option<&AtomicUsize>) -> Timing {
    let body = json!({"conversationId": conversation, "content": [{"kind": "text", "text": "Say something"}]});
    let started = Instant::now();
    let (status, mut response) = send(socket, Method::POST, "/admin/api/ai/chat/site", &body).await;
    assert_eq!(status, StatusCode::OK);
    let (mut first, mut events, mut buffer) = (None, 0, Vec::new());
    loop {
        let frame = response
            .frame()
            .await
            .expect("the stream ended early")
            .unwrap();
        let Ok(data) = frame.into_data() else {
            continue;
        };
        buffer.extend_from_slice(&data);
        while let Some(end) = buffer.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = buffer.drain(..=end).collect();
            let line: Value = serde_json::from_slice(&line).unwrap();
            events += 1;
            match line["type"].as_str().unwrap() {
                "text" if first.is_none() => {
                    first = Some(started.elapsed());
                    if let Some(seen) = first_seen {
                        seen.fetch_add(1, Ordering::SeqCst);
                    }
                }
                "done" => {
                    return Timing {
                        first: first.expect("a text line"),
                        end: started.elapsed(),
                        events,
                    }
                }
                "error" => panic!("the turn failed: {line}"),
                _ => {}
            }
        }
    }
}

/// Reads the provider's SSE directly; the first model byte is the first text delta.
async fn direct_turn(client: &reqwest::Client, url: &str, body: &Value) -> Timing {
    let started = Instant::now();
    let response = client.post(url).json(body).send().await.unwrap();
    assert!(response.status().is_success());
    let mut stream = response.bytes_stream();
    let (mut first, mut events) = (None, 0);
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.unwrap();
        if first.is_none() && memchr(&chunk, b"text_delta") {
            first = Some(started.elapsed());
        }
        events += chunk.windows(2).filter(|w| w == b"\n\n").count();
    }
    Timing {
        first: first.expect("a text delta"),
        end: started.elapsed(),
        events,
    }
}

fn memchr(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank]
}

struct Stats {
    p50: f64,
    p99: f64,
}

fn stats(mut samples: Vec<f64>) -> Stats {
    samples.sort_by(f64::total_cmp);
    Stats {
        p50: percentile(&samples, 50.0),
        p99: percentile(&samples, 99.0),
    }
}

fn vm_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

fn row(name: &str, chatd: &Stats, direct: &Stats) {
    println!(
        "{name:<26} chatd p50 {:>8.3} ms  p99 {:>8.3} ms | direct p50 {:>8.3} ms  p99 {:>8.3} ms | added p50 {:>7.3} ms  p99 {:>7.3} ms | ratio p50 {:>5.2}x  p99 {:>5.2}x",
        chatd.p50,
        chatd.p99,
        direct.p50,
        direct.p99,
        chatd.p50 - direct.p50,
        chatd.p99 - direct.p99,
        chatd.p50 / direct.p50,
        chatd.p99 / direct.p99,
    );
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(bench());
}

async fn bench() {
    let dir = tempfile::tempdir().unwrap();
    let provider = start_provider().await;
    let client = reqwest::Client::new();
    let socket = start_chatd(dir.path(), &provider, &client);
    let rss_start = vm_rss_kib();

    // The body chatd's driver sends for a first turn, so the direct reads carry the same load.
    let url = format!("{}/v1/messages", provider.base_url);
    let direct_body = json!({"model": "claude-bench", "max_tokens": 8192, "stream": true,
        "system": [{"type": "text", "text": "You are the AI assistant."}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Say something"}]}]});

    let mut conversations = Vec::with_capacity(TURNS + WARMUP);
    for _ in 0..TURNS + WARMUP {
        conversations.push(new_conversation(&socket).await);
    }
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let (mut chatd_first, mut chatd_event, mut chatd_end) = (Vec::new(), Vec::new(), Vec::new());
    let (mut direct_first, mut direct_event, mut direct_end) = (Vec::new(), Vec::new(), Vec::new());
    let (mut chatd_lines, mut direct_events) = (0, 0);
    let started = Instant::now();
    for (index, conversation) in conversations.iter().enumerate() {
        // Alternate, so both sides see the same machine state.
        let direct = direct_turn(&client, &url, &direct_body).await;
        let chatd = chatd_turn(&socket, conversation, None).await;
        if index < WARMUP {
            continue;
        }
        chatd_lines = chatd.events;
        direct_events = direct.events;
        chatd_first.push(ms(chatd.first));
        chatd_end.push(ms(chatd.end));
        chatd_event.push(ms(chatd.end - chatd.first) / DELTAS as f64);
        direct_first.push(ms(direct.first));
        direct_end.push(ms(direct.end));
        direct_event.push(ms(direct.end - direct.first) / DELTAS as f64);
    }
    let sequential = started.elapsed();
    println!(
        "sequential: {TURNS} turns each way after {WARMUP} warm-up, {DELTAS} text deltas per answer \
         ({direct_events} SSE events direct, {chatd_lines} NDJSON lines through chatd), {:.1} s",
        sequential.as_secs_f64()
    );
    row(
        "first model byte",
        &stats(chatd_first),
        &stats(direct_first),
    );
    row("per text event", &stats(chatd_event), &stats(direct_event));
    row("whole turn", &stats(chatd_end), &stats(direct_end));
    let rss_after_sequential = vm_rss_kib();

    // Concurrency: every turn streams its first text and then waits on the provider.
    let mut held_conversations = Vec::with_capacity(CONCURRENT);
    for _ in 0..CONCURRENT {
        held_conversations.push(new_conversation(&socket).await);
    }
    provider.hold.store(true, Ordering::SeqCst);
    let streaming = Arc::new(AtomicUsize::new(0));
    let rss_before = vm_rss_kib();
    let opened = Instant::now();
    let turns: Vec<_> = held_conversations
        .into_iter()
        .map(|conversation| {
            let (socket, streaming) = (socket.clone(), Arc::clone(&streaming));
            tokio::spawn(async move { chatd_turn(&socket, &conversation, Some(&streaming)).await })
        })
        .collect();
    while streaming.load(Ordering::SeqCst) < CONCURRENT {
        assert!(
            opened.elapsed() < Duration::from_secs(60),
            "streams did not open"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let all_open = opened.elapsed();
    let rss_held = vm_rss_kib();
    provider.hold.store(false, Ordering::SeqCst);
    provider.release.notify_waiters();
    let mut firsts = Vec::with_capacity(CONCURRENT);
    for turn in turns {
        firsts.push(ms(turn.await.unwrap().first));
    }
    let drained = opened.elapsed();
    let rss_after = vm_rss_kib();
    let first = stats(firsts);
    println!(
        "concurrent: {CONCURRENT} turns streaming at once after {:.1} ms (first model byte p50 {:.2} ms, p99 {:.2} ms), all done {:.1} ms after the start",
        ms(all_open),
        first.p50,
        first.p99,
        ms(drained)
    );
    println!(
        "RSS (whole process: provider, chatd, clients): start {} KiB, after sequential {} KiB, before concurrent {} KiB, {} held {} KiB (+{} KiB, {:.1} KiB per stream), after {} KiB",
        rss_start,
        rss_after_sequential,
        rss_before,
        CONCURRENT,
        rss_held,
        rss_held.saturating_sub(rss_before),
        rss_held.saturating_sub(rss_before) as f64 / CONCURRENT as f64,
        rss_after
    );
}
