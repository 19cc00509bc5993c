//! The turn door's relay listener (`mcp.sock`, which the shim forwards loopback 3129 to): one
//! HTTP server for both relays, told apart by path. [`MCP_PATH`](crate::mcp::MCP_PATH) goes
//! to the MCP relay; `/model` and everything below it to the model relay when the plan has
//! one; anything else, and `/model/…` without a model relay, to the MCP relay, which refuses
//! it as `not_found` as it always has.
//!
//! Also the plumbing both relays share, each with its own refusals, bounds and allowlists: the
//! upstream client ([`client`]), the method a decision names ([`recorded_method`]), the
//! problem+json answer to a refusal ([`problem`]), the request headers passed on ([`pass_on`]),
//! the POST bodies held ([`Bodies`]) and the upstream's answer streamed back ([`stream_back`]).

use std::io;
use std::sync::Arc;
use std::time::Duration;

use atelier_http::{read_body, BodyError, BoxError, Listener, Problem, Request, Response};
use atelier_layout::services::MODEL_RELAY_PATH;
use bytes::Bytes;
use futures_util::TryStreamExt as _;
use http_body_util::{BodyExt as _, StreamBody};
use hyper::body::Frame;
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use hyper::{Method, StatusCode};
use tokio::net::UnixListener;
use tokio::sync::{Semaphore, SemaphorePermit};

use crate::mcp::{self, McpDoor};
use crate::model::{self, ModelDoor};

/// How long open requests may finish once the relays are told to stop.
const DRAIN_DEADLINE: Duration = Duration::from_secs(5);

/// The most connections the relay listener holds open at once. Its one client is the turn's
/// agent, whose CLI keeps a few (a model stream, an MCP session, a count of tokens); one that
/// opened connections without end would otherwise grow the gate past its memory cap, and the
/// site's other doors with it.
pub const MAX_CONNECTIONS: usize = 64;

/// How long connecting upstream may take. There is no bound on the whole exchange: an MCP SSE
/// stream lasts as long as its session, a model's answer streams for as long as it writes.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The `type` of every relay problem; the `reason` member names the refusal.
const PROBLEM_TYPE: &str = "about:blank";

/// The relays one listener serves.
#[derive(Debug, Clone)]
pub struct Relays {
    /// The MCP relay, which every relay listener has.
    pub mcp: Arc<McpDoor>,
    /// The model relay, when the plan has one.
    pub model: Option<Arc<ModelDoor>>,
}

impl Relays {
    /// Hands `request` to the relay its path belongs to.
    pub async fn dispatch(&self, request: Request) -> Response {
        match &self.model {
            Some(model) if is_model_path(request.uri().path()) => {
                model::relay(Arc::clone(model), request).await
            }
            _ => mcp::relay(Arc::clone(&self.mcp), request).await,
        }
    }
}

/// Returns true if and only if `path` is `/model` or below it.
pub fn is_model_path(path: &str) -> bool {
    path.strip_prefix(MODEL_RELAY_PATH)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// Serves both relays on `listener`, at most [`MAX_CONNECTIONS`] connections at once, until
/// accepting fails for good.
pub async fn serve(listener: UnixListener, relays: Relays) -> io::Result<()> {
    let relays = Arc::new(relays);
    let handler = move |request: Request| {
        let relays = Arc::clone(&relays);
        async move { relays.dispatch(request).await }
    };
    atelier_http::serve_at_most(
        Listener::Unix(listener),
        MAX_CONNECTIONS,
        handler,
        std::future::pending(),
        DRAIN_DEADLINE,
    )
    .await
    .map(|_| ())
    .map_err(io::Error::other)
}

/// The HTTP client a relay sends upstream with. It follows no redirect (a relay answers any
/// 3xx with a 502, so the Location is never reached), uses no proxy from the environment, and
/// gives up connecting after [`CONNECT_TIMEOUT`].
pub(crate) fn client() -> reqwest::Result<reqwest::Client> {
    client_builder().build()
}

/// [`client`] before it is built, for a relay that adds to it (the model relay's resolver).
pub(crate) fn client_builder() -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .connect_timeout(CONNECT_TIMEOUT)
}

/// What an upstream request's `error` says, for the log: its own text without its URL (whose
/// query is the agent's and may carry anything), then each of its causes, `: `-separated.
/// reqwest's own text alone (`error sending request`) says nothing of why, which its causes do
/// (`dns error: llm.example.com: it resolves to an address that is not public: 10.0.0.7
/// private`, say).
pub(crate) fn failure(error: reqwest::Error) -> String {
    let error = error.without_url();
    let mut text = error.to_string();
    let mut cause = std::error::Error::source(&error);
    while let Some(inner) = cause {
        let shown = inner.to_string();
        // A wrapper may show its cause's text as its own.
        if !text.ends_with(&shown) {
            text.push_str(": ");
            text.push_str(&shown);
        }
        cause = inner.source();
    }
    text
}

