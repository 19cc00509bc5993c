//! The scripted provider: a loopback HTTP server that answers each request with the next
//! script of a sequence (the last one repeats), replaying recorded SSE transcripts and JSON
//! error answers from `tests/fixtures/`, and records what it received.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use atelier_http::{json_response, serve, BoxError, Listener, Request, Response};
use bytes::Bytes;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use hyper::header::HeaderMap;
use hyper::StatusCode;
use serde_json::Value;
use tokio::sync::mpsc;

/// What the scripted provider answers.
#[derive(Clone)]
pub enum Reply {
    /// An SSE transcript, one event per fixture line.
    Sse(Vec<String>),
    /// A non-OK answer.
    Error {
        /// The HTTP status.
        status: u16,
        /// The JSON body, or a string sent as-is.
        body: Value,
    },
    /// Another reply, sent only after this pause.
    Delayed(Duration, Box<Reply>),
    /// A 307 to this location.
    Redirect(String),
}

/// One answer of the scripted provider and how it is written.
#[derive(Clone)]
pub struct Script {
    /// What to answer.
    pub reply: Reply,
    /// Send `event:` lines named after each event's `type` (Anthropic, Responses).
    pub named_events: bool,
    /// End lines with CRLF instead of LF.
    pub crlf: bool,
    /// Cut the body (no terminating chunk) after this many events.
    pub cut_after: Option<usize>,
    /// Pause this long after that many events.
    pub pause_after: Option<(usize, Duration)>,
}

/// One request the scripted provider received.
pub struct Received {
    /// The request path.
    pub path: String,
    /// The request headers.
    pub headers: HeaderMap,
    /// The JSON body.
    pub body: Value,
}

/// A running scripted provider.
pub struct ScriptedProvider {
    /// Its root URL, `http://127.0.0.1:<port>`.
    pub base_url: String,
    /// Every request received, in order.
    pub received: Arc<Mutex<Vec<Received>>>,
    /// Set when the provider noticed the client went away before the transcript ended.
    pub client_gone: Arc<AtomicBool>,
}

