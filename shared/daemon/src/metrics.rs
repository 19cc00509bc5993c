//! A daemon's metrics socket: the registry its counters live in, exposed as OpenMetrics text
//! to whoever may connect (the socket unit's group, never the daemon's clients).
//!
//! The socket is passed by systemd beside the daemon's own, named
//! [`METRICS_SOCKET_NAME`](atelier_layout::names::METRICS_SOCKET_NAME). Scraping answers
//! `GET /metrics` (and `/`, for a hand-typed `curl --unix-socket`); nothing else is served.

use std::sync::Arc;

use atelier_http::{full_body, Listener, Problem, Request, Response};
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Method, StatusCode};
use prometheus_client::registry::Registry;

/// The content type of the OpenMetrics text exposition.
pub const CONTENT_TYPE_OPENMETRICS: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The problem `type` of a request for anything but the metrics.
const NOT_FOUND_TYPE: &str = "urn:atelier:metrics:not_found";

/// The metrics server of a running daemon; dropping it stops the server.
#[derive(Debug)]
pub struct MetricsServer {
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// Serves `registry` on `listener` until the returned handle is dropped; with no listener
/// (no metrics socket was passed, as in development) the counters are kept and not served.
/// Must run inside a tokio runtime.
pub fn spawn(listener: Option<Listener>, registry: Registry) -> MetricsServer {
    let Some(listener) = listener else {
        tracing::info!("no metrics socket was passed: metrics are not served");
        return MetricsServer { task: None };
    };
    let registry = Arc::new(registry);
    let handler = move |request: Request| {
        let registry = Arc::clone(&registry);
        async move { respond(&request, &registry) }
    };
    let task = tokio::spawn(async move {
        // The daemon's end ends this task (the handle aborts it); scrapes need no drain.
        let served = atelier_http::serve(
            listener,
            handler,
            std::future::pending(),
            std::time::Duration::ZERO,
        )
        .await;
        if let Err(error) = served {
            tracing::error!(%error, "the metrics socket failed; metrics are no longer served");
        }
    });
    MetricsServer { task: Some(task) }
}

/// The answer to one request on the metrics socket.
pub fn respond(request: &Request, registry: &Registry) -> Response {
    respond_to(request.method(), request.uri().path(), registry)
}

fn respond_to(method: &Method, path: &str, registry: &Registry) -> Response {
    if path != "/metrics" && path != "/" {
        return Problem::new(StatusCode::NOT_FOUND, NOT_FOUND_TYPE, "Not found")
            .with_detail("this socket serves GET /metrics only")
            .into_response();
    }
    if method != Method::GET && method != Method::HEAD {
        return Problem::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "urn:atelier:metrics:method_not_allowed",
            "Method not allowed",
        )
        .with_allow(&[Method::GET, Method::HEAD])
        .into_response();
    }
    let mut text = String::new();
    if let Err(error) = prometheus_client::encoding::text::encode(&mut text, registry) {
        tracing::error!(%error, "encoding the metrics failed");
        return Problem::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "urn:atelier:metrics:encoding_failed",
            "The metrics could not be encoded",
        )
        .into_response();
    }
    let mut response = Response::new(full_body(text));
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static(CONTENT_TYPE_OPENMETRICS),
    );
    response
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt as _;
    use prometheus_client::metrics::counter::Counter;

    use super::*;

    async fn text(response: Response) -> String {
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    #[tokio::test]
    async fn serves_the_registry_as_openmetrics_text_and_nothing_else() {
        let mut registry = Registry::default();
        let counter = Counter::<u64>::default();
        registry.register("probes", "Probes seen", counter.clone());
        counter.inc_by(3);

        let ok = respond_to(&Method::GET, "/metrics", &registry);
        assert_eq!(ok.status(), StatusCode::OK);
        assert_eq!(
            ok.headers()[CONTENT_TYPE].to_str().unwrap(),
            CONTENT_TYPE_OPENMETRICS
        );
        let body = text(ok).await;
        assert!(body.contains("probes_total 3\n"), "{body}");
        assert!(body.ends_with("# EOF\n"), "{body}");

        let other = respond_to(&Method::GET, "/v1/sites", &registry);
        assert_eq!(other.status(), StatusCode::NOT_FOUND);
        let post = respond_to(&Method::POST, "/metrics", &registry);
        assert_eq!(post.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(post.headers()["allow"].to_str().unwrap(), "GET, HEAD");
    }
}
