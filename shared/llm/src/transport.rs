//! The HTTP side every driver shares: POST a JSON body, classify a non-OK answer, read the
//! SSE body under a per-read idle timeout and hand each frame to the driver's translator.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use futures_util::stream::{self, BoxStream, Stream, StreamExt};

use crate::error::{classify_http_failure, LlmError};
use crate::types::{RoundEnd, StreamEvent};
use atelier_sse::{SseFrame, SseItem, SseParser};

/// A provider round's events; ends after [`StreamEvent::Finished`] or the first error.
/// Dropping it cancels the provider request.
pub type EventStream = Pin<Box<dyn Stream<Item = Result<StreamEvent, LlmError>> + Send>>;

/// A round refused before any request is sent: a stream whose only item is `error`.
pub(crate) fn refused(error: LlmError) -> EventStream {
    Box::pin(stream::iter([Err(error)]))
}

/// How long a stream may go without a single byte before it fails, unless configured.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(120);

/// How many characters of a non-OK body are logged.
const LOGGED_BODY_CHARS: usize = 500;

/// How long a response is read past the `[DONE]` sentinel for its end, and how much of it.
/// Providers end the body right after the sentinel; one that keeps it open is left after this,
/// its connection lost as it always was.
const DRAIN_WAIT: Duration = Duration::from_millis(250);
const DRAIN_BYTES: usize = 64 * 1024;

/// How long a provider's address may take to accept a connection. A host that drops the
/// connection attempt (a firewall, an address nothing answers on) would otherwise hold the
/// turn for the system's TCP retries, about two minutes, before saying anything.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The HTTP client builder a provider's client starts from: it follows no redirect, and gives
/// up a connection attempt after [`CONNECT_TIMEOUT`]. The key travels in a header, and reqwest
/// carries `x-api-key` (and `api-key`) to whatever host a redirect names; no provider answers
/// its API with one, so a redirect is an answer like any non-OK status.
pub fn provider_client_builder() -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(CONNECT_TIMEOUT)
}

/// Where and how a driver reaches its provider.
#[derive(Clone, Debug)]
pub struct Endpoint {
    /// The HTTP client (shared, so connections are pooled across rounds).
    pub client: reqwest::Client,
    /// The provider's base URL, e.g. `https://host` or `http://127.0.0.1:11434`.
    pub base_url: String,
    /// The credential, when the provider takes one.
    pub api_key: Option<String>,
    /// The longest pause allowed between two reads of the response stream.
    pub idle_timeout: Duration,
}

impl Endpoint {
    /// An endpoint at `base_url` with `api_key` and the default idle timeout.
    pub fn new(
        client: reqwest::Client,
        base_url: impl Into<String>,
        api_key: Option<String>,
    ) -> Self {
        Endpoint {
            client,
            base_url: base_url.into(),
            api_key,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
        }
    }

    /// The same endpoint with another idle timeout.
    pub fn with_idle_timeout(mut self, idle_timeout: Duration) -> Self {
        self.idle_timeout = idle_timeout;
        self
    }

    /// The base URL without trailing slashes.
    pub(crate) fn trimmed_base(&self) -> &str {
        self.base_url.trim_end_matches('/')
    }
}

/// Turns one round's SSE frames into canonical events; one translator per round.
pub(crate) trait Translator: Send + 'static {
    /// Handles one frame, pushing the events it produces; an `Err` ends the round.
    fn frame(&mut self, frame: &SseFrame, out: &mut Vec<StreamEvent>) -> Result<(), LlmError>;
    /// The stream ended cleanly: push any last events and say how the round ended, or why a
    /// clean end is still a failed round.
    fn finish(&mut self, out: &mut Vec<StreamEvent>) -> Result<RoundEnd, LlmError>;
}

