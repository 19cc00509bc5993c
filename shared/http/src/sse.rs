//! Server-sent events: event framing and `text/event-stream` responses with keep-alive comments.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_util::Stream;
use hyper::header::{HeaderValue, CACHE_CONTROL, CONTENT_TYPE};
use tokio::time::{Instant, Sleep};

use crate::frames::ChunkBody;
use crate::{BoxError, Response, NO_STORE};

const TEXT_EVENT_STREAM: HeaderValue = HeaderValue::from_static("text/event-stream; charset=utf-8");
/// Asks nginx (and proxies that honour it) not to buffer the stream.
const X_ACCEL_BUFFERING: &str = "x-accel-buffering";
/// Comment text of [`SseKeepAlive::new`].
const DEFAULT_KEEP_ALIVE_COMMENT: &str = "keep-alive";

/// One server-sent event.
///
/// [`SseEvent::to_bytes`] writes `id: `, `event: ` (each only when set) and one `data: ` line
/// per line of `data`, then the blank line that dispatches the event.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SseEvent {
    /// The `id` field, which the client echoes as `Last-Event-ID` when it reconnects. Line
    /// breaks and NUL are removed when framing: they would end the field or void the id.
    pub id: Option<String>,
    /// The `event` field (the event type; clients default it to `message`). Line breaks are
    /// removed when framing, so a name can never inject another field.
    pub event: Option<String>,
    /// The payload; each of its lines (split on `\r\n`, `\r` and `\n`) becomes a `data:` line,
    /// which the client joins back with `\n`.
    pub data: String,
}

// === impl SseEvent ===

impl SseEvent {
    /// An event with `data` and no id or type.
    pub fn new(data: impl Into<String>) -> Self {
        SseEvent {
            id: None,
            event: None,
            data: data.into(),
        }
    }

    /// Sets the `id` field.
    pub fn with_id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// Sets the `event` field.
    pub fn with_event(mut self, event: impl Into<String>) -> Self {
        self.event = Some(event.into());
        self
    }

    /// The event as it goes on the wire, blank line included.
    pub fn to_bytes(&self) -> Bytes {
        let mut wire = Vec::with_capacity(self.data.len() + 32);
        push_event(
            &mut wire,
            self.id.as_deref(),
            self.event.as_deref(),
            &self.data,
        );
        Bytes::from(wire)
    }
}

/// Appends one event to `wire`, framed as [`SseEvent::to_bytes`] frames it, without building
/// an [`SseEvent`]: a replay of many stored events frames them straight into one buffer.
pub fn push_event(wire: &mut Vec<u8>, id: Option<&str>, event: Option<&str>, data: &str) {
    if let Some(id) = id {
        push_field(wire, "id", id, &['\r', '\n', '\0']);
    }
    if let Some(event) = event {
        push_field(wire, "event", event, &['\r', '\n']);
    }
    let mut rest = data;
    loop {
        wire.extend_from_slice(b"data: ");
        match rest.find(['\r', '\n']) {
            Some(end) => {
                wire.extend_from_slice(&rest.as_bytes()[..end]);
                wire.push(b'\n');
                // A CRLF pair is one line break.
                let skip = if rest[end..].starts_with("\r\n") {
                    2
                } else {
                    1
                };
                rest = &rest[end + skip..];
            }
            None => {
                wire.extend_from_slice(rest.as_bytes());
                wire.push(b'\n');
                break;
            }
        }
    }
    wire.push(b'\n');
}

/// Appends `name: value\n`, dropping the `forbidden` characters from `value`.
fn push_field(wire: &mut Vec<u8>, name: &str, value: &str, forbidden: &[char]) {
    wire.extend_from_slice(name.as_bytes());
    wire.extend_from_slice(b": ");
    for c in value.chars().filter(|c| !forbidden.contains(c)) {
        let mut utf8 = [0u8; 4];
        wire.extend_from_slice(c.encode_utf8(&mut utf8).as_bytes());
    }
    wire.push(b'\n');
}

/// What an event stream sends: one event, or events already framed with [`push_event`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SseChunk {
    /// One event, framed when it is sent.
    Event(SseEvent),
    /// Whole framed events, sent as they are.
    Framed(Bytes),
}

impl From<SseEvent> for SseChunk {
    fn from(event: SseEvent) -> Self {
        SseChunk::Event(event)
    }
}

impl SseChunk {
    fn into_wire(self) -> Bytes {
        match self {
            SseChunk::Event(event) => event.to_bytes(),
            SseChunk::Framed(bytes) => bytes,
        }
    }
}

/// When and what [`sse_response`] sends while no event is ready: a comment line
/// (`: <text>\n\n`), which clients ignore but which keeps proxies and clients from timing the
/// stream out.
///
/// A `Duration` converts into one with the comment `keep-alive`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SseKeepAlive {
    interval: Duration,
    comment: String,
}