pub fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// The events of a `.sse` fixture: every line that is neither blank nor a `#` comment.
pub fn transcript(dir: &str, name: &str) -> Vec<String> {
    let path = fixtures().join(dir).join(format!("{name}.sse"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .filter(|line| !line.trim().is_empty() && !line.starts_with('#'))
        .map(str::to_owned)
        .collect()
}

/// A `.json` error fixture: `{"status": u16, "body": <JSON, or a string sent as-is>}`.
pub fn error_answer(dir: &str, name: &str) -> Reply {
    let path = fixtures().join(dir).join(format!("{name}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let fixture: Value = serde_json::from_str(&text).unwrap();
    Reply::Error {
        status: fixture["status"].as_u64().unwrap() as u16,
        body: fixture["body"].clone(),
    }
}

/// One SSE event on the wire, as the provider would write it.
fn wire_event(line: &str, named_events: bool, crlf: bool) -> Vec<u8> {
    let mut event = String::new();
    if named_events && line != "[DONE]" {
        let value: Value = serde_json::from_str(line).unwrap();
        if let Some(kind) = value["type"].as_str() {
            event.push_str(&format!("event: {kind}\n"));
        }
    }
    event.push_str(&format!("data: {line}\n\n"));
    if crlf {
        event = event.replace('\n', "\r\n");
    }
    event.into_bytes()
}

struct Frames(mpsc::Receiver<Result<Frame<Bytes>, BoxError>>);

impl futures_util::Stream for Frames {
    type Item = Result<Frame<Bytes>, BoxError>;
    fn poll_next(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        self.get_mut().0.poll_recv(cx)
    }
}

/// Writes the transcript: each event split in two body chunks at its middle, a keep-alive
/// comment every third event, with the script's pause and cut.
async fn write_transcript(
    script: Script,
    lines: Vec<String>,
    tx: mpsc::Sender<Result<Frame<Bytes>, BoxError>>,
    client_gone: Arc<AtomicBool>,
) {
    for (index, line) in lines.iter().enumerate() {
        if script.cut_after == Some(index) {
            let _ = tx.send(Err("scripted cut".into())).await;
            return;
        }
        if let Some((after, pause)) = script.pause_after {
            if after == index {
                tokio::select! {
                    () = tokio::time::sleep(pause) => {}
                    () = tx.closed() => {
                        client_gone.store(true, Ordering::SeqCst);
                        return;
                    }
                }
            }
        }
        let mut bytes = wire_event(line, script.named_events, script.crlf);
        if index % 3 == 2 {
            bytes.splice(0..0, b": keep-alive\n\n".iter().copied());
        }
        let tail = bytes.split_off(bytes.len() / 2);
        for chunk in [bytes, tail] {
            if tx.send(Ok(Frame::data(Bytes::from(chunk)))).await.is_err() {
                client_gone.store(true, Ordering::SeqCst);
                return;
            }
        }
    }
}

async fn answer(
    script: Script,
    request: Request,
    received: Arc<Mutex<Vec<Received>>>,
    client_gone: Arc<AtomicBool>,
) -> Response {
    let path = request.uri().path().to_owned();
    let headers = request.headers().clone();
    let body = atelier_http::read_body(request.into_body(), 1 << 24)
        .await
        .unwrap();
    received.lock().unwrap().push(Received {
        path,
        headers,
        // A GET has no body.
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    });
    let mut reply = script.reply.clone();
    while let Reply::Delayed(pause, inner) = reply {
        tokio::time::sleep(pause).await;
        reply = *inner;
    }
    match reply {
        Reply::Delayed(..) => unreachable!("unwrapped above"),
        Reply::Redirect(location) => {
            let mut response = Response::new(atelier_http::full_body(String::new()));
            *response.status_mut() = StatusCode::TEMPORARY_REDIRECT;
            response
                .headers_mut()
                .insert(hyper::header::LOCATION, location.parse().unwrap());
            response
        }
        Reply::Error { status, body } => {
            let status = StatusCode::from_u16(status).unwrap();
            match body {
                Value::String(text) => {
                    let mut response = Response::new(atelier_http::full_body(text));
                    *response.status_mut() = status;
                    response
                }
                body => json_response(status, &body),
            }
        }
        Reply::Sse(lines) => {
            let (tx, rx) = mpsc::channel(4);
            tokio::spawn(write_transcript(script, lines, tx, client_gone));
            let mut response = Response::new(BodyExt::boxed(StreamBody::new(Frames(rx))));
            response
                .headers_mut()
                .insert("content-type", "text/event-stream".parse().unwrap());
            response
        }
    }
}

/// Starts a provider that answers every request with `script`.
pub async fn start(script: Script) -> ScriptedProvider {
    start_sequence(vec![script]).await
}

/// Starts a provider that answers request `n` with `scripts[n]`, and any request past the
/// end with the last script.
pub async fn start_sequence(scripts: Vec<Script>) -> ScriptedProvider {
    assert!(!scripts.is_empty(), "a provider needs a script");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base_url = format!("http://{}", listener.local_addr().unwrap());
    let received = Arc::new(Mutex::new(Vec::new()));
    let client_gone = Arc::new(AtomicBool::new(false));
    let scripts = Arc::new(scripts);
    let next = Arc::new(AtomicUsize::new(0));
    let handler = {
        let received = received.clone();
        let client_gone = client_gone.clone();
        move |request: Request| {
            let index = next.fetch_add(1, Ordering::SeqCst).min(scripts.len() - 1);
            answer(
                scripts[index].clone(),
                request,
                received.clone(),
                client_gone.clone(),
            )
        }
    };
    tokio::spawn(serve(
        Listener::Tcp(listener),
        handler,
        std::future::pending(),
        Duration::from_secs(1),
    ));
    ScriptedProvider {
        base_url,
        received,
        client_gone,
    }
}

impl Script {
    /// `reply` written as a provider whose SSE names its events (or not) and ends lines with
    /// CRLF (or LF), neither paused nor cut.
    pub fn new(reply: Reply, named_events: bool, crlf: bool) -> Self {
        Script {
            reply,
            named_events,
            crlf,
            cut_after: None,
            pause_after: None,
        }
    }
}

impl ScriptedProvider {
    /// The JSON bodies received so far, in order.
    pub fn bodies(&self) -> Vec<Value> {
        self.received
            .lock()
            .unwrap()
            .iter()
            .map(|received| received.body.clone())
            .collect()
    }

    /// The paths requested so far, in order.
    pub fn paths(&self) -> Vec<String> {
        self.received
            .lock()
            .unwrap()
            .iter()
            .map(|received| received.path.clone())
            .collect()
    }

    /// Waits (up to 5 s) until the provider has seen the client go away mid-transcript.
    pub async fn wait_client_gone(&self) {
        tokio::time::timeout(Duration::from_secs(5), async {
            while !self.client_gone.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("the provider should see the client go away");
    }
}

/// A TCP forwarder in front of a scripted provider that counts the connections it accepts.
pub struct CountingFront {
    /// The base URL to reach the provider through the front.
    pub url: String,
    accepted: Arc<AtomicUsize>,
}

impl CountingFront {
    /// Starts a front forwarding every connection to `server`.
    pub async fn before(server: &ScriptedProvider) -> CountingFront {
        let upstream = server.base_url.trim_start_matches("http://").to_owned();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let accepted = Arc::new(AtomicUsize::new(0));
        let counted = accepted.clone();
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                let upstream = upstream.clone();
                tokio::spawn(async move {
                    let mut provider = tokio::net::TcpStream::connect(upstream).await.unwrap();
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut provider).await;
                });
            }
        });
        CountingFront { url, accepted }
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}