/// A prepared provider request.
pub(crate) struct WireRequest {
    pub label: &'static str,
    pub url: String,
    pub bearer: Option<String>,
    pub headers: Vec<(&'static str, String)>,
    pub body: serde_json::Value,
}

struct Reading {
    label: &'static str,
    idle: Duration,
    body: BoxStream<'static, reqwest::Result<Bytes>>,
    parser: SseParser,
    translator: Box<dyn Translator>,
    queue: VecDeque<Result<StreamEvent, LlmError>>,
    ended: bool,
}

/// Sends `request` when first polled and streams the translated events.
pub(crate) fn run(
    client: reqwest::Client,
    idle: Duration,
    request: WireRequest,
    translator: Box<dyn Translator>,
) -> EventStream {
    let label = request.label;
    let opened = async move {
        match open(client, idle, request).await {
            Ok(body) => Ok(Reading {
                label,
                idle,
                body,
                parser: SseParser::new(),
                translator,
                queue: VecDeque::new(),
                ended: false,
            }),
            Err(error) => Err(error),
        }
    };
    stream::once(opened)
        .flat_map(|opened| match opened {
            Ok(reading) => stream::unfold(reading, next_event).boxed(),
            Err(error) => stream::iter([Err(error)]).boxed(),
        })
        .boxed()
}

async fn open(
    client: reqwest::Client,
    idle: Duration,
    request: WireRequest,
) -> Result<BoxStream<'static, reqwest::Result<Bytes>>, LlmError> {
    let label = request.label;
    let mut builder = client
        .post(&request.url)
        .header("content-type", "application/json")
        .json(&request.body);
    if let Some(key) = &request.bearer {
        builder = builder.bearer_auth(key);
    }
    for (name, value) in &request.headers {
        builder = builder.header(*name, value);
    }
    let request_failed = |error: reqwest::Error| LlmError::Request {
        label,
        detail: error.without_url().to_string(),
    };
    let response = match tokio::time::timeout(idle, builder.send()).await {
        Ok(response) => response.map_err(request_failed)?,
        Err(_) => {
            return Err(LlmError::Request {
                label,
                detail: format!("no response for {idle:?}"),
            })
        }
    };
    let status = response.status();
    if !status.is_success() {
        let body = match tokio::time::timeout(idle, response.text()).await {
            Ok(Ok(body)) => body,
            _ => String::new(),
        };
        let logged: String = body.chars().take(LOGGED_BODY_CHARS).collect();
        tracing::warn!(provider = label, status = status.as_u16(), body = %logged, "provider refused a request");
        return Err(classify_http_failure(label, status.as_u16(), &body));
    }
    Ok(response.bytes_stream().boxed())
}

async fn next_event(mut reading: Reading) -> Option<(Result<StreamEvent, LlmError>, Reading)> {
    loop {
        if let Some(item) = reading.queue.pop_front() {
            if item.is_err() {
                reading.queue.clear();
                reading.ended = true;
            }
            return Some((item, reading));
        }
        if reading.ended {
            return None;
        }
        let next = tokio::time::timeout(reading.idle, reading.body.next()).await;
        let mut frames = Vec::new();
        let mut at_end = false;
        match next {
            Err(_) => {
                reading.ended = true;
                return Some((
                    Err(LlmError::IdleTimeout {
                        label: reading.label,
                        idle: reading.idle,
                    }),
                    reading,
                ));
            }
            Ok(Some(Err(error))) => {
                reading.ended = true;
                let detail = error.without_url().to_string();
                return Some((
                    Err(LlmError::Stream {
                        label: reading.label,
                        detail,
                    }),
                    reading,
                ));
            }
            Ok(Some(Ok(bytes))) => match reading.parser.push(&bytes) {
                Ok(items) => frames.extend(items.into_iter().filter_map(|item| match item {
                    SseItem::Frame(frame) => Some(frame),
                    SseItem::Comment(_) => None,
                })),
                Err(error) => {
                    reading.ended = true;
                    let stream = LlmError::Stream {
                        label: reading.label,
                        detail: error.to_string(),
                    };
                    return Some((Err(stream), reading));
                }
            },
            Ok(None) => {
                // A provider that never closed its last frame: what it sent is used.
                frames.extend(reading.parser.take_unterminated());
                at_end = true;
            }
        }
        let mut events = Vec::new();
        for frame in frames {
            if frame.is_done_sentinel() {
                at_end = true;
                drain(&mut reading.body).await;
                break;
            }
            if let Err(error) = reading.translator.frame(&frame, &mut events) {
                reading.queue.extend(events.drain(..).map(Ok));
                reading.queue.push_back(Err(error));
                break;
            }
        }
        reading.queue.extend(events.drain(..).map(Ok));
        if at_end && !reading.queue.iter().any(Result::is_err) {
            let end = reading.translator.finish(&mut events);
            reading.queue.extend(events.into_iter().map(Ok));
            reading.queue.push_back(end.map(StreamEvent::Finished));
            reading.ended = true;
        }
    }
}

/// Reads the rest of a response after its `[DONE]` sentinel, up to its end (bounded by
/// [`DRAIN_WAIT`] and [`DRAIN_BYTES`]). An HTTP/1 connection whose response was dropped
/// unread cannot go back to the client's pool at once, so the next round's request, sent
/// right away, started a second connection racing the first one's return; the loser was then
/// finished in the background and left unused (through the gate, a tunnel opened and closed
/// without a byte). Read to its end, the response's connection serves the next round.
async fn drain(body: &mut BoxStream<'static, reqwest::Result<Bytes>>) {
    let _ = tokio::time::timeout(DRAIN_WAIT, async {
        let mut read = 0;
        while let Some(Ok(bytes)) = body.next().await {
            read += bytes.len();
            if read > DRAIN_BYTES {
                break;
            }
        }
    })
    .await;
}

/// A fresh id for a tool call the provider sent without one: `tool-<unique suffix>`.
pub(crate) fn generated_call_id() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let count = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| elapsed.subsec_nanos())
        .unwrap_or_default();
    format!("tool-{nanos:08x}{count:x}")
}