// === impl SseKeepAlive ===

impl SseKeepAlive {
    /// A `: keep-alive` comment after every `interval` without an event. A zero interval sends
    /// no keep-alive comments at all.
    pub fn new(interval: Duration) -> Self {
        SseKeepAlive {
            interval,
            comment: DEFAULT_KEEP_ALIVE_COMMENT.to_owned(),
        }
    }

    /// Sends `: <comment>` instead (for example `ping`). Line breaks are removed.
    pub fn with_comment(mut self, comment: impl Into<String>) -> Self {
        self.comment = comment.into().replace(['\r', '\n'], "");
        self
    }

    fn frame(&self) -> Bytes {
        Bytes::from(format!(": {}\n\n", self.comment))
    }
}

impl From<Duration> for SseKeepAlive {
    fn from(interval: Duration) -> Self {
        SseKeepAlive::new(interval)
    }
}

/// A 200 `text/event-stream` response sending each of `events` as its own body frame, so
/// every event reaches the client as soon as it is produced, and a keep-alive comment whenever
/// `keep_alive`'s interval passes without an event. The body ends when `events` ends; drop
/// the stream's producer to close it.
///
/// Headers: `Content-Type: text/event-stream; charset=utf-8`, `Cache-Control: no-store`,
/// `X-Accel-Buffering: no`. No `Connection` header: keep-alive is the HTTP/1.1 default and
/// hyper manages the header itself.
pub fn sse_response<S, T>(events: S, keep_alive: impl Into<SseKeepAlive>) -> Response
where
    S: Stream<Item = T> + Send + 'static,
    T: Into<SseChunk>,
{
    let keep_alive = keep_alive.into();
    let chunks = EventChunks {
        events: Box::pin(events),
        idle: (!keep_alive.interval.is_zero()).then(|| {
            (
                Box::pin(tokio::time::sleep(keep_alive.interval)),
                keep_alive.frame(),
            )
        }),
        interval: keep_alive.interval,
    };
    let mut response = Response::new(ChunkBody::boxed(chunks));
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, TEXT_EVENT_STREAM);
    headers.insert(CACHE_CONTROL, NO_STORE);
    headers.insert(X_ACCEL_BUFFERING, HeaderValue::from_static("no"));
    response
}

/// The framed events, interleaved with keep-alive comments when the events stall.
struct EventChunks<S> {
    events: Pin<Box<S>>,
    /// The idle timer and the comment it releases; `None` when keep-alive is off.
    idle: Option<(Pin<Box<Sleep>>, Bytes)>,
    interval: Duration,
}

