//! The MCP relay's test parts, shared by the crate's unit tests and the lab tests: a
//! Publication API stand-in that records every request it gets, and an HTTP/1.1 client for the
//! relay's unix socket that reads a body as it arrives.
//!
//! The stand-in answers by the request's `mcp-session-id`: `redirect` gets a 307 to
//! [`Upstream::redirect_target`]; a GET streams `text/event-stream` events the test pushes
//! through [`Upstream::push_event`]; anything else gets a 200 JSON echo of the method and body.
//! Every answer also tries to echo the received `x-api-key` back in headers of its own.
//!
//! The model provider stand-in (sibling module `model`) is built of the same parts: the server
//! loop ([`serve`]), the request recorded ([`Seen::read`]), the one streamed answer
//! ([`stream_once`]) and the plain ones ([`full`], [`json`]). Both relays' unit tests also use
//! [`closed_port`] and [`check_bodies_held`] from here.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::http::{request, response};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, UnixStream};
use tokio::sync::mpsc;
use tokio::time::timeout;

/// How long [`check_bodies_held`] waits for what must happen.
const WAIT: Duration = Duration::from_secs(10);

/// One request as the stand-in received it.
#[derive(Debug, Clone)]
pub struct Seen {
    /// The method.
    pub method: String,
    /// The path and query.
    pub target: String,
    /// Every header, names lowercase.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl Seen {
    /// Reads `request` in full: its head, and the record of it.
    pub async fn read(request: Request<Incoming>) -> (request::Parts, Seen) {
        let (parts, body) = request.into_parts();
        let seen = Seen {
            method: parts.method.to_string(),
            target: parts.uri.to_string(),
            headers: parts
                .headers
                .iter()
                .map(|(n, v)| (n.as_str().to_owned(), v.to_str().unwrap_or("?").to_owned()))
                .collect(),
            body: body.collect().await.unwrap().to_bytes().to_vec(),
        };
        (parts, seen)
    }

    /// The values of header `name`.
    pub fn header(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }
}

/// What a stand-in answers.
pub type Answer = Response<BoxBody<Bytes, Infallible>>;

/// The chunks of the one streamed answer, until the stream is taken.
pub type Events = Mutex<Option<mpsc::UnboundedReceiver<Bytes>>>;

