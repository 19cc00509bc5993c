//! The MCP relay on the turn door: plain HTTP on its own socket, relayed to the Publication
//! API's `…/mcp` with the gate's own key added, so the key never enters the agent's unit.
//!
//! Per request, in order: only [`MCP_PATH`] (else 404) with POST, GET or DELETE (else 405);
//! request headers by allowlist ([`REQUEST_HEADERS`]), then [`API_KEY_HEADER`] from the gate's
//! credential; the body, for POST only, bounded at [`MAX_REQUEST_BODY`] (else 413). Upstream
//! redirects are never followed: any 3xx is a 502. The status and the body pass through as
//! they arrive (SSE streams are not buffered), with response headers by allowlist
//! ([`RESPONSE_HEADERS`]). At most [`MAX_BODIES_HELD`] bodies are held at once, each for at
//! most 30 s of reading. Every outcome is a decision of the turn door (host [`MCP_HOST`], no
//! port, the reason `<method> /mcp <status or refusal>`), recorded in the door's
//! [`DecisionLog`] before the agent gets its answer.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use atelier_http::{read_body, BodyError, BoxError, Listener, Problem, Request, Response};
use atelier_proto::egress::{Verdict, MCP_HOST};
use atelier_sd::credentials::Secret;
use futures_util::TryStreamExt as _;
use http_body_util::{BodyExt as _, StreamBody};
use hyper::body::Frame;
use hyper::header::{HeaderName, HeaderValue, ALLOW};
use hyper::{Method, StatusCode};
use tokio::net::UnixListener;

use crate::metrics::{McpOutcome, Metrics};
use crate::serve::DecisionLog;

/// The only path the relay serves.
pub const MCP_PATH: &str = "/mcp";

/// The largest request body relayed (the original gate's bound).
pub const MAX_REQUEST_BODY: usize = 4 * 1024 * 1024; // 4 MiB

/// Request headers passed upstream; every other one is dropped.
pub const REQUEST_HEADERS: [&str; 5] = [
    "content-type",
    "accept",
    "mcp-protocol-version",
    "mcp-session-id",
    "last-event-id",
];

/// Response headers passed back to the agent; every other one is dropped.
pub const RESPONSE_HEADERS: [&str; 3] = ["content-type", "mcp-session-id", "cache-control"];

/// The header carrying the Publication API key upstream.
pub const API_KEY_HEADER: &str = "x-api-key";

/// How long connecting upstream may take. There is no bound on the whole exchange: an SSE
/// stream lasts as long as the session.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How many request bodies are held at once (each up to [`MAX_REQUEST_BODY`], from its first
/// byte until it was sent upstream): a run opening many large POSTs and stalling them waits
/// for its own earlier ones instead of growing the gate past its memory cap.
pub const MAX_BODIES_HELD: usize = 8;

/// How long a POST body may take to arrive in full.
const BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// How long open requests may finish once the relay is told to stop.
const DRAIN_DEADLINE: Duration = Duration::from_secs(5);

/// The `type` of every relay problem; the `reason` member names the refusal.
const PROBLEM_TYPE: &str = "about:blank";

/// Why the relay answers something other than the upstream's response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum McpRefusal {
    /// The path is not [`MCP_PATH`] (404).
    #[error("only /mcp is relayed")]
    NotFound,
    /// The method is not POST, GET or DELETE (405).
    #[error("only POST, GET and DELETE are relayed")]
    MethodNotAllowed,
    /// The POST body exceeds [`MAX_REQUEST_BODY`] (413).
    #[error("the request body is too large")]
    BodyTooLarge,
    /// The POST body could not be read from the agent, or did not arrive in full within 30 s
    /// (400).
    #[error("the request body could not be read")]
    BodyUnreadable,
    /// The upstream answered with a redirect, which is never followed (502).
    #[error("the Publication API answered with a redirect, which is not followed")]
    UpstreamRedirect,
    /// The upstream could not be reached or failed before answering (502).
    #[error("the Publication API could not be reached")]
    UpstreamUnreachable,
}

impl McpRefusal {
    /// The stable snake_case name used in logs and in the problem's `reason`.
    pub fn as_str(self) -> &'static str {
        match self {
            McpRefusal::NotFound => "not_found",
            McpRefusal::MethodNotAllowed => "method_not_allowed",
            McpRefusal::BodyTooLarge => "body_too_large",
            McpRefusal::BodyUnreadable => "body_unreadable",
            McpRefusal::UpstreamRedirect => "upstream_redirect",
            McpRefusal::UpstreamUnreachable => "upstream_unreachable",
        }
    }

    /// The HTTP status the agent gets.
    pub fn status(self) -> StatusCode {
        match self {
            McpRefusal::NotFound => StatusCode::NOT_FOUND,
            McpRefusal::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            McpRefusal::BodyTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            McpRefusal::BodyUnreadable => StatusCode::BAD_REQUEST,
            McpRefusal::UpstreamRedirect | McpRefusal::UpstreamUnreachable => {
                StatusCode::BAD_GATEWAY
            }
        }
    }

    fn response(self) -> Response {
        let title = self.status().canonical_reason().unwrap_or("Error");
        let problem = Problem::new(self.status(), PROBLEM_TYPE, title)
            .with_detail(self.to_string())
            .with_reason(self.as_str());
        let problem = if self == McpRefusal::MethodNotAllowed {
            problem.with_header(ALLOW, HeaderValue::from_static("POST, GET, DELETE"))
        } else {
            problem
        };
        problem.into_response()
    }
}

/// Why the relay cannot be set up.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    /// The credential holds bytes no header may carry (a newline inside, say). The value is
    /// never part of the message.
    #[error("the Publication API key is not a valid header value")]
    BadKey,
    /// The HTTP client could not be built.
    #[error("building the relay's HTTP client: {0}")]
    Client(#[source] reqwest::Error),
}

