//! One log line per request: method, path, status and duration.

use std::future::Future;
use std::time::Instant;

use futures_util::future::BoxFuture;

use crate::{Request, Response};

/// Wraps `handler` so each request logs `<METHOD> <path> <status> <ms>ms` once its response
/// head is ready (a streamed body may run on after that). Statuses of 500 and above log at
/// `error`, the rest at `info`. The query string is never logged: it may carry secrets.
pub fn with_request_log<H, F>(
    handler: H,
) -> impl Fn(Request) -> BoxFuture<'static, Response> + Clone + Send + Sync + 'static
where
    H: Fn(Request) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response> + Send + 'static,
{
    move |request: Request| {
        let started = Instant::now();
        let method = request.method().clone();
        let path = request.uri().path().to_owned();
        let response = handler(request);
        Box::pin(async move {
            let response = response.await;
            let status = response.status().as_u16();
            let elapsed_ms = started.elapsed().as_millis();
            if response.status().is_server_error() {
                tracing::error!(%method, %path, status, elapsed_ms, "{method} {path} {status} {elapsed_ms}ms");
            } else {
                tracing::info!(%method, %path, status, elapsed_ms, "{method} {path} {status} {elapsed_ms}ms");
            }
            response
        })
    }
}

#[cfg(test)]
mod tests {
    use hyper::StatusCode;

    use super::*;
    use crate::test_support::{collect, get, TestServer};
    use crate::{full_body, Problem};

    #[tokio::test]
    async fn wrapped_handler_answers_unchanged() {
        let server = TestServer::start(with_request_log(|request: Request| async move {
            if request.uri().path() == "/fail" {
                Problem::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "about:blank",
                    "Internal Server Error",
                )
                .into_response()
            } else {
                Response::new(full_body(request.uri().to_string()))
            }
        }));
        let response = get(&server.path, "/ok?token=x").await;
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(collect(response).await, "/ok?token=x");
        let response = get(&server.path, "/fail").await;
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    }
}
