//! The MCP relay's test parts, shared by the crate's unit tests and the lab tests: a
//! Publication API stand-in that records every request it gets, and an HTTP/1.1 client for the
//! relay's unix socket that reads a body as it arrives.
//!
//! The stand-in answers by the request's `mcp-session-id`: `redirect` gets a 307 to
//! [`Upstream::redirect_target`]; a GET streams `text/event-stream` events the test pushes
//! through [`Upstream::push_event`]; anything else gets a 200 JSON echo of the method and body.
//! Every answer also tries to echo the received `x-api-key` back in headers of its own.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, UnixStream};
use tokio::sync::mpsc;

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
    /// The values of header `name`.
    pub fn header(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }
}

type Events = mpsc::UnboundedReceiver<Bytes>;

/// The stand-in's shared state.
#[derive(Clone)]
pub struct Upstream {
    /// Where it listens.
    pub addr: SocketAddr,
    /// What it received, in order.
    pub seen: Arc<Mutex<Vec<Seen>>>,
    events: Arc<Mutex<Option<Events>>>,
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
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let state = state.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        let state = state.clone();
                        async move { Ok::<_, Infallible>(state.answer(request).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
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

    async fn answer(&self, request: Request<Incoming>) -> Response<BoxBody<Bytes, Infallible>> {
        let (parts, body) = request.into_parts();
        let body = body.collect().await.unwrap().to_bytes().to_vec();
        let seen = Seen {
            method: parts.method.to_string(),
            target: parts.uri.to_string(),
            headers: parts
                .headers
                .iter()
                .map(|(n, v)| (n.as_str().to_owned(), v.to_str().unwrap_or("?").to_owned()))
                .collect(),
            body: body.clone(),
        };
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
            let events = self.events.lock().unwrap().take();
            let Some(events) = events else {
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
            return response
                .status(StatusCode::OK)
                .header("content-type", "text/event-stream")
                .body(BodyExt::boxed(body))
                .unwrap();
        }
        let echo = serde_json::json!({
            "method": parts.method.as_str(),
            "body": String::from_utf8_lossy(&body),
        });
        response
            .status(StatusCode::OK)
            .header("content-type", "application/json")
            .body(full(&echo.to_string()))
            .unwrap()
    }
}

fn full(text: &str) -> BoxBody<Bytes, Infallible> {
    Full::new(Bytes::from(text.to_owned())).boxed()
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
