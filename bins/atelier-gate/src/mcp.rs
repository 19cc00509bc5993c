//! The MCP relay on the turn door: plain HTTP on the door's relay socket (shared with the
//! model relay, see [`relay`](crate::relay)), relayed to the Publication API's `…/mcp` with
//! the gate's own key added, so the key never enters the agent's unit.
//!
//! Per request, in order: only [`MCP_PATH`] (else 404) with POST, GET or DELETE (else 405);
//! request headers by allowlist ([`REQUEST_HEADERS`]), then [`API_KEY_HEADER`] from the gate's
//! credential; the body, for POST only, bounded at [`MAX_REQUEST_BODY`] (else 413). Upstream
//! redirects are never followed: any 3xx is a 502. The status and the body pass through as
//! they arrive (SSE streams are not buffered), with response headers by allowlist
//! ([`RESPONSE_HEADERS`]). At most [`MAX_BODIES_HELD`] bodies are held at once, each for at
//! most 30 s of reading. Every outcome is a decision of the turn door (host [`MCP_HOST`], no
//! port, the reason `<method> /mcp <status or refusal>`, a method other than POST, GET or
//! DELETE reading `OTHER`), recorded in the door's [`DecisionLog`] before the agent gets its
//! answer.

use std::sync::Arc;
use std::time::Duration;

use atelier_http::{Request, Response};
use atelier_proto::egress::{Verdict, MCP_HOST};
use atelier_sd::credentials::Secret;
use hyper::header::{HeaderName, HeaderValue};
use hyper::{Method, StatusCode};

use crate::metrics::{McpOutcome, Metrics};
use crate::relay::{self, Bodies, BodyRefusal};
use crate::serve::DecisionLog;

/// The only path the relay serves.
pub const MCP_PATH: &str = "/mcp";

/// The methods relayed, in the order a 405's `Allow` names them.
const METHODS: [Method; 3] = [Method::POST, Method::GET, Method::DELETE];

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

/// How many request bodies are held at once (each up to [`MAX_REQUEST_BODY`], from its first
/// byte until it was sent upstream): a run opening many large POSTs and stalling them waits
/// for its own earlier ones instead of growing the gate past its memory cap.
pub const MAX_BODIES_HELD: usize = 8;

/// How long a POST body may take to arrive in full.
const BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);

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
    /// The request bodies held (see [`MAX_BODIES_HELD`]).
    bodies: Bodies,
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
        Ok(McpDoor {
            upstream: upstream.to_owned(),
            key,
            client: relay::client().map_err(McpError::Client)?,
            log,
            metrics: Metrics::default(),
            bodies: Bodies::new(MAX_BODIES_HELD, MAX_REQUEST_BODY, BODY_READ_TIMEOUT),
        })
    }

    /// The same relay, counting each request's outcome into `metrics`.
    pub fn with_metrics(self, metrics: Metrics) -> McpDoor {
        McpDoor { metrics, ..self }
    }

    /// Records a decision about a `method` request: the method as itself only when it is POST,
    /// GET or DELETE ([`relay::recorded_method`]).
    fn record(&self, method: &Method, verdict: Verdict, outcome: &str) {
        let method = relay::recorded_method(method, &METHODS);
        self.log.record(
            MCP_HOST,
            None,
            verdict,
            &format!("{method} {MCP_PATH} {outcome}"),
        );
    }

    /// Records and counts `refusal`; its problem+json answer, with `Allow` on a 405.
    fn refuse(&self, method: &Method, refusal: McpRefusal) -> Response {
        self.record(method, Verdict::Refused, refusal.as_str());
        self.metrics.mcp_request(McpOutcome::Refused(refusal));
        let allow = (refusal == McpRefusal::MethodNotAllowed).then_some(&METHODS[..]);
        relay::problem(
            refusal.status(),
            refusal.as_str(),
            refusal.to_string(),
            allow,
        )
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

/// Relays one request; see the module documentation for the order of checks.
pub async fn relay(door: Arc<McpDoor>, request: Request) -> Response {
    let method = request.method().clone();
    if request.uri().path() != MCP_PATH {
        return door.refuse(&method, McpRefusal::NotFound);
    }
    if !METHODS.contains(&method) {
        return door.refuse(&method, McpRefusal::MethodNotAllowed);
    }
    let upstream = door.client.request(method.clone(), &door.upstream);
    let mut upstream = relay::pass_on(upstream, request.headers(), &REQUEST_HEADERS);
    if let Some(key) = &door.key {
        upstream = upstream.header(API_KEY_HEADER, key.clone());
    }
    // Held until the body went upstream (see [`MAX_BODIES_HELD`]).
    let (body, _holding) = match door.bodies.take(request).await {
        Ok(taken) => taken,
        Err(BodyRefusal::TooLarge) => return door.refuse(&method, McpRefusal::BodyTooLarge),
        Err(BodyRefusal::Unreadable) => return door.refuse(&method, McpRefusal::BodyUnreadable),
    };
    if let Some(body) = body {
        upstream = upstream.body(body);
    }
    let answer = match upstream.send().await {
        Ok(answer) => answer,
        Err(error) => {
            let error = relay::failure(error);
            tracing::warn!(%error, "the MCP upstream failed");
            return door.refuse(&method, McpRefusal::UpstreamUnreachable);
        }
    };
    if answer.status().is_redirection() {
        // Dropping the answer cancels its body; the Location is not followed, nor shown.
        return door.refuse(&method, McpRefusal::UpstreamRedirect);
    }
    door.record(&method, Verdict::Relayed, answer.status().as_str());
    door.metrics.mcp_request(McpOutcome::Relayed);
    // By the allowlist, in its order.
    let headers: Vec<(HeaderName, HeaderValue)> = RESPONSE_HEADERS
        .into_iter()
        .flat_map(|name| {
            let values = answer.headers().get_all(name).iter();
            values.map(move |value| (HeaderName::from_static(name), value.clone()))
        })
        .collect();
    relay::stream_back(answer, headers)
        .unwrap_or_else(|| door.refuse(&method, McpRefusal::UpstreamUnreachable))
}

#[cfg(test)]
pub(crate) mod tests;