/// Everything the relay needs.
pub struct McpDoor {
    /// The upstream `…/mcp` URL, from the plan.
    pub upstream: String,
    /// The key's header value, marked sensitive; `None` when the instance declares no key.
    key: Option<HeaderValue>,
    client: reqwest::Client,
    /// The decisions of the door the relay serves (the turn door's).
    pub log: Arc<DecisionLog>,
    /// Where each request's outcome is counted.
    metrics: Metrics,
    /// One permit per request body held (see [`MAX_BODIES_HELD`]).
    bodies: tokio::sync::Semaphore,
}

impl McpDoor {
    /// A relay to `upstream` adding `key` (when there is one) as [`API_KEY_HEADER`], recording
    /// its decisions in `log`, the log of the door it serves. The client follows no redirect
    /// and uses no proxy from the environment.
    pub fn new(
        upstream: &str,
        key: Option<Secret<String>>,
        log: Arc<DecisionLog>,
    ) -> Result<McpDoor, McpError> {
        let key = key
            .map(|key| {
                let mut value =
                    HeaderValue::from_str(key.expose()).map_err(|_| McpError::BadKey)?;
                value.set_sensitive(true);
                Ok(value)
            })
            .transpose()?;
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .connect_timeout(CONNECT_TIMEOUT)
            .build()
            .map_err(McpError::Client)?;
        Ok(McpDoor {
            upstream: upstream.to_owned(),
            key,
            client,
            log,
            metrics: Metrics::default(),
            bodies: tokio::sync::Semaphore::new(MAX_BODIES_HELD),
        })
    }

    /// The same relay, counting each request's outcome into `metrics`.
    pub fn with_metrics(self, metrics: Metrics) -> McpDoor {
        McpDoor { metrics, ..self }
    }

    fn record(&self, method: &Method, verdict: Verdict, outcome: &str) {
        self.log.record(
            MCP_HOST,
            None,
            verdict,
            &format!("{method} {MCP_PATH} {outcome}"),
        );
    }

    fn refuse(&self, method: &Method, refusal: McpRefusal) -> Response {
        self.record(method, Verdict::Refused, refusal.as_str());
        self.metrics.mcp_request(McpOutcome::Refused(refusal));
        refusal.response()
    }
}

impl std::fmt::Debug for McpDoor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpDoor")
            .field("upstream", &self.upstream)
            .field("key", &self.key.as_ref().map(|_| "[redacted]"))
            .finish()
    }
}

/// Serves the relay on `listener` until accepting fails for good.
pub async fn serve(listener: UnixListener, door: Arc<McpDoor>) -> io::Result<()> {
    let handler = move |request: Request| relay(Arc::clone(&door), request);
    atelier_http::serve(
        Listener::Unix(listener),
        handler,
        std::future::pending(),
        DRAIN_DEADLINE,
    )
    .await
    .map(|_| ())
    .map_err(io::Error::other)
}

/// Relays one request; see the module documentation for the order of checks.
pub async fn relay(door: Arc<McpDoor>, request: Request) -> Response {
    let method = request.method().clone();
    if request.uri().path() != MCP_PATH {
        return door.refuse(&method, McpRefusal::NotFound);
    }
    if !matches!(method, Method::POST | Method::GET | Method::DELETE) {
        return door.refuse(&method, McpRefusal::MethodNotAllowed);
    }
    let mut upstream = door.client.request(method.clone(), &door.upstream);
    for name in REQUEST_HEADERS {
        for value in request.headers().get_all(name) {
            upstream = upstream.header(name, value.clone());
        }
    }
    if let Some(key) = &door.key {
        upstream = upstream.header(API_KEY_HEADER, key.clone());
    }
    // Held until the body went upstream (see [`MAX_BODIES_HELD`]); the semaphore is never
    // closed.
    let mut _holding = None;
    if method == Method::POST {
        _holding = door.bodies.acquire().await.ok();
        let read = read_body(request.into_body(), MAX_REQUEST_BODY);
        match tokio::time::timeout(BODY_READ_TIMEOUT, read).await {
            Ok(Ok(body)) => upstream = upstream.body(body),
            Ok(Err(BodyError::TooLarge { .. })) => {
                return door.refuse(&method, McpRefusal::BodyTooLarge)
            }
            Ok(Err(_)) | Err(_) => return door.refuse(&method, McpRefusal::BodyUnreadable),
        }
    }
    let answer = match upstream.send().await {
        Ok(answer) => answer,
        Err(error) => {
            tracing::warn!(error = %error.without_url(), "the MCP upstream failed");
            return door.refuse(&method, McpRefusal::UpstreamUnreachable);
        }
    };
    if answer.status().is_redirection() {
        // Dropping the answer cancels its body; the Location is not followed, nor shown.
        return door.refuse(&method, McpRefusal::UpstreamRedirect);
    }
    door.record(&method, Verdict::Relayed, answer.status().as_str());
    door.metrics.mcp_request(McpOutcome::Relayed);
    let mut response = hyper::Response::builder().status(answer.status().as_u16());
    for name in RESPONSE_HEADERS {
        for value in answer.headers().get_all(name) {
            response = response.header(HeaderName::from_static(name), value.as_bytes());
        }
    }
    let body = StreamBody::new(
        answer
            .bytes_stream()
            .map_ok(Frame::data)
            .map_err(|error| -> BoxError { Box::new(error.without_url()) }),
    )
    .boxed();
    match response.body(body) {
        Ok(response) => response,
        // Only an invalid header could fail here, and every one was copied from a valid one.
        Err(_) => door.refuse(&method, McpRefusal::UpstreamUnreachable),
    }
}

#[cfg(test)]
mod tests;
