//! HTTP/1.1 serving on injected listeners: RFC 9457 problems, JSON / NDJSON / SSE responses,
//! request body limits and a graceful drain with a deadline.
//!
//! The crate never binds a socket: the caller hands it listeners (from systemd, or bound by a
//! test) and a handler `Fn(Request) -> impl Future<Output = Response>`. It knows nothing of the
//! surfaces built on it: problem `type` URIs, routes and event bodies belong to the caller.
//!
//! Parts:
//! - [`serve`], [`serve_connection`], [`Listener`], [`Peer`], [`shutdown_signal`]: accepting
//!   and draining connections.
//! - [`Problem`]: `application/problem+json` error responses with a fixed member order.
//! - [`json_response`], [`ndjson_response`], [`full_body`], [`empty_body`]: response bodies.
//! - [`SseEvent`], [`SseKeepAlive`], [`sse_response`]: `text/event-stream` responses.
//! - [`read_body`], [`BodyError`]: reading a request body under a size limit.
//! - [`with_request_log`]: one log line per request.

mod body;
mod frames;
mod problem;
mod request_log;
mod response;
mod serve;
mod sse;

#[cfg(test)]
mod test_support;

pub use body::{read_body, BodyError};
pub use problem::Problem;
pub use request_log::with_request_log;
pub use response::{empty_body, full_body, json_bytes_response, json_response, ndjson_response};
pub use serve::{
    serve, serve_at_most, serve_connection, shutdown_signal, Listener, Peer, PeerCred, ServeError,
    ServeReport,
};
pub use sse::{push_event, sse_response, SseChunk, SseEvent, SseKeepAlive};

/// The error type carried by response bodies and body read failures.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Every response body this crate produces: a boxed stream of byte frames.
pub type Body = http_body_util::combinators::BoxBody<bytes::Bytes, BoxError>;

/// A response as handlers return it.
pub type Response = hyper::Response<Body>;

/// A request as handlers receive it; its extensions carry the connection's [`Peer`].
pub type Request = hyper::Request<hyper::body::Incoming>;

/// `Cache-Control` value of every response built here: API answers are never cached.
const NO_STORE: hyper::header::HeaderValue = hyper::header::HeaderValue::from_static("no-store");
