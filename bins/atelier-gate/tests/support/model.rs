//! The model relay's test parts, shared by the crate's unit tests and the integration tests: a
//! model provider stand-in (a test double) that records every request it gets.
//!
//! The stand-in answers by the `answer` parameter of the request's query (the relay passes on
//! only a model API's own endpoints, but every query as it is): `answer=redirect` gets a 307 to
//! its own `/followed` (recorded too, should anyone follow it); `answer=stream` gets a
//! `text/event-stream` body made of the chunks the test pushes through
//! [`ModelUpstream::push_chunk`], which ends when the test calls [`ModelUpstream::finish`];
//! `answer=<code>` gets that status; anything else gets a 200 JSON echo of the method, target
//! and body. Every answer carries the headers a provider sends (request ids,
//! rate limits, `retry-after`) and some the relay must drop (`set-cookie`, `x-powered-by`,
//! `openai-organization`, and the received key echoed back).
//!
//! It is built of the MCP stand-in's parts (`Seen`, the server loop, the streamed and plain
//! answers), from the sibling module `mcp`.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use super::mcp::{full, json, serve, stream_once, Answer, Events, Seen};

/// The response headers the relay passes back from every stand-in answer.
pub const PASSED_BACK: [&str; 7] = [
    "anthropic-ratelimit-requests-remaining",
    "cache-control",
    "content-type",
    "request-id",
    "retry-after",
    "x-ratelimit-remaining-tokens",
    "x-request-id",
];

/// The stand-in's shared state.
#[derive(Clone)]
pub struct ModelUpstream {
    /// Where it listens.
    pub addr: SocketAddr,
    /// What it received, in order, each recorded as soon as its body was read (before any
    /// answer is streamed).
    seen: Arc<Mutex<Vec<Seen>>>,
    chunks: Arc<Events>,
    push: Arc<Mutex<Option<mpsc::UnboundedSender<Bytes>>>>,
}

impl ModelUpstream {
    /// Binds loopback and serves there until the runtime ends.
    pub async fn on_loopback() -> ModelUpstream {
        ModelUpstream::start(std::net::TcpListener::bind("127.0.0.1:0").unwrap())
    }

    /// Serves on `listener` (already bound, possibly in another network namespace) until the
    /// runtime ends; call it inside the runtime.
    pub fn start(listener: std::net::TcpListener) -> ModelUpstream {
        listener.set_nonblocking(true).unwrap();
        let listener = TcpListener::from_std(listener).unwrap();
        let (push, chunks) = mpsc::unbounded_channel();
        let upstream = ModelUpstream {
            addr: listener.local_addr().unwrap(),
            seen: Arc::default(),
            chunks: Arc::new(Mutex::new(Some(chunks))),
            push: Arc::new(Mutex::new(Some(push))),
        };
        let state = upstream.clone();
        serve(listener, move |request| {
            let state = state.clone();
            async move { state.answer(request).await }
        });
        upstream
    }

    /// Its base URL with `path` (`""` or `/v1`, say) below it.
    pub fn base(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Sends one chunk down the (single) streamed answer.
    pub fn push_chunk(&self, chunk: &str) {
        let push = self.push.lock().unwrap();
        push.as_ref()
            .expect("not finished")
            .send(Bytes::from(chunk.to_owned()))
            .unwrap();
    }

    /// Ends the streamed answer.
    pub fn finish(&self) {
        self.push.lock().unwrap().take();
    }

    /// Every request received so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    async fn answer(&self, request: Request<Incoming>) -> Answer {
        let (parts, seen) = Seen::read(request).await;
        let body = seen.body.clone();
        let key = seen.header("x-api-key").first().map(|s| s.to_string());
        let authorization = seen.header("authorization").first().map(|s| s.to_string());
        self.seen.lock().unwrap().push(seen);
        let answer = parts.uri.query().and_then(|query| {
            query
                .split('&')
                .find_map(|pair| pair.strip_prefix("answer="))
        });
        let mut response = Response::builder()
            .header("request-id", "req_0123")
            .header("x-request-id", "xreq_0123")
            .header("anthropic-ratelimit-requests-remaining", "99")
            .header("x-ratelimit-remaining-tokens", "4000")
            .header("retry-after", "1")
            .header("cache-control", "no-cache")
            .header("set-cookie", "upstream=1")
            .header("x-powered-by", "stand-in")
            .header("openai-organization", "org-stand-in");
        // A careless upstream echoing the key: the relay must drop these.
        if let Some(key) = key {
            response = response.header("x-echoed-key", key);
        }
        if let Some(authorization) = authorization {
            response = response.header("x-echoed-authorization", authorization);
        }
        if answer == Some("redirect") {
            return response
                .status(StatusCode::TEMPORARY_REDIRECT)
                .header("location", format!("http://{}/followed", self.addr))
                .body(full("redirecting"))
                .unwrap();
        }
        if answer == Some("stream") {
            return stream_once(&self.chunks, response);
        }
        if let Some(code) = answer.and_then(|code| code.parse().ok()) {
            let status = StatusCode::from_u16(code).unwrap();
            return json(response, status, r#"{"type":"error"}"#);
        }
        let echo = serde_json::json!({
            "method": parts.method.as_str(),
            "target": parts.uri.to_string(),
            "body": String::from_utf8_lossy(&body),
        });
        json(response, StatusCode::OK, &echo.to_string())
    }
}