impl<S, T> Stream for EventChunks<S>
where
    S: Stream<Item = T>,
    T: Into<SseChunk>,
{
    type Item = Result<Bytes, BoxError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        // Every field is boxed or plain data, so `Self: Unpin`.
        let this = self.get_mut();
        match this.events.as_mut().poll_next(cx) {
            Poll::Ready(Some(event)) => {
                if let Some((timer, _)) = &mut this.idle {
                    timer.as_mut().reset(Instant::now() + this.interval);
                }
                Poll::Ready(Some(Ok(event.into().into_wire())))
            }
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => match &mut this.idle {
                Some((timer, comment)) => {
                    if timer.as_mut().poll(cx).is_pending() {
                        return Poll::Pending;
                    }
                    timer.as_mut().reset(Instant::now() + this.interval);
                    Poll::Ready(Some(Ok(comment.clone())))
                }
                None => Poll::Pending,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use futures_util::stream;
    use hyper::StatusCode;
    use tokio::sync::mpsc;

    use super::*;
    use crate::test_support::{get, next_data, TestServer};
    use crate::Request;

    #[test]
    fn framing_table() {
        let cases: [(&str, SseEvent, &str); 10] = [
            ("plain data", SseEvent::new("hello"), "data: hello\n\n"),
            (
                "empty data still dispatches",
                SseEvent::new(""),
                "data: \n\n",
            ),
            (
                "id then data, as the site daemon frames stored events",
                SseEvent::new(r#"{"seq":3}"#).with_id("3"),
                "id: 3\ndata: {\"seq\":3}\n\n",
            ),
            (
                "event type",
                SseEvent::new(r#"{"reason":"replay_failed"}"#).with_event("error"),
                "event: error\ndata: {\"reason\":\"replay_failed\"}\n\n",
            ),
            (
                "id, event and data in that order",
                SseEvent::new("x").with_event("e").with_id("7"),
                "id: 7\nevent: e\ndata: x\n\n",
            ),
            (
                "LF lines",
                SseEvent::new("a\nb\nc"),
                "data: a\ndata: b\ndata: c\n\n",
            ),
            (
                "CRLF lines",
                SseEvent::new("a\r\nb"),
                "data: a\ndata: b\n\n",
            ),
            (
                "lone CR lines",
                SseEvent::new("a\rb\r\n\nc"),
                "data: a\ndata: b\ndata: \ndata: c\n\n",
            ),
            (
                "trailing newline kept",
                SseEvent::new("a\n"),
                "data: a\ndata: \n\n",
            ),
            (
                "line breaks cannot inject fields through id or event",
                SseEvent::new("ok")
                    .with_event("message\ndata: injected\r\n\r\nevent: evil")
                    .with_id("1\n\nid: 2\0"),
                "id: 1id: 2\nevent: messagedata: injectedevent: evil\ndata: ok\n\n",
            ),
        ];
        for (name, event, wire) in cases {
            assert_eq!(
                std::str::from_utf8(&event.to_bytes()).unwrap(),
                wire,
                "{name}"
            );
        }
    }

    #[test]
    fn keep_alive_comments() {
        assert_eq!(
            SseKeepAlive::from(Duration::from_secs(1)).frame(),
            ": keep-alive\n\n"
        );
        assert_eq!(
            SseKeepAlive::new(Duration::from_secs(15))
                .with_comment("ping\r\nevent: x")
                .frame(),
            ": pingevent: x\n\n"
        );
    }

    /// A server whose single SSE response is fed by the returned sender.
    fn channel_server(keep_alive: SseKeepAlive) -> (TestServer, mpsc::Sender<SseEvent>) {
        let (tx, rx) = mpsc::channel::<SseEvent>(8);
        let rx = std::sync::Arc::new(std::sync::Mutex::new(Some(rx)));
        let server = TestServer::start(move |_request: Request| {
            let rx = rx.lock().unwrap().take().expect("one request");
            let keep_alive = keep_alive.clone();
            async move {
                let events = stream::unfold(rx, |mut rx| async move {
                    rx.recv().await.map(|event| (event, rx))
                });
                sse_response(events, keep_alive)
            }
        });
        (server, tx)
    }

    async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
        tokio::time::timeout(Duration::from_secs(5), future)
            .await
            .unwrap_or_else(|_| panic!("timed out: {what}"))
    }

    #[tokio::test]
    async fn each_event_is_flushed_before_the_stream_ends_then_the_body_ends() {
        let (server, tx) = channel_server(SseKeepAlive::new(Duration::ZERO));
        tx.send(SseEvent::new("one").with_id("1")).await.unwrap();
        let response = get(&server.path, "/events").await;
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(
            response.headers()["content-type"],
            "text/event-stream; charset=utf-8"
        );
        assert_eq!(response.headers()["cache-control"], "no-store");
        assert_eq!(response.headers()["x-accel-buffering"], "no");
        let mut body = response.into_body();
        assert_eq!(
            within("first event", next_data(&mut body)).await.as_deref(),
            Some(&b"id: 1\ndata: one\n\n"[..])
        );
        tx.send(SseEvent::new("two").with_event("end"))
            .await
            .unwrap();
        assert_eq!(
            within("second event", next_data(&mut body))
                .await
                .as_deref(),
            Some(&b"event: end\ndata: two\n\n"[..])
        );
        drop(tx);
        assert_eq!(within("end of body", next_data(&mut body)).await, None);
    }

    #[tokio::test]
    async fn idle_stream_sends_keep_alive_comments_and_events_reset_the_timer() {
        const PING: &[u8] = b": ping\n\n";
        let interval = Duration::from_millis(100);
        let (server, tx) = channel_server(SseKeepAlive::new(interval).with_comment("ping"));
        let requested = Instant::now();
        let mut body = get(&server.path, "/events").await.into_body();
        let first = within("keep-alive", next_data(&mut body)).await;
        assert_eq!(first.as_deref(), Some(PING));
        assert!(requested.elapsed() >= interval);

        // Half an interval after a comment, an event: the next comment must then wait a whole
        // interval from the event, not fire on the timer armed by the comment.
        tokio::time::sleep(interval / 2).await;
        let sent = Instant::now();
        tx.send(SseEvent::new("real")).await.unwrap();
        assert_eq!(
            within("the event", next_data(&mut body)).await.as_deref(),
            Some(&b"data: real\n\n"[..])
        );
        assert_eq!(
            within("keep-alive", next_data(&mut body)).await.as_deref(),
            Some(PING)
        );
        assert!(
            sent.elapsed() >= interval,
            "comment came {:?} after the event",
            sent.elapsed()
        );

        drop(tx);
        within("end of body", async {
            while next_data(&mut body).await.is_some() {}
        })
        .await;
    }

    #[tokio::test]
    async fn zero_interval_sends_no_comments() {
        let (server, tx) = channel_server(SseKeepAlive::new(Duration::ZERO));
        let mut body = get(&server.path, "/events").await.into_body();
        assert!(
            tokio::time::timeout(Duration::from_millis(150), next_data(&mut body))
                .await
                .is_err(),
            "nothing is sent while no event is produced"
        );
        drop(tx);
    }
}