/// Serves HTTP/1.1 on `listener` until the runtime ends, each request answered by `answer`.
pub fn serve<A, F>(listener: TcpListener, answer: A)
where
    A: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Answer> + Send + 'static,
{
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let answer = answer.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |request| {
                    let answer = answer(request);
                    async move { Ok::<_, Infallible>(answer.await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
}

/// `response` as the one streamed answer: `text/event-stream` made of the chunks `events`
/// receives, ending when their sender is gone; a 409 once the stream was taken.
pub fn stream_once(events: &Events, response: response::Builder) -> Answer {
    let Some(events) = events.lock().unwrap().take() else {
        return response
            .status(StatusCode::CONFLICT)
            .body(full("one stream only"))
            .unwrap();
    };
    let body = StreamBody::new(futures_util::stream::unfold(
        events,
        |mut events| async move {
            let chunk = events.recv().await?;
            Some((Ok::<_, Infallible>(Frame::data(chunk)), events))
        },
    ));
    response
        .status(StatusCode::OK)
        .header("content-type", "text/event-stream")
        .body(BodyExt::boxed(body))
        .unwrap()
}

/// `response` with `status` and the JSON `body`.
pub fn json(response: response::Builder, status: StatusCode, body: &str) -> Answer {
    response
        .status(status)
        .header("content-type", "application/json")
        .body(full(body))
        .unwrap()
}

/// A whole body of `text`.
pub fn full(text: &str) -> BoxBody<Bytes, Infallible> {
    Full::new(Bytes::from(text.to_owned())).boxed()
}

/// The stand-in's shared state.
#[derive(Clone)]
pub struct Upstream {
    /// Where it listens.
    pub addr: SocketAddr,
    /// What it received, in order.
    pub seen: Arc<Mutex<Vec<Seen>>>,
    events: Arc<Events>,
    push: mpsc::UnboundedSender<Bytes>,
    /// Where a `redirect` request is sent (a server that records any request it gets).
    pub redirect_target: String,
}

impl Upstream {
    /// Serves on `listener` (already bound, possibly in another network namespace) until the
    /// runtime ends. `redirect_target` is the Location of its redirects.
    pub fn start(listener: std::net::TcpListener, redirect_target: &str) -> Upstream {
        listener.set_nonblocking(true).unwrap();
        let listener = TcpListener::from_std(listener).unwrap();
        let (push, events) = mpsc::unbounded_channel();
        let upstream = Upstream {
            addr: listener.local_addr().unwrap(),
            seen: Arc::default(),
            events: Arc::new(Mutex::new(Some(events))),
            push,
            redirect_target: redirect_target.to_owned(),
        };
        let state = upstream.clone();
        serve(listener, move |request| {
            let state = state.clone();
            async move { state.answer(request).await }
        });
        upstream
    }

    /// Binds loopback and serves there.
    pub async fn on_loopback() -> Upstream {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        Upstream::start(listener, "http://127.0.0.1:9/elsewhere")
    }

    /// Sends one chunk down the (single) GET stream.
    pub fn push_event(&self, chunk: &str) {
        self.push.send(Bytes::from(chunk.to_owned())).unwrap();
    }

    /// Every request received so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    async fn answer(&self, request: Request<Incoming>) -> Answer {
        let (parts, seen) = Seen::read(request).await;
        let body = seen.body.clone();
        let session = seen.header("mcp-session-id").first().map(|s| s.to_string());
        let key = seen.header("x-api-key").first().map(|s| s.to_string());
        self.seen.lock().unwrap().push(seen);
        let mut response = Response::builder()
            .header("mcp-session-id", session.clone().unwrap_or_default())
            .header("set-cookie", "upstream=1")
            .header("x-powered-by", "stand-in")
            .header("cache-control", "no-cache");
        if let Some(key) = key {
            // A careless upstream echoing the key: the relay must drop these.
            response = response
                .header("x-api-key", key.clone())
                .header("x-echoed-key", key);
        }
        if session.as_deref() == Some("redirect") {
            return response
                .status(StatusCode::TEMPORARY_REDIRECT)
                .header("location", &self.redirect_target)
                .body(full("redirecting"))
                .unwrap();
        }
        if parts.method == hyper::Method::GET {
            return stream_once(&self.events, response);
        }
        let echo = serde_json::json!({
            "method": parts.method.as_str(),
            "body": String::from_utf8_lossy(&body),
        });
        json(response, StatusCode::OK, &echo.to_string())
    }
}

/// A loopback address nothing listens on (bound, then closed): an upstream never reached.
pub fn closed_port() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// A response from the relay whose body is read as it arrives.
pub struct Streamed {
    /// The status.
    pub status: StatusCode,
    /// Every header, names lowercase.
    pub headers: Vec<(String, String)>,
    body: Incoming,
}

impl Streamed {
    /// The values of header `name`.
    pub fn header(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// The next data chunk, `None` at the end.
    pub async fn next_chunk(&mut self) -> Option<Bytes> {
        loop {
            let frame = self.body.frame().await?.unwrap();
            if let Ok(data) = frame.into_data() {
                return Some(data);
            }
        }
    }

    /// The rest of the body.
    pub async fn text(self) -> String {
        let bytes = self.body.collect().await.unwrap().to_bytes();
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

/// Sends one request to the relay at `socket` over a fresh connection.
pub async fn send(
    socket: &Path,
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Streamed {
    let stream = UnixStream::connect(socket).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    let mut request = Request::builder()
        .method(method)
        .uri(target)
        .header("host", "127.0.0.1:3129");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request
        .body(Full::new(Bytes::copy_from_slice(body)))
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    let (parts, body) = response.into_parts();
    Streamed {
        status: parts.status,
        headers: parts
            .headers
            .iter()
            .map(|(n, v)| (n.as_str().to_owned(), v.to_str().unwrap_or("?").to_owned()))
            .collect(),
        body,
    }
}

/// Checks that the relay at `socket` holds at most `held` request bodies at once. `held` POSTs
/// to `target`, each announcing `length` bytes and stalled after the first, take every permit
/// (`free` reads how many are left); the next POST then waits for a permit instead of growing
/// the gate, with nothing upstream (`seen` counts what reached it), and goes through once a
/// stalled one is gone.
pub async fn check_bodies_held(
    socket: &Path,
    target: &str,
    length: usize,
    held: usize,
    free: impl Fn() -> usize,
    seen: impl Fn() -> usize,
) {
    use tokio::io::AsyncWriteExt as _;
    let mut stalled = Vec::new();
    for _ in 0..held {
        let mut stream = UnixStream::connect(socket).await.unwrap();
        let head = format!(
            "POST {target} HTTP/1.1\r\nhost: 127.0.0.1:3129\r\n\
             content-length: {length}\r\n\r\n{{"
        );
        stream.write_all(head.as_bytes()).await.unwrap();
        stalled.push(stream);
    }
    timeout(WAIT, async {
        while free() > 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("every permit held by a stalled body");

    let next = tokio::spawn({
        let (socket, target) = (socket.to_owned(), target.to_owned());
        async move { send(&socket, "POST", &target, &[], b"{}").await.status }
    });
    // It cannot finish while every permit is held; this only waits a little to see that.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!next.is_finished(), "body {} was taken in", held + 1);
    assert_eq!(seen(), 0);

    drop(stalled.pop());
    let status = timeout(WAIT, next)
        .await
        .expect("the next POST went through")
        .unwrap();
    assert_eq!(status, StatusCode::OK);
    assert_eq!(seen(), 1);
}