/// How a decision names `method`: as itself when it is one of `served`, the methods the relay
/// serves, else `OTHER`. A method is any token the agent chooses, and each distinct reason is
/// a decision of its own (deduplicated, and capped per run): a refused extension method must
/// not mint new ones.
pub(crate) fn recorded_method<'a>(method: &'a Method, served: &[Method]) -> &'a str {
    if served.contains(method) {
        method.as_str()
    } else {
        "OTHER"
    }
}

/// The problem+json answer to a refused request: `status` with its canonical reason as the
/// title, `detail`, the refusal's stable name as the `reason` member, and `Allow` naming the
/// `allow`ed methods when there are some (a 405 must say which).
pub(crate) fn problem(
    status: StatusCode,
    reason: &str,
    detail: String,
    allow: Option<&[Method]>,
) -> Response {
    let title = status.canonical_reason().unwrap_or("Error");
    let problem = Problem::new(status, PROBLEM_TYPE, title)
        .with_detail(detail)
        .with_reason(reason);
    match allow {
        Some(methods) => problem.with_allow(methods),
        None => problem,
    }
    .into_response()
}

/// `upstream` with every value `headers` holds of each of `names`, in the order of `names`:
/// an allowlist, so every other header the agent sent is dropped.
pub(crate) fn pass_on(
    mut upstream: reqwest::RequestBuilder,
    headers: &HeaderMap,
    names: &[&'static str],
) -> reqwest::RequestBuilder {
    for &name in names {
        for value in headers.get_all(name) {
            upstream = upstream.header(name, value.clone());
        }
    }
    upstream
}

/// Why a POST body was not taken in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BodyRefusal {
    /// It exceeds the relay's bound.
    TooLarge,
    /// It could not be read from the agent, or did not arrive in full in time.
    Unreadable,
}

/// The POST bodies one relay holds: at most a few at once (each from its first byte until it
/// was sent upstream), so a run opening many large POSTs and stalling them waits for its own
/// earlier ones instead of growing the gate past its memory cap; each bounded in size and in
/// how long it may take to arrive.
pub(crate) struct Bodies {
    /// One permit per body held.
    permits: Semaphore,
    /// The largest body taken in, in bytes.
    limit: usize,
    /// How long a body may take to arrive in full, once it holds a permit.
    timeout: Duration,
}

impl Bodies {
    /// At most `held` bodies at once, each of at most `limit` bytes arriving within `timeout`.
    pub(crate) fn new(held: usize, limit: usize, timeout: Duration) -> Bodies {
        Bodies {
            permits: Semaphore::new(held),
            limit,
            timeout,
        }
    }

    /// `request`'s body when it is a POST (the only method whose body a relay passes on),
    /// read in full once a permit is free; `None` otherwise. The permit comes back with it:
    /// the caller keeps it until the body went upstream.
    pub(crate) async fn take(
        &self,
        request: Request,
    ) -> Result<(Option<Bytes>, Option<SemaphorePermit<'_>>), BodyRefusal> {
        if request.method() != Method::POST {
            return Ok((None, None));
        }
        // The semaphore is never closed, so a permit always comes.
        let permit = self.permits.acquire().await.ok();
        let read = read_body(request.into_body(), self.limit);
        match tokio::time::timeout(self.timeout, read).await {
            Ok(Ok(body)) => Ok((Some(body), permit)),
            Ok(Err(BodyError::TooLarge { .. })) => Err(BodyRefusal::TooLarge),
            Ok(Err(_)) | Err(_) => Err(BodyRefusal::Unreadable),
        }
    }

    /// How many more bodies may be taken in now.
    #[cfg(test)]
    pub(crate) fn available_permits(&self) -> usize {
        self.permits.available_permits()
    }
}

/// The agent's answer from the upstream's `answer`: its status, `headers` (those the relay
/// picked from it, in the order given), and its body streamed as it arrives (an SSE stream is
/// not buffered), a failure inside it shown without its URL, whose query is the agent's.
///
/// `None` only if the response could not be built, which only an invalid header could cause,
/// and every one was copied from a valid one.
pub(crate) fn stream_back(
    answer: reqwest::Response,
    headers: impl IntoIterator<Item = (HeaderName, HeaderValue)>,
) -> Option<Response> {
    let mut response = hyper::Response::builder().status(answer.status().as_u16());
    for (name, value) in headers {
        response = response.header(name, value);
    }
    let body = StreamBody::new(
        answer
            .bytes_stream()
            .map_ok(Frame::data)
            .map_err(|error| -> BoxError { Box::new(error.without_url()) }),
    )
    .boxed();
    response.body(body).ok()
}
